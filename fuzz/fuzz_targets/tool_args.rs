//! Tool arguments as a model sends them: any text decoded as the turn loop does, then read
//! by the lenient helpers and by every tool's argument struct.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| talaria::engine::fuzz::tool_args(data));
