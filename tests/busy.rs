//! Typing while the agent works (DESIGN §3), end to end through the engine: every cell of
//! the redirect / steer / queue × streaming / tools table, Ctrl+B, interrupts, the
//! out-of-band wrapper, `process wait` release, job exit notifications and tool panics.
//! The model is the scripted loopback server; the requests it receives are the proof.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use talaria::config::Config;
use talaria::engine::approval::{Approver, PromptPolicy};
use talaria::engine::context::ContextMeter;
use talaria::engine::history::wrap_out_of_band;
use talaria::engine::jobs::{group, JobsHandle, JobsOptions, SupervisorExe};
use talaria::engine::llm::client::{ClientSettings, OpenAiClient};
use talaria::engine::store::Store;
use talaria::engine::tools::terminal::YIELD_NOTE;
use talaria::engine::tools::{Concurrency, Registry, Tool, ToolCtx, ToolResult};
use talaria::engine::turn::{run_turn, TurnControl, TurnEnv, TurnInput};
use talaria::engine::{EngineOptions, EventSink, SessionChoice};
use talaria::paths::Paths;
use talaria::protocol::{Approval, BusyMode, Event, JobStatus, Op, TurnOutcome, TurnTrigger};
use talaria::testkit::scripted::{finish_chunk, text_chunks, tool_call_chunks, ScriptedResponse, ScriptedServer, DONE};
use tokio::sync::mpsc;

/// Generous: these are deadlines for things that take milliseconds, never timing assertions.
const WAIT: Duration = Duration::from_secs(30);
/// Pause between the pieces of a "slow" stream: a message sent after its first delta
/// reaches the engine long before the stream ends (about a second later).
const PIECE_DELAY: Duration = Duration::from_millis(80);

struct Harness {
    _home: tempfile::TempDir,
    work: PathBuf,
    server: ScriptedServer,
    ops: mpsc::UnboundedSender<Op>,
    events: mpsc::UnboundedReceiver<Event>,
    /// Every event received so far, in order.
    seen: Vec<Event>,
}

impl Harness {
    async fn start(responses: Vec<ScriptedResponse>) -> Harness {
        Harness::start_with(responses, PromptPolicy::AllowUnattended).await
    }

    async fn start_with(responses: Vec<ScriptedResponse>, approval_policy: PromptPolicy) -> Harness {
        let home = tempfile::tempdir().expect("tempdir");
        let work = home.path().join("work");
        std::fs::create_dir_all(&work).expect("work dir");
        let work = work.canonicalize().expect("canonical work dir");
        let paths = Paths::under(&home.path().join("talaria-home"));
        paths.ensure_dirs().expect("dirs");
        let server = ScriptedServer::start(responses).await.expect("scripted server");
        let provider = OpenAiClient::new(ClientSettings::new(server.base_url())).expect("client");
        // The approval tests (PromptPolicy::Ask) need a command that asks: "prompt" mode. In
        // the default "auto" mode a sandboxed `rm -rf scratch` simply runs.
        let mut config = Config::default();
        if approval_policy == PromptPolicy::Ask {
            config.approvals.mode = talaria::config::ApprovalMode::Prompt;
        }
        let options = EngineOptions {
            config: Arc::new(config),
            store: Store::open(&paths.state_db).expect("store"),
            paths,
            provider: Arc::new(provider),
            model: "m".into(),
            provider_label: "scripted".into(),
            demo: false,
            session: SessionChoice::New,
            cwd: work.clone(),
            approval_policy,
            reaper: false,
            inherited_sandbox: None,
        };
        let (handle, _join) = talaria::engine::start(options).await.expect("engine starts");
        let mut h = Harness { _home: home, work, server, ops: handle.ops, events: handle.events, seen: Vec::new() };
        h.until("session ready", |e| matches!(e, Event::SessionReady { .. })).await;
        h
    }

    fn op(&self, op: Op) {
        self.ops.send(op).expect("engine is running");
    }

    fn submit(&self, text: &str, mode: Option<BusyMode>) {
        self.op(Op::Submit { text: text.into(), mode });
    }

    /// The next event matching `pred` (events before it are kept in `seen`).
    async fn until(&mut self, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) => {
                    self.seen.push(event.clone());
                    if pred(&event) {
                        return event;
                    }
                }
                Ok(None) => panic!("the engine stopped while waiting for {what}; seen: {:#?}", self.seen),
                Err(_) => panic!("no {what} within {WAIT:?}; seen: {:#?}", self.seen),
            }
        }
    }

    async fn turn_finished(&mut self) -> TurnOutcome {
        match self.until("TurnFinished", |e| matches!(e, Event::TurnFinished { .. })).await {
            Event::TurnFinished { outcome } => outcome,
            _ => unreachable!(),
        }
    }

    async fn turn_started(&mut self) -> TurnTrigger {
        match self.until("TurnStarted", |e| matches!(e, Event::TurnStarted { .. })).await {
            Event::TurnStarted { trigger } => trigger,
            _ => unreachable!(),
        }
    }

    /// Wait until the assistant has streamed `text` (all deltas so far, concatenated).
    async fn streamed(&mut self, text: &str) {
        let mut got = String::new();
        while !got.ends_with(text) {
            if let Event::AssistantDelta(d) =
                self.until("an assistant delta", |e| matches!(e, Event::AssistantDelta(_))).await
            {
                got.push_str(&d);
            }
        }
    }

    /// Wait until the foreground command of `call_id` has printed `text`.
    async fn tool_printed(&mut self, call_id: &str, text: &str) {
        let mut got = String::new();
        while !got.contains(text) {
            let event =
                self.until("tool output", |e| matches!(e, Event::ToolOutput { call_id: c, .. } if c == call_id)).await;
            if let Event::ToolOutput { chunk, .. } = event {
                got.push_str(&chunk);
            }
        }
    }

    /// What waits, as the pending line shows it: the pending messages, then the queued.
    async fn pending_is(&mut self, waiting: &[&str]) {
        let want: Vec<String> = waiting.iter().map(|s| s.to_string()).collect();
        let shown = |pending: &[String], queued: &[String]| pending.iter().chain(queued).cloned().collect::<Vec<_>>();
        self.until(
            "PendingChanged",
            |e| matches!(e, Event::PendingChanged { pending, queued } if shown(pending, queued) == want),
        )
        .await;
    }

    async fn tool_finished(&mut self, call_id: &str) -> Value {
        let event =
            self.until("ToolFinished", |e| matches!(e, Event::ToolFinished { call_id: c, .. } if c == call_id)).await;
        match event {
            Event::ToolFinished { outcome, .. } => serde_json::from_str(&outcome.result).expect("tool result is JSON"),
            _ => unreachable!(),
        }
    }

    /// The conversation of chat request `n` (1-based), system prompt checked and left out.
    async fn request(&self, n: usize) -> Vec<Value> {
        let requests = self.server.wait_for_chat_requests(n, WAIT).await;
        assert!(requests.len() >= n, "only {} chat requests arrived, wanted {n}", requests.len());
        let messages = requests[n - 1].body["messages"].as_array().expect("messages").clone();
        assert_eq!(messages[0]["role"], "system");
        messages[1..].to_vec()
    }

    fn chat_count(&self) -> usize {
        self.server.chat_requests().len()
    }

    /// Shut the engine down; running jobs are killed.
    async fn shutdown(mut self) {
        self.op(Op::Shutdown);
        self.until("ShutdownComplete", |e| matches!(e, Event::ShutdownComplete)).await;
    }
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn oob(messages: &[&str]) -> Value {
    let messages: Vec<String> = messages.iter().map(|s| s.to_string()).collect();
    user(&wrap_out_of_band(&messages))
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

fn assistant_calls(text: Option<&str>, calls: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    let mut v = json!({"role": "assistant", "tool_calls": calls});
    if let Some(text) = text {
        v["content"] = json!(text);
    }
    v
}

/// The tool message for `id`, its JSON content parsed.
fn tool_result(messages: &[Value], id: &str) -> Value {
    let found: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool" && m["tool_call_id"] == id).collect();
    assert_eq!(found.len(), 1, "exactly one result for {id} in {messages:#?}");
    serde_json::from_str(found[0]["content"].as_str().expect("content")).expect("tool content is JSON")
}

/// Every `tool_calls` entry is answered by exactly one tool message, right after it.
fn assert_valid_history(messages: &[Value]) {
    let mut i = 0;
    while i < messages.len() {
        let ids: Vec<&str> = messages[i]["tool_calls"]
            .as_array()
            .map(|calls| calls.iter().map(|c| c["id"].as_str().expect("call id")).collect())
            .unwrap_or_default();
        for (k, id) in ids.iter().enumerate() {
            let m = messages.get(i + 1 + k).unwrap_or_else(|| panic!("no result for {id} in {messages:#?}"));
            assert_eq!((&m["role"], m["tool_call_id"].as_str()), (&json!("tool"), Some(*id)), "{messages:#?}");
        }
        i += 1 + ids.len();
    }
}

/// A response calling these tools (in this order), arguments split across chunks.
fn calls(list: &[(&str, &str, Value)]) -> ScriptedResponse {
    let mut payloads = Vec::new();
    for (index, (id, name, args)) in list.iter().enumerate() {
        payloads.extend(tool_call_chunks(index, id, name, &args.to_string(), 12));
    }
    payloads.push(finish_chunk("tool_calls"));
    payloads.push(DONE.to_string());
    ScriptedResponse::sse(payloads)
}

/// Text streamed slowly, then (optionally) tool calls.
fn slow(text: &str, tools: &[(&str, &str, Value)]) -> ScriptedResponse {
    let mut payloads = text_chunks(text, 2);
    for (index, (id, name, args)) in tools.iter().enumerate() {
        payloads.extend(tool_call_chunks(index, id, name, &args.to_string(), 12));
    }
    payloads.push(finish_chunk(if tools.is_empty() { "stop" } else { "tool_calls" }));
    payloads.push(DONE.to_string());
    ScriptedResponse::sse(payloads).delay(PIECE_DELAY)
}

/// `text` streamed, then silence with the connection open: only the user can end it.
fn stalled(text: &str) -> ScriptedResponse {
    let payloads = text_chunks(text, 4);
    let n = payloads.len();
    ScriptedResponse::sse(payloads).stall_after(n)
}

fn terminal(command: &str) -> Value {
    json!({ "command": command })
}

/// A foreground command that prints `started` and then runs until killed.
const FOREVER: &str = "echo started; sleep 300";

/// A command that prints `started`, waits for `file` to exist, prints `done`.
fn until_file(file: &str) -> String {
    format!("echo started; while [ ! -e {file} ]; do sleep 0.02; done; echo done")
}

fn pid_of(result: &Value) -> i32 {
    result["pid"].as_i64().unwrap_or_else(|| panic!("no pid in {result}")) as i32
}

/// The result's `pid` field replaced by `0`, to compare the rest exactly.
fn without_pid(mut result: Value) -> Value {
    result["pid"] = json!(0);
    result
}

async fn assert_gone(pgid: i32) {
    let start = Instant::now();
    while group::group_alive(pgid) {
        assert!(start.elapsed() < WAIT, "process group {pgid} is still alive");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------
// redirect / steer / queue × during model streaming
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn redirect_while_streaming_aborts_keeps_the_partial_text_and_drops_partial_tool_calls() {
    // The stream sends some text and the start of a tool call, then goes silent: only the
    // redirect can move the turn on.
    let mut first = text_chunks("Let me look", 4);
    first.extend(tool_call_chunks(0, "call_half", "terminal", r#"{"command":"rm -rf build"}"#, 10).into_iter().take(2));
    let n = first.len();
    let mut h = Harness::start(vec![
        ScriptedResponse::sse(first).stall_after(n),
        ScriptedResponse::text("Looking at src instead."),
    ])
    .await;
    h.submit("go", None);
    h.streamed("Let me look").await;
    h.submit("no, look at src", Some(BusyMode::Redirect));
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    // A plain user message (not wrapped) after the partial text; the half tool call is gone.
    assert_eq!(h.request(2).await, vec![user("go"), assistant("Let me look"), user("no, look at src")]);
    assert_eq!(h.chat_count(), 2);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn steer_while_streaming_without_tools_becomes_the_next_turn() {
    let mut h =
        Harness::start(vec![slow("Here is a long answer to go.", &[]), ScriptedResponse::text("Got it.")]).await;
    h.submit("go", None);
    h.streamed("He").await;
    h.submit("also this", Some(BusyMode::Steer));
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    h.turn_started().await;
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    // The stream was not aborted: the whole answer is there, then the message as a plain turn.
    assert_eq!(h.request(2).await, vec![user("go"), assistant("Here is a long answer to go."), user("also this")]);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn steer_while_streaming_is_delivered_after_the_next_tool_results() {
    let args = terminal("echo hi");
    let mut h = Harness::start(vec![
        slow("Running a command now.", &[("call_1", "terminal", args.clone())]),
        ScriptedResponse::text("Noted."),
    ])
    .await;
    h.submit("go", None);
    h.streamed("Ru").await;
    h.submit("use verbose output", Some(BusyMode::Steer));
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    let messages = h.request(2).await;
    let result = tool_result(&messages, "call_1");
    assert_eq!(result["output"], "hi\n");
    assert_eq!(result["exit_code"], 0);
    assert_eq!(
        messages,
        vec![
            user("go"),
            assistant_calls(Some("Running a command now."), &[("call_1", "terminal", args)]),
            messages[2].clone(),
            oob(&["use verbose output"]),
        ]
    );
    assert_eq!(h.chat_count(), 2);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_while_streaming_runs_as_the_next_turn() {
    let mut h = Harness::start(vec![slow("A slow and complete answer.", &[]), ScriptedResponse::text("Second.")]).await;
    h.submit("go", None);
    h.streamed("A ").await;
    h.submit("then this", Some(BusyMode::Queue));
    h.pending_is(&["then this"]).await;
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert_eq!(h.turn_started().await, TurnTrigger::Queued);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert_eq!(h.request(2).await, vec![user("go"), assistant("A slow and complete answer."), user("then this")]);
    h.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// redirect / steer / queue × during tool execution
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn redirect_while_a_command_runs_yields_it_to_the_background_and_delivers_the_message() {
    let mut h = Harness::start(vec![
        calls(&[("call_1", "terminal", terminal(FOREVER))]),
        ScriptedResponse::text("Looking at src."),
    ])
    .await;
    h.submit("go", None);
    h.tool_printed("call_1", "started").await;
    h.submit("look at src instead", Some(BusyMode::Redirect));
    let result = h.tool_finished("call_1").await;
    let pid = pid_of(&result);
    assert_eq!(
        without_pid(result.clone()),
        json!({
            "status": "yielded_to_background", "session_id": "job_1", "pid": 0, "output": "started\n",
            "exit_code": null, "error": null, "note": YIELD_NOTE,
        })
    );
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert!(group::group_alive(pid), "a yielded command is not killed");
    assert!(h.seen.iter().any(|e| matches!(e, Event::JobStarted { job } if job.id == "job_1" && job.background)));
    let messages = h.request(2).await;
    assert_eq!(
        messages,
        vec![
            user("go"),
            assistant_calls(None, &[("call_1", "terminal", terminal(FOREVER))]),
            json!({"role": "tool", "tool_call_id": "call_1", "content": result.to_string()}),
            oob(&["look at src instead"]),
        ]
    );
    h.shutdown().await;
    assert_gone(pid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn steer_while_a_command_runs_waits_for_its_result_without_yielding() {
    let command = until_file("release");
    let mut h = Harness::start(vec![
        calls(&[("call_1", "terminal", terminal(&command))]),
        ScriptedResponse::text("Verbose it is."),
    ])
    .await;
    h.submit("go", None);
    h.tool_printed("call_1", "started").await;
    h.submit("then run it verbose", Some(BusyMode::Steer));
    h.pending_is(&["then run it verbose"]).await;
    std::fs::write(h.work.join("release"), "").unwrap();
    let result = h.tool_finished("call_1").await;
    assert_eq!(
        result,
        json!({"output": "started\ndone\n", "exit_code": 0, "error": null, "cwd": h.work.display().to_string()})
    );
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    let messages = h.request(2).await;
    assert_eq!(messages[3..], [oob(&["then run it verbose"])]);
    assert_valid_history(&messages);
    assert!(!h.seen.iter().any(|e| matches!(e, Event::JobStarted { .. })), "nothing went to the background");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_while_a_command_runs_becomes_the_next_turn() {
    let command = until_file("release");
    let mut h = Harness::start(vec![
        calls(&[("call_1", "terminal", terminal(&command))]),
        ScriptedResponse::text("The command finished."),
        ScriptedResponse::text("Now the queued one."),
    ])
    .await;
    h.submit("go", None);
    h.tool_printed("call_1", "started").await;
    h.submit("after that, tidy up", Some(BusyMode::Queue));
    h.pending_is(&["after that, tidy up"]).await;
    std::fs::write(h.work.join("release"), "").unwrap();
    assert_eq!(h.tool_finished("call_1").await["exit_code"], 0);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert_eq!(h.turn_started().await, TurnTrigger::Queued);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    // The first turn never saw it; the second starts with it as a plain user message.
    assert_eq!(h.request(2).await.len(), 3);
    let messages = h.request(3).await;
    assert_eq!(messages[3..], [assistant("The command finished."), user("after that, tidy up")]);
    assert_valid_history(&messages);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn several_messages_typed_before_delivery_arrive_in_one_wrapper_in_order() {
    let mut h = Harness::start(vec![
        calls(&[("call_1", "terminal", terminal(FOREVER))]),
        ScriptedResponse::text("All three read."),
    ])
    .await;
    h.submit("go", None);
    h.tool_printed("call_1", "started").await;
    h.submit("one", Some(BusyMode::Steer));
    h.submit("two", Some(BusyMode::Queue));
    h.submit("three", Some(BusyMode::Steer));
    h.submit("four", Some(BusyMode::Redirect));
    assert_eq!(h.tool_finished("call_1").await["status"], "yielded_to_background");
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    let messages = h.request(2).await;
    assert_eq!(messages[3..], [oob(&["one", "three", "four"])]);
    // The queued one waits for its own turn.
    h.server.push(ScriptedResponse::text("Two."));
    assert_eq!(h.turn_started().await, TurnTrigger::Queued);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert_eq!(h.request(3).await[4..], [assistant("All three read."), user("two")]);
    h.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Ctrl+B: yield without a message
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_b_moves_the_command_to_the_background_and_the_turn_goes_on() {
    let mut h = Harness::start(vec![
        calls(&[("call_1", "terminal", terminal(FOREVER))]),
        ScriptedResponse::text("It keeps running as job_1."),
    ])
    .await;
    h.op(Op::YieldForeground);
    h.until(
        "a notice that nothing runs",
        |e| matches!(e, Event::Notice { text, .. } if text.contains("nothing is running")),
    )
    .await;
    h.submit("go", None);
    h.tool_printed("call_1", "started").await;
    h.op(Op::YieldForeground);
    let result = h.tool_finished("call_1").await;
    let pid = pid_of(&result);
    assert_eq!(result["status"], "yielded_to_background");
    assert_eq!(result["session_id"], "job_1");
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert!(group::group_alive(pid), "a yielded command is not killed");
    // No message: the tool result is the last thing the model sees.
    let messages = h.request(2).await;
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[2]["role"], "tool");
    h.shutdown().await;
    assert_gone(pid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_b_while_streaming_neither_aborts_nor_yields_the_next_command() {
    let command = until_file("release");
    let mut h = Harness::start(vec![
        slow("Running it in the foreground.", &[("call_1", "terminal", terminal(&command))]),
        ScriptedResponse::text("Done."),
    ])
    .await;
    h.submit("go", None);
    h.streamed("Ru").await;
    h.op(Op::YieldForeground);
    h.tool_printed("call_1", "started").await;
    std::fs::write(h.work.join("release"), "").unwrap();
    let result = h.tool_finished("call_1").await;
    assert_eq!((&result["exit_code"], &result["output"]), (&json!(0), &json!("started\ndone\n")));
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    let messages = h.request(2).await;
    assert_eq!(messages[1]["content"], "Running it in the foreground.");
    assert_eq!(messages.len(), 3);
    h.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Interrupt
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_while_streaming_ends_the_turn_and_gives_typed_messages_back() {
    let mut h = Harness::start(vec![stalled("Thinking about it"), ScriptedResponse::text("Fresh start.")]).await;
    h.submit("go", None);
    h.streamed("Thinking about it").await;
    h.submit("a steer", Some(BusyMode::Steer));
    h.submit("a queued one", Some(BusyMode::Queue));
    h.pending_is(&["a steer", "a queued one"]).await;
    h.op(Op::Interrupt);
    assert_eq!(h.turn_finished().await, TurnOutcome::Interrupted);
    // Typed as soon as the end shows: a new turn, not bounced back with the others.
    h.submit("next", None);
    let restored = h.until("RestoreInput", |e| matches!(e, Event::RestoreInput { .. })).await;
    assert_eq!(restored, Event::RestoreInput { text: "a steer\n\na queued one".into() });
    // Never auto-sent: the next turn is the user's next message, after the kept partial text.
    assert_eq!(h.turn_started().await, TurnTrigger::User);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert_eq!(h.request(2).await, vec![user("go"), assistant("Thinking about it"), user("next")]);
    assert_eq!(h.chat_count(), 2);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_while_a_command_runs_kills_it_and_leaves_background_jobs_alone() {
    let background = json!({"command": "sleep 300", "background": true});
    let foreground = terminal("echo pid=$$; sleep 300");
    let mut h = Harness::start(vec![
        calls(&[("call_bg", "terminal", background.clone())]),
        calls(&[("call_fg", "terminal", foreground.clone()), ("call_next", "terminal", terminal("echo never"))]),
        ScriptedResponse::text("Starting over."),
    ])
    .await;
    h.submit("go", None);
    let bg = h.tool_finished("call_bg").await;
    let bg_pid = pid_of(&bg);
    h.tool_printed("call_fg", "pid=").await;
    h.submit("a steer", Some(BusyMode::Steer));
    h.submit("a queued one", Some(BusyMode::Queue));
    h.pending_is(&["a steer", "a queued one"]).await;
    h.op(Op::Interrupt);
    let fg = h.tool_finished("call_fg").await;
    let fg_pid: i32 =
        fg["output"].as_str().unwrap().trim_start_matches("pid=").split('\n').next().unwrap().parse().unwrap();
    assert_eq!(
        fg,
        json!({
            "output": format!("pid={fg_pid}\n[Command interrupted]"), "exit_code": 130, "error": null,
            "cwd": h.work.display().to_string(), "status": "interrupted",
        })
    );
    let next = h.tool_finished("call_next").await;
    assert_eq!((next["exit_code"].clone(), next["output"].clone()), (json!(130), json!("[Command interrupted]")));
    assert_eq!(h.turn_finished().await, TurnOutcome::Interrupted);
    assert_eq!(
        h.until("RestoreInput", |e| matches!(e, Event::RestoreInput { .. })).await,
        Event::RestoreInput { text: "a steer\n\na queued one".into() }
    );
    assert_gone(fg_pid).await;
    assert!(group::group_alive(bg_pid), "an interrupt does not touch background jobs");

    h.submit("next", None);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    let messages = h.request(3).await;
    assert_valid_history(&messages);
    assert_eq!(messages.len(), 7);
    assert_eq!(messages[6], user("next"));
    h.shutdown().await;
    assert_gone(bg_pid).await;
}

// ---------------------------------------------------------------------------------------
// process wait, every call answered, tool panics
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_message_releases_every_process_wait_early() {
    let background = json!({"command": "sleep 300", "background": true});
    let wait = json!({"action": "wait", "session_id": "job_1", "timeout": 170});
    let mut h = Harness::start(vec![
        calls(&[("call_bg", "terminal", background)]),
        calls(&[("call_w1", "process", wait.clone()), ("call_w2", "process", wait.clone())]),
        ScriptedResponse::text("Stopped waiting."),
    ])
    .await;
    h.submit("go", None);
    let pid = pid_of(&h.tool_finished("call_bg").await);
    h.until("the second wait starts", |e| matches!(e, Event::ToolStarted { call_id, .. } if call_id == "call_w2"))
        .await;
    h.submit("don't wait for it", Some(BusyMode::Steer));
    for id in ["call_w1", "call_w2"] {
        let result = h.tool_finished(id).await;
        assert_eq!((&result["status"], &result["reason"]), (&json!("released"), &json!("user message")), "{id}");
        assert_eq!(result["process_running"], true);
    }
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    let messages = h.request(3).await;
    assert_valid_history(&messages);
    assert_eq!(messages[6..], [oob(&["don't wait for it"])]);
    assert!(group::group_alive(pid), "releasing a wait does not touch the job");
    h.shutdown().await;
    assert_gone(pid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_typed_before_the_model_chose_to_wait_releases_the_wait_at_once() {
    let background = json!({"command": "sleep 300", "background": true});
    let wait = json!({"action": "wait", "session_id": "job_1", "timeout": 170});
    let mut h = Harness::start(vec![
        calls(&[("call_bg", "terminal", background)]),
        slow("I will wait for the job.", &[("call_w", "process", wait)]),
        ScriptedResponse::text("Reading your message."),
    ])
    .await;
    h.submit("go", None);
    let pid = pid_of(&h.tool_finished("call_bg").await);
    h.streamed("I ").await;
    h.submit("don't wait", Some(BusyMode::Steer));
    let result = h.tool_finished("call_w").await;
    assert_eq!((&result["status"], &result["reason"]), (&json!("released"), &json!("user message")));
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert_eq!(h.request(3).await[5..], [oob(&["don't wait"])]);
    h.shutdown().await;
    assert_gone(pid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn redirect_skips_commands_that_had_not_started() {
    let first = terminal(FOREVER);
    let second = terminal("echo second; sleep 300");
    let mut h = Harness::start(vec![
        calls(&[("call_1", "terminal", first), ("call_2", "terminal", second)]),
        ScriptedResponse::text("Fine."),
    ])
    .await;
    h.submit("go", None);
    h.tool_printed("call_1", "started").await;
    h.submit("stop, do something else", Some(BusyMode::Redirect));
    let first = h.tool_finished("call_1").await;
    assert_eq!(first["status"], "yielded_to_background");
    let second = h.tool_finished("call_2").await;
    assert_eq!(second["status"], "skipped", "{second}");
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    let messages = h.request(2).await;
    assert_valid_history(&messages);
    assert_eq!(messages[4..], [oob(&["stop, do something else"])]);
    h.shutdown().await;
    assert_gone(pid_of(&first)).await;
}

// ---------------------------------------------------------------------------------------
// Job exit notifications: exactly once, idle or busy; skipped once the model saw the exit
// ---------------------------------------------------------------------------------------

const NOTICE_PREFIX: &str = "[Background job ";

fn notices(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .filter(|c| c.starts_with(NOTICE_PREFIX))
        .map(str::to_string)
        .collect()
}

fn assert_exit_notice(message: &Value, command: &str, tail: &str) {
    assert_eq!(message["role"], "user");
    let text = message["content"].as_str().expect("text");
    assert!(text.starts_with("[Background job job_1 exited with code 0 after "), "{text}");
    assert!(text.ends_with(&format!(". Command: {command}. Output tail: {tail}]")), "{text}");
}

fn triggers(seen: &[Event]) -> Vec<TurnTrigger> {
    seen.iter()
        .filter_map(|e| match e {
            Event::TurnStarted { trigger } => Some(trigger.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_ends_while_idle_starts_a_turn_once() {
    let command = until_file("bg_go");
    let mut h = Harness::start(vec![
        calls(&[("call_bg", "terminal", json!({"command": command, "background": true}))]),
        ScriptedResponse::text("Started it."),
        ScriptedResponse::text("The job finished."),
        ScriptedResponse::text("Nothing else."),
    ])
    .await;
    h.submit("go", None);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    std::fs::write(h.work.join("bg_go"), "").unwrap();
    h.until("JobFinished", |e| matches!(e, Event::JobFinished { id, status: JobStatus::Exited(0) } if id == "job_1"))
        .await;
    assert_eq!(h.turn_started().await, TurnTrigger::JobNotification);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    let messages = h.request(3).await;
    assert_eq!(messages[3], assistant("Started it."));
    assert_exit_notice(&messages[4], &command, "started\ndone");
    assert_eq!(messages.len(), 5);

    h.submit("anything else?", None);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert_eq!(notices(&h.request(4).await).len(), 1, "never twice");
    assert_eq!(triggers(&h.seen), [TurnTrigger::User, TurnTrigger::JobNotification, TurnTrigger::User]);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_ends_while_busy_is_told_after_the_next_tool_results_once() {
    let bg_command = until_file("bg_go");
    let fg_command = until_file("fg_go");
    let mut h = Harness::start(vec![
        calls(&[("call_bg", "terminal", json!({"command": bg_command, "background": true}))]),
        calls(&[("call_fg", "terminal", terminal(&fg_command))]),
        ScriptedResponse::text("Both done."),
        ScriptedResponse::text("Nothing else."),
    ])
    .await;
    h.submit("go", None);
    h.tool_printed("call_fg", "started").await;
    std::fs::write(h.work.join("bg_go"), "").unwrap();
    h.until("JobFinished", |e| matches!(e, Event::JobFinished { id, .. } if id == "job_1")).await;
    h.submit("and hurry", Some(BusyMode::Steer));
    h.pending_is(&["and hurry"]).await;
    std::fs::write(h.work.join("fg_go"), "").unwrap();
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    let messages = h.request(3).await;
    assert_valid_history(&messages);
    // The typed message in its wrapper, then the notice as a separate plain user message.
    assert_eq!(messages.len(), 7);
    assert_eq!(messages[5], oob(&["and hurry"]));
    assert_exit_notice(&messages[6], &bg_command, "started\ndone");

    // Taken by the turn: no notification turn follows.
    h.submit("anything else?", None);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert_eq!(notices(&h.request(4).await).len(), 1, "never twice");
    assert_eq!(triggers(&h.seen), [TurnTrigger::User, TurnTrigger::User]);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_notice_after_the_model_saw_the_exit_through_process_poll() {
    let bg_command = until_file("bg_go");
    let fg_command = until_file("fg_go");
    let poll = json!({"action": "poll", "session_id": "job_1"});
    let mut h = Harness::start(vec![
        calls(&[("call_bg", "terminal", json!({"command": bg_command, "background": true}))]),
        calls(&[("call_fg", "terminal", terminal(&fg_command)), ("call_poll", "process", poll)]),
        ScriptedResponse::text("It exited 0."),
        ScriptedResponse::text("Nothing else."),
    ])
    .await;
    h.submit("go", None);
    h.tool_printed("call_fg", "started").await;
    std::fs::write(h.work.join("bg_go"), "").unwrap();
    h.until("JobFinished", |e| matches!(e, Event::JobFinished { id, .. } if id == "job_1")).await;
    std::fs::write(h.work.join("fg_go"), "").unwrap();
    let polled = h.tool_finished("call_poll").await;
    assert_eq!((&polled["status"], &polled["exit_code"]), (&json!("exited"), &json!(0)));
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    let messages = h.request(3).await;
    assert_valid_history(&messages);
    assert_eq!(messages.len(), 6, "nothing after the tool results");

    h.submit("anything else?", None);
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert_eq!(notices(&h.request(4).await), Vec::<String>::new());
    assert_eq!(triggers(&h.seen), [TurnTrigger::User, TurnTrigger::User]);
    h.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// A panic inside a tool is that tool's error result; the turn goes on
// ---------------------------------------------------------------------------------------

struct ExplodingTool;

#[async_trait]
impl Tool for ExplodingTool {
    fn name(&self) -> &'static str {
        "explode"
    }

    fn description(&self) -> &'static str {
        "Panics unless calm is true."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"calm": {"type": "boolean"}}})
    }

    fn concurrency(&self) -> Concurrency {
        Concurrency::Parallel
    }

    fn summary(&self, _args: &Value) -> String {
        String::new()
    }

    async fn call(&self, args: Value, _ctx: ToolCtx) -> ToolResult {
        if args["calm"] != json!(true) {
            panic!("boom");
        }
        ToolResult::ok(json!({"status": "calm"}))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panic_inside_a_tool_becomes_its_error_result_and_the_turn_goes_on() {
    let home = tempfile::tempdir().unwrap();
    let paths = Paths::under(home.path());
    paths.ensure_dirs().unwrap();
    let config = Arc::new(Config::default());
    let server = ScriptedServer::start([
        calls(&[("call_boom", "explode", json!({})), ("call_calm", "explode", json!({"calm": true}))]),
        ScriptedResponse::text("One tool crashed; the other worked."),
    ])
    .await
    .unwrap();
    let (events, mut rx) = EventSink::channel();
    let options = JobsOptions {
        supervisor: SupervisorExe::Exe(std::path::PathBuf::from(env!("CARGO_BIN_EXE_talaria"))),
        sweep: false,
        attach: None,
    };
    let (jobs, _finished) = JobsHandle::start_with(&paths, config.clone(), events.clone(), options);
    let store = Store::open(&paths.state_db).unwrap();
    let session_id = store.create_session("m", &home.path().display().to_string(), None).await.unwrap();
    let mut registry = Registry::standard();
    registry.add(Arc::new(ExplodingTool));
    let env = TurnEnv {
        provider: Arc::new(OpenAiClient::new(ClientSettings::new(server.base_url())).unwrap()),
        model: "m".into(),
        registry,
        mcp: None,
        approver: Approver::new(&config, PromptPolicy::AllowUnattended, None, events.clone()),
        config,
        store,
        events,
        jobs,
        cwd: Arc::new(Mutex::new(home.path().to_path_buf())),
        session_id,
        system_prompt: "You are a test.".into(),
    };
    let control = TurnControl::detached();
    let input = TurnInput::typed("go");
    let turn = run_turn(env, control, Vec::new(), None, vec![input], TurnTrigger::User, ContextMeter::new(0));
    let result = tokio::time::timeout(WAIT, turn).await.expect("the turn ends");
    assert_eq!(result.outcome, TurnOutcome::Completed);

    let requests = server.wait_for_chat_requests(2, WAIT).await;
    let messages = requests[1].body["messages"].as_array().unwrap()[1..].to_vec();
    assert_valid_history(&messages);
    assert_eq!(tool_result(&messages, "call_boom"), json!({"error": "the explode tool crashed: boom"}));
    assert_eq!(tool_result(&messages, "call_calm"), json!({"status": "calm"}));
    let mut finished = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let Event::ToolFinished { call_id, outcome } = event {
            finished.push((call_id, outcome.ok));
        }
    }
    assert_eq!(finished, [("call_boom".to_string(), false), ("call_calm".to_string(), true)]);
}

// ---------------------------------------------------------------------------------------
// Approvals: a stale yield never moves the command the user just approved
// ---------------------------------------------------------------------------------------

async fn approve_next(h: &mut Harness) {
    let event = h.until("ApprovalNeeded", |e| matches!(e, Event::ApprovalNeeded { .. })).await;
    let Event::ApprovalNeeded { id, .. } = event else { unreachable!() };
    h.op(Op::Approve { id, decision: Approval::Once });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_yield_raised_while_the_approval_modal_is_open_does_not_move_the_approved_command() {
    let first = format!("rm -rf scratch; {}", until_file("go1"));
    let second = format!("rm -rf scratch; {}", until_file("go2"));
    let mut h = Harness::start_with(
        vec![
            calls(&[("call_1", "terminal", terminal(&first))]),
            ScriptedResponse::text("Removed."),
            calls(&[("call_2", "terminal", terminal(&second))]),
        ],
        PromptPolicy::Ask,
    )
    .await;
    h.submit("clean up", None);
    h.until("ApprovalNeeded", |e| matches!(e, Event::ApprovalNeeded { .. })).await;
    // Ctrl+B while the modal is open, then the user approves: the command runs in the foreground.
    h.op(Op::YieldForeground);
    let Some(Event::ApprovalNeeded { id, .. }) = h.seen.last().cloned() else { unreachable!() };
    h.op(Op::Approve { id, decision: Approval::Once });
    h.tool_printed("call_1", "started").await;
    std::fs::write(h.work.join("go1"), "").unwrap();
    let result = h.tool_finished("call_1").await;
    assert_eq!((&result["exit_code"], &result["output"]), (&json!(0), &json!("started\ndone\n")), "{result}");
    assert_eq!(result["approval"], "approved by the user");
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);

    // A genuine interrupt after an approved command started still kills it, and says so.
    h.submit("again", None);
    approve_next(&mut h).await;
    h.tool_printed("call_2", "started").await;
    h.op(Op::Interrupt);
    let result = h.tool_finished("call_2").await;
    assert_eq!(result["exit_code"], 130);
    assert_eq!(result["output"], "started\n[Command interrupted] (approved by the user, then interrupted)");
    assert_eq!(h.turn_finished().await, TurnOutcome::Interrupted);
    h.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// `process write` to a job outside the sandbox: each line is approved like a command
// ---------------------------------------------------------------------------------------

/// The next approval prompt: answer it and return the command it showed.
async fn answer_approval(h: &mut Harness, decision: Approval) -> String {
    let event = h.until("ApprovalNeeded", |e| matches!(e, Event::ApprovalNeeded { .. })).await;
    let Event::ApprovalNeeded { id, command, .. } = event else { unreachable!() };
    h.op(Op::Approve { id, decision });
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn each_line_written_to_an_unsandboxed_job_is_approved_like_a_command() {
    let mark = format!("3004{:05}", std::process::id() % 100_000);
    let write = |id: &str, data: &str| {
        calls(&[(id, "process", json!({ "action": "write", "session_id": "job_1", "data": data }))])
    };
    let mut h = Harness::start_with(
        vec![
            calls(&[(
                "c_shell",
                "terminal",
                json!({ "command": format!("bash # {mark}"), "background": true, "sandbox": false }),
            )]),
            write("c_w1", "echo one > one.txt\n"),
            write("c_w2", "echo two > two.txt\nrm -rf victim\n"),
            write("c_w3", "ls\n"),
            calls(&[("c_close", "process", json!({ "action": "close", "session_id": "job_1" }))]),
            calls(&[("c_wait", "process", json!({ "action": "wait", "session_id": "job_1", "timeout": 20 }))]),
            ScriptedResponse::text("done"),
        ],
        PromptPolicy::Ask,
    )
    .await;
    std::fs::create_dir_all(h.work.join("victim")).unwrap();
    h.submit("use a shell", None);
    // Starting a shell outside the sandbox asks.
    assert_eq!(answer_approval(&mut h, Approval::Once).await, format!("bash # {mark}"));
    assert_eq!(h.tool_finished("c_shell").await["session_id"], "job_1");
    // One line, approved: it reaches the shell.
    assert_eq!(answer_approval(&mut h, Approval::Once).await, "echo one > one.txt");
    assert_eq!(h.tool_finished("c_w1").await["status"], "ok");
    // Two lines: the first approved, the second denied: neither is sent.
    assert_eq!(answer_approval(&mut h, Approval::Once).await, "echo two > two.txt");
    assert_eq!(answer_approval(&mut h, Approval::Deny).await, "rm -rf victim");
    let denied = h.tool_finished("c_w2").await;
    assert_eq!(denied["status"], "denied", "{denied}");
    // A known-safe line asks too: outside the sandbox it runs with the user's full rights
    // (issue #28; known safe decides only what runs inside without asking).
    assert_eq!(answer_approval(&mut h, Approval::Once).await, "ls");
    assert_eq!(h.tool_finished("c_w3").await["status"], "ok");
    h.tool_finished("c_close").await;
    let waited = h.tool_finished("c_wait").await;
    assert_eq!(waited["exit_code"], 0, "{waited}");
    let tail = waited["output_tail"].as_str().unwrap_or_default();
    assert!(tail.contains("one.txt") && tail.contains("victim") && !tail.contains("two.txt"), "{waited}");
    assert_eq!(h.turn_finished().await, TurnOutcome::Completed);
    assert_eq!(std::fs::read_to_string(h.work.join("one.txt")).unwrap(), "one\n");
    assert!(!h.work.join("two.txt").exists(), "a denied write sends none of its lines");
    assert!(h.work.join("victim").is_dir());
    h.shutdown().await;
}
