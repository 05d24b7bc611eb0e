//! A scripted Anthropic Messages server: the loopback [`ScriptedServer`] answering with
//! Messages API event streams (`event:` + `data:` framing), plus a prompt-cache model that
//! computes `usage` from the `cache_control` breakpoints of each request the way the API
//! bills them. Include with `#[path = "common/anthropic.rs"] mod anthropic_wire;`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use talaria::testkit::scripted::{RecordedRequest, ScriptedResponse, ScriptedServer};

/// One SSE event as the API frames it.
pub fn event(data: Value) -> String {
    let kind = data["type"].as_str().expect("an event has a type").to_string();
    format!("event: {kind}\ndata: {data}\n\n")
}

pub fn message_start(usage: Value) -> String {
    event(json!({
        "type": "message_start",
        "message": {
            "id": "msg_scripted", "type": "message", "role": "assistant", "content": [],
            "model": "claude-scripted", "stop_reason": null, "stop_sequence": null, "usage": usage,
        }
    }))
}

/// `usage` of a `message_start`: uncached input, cache reads and writes (all 5-minute ones),
/// one output token.
pub fn start_usage(input: u64, cache_read: u64, cache_write: u64) -> Value {
    split_start_usage(input, cache_read, cache_write, 0)
}

/// `usage` of a `message_start` whose writes are `write_1h` 1-hour ones and the rest 5-minute
/// ones: the total in `cache_creation_input_tokens`, the split in `cache_creation`, as the API
/// reports them.
pub fn split_start_usage(input: u64, cache_read: u64, cache_write: u64, write_1h: u64) -> Value {
    json!({"input_tokens": input, "cache_read_input_tokens": cache_read,
           "cache_creation_input_tokens": cache_write,
           "cache_creation": {"ephemeral_5m_input_tokens": cache_write - write_1h,
                              "ephemeral_1h_input_tokens": write_1h},
           "output_tokens": 1})
}

pub fn ping() -> String {
    event(json!({"type": "ping"}))
}

fn split_chars(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

/// A text block: start, `text_delta`s of `piece` characters, stop.
pub fn text_block(index: usize, text: &str, piece: usize) -> Vec<String> {
    let mut out = vec![event(json!({"type": "content_block_start", "index": index,
                                     "content_block": {"type": "text", "text": ""}}))];
    for p in split_chars(text, piece) {
        out.push(event(json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "text_delta", "text": p}})));
    }
    out.push(event(json!({"type": "content_block_stop", "index": index})));
    out
}

/// A thinking block: start, `thinking_delta`s, one `signature_delta`, stop.
pub fn thinking_block(index: usize, thinking: &str, signature: &str, piece: usize) -> Vec<String> {
    let mut out = vec![event(json!({"type": "content_block_start", "index": index,
                                     "content_block": {"type": "thinking", "thinking": ""}}))];
    for p in split_chars(thinking, piece) {
        out.push(event(json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "thinking_delta", "thinking": p}})));
    }
    out.push(event(json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "signature_delta", "signature": signature}})));
    out.push(event(json!({"type": "content_block_stop", "index": index})));
    out
}

/// A tool_use block whose input JSON arrives in `input_json_delta` pieces.
pub fn tool_use_block(index: usize, id: &str, name: &str, input: &Value, piece: usize) -> Vec<String> {
    let mut out = vec![event(json!({"type": "content_block_start", "index": index,
                                     "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}))];
    for p in split_chars(&input.to_string(), piece) {
        out.push(event(json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta", "partial_json": p}})));
    }
    out.push(event(json!({"type": "content_block_stop", "index": index})));
    out
}

pub fn message_delta(stop_reason: &str, output_tokens: u64) -> String {
    event(json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                 "usage": {"output_tokens": output_tokens}}))
}

pub fn message_stop() -> String {
    event(json!({"type": "message_stop"}))
}

pub fn error_event(kind: &str, message: &str) -> String {
    event(json!({"type": "error", "error": {"type": kind, "message": message}}))
}

/// A stream of these events, one write each.
pub fn stream(events: Vec<String>) -> ScriptedResponse {
    ScriptedResponse::sse_raw(events.into_iter().map(String::into_bytes))
}

/// A whole answer: message_start, a ping, the blocks, message_delta, message_stop.
pub fn answer(usage: Value, blocks: Vec<Vec<String>>, stop_reason: &str, output_tokens: u64) -> Vec<String> {
    let mut events = vec![message_start(usage), ping()];
    events.extend(blocks.into_iter().flatten());
    events.push(message_delta(stop_reason, output_tokens));
    events.push(message_stop());
    events
}

/// A text answer (`end_turn`).
pub fn text_answer(text: &str) -> ScriptedResponse {
    stream(answer(start_usage(10, 0, 0), vec![text_block(0, text, 4)], "end_turn", 5))
}

/// An answer calling these tools in order (`tool_use`).
pub fn tool_answer(calls: &[(&str, &str, Value)]) -> ScriptedResponse {
    let blocks = calls.iter().enumerate().map(|(i, (id, name, input))| tool_use_block(i, id, name, input, 7)).collect();
    stream(answer(start_usage(10, 0, 0), blocks, "tool_use", 5))
}

/// An API error response: `{"type":"error","error":{"type":kind,"message":…}}`.
pub fn error_response(status: u16, kind: &str, message: &str) -> ScriptedResponse {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    ScriptedResponse::status(status, body.to_string())
}

/// 529 `overloaded_error` with `retry-after`.
pub fn overloaded(retry_after_s: u64) -> ScriptedResponse {
    error_response(529, "overloaded_error", "Overloaded").header("retry-after", retry_after_s.to_string())
}

/// `POST …/messages` requests, oldest first.
pub fn message_requests(server: &ScriptedServer) -> Vec<RecordedRequest> {
    server.requests().into_iter().filter(|r| r.method == "POST" && r.path.ends_with("/messages")).collect()
}

/// Roughly four characters a token, like the demo model.
pub fn tokens_of(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// The API's prompt cache, modelled: the request's prefix is its tools, system blocks and
/// message blocks in that order; a `cache_control` block ends a cacheable prefix. A prefix
/// seen at a breakpoint before, and not yet expired, is read from the cache (the longest
/// such), the rest up to the last breakpoint is written, and what follows is plain input.
/// An entry lives 5 minutes, or an hour when its breakpoint says `"ttl": "1h"`, from when
/// it was last written or read; `now_s` is the model's clock (tests move it).
#[derive(Default)]
pub struct CacheModel {
    /// Each cached prefix and when it expires (seconds on the model's clock).
    cached: HashMap<String, u64>,
    pub now_s: u64,
}

/// What one request costs in tokens under [`CacheModel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheUsage {
    pub input: u64,
    pub cache_read: u64,
    /// Every token written to the cache, whatever its lifetime.
    pub cache_write: u64,
    /// Of `cache_write`, those written with the 1-hour lifetime (billed at 2× input).
    pub cache_write_1h: u64,
}

impl CacheUsage {
    /// The `message_start` usage of this bill.
    pub fn start_usage(&self) -> Value {
        split_start_usage(self.input, self.cache_read, self.cache_write, self.cache_write_1h)
    }

    pub fn total(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }

    /// Input dollars at per-million prices: input, a 5-minute write at 1.25×, a 1-hour write
    /// at 2× and a read at 0.1× of `input_price`.
    pub fn cost(&self, input_price: f64) -> f64 {
        let write_5m = self.cache_write - self.cache_write_1h;
        (self.input as f64 * input_price
            + self.cache_read as f64 * input_price * 0.1
            + write_5m as f64 * input_price * 1.25
            + self.cache_write_1h as f64 * input_price * 2.0)
            / 1e6
    }
}

impl CacheModel {
    pub fn bill(&mut self, body: &Value) -> CacheUsage {
        let now = self.now_s;
        let mut blocks: Vec<(String, Option<u64>)> = Vec::new();
        // Each block without its mark, tagged with where it is (the role is part of the prefix).
        let mut push = |place: &Value, block: &Value| {
            let mut plain = block.clone();
            let mark = plain.as_object_mut().and_then(|o| o.remove("cache_control"));
            let ttl = mark.map(|m| if m["ttl"] == "1h" { 3600 } else { 300 });
            blocks.push((json!({"in": place, "block": plain}).to_string(), ttl));
        };
        for tool in body["tools"].as_array().into_iter().flatten() {
            push(&json!("tools"), tool);
        }
        for block in body["system"].as_array().into_iter().flatten() {
            push(&json!("system"), block);
        }
        for message in body["messages"].as_array().into_iter().flatten() {
            for block in message["content"].as_array().into_iter().flatten() {
                push(&message["role"], block);
            }
        }
        let mut prefix = String::new();
        let mut prefixes = Vec::new();
        for (text, ttl) in &blocks {
            prefix.push_str(text);
            if let Some(ttl) = ttl {
                prefixes.push((prefix.clone(), *ttl));
            }
        }
        let total = tokens_of(&prefix);
        let live = |p: &String, cached: &HashMap<String, u64>| cached.get(p).is_some_and(|&until| until > now);
        let read = prefixes.iter().rev().find(|(p, _)| live(p, &self.cached)).map(|(p, _)| tokens_of(p)).unwrap_or(0);
        // What is written between the read prefix and each breakpoint, by that breakpoint's lifetime.
        let mut cache_write = 0;
        let mut cache_write_1h = 0;
        let mut done = read;
        for (p, ttl) in &prefixes {
            let upto = tokens_of(p);
            if upto > done {
                cache_write += upto - done;
                if *ttl == 3600 {
                    cache_write_1h += upto - done;
                }
                done = upto;
            }
        }
        for (p, ttl) in prefixes {
            let until = self.cached.get(&p).copied().unwrap_or(0).max(now + ttl);
            self.cached.insert(p, until);
        }
        CacheUsage { input: total - read - cache_write, cache_read: read, cache_write, cache_write_1h }
    }
}

/// A server whose every answer comes from `answer(request number, request)` and reports the
/// usage [`CacheModel`] bills for that request; the usages are kept in order.
pub async fn cached_server<F>(answer_for: F) -> (ScriptedServer, Arc<Mutex<Vec<CacheUsage>>>)
where
    F: Fn(usize, &RecordedRequest) -> (Vec<Vec<String>>, &'static str, u64) + Send + Sync + 'static,
{
    let model = Mutex::new(CacheModel::default());
    let billed = Arc::new(Mutex::new(Vec::new()));
    let log = billed.clone();
    let server = ScriptedServer::with_responder(move |request| {
        let usage = model.lock().unwrap().bill(&request.body);
        let n = {
            let mut log = log.lock().unwrap();
            log.push(usage);
            log.len()
        };
        let (blocks, stop, output) = answer_for(n, request);
        stream(answer(usage.start_usage(), blocks, stop, output))
    })
    .await
    .expect("scripted server");
    (server, billed)
}
