//! Talking to models: the `Provider` trait, the OpenAI-compatible wire types, the
//! streaming client, and the built-in demo model.

pub mod anthropic;
mod attempt;
pub mod client;
pub mod demo;
pub(crate) mod estimate;
pub mod provider;
pub(crate) mod spend;
pub mod sse;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// The role a stored row names (None for anything else).
    pub fn parse(s: &str) -> Option<Role> {
        [Role::System, Role::User, Role::Assistant, Role::Tool].into_iter().find(|r| r.as_str() == s)
    }
}

/// A function call requested by the model, as it appears in the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub(crate) id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub(crate) kind: String,
    pub(crate) function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FunctionCall {
    pub(crate) name: String,
    /// JSON text, exactly as the model produced it.
    pub(crate) arguments: String,
}

impl ToolCall {
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> ToolCall {
        ToolCall {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall { name: name.into(), arguments: arguments.into() },
        }
    }
}

/// One Chat Completions message, serialised exactly as the server expects it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Anthropic `thinking` / `redacted_thinking` blocks of an assistant answer, exactly as
    /// they arrived (signature included): the Messages API wants them back with the tool
    /// results that follow. Never part of the OpenAI wire format.
    #[serde(skip)]
    pub thinking: Vec<serde_json::Value>,
}

impl ChatMessage {
    pub fn system(text: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: Role::System,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            thinking: Vec::new(),
        }
    }

    pub fn user(text: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: Role::User,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            thinking: Vec::new(),
        }
    }

    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> ChatMessage {
        let text = text.into();
        ChatMessage {
            role: Role::Assistant,
            content: (!text.is_empty() || tool_calls.is_empty()).then_some(text),
            tool_calls,
            tool_call_id: None,
            thinking: Vec::new(),
        }
    }

    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: Role::Tool,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
            thinking: Vec::new(),
        }
    }

    pub fn text(&self) -> &str {
        self.content.as_deref().unwrap_or("")
    }
}

/// What the engine asks a provider for. The messages are borrowed where the caller keeps
/// them anyway (the engine's history), so a request copies no message text.
#[derive(Debug, Clone, Serialize)]
pub struct ChatRequest<'a> {
    pub model: String,
    pub messages: Vec<Cow<'a, ChatMessage>>,
    /// OpenAI function-tool definitions; empty means no `tools` key is sent.
    pub tools: Vec<serde_json::Value>,
    pub temperature: Option<f32>,
    /// How long a prompt cache should keep this request's prefix (Anthropic's
    /// `cache_control.ttl`; other wires cache by themselves and ignore it).
    #[serde(skip)]
    pub cache_lifetime: CacheLifetime,
    /// Told when this request's bytes go to the connection (a turn's rewind snapshot
    /// starts then); not part of what is asked.
    #[serde(skip)]
    pub sent: RequestSent,
}

/// A one-time signal that a request is on the wire: the client fires it when the
/// connection takes the request's body, whose bytes are written to the socket in that same
/// step. Once fired or closed it is spent, and later requests carrying it signal nothing.
/// The receiver hears `Err` (closed) when no request got that far.
#[derive(Clone, Default)]
pub struct RequestSent(Option<Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>>);

impl RequestSent {
    /// A signal and where it is heard.
    pub fn new() -> (RequestSent, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (RequestSent(Some(Arc::new(Mutex::new(Some(tx))))), rx)
    }

    /// Someone still waits for it (it has been neither fired nor closed).
    pub(crate) fn is_armed(&self) -> bool {
        self.0.as_ref().is_some_and(|m| crate::util::lock(m).as_ref().is_some_and(|tx| !tx.is_closed()))
    }

    /// The request is on the wire (the first time only).
    pub(crate) fn fire(&self) {
        if let Some(tx) = self.take() {
            let _ = tx.send(());
        }
    }

    /// No request will go out (any more): the receiver hears it is closed.
    pub fn close(&self) {
        drop(self.take());
    }

    fn take(&self) -> Option<tokio::sync::oneshot::Sender<()>> {
        self.0.as_ref().and_then(|m| crate::util::lock(m).take())
    }
}

impl std::fmt::Debug for RequestSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_armed() { "RequestSent(armed)" } else { "RequestSent(spent)" })
    }
}

/// A prompt-cache lifetime: the API's default 5 minutes, or 1 hour (its writes cost 2× the
/// input price instead of 1.25×) when the next request is expected later than that.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CacheLifetime {
    #[default]
    FiveMinutes,
    OneHour,
}

impl ChatRequest<'static> {
    /// A request that owns its messages (no tools, the server's temperature).
    pub fn owned(model: impl Into<String>, messages: Vec<ChatMessage>) -> ChatRequest<'static> {
        ChatRequest {
            model: model.into(),
            messages: messages.into_iter().map(Cow::Owned).collect(),
            tools: Vec::new(),
            temperature: None,
            cache_lifetime: CacheLifetime::FiveMinutes,
            sent: RequestSent::default(),
        }
    }
}

/// A piece of a streaming response, for live display.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamDelta {
    Content(String),
    Reasoning(String),
    /// A tool call began (its name is known) at `index`.
    ToolCallStarted {
        index: usize,
        name: String,
    },
}

pub use crate::protocol::usage::Usage;

/// A complete model answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    /// Why the answer ended as the server said it (`stop`, `length`, `end_turn`,
    /// `max_tokens`, `tool_use`, …).
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// Anthropic thinking blocks to send back with the next request (see [`ChatMessage`]).
    pub thinking: Vec<serde_json::Value>,
}

impl Completion {
    /// The answer stopped at the output token limit rather than by choice.
    pub(crate) fn hit_token_limit(&self) -> bool {
        matches!(self.finish_reason.as_deref(), Some("length" | "max_tokens"))
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("cannot reach the model server at {url}: {message}")]
    Connect { url: String, message: String },
    /// Nothing listens there: retrying cannot help, and the one fact that matters is short.
    #[error("nothing is listening at {server} (connection refused); is the model server running?")]
    Refused { server: String },
    #[error("the model server answered {status}: {body}")]
    Http { status: u16, body: String, retry_after_s: Option<f64> },
    #[error("the model server sent an error: {0}")]
    Server(String),
    #[error("no data from the model server for {0} s")]
    IdleTimeout(u64),
    #[error("the response stream broke: {0}")]
    Stream(String),
    #[error("the model server sent something unreadable: {0}")]
    Protocol(String),
}

impl LlmError {
    /// Worth another attempt (only ever before the first content delta).
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Connect { .. } | LlmError::Stream(_) | LlmError::IdleTimeout(_) => true,
            LlmError::Http { status, .. } => *status == 429 || *status >= 500,
            LlmError::Server(_) | LlmError::Protocol(_) | LlmError::Refused { .. } => false,
        }
    }
}

/// Something that answers chat requests by streaming.
///
/// `on_delta` is called for each piece as it arrives. Dropping the returned future aborts
/// the request (that is how an interrupt or redirect stops a stream).
#[async_trait]
pub trait Provider: Send + Sync {
    async fn stream_chat(
        &self,
        request: &ChatRequest<'_>,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<Completion, LlmError>;

    /// Model names the server offers (`GET /v1/models`).
    async fn list_models(&self) -> Result<Vec<String>, LlmError>;

    /// Which wire protocol (and price table) this is: `openai` or `anthropic`.
    fn kind(&self) -> &'static str {
        "openai"
    }
}
