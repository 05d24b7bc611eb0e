//! The bodies of the fuzz targets of the engine's parsers (DESIGN §10): `fuzz/fuzz_targets`
//! hand each one the bytes libFuzzer makes and `tests/fuzz_pass.rs` runs each on mutated seed
//! inputs, with `testkit::fuzz`'s. Each takes any bytes and must return: a panic or an
//! assertion failure is a bug.

use crate::engine::approval::{classify_command, is_known_safe, normalise_command};
use crate::engine::args::{arg_bool, arg_str, arg_u64};
use crate::engine::llm::anthropic::MessageAccumulator;
use crate::engine::llm::sse::{ChunkAccumulator, SseParser};

/// A fuzz target's body: any bytes in, a panic only for a bug.
pub type Target = fn(&[u8]);

/// These targets by name, as `cargo fuzz list` names them.
pub const TARGETS: &[(&str, Target)] = &[("known_safe", known_safe), ("sse", sse), ("tool_args", tool_args)];

/// The SSE parser and both stream accumulators (OpenAI chunks, Anthropic events): any bytes,
/// split anywhere, must give deltas or an error — never a panic, never unbounded memory.
pub fn sse(data: &[u8]) {
    // The first byte picks where the stream is split, so chunk borders are fuzzed too.
    let Some((split, body)) = data.split_first() else { return };
    let split = usize::from(*split).max(1);
    let mut parser = SseParser::new();
    let mut openai = ChunkAccumulator::new();
    let mut anthropic = MessageAccumulator::new();
    let (mut openai_ok, mut anthropic_ok) = (true, true);
    let mut events = Vec::new();
    for piece in body.chunks(split) {
        events.extend(parser.push(piece));
    }
    events.extend(parser.finish());
    for event in &events {
        if openai_ok {
            openai_ok = openai.push(event).is_ok();
        }
        if anthropic_ok {
            anthropic_ok = anthropic.push(event).is_ok();
        }
    }
    let _ = openai.is_done();
    let _ = openai.finish_complete();
    let _ = anthropic.is_complete();
    let _ = anthropic.finish_complete();
}

/// The approval parsers (DESIGN §6): the known-safe shell lexer, the command classifier and
/// its normaliser take any text a model sends.
pub fn known_safe(data: &[u8]) {
    let Ok(command) = std::str::from_utf8(data) else { return };
    let _ = is_known_safe(command);
    let _ = classify_command(command);
    let normal = normalise_command(command);
    assert_eq!(normalise_command(&normal), normal, "normalise is not idempotent for {command:?}");
}

/// Tool arguments as a model sends them: any text decoded as the turn loop does, then read
/// by the lenient helpers and by every tool's argument struct.
pub fn tool_args(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else { return };
    for key in ["command", "path", "offset", "limit", "background", "timeout_s", "id", "action"] {
        let _ = arg_str(&value, key);
        let _ = arg_u64(&value, key);
        let _ = arg_bool(&value, key);
    }
    let _ = crate::engine::tools::decode_arguments_for_fuzzing(&value);
}
