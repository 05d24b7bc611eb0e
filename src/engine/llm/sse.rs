//! Server-sent events and Chat Completions chunks.
//!
//! [`SseParser`] turns the raw bytes of a response body, split across reads at any byte,
//! into `data:` payloads. [`ChunkAccumulator`] reads each payload as a Chat Completions
//! chunk, hands out [`StreamDelta`]s for live display and builds the final [`Completion`].

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Completion, LlmError, StreamDelta, ToolCall, Usage};

/// Incremental SSE parser. Only whole lines are decoded, so a UTF-8 character split across
/// two reads is never mangled.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line not finished yet.
    pending: Vec<u8>,
    /// `data:` lines of the event being read.
    data: Vec<String>,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feed bytes as they arrive; returns the data payloads of every event completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        let mut rest = bytes;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            self.pending.extend_from_slice(&rest[..pos]);
            rest = &rest[pos + 1..];
            let mut line = std::mem::take(&mut self.pending);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line(&line, &mut events);
        }
        self.pending.extend_from_slice(rest);
        events
    }

    /// The body ended: an event not closed by a blank line still counts.
    pub fn finish(&mut self) -> Vec<String> {
        let mut events = Vec::new();
        let mut line = std::mem::take(&mut self.pending);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if !line.is_empty() {
            self.line(&line, &mut events);
        }
        self.line(b"", &mut events);
        events
    }

    /// Bytes held while waiting for the end of a line (the caller caps it).
    pub(crate) fn buffered_len(&self) -> usize {
        self.pending.len() + self.data.iter().map(String::len).sum::<usize>()
    }

    fn line(&mut self, line: &[u8], events: &mut Vec<String>) {
        if line.is_empty() {
            if !self.data.is_empty() {
                events.push(std::mem::take(&mut self.data).join("\n"));
            }
            return;
        }
        if line[0] == b':' {
            return; // a comment, e.g. a keep-alive
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            self.data.push(String::from_utf8_lossy(value).into_owned());
        }
    }
}

/// A tool call being assembled from its pieces.
#[derive(Debug, Default)]
struct PartialToolCall {
    id: String,
    name: String,
    arguments: String,
    announced: bool,
}

/// The most text, reasoning and tool-call arguments one answer may stream in total: a server
/// that never stops sending is cut off here instead of filling memory.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Builds a [`Completion`] from Chat Completions chunks.
#[derive(Debug, Default)]
pub struct ChunkAccumulator {
    content: String,
    reasoning: String,
    tool_calls: BTreeMap<usize, PartialToolCall>,
    last_tool_index: Option<usize>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
}

impl ChunkAccumulator {
    pub fn new() -> ChunkAccumulator {
        ChunkAccumulator::default()
    }

    /// Consume one SSE data payload. `[DONE]` marks the end; an `error` object is
    /// `LlmError::Server`; anything that is not JSON is `LlmError::Protocol`.
    pub fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("a stream chunk is not JSON ({e}): {}", clip(data, 200))))?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(LlmError::Server(error_message(error)));
        }
        if let Some(usage) = chunk.get("usage").and_then(parse_usage) {
            self.usage = Some(usage);
        }
        let mut deltas = Vec::new();
        let choices = chunk.get("choices").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        // Only the first choice matters: Talaria never asks for n > 1.
        if let Some(choice) = choices.iter().find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0) {
            if let Some(delta) = choice.get("delta") {
                self.delta(delta, &mut deltas);
                let arguments: usize = self.tool_calls.values().map(|c| c.arguments.len()).sum();
                if self.content.len() + self.reasoning.len() + arguments > MAX_ANSWER_BYTES {
                    return Err(LlmError::Protocol(format!(
                        "the answer passed {} MiB without ending; stopped",
                        MAX_ANSWER_BYTES >> 20
                    )));
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_string());
            }
        }
        Ok(deltas)
    }

    fn delta(&mut self, delta: &Value, out: &mut Vec<StreamDelta>) {
        if let Some(text) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            self.content.push_str(text);
            out.push(StreamDelta::Content(text.to_string()));
        }
        let reasoning = ["reasoning_content", "reasoning"]
            .iter()
            .find_map(|key| delta.get(*key).and_then(Value::as_str).filter(|t| !t.is_empty()));
        if let Some(text) = reasoning {
            self.reasoning.push_str(text);
            out.push(StreamDelta::Reasoning(text.to_string()));
        }
        let calls = delta.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        for call in calls {
            let id = call.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
            let index = self.tool_index(call, id);
            self.last_tool_index = Some(index);
            let entry = self.tool_calls.entry(index).or_default();
            if let Some(id) = id {
                entry.id = id.to_string();
            }
            let function = call.get("function");
            if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                // Some servers repeat the name in later pieces; the first one wins.
                if entry.name.is_empty() {
                    entry.name = name.to_string();
                }
            }
            if let Some(arguments) = function.and_then(|f| f.get("arguments")).and_then(Value::as_str) {
                entry.arguments.push_str(arguments);
            }
            if !entry.announced && !entry.name.is_empty() {
                entry.announced = true;
                out.push(StreamDelta::ToolCallStarted { index, name: entry.name.clone() });
            }
        }
    }

    /// The `index` field, or for servers that omit it: a new id starts a new call, a piece
    /// without an id continues the last one.
    fn tool_index(&self, call: &Value, id: Option<&str>) -> usize {
        if let Some(index) = call.get("index").and_then(Value::as_u64) {
            return index as usize;
        }
        let next = self.tool_calls.keys().next_back().map_or(0, |k| k + 1);
        match (id, self.last_tool_index) {
            (Some(id), _) => self.tool_calls.iter().find(|(_, c)| c.id == id).map_or(next, |(k, _)| *k),
            (None, Some(last)) => last,
            (None, None) => 0,
        }
    }

    /// `[DONE]` has been seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The answer is complete: `[DONE]` or a `finish_reason` arrived.
    pub(crate) fn is_complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    /// Anything of the answer has arrived (text, reasoning or a tool call).
    pub(crate) fn has_output(&self) -> bool {
        !self.content.is_empty() || !self.reasoning.is_empty() || !self.tool_calls.is_empty()
    }

    /// The whole answer, once the stream ended: a stream that ended without any of an
    /// answer (no text, no tool call, no finish reason; e.g. only `[DONE]`) is an error,
    /// not an empty reply.
    pub fn finish_complete(self) -> Result<Completion, LlmError> {
        if !self.has_output() && self.finish_reason.is_none() {
            return Err(LlmError::Protocol("the stream ended without an answer".into()));
        }
        Ok(self.finish())
    }

    /// The answer so far. A tool call without a name is kept (running it gives the model an
    /// error result); empty arguments become `{}` so the history stays valid JSON; a missing
    /// or repeated id is made unique, so every result goes back to exactly one call.
    pub(crate) fn finish(self) -> Completion {
        let mut used = std::collections::HashSet::new();
        let tool_calls = self
            .tool_calls
            .into_iter()
            .filter(|(_, c)| !c.name.is_empty() || !c.id.is_empty() || !c.arguments.is_empty())
            .map(|(index, c)| {
                let base = if c.id.is_empty() { format!("call_{index}") } else { c.id };
                let mut id = base.clone();
                let mut n = 2;
                while !used.insert(id.clone()) {
                    id = format!("{base}_{n}");
                    n += 1;
                }
                let arguments = if c.arguments.trim().is_empty() { "{}".to_string() } else { c.arguments };
                ToolCall::new(id, c.name, arguments)
            })
            .collect();
        Completion {
            content: self.content,
            reasoning: self.reasoning,
            tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
            thinking: Vec::new(),
        }
    }
}

fn parse_usage(value: &Value) -> Option<Usage> {
    let prompt = value.get("prompt_tokens").and_then(Value::as_u64);
    let completion = value.get("completion_tokens").and_then(Value::as_u64);
    if prompt.is_none() && completion.is_none() {
        return None;
    }
    // OpenAI reports cached prompt tokens here (they are part of `prompt_tokens`).
    let cached = value.pointer("/prompt_tokens_details/cached_tokens").and_then(Value::as_u64).unwrap_or(0);
    Some(Usage { cache_read_tokens: cached, ..Usage::tokens(prompt.unwrap_or(0), completion.unwrap_or(0)) })
}

/// The human part of an OpenAI-style error: `{"message": ...}`, a bare string, or the JSON.
pub(crate) fn error_message(error: &Value) -> String {
    match error {
        Value::String(s) => s.clone(),
        Value::Object(map) => match map.get("message").and_then(Value::as_str) {
            Some(message) => message.to_string(),
            None => error.to_string(),
        },
        other => other.to_string(),
    }
}

/// At most `max` characters of `text`, marked when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn parse_all(pieces: &[&[u8]]) -> Vec<String> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for piece in pieces {
            out.extend(parser.push(piece));
        }
        out.extend(parser.finish());
        out
    }

    #[test]
    fn events_split_at_every_byte() {
        let body = "data: {\"a\":\"héllo ✓\"}\n\ndata: [DONE]\n\n".as_bytes();
        let whole = parse_all(&[body]);
        assert_eq!(whole, vec!["{\"a\":\"héllo ✓\"}".to_string(), "[DONE]".to_string()]);
        for cut in 0..body.len() {
            assert_eq!(parse_all(&[&body[..cut], &body[cut..]]), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(parse_all(&bytes), whole);
    }

    #[test]
    fn crlf_and_lf_both_end_lines() {
        let out = parse_all(&[b"data: one\r\n\r\ndata: two\n\ndata: three\r\n", b"\r\n"]);
        assert_eq!(out, vec!["one", "two", "three"]);
    }

    #[test]
    fn comments_and_other_fields_are_ignored() {
        let out = parse_all(&[b": keep-alive\n\n:ping\n\nevent: message\nid: 7\nretry: 10\ndata: x\n\n"]);
        assert_eq!(out, vec!["x"]);
    }

    #[test]
    fn multi_line_data_is_joined_with_newlines() {
        let out = parse_all(&[b"data: first\ndata:second\ndata\n\n"]);
        assert_eq!(out, vec!["first\nsecond\n"]);
    }

    #[test]
    fn an_event_without_a_trailing_blank_line_counts_at_the_end() {
        let mut parser = SseParser::new();
        assert_eq!(parser.push(b"data: {\"error\":1}"), Vec::<String>::new());
        assert_eq!(parser.finish(), vec!["{\"error\":1}"]);
    }

    #[test]
    fn pending_bytes_are_counted() {
        let mut parser = SseParser::new();
        parser.push(b"data: abc");
        assert_eq!(parser.buffered_len(), 9);
    }

    fn run(chunks: &[&str]) -> (Vec<StreamDelta>, Result<Completion, LlmError>) {
        let mut acc = ChunkAccumulator::new();
        let mut deltas = Vec::new();
        for chunk in chunks {
            match acc.push(chunk) {
                Ok(d) => deltas.extend(d),
                Err(e) => return (deltas, Err(e)),
            }
        }
        (deltas, Ok(acc.finish()))
    }

    #[test]
    fn content_finish_reason_and_usage() {
        let (deltas, done) = run(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#,
            "[DONE]",
        ]);
        assert_eq!(deltas, vec![StreamDelta::Content("Hel".into()), StreamDelta::Content("lo".into())]);
        assert_eq!(
            done.unwrap(),
            Completion {
                content: "Hello".into(),
                finish_reason: Some("stop".into()),
                usage: Some(Usage::tokens(12, 3)),
                ..Completion::default()
            }
        );
    }

    #[test]
    fn done_marks_the_end() {
        let mut acc = ChunkAccumulator::new();
        assert!(!acc.is_complete());
        acc.push("[DONE]").unwrap();
        assert!(acc.is_done() && acc.is_complete());
    }

    #[test]
    fn reasoning_content_and_reasoning_both_count() {
        let (deltas, done) = run(&[
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think "}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":"more"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}"#,
        ]);
        assert_eq!(
            deltas,
            vec![
                StreamDelta::Reasoning("think ".into()),
                StreamDelta::Reasoning("more".into()),
                StreamDelta::Content("ok".into())
            ]
        );
        let done = done.unwrap();
        assert_eq!((done.reasoning.as_str(), done.content.as_str()), ("think more", "ok"));
    }

    #[test]
    fn tool_call_arguments_split_across_chunks() {
        let (deltas, done) = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"terminal","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"comm"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"and\":\"ls\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        ]);
        assert_eq!(deltas, vec![StreamDelta::ToolCallStarted { index: 0, name: "terminal".into() }]);
        let done = done.unwrap();
        assert_eq!(done.tool_calls, vec![ToolCall::new("call_1", "terminal", r#"{"command":"ls"}"#)]);
        assert_eq!(done.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn two_tool_calls_in_one_response_keep_their_order() {
        let (deltas, done) = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"Let me look."}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read_file","arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"search_files","arguments":"{\"pattern\":\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.rs\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        ]);
        assert_eq!(
            deltas,
            vec![
                StreamDelta::Content("Let me look.".into()),
                StreamDelta::ToolCallStarted { index: 0, name: "read_file".into() },
                StreamDelta::ToolCallStarted { index: 1, name: "search_files".into() },
            ]
        );
        assert_eq!(
            done.unwrap().tool_calls,
            vec![
                ToolCall::new("a", "read_file", r#"{"path":"a.rs"}"#),
                ToolCall::new("b", "search_files", r#"{"pattern":"x"}"#)
            ]
        );
    }

    #[test]
    fn tool_calls_without_index_are_keyed_by_id() {
        let (_, done) = run(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"terminal","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"process","arguments":"{\"action\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"\"list\"}"}}]}}]}"#,
        ]);
        assert_eq!(
            done.unwrap().tool_calls,
            vec![ToolCall::new("a", "terminal", "{}"), ToolCall::new("b", "process", r#"{"action":"list"}"#)]
        );
    }

    #[test]
    fn missing_id_and_empty_arguments_are_filled_in() {
        let (_, done) = run(&[r#"{"choices":[{"delta":{"tool_calls":[{"index":2,"function":{"name":"process"}}]}}]}"#]);
        assert_eq!(done.unwrap().tool_calls, vec![ToolCall::new("call_2", "process", "{}")]);
    }

    #[test]
    fn an_error_object_mid_stream_is_a_server_error() {
        let (deltas, done) = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"part"}}]}"#,
            r#"{"error":{"message":"upstream overloaded","code":502}}"#,
        ]);
        assert_eq!(deltas, vec![StreamDelta::Content("part".into())]);
        assert_eq!(done, Err(LlmError::Server("upstream overloaded".into())));
        let (_, done) = run(&[r#"{"error":"plain text"}"#]);
        assert_eq!(done, Err(LlmError::Server("plain text".into())));
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let (_, done) = run(&["not json"]);
        assert!(matches!(done, Err(LlmError::Protocol(ref m)) if m.contains("not json")), "{done:?}");
    }

    #[test]
    fn clip_marks_cut_text() {
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hi", 2), "hi");
    }

    #[test]
    fn a_stream_of_only_done_is_an_error_not_an_empty_answer() {
        let mut acc = ChunkAccumulator::new();
        acc.push("[DONE]").unwrap();
        assert!(matches!(acc.finish_complete(), Err(LlmError::Protocol(m)) if m.contains("without an answer")));
        // An empty answer the server says is finished is still an answer.
        let mut acc = ChunkAccumulator::new();
        acc.push(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#).unwrap();
        acc.push("[DONE]").unwrap();
        assert_eq!(acc.finish_complete().unwrap().finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn a_never_ending_answer_is_cut_off_at_the_cap() {
        let piece = "x".repeat(1 << 20);
        let chunk = serde_json::json!({"choices":[{"index":0,"delta":{"content": piece}}]}).to_string();
        let mut acc = ChunkAccumulator::new();
        let mut pushed = 0;
        let err = loop {
            match acc.push(&chunk) {
                Ok(_) => pushed += 1,
                Err(e) => break e,
            }
            assert!(pushed <= MAX_ANSWER_BYTES >> 20, "no cap after {pushed} MiB");
        };
        assert!(matches!(&err, LlmError::Protocol(m) if m.contains("MiB")), "{err:?}");
        assert_eq!(pushed, MAX_ANSWER_BYTES >> 20);
    }

    #[test]
    fn a_nameless_tool_call_is_kept_and_repeated_ids_are_made_unique() {
        let (_, done) = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"dup","function":{"name":"","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"dup","function":{"name":"read_file","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"dup","function":{"name":"read_file","arguments":"{}"}}]}}]}"#,
            "[DONE]",
        ]);
        let calls = done.unwrap().tool_calls;
        let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["dup", "dup_2", "dup_3"]);
        assert_eq!(calls[0].function.name, "", "the nameless call stays, to get an error result");
    }

    #[test]
    fn the_scripted_servers_chunk_helpers_reassemble() {
        use crate::testkit::scripted::{finish_chunk, text_chunks, tool_call_chunks, usage_chunk};
        let mut acc = ChunkAccumulator::new();
        let mut chunks = text_chunks("héllo wörld", 3);
        chunks.extend(tool_call_chunks(0, "c1", "terminal", r#"{"command":"ls"}"#, 4));
        chunks.push(finish_chunk("tool_calls"));
        chunks.push(usage_chunk(1, 2));
        for c in &chunks {
            acc.push(c).unwrap();
        }
        let done = acc.finish();
        assert_eq!(done.content, "héllo wörld");
        assert_eq!(done.tool_calls, vec![ToolCall::new("c1", "terminal", r#"{"command":"ls"}"#)]);
        assert_eq!(done.usage, Some(Usage::tokens(1, 2)));
    }
}
