//! The bodies of the fuzz targets (DESIGN §10) outside the engine (its own are in
//! `engine::fuzz`): `fuzz/fuzz_targets/*.rs` hand each one the
//! bytes libFuzzer makes, and `tests/fuzz_pass.rs` runs each on mutated seed inputs in every
//! CI run. Each takes any bytes and must return: a panic or an assertion failure is a bug.

use ratatui::style::Style;

use crate::config::Config;
use crate::emulate::{plain, styled, Emulator};
use crate::text;
use crate::tui::keymap::KeyChord;
use crate::tui::markdown::{render, CodeCache};
use crate::tui::theme::Theme;
use crate::tui::wrap::wrap_lines;

/// A fuzz target's body: any bytes in, a panic only for a bug.
pub type Target = fn(&[u8]);

/// These targets by name, as `cargo fuzz list` names them (the engine's parsers have theirs
/// in `engine::fuzz`).
pub const TARGETS: &[(&str, Target)] = &[("config", config), ("emulator", emulator), ("markdown", markdown)];

/// Config, theme and key-chord parsing: any file content gives a config or a one-line error.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(e) = Config::from_toml(text, std::path::Path::new("config.toml")) {
        let line = e.to_string();
        assert!(!line.contains('\n'), "a config error is one line: {line:?}");
    }
    let _ = Theme::from_toml(text);
    for line in text.lines().take(64) {
        let _ = KeyChord::parse(line);
    }
}

/// Job output through the terminal emulator and the sanitisers: any bytes, split anywhere.
pub fn emulator(data: &[u8]) {
    let Some((split, body)) = data.split_first() else { return };
    let split = usize::from(*split).max(1);
    let mut emulator = Emulator::new();
    for piece in body.chunks(split) {
        emulator.feed(piece);
    }
    let _ = emulator.finish();
    let text = String::from_utf8_lossy(body);
    let _ = plain(&text);
    let _ = styled(&text);
    let _ = text::strip_ansi(&text);
    let _ = text::sanitize_for_display(&text);
    let _ = text::sgr_only(&text);
    let shown = text::for_terminal(&text);
    // What reaches the terminal carries no escape and no C1 control.
    assert!(!shown.contains('\u{1b}') && !shown.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)), "{shown:?}");
    let _ = text::neutralise_controls(&text);
    let _ = text::truncate_for_model(&text, split);
    let _ = text::tail_chars(&text, split);
}

/// Markdown rendering of model answers, then wrapping at any width.
pub fn markdown(data: &[u8]) {
    let Some((width, body)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(body) else { return };
    let Ok(theme) = Theme::builtin("default") else { panic!("the built-in theme must load") };
    let mut cache = CodeCache::default();
    let lines = render(text, &theme, Style::default(), &mut cache);
    let _ = wrap_lines(&lines, u16::from(*width));
}
