//! Sub-agents (DESIGN §14, issue #34): the `agent` tool starts a child talaria as a job; its
//! final answer comes back once. Real child processes, real HTTP to the scripted server on
//! loopback, real SQLite.

#[path = "common/inproc.rs"]
mod inproc;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use talaria::config::Config;
use talaria::engine::SessionChoice;
use talaria::protocol::{Event, Op};
use talaria::testkit::scripted::{
    finish_chunk, tool_call_chunks, usage_chunk, RecordedRequest, ScriptedResponse, ScriptedServer, DONE,
};

/// A number no other test (or earlier run) uses, for the commands' output.
fn marker() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    u64::from(std::process::id()) * 1_000_000 + u64::from(nanos % 1_000_000)
}

fn messages(req: &RecordedRequest) -> Vec<Value> {
    req.body["messages"].as_array().cloned().unwrap_or_default()
}

/// The first user message: a parent's prompt or a sub-agent's task.
fn first_user(req: &RecordedRequest) -> String {
    messages(req).iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("").to_string()
}

fn last_role(req: &RecordedRequest) -> String {
    messages(req).last().and_then(|m| m["role"].as_str()).unwrap_or("").to_string()
}

/// Everything the request's messages say, joined.
fn all_text(req: &RecordedRequest) -> String {
    messages(req).iter().filter_map(|m| m["content"].as_str()).collect::<Vec<_>>().join("\n")
}

/// One response calling several tools at once.
fn tool_calls(calls: &[(&str, &str, Value)]) -> ScriptedResponse {
    let mut payloads = Vec::new();
    for (i, (id, name, args)) in calls.iter().enumerate() {
        payloads.extend(tool_call_chunks(i, id, name, &args.to_string(), 16));
    }
    payloads.push(finish_chunk("tool_calls"));
    payloads.push(usage_chunk(10, 5));
    payloads.push(DONE.to_string());
    ScriptedResponse::sse(payloads)
}

fn config_for(server: &ScriptedServer) -> Config {
    let mut config = Config::default();
    config.agents.run_base_url = Some(server.base_url());
    config.agents.run_model = Some("scripted-model".into());
    config
}

/// Poll `cond` over the server's chat requests (60 s: two child talarias start on a loaded
/// machine).
async fn wait_requests(server: &ScriptedServer, what: &str, cond: impl Fn(&[RecordedRequest]) -> bool) {
    let start = Instant::now();
    loop {
        if cond(&server.chat_requests()) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sub_agents_in_parallel_each_answer_once_and_the_next_request_has_both() {
    let m = marker();
    let parent_prompt = format!("PARENT-{m}: fan out");
    let (task_a, task_b) = (format!("TASK-A-{m}: echo alpha"), format!("TASK-B-{m}: echo beta"));
    let (pa, ta, tb) = (parent_prompt.clone(), task_a.clone(), task_b.clone());
    let server = ScriptedServer::with_responder(move |req| {
        let first = first_user(req);
        if first == pa {
            if all_text(req).contains("[Sub-agent ") {
                return ScriptedResponse::text("Both sub-agents reported.");
            }
            if last_role(req) == "tool" {
                return ScriptedResponse::text("Two sub-agents are working.");
            }
            return tool_calls(&[
                ("call_a", "agent", json!({ "task": ta })),
                ("call_b", "agent", json!({ "task": tb })),
            ]);
        }
        let (word, tag) = if first == ta { ("alpha", "A") } else { ("beta", "B") };
        if last_role(req) == "tool" {
            let output = messages(req).last().and_then(|m| m["content"].as_str()).unwrap_or("").to_string();
            let seen = output.contains(&format!("{word}-{m}"));
            return ScriptedResponse::text(&format!("ANSWER-{tag}-{m} saw={seen}"));
        }
        let command = json!({ "command": format!("echo {word}-{m}") }).to_string();
        ScriptedResponse::tool_call(&format!("call_{word}"), "terminal", &command)
    })
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut run = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config_for(&server)).await;
    let parent = run.session_id();
    run.send(Op::Submit { text: parent_prompt.clone(), mode: None });
    let (a, _) = run.tool_result("call_a").await;
    let (b, _) = run.tool_result("call_b").await;
    assert_eq!(a["status"], "started", "{a}");
    assert_eq!(b["status"], "started", "{b}");
    let (job_a, job_b) = (a["session_id"].as_str().unwrap().to_string(), b["session_id"].as_str().unwrap().to_string());
    assert_ne!(job_a, job_b);

    // The parent's next request after both answers carries each exactly once.
    let (ans_a, ans_b) = (format!("ANSWER-A-{m} saw=true"), format!("ANSWER-B-{m} saw=true"));
    let is_parent = |r: &RecordedRequest| first_user(r) == parent_prompt;
    wait_requests(&server, "a parent request with both answers", |reqs| {
        reqs.iter().any(|r| is_parent(r) && all_text(r).contains(&ans_a) && all_text(r).contains(&ans_b))
    })
    .await;
    run.wait_for(
        "the answers' turn to end",
        |e| matches!(e, Event::AssistantDone { text, .. } if text.contains("Both sub-agents reported")),
    )
    .await;
    let requests = server.chat_requests();
    let last = requests.iter().rev().find(|r| is_parent(r)).unwrap();
    let text = all_text(last);
    assert_eq!(count(&text, &ans_a), 1, "answer A once in the last parent request: {text}");
    assert_eq!(count(&text, &ans_b), 1, "answer B once in the last parent request: {text}");
    assert!(text.contains(&format!("[Sub-agent {job_a} (session ")), "{text}");

    // Stored once in the parent session, and nothing more arrives.
    let stored = run.store.load_messages(&parent).await.unwrap();
    let notices: Vec<&str> =
        stored.iter().filter_map(|m| m.content.as_deref()).filter(|c| c.starts_with("[Sub-agent ")).collect();
    assert_eq!(notices.len(), 2, "{notices:#?}");
    let later = run.collect_for(Duration::from_millis(1500)).await;
    assert!(!later.iter().any(|e| matches!(e, Event::TurnStarted { .. })), "no further turn: {later:#?}");

    // The sub-sessions are in the database, linked to the parent, each with its task.
    let db = rusqlite::Connection::open(home.path().join("state.db")).unwrap();
    let mut stmt = db.prepare("SELECT id FROM sessions WHERE parent_session_id = ?1 ORDER BY id").unwrap();
    let children: Vec<String> = stmt.query_map([&parent], |row| row.get(0)).unwrap().map(Result::unwrap).collect();
    assert_eq!(children.len(), 2, "{children:?}");
    let mut tasks = Vec::new();
    for child in &children {
        let msgs = run.store.load_messages(child).await.unwrap();
        tasks.extend(msgs.iter().filter_map(|m| m.content.clone()).filter(|c| c.starts_with("TASK-")));
        assert!(text.contains(&format!("(session {child})")), "the notice names sub-session {child}");
    }
    tasks.sort();
    assert_eq!(tasks, vec![task_a, task_b]);
    run.shutdown().await;
}
