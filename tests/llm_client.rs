//! The OpenAI-compatible client end to end against the scripted loopback server.

#[path = "common/chat.rs"]
mod chat_kit;

use std::time::Duration;

use chat_kit::{chat, content_of};
use pretty_assertions::assert_eq;
use serde_json::json;
use talaria::engine::llm::client::{ClientSettings, OpenAiClient};
use talaria::engine::llm::{ChatMessage, ChatRequest, Completion, LlmError, Provider, StreamDelta, ToolCall, Usage};
use talaria::testkit::scripted::{
    error_chunk, finish_chunk, reasoning_chunks, text_chunks, tool_call_chunks, usage_chunk, ScriptedResponse,
    ScriptedServer, DONE,
};

const WAIT: Duration = Duration::from_secs(10);

fn settings(server: &ScriptedServer) -> ClientSettings {
    ClientSettings::new(server.base_url())
        .timeouts(Duration::from_secs(10), Duration::from_secs(10))
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
}

fn client(server: &ScriptedServer) -> OpenAiClient {
    OpenAiClient::new(settings(server)).expect("client builds")
}

fn request() -> ChatRequest<'static> {
    chat_kit::request("test-model")
}

#[tokio::test]
async fn events_split_anywhere_with_keep_alives_and_crlf() {
    // "é" is two bytes and "✓" three: the splits below cut through both.
    let first = text_chunks("héllo ✓", 100).remove(0);
    let body = format!(
        ": keep-alive\r\n\r\ndata: {first}\r\n\r\n: ping\n\ndata: {}\n\ndata: [DONE]\n\n",
        finish_chunk("stop")
    );
    let bytes = body.into_bytes();
    let e_acute = bytes.windows(2).position(|w| w == "é".as_bytes()).unwrap();
    let tick = bytes.windows(3).position(|w| w == "✓".as_bytes()).unwrap();
    let cuts = [3, e_acute + 1, tick + 1, tick + 2, bytes.len() - 3];
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts {
        pieces.push(bytes[start..cut].to_vec());
        start = cut;
    }
    pieces.push(bytes[start..].to_vec());
    let server = ScriptedServer::start([ScriptedResponse::sse_raw(pieces)]).await.unwrap();
    let (deltas, result) = chat(&client(&server), &request()).await;
    let done = result.unwrap();
    assert_eq!(done.content, "héllo ✓");
    assert_eq!(done.finish_reason.as_deref(), Some("stop"));
    assert_eq!(content_of(&deltas), "héllo ✓");
}

#[tokio::test]
async fn text_in_pieces_with_usage_and_done() {
    let mut payloads = text_chunks("The quick brown fox", 4);
    payloads.push(finish_chunk("stop"));
    payloads.push(usage_chunk(21, 5));
    payloads.push(DONE.into());
    let server = ScriptedServer::start([ScriptedResponse::sse(payloads)]).await.unwrap();
    let (deltas, result) = chat(&client(&server), &request()).await;
    assert_eq!(
        result.unwrap(),
        Completion {
            content: "The quick brown fox".into(),
            finish_reason: Some("stop".into()),
            usage: Some(Usage::tokens(21, 5)),
            ..Completion::default()
        }
    );
    assert_eq!(deltas.len(), 5);
    assert_eq!(content_of(&deltas), "The quick brown fox");
}

#[tokio::test]
async fn done_ends_the_answer_even_if_the_connection_stays_open() {
    let server = ScriptedServer::start([ScriptedResponse::text("still here").stall_after(usize::MAX)]).await.unwrap();
    let (_, result) = chat(&client(&server), &request()).await;
    assert_eq!(result.unwrap().content, "still here");
}

#[tokio::test]
async fn a_tool_call_split_across_chunks() {
    let args = r#"{"command":"ls -la && echo \"done\""}"#;
    let server = ScriptedServer::start([ScriptedResponse::tool_call("call_7", "terminal", args)]).await.unwrap();
    let (deltas, result) = chat(&client(&server), &request()).await;
    let done = result.unwrap();
    assert_eq!(done.tool_calls, vec![ToolCall::new("call_7", "terminal", args)]);
    assert_eq!(done.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(deltas, vec![StreamDelta::ToolCallStarted { index: 0, name: "terminal".into() }]);
}

#[tokio::test]
async fn two_tool_calls_and_reasoning_in_one_response() {
    let mut payloads = reasoning_chunks("I should look first.", 5);
    payloads.extend(text_chunks("Looking.", 3));
    let first = tool_call_chunks(0, "a", "read_file", r#"{"path":"src/main.rs"}"#, 6);
    let second = tool_call_chunks(1, "b", "search_files", r#"{"pattern":"fn main"}"#, 6);
    // Interleave the two calls' pieces, as some servers do.
    let (mut i, mut j) = (first.iter(), second.iter());
    loop {
        match (i.next(), j.next()) {
            (None, None) => break,
            (a, b) => payloads.extend(a.into_iter().chain(b).cloned()),
        }
    }
    payloads.push(finish_chunk("tool_calls"));
    payloads.push(usage_chunk(3, 4));
    payloads.push(DONE.into());
    let server = ScriptedServer::start([ScriptedResponse::sse(payloads)]).await.unwrap();
    let (deltas, result) = chat(&client(&server), &request()).await;
    let done = result.unwrap();
    assert_eq!(done.reasoning, "I should look first.");
    assert_eq!(done.content, "Looking.");
    assert_eq!(
        done.tool_calls,
        vec![
            ToolCall::new("a", "read_file", r#"{"path":"src/main.rs"}"#),
            ToolCall::new("b", "search_files", r#"{"pattern":"fn main"}"#)
        ]
    );
    let started: Vec<_> = deltas.iter().filter(|d| matches!(d, StreamDelta::ToolCallStarted { .. })).collect();
    assert_eq!(
        started,
        vec![
            &StreamDelta::ToolCallStarted { index: 0, name: "read_file".into() },
            &StreamDelta::ToolCallStarted { index: 1, name: "search_files".into() }
        ]
    );
    assert!(matches!(deltas[0], StreamDelta::Reasoning(_)), "{deltas:?}");
}

#[tokio::test]
async fn an_error_object_mid_stream_is_returned_and_not_retried() {
    let mut payloads = text_chunks("partial", 100);
    payloads.push(error_chunk("the upstream provider is overloaded"));
    let server = ScriptedServer::start([ScriptedResponse::sse(payloads)]).await.unwrap();
    let (deltas, result) = chat(&client(&server), &request()).await;
    assert_eq!(result, Err(LlmError::Server("the upstream provider is overloaded".into())));
    assert_eq!(content_of(&deltas), "partial");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn an_error_object_before_any_output_is_not_retried_either() {
    let server = ScriptedServer::start([ScriptedResponse::sse([error_chunk("invalid model")])]).await.unwrap();
    let (_, result) = chat(&client(&server), &request()).await;
    assert_eq!(result, Err(LlmError::Server("invalid model".into())));
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn rate_limited_with_retry_after_then_success() {
    let server =
        ScriptedServer::start([ScriptedResponse::rate_limited(1), ScriptedResponse::text("ok")]).await.unwrap();
    let client =
        OpenAiClient::new(settings(&server).backoff(Duration::from_millis(10), Duration::from_secs(2))).unwrap();
    let (_, result) = chat(&client, &request()).await;
    assert_eq!(result.unwrap().content, "ok");
    assert_eq!(server.chat_requests().len(), 2);
}

#[tokio::test]
async fn server_error_then_success() {
    let server = ScriptedServer::start([ScriptedResponse::error(500, "boom"), ScriptedResponse::text("recovered")])
        .await
        .unwrap();
    let (_, result) = chat(&client(&server), &request()).await;
    assert_eq!(result.unwrap().content, "recovered");
    assert_eq!(server.chat_requests().len(), 2);
}

#[tokio::test]
async fn retries_run_out() {
    let server =
        ScriptedServer::with_responder(|_| ScriptedResponse::error(503, "down for maintenance")).await.unwrap();
    let client = OpenAiClient::new(settings(&server).max_retries(2)).unwrap();
    let (_, result) = chat(&client, &request()).await;
    assert_eq!(result, Err(LlmError::Http { status: 503, body: "down for maintenance".into(), retry_after_s: None }));
    assert_eq!(server.chat_requests().len(), 3);
}

#[tokio::test]
async fn a_client_error_is_not_retried_and_carries_the_server_text() {
    let server = ScriptedServer::start([ScriptedResponse::error(400, "model 'x' does not exist")]).await.unwrap();
    let (_, result) = chat(&client(&server), &request()).await;
    let err = result.unwrap_err();
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("400") && err.to_string().contains("model 'x' does not exist"), "{err}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_reset_before_the_first_delta_is_retried() {
    let server = ScriptedServer::start([
        ScriptedResponse::text("lost").reset_after(0),
        ScriptedResponse::text("lost too").close_after(0),
        ScriptedResponse::text("third time"),
    ])
    .await
    .unwrap();
    let (deltas, result) = chat(&client(&server), &request()).await;
    assert_eq!(result.unwrap().content, "third time");
    assert_eq!(content_of(&deltas), "third time");
    assert_eq!(server.chat_requests().len(), 3);
}

#[tokio::test]
async fn a_break_after_the_first_delta_is_an_error_and_the_partial_text_was_delivered() {
    for response in [
        ScriptedResponse::text("hello world, this is long").delay(Duration::from_millis(100)).reset_after(2),
        ScriptedResponse::text("hello world, this is long").close_after(2),
    ] {
        let server = ScriptedServer::start([response, ScriptedResponse::text("must not be used")]).await.unwrap();
        let (deltas, result) = chat(&client(&server), &request()).await;
        assert!(matches!(result, Err(LlmError::Stream(_))), "{result:?}");
        assert!(content_of(&deltas).starts_with("hello wo"), "{deltas:?}");
        assert_eq!(server.chat_requests().len(), 1);
    }
}

#[tokio::test]
async fn a_stream_that_ends_without_finishing_counts_as_broken() {
    let server = ScriptedServer::start([ScriptedResponse::sse(text_chunks("cut", 100))]).await.unwrap();
    let client = OpenAiClient::new(settings(&server).max_retries(0)).unwrap();
    let (_, result) = chat(&client, &request()).await;
    assert!(
        matches!(result, Err(LlmError::Stream(ref m)) if m.contains("before the answer was complete")),
        "{result:?}"
    );
}

#[tokio::test]
async fn silence_hits_the_idle_timeout() {
    // Silent after the first delta: an error at once, no retry.
    let server = ScriptedServer::start([ScriptedResponse::text("tick tock").stall_after(1)]).await.unwrap();
    let client =
        OpenAiClient::new(settings(&server).timeouts(Duration::from_secs(10), Duration::from_millis(300))).unwrap();
    let (deltas, result) = chat(&client, &request()).await;
    assert_eq!(result, Err(LlmError::IdleTimeout(1)));
    assert_eq!(content_of(&deltas), "tick toc");
    assert_eq!(server.request_count(), 1);

    // A server that never answers: retried, then the timeout is the error.
    let server = ScriptedServer::start([ScriptedResponse::hang(), ScriptedResponse::hang()]).await.unwrap();
    let client = OpenAiClient::new(
        settings(&server).timeouts(Duration::from_secs(10), Duration::from_millis(300)).max_retries(1),
    )
    .unwrap();
    let (deltas, result) = chat(&client, &request()).await;
    assert_eq!(result, Err(LlmError::IdleTimeout(1)));
    assert!(deltas.is_empty());
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn nothing_listening_is_one_short_refused_error_without_retries() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    // Backoff long enough that a retry would show in the elapsed time.
    let client = OpenAiClient::new(
        ClientSettings::new(format!("http://127.0.0.1:{port}/v1"))
            .max_retries(3)
            .backoff(Duration::from_secs(5), Duration::from_secs(5)),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let (_, result) = chat(&client, &request()).await;
    let err = result.unwrap_err();
    assert_eq!(err, LlmError::Refused { server: format!("http://127.0.0.1:{port}") });
    assert!(!err.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(5), "no retries against a port that refuses");
    let text = err.to_string();
    assert_eq!(text.matches("127.0.0.1").count(), 1, "{text}");
    assert!(text.contains("connection refused"), "{text}");
}

#[tokio::test]
async fn authorization_only_with_a_key() {
    let server = ScriptedServer::start([ScriptedResponse::text("a"), ScriptedResponse::text("b")]).await.unwrap();
    chat(&client(&server), &request()).await.1.unwrap();
    let keyed = OpenAiClient::new(settings(&server).api_key("sk-test-123")).unwrap();
    chat(&keyed, &request()).await.1.unwrap();
    let requests = server.wait_for_requests(2, WAIT).await;
    assert_eq!(requests[0].header("authorization"), None);
    assert_eq!(requests[1].header("authorization"), Some("Bearer sk-test-123"));
}

#[tokio::test]
async fn the_exact_request_body() {
    let server = ScriptedServer::start([ScriptedResponse::text("a"), ScriptedResponse::text("b")]).await.unwrap();
    let client = client(&server);
    let tool =
        json!({"type":"function","function":{"name":"terminal","description":"run","parameters":{"type":"object"}}});
    let history = vec![
        ChatMessage::user("list files"),
        ChatMessage::assistant("", vec![ToolCall::new("c1", "terminal", r#"{"command":"ls"}"#)]),
        ChatMessage::tool("c1", "a.txt"),
    ];
    let with_tools =
        ChatRequest { tools: vec![tool.clone()], temperature: Some(0.0), ..ChatRequest::owned("test-model", history) };
    chat(&client, &with_tools).await.1.unwrap();
    chat(&client, &request()).await.1.unwrap();
    let requests = server.wait_for_chat_requests(2, WAIT).await;
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("content-type"), Some("application/json"));
    assert_eq!(
        requests[0].body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "user", "content": "list files"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "terminal", "arguments": "{\"command\":\"ls\"}"}}]},
                {"role": "tool", "content": "a.txt", "tool_call_id": "c1"}
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [tool],
            "temperature": 0.0
        })
    );
    assert_eq!(
        requests[1].body,
        json!({
            "model": "test-model",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}

#[tokio::test]
async fn list_models_reads_the_ids() {
    let server = ScriptedServer::start([]).await.unwrap();
    server.set_models(["llama3.2", "qwen2.5-coder"]);
    let models = client(&server).list_models().await.unwrap();
    assert_eq!(models, vec!["llama3.2".to_string(), "qwen2.5-coder".to_string()]);
    let requests = server.wait_for_requests(1, WAIT).await;
    assert_eq!((requests[0].method.as_str(), requests[0].path.as_str()), ("GET", "/v1/models"));
}

#[tokio::test]
async fn list_models_reports_a_rejected_key() {
    let server = ScriptedServer::start([]).await.unwrap();
    server.set_models_response(ScriptedResponse::error(401, "Incorrect API key provided"));
    let err = client(&server).list_models().await.unwrap_err();
    assert_eq!(err, LlmError::Http { status: 401, body: "Incorrect API key provided".into(), retry_after_s: None });
}
