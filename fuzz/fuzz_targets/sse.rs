//! The SSE parser and both stream accumulators (OpenAI chunks, Anthropic events): any bytes,
//! split anywhere, must give deltas or an error — never a panic, never unbounded memory.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| talaria::engine::fuzz::sse(data));
