//! The approval parsers (DESIGN §6): the known-safe shell lexer, the command classifier and
//! its normaliser take any text a model sends.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| talaria::engine::fuzz::known_safe(data));
