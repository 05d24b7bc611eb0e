//! The native Anthropic Messages client (DESIGN §8a) against a scripted Anthropic-wire
//! server on loopback: the stream events, retries, the exact request bodies (headers,
//! cache breakpoints, tool_result pairing, thinking sent back), and the engine end to end
//! on this provider (redirect mid-stream, interrupt mid-tool, usage and cost).

#[path = "common/anthropic.rs"]
mod anthropic_wire;
#[path = "common/chat.rs"]
mod chat_kit;
mod common;
#[path = "common/inproc.rs"]
mod inproc;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anthropic_wire::*;
use chat_kit::{chat, content_of};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use talaria::config::Config;
use talaria::engine::compaction::SUMMARY_HEADER;
use talaria::engine::jobs::group;
use talaria::engine::llm::anthropic::{AnthropicClient, MessagesOptions};
use talaria::engine::llm::client::ClientSettings;
use talaria::engine::llm::{ChatMessage, ChatRequest, Completion, LlmError, Provider, StreamDelta, ToolCall, Usage};
use talaria::engine::SessionChoice;
use talaria::protocol::commands::GoalCmd;
use talaria::protocol::{BusyMode, Event, Op, SlashCommand, TurnOutcome};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

const KEY: &str = "sk-ant-test-0123456789";
const MODEL: &str = "claude-sonnet-4-5";

fn settings(server: &ScriptedServer) -> ClientSettings {
    ClientSettings::new(server.base_url())
        .api_key(KEY)
        .timeouts(Duration::from_secs(10), Duration::from_secs(10))
        .backoff(Duration::from_millis(10), Duration::from_secs(5))
}

fn client(server: &ScriptedServer) -> AnthropicClient {
    AnthropicClient::new(settings(server), MessagesOptions::default()).expect("client builds")
}

fn request() -> ChatRequest<'static> {
    chat_kit::request(MODEL)
}

/// thinking + text + two tool_use blocks in one response, usage with cache numbers.
fn rich_answer() -> Vec<String> {
    answer(
        start_usage(12, 3000, 200),
        vec![
            thinking_block(0, "Two files to look at ✓.", "sig-Eq==", 5),
            text_block(1, "Looking at both.", 3),
            tool_use_block(2, "toolu_a", "read_file", &json!({"path": "a.rs"}), 4),
            tool_use_block(3, "toolu_b", "search_files", &json!({"pattern": "fn main"}), 5),
        ],
        "tool_use",
        87,
    )
}

fn expected_rich() -> Completion {
    Completion {
        content: "Looking at both.".into(),
        reasoning: "Two files to look at ✓.".into(),
        tool_calls: vec![
            ToolCall::new("toolu_a", "read_file", r#"{"path":"a.rs"}"#),
            ToolCall::new("toolu_b", "search_files", r#"{"pattern":"fn main"}"#),
        ],
        finish_reason: Some("tool_use".into()),
        usage: Some(Usage {
            prompt_tokens: 3212,
            completion_tokens: 87,
            cache_read_tokens: 3000,
            cache_write_tokens: 200,
            cache_write_1h_tokens: 0,
        }),
        thinking: vec![json!({"type": "thinking", "thinking": "Two files to look at ✓.", "signature": "sig-Eq=="})],
    }
}

// ---------------------------------------------------------------------------------------
// the stream
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn thinking_text_and_two_tool_calls_in_one_response() {
    let server = ScriptedServer::start([stream(rich_answer())]).await.unwrap();
    let (deltas, result) = chat(&client(&server), &request()).await;
    assert_eq!(result.unwrap(), expected_rich());
    assert_eq!(content_of(&deltas), "Looking at both.");
    let started: Vec<&StreamDelta> =
        deltas.iter().filter(|d| matches!(d, StreamDelta::ToolCallStarted { .. })).collect();
    assert_eq!(
        started,
        vec![
            &StreamDelta::ToolCallStarted { index: 0, name: "read_file".into() },
            &StreamDelta::ToolCallStarted { index: 1, name: "search_files".into() }
        ]
    );
    assert!(deltas.contains(&StreamDelta::Reasoning("Two f".into())), "{deltas:?}");
}

#[tokio::test]
async fn every_event_type_split_at_every_byte() {
    let body: Vec<u8> = rich_answer().concat().into_bytes();
    let cuts = Arc::new(AtomicUsize::new(0));
    let next = cuts.clone();
    let pieces = body.clone();
    let server = ScriptedServer::with_responder(move |_| {
        let cut = next.fetch_add(1, Ordering::SeqCst).min(pieces.len());
        ScriptedResponse::sse_raw([pieces[..cut].to_vec(), pieces[cut..].to_vec()])
    })
    .await
    .unwrap();
    let client = client(&server);
    for cut in 0..=body.len() {
        let (deltas, result) = chat(&client, &request()).await;
        assert_eq!(result.as_ref().map_err(|e| e.to_string()), Ok(&expected_rich()), "cut at byte {cut}");
        assert_eq!(content_of(&deltas), "Looking at both.", "cut at byte {cut}");
    }
    // And one byte per write.
    server.push(ScriptedResponse::sse_raw(body.iter().map(|b| vec![*b])));
    let (_, result) = chat(&client, &request()).await;
    assert_eq!(result.unwrap(), expected_rich());
}

#[tokio::test]
async fn a_mid_stream_error_is_returned_after_the_partial_text_and_not_retried() {
    let mut events = vec![message_start(start_usage(5, 0, 0))];
    events.extend(text_block(0, "Partial answer", 4).into_iter().take(4));
    events.push(error_event("overloaded_error", "Overloaded"));
    let server = ScriptedServer::start([stream(events), text_answer("never")]).await.unwrap();
    let (deltas, result) = chat(&client(&server), &request()).await;
    assert_eq!(content_of(&deltas), "Partial answ");
    assert_eq!(result, Err(LlmError::Http { status: 529, body: "Overloaded".into(), retry_after_s: None }));
    assert_eq!(message_requests(&server).len(), 1, "output was shown: no retry");
}

#[tokio::test]
async fn overloaded_529_then_success_honours_retry_after() {
    let server = ScriptedServer::start([overloaded(1), text_answer("Hello there")]).await.unwrap();
    let started = Instant::now();
    let (deltas, result) = chat(&client(&server), &request()).await;
    assert_eq!(result.unwrap().content, "Hello there");
    assert_eq!(content_of(&deltas), "Hello there");
    assert!(started.elapsed() >= Duration::from_millis(950), "retry-after: 1 was not honoured");
    assert_eq!(message_requests(&server).len(), 2);
}

#[tokio::test]
async fn an_overloaded_error_event_before_any_output_and_a_429_are_retried() {
    let server = ScriptedServer::start([
        stream(vec![message_start(start_usage(5, 0, 0)), ping(), error_event("overloaded_error", "Overloaded")]),
        error_response(429, "rate_limit_error", "slow down").header("retry-after", "0"),
        text_answer("Finally"),
    ])
    .await
    .unwrap();
    let (_, result) = chat(&client(&server), &request()).await;
    assert_eq!(result.unwrap().content, "Finally");
    assert_eq!(message_requests(&server).len(), 3);
}

#[tokio::test]
async fn a_client_error_shows_the_body_without_the_key() {
    let server = ScriptedServer::start([error_response(
        400,
        "invalid_request_error",
        &format!("messages.1.content.0: bad block (key {KEY})"),
    )])
    .await
    .unwrap();
    let (_, result) = chat(&client(&server), &request()).await;
    let error = result.unwrap_err();
    let text = error.to_string();
    assert!(text.contains("400") && text.contains("messages.1.content.0: bad block"), "{text}");
    assert!(!text.contains(KEY) && text.contains("[redacted]"), "{text}");
    assert_eq!(message_requests(&server).len(), 1, "a 400 is not retried");
}

#[tokio::test]
async fn a_stream_without_message_stop_counts_as_broken() {
    let mut events = vec![message_start(start_usage(5, 0, 0))];
    events.extend(text_block(0, "cut", 4));
    let server = ScriptedServer::start([stream(events)]).await.unwrap();
    let (_, result) = chat(&client(&server), &request()).await;
    assert!(matches!(result, Err(LlmError::Stream(ref m)) if m.contains("message_stop")), "{result:?}");
}

#[tokio::test]
async fn list_models_sends_the_key_and_version() {
    let server = ScriptedServer::start([]).await.unwrap();
    server.set_models(["claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"]);
    let models = client(&server).list_models().await.unwrap();
    assert_eq!(models, vec!["claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"]);
    let requests = server.wait_for_requests(1, Duration::from_secs(10)).await;
    assert_eq!((requests[0].method.as_str(), requests[0].path.as_str()), ("GET", "/v1/models"));
    assert_eq!(requests[0].header("x-api-key"), Some(KEY));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
}

// ---------------------------------------------------------------------------------------
// the request body
// ---------------------------------------------------------------------------------------

fn tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "description": format!("the {name} tool"),
           "parameters": {"type": "object", "properties": {}}}})
}

#[tokio::test]
async fn the_exact_request_body_with_thinking_tool_results_and_breakpoints() {
    let server = ScriptedServer::start([text_answer("ok")]).await.unwrap();
    let client =
        AnthropicClient::new(settings(&server), MessagesOptions { max_tokens: 4096, thinking_budget: 2048 }).unwrap();
    let mut answer = ChatMessage::assistant(
        "Looking at both.",
        vec![
            ToolCall::new("toolu_a", "read_file", r#"{"path":"a.rs"}"#),
            ToolCall::new("toolu_b", "search_files", r#"{"pattern":"fn main"}"#),
        ],
    );
    answer.thinking = expected_rich().thinking;
    let messages = vec![
        ChatMessage::system("You are Talaria."),
        ChatMessage::user("look at a.rs and main"),
        answer,
        ChatMessage::tool("toolu_a", r#"{"output":"fn a() {}"}"#),
        ChatMessage::tool("toolu_b", r#"{"output":"src/main.rs:1"}"#),
        ChatMessage::user("[OUT-OF-BAND USER MESSAGE]\nalso b.rs\n[/OUT-OF-BAND USER MESSAGE]"),
    ];
    let request = ChatRequest {
        tools: vec![tool("read_file"), tool("search_files")],
        temperature: Some(0.2),
        ..ChatRequest::owned(MODEL, messages)
    };
    let (_, result) = chat(&client, &request).await;
    assert_eq!(result.unwrap().content, "ok");
    let sent = &message_requests(&server)[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
    let cache = json!({"type": "ephemeral"});
    assert_eq!(
        sent.body,
        json!({
            "model": MODEL,
            "max_tokens": 4096,
            "stream": true,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "system": [{"type": "text", "text": "You are Talaria.", "cache_control": cache}],
            "tools": [
                {"name": "read_file", "description": "the read_file tool",
                 "input_schema": {"type": "object", "properties": {}}},
                {"name": "search_files", "description": "the search_files tool",
                 "input_schema": {"type": "object", "properties": {}}, "cache_control": cache},
            ],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "look at a.rs and main", "cache_control": cache}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Two files to look at ✓.", "signature": "sig-Eq=="},
                    {"type": "text", "text": "Looking at both."},
                    {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "a.rs"}},
                    {"type": "tool_use", "id": "toolu_b", "name": "search_files", "input": {"pattern": "fn main"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": r#"{"output":"fn a() {}"}"#},
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": r#"{"output":"src/main.rs:1"}"#},
                    {"type": "text", "text": "[OUT-OF-BAND USER MESSAGE]\nalso b.rs\n[/OUT-OF-BAND USER MESSAGE]",
                     "cache_control": cache},
                ]},
            ],
        })
    );
}

/// Where the `cache_control` marks are: (tools, system, indexes of marked messages).
fn breakpoints(body: &Value) -> (Vec<usize>, usize, Vec<usize>) {
    let marked = |blocks: &Value| -> Vec<usize> {
        blocks
            .as_array()
            .map(|a| a.iter().enumerate().filter(|(_, b)| b.get("cache_control").is_some()).map(|(i, _)| i).collect())
            .unwrap_or_default()
    };
    let system = marked(&body["system"]).len();
    let messages = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, m)| !marked(&m["content"]).is_empty())
        .map(|(i, _)| i)
        .collect();
    (marked(&body["tools"]), system, messages)
}

// ---------------------------------------------------------------------------------------
// the engine on the Anthropic provider
// ---------------------------------------------------------------------------------------

struct Session {
    running: inproc::Running,
    server: ScriptedServer,
    _home: tempfile::TempDir,
}

async fn session_on(server: ScriptedServer, options: MessagesOptions) -> Session {
    let home = tempfile::tempdir().unwrap();
    let settings = ClientSettings::new(server.base_url())
        .api_key(KEY)
        .max_retries(0)
        .timeouts(Duration::from_secs(10), Duration::from_secs(60));
    let provider = Arc::new(AnthropicClient::new(settings, options).unwrap());
    let running = inproc::start_provider(home.path(), provider, MODEL, SessionChoice::New, Config::default()).await;
    Session { running, server, _home: home }
}

async fn session(responses: Vec<ScriptedResponse>) -> Session {
    session_on(ScriptedServer::start(responses).await.unwrap(), MessagesOptions::default()).await
}

impl Session {
    fn submit(&self, text: &str, mode: Option<BusyMode>) {
        self.running.send(Op::Submit { text: text.into(), mode });
    }

    async fn outcome(&mut self) -> TurnOutcome {
        match self.running.turn_finished().await {
            Event::TurnFinished { outcome } => outcome,
            _ => unreachable!(),
        }
    }

    /// The messages of request `n` (1-based).
    async fn messages(&self, n: usize) -> Vec<Value> {
        self.body(n).await["messages"].as_array().unwrap().clone()
    }

    async fn body(&self, n: usize) -> Value {
        let deadline = Instant::now() + inproc::DEADLINE;
        while message_requests(&self.server).len() < n {
            assert!(Instant::now() < deadline, "only {} requests arrived", message_requests(&self.server).len());
            self.server.wait_for_requests(self.server.request_count() + 1, Duration::from_millis(200)).await;
        }
        message_requests(&self.server)[n - 1].body.clone()
    }

    async fn streamed(&mut self, text: &str) {
        let mut got = String::new();
        while !got.ends_with(text) {
            if let Event::AssistantDelta(d) =
                self.running.wait_for("an assistant delta", |e| matches!(e, Event::AssistantDelta(_))).await
            {
                got.push_str(&d);
            }
        }
    }

    async fn tool_printed(&mut self, call_id: &str, text: &str) {
        let mut got = String::new();
        while !got.contains(text) {
            let event = self
                .running
                .wait_for("tool output", |e| matches!(e, Event::ToolOutput { call_id: c, .. } if c == call_id))
                .await;
            if let Event::ToolOutput { chunk, .. } = event {
                got.push_str(&chunk);
            }
        }
    }

    async fn tool_finished(&mut self, call_id: &str) -> Value {
        let event = self
            .running
            .wait_for("ToolFinished", |e| matches!(e, Event::ToolFinished { call_id: c, .. } if c == call_id))
            .await;
        match event {
            Event::ToolFinished { outcome, .. } => serde_json::from_str(&outcome.result).unwrap(),
            _ => unreachable!(),
        }
    }
}

fn cache() -> Value {
    json!({"type": "ephemeral"})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}]})
}

fn user_cached(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text, "cache_control": cache()}]})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}]})
}

fn terminal(command: &str) -> Value {
    json!({"command": command})
}

#[tokio::test(flavor = "multi_thread")]
async fn thinking_and_two_tool_calls_go_back_with_both_results_in_one_user_message() {
    let first = stream(answer(
        start_usage(10, 0, 0),
        vec![
            thinking_block(0, "Run both.", "sig-1", 4),
            text_block(1, "Running.", 3),
            tool_use_block(2, "toolu_a", "terminal", &terminal("echo alpha"), 6),
            tool_use_block(3, "toolu_b", "terminal", &terminal("echo beta"), 6),
        ],
        "tool_use",
        40,
    ));
    let server = ScriptedServer::start([first, text_answer("Both ran.")]).await.unwrap();
    let mut s = session_on(server, MessagesOptions { max_tokens: 4096, thinking_budget: 2048 }).await;
    s.submit("run both", None);
    assert_eq!(s.outcome().await, TurnOutcome::Completed);
    let body = s.body(2).await;
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    let messages = body["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(messages[0], user_cached("run both"));
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Run both.", "signature": "sig-1"},
            {"type": "text", "text": "Running."},
            {"type": "tool_use", "id": "toolu_a", "name": "terminal", "input": {"command": "echo alpha"}},
            {"type": "tool_use", "id": "toolu_b", "name": "terminal", "input": {"command": "echo beta"}},
        ]})
    );
    let results = messages[2]["content"].as_array().unwrap();
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(results.len(), 2, "{results:#?}");
    for (block, (id, output)) in results.iter().zip([("toolu_a", "alpha\n"), ("toolu_b", "beta\n")]) {
        assert_eq!((block["type"].as_str(), block["tool_use_id"].as_str()), (Some("tool_result"), Some(id)));
        let content: Value = serde_json::from_str(block["content"].as_str().unwrap()).unwrap();
        assert_eq!(content["output"], output);
    }
    assert_eq!(results[0].get("cache_control"), None);
    assert_eq!(results[1]["cache_control"], cache());
    // The tools and the system prompt carry the other two breakpoints.
    assert_eq!(breakpoints(&body), (vec![body["tools"].as_array().unwrap().len() - 1], 1, vec![0, 2]));
    s.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn breakpoints_move_forward_as_the_conversation_grows() {
    let mut s = session(vec![text_answer("one"), text_answer("two"), text_answer("three")]).await;
    for text in ["first", "second", "third"] {
        s.submit(text, None);
        assert_eq!(s.outcome().await, TurnOutcome::Completed);
    }
    let tools = s.body(1).await["tools"].as_array().unwrap().len();
    assert!(tools > 0);
    assert_eq!(breakpoints(&s.body(1).await), (vec![tools - 1], 1, vec![0]));
    assert_eq!(breakpoints(&s.body(2).await), (vec![tools - 1], 1, vec![0, 2]));
    assert_eq!(breakpoints(&s.body(3).await), (vec![tools - 1], 1, vec![2, 4]));
    assert_eq!(
        s.messages(3).await,
        vec![user("first"), assistant("one"), user_cached("second"), assistant("two"), user_cached("third")]
    );
    s.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn redirect_while_streaming_aborts_keeps_the_partial_text_and_drops_the_partial_tool_call() {
    let mut first = answer(start_usage(10, 0, 0), vec![text_block(0, "Let me look", 4)], "end_turn", 5);
    first.truncate(1 + 1 + 4); // message_start, ping, block start, three text deltas
    first.extend(tool_use_block(1, "toolu_half", "terminal", &terminal("rm -rf build"), 10).into_iter().take(2));
    let n = first.len();
    let mut s = session(vec![stream(first).stall_after(n), text_answer("Looking at src instead.")]).await;
    s.submit("go", None);
    s.streamed("Let me look").await;
    s.submit("no, look at src", Some(BusyMode::Redirect));
    assert_eq!(s.outcome().await, TurnOutcome::Completed);
    assert_eq!(s.messages(2).await, vec![user_cached("go"), assistant("Let me look"), user_cached("no, look at src")]);
    assert_eq!(message_requests(&s.server).len(), 2);
    s.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_while_a_command_runs_kills_it_and_answers_every_tool_use() {
    let mut s = session(vec![
        tool_answer(&[
            ("toolu_fg", "terminal", terminal("echo pid=$$; sleep 3001717")),
            ("toolu_next", "terminal", terminal("echo never")),
        ]),
        text_answer("Starting over."),
    ])
    .await;
    s.submit("go", None);
    s.tool_printed("toolu_fg", "pid=").await;
    s.submit("a steer", Some(BusyMode::Steer));
    s.running.send(Op::Interrupt);
    let fg = s.tool_finished("toolu_fg").await;
    let pid: i32 =
        fg["output"].as_str().unwrap().trim_start_matches("pid=").split('\n').next().unwrap().parse().unwrap();
    assert_eq!((fg["exit_code"].clone(), fg["status"].clone()), (json!(130), json!("interrupted")));
    let next = s.tool_finished("toolu_next").await;
    assert_eq!((next["exit_code"].clone(), next["output"].clone()), (json!(130), json!("[Command interrupted]")));
    assert_eq!(s.outcome().await, TurnOutcome::Interrupted);
    assert_eq!(
        s.running.wait_for("RestoreInput", |e| matches!(e, Event::RestoreInput { .. })).await,
        Event::RestoreInput { text: "a steer".into() }
    );
    let deadline = Instant::now() + inproc::DEADLINE;
    while group::group_alive(pid) {
        assert!(Instant::now() < deadline, "process group {pid} is still alive");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    s.submit("next", None);
    assert_eq!(s.outcome().await, TurnOutcome::Completed);
    let messages = s.messages(2).await;
    assert_eq!(messages.len(), 3, "{messages:#?}");
    let uses: Vec<&str> = messages[1]["content"].as_array().unwrap().iter().filter_map(|b| b["id"].as_str()).collect();
    assert_eq!(uses, vec!["toolu_fg", "toolu_next"]);
    // Both results and the next message in one user message, results first.
    let blocks = messages[2]["content"].as_array().unwrap();
    let kinds: Vec<(&str, Option<&str>)> =
        blocks.iter().map(|b| (b["type"].as_str().unwrap(), b["tool_use_id"].as_str())).collect();
    assert_eq!(kinds, vec![("tool_result", Some("toolu_fg")), ("tool_result", Some("toolu_next")), ("text", None)]);
    assert_eq!(blocks[2]["text"], "next");
    s.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mid_stream_error_ends_the_turn_and_the_partial_answer_is_kept() {
    let mut events = vec![message_start(start_usage(5, 0, 0)), ping()];
    events.extend(text_block(0, "Partial answer", 4).into_iter().take(4));
    events.push(error_event("api_error", "Internal server error"));
    let mut s = session(vec![stream(events), text_answer("Recovered.")]).await;
    s.submit("first", None);
    assert_eq!(s.outcome().await, TurnOutcome::Failed);
    let seen = s.running.seen.clone();
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::Notice { text, .. } if text.contains("api_error: Internal server error"))),
        "{seen:#?}"
    );
    s.submit("again", None);
    assert_eq!(s.outcome().await, TurnOutcome::Completed);
    assert_eq!(s.messages(2).await, vec![user_cached("first"), assistant("Partial answ"), user_cached("again")]);
    s.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_max_tokens_stop_is_a_visible_note() {
    let cut = stream(answer(start_usage(10, 0, 0), vec![text_block(0, "A long story that", 5)], "max_tokens", 8192));
    let mut s = session(vec![cut]).await;
    s.submit("tell me a story", None);
    let note = s.running.notice("output token limit").await;
    assert!(note.contains("model.max_tokens"), "{note}");
    assert_eq!(s.outcome().await, TurnOutcome::Completed);
    s.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_shows_cache_tokens_and_the_cost_and_model_lists_anthropic_models() {
    let first = stream(answer(start_usage(100, 2000, 300), vec![text_block(0, "Hi.", 4)], "end_turn", 50));
    let mut s = session(vec![first]).await;
    s.server.set_models(["claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"]);
    s.submit("hello", None);
    let usage = s.running.wait_for("Usage", |e| matches!(e, Event::Usage { .. })).await;
    // 100 × $3 + 2000 × $0.30 + 300 × $3.75 + 50 × $15, per million tokens.
    let Event::Usage { prompt_tokens, completion_tokens, cache_read_tokens, cache_write_tokens, cost_usd, .. } = usage
    else {
        unreachable!()
    };
    assert_eq!((prompt_tokens, completion_tokens, cache_read_tokens, cache_write_tokens), (2400, 50, 2000, 300));
    assert!((cost_usd.unwrap() - 0.002775).abs() < 1e-12, "{cost_usd:?}");
    assert_eq!(s.outcome().await, TurnOutcome::Completed);

    s.running.send(Op::Command(SlashCommand::Usage));
    let text = s.running.notice("this run:").await;
    let line = "2,400 in (2,000 cache read, 300 cache write) / 50 out · $0.0028";
    let all_runs = "this session (all runs): 2,400 in / 50 out";
    assert!(text.contains(&format!("{all_runs} · this run: {line} · last turn: {line}")), "{text}");

    s.running.send(Op::Command(SlashCommand::Model(None)));
    let text = s.running.notice("available:").await;
    assert!(text.contains("claude-sonnet-4-5-20250929, claude-haiku-4-5-20251001"), "{text}");
    let listed = s.server.requests().into_iter().find(|r| r.method == "GET").expect("GET /v1/models");
    assert_eq!(listed.header("x-api-key"), Some(KEY));
    s.running.shutdown().await;
}

/// The API splits the cache writes by lifetime (`usage.cache_creation`); the 1-hour ones are
/// counted apart and priced at 2 × input, and `/usage` names them.
#[tokio::test(flavor = "multi_thread")]
async fn one_hour_cache_writes_are_counted_apart_and_priced_at_twice_the_input() {
    let first = stream(answer(split_start_usage(100, 2000, 500, 300), vec![text_block(0, "Hi.", 4)], "end_turn", 50));
    let mut s = session(vec![first]).await;
    s.submit("hello", None);
    let usage = s.running.wait_for("Usage", |e| matches!(e, Event::Usage { .. })).await;
    let Event::Usage { prompt_tokens, cache_write_tokens, cache_write_1h_tokens, cost_usd, .. } = usage else {
        unreachable!()
    };
    assert_eq!((prompt_tokens, cache_write_tokens, cache_write_1h_tokens), (2600, 500, 300));
    // 100 × $3 + 2000 × $0.30 + 200 × $3.75 + 300 × $6 + 50 × $15, per million tokens.
    assert!((cost_usd.unwrap() - 0.0042).abs() < 1e-12, "{cost_usd:?}");
    assert_eq!(s.outcome().await, TurnOutcome::Completed);
    s.running.send(Op::Command(SlashCommand::Usage));
    let text = s.running.notice("this run:").await;
    let line = "2,600 in (2,000 cache read, 500 cache write, 300 of them 1-hour) / 50 out · $0.0042";
    assert!(text.contains(&format!("this run: {line} · last turn: {line}")), "{text}");
    s.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unpriced_model_shows_tokens_only() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([text_answer("Hi.")]).await.unwrap();
    let settings = ClientSettings::new(server.base_url()).api_key(KEY).max_retries(0);
    let provider = Arc::new(AnthropicClient::new(settings, MessagesOptions::default()).unwrap());
    let mut running =
        inproc::start_provider(home.path(), provider, "claude-next-unknown", SessionChoice::New, Config::default())
            .await;
    running.send(Op::Submit { text: "hello".into(), mode: None });
    running.turn_finished().await;
    running.send(Op::Command(SlashCommand::Usage));
    let text = running.notice("this run:").await;
    let expected = "this session (all runs): 10 in / 5 out · this run: 10 in / 5 out · last turn: 10 in / 5 out";
    assert!(text.contains(expected), "{text}");
    assert!(text.contains("tokens only") && !text.contains('$'), "{text}");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn compact_summarises_through_the_messages_api_and_the_summary_leads_the_next_request() {
    let mut s = session(vec![
        text_answer("one"),
        text_answer("two"),
        text_answer("three"),
        text_answer("Goals: count to four."),
        text_answer("four"),
    ])
    .await;
    for text in ["first", "second", "third"] {
        s.submit(text, None);
        assert_eq!(s.outcome().await, TurnOutcome::Completed);
    }
    s.running.send(Op::Command(SlashCommand::Compact(None)));
    s.running.notice("context compacted").await;
    let summary_request = s.body(4).await;
    assert_eq!(summary_request.get("tools"), None, "the summary request offers no tools");
    assert_eq!(summary_request["temperature"], json!(0.0));
    assert_eq!(summary_request["system"].as_array().map(Vec::len), Some(1));
    s.submit("fourth", None);
    assert_eq!(s.outcome().await, TurnOutcome::Completed);
    let messages = s.messages(5).await;
    // The summary (a user message) and the first kept user turn merge into one user message.
    let first = messages[0]["content"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(first[0]["text"], format!("{SUMMARY_HEADER}\nGoals: count to four."));
    assert_eq!(first[1]["text"], "second");
    assert_eq!(&messages[1..], &[assistant("two"), user_cached("third"), assistant("three"), user_cached("fourth")]);
    s.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_goal_is_worked_and_judged_through_the_messages_api() {
    let mut s = session(vec![
        tool_answer(&[("toolu_w", "write_file", json!({"path": "done.txt", "content": "ok\n"}))]),
        text_answer("Created done.txt."),
        text_answer(r#"{"verdict":"done","reason":"the file exists"}"#),
    ])
    .await;
    s.running.send(Op::Command(SlashCommand::Goal(GoalCmd::Set("create done.txt".into()))));
    let achieved = s.running.notice("goal achieved").await;
    assert_eq!(achieved, "✓ goal achieved: create done.txt — the file exists");
    assert_eq!(std::fs::read_to_string(s.running.work.join("done.txt")).unwrap(), "ok\n");
    let judge = s.body(3).await;
    assert_eq!(judge.get("tools"), None, "the judge is offered no tools");
    assert_eq!(judge["temperature"], json!(0.0));
    // The judge's verdict stays out of the conversation.
    s.running.collect_for(Duration::from_millis(500)).await;
    assert_eq!(message_requests(&s.server).len(), 3);
    s.running.shutdown().await;
}

/// A long agent session on the cache model: every turn runs a command and answers. The
/// numbers printed here are the README's caching example.
#[tokio::test(flavor = "multi_thread")]
async fn caching_saves_most_of_the_input_cost_of_a_long_session() {
    const TURNS: usize = 15;
    let (server, billed) = cached_server(|_, request| {
        let last = request.body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or(Value::Null);
        let after_tool = last["content"].as_array().is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
        if after_tool {
            (
                vec![text_block(0, &"The command printed what we expected, so that step is done. ".repeat(3), 40)],
                "end_turn",
                60,
            )
        } else {
            let n = request.body["messages"].as_array().map_or(0, Vec::len);
            let input = json!({"command": format!("echo step {n}; seq 1 40")});
            (vec![tool_use_block(0, &format!("toolu_{n}"), "terminal", &input, 40)], "tool_use", 40)
        }
    })
    .await;
    let mut s = session_on(server, MessagesOptions::default()).await;
    for turn in 1..=TURNS {
        s.submit(&format!("Step {turn}: run the next check and tell me how it went."), None);
        assert_eq!(s.outcome().await, TurnOutcome::Completed);
    }
    let usages = billed.lock().unwrap().clone();
    assert_eq!(usages.len(), 2 * TURNS);
    for (i, u) in usages.iter().enumerate().skip(1) {
        assert!(u.cache_read > 0, "request {} read nothing from the cache: {u:?}", i + 1);
    }
    let sum = |f: fn(&CacheUsage) -> u64| usages.iter().map(f).sum::<u64>();
    let (input, read, write, total) =
        (sum(|u| u.input), sum(|u| u.cache_read), sum(|u| u.cache_write), sum(CacheUsage::total));
    // Sonnet prices per million tokens: input $3, cache read $0.30, cache write $3.75.
    let cached_cost = (input as f64 * 3.0 + read as f64 * 0.3 + write as f64 * 3.75) / 1e6;
    let uncached_cost = total as f64 * 3.0 / 1e6;
    eprintln!(
        "{} requests: {total} input tokens = {read} cache read + {write} cache write + {input} uncached; \
         input cost ${cached_cost:.4} with caching vs ${uncached_cost:.4} without ({:.0}% saved)",
        usages.len(),
        100.0 * (1.0 - cached_cost / uncached_cost)
    );
    assert!(cached_cost < uncached_cost * 0.35, "caching saved too little: {cached_cost} vs {uncached_cost}");
    // The session's own accounting agrees with what the server billed.
    s.running.send(Op::Command(SlashCommand::Usage));
    let text = s.running.notice("this run:").await;
    assert!(text.contains(&format!("({} cache read, ", thousands(read))), "{text}");
    s.running.shutdown().await;
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `--provider anthropic` for one run, through the binary: the Messages wire, the key from
/// `api_key_env` only, and the cost in `exec --json`'s usage events.
#[tokio::test(flavor = "multi_thread")]
async fn the_provider_flag_switches_one_run_to_the_messages_api() {
    let server = ScriptedServer::start([stream(answer(
        start_usage(1000, 0, 0),
        vec![text_block(0, "Hello from the Messages API.", 6)],
        "end_turn",
        10,
    ))])
    .await
    .unwrap();
    let home = common::Home::new();
    home.write_config("[model]\napi_key_env = \"TALARIA_TEST_ANT_KEY\"\n");
    let run = home
        .command()
        .env("TALARIA_TEST_ANT_KEY", KEY)
        .env("OPENAI_API_KEY", "sk-openai-must-not-leak")
        .args(["exec", "--json", "--provider", "anthropic", "--base-url", &server.base_url(), "--model", MODEL, "hi"])
        .stdin(std::process::Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run).await.expect("exec finishes").expect("exec runs");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", common::stderr(&out));
    let events: Vec<Value> =
        common::stdout(&out).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let usage = events.iter().find(|e| e["type"] == "Usage").expect("a Usage event");
    // 1000 input tokens × $3 + 10 output tokens × $15, per million.
    assert_eq!(usage["data"]["prompt_tokens"], 1000);
    assert!((usage["data"]["cost_usd"].as_f64().unwrap() - 0.00315).abs() < 1e-12, "{usage}");
    let done = events.iter().find(|e| e["type"] == "AssistantDone").expect("the answer");
    assert_eq!(done["data"]["text"], "Hello from the Messages API.");
    let sent = message_requests(&server);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].header("x-api-key"), Some(KEY));
    assert_eq!(sent[0].header("authorization"), None);
    assert_eq!(sent[0].body["model"], MODEL);

    // Without --json the run ends with what it used and cost, on stderr.
    server.push(text_answer("Again."));
    let run = home
        .command()
        .env("TALARIA_TEST_ANT_KEY", KEY)
        .args(["exec", "--provider", "anthropic", "--base-url", &server.base_url(), "--model", MODEL, "hi"])
        .stdin(std::process::Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run).await.expect("exec finishes").expect("exec runs");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", common::stderr(&out));
    assert_eq!(common::stdout(&out).trim(), "Again.");
    // 10 × $3 + 5 × $15 per million tokens.
    assert!(common::stderr(&out).contains("talaria: this run: 10 in / 5 out · $0.0001\n"), "{}", common::stderr(&out));

    // 1-hour cache writes are named in that summary and priced at 2 × input.
    server.push(stream(answer(
        split_start_usage(100, 2000, 500, 300),
        vec![text_block(0, "Third.", 4)],
        "end_turn",
        50,
    )));
    let run = home
        .command()
        .env("TALARIA_TEST_ANT_KEY", KEY)
        .args(["exec", "--provider", "anthropic", "--base-url", &server.base_url(), "--model", MODEL, "hi"])
        .stdin(std::process::Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run).await.expect("exec finishes").expect("exec runs");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", common::stderr(&out));
    // 100 × $3 + 2000 × $0.30 + 200 × $3.75 + 300 × $6 + 50 × $15 per million tokens.
    let summary =
        "talaria: this run: 2,600 in (2,000 cache read, 500 cache write, 300 of them 1-hour) / 50 out · $0.0042\n";
    assert!(common::stderr(&out).contains(summary), "{}", common::stderr(&out));
}
