//! Job output through the terminal emulator and the sanitisers: any bytes, split anywhere.
#![no_main]

use libfuzzer_sys::fuzz_target;
use talaria::emulate::{plain, styled, Emulator};
use talaria::text;

fuzz_target!(|data: &[u8]| {
    let (split, body) = match data.split_first() {
        Some((s, rest)) => (usize::from(*s).max(1), rest),
        None => return,
    };
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
    let n = usize::from(split);
    let _ = text::truncate_for_model(&text, n);
    let _ = text::tail_chars(&text, n);
});
