//! Config, theme and key-chord parsing: any file content gives a config or a one-line error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use talaria::config::Config;
use talaria::tui::keymap::KeyChord;
use talaria::tui::theme::Theme;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(e) = Config::from_toml(text, std::path::Path::new("config.toml")) {
        let line = e.to_string();
        assert!(!line.contains('\n'), "a config error is one line: {line:?}");
    }
    let _ = Theme::from_toml(text);
    for line in text.lines().take(64) {
        let _ = KeyChord::parse(line);
    }
});
