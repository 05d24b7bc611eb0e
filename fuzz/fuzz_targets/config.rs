//! Config, theme and key-chord parsing: any file content gives a config or a one-line error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| talaria::testkit::fuzz::config(data));
