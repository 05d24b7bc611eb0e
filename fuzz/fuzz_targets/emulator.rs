//! Job output through the terminal emulator and the sanitisers: any bytes, split anywhere.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| talaria::testkit::fuzz::emulator(data));
