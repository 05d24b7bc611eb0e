//! The approval parsers (DESIGN §6): the known-safe shell lexer, the command classifier and
//! its normaliser take any text a model sends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use talaria::engine::approval::{classify_command, is_known_safe, normalise_command};

fuzz_target!(|data: &[u8]| {
    let Ok(command) = std::str::from_utf8(data) else { return };
    let safe = is_known_safe(command);
    let _ = classify_command(command);
    let normal = normalise_command(command);
    // Normalising is idempotent, and never turns a command into a known-safe one.
    assert_eq!(normalise_command(&normal), normal, "normalise is not idempotent for {command:?}");
    let _ = safe;
});
