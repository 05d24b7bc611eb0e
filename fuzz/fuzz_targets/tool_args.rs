//! Tool arguments as a model sends them: any text decoded as the turn loop does, then read
//! by the lenient helpers and by every tool's argument struct.
#![no_main]

use libfuzzer_sys::fuzz_target;
use talaria::engine::args::{arg_bool, arg_str, arg_u64};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else { return };
    for key in ["command", "path", "offset", "limit", "background", "timeout_s", "id", "action"] {
        let _ = arg_str(&value, key);
        let _ = arg_u64(&value, key);
        let _ = arg_bool(&value, key);
    }
    let _ = talaria::engine::tools::decode_arguments_for_fuzzing(&value);
});
