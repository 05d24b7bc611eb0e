//! Markdown rendering of model answers, then wrapping at any width.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| talaria::testkit::fuzz::markdown(data));
