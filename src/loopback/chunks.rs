//! OpenAI Chat Completions stream chunks (the JSON of each `data:` event), as the demo
//! model and the test kit's scripted server send them.

use serde_json::{json, Value};

/// The payload that ends a Chat Completions stream.
pub const DONE: &str = "[DONE]";

/// Content delta chunks carrying `text`, `piece_chars` characters each (the first also
/// carries `role: assistant`).
pub fn text_chunks(text: &str, piece_chars: usize) -> Vec<String> {
    split_chars(text, piece_chars)
        .into_iter()
        .enumerate()
        .map(|(i, piece)| {
            let delta = if i == 0 { json!({"role": "assistant", "content": piece}) } else { json!({"content": piece}) };
            chunk(delta, Value::Null)
        })
        .collect()
}

/// One tool call as a server streams it: id and name in the first piece, the arguments
/// split into `piece_chars`-character pieces in the following ones.
pub fn tool_call_chunks(index: usize, id: &str, name: &str, arguments: &str, piece_chars: usize) -> Vec<String> {
    let first = json!({"tool_calls": [{
        "index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}
    }]});
    let mut out = vec![chunk(first, Value::Null)];
    out.extend(
        split_chars(arguments, piece_chars).into_iter().map(|piece| {
            chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), Value::Null)
        }),
    );
    out
}

/// The chunk carrying `finish_reason` (`stop`, `tool_calls`, `length`).
pub fn finish_chunk(reason: &str) -> String {
    chunk(json!({}), json!(reason))
}

/// The final usage chunk, with empty `choices` (as `stream_options.include_usage` sends it).
pub fn usage_chunk(prompt_tokens: u64, completion_tokens: u64) -> String {
    json!({
        "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted-model", "choices": [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}
    })
    .to_string()
}

pub(crate) fn chunk(delta: Value, finish_reason: Value) -> String {
    json!({
        "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    })
    .to_string()
}

/// Split into pieces of at most `n` characters (never inside a character).
pub(crate) fn split_chars(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}
