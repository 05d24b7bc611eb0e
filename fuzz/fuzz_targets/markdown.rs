//! Markdown rendering of model answers, then wrapping at any width.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ratatui::style::Style;
use talaria::tui::markdown::{render, CodeCache};
use talaria::tui::theme::Theme;
use talaria::tui::wrap::wrap_lines;

fuzz_target!(|data: &[u8]| {
    let Some((width, body)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(body) else { return };
    let theme = Theme::builtin("default").expect("the built-in theme");
    let mut cache = CodeCache::default();
    let lines = render(text, &theme, Style::default(), &mut cache);
    let _ = wrap_lines(&lines, u16::from(*width));
});
