//! Driving a model client directly, the same way for every provider (tests/llm_client.rs,
//! tests/anthropic.rs).
#![allow(dead_code)]

use talaria::engine::llm::{ChatMessage, ChatRequest, Completion, LlmError, Provider, StreamDelta};

/// A system prompt and one user message, no tools.
pub fn request(model: &str) -> ChatRequest<'static> {
    ChatRequest::owned(model, vec![ChatMessage::system("be brief"), ChatMessage::user("hi")])
}

/// Every delta the client streamed, and how the call ended.
pub async fn chat(
    client: &dyn Provider,
    request: &ChatRequest<'_>,
) -> (Vec<StreamDelta>, Result<Completion, LlmError>) {
    let mut deltas = Vec::new();
    let result = client.stream_chat(request, &mut |d| deltas.push(d)).await;
    (deltas, result)
}

/// The answer's text as the deltas carried it.
pub fn content_of(deltas: &[StreamDelta]) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::Content(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}
