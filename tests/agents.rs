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
            // The answers may come in one turn or two (they end apart under load): "Both" is
            // said only once both are in, so the test waits for the last turn, not the first.
            let text = all_text(req);
            if text.contains(&format!("ANSWER-A-{m}")) && text.contains(&format!("ANSWER-B-{m}")) {
                return ScriptedResponse::text("Both sub-agents reported.");
            }
            if text.contains("[Sub-agent ") {
                return ScriptedResponse::text("One sub-agent reported.");
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
    // Each names the job that runs it: that link, not a command line, makes a job a sub-agent.
    let mut linked: Vec<String> = children
        .iter()
        .map(|c| db.query_row("SELECT agent_job FROM sessions WHERE id = ?1", [c], |r| r.get::<_, i64>(0)).unwrap())
        .map(|n| format!("job_{n}"))
        .collect();
    linked.sort();
    let mut jobs = vec![job_a.clone(), job_b.clone()];
    jobs.sort();
    assert_eq!(linked, jobs);
    run.shutdown().await;
}

/// Live (non-zombie) processes whose command line contains `needle`, and their children.
fn processes_of(needle: &str) -> Vec<i32> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(after) = stat.rsplit_once(')').map(|(_, a)| a.to_string()) else { continue };
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            continue;
        }
        let ppid: i32 = fields.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        all.push((pid, ppid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
    }
    let mut found: Vec<i32> = all.iter().filter(|(_, _, c)| c.contains(needle)).map(|(p, _, _)| *p).collect();
    let children: Vec<i32> = all.iter().filter(|(_, pp, _)| found.contains(pp)).map(|(p, _, _)| *p).collect();
    found.extend(children);
    found
}

async fn wait_processes(what: &str, needle: &str, present: bool) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let pids = processes_of(needle);
        if pids.is_empty() != present {
            return pids;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}: {pids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The job id the agent tool returned, from the parent's history.
fn agent_job(req: &RecordedRequest) -> Option<String> {
    messages(req).iter().filter(|m| m["role"] == "tool").find_map(|m| {
        let v: Value = serde_json::from_str(m["content"].as_str()?).ok()?;
        (v["status"] == "started").then(|| v["session_id"].as_str().map(str::to_string)).flatten()
    })
}

/// A parent that starts one sub-agent on `task`, then on `second` (a later prompt) calls
/// `process` with `action` (+ `data`) on it; the sub-agent runs `command` and, once it sees a
/// tool result, answers `ANSWER-<m>` with what its last request said.
async fn one_agent_server(
    m: u64,
    task: String,
    second: String,
    action: &'static str,
    command: String,
) -> ScriptedServer {
    let parent_prompt = format!("PARENT-{m}");
    ScriptedServer::with_responder(move |req| {
        let first = first_user(req);
        if first == parent_prompt {
            let text = all_text(req);
            if last_role(req) == "tool" || text.contains("[Sub-agent ") {
                return ScriptedResponse::text("ok");
            }
            if text.contains(&second) {
                let job = agent_job(req).unwrap_or_default();
                let mut args = json!({ "action": action, "session_id": job });
                if action == "write" {
                    args["data"] = json!(format!("STEER-{m}"));
                }
                return ScriptedResponse::tool_call("call_p2", "process", &args.to_string());
            }
            return ScriptedResponse::tool_call("call_p1", "agent", &json!({ "task": task }).to_string());
        }
        if last_role(req) == "tool" || last_role(req) == "user" && messages(req).len() > 3 {
            let text = all_text(req);
            let steered = text.contains(&format!("STEER-{m}"));
            let yielded = text.contains("yielded_to_background");
            return ScriptedResponse::text(&format!("ANSWER-{m} steered={steered} yielded={yielded}"));
        }
        ScriptedResponse::tool_call("call_c1", "terminal", &json!({ "command": command, "timeout": 600 }).to_string())
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_kill_of_a_sub_agent_ends_it_and_every_process_it_started() {
    let m = marker();
    let needle = format!("kill-{m}");
    let command = format!("sleep 300; echo {needle}");
    let second = format!("KILL-{m}");
    let server = one_agent_server(m, format!("TASK-{m}: sleep"), second.clone(), "kill", command).await;
    let home = tempfile::tempdir().unwrap();
    let mut run = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config_for(&server)).await;
    run.send(Op::Submit { text: format!("PARENT-{m}"), mode: None });
    let (started, _) = run.tool_result("call_p1").await;
    assert_eq!(started["status"], "started", "{started}");
    let child_pid = started["pid"].as_i64().unwrap() as i32;
    run.turn_finished().await;
    // The sub-agent's command runs (its shell and its sleep).
    let pids = wait_processes("the sub-agent's command", &needle, true).await;
    assert!(std::path::Path::new(&format!("/proc/{child_pid}")).exists(), "the child talaria runs");

    run.send(Op::Submit { text: second, mode: None });
    let (killed, _) = run.tool_result("call_p2").await;
    assert_eq!(killed["status"], "killed", "{killed}");
    // None of it is left: the command's group and the child talaria.
    wait_processes("the sub-agent's command to be gone", &needle, false).await;
    for pid in pids.iter().chain([&child_pid]) {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(')').and_then(|(_, a)| a.split_whitespace().next().map(str::to_string));
        assert!(matches!(state.as_deref(), None | Some("Z")), "process {pid} is still alive: {stat}");
    }
    run.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_written_to_a_sub_agent_reaches_its_next_request_and_its_command_moves_to_the_background() {
    let m = marker();
    let needle = format!("steer-{m}");
    let command = format!("sleep 300; echo {needle}");
    let second = format!("WRITE-{m}");
    let server = one_agent_server(m, format!("TASK-{m}: sleep"), second.clone(), "write", command).await;
    let home = tempfile::tempdir().unwrap();
    let mut run = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config_for(&server)).await;
    run.send(Op::Submit { text: format!("PARENT-{m}"), mode: None });
    let (started, _) = run.tool_result("call_p1").await;
    assert_eq!(started["status"], "started", "{started}");
    run.turn_finished().await;
    wait_processes("the sub-agent's command", &needle, true).await;

    run.send(Op::Submit { text: second, mode: None });
    let (written, _) = run.tool_result("call_p2").await;
    assert_eq!(written["status"], "ok", "{written}");
    // The sub-agent's next request has the message, with its command moved to the background.
    let answer = format!("ANSWER-{m} steered=true yielded=true");
    run.wait_for("the sub-agent's answer", |e| matches!(e, Event::UserMessage { text, .. } if text.contains(&answer)))
        .await;
    let child_requests: Vec<RecordedRequest> =
        server.chat_requests().into_iter().filter(|r| first_user(r).starts_with(&format!("TASK-{m}"))).collect();
    let steered =
        child_requests.iter().find(|r| all_text(r).contains(&format!("STEER-{m}"))).expect("a steered request");
    assert!(all_text(steered).contains("OUT-OF-BAND USER MESSAGE"), "delivered like typing while busy");
    // The sub-agent ended (exec kills what it left running), so its command is gone too.
    wait_processes("the sub-agent's command to be gone", &needle, false).await;
    run.shutdown().await;
}

#[path = "common/mod.rs"]
mod common;

/// A parent that starts one sub-agent whose command runs outside the sandbox (it asks); with
/// `wait`, the parent then waits for it with `process wait` (exec ends with its turn).
async fn unsandboxed_server(m: u64, proof: std::path::PathBuf, wait: bool) -> ScriptedServer {
    let parent_prompt = format!("PARENT-{m}");
    let task = format!("TASK-{m}: outside");
    ScriptedServer::with_responder(move |req| {
        let first = first_user(req);
        if first == parent_prompt {
            let calls = messages(req).iter().filter(|m| m["role"] == "tool").count();
            if calls == 1 && wait {
                let job = agent_job(req).unwrap_or_default();
                let args = json!({ "action": "wait", "session_id": job, "timeout": 60 });
                return ScriptedResponse::tool_call("call_p2", "process", &args.to_string());
            }
            if calls >= 1 || all_text(req).contains("[Sub-agent ") {
                return ScriptedResponse::text("ok");
            }
            return ScriptedResponse::tool_call("call_p1", "agent", &json!({ "task": task }).to_string());
        }
        if last_role(req) == "tool" {
            let result = messages(req).last().and_then(|m| m["content"].as_str()).unwrap_or("").to_string();
            let ran = result.contains(&format!("outside-{m}"));
            let denied = result.contains("denied") || result.contains("--yes");
            return ScriptedResponse::text(&format!("ANSWER-{m} ran={ran} denied={denied}"));
        }
        let command = format!("touch {} && echo outside-{m}", proof.display());
        ScriptedResponse::tool_call("call_c1", "terminal", &json!({ "command": command, "sandbox": false }).to_string())
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_unsandboxed_command_is_the_parents_approval_and_runs_only_when_approved() {
    use std::sync::Arc;
    use talaria::engine::approval::PromptPolicy;
    use talaria::engine::llm::client::{ClientSettings, OpenAiClient};
    use talaria::protocol::Approval;
    let m = marker();
    let home = tempfile::tempdir().unwrap();
    let proof = home.path().join(format!("proof-{m}"));
    let server = unsandboxed_server(m, proof.clone(), false).await;
    let provider = Arc::new(OpenAiClient::new(ClientSettings::new(server.base_url()).max_retries(0)).unwrap());
    let config = config_for(&server);
    let mut run = inproc::start_with_policy(
        home.path(),
        provider,
        "scripted-model",
        SessionChoice::New,
        config,
        PromptPolicy::Ask,
    )
    .await;
    run.send(Op::Submit { text: format!("PARENT-{m}"), mode: None });
    let (started, _) = run.tool_result("call_p1").await;
    let job = started["session_id"].as_str().unwrap().to_string();
    let needle = format!("outside-{m}");
    let asked = run
        .wait_for(
            "the sub-agent's approval",
            |e| matches!(e, Event::ApprovalNeeded { command, .. } if command.contains(&needle)),
        )
        .await;
    let Event::ApprovalNeeded { id, command, from, .. } = asked else { unreachable!() };
    // Labelled with the name the pane shows (agent_N for job_N); the command is exactly what runs.
    let agent = job.replacen("job_", "agent_", 1);
    assert_eq!(from.as_deref(), Some(agent.as_str()), "labelled with the sub-agent");
    assert!(!command.starts_with('['), "the command is what would run: {command}");
    assert!(!proof.exists(), "nothing ran before the answer");
    run.send(Op::Approve { id, decision: Approval::Once });
    let answer = format!("ANSWER-{m} ran=true denied=false");
    run.wait_for("the answer", |e| matches!(e, Event::UserMessage { text, .. } if text.contains(&answer))).await;
    assert!(proof.exists(), "the approved command ran");
    run.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_exec_a_sub_agents_unsandboxed_command_is_denied() {
    let m = marker();
    let home = common::Home::new();
    let proof = home.path().join(format!("proof-{m}"));
    let server = unsandboxed_server(m, proof.clone(), true).await;
    let out = home.run(&["exec", "--json", "--base-url", &server.base_url(), &format!("PARENT-{m}")]).await;
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(!proof.exists(), "the command did not run");
    let child = server
        .chat_requests()
        .into_iter()
        .filter(|r| first_user(r) == format!("TASK-{m}: outside"))
        .find(|r| last_role(r) == "tool")
        .expect("the sub-agent saw its command's result");
    let result = messages(&child).last().and_then(|m| m["content"].as_str()).unwrap_or("").to_string();
    let result: Value = serde_json::from_str(&result).unwrap();
    assert_eq!(result["status"], "denied", "{result}");

    // With --yes the same sub-agent command runs: the parent's policy decided.
    let m = marker() + 1;
    let proof = home.path().join(format!("proof-{m}"));
    let server = unsandboxed_server(m, proof.clone(), true).await;
    let out = home.run(&["exec", "--json", "--yes", "--base-url", &server.base_url(), &format!("PARENT-{m}")]).await;
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(proof.exists(), "allowed by --yes");
}

#[path = "common/pty.rs"]
mod pty;

/// The sub-session ids of `parent`, from the database.
fn sub_sessions(home: &std::path::Path, parent: &str) -> Vec<String> {
    let Ok(db) = rusqlite::Connection::open(home.join("state.db")) else { return Vec::new() };
    let Ok(mut stmt) = db.prepare("SELECT id FROM sessions WHERE parent_session_id = ?1") else { return Vec::new() };
    stmt.query_map([parent], |row| row.get(0)).map(|rows| rows.flatten().collect()).unwrap_or_default()
}

/// The interactive session (the only one without a parent).
fn parent_session(home: &std::path::Path) -> Option<String> {
    let db = rusqlite::Connection::open(home.join("state.db")).ok()?;
    db.query_row("SELECT id FROM sessions WHERE parent_session_id IS NULL", [], |r| r.get(0)).ok()
}

fn sync_wait(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_sub_agent_outlives_kill_9_of_its_parent_and_talaria_c_gets_its_answer_once() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let m = marker();
    let home = common::Home::new();
    let go = home.work().join(format!("go-{m}"));
    let parent_prompt = format!("PARENT-{m}");
    let task = format!("TASK-{m}: wait for the go file");
    let (pp, tk) = (parent_prompt.clone(), task.clone());
    let server = rt
        .block_on(ScriptedServer::with_responder(move |req| {
            let first = first_user(req);
            if first == pp {
                if all_text(req).contains("[Sub-agent ") {
                    return ScriptedResponse::text(&format!("GOT-IT-{m}"));
                }
                if last_role(req) == "tool" {
                    return ScriptedResponse::text("working on it");
                }
                return ScriptedResponse::tool_call("call_p1", "agent", &json!({ "task": tk }).to_string());
            }
            if last_role(req) == "tool" {
                let released = all_text(req).contains(&format!("released-{m}"));
                return ScriptedResponse::text(&format!("ANSWER-{m} released={released}"));
            }
            let command = format!("while [ ! -e go-{m} ]; do sleep 0.05; done; echo released-{m}");
            ScriptedResponse::tool_call(
                "call_c1",
                "terminal",
                &json!({ "command": command, "timeout": 600 }).to_string(),
            )
        }))
        .unwrap();
    let url = server.base_url();
    let args = ["--base-url", url.as_str(), "--model", "m"];
    let mut p = pty::Pty::spawn(home.path(), &home.work(), &args, 120, 36);
    p.wait_for(" message ", Duration::from_secs(30));
    p.type_text(&parent_prompt);
    p.send(b"\r");
    // The sub-agent works: its command waits for the go file.
    let needle = format!("go-{m} ]");
    sync_wait("the sub-agent's command", || !processes_of(&needle).is_empty());
    let parent = parent_session(home.path()).expect("the parent session");
    let sub = sub_sessions(home.path(), &parent).pop().expect("a linked sub-session");
    let child = format!("--session {sub}");
    assert!(!processes_of(&child).is_empty(), "the child talaria runs");

    let pid = p.child.process_id().expect("pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(p.wait_exit(Duration::from_secs(30)).is_some(), "the parent died");
    drop(p);
    assert!(!processes_of(&child).is_empty(), "the sub-agent outlived its parent");
    assert!(!processes_of(&needle).is_empty(), "and so did its command");

    let mut p = pty::Pty::spawn(home.path(), &home.work(), &[&args[..], &["-c"]].concat(), 120, 36);
    p.wait_for(" message ", Duration::from_secs(30));
    std::fs::write(&go, "").unwrap();
    p.wait_for(&format!("GOT-IT-{m}"), Duration::from_secs(60));
    let answer = format!("ANSWER-{m} released=true");
    let last = server.chat_requests().into_iter().rev().find(|r| first_user(r) == parent_prompt).unwrap();
    assert_eq!(count(&all_text(&last), &answer), 1, "{}", all_text(&last));
    let db = rusqlite::Connection::open(home.path().join("state.db")).unwrap();
    let told: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM messages WHERE session_id = ?1 AND content LIKE '[Sub-agent %'",
            [&parent],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(told, 1, "the answer is told once");
    sync_wait("the sub-agent to end", || processes_of(&child).is_empty() && processes_of(&needle).is_empty());
    let _ = p.child.kill();
    let _ = p.wait_exit(Duration::from_secs(10));
}

/// A sub-agent queued behind `agents.max_parallel` is not lost with its parent: its task is
/// kept in its job's directory (without the keys), and after kill -9 and `talaria -c` it
/// starts once the working one ends; both answers reach the parent once each.
#[test]
fn a_queued_sub_agent_survives_kill_9_of_its_parent_and_starts_after_talaria_c() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let m = marker();
    let home = common::Home::new();
    home.write_config("[agents]\nmax_parallel = 1\n");
    let go = home.work().join(format!("go-{m}"));
    let parent_prompt = format!("PARENT-{m}");
    let (task_a, task_b) = (format!("TASKA-{m}: wait for the go file"), format!("TASKB-{m}: the same"));
    let (pp, ta, tb) = (parent_prompt.clone(), task_a.clone(), task_b.clone());
    let server = rt
        .block_on(ScriptedServer::with_responder(move |req| {
            let (first, text) = (first_user(req), all_text(req));
            if first == pp {
                if text.contains(&format!("ANSWER-A-{m}")) && text.contains(&format!("ANSWER-B-{m}")) {
                    return ScriptedResponse::text(&format!("GOT-BOTH-{m}"));
                }
                if text.contains("[Sub-agent ") {
                    return ScriptedResponse::text("one of two");
                }
                if last_role(req) == "tool" {
                    return ScriptedResponse::text("working on it");
                }
                return tool_calls(&[
                    ("call_a", "agent", json!({ "task": ta })),
                    ("call_b", "agent", json!({ "task": tb })),
                ]);
            }
            // Either may get the one slot: each waits for the go file, then answers.
            if last_role(req) == "tool" {
                let tag = if first.contains(&format!("TASKA-{m}")) { "A" } else { "B" };
                return ScriptedResponse::text(&format!("ANSWER-{tag}-{m}"));
            }
            let command = format!("while [ ! -e go-{m} ]; do sleep 0.05; done; echo released-{m}");
            ScriptedResponse::tool_call(
                "call_c1",
                "terminal",
                &json!({ "command": command, "timeout": 600 }).to_string(),
            )
        }))
        .unwrap();
    let url = server.base_url();
    let args = ["--base-url", url.as_str(), "--model", "m"];
    let mut p = pty::Pty::spawn(home.path(), &home.work(), &args, 120, 36);
    p.wait_for(" message ", Duration::from_secs(30));
    p.type_text(&parent_prompt);
    p.send(b"\r");
    let needle = format!("go-{m} ]");
    sync_wait("the first sub-agent's command", || !processes_of(&needle).is_empty());
    let parent = parent_session(home.path()).expect("the parent session");
    sync_wait("both sub-sessions", || sub_sessions(home.path(), &parent).len() == 2);
    let children: Vec<String> = sub_sessions(home.path(), &parent).iter().map(|s| format!("--session {s}")).collect();
    sync_wait("both child talarias", || children.iter().all(|c| !processes_of(c).is_empty()));
    sync_wait("the queued one's task on disk", || {
        std::fs::read_dir(home.path().join("jobs"))
            .map(|dirs| dirs.flatten().any(|d| d.path().join("queued-hello.json").exists()))
            .unwrap_or(false)
    });
    let asked = |task: &str| server.chat_requests().iter().any(|r| first_user(r).contains(task));
    let working = [format!("TASKA-{m}"), format!("TASKB-{m}")].iter().filter(|t| asked(t)).count();
    assert_eq!(working, 1, "one sub-agent works, the other waits for the slot");

    let pid = p.child.process_id().expect("pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(p.wait_exit(Duration::from_secs(30)).is_some(), "the parent died");
    drop(p);
    assert!(children.iter().all(|c| !processes_of(c).is_empty()), "both sub-agents outlived their parent");

    let mut p = pty::Pty::spawn(home.path(), &home.work(), &[&args[..], &["-c"]].concat(), 120, 36);
    p.wait_for(" message ", Duration::from_secs(30));
    std::fs::write(&go, "").unwrap();
    p.wait_for(&format!("GOT-BOTH-{m}"), Duration::from_secs(90));
    let last = server.chat_requests().into_iter().rev().find(|r| first_user(r) == parent_prompt).unwrap();
    for answer in [format!("ANSWER-A-{m}"), format!("ANSWER-B-{m}")] {
        assert_eq!(count(&all_text(&last), &answer), 1, "{answer} once: {}", all_text(&last));
    }
    sync_wait("both sub-agents to end", || children.iter().all(|c| processes_of(c).is_empty()));
    let kept = std::fs::read_dir(home.path().join("jobs"))
        .map(|dirs| dirs.flatten().any(|d| d.path().join("queued-hello.json").exists()))
        .unwrap_or(false);
    assert!(!kept, "the kept task goes once it was handed over");
    let _ = p.child.kill();
    let _ = p.wait_exit(Duration::from_secs(10));
}

#[path = "common/sshd.rs"]
mod sshd;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_with_an_ssh_backend_runs_its_command_on_that_host() {
    let sshd = sshd::Sshd::start();
    let m = marker();
    let parent_prompt = format!("PARENT-{m}");
    let task = format!("TASK-{m}: remote");
    let (pp, tk) = (parent_prompt.clone(), task.clone());
    let backend = format!("ssh:{}", sshd::HOST);
    let server = ScriptedServer::with_responder(move |req| {
        if first_user(req) == pp {
            if all_text(req).contains("[Sub-agent ") || last_role(req) == "tool" {
                return ScriptedResponse::text("ok");
            }
            let args = json!({ "task": tk, "backend": backend });
            return ScriptedResponse::tool_call("call_p1", "agent", &args.to_string());
        }
        if last_role(req) == "tool" {
            let result = messages(req).last().and_then(|m| m["content"].as_str()).unwrap_or("").to_string();
            let v: Value = serde_json::from_str(&result).unwrap_or_default();
            let via_ssh = v["output"].as_str().unwrap_or("").contains(&format!("ssh-yes-{m}"));
            return ScriptedResponse::text(&format!("ANSWER-{m} ssh={via_ssh} backend={}", v["backend"]));
        }
        let command = format!("test -n \"$SSH_CONNECTION\" && echo ssh-yes-{m}");
        ScriptedResponse::tool_call("call_c1", "terminal", &json!({ "command": command }).to_string())
    })
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    // The parent runs locally; the ssh settings are in the config both read.
    let text = sshd.talaria_config(10).replace(&format!("backend = \"ssh:{}\"\n", sshd::HOST), "");
    std::fs::write(home.path().join("config.toml"), &text).unwrap();
    let mut config = Config::from_toml(&text, std::path::Path::new("config.toml")).unwrap();
    config.agents.run_base_url = Some(server.base_url());
    let mut run = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config).await;
    run.send(Op::Submit { text: parent_prompt, mode: None });
    let (started, _) = run.tool_result("call_p1").await;
    assert_eq!(started["status"], "started", "{started}");
    let answer = format!("ANSWER-{m} ssh=true backend=\"ssh:{}\"", sshd::HOST);
    run.wait_for("the remote answer", |e| matches!(e, Event::UserMessage { text, .. } if text.contains(&answer))).await;
    run.shutdown().await;
}

/// The result the parent's history holds for tool call `call_id`.
fn result_of(req: &RecordedRequest, call_id: &str) -> Option<Value> {
    messages(req)
        .iter()
        .filter(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .find_map(|m| serde_json::from_str(m["content"].as_str()?).ok())
}

/// Stored parent messages that start with `prefix`.
async fn stored_count(run: &inproc::Running, session: &str, prefix: &str) -> usize {
    let stored = run.store.load_messages(session).await.unwrap();
    stored.iter().filter_map(|m| m.content.as_deref()).filter(|c| c.starts_with(prefix)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_parallel_a_sub_agent_queues_until_one_ends_and_wait_returns_its_answer_and_usage_counts_each() {
    use talaria::protocol::agent::AgentState;
    use talaria::protocol::SlashCommand;
    let m = marker();
    let parent_prompt = format!("PARENT-{m}: two, one at a time");
    let (task_a, task_b) = (format!("TASK-A-{m}: echo alpha"), format!("TASK-B-{m}: echo beta"));
    let (pp, ta, tb) = (parent_prompt.clone(), task_a.clone(), task_b.clone());
    let server = ScriptedServer::with_responder(move |req| {
        let first = first_user(req);
        if first == pp {
            if result_of(req, "call_w").is_some() || all_text(req).contains("[Sub-agent ") {
                return ScriptedResponse::text("noted");
            }
            if let Some(b) = result_of(req, "call_b") {
                let job = b["session_id"].as_str().unwrap_or("").to_string();
                let args = json!({ "action": "wait", "session_id": job, "timeout": 300 });
                return ScriptedResponse::tool_call("call_w", "process", &args.to_string());
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
    let mut config = config_for(&server);
    config.agents.max_parallel = 1;
    let mut run = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config).await;
    let parent = run.session_id();
    run.send(Op::Submit { text: parent_prompt.clone(), mode: None });
    let (a, _) = run.tool_result("call_a").await;
    let (b, _) = run.tool_result("call_b").await;
    let (job_a, job_b) = (a["session_id"].as_str().unwrap().to_string(), b["session_id"].as_str().unwrap().to_string());
    // One of the two got the slot; the other waits for it (the calls run side by side).
    let mut statuses = vec![a["status"].as_str().unwrap().to_string(), b["status"].as_str().unwrap().to_string()];
    statuses.sort();
    assert_eq!(statuses, vec!["queued".to_string(), "started".to_string()], "{a}\n{b}");
    let (second_job, first_task, second_task) =
        if a["status"] == "started" { (&job_b, &task_a, &task_b) } else { (&job_a, &task_b, &task_a) };

    let (waited, _) = run.tool_result("call_w").await;
    assert_eq!(waited["status"], "exited", "{waited}");
    assert_eq!(waited["agent"]["state"], "done", "{waited}");
    assert_eq!(waited["answer"], format!("ANSWER-B-{m} saw=true"), "the final answer: {waited}");
    assert!(waited.get("output_tail").is_none(), "not its raw event stream: {waited}");

    // Both end; A was never waited for, so its end is told once as a notice; B's answer
    // came through the wait, so never as one.
    for job in [&job_a, &job_b] {
        run.wait_since(0, "both sub-agents to end", |e| matches!(e, Event::JobFinished { id, .. } if id == job)).await;
    }
    let notice = format!("[Sub-agent {job_a} ");
    let is_notice = |e: &Event| matches!(e, Event::UserMessage { text, .. } if text.starts_with(&notice));
    run.wait_since(0, "A's notice", is_notice).await;
    // The answer to it, and its turn's end (either may have been seen already).
    let at = run.seen.iter().position(is_notice).unwrap();
    let noted = |e: &Event| matches!(e, Event::AssistantDone { text, .. } if text == "noted");
    run.wait_since(at, "the answer to the notice", noted).await;
    let at = at + run.seen[at..].iter().position(noted).unwrap();
    run.wait_since(at, "the notice's turn to end", |e| matches!(e, Event::TurnFinished { .. })).await;
    assert_eq!(stored_count(&run, &parent, &notice).await, 1);
    assert_eq!(stored_count(&run, &parent, &format!("[Sub-agent {job_b} ")).await, 0, "B was seen through wait");

    // The queued one made its first request only after the other one's last.
    let requests = server.chat_requests();
    let first_of = |task: &str| requests.iter().position(|r| first_user(r) == task).unwrap();
    let last_of = |task: &str| requests.iter().rposition(|r| first_user(r) == task).unwrap();
    assert!(last_of(first_task) < first_of(second_task), "the queued sub-agent started after the first ended");
    let queued_seen = run.seen.iter().any(
        |e| matches!(e, Event::AgentUpdated { id, agent } if id == second_job && agent.state == AgentState::Queued),
    );
    assert!(queued_seen, "the pane was told it queued");

    // /usage counts each sub-agent (two model calls each: 10 prompt tokens apiece).
    run.send(Op::Command(SlashCommand::Usage));
    let usage = run.notice("this session (all runs)").await;
    for (job, task) in [(&job_a, &task_a), (&job_b, &task_b)] {
        let line = usage.lines().find(|l| l.contains(&format!("sub-agent {job} "))).unwrap_or_default();
        assert!(line.contains(&task[..8]) && line.contains("20 in /"), "{job} in /usage: {usage}");
    }
    assert!(usage.contains("sub-agent sessions (all runs): 2"), "{usage}");
    run.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_holds_a_sub_agent_before_its_next_model_call_and_unpause_lets_it_finish() {
    use talaria::protocol::agent::AgentState;
    use talaria::protocol::SlashCommand;
    let m = marker();
    let home = tempfile::tempdir().unwrap();
    let go = home.path().join(format!("go-{m}"));
    let parent_prompt = format!("PARENT-{m}");
    let task = format!("TASK-{m}: wait for the go file");
    let (pp, tk, gp) = (parent_prompt.clone(), task.clone(), go.clone());
    let server = ScriptedServer::with_responder(move |req| {
        let first = first_user(req);
        if first == pp {
            if all_text(req).contains("[Sub-agent ") || last_role(req) == "tool" {
                return ScriptedResponse::text("ok");
            }
            return ScriptedResponse::tool_call("call_p1", "agent", &json!({ "task": tk }).to_string());
        }
        if last_role(req) == "tool" {
            return ScriptedResponse::text(&format!("ANSWER-{m}"));
        }
        let command = format!("while [ ! -e {} ]; do sleep 0.05; done; echo released-{m}", gp.display());
        ScriptedResponse::tool_call("call_c1", "terminal", &json!({ "command": command, "timeout": 600 }).to_string())
    })
    .await
    .unwrap();
    let mut run = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config_for(&server)).await;
    run.send(Op::Submit { text: parent_prompt, mode: None });
    let (started, _) = run.tool_result("call_p1").await;
    let job = started["session_id"].as_str().unwrap().to_string();
    run.turn_finished().await;
    wait_processes("the sub-agent's command", &format!("go-{m} ]"), true).await;

    run.send(Op::Command(SlashCommand::Pause(None)));
    run.notice("sub-agent(s) pause too").await;
    std::fs::write(&go, "").unwrap();
    // Its command ends; its next model call waits for the unpause.
    run.wait_for(
        "the sub-agent to wait",
        |e| matches!(e, Event::AgentUpdated { id, agent } if *id == job && agent.state == AgentState::Waiting),
    )
    .await;
    let child = |r: &RecordedRequest| first_user(r) == task;
    let before = server.chat_requests().into_iter().filter(child).count();
    assert_eq!(before, 1, "no model call while paused");
    assert!(home.path().join("ESTOP").exists());

    run.send(Op::Command(SlashCommand::Unpause));
    let answer = format!("ANSWER-{m}");
    run.wait_for(
        "the answer after unpause",
        |e| matches!(e, Event::UserMessage { text, .. } if text.contains(&answer)),
    )
    .await;
    assert_eq!(server.chat_requests().into_iter().filter(child).count(), 2);
    run.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_command_line_looks_like_a_sub_agent_is_not_one_and_a_real_one_is_linked_in_sqlite() {
    let m = marker();
    let parent_prompt = format!("PARENT-{m}");
    // What the old code took for a sub-agent: `exec <exe> __agent --session <id> ...`.
    let lookalike = format!("exec bash -c 'read l; echo \"got-{m}:$l\"' __agent --session fake{m} --depth 1");
    let (pp, cmd) = (parent_prompt.clone(), lookalike.clone());
    let server = ScriptedServer::with_responder(move |req| {
        if first_user(req) != pp {
            return ScriptedResponse::text("child");
        }
        if result_of(req, "call_3").is_some() {
            return ScriptedResponse::text("done");
        }
        if result_of(req, "call_2").is_some() {
            let job = result_of(req, "call_1").unwrap()["session_id"].as_str().unwrap_or("").to_string();
            let args = json!({ "action": "wait", "session_id": job, "timeout": 60 });
            return ScriptedResponse::tool_call("call_3", "process", &args.to_string());
        }
        if let Some(started) = result_of(req, "call_1") {
            let job = started["session_id"].as_str().unwrap_or("").to_string();
            let args = json!({ "action": "write", "session_id": job, "data": format!("plain-{m}\n") });
            return ScriptedResponse::tool_call("call_2", "process", &args.to_string());
        }
        let args = json!({ "command": cmd, "background": true });
        ScriptedResponse::tool_call("call_1", "terminal", &args.to_string())
    })
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut config = config_for(&server);
    // The write to a job outside the kernel sandbox would ask; this one runs inside it or
    // is allowed, whichever the machine has.
    config.approvals.mode = talaria::protocol::ApprovalMode::Off;
    let mut run = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config).await;
    run.send(Op::Submit { text: parent_prompt, mode: None });
    let (written, _) = run.tool_result("call_2").await;
    assert_eq!(written["status"], "ok", "{written}");
    let (waited, _) = run.tool_result("call_3").await;
    let tail = waited["output_tail"].as_str().unwrap_or("");
    assert!(tail.contains(&format!("got-{m}:plain-{m}")), "written as is, not as a sub-agent message: {waited}");
    assert!(waited.get("agent").is_none(), "{waited}");
    run.shutdown().await;
}

#[test]
fn the_jobs_pane_labels_a_sub_agent_and_its_log_view_shows_its_conversation_live() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let m = marker();
    let short = m % 100_000;
    let home = common::Home::new();
    let go = home.work().join(format!("go-{m}"));
    let parent_prompt = format!("PARENT-{m}");
    let task = format!("W{short}: wait");
    let (pp, tk) = (parent_prompt.clone(), task.clone());
    let server = rt
        .block_on(ScriptedServer::with_responder(move |req| {
            let first = first_user(req);
            if first == pp {
                if all_text(req).contains("[Sub-agent ") {
                    return ScriptedResponse::text(&format!("GOT-IT-{m}"));
                }
                if last_role(req) == "tool" {
                    return ScriptedResponse::text("working on it");
                }
                return ScriptedResponse::tool_call("call_p1", "agent", &json!({ "task": tk }).to_string());
            }
            if last_role(req) == "tool" {
                let released = all_text(req).contains(&format!("released-{m}"));
                return ScriptedResponse::text(&format!("ANSWER-{m} released={released}"));
            }
            let command = format!("while [ ! -e go-{m} ]; do sleep 0.05; done; echo released-{m}");
            ScriptedResponse::tool_call(
                "call_c1",
                "terminal",
                &json!({ "command": command, "timeout": 600 }).to_string(),
            )
        }))
        .unwrap();
    let url = server.base_url();
    let mut p = pty::Pty::spawn(home.path(), &home.work(), &["--base-url", url.as_str(), "--model", "m"], 140, 40);
    p.wait_for(" message ", Duration::from_secs(30));
    p.type_text(&parent_prompt);
    p.send(b"\r");
    // The pane names it as an agent, with its state and its task.
    let label = format!("● working · \"{task}\"");
    let screen = p.wait_for(&label, Duration::from_secs(60));
    assert!(screen.contains("agent_"), "{screen}");
    sync_wait("the sub-agent's command", || !processes_of(&format!("go-{m} ]")).is_empty());

    // Its log view: the conversation drawn as the transcript draws one, not JSON lines.
    p.send(b"\t");
    p.wait_for("▶ agent_", Duration::from_secs(10));
    p.send(b"\r");
    let title = format!("sub-agent \"{task}\"");
    let screen = p.wait_for(&title, Duration::from_secs(10));
    let screen = if screen.contains(&format!("while [ ! -e go-{m}")) {
        screen
    } else {
        p.wait_for(&format!("while [ ! -e go-{m}"), Duration::from_secs(10))
    };
    assert!(screen.contains("terminal"), "the tool call is a cell: {screen}");
    assert!(!screen.contains("\"type\""), "no raw event lines: {screen}");
    // Live: its answer appears in the open view.
    std::fs::write(&go, "").unwrap();
    let screen = p.wait_for(&format!("ANSWER-{m} released=true"), Duration::from_secs(60));
    assert!(screen.contains(&title), "still the log view: {screen}");
    assert!(!screen.contains("\"type\""), "{screen}");

    // Closed, the pane says it is done.
    p.send(b"\x1b");
    p.wait_for(&format!("GOT-IT-{m}"), Duration::from_secs(60));
    p.wait_for(&format!("✓ done · \"{task}\""), Duration::from_secs(30));
    let _ = p.child.kill();
    let _ = p.wait_exit(Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exit_summary_counts_each_sub_agents_tokens() {
    let m = marker();
    let home = common::Home::new();
    let parent_prompt = format!("PARENT-{m}");
    let task = format!("TASK-{m}: echo");
    let (pp, tk) = (parent_prompt.clone(), task.clone());
    let server = ScriptedServer::with_responder(move |req| {
        if first_user(req) == pp {
            if result_of(req, "call_w").is_some() {
                return ScriptedResponse::text("done");
            }
            if let Some(started) = result_of(req, "call_p1") {
                let job = started["session_id"].as_str().unwrap_or("").to_string();
                let args = json!({ "action": "wait", "session_id": job, "timeout": 120 });
                return ScriptedResponse::tool_call("call_w", "process", &args.to_string());
            }
            return ScriptedResponse::tool_call("call_p1", "agent", &json!({ "task": tk }).to_string());
        }
        if last_role(req) == "tool" {
            return ScriptedResponse::text(&format!("ANSWER-{m}"));
        }
        ScriptedResponse::tool_call("call_c1", "terminal", &json!({ "command": format!("echo e-{m}") }).to_string())
    })
    .await
    .unwrap();
    let out = home.run(&["exec", "--base-url", &server.base_url(), &parent_prompt]).await;
    let err = common::stderr(&out);
    assert!(out.status.success(), "{err}");
    // The parent made three calls (30 prompt tokens), the sub-agent two (20).
    assert!(err.contains("talaria: this run: 30 in /"), "{err}");
    let line = err.lines().find(|l| l.starts_with("talaria: sub-agent job_")).unwrap_or_default();
    assert!(line.contains(&format!("\"TASK-{m}")) && line.contains("20 in /"), "{err}");
    assert!(err.contains("talaria: with its 1 sub-agent(s): 50 in /"), "{err}");
}
