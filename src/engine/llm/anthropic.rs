//! The native Anthropic Messages client (DESIGN §8a): `POST {base}/messages` with
//! `stream: true`, `x-api-key` and `anthropic-version` headers.
//!
//! The engine's history is OpenAI-shaped ([`ChatMessage`]); [`request_body`] turns it into
//! Messages API content blocks: the leading system messages become `system`, assistant tool
//! calls become `tool_use` blocks (after the answer's `thinking` blocks, sent back verbatim
//! with their signatures), and the tool results of one answer become `tool_result` blocks of
//! one user message. Prompt caching: `cache_control` breakpoints on the last tool, the
//! system prompt and the two most recent user messages (at most [`MAX_BREAKPOINTS`]), so
//! each request reads the previous one's prefix from the cache and writes only what is new.
//! A request whose successor is expected later than 5 minutes (the engine says so in
//! [`ChatRequest::cache_lifetime`]) marks them with the 1-hour lifetime (`"ttl": "1h"`).
//!
//! Retries follow the OpenAI client: 429, 5xx and 529 / `overloaded_error` (also as an
//! `error` event before any output) are retried honouring `retry-after`, only while nothing
//! has reached `on_delta`; a mid-stream `error` after output ends the request with an error
//! and the caller keeps the partial answer it already showed.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use tokio_util::bytes::Bytes;

use super::attempt::{Exchange, StreamDecoder};
use super::client::{describe, http_client, http_error, send_error, whole_seconds, ClientSettings};
use super::sse::{clip, MAX_ANSWER_BYTES};
use super::{
    CacheLifetime, ChatMessage, ChatRequest, Completion, LlmError, Provider, Role, StreamDelta, ToolCall, Usage,
};

/// The API version every request names.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";
pub(crate) const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";
/// Used with `ANTHROPIC_API_KEY` when `[model] name` is empty.
pub(crate) const ANTHROPIC_DEFAULT_MODEL: &str = "claude-sonnet-4-5";
/// The `anthropic-beta` flag the 1-hour cache lifetime was introduced under; sent with
/// every request that asks for it (harmless where the lifetime needs no flag).
pub(crate) const EXTENDED_CACHE_TTL_BETA: &str = "extended-cache-ttl-2025-04-11";
/// The API accepts at most this many `cache_control` breakpoints per request.
pub(crate) const MAX_BREAKPOINTS: usize = 4;

/// What a request asks for beyond the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessagesOptions {
    /// `max_tokens` (required by the API).
    pub max_tokens: u64,
    /// Extended thinking budget in tokens; 0 leaves thinking off.
    pub thinking_budget: u64,
}

impl Default for MessagesOptions {
    fn default() -> MessagesOptions {
        MessagesOptions { max_tokens: 8192, thinking_budget: 0 }
    }
}

/// A [`Provider`] speaking the Anthropic Messages API.
pub struct AnthropicClient {
    http: reqwest::Client,
    settings: ClientSettings,
    options: MessagesOptions,
}

impl std::fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("settings", &self.settings)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl AnthropicClient {
    /// `settings.base_url` ends in `/v1`; `settings.api_key` is sent as `x-api-key`.
    pub fn new(settings: ClientSettings, options: MessagesOptions) -> anyhow::Result<AnthropicClient> {
        let http = http_client(settings.connect_timeout)?;
        Ok(AnthropicClient { http, settings, options })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.settings.base_url.trim_end_matches('/'))
    }

    fn headers(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = request.header("anthropic-version", ANTHROPIC_VERSION);
        match &self.settings.api_key {
            Some(key) => request.header("x-api-key", key),
            None => request,
        }
    }

    /// The server's words with the key taken out, should it ever echo it.
    fn redact(&self, error: LlmError) -> LlmError {
        let Some(key) = self.settings.api_key.as_deref().filter(|k| !k.is_empty()) else {
            return error;
        };
        let scrub = |text: String| text.replace(key, "[redacted]");
        match error {
            LlmError::Http { status, body, retry_after_s } => {
                LlmError::Http { status, body: scrub(body), retry_after_s }
            }
            LlmError::Server(message) => LlmError::Server(scrub(message)),
            LlmError::Protocol(message) => LlmError::Protocol(scrub(message)),
            LlmError::Stream(message) => LlmError::Stream(scrub(message)),
            LlmError::Connect { url, message } => LlmError::Connect { url, message: scrub(message) },
            LlmError::Refused { server } => LlmError::Refused { server },
            LlmError::IdleTimeout(s) => LlmError::IdleTimeout(s),
        }
    }
}

#[async_trait]
impl Provider for AnthropicClient {
    async fn stream_chat(
        &self,
        request: &ChatRequest<'_>,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<Completion, LlmError> {
        let url = self.url("messages");
        // Serialised once and the JSON tree dropped: only the bytes live while the answer
        // streams, shared (not copied) by a retry.
        let body = Bytes::from(serde_json::to_vec(&request_body(request, self.options)).unwrap_or_default());
        let exchange = Exchange {
            settings: &self.settings,
            what: "Anthropic",
            url: &url,
            request: |body| cache_headers(self.headers(self.http.post(&url).body(body)), request.cache_lifetime),
            decoder: MessageAccumulator::new,
            redact: |error| self.redact(error),
            sent: &request.sent,
        };
        exchange.run(&body, on_delta).await
    }

    /// `GET {base}/models` → the model ids, following `has_more` / `last_id` pages.
    async fn list_models(&self) -> Result<Vec<String>, LlmError> {
        let timeout = self.settings.idle_timeout;
        let mut ids = Vec::new();
        let mut after: Option<String> = None;
        let exchange = async {
            // A bound on pages, in case a server keeps saying there is more.
            for _ in 0..20 {
                let url = match &after {
                    Some(id) => self.url(&format!("models?after_id={id}")),
                    None => self.url("models"),
                };
                let response = self.headers(self.http.get(&url)).send().await.map_err(|e| send_error(&url, &e))?;
                if !response.status().is_success() {
                    return Err(http_error(response, timeout).await);
                }
                let bytes = response.bytes().await.map_err(|e| LlmError::Stream(describe(&e)))?;
                let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
                    let text = String::from_utf8_lossy(&bytes);
                    LlmError::Protocol(format!("{url} did not answer with JSON ({e}): {}", clip(&text, 200)))
                })?;
                let data = value.get("data").and_then(Value::as_array).ok_or_else(|| {
                    let text = clip(&value.to_string(), 200);
                    LlmError::Protocol(format!("{url} answered without a \"data\" list: {text}"))
                })?;
                ids.extend(data.iter().filter_map(|m| m.get("id").and_then(Value::as_str)).map(str::to_string));
                let more = value.get("has_more").and_then(Value::as_bool).unwrap_or(false);
                match value.get("last_id").and_then(Value::as_str) {
                    Some(last) if more => after = Some(last.to_string()),
                    _ => break,
                }
            }
            Ok(())
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(())) => Ok(ids),
            Ok(Err(e)) => Err(self.redact(e)),
            Err(_) => Err(LlmError::IdleTimeout(whole_seconds(timeout))),
        }
    }

    fn kind(&self) -> &'static str {
        "anthropic"
    }
}

/// A breakpoint's `cache_control`: the API's default lifetime (5 minutes) says no `ttl`.
fn ephemeral(lifetime: CacheLifetime) -> Value {
    match lifetime {
        CacheLifetime::FiveMinutes => json!({"type": "ephemeral"}),
        CacheLifetime::OneHour => json!({"type": "ephemeral", "ttl": "1h"}),
    }
}

/// The headers a request's cache lifetime needs: the 1-hour one names its beta flag.
pub(crate) fn cache_headers(request: reqwest::RequestBuilder, lifetime: CacheLifetime) -> reqwest::RequestBuilder {
    match lifetime {
        CacheLifetime::FiveMinutes => request,
        CacheLifetime::OneHour => request.header("anthropic-beta", EXTENDED_CACHE_TTL_BETA),
    }
}

/// The Messages API body for `request`.
pub(crate) fn request_body(request: &ChatRequest<'_>, options: MessagesOptions) -> Value {
    let (system, messages) = convert_messages(&request.messages);
    let mut tools: Vec<Value> = request.tools.iter().filter_map(convert_tool).collect();
    let mut system_blocks: Vec<Value> =
        system.into_iter().filter(|t| !t.is_empty()).map(|t| json!({"type": "text", "text": t})).collect();
    let mut messages = messages;

    // Breakpoints, in prefix order: tools, system, then the latest user messages. All of
    // one request share a lifetime (the API wants 1-hour ones before any 5-minute one).
    let ephemeral = || ephemeral(request.cache_lifetime);
    let mut left = MAX_BREAKPOINTS;
    if let Some(last) = tools.last_mut() {
        last["cache_control"] = ephemeral();
        left -= 1;
    }
    if let Some(last) = system_blocks.last_mut() {
        last["cache_control"] = ephemeral();
        left -= 1;
    }
    let mut marked = 0;
    for message in messages.iter_mut().rev() {
        if marked == left.min(2) {
            break;
        }
        if message["role"] != "user" {
            continue;
        }
        if let Some(block) = message["content"].as_array_mut().and_then(|c| c.last_mut()) {
            block["cache_control"] = ephemeral();
            marked += 1;
        }
    }

    let mut body = json!({
        "model": request.model,
        "max_tokens": options.max_tokens,
        "stream": true,
        "messages": messages,
    });
    if !system_blocks.is_empty() {
        body["system"] = Value::Array(system_blocks);
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if options.thinking_budget > 0 && thinking_possible(&request.messages) {
        // The budget must stay below max_tokens.
        body["max_tokens"] = json!(options.max_tokens.max(options.thinking_budget + 1024));
        body["thinking"] = json!({"type": "enabled", "budget_tokens": options.thinking_budget});
    } else if let Some(t) = request.temperature {
        body["temperature"] = t.to_string().parse::<f64>().map(Value::from).unwrap_or(Value::Null);
    }
    body
}

/// Thinking may be on for this request: the API wants an assistant answer that called tools
/// to start with its thinking blocks while thinking is on, and an answer restored from the
/// session database (or written by another model) has none. Such a request goes without
/// thinking rather than being refused.
fn thinking_possible<M: Borrow<ChatMessage>>(history: &[M]) -> bool {
    match history.iter().map(Borrow::borrow).rev().find(|m: &&ChatMessage| m.role == Role::Assistant) {
        Some(last) => last.tool_calls.is_empty() || !last.thinking.is_empty(),
        None => true,
    }
}

/// An OpenAI function tool `{"type":"function","function":{name,description,parameters}}` as
/// an Anthropic tool `{name, description, input_schema}`.
fn convert_tool(tool: &Value) -> Option<Value> {
    let function = tool.get("function").unwrap_or(tool);
    let name = function.get("name")?.as_str()?;
    let mut out = json!({
        "name": name,
        "input_schema": function.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"})),
    });
    if let Some(description) = function.get("description").and_then(Value::as_str) {
        out["description"] = json!(description);
    }
    Some(out)
}

/// The leading system texts, and the rest as alternating user / assistant messages of
/// content blocks (consecutive messages of one role merged, tool results first).
fn convert_messages<M: Borrow<ChatMessage>>(history: &[M]) -> (Vec<String>, Vec<Value>) {
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut leading = true;
    for message in history.iter().map(Borrow::borrow) {
        let (role, blocks) = match message.role {
            Role::System if leading => {
                system.push(message.text().to_string());
                continue;
            }
            Role::System | Role::User => ("user", text_block(message.text()).into_iter().collect()),
            Role::Tool => {
                let id = message.tool_call_id.clone().unwrap_or_default();
                ("user", vec![json!({"type": "tool_result", "tool_use_id": id, "content": message.text()})])
            }
            Role::Assistant => ("assistant", assistant_blocks(message)),
        };
        leading = false;
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    // The conversation must open with the user.
    if turns.first().is_some_and(|(role, _)| *role == "assistant") {
        turns.insert(0, ("user", vec![json!({"type": "text", "text": "(continuing the conversation)"})]));
    }
    let messages = turns
        .into_iter()
        .map(|(role, mut content)| {
            if role == "user" {
                // Tool results must come first in their user message.
                content.sort_by_key(|b| b["type"] != "tool_result");
            }
            json!({"role": role, "content": content})
        })
        .collect();
    (system, messages)
}

fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

fn assistant_blocks(message: &ChatMessage) -> Vec<Value> {
    let mut blocks = message.thinking.clone();
    blocks.extend(text_block(message.text()));
    for call in &message.tool_calls {
        let input = match serde_json::from_str::<Value>(&call.function.arguments) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({}),
        };
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input}));
    }
    blocks
}

#[derive(Debug, Default)]
enum BlockKind {
    Text,
    Thinking,
    RedactedThinking,
    ToolUse,
    #[default]
    Other,
}

#[derive(Debug, Default)]
struct Block {
    kind: BlockKind,
    text: String,
    signature: String,
    data: String,
    id: String,
    name: String,
    json: String,
}

impl StreamDecoder for MessageAccumulator {
    fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, LlmError> {
        MessageAccumulator::push(self, data)
    }
    /// `message_stop` came.
    fn finished(&self) -> bool {
        self.is_complete()
    }
    fn is_complete(&self) -> bool {
        MessageAccumulator::is_complete(self)
    }
    fn finish(self) -> Result<Completion, LlmError> {
        self.finish_complete()
    }
    fn truncated(&self) -> LlmError {
        LlmError::Stream("the server closed the stream before message_stop".into())
    }
}

/// Builds a [`Completion`] from Messages stream events, one SSE `data:` payload at a time.
#[derive(Debug, Default)]
pub struct MessageAccumulator {
    blocks: BTreeMap<usize, Block>,
    tool_calls: usize,
    usage: Option<Usage>,
    stop_reason: Option<String>,
    stopped: bool,
    /// Bytes of text, thinking and tool input streamed so far (capped at [`MAX_ANSWER_BYTES`]).
    streamed: usize,
}

impl MessageAccumulator {
    pub fn new() -> MessageAccumulator {
        MessageAccumulator::default()
    }

    /// Consume one event. An `error` event is an error: `overloaded_error` counts as a 529
    /// and `rate_limit_error` as a 429 (retried when nothing was shown yet).
    pub fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, LlmError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let event: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("a stream event is not JSON ({e}): {}", clip(data, 200))))?;
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        let mut out = Vec::new();
        match event.get("type").and_then(Value::as_str).unwrap_or_default() {
            "message_start" => {
                if let Some(usage) = event.pointer("/message/usage") {
                    self.merge_usage(usage);
                }
            }
            "content_block_start" => {
                let start = event.get("content_block").cloned().unwrap_or(Value::Null);
                let text = |key: &str| start.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
                let block = match start.get("type").and_then(Value::as_str).unwrap_or_default() {
                    "text" => Block { kind: BlockKind::Text, text: text("text"), ..Block::default() },
                    "thinking" => Block {
                        kind: BlockKind::Thinking,
                        text: text("thinking"),
                        signature: text("signature"),
                        ..Block::default()
                    },
                    "redacted_thinking" => {
                        Block { kind: BlockKind::RedactedThinking, data: text("data"), ..Block::default() }
                    }
                    "tool_use" => {
                        out.push(StreamDelta::ToolCallStarted { index: self.tool_calls, name: text("name") });
                        self.tool_calls += 1;
                        Block { kind: BlockKind::ToolUse, id: text("id"), name: text("name"), ..Block::default() }
                    }
                    _ => Block::default(),
                };
                match block.kind {
                    BlockKind::Text if !block.text.is_empty() => out.push(StreamDelta::Content(block.text.clone())),
                    BlockKind::Thinking if !block.text.is_empty() => {
                        out.push(StreamDelta::Reasoning(block.text.clone()))
                    }
                    _ => {}
                }
                self.streamed += block.text.len() + block.data.len();
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let delta = event.get("delta").cloned().unwrap_or(Value::Null);
                let piece = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
                let block = self.blocks.entry(index).or_default();
                match delta.get("type").and_then(Value::as_str).unwrap_or_default() {
                    "text_delta" => {
                        let text = piece("text");
                        if matches!(block.kind, BlockKind::Other) {
                            block.kind = BlockKind::Text;
                        }
                        self.streamed += text.len();
                        block.text.push_str(&text);
                        if !text.is_empty() {
                            out.push(StreamDelta::Content(text));
                        }
                    }
                    "thinking_delta" => {
                        let text = piece("thinking");
                        self.streamed += text.len();
                        block.text.push_str(&text);
                        if !text.is_empty() {
                            out.push(StreamDelta::Reasoning(text));
                        }
                    }
                    "signature_delta" => block.signature.push_str(&piece("signature")),
                    "input_json_delta" => {
                        let json = piece("partial_json");
                        block.json.push_str(&json);
                        self.streamed += json.len();
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(usage) = event.get("usage") {
                    self.merge_usage(usage);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let error = event.get("error").cloned().unwrap_or(Value::Null);
                let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
                let message = error.get("message").and_then(Value::as_str).unwrap_or(kind).to_string();
                return Err(match kind {
                    "overloaded_error" => LlmError::Http { status: 529, body: message, retry_after_s: None },
                    "rate_limit_error" => LlmError::Http { status: 429, body: message, retry_after_s: None },
                    _ => LlmError::Server(format!("{kind}: {message}")),
                });
            }
            // `ping`, `content_block_stop` and event types added later carry nothing we need.
            _ => {}
        }
        if self.streamed > MAX_ANSWER_BYTES {
            return Err(LlmError::Protocol(format!(
                "the answer passed {} MiB without ending; stopped",
                MAX_ANSWER_BYTES >> 20
            )));
        }
        Ok(out)
    }

    /// Usage counts are cumulative: a later event's field replaces an earlier one. The
    /// 1-hour part of the cache writes is `cache_creation.ephemeral_1h_input_tokens`.
    fn merge_usage(&mut self, value: &Value) {
        let field = |pointer: &str| value.pointer(pointer).and_then(Value::as_u64);
        let mut raw = self.raw_usage();
        let pointers = [
            "/input_tokens",
            "/output_tokens",
            "/cache_read_input_tokens",
            "/cache_creation_input_tokens",
            "/cache_creation/ephemeral_1h_input_tokens",
        ];
        for (slot, pointer) in raw.iter_mut().zip(pointers) {
            if let Some(n) = field(pointer) {
                *slot = n;
            }
        }
        let [input, output, read, write, write_1h] = raw;
        self.usage = Some(Usage {
            prompt_tokens: input + read + write,
            completion_tokens: output,
            cache_read_tokens: read,
            cache_write_tokens: write,
            // A part never larger than the whole, whatever a server sends.
            cache_write_1h_tokens: write_1h.min(write),
        });
    }

    /// [uncached input, output, cache read, cache write, 1-hour cache write] so far.
    fn raw_usage(&self) -> [u64; 5] {
        match self.usage {
            Some(u) => [
                u.uncached_prompt_tokens(),
                u.completion_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens,
                u.cache_write_1h_tokens,
            ],
            None => [0; 5],
        }
    }

    /// `message_stop` has arrived.
    pub fn is_complete(&self) -> bool {
        self.stopped
    }

    /// The whole answer, once `message_stop` arrived: a message that carried no content
    /// block and no stop reason (an empty stream that still ended properly) is an error,
    /// not an empty reply. An empty answer the server says ended (`end_turn`) is an answer.
    pub fn finish_complete(self) -> Result<Completion, LlmError> {
        let has_output = self.blocks.values().any(|b| !matches!(b.kind, BlockKind::Other));
        if !has_output && self.stop_reason.is_none() {
            return Err(LlmError::Protocol("the stream ended without an answer".into()));
        }
        Ok(self.finish())
    }

    /// The answer so far. Tool input that is not a JSON object becomes `{}`; a tool call
    /// without a name is kept (running it gives the model an error result); a missing or
    /// repeated id is made unique, so every result goes back to exactly one call.
    pub(crate) fn finish(self) -> Completion {
        let mut used = std::collections::HashSet::new();
        let mut completion = Completion { finish_reason: self.stop_reason, usage: self.usage, ..Completion::default() };
        for (_, block) in self.blocks {
            match block.kind {
                BlockKind::Text => completion.content.push_str(&block.text),
                BlockKind::Thinking => {
                    completion.reasoning.push_str(&block.text);
                    completion.thinking.push(json!({
                        "type": "thinking", "thinking": block.text, "signature": block.signature,
                    }));
                }
                BlockKind::RedactedThinking => {
                    completion.thinking.push(json!({"type": "redacted_thinking", "data": block.data}));
                }
                BlockKind::ToolUse => {
                    let arguments = match serde_json::from_str::<Value>(&block.json) {
                        Ok(Value::Object(map)) => Value::Object(map).to_string(),
                        _ => Value::Object(Map::new()).to_string(),
                    };
                    let base =
                        if block.id.is_empty() { format!("toolu_{}", completion.tool_calls.len()) } else { block.id };
                    let mut id = base.clone();
                    let mut n = 2;
                    while !used.insert(id.clone()) {
                        id = format!("{base}_{n}");
                        n += 1;
                    }
                    completion.tool_calls.push(ToolCall::new(id, block.name, arguments));
                }
                BlockKind::Other => {}
            }
        }
        completion
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::borrow::Cow;

    fn run(events: &[Value]) -> (Vec<StreamDelta>, Result<Completion, LlmError>) {
        let mut acc = MessageAccumulator::new();
        let mut deltas = Vec::new();
        for event in events {
            match acc.push(&event.to_string()) {
                Ok(d) => deltas.extend(d),
                Err(e) => return (deltas, Err(e)),
            }
        }
        assert!(acc.is_complete(), "no message_stop in {events:?}");
        (deltas, Ok(acc.finish()))
    }

    #[test]
    fn usage_adds_cache_reads_and_writes_to_the_prompt() {
        let (_, done) = run(&[
            json!({"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":200,
                   "cache_read_input_tokens":3000,"output_tokens":1}}}),
            json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":42}}),
            json!({"type":"message_stop"}),
        ]);
        let done = done.unwrap();
        assert_eq!(
            done.usage,
            Some(Usage {
                prompt_tokens: 3210,
                completion_tokens: 42,
                cache_read_tokens: 3000,
                cache_write_tokens: 200,
                cache_write_1h_tokens: 0,
            })
        );
        assert_eq!(done.finish_reason.as_deref(), Some("end_turn"));
    }

    #[test]
    fn usage_keeps_the_one_hour_part_of_the_cache_writes() {
        // The API splits the writes by lifetime in `cache_creation`, beside their total.
        let creation = json!({"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 300});
        let (_, done) = run(&[
            json!({"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":500,
                   "cache_creation":creation,"cache_read_input_tokens":3000,"output_tokens":1}}}),
            json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":42}}),
            json!({"type":"message_stop"}),
        ]);
        let want = Usage {
            prompt_tokens: 3510,
            completion_tokens: 42,
            cache_read_tokens: 3000,
            cache_write_tokens: 500,
            cache_write_1h_tokens: 300,
        };
        assert_eq!(done.unwrap().usage, Some(want));
        // A later event's counts replace the earlier ones; a 1-hour part larger than the
        // whole is cut to it.
        let (_, done) = run(&[
            json!({"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":500,
                   "cache_creation":creation,"output_tokens":1}}}),
            json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7,
                   "cache_creation_input_tokens":100,
                   "cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":900}}}),
            json!({"type":"message_stop"}),
        ]);
        let want = Usage {
            prompt_tokens: 110,
            completion_tokens: 7,
            cache_read_tokens: 0,
            cache_write_tokens: 100,
            cache_write_1h_tokens: 100,
        };
        assert_eq!(done.unwrap().usage, Some(want));
    }

    #[test]
    fn unparsable_tool_input_becomes_an_empty_object() {
        let (deltas, done) = run(&[
            json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"terminal","input":{}}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"comm"}}),
            json!({"type":"message_stop"}),
        ]);
        assert_eq!(deltas, vec![StreamDelta::ToolCallStarted { index: 0, name: "terminal".into() }]);
        assert_eq!(done.unwrap().tool_calls, vec![ToolCall::new("t1", "terminal", "{}")]);
    }

    #[test]
    fn a_message_without_any_content_or_stop_reason_is_an_error_not_an_empty_answer() {
        let mut acc = MessageAccumulator::new();
        acc.push(&json!({"type":"message_start","message":{"usage":{"input_tokens":3}}}).to_string()).unwrap();
        acc.push(&json!({"type":"ping"}).to_string()).unwrap();
        acc.push(&json!({"type":"message_stop"}).to_string()).unwrap();
        assert!(acc.is_complete());
        assert!(matches!(acc.finish_complete(), Err(LlmError::Protocol(m)) if m.contains("without an answer")));
        // An empty answer the server says ended is still an answer.
        let mut acc = MessageAccumulator::new();
        acc.push(&json!({"type":"message_delta","delta":{"stop_reason":"end_turn"}}).to_string()).unwrap();
        acc.push(&json!({"type":"message_stop"}).to_string()).unwrap();
        let done = acc.finish_complete().unwrap();
        assert_eq!(done.finish_reason.as_deref(), Some("end_turn"));
        assert_eq!(done.content, "");
        // So is one that only thought.
        let mut acc = MessageAccumulator::new();
        acc.push(
            &json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"hm"}})
                .to_string(),
        )
        .unwrap();
        acc.push(&json!({"type":"message_stop"}).to_string()).unwrap();
        assert_eq!(acc.finish_complete().unwrap().reasoning, "hm");
    }

    #[test]
    fn a_never_ending_answer_is_cut_off_at_the_cap() {
        for (start, delta) in [
            (json!({"type":"text","text":""}), json!({"type":"text_delta","text":"x".repeat(1 << 20)})),
            (json!({"type":"thinking","thinking":""}), json!({"type":"thinking_delta","thinking":"x".repeat(1 << 20)})),
            (
                json!({"type":"tool_use","id":"t","name":"terminal","input":{}}),
                json!({"type":"input_json_delta","partial_json":"x".repeat(1 << 20)}),
            ),
        ] {
            let mut acc = MessageAccumulator::new();
            acc.push(&json!({"type":"content_block_start","index":0,"content_block":start}).to_string()).unwrap();
            let event = json!({"type":"content_block_delta","index":0,"delta":delta}).to_string();
            let mut pushed = 0;
            let err = loop {
                match acc.push(&event) {
                    Ok(_) => pushed += 1,
                    Err(e) => break e,
                }
                assert!(pushed <= MAX_ANSWER_BYTES >> 20, "no cap after {pushed} MiB");
            };
            assert!(matches!(&err, LlmError::Protocol(m) if m.contains("MiB")), "{err:?}");
            assert_eq!(pushed, MAX_ANSWER_BYTES >> 20);
        }
    }

    #[test]
    fn a_nameless_tool_call_is_kept_and_repeated_ids_are_made_unique() {
        let (_, done) = run(&[
            json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"dup","name":""}}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"dup","name":"read_file"}}),
            json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"dup","name":"read_file"}}),
            json!({"type":"content_block_start","index":3,"content_block":{"type":"tool_use","name":"read_file"}}),
            json!({"type":"content_block_start","index":4,"content_block":{"type":"tool_use","id":"toolu_3","name":"read_file"}}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use"}}),
            json!({"type":"message_stop"}),
        ]);
        let calls = done.unwrap().tool_calls;
        let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["dup", "dup_2", "dup_3", "toolu_3", "toolu_3_2"]);
        assert_eq!(calls[0].function.name, "", "the nameless call stays, to get an error result");
    }

    #[test]
    fn an_overloaded_error_event_is_a_retryable_529() {
        let mut acc = MessageAccumulator::new();
        let err =
            acc.push(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#).unwrap_err();
        assert_eq!(err, LlmError::Http { status: 529, body: "Overloaded".into(), retry_after_s: None });
        assert!(err.is_retryable());
        let err = acc.push(r#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#).unwrap_err();
        assert_eq!(err, LlmError::Server("api_error: boom".into()));
    }

    #[test]
    fn consecutive_roles_merge_and_the_conversation_opens_with_the_user() {
        let history = vec![
            ChatMessage::system("sys"),
            ChatMessage::assistant("hello", Vec::new()),
            ChatMessage::user("a"),
            ChatMessage::user("b"),
            ChatMessage::assistant("", Vec::new()),
        ];
        let (system, messages) = convert_messages(&history);
        assert_eq!(system, vec!["sys".to_string()]);
        assert_eq!(
            Value::Array(messages),
            json!([
                {"role":"user","content":[{"type":"text","text":"(continuing the conversation)"}]},
                {"role":"assistant","content":[{"type":"text","text":"hello"}]},
                {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
            ])
        );
    }

    #[test]
    fn temperature_is_left_out_when_thinking() {
        let request = ChatRequest { temperature: Some(0.2), ..ChatRequest::owned("m", vec![ChatMessage::user("hi")]) };
        let plain = request_body(&request, MessagesOptions::default());
        assert_eq!(plain["temperature"], json!(0.2));
        assert!(plain.get("thinking").is_none());
        let thinking = request_body(&request, MessagesOptions { max_tokens: 2000, thinking_budget: 4000 });
        assert!(thinking.get("temperature").is_none());
        assert_eq!(thinking["thinking"], json!({"type":"enabled","budget_tokens":4000}));
        assert_eq!(thinking["max_tokens"], json!(5024));
        // A tool-calling answer without its thinking blocks (restored from the database):
        // this request goes without thinking.
        let options = MessagesOptions { max_tokens: 8000, thinking_budget: 4000 };
        let mut messages = [
            ChatMessage::user("hi"),
            ChatMessage::assistant("", vec![ToolCall::new("t1", "terminal", "{}")]),
            ChatMessage::tool("t1", "{}"),
        ];
        let restored = ChatRequest { messages: messages.iter().map(Cow::Borrowed).collect(), ..request.clone() };
        assert!(request_body(&restored, options).get("thinking").is_none());
        messages[1].thinking = vec![json!({"type": "thinking", "thinking": "t", "signature": "s"})];
        let live = ChatRequest { messages: messages.iter().map(Cow::Borrowed).collect(), ..request };
        assert_eq!(request_body(&live, options)["thinking"], json!({"type":"enabled","budget_tokens":4000}));
    }

    #[test]
    fn every_breakpoint_carries_the_requests_cache_lifetime() {
        let messages = vec![
            ChatMessage::system("sys"),
            ChatMessage::user("a"),
            ChatMessage::assistant("b", Vec::new()),
            ChatMessage::user("c"),
        ];
        let tool = json!({"type": "function", "function": {"name": "t", "description": "d", "parameters": {}}});
        let request = ChatRequest { tools: vec![tool], ..ChatRequest::owned("m", messages) };
        let marks = |body: &Value| {
            let mut out = vec![body["tools"][0]["cache_control"].clone(), body["system"][0]["cache_control"].clone()];
            for m in body["messages"].as_array().into_iter().flatten() {
                out.extend(
                    m["content"].as_array().into_iter().flatten().filter_map(|b| b.get("cache_control")).cloned(),
                );
            }
            out
        };
        let five = request_body(&request, MessagesOptions::default());
        assert_eq!(marks(&five), vec![json!({"type": "ephemeral"}); 4]);
        let hour = ChatRequest { cache_lifetime: CacheLifetime::OneHour, ..request };
        let hour = request_body(&hour, MessagesOptions::default());
        assert_eq!(marks(&hour), vec![json!({"type": "ephemeral", "ttl": "1h"}); 4]);
    }
}
