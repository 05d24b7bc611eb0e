//! The SSE parser and both stream accumulators (OpenAI chunks, Anthropic events): any bytes,
//! split anywhere, must give deltas or an error — never a panic, never unbounded memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use talaria::engine::llm::anthropic::MessageAccumulator;
use talaria::engine::llm::sse::{ChunkAccumulator, SseParser};

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the stream is split, so chunk borders are fuzzed too.
    let (split, body) = match data.split_first() {
        Some((s, rest)) => (usize::from(*s).max(1), rest),
        None => return,
    };
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
});
