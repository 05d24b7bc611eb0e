//! Goals and heartbeats end to end, the engine in-process against a scripted server: a
//! goal whose gate fails, is fixed by the model and then passes, judged done; and the pause
//! (ESTOP) holding back a due heartbeat, a goal continuation and typed messages.

#[path = "common/inproc.rs"]
mod inproc;

use std::path::Path;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use talaria::engine::SessionChoice;
use talaria::present;
use talaria::protocol::commands::{GateCmd, GoalCmd};
use talaria::protocol::{Event, Op, Phase, SlashCommand, TurnTrigger};
use talaria::testkit::scripted::{text_chunks, RecordedRequest, ScriptedResponse, ScriptedServer, DONE};

/// How long a check that something does NOT happen watches.
const QUIET: Duration = Duration::from_secs(3);

/// The last user message of a chat request.
fn last_user(request: &RecordedRequest) -> String {
    let messages = request.body["messages"].as_array().expect("messages").clone();
    let user = messages.iter().rev().find(|m| m["role"] == "user").expect("a user message");
    user["content"].as_str().unwrap_or("").to_string()
}

/// An answer that takes a few seconds (so commands sent meanwhile land during the turn).
fn slow_text(text: &str) -> ScriptedResponse {
    let mut payloads = text_chunks(text, 2);
    payloads.push(DONE.to_string());
    ScriptedResponse::sse(payloads).delay(Duration::from_millis(150))
}

/// `talaria pause` / `talaria unpause` from a shell, with this home.
fn talaria(home: &Path, args: &[&str]) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(args)
        .env("TALARIA_HOME", home)
        .env("TALARIA_TEST_GUARD", "1")
        .output()
        .expect("run talaria");
    assert!(out.status.success(), "talaria {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn goal(cmd: GoalCmd) -> Op {
    Op::Command(SlashCommand::Goal(cmd))
}

fn turn_started(trigger: TurnTrigger) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Event::TurnStarted { trigger: t } if *t == trigger)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_goal_gate_fails_the_model_fixes_it_and_the_judge_says_done() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([
        slow_text("Looking around."),
        ScriptedResponse::tool_call("call_1", "write_file", r#"{"path":"done.txt","content":"ok\n"}"#),
        ScriptedResponse::text("Created done.txt."),
        ScriptedResponse::text(r#"{"verdict":"done","reason":"ok"}"#),
    ])
    .await
    .unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;

    let mark = engine.seen.len();
    engine.send(goal(GoalCmd::Set("create done.txt".into())));
    engine.send(goal(GoalCmd::Gate(GateCmd::Add("test -f done.txt".into()))));
    engine.wait_for("the first goal turn", turn_started(TurnTrigger::Goal)).await;
    engine
        .wait_since(
            mark,
            "the gate added",
            |e| matches!(e, Event::Notice { text, .. } if text.contains("gate 1 added")),
        )
        .await;
    engine.notice("gate 1/1 ✗ $ test -f done.txt — exit 1").await;

    // The continuation carries the failed gate; the model writes the file.
    engine.wait_for("the gate-failed turn", turn_started(TurnTrigger::Goal)).await;
    engine.wait_for("the write", |e| matches!(e, Event::ToolFinished { outcome, .. } if outcome.ok)).await;
    engine.notice("gate 1/1 ✓ $ test -f done.txt").await;
    let achieved = engine.notice("goal achieved").await;
    assert_eq!(achieved, "✓ goal achieved: create done.txt — ok");
    // One notice per gate run, its result: none for "running", none repeated.
    let gate_notices: Vec<String> = engine.seen[mark..]
        .iter()
        .filter_map(|e| match e {
            Event::Notice { text, .. } if text.contains("$ test -f done.txt") && !text.contains("added") => {
                Some(text.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(gate_notices.len(), 2, "two gate runs: {gate_notices:#?}");
    assert!(gate_notices[0].starts_with("gate 1/1 ✗ $ test -f done.txt — exit 1"), "{gate_notices:#?}");
    assert_eq!(gate_notices[1], "gate 1/1 ✓ $ test -f done.txt");
    engine
        .wait_for(
            "the goal row showing it achieved",
            |e| matches!(e, Event::Status(s) if s.goal.as_deref().and_then(present::goal_row).is_some_and(|g| g.starts_with("goal ✓"))),
        )
        .await;

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 4);
    assert!(last_user(&requests[0]).contains("Goal: create done.txt"));
    let gate_failed = last_user(&requests[1]);
    assert!(gate_failed.starts_with("[Continuing toward your standing goal — a quality gate failed]"), "{gate_failed}");
    assert!(gate_failed.contains("  $ test -f done.txt\nExit code: 1\n"), "{gate_failed}");
    assert_eq!(std::fs::read_to_string(engine.work.join("done.txt")).unwrap(), "ok\n");
    // The judge: no tools, temperature 0; gate and judge output stay out of the context.
    let judge = &requests[3];
    assert!(judge.tool_names().is_empty(), "the judge is offered no tools");
    assert_eq!(judge.temperature(), Some(0.0));
    assert!(!requests[2].raw_body.contains("verdict"));

    // Nothing more goes to the model once the goal is achieved.
    engine.collect_for(Duration::from_secs(1)).await;
    assert_eq!(server.chat_requests().len(), 4);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn while_paused_a_due_heartbeat_waits_and_a_typed_message_waits_queued_then_runs_first() {
    let home = tempfile::tempdir().unwrap();
    let server =
        ScriptedServer::start([ScriptedResponse::text("Hello."), ScriptedResponse::text("Nothing has changed.")])
            .await
            .unwrap();
    // A session whose heartbeat fell due an hour ago (talaria was not running).
    let (_, work) = inproc::paths(home.path());
    let sid = {
        let store = inproc::store(home.path());
        let cwd = work.canonicalize().unwrap().display().to_string();
        let sid = store.create_session("scripted-model", &cwd, None).await.unwrap();
        let now = talaria::engine::heartbeat::now_ms();
        let state = json!({
            "prompt": "check the build", "interval_s": 600, "status": "active",
            "anchor_ms": now - 3_600_000, "last_fired_at": null, "fire_count": 0
        });
        store.meta_set(&format!("heartbeat:{sid}"), &state.to_string()).await.unwrap();
        sid
    };
    talaria(home.path(), &["pause", "--reason", "testing"]);

    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::Resume(sid.clone())).await;
    let quiet = engine.collect_for(QUIET).await;
    assert!(!quiet.iter().any(|e| matches!(e, Event::TurnStarted { .. })), "{quiet:?}");
    let statuses = quiet.iter().filter(|e| matches!(e, Event::Status(_))).count();
    assert!(statuses < 20, "{statuses} status events in {QUIET:?}: the engine spins on a held heartbeat");
    assert_eq!(server.chat_requests().len(), 0, "nothing is sent while paused");
    assert!(engine.seen.contains(&Event::Phase { phase: Phase::Paused }), "the front end is told it is paused");

    // A typed message waits, shown as queued (and saved), instead of bouncing back.
    let since = engine.seen.len();
    engine.send(Op::Submit { text: "hello while paused".into(), mode: None });
    let said = engine.notice("paused: your message waits").await;
    assert!(!said.contains('`'), "{said}");
    let waiting = engine
        .wait_since(
            since,
            "the waiting message",
            |e| matches!(e, Event::PendingChanged { queued, .. } if !queued.is_empty()),
        )
        .await;
    assert_eq!(waiting, Event::PendingChanged { pending: Vec::new(), queued: vec!["hello while paused".into()] });
    let quiet = engine.collect_for(Duration::from_secs(1)).await;
    assert!(!quiet.iter().any(|e| matches!(e, Event::RestoreInput { .. })), "{quiet:?}");
    assert_eq!(server.chat_requests().len(), 0, "a typed message is not sent while paused");

    // Unpaused: the user's message runs first, then the due heartbeat fires once.
    talaria(home.path(), &["unpause"]);
    engine.wait_for("the queued turn", turn_started(TurnTrigger::Queued)).await;
    engine.turn_finished().await;
    engine.wait_for("the heartbeat turn", turn_started(TurnTrigger::Heartbeat)).await;
    engine.turn_finished().await;
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(last_user(&requests[0]), "hello while paused");
    let text = last_user(&requests[1]);
    assert!(text.starts_with("[Heartbeat — recurring instruction, fires every 10m]\ncheck the build\n"), "{text}");
    let saved = engine.store.meta_get(&format!("heartbeat:{sid}")).await.unwrap().unwrap();
    let saved: serde_json::Value = serde_json::from_str(&saved).unwrap();
    assert_eq!(saved["fire_count"], 1);
    assert_eq!(engine.store.meta_get(&format!("pending:{sid}")).await.unwrap(), None, "nothing waits any more");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn while_paused_a_goal_does_not_continue() {
    let home = tempfile::tempdir().unwrap();
    // The first goal turn waits (in a command) for the test to have paused.
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_1", "terminal", r#"{"command":"while [ ! -f go ]; do sleep 0.1; done"}"#),
        ScriptedResponse::text("Waited."),
        ScriptedResponse::text("Still working."),
    ])
    .await
    .unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    let mark = engine.seen.len();
    engine.send(goal(GoalCmd::Set("create never.txt".into())));
    engine.send(goal(GoalCmd::Gate(GateCmd::Add("test -f never.txt".into()))));
    engine.wait_for("the first goal turn", turn_started(TurnTrigger::Goal)).await;
    engine
        .wait_since(
            mark,
            "the gate added",
            |e| matches!(e, Event::Notice { text, .. } if text.contains("gate 1 added")),
        )
        .await;
    talaria(home.path(), &["pause"]);
    engine.wait_for("the engine paused", |e| matches!(e, Event::Status(s) if s.paused)).await;
    std::fs::write(engine.work.join("go"), "").unwrap();
    engine.turn_finished().await;

    // Nothing autonomous while paused (DESIGN §5): no gate run, no continuation.
    let quiet = engine.collect_for(QUIET).await;
    assert!(!quiet.iter().any(|e| matches!(e, Event::TurnStarted { .. })), "{quiet:?}");
    assert!(
        !quiet.iter().any(|e| matches!(e, Event::Notice { text, .. } if text.contains("gate 1/1"))),
        "a gate ran while paused: {quiet:?}"
    );
    assert_eq!(server.chat_requests().len(), 2, "the goal does not continue while paused");

    talaria(home.path(), &["unpause"]);
    engine.notice("gate 1/1 ✗").await;
    engine.wait_for("the continuation", turn_started(TurnTrigger::Goal)).await;
    engine.turn_finished().await;
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 3);
    assert!(last_user(&requests[2]).contains("Exit code: 1"), "{}", last_user(&requests[2]));
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_goal_set_while_paused_starts_after_unpause() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("Starting.")]).await.unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    talaria(home.path(), &["pause"]);
    engine.send(goal(GoalCmd::Set("write a haiku".into())));
    engine.notice("goal set").await;
    let quiet = engine.collect_for(QUIET).await;
    assert!(!quiet.iter().any(|e| matches!(e, Event::TurnStarted { .. })), "{quiet:?}");
    assert_eq!(server.chat_requests().len(), 0);

    talaria(home.path(), &["unpause"]);
    engine.wait_for("the first goal turn", turn_started(TurnTrigger::Goal)).await;
    engine.turn_finished().await;
    assert!(last_user(&server.chat_requests()[0]).contains("Goal: write a haiku"));
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pause_right_after_a_goal_turn_holds_the_judge_back() {
    let home = tempfile::tempdir().unwrap();
    // The goal turn waits (in a command) for the test to have paused; no gates, so the
    // judge is next.
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_1", "terminal", r#"{"command":"while [ ! -f go ]; do sleep 0.1; done"}"#),
        ScriptedResponse::text("Done, I think."),
        ScriptedResponse::text(r#"{"verdict":"done","reason":"ok"}"#),
    ])
    .await
    .unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    engine.send(goal(GoalCmd::Set("say done".into())));
    engine.wait_for("the goal turn", turn_started(TurnTrigger::Goal)).await;
    talaria(home.path(), &["pause"]);
    engine.wait_for("the engine paused", |e| matches!(e, Event::Status(s) if s.paused)).await;
    std::fs::write(engine.work.join("go"), "").unwrap();
    engine.turn_finished().await;

    engine.collect_for(QUIET).await;
    assert_eq!(server.chat_requests().len(), 2, "no judge call while paused");

    talaria(home.path(), &["unpause"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while server.chat_requests().len() < 3 {
        assert!(tokio::time::Instant::now() < deadline, "the judge did not run after unpause");
        engine.collect_for(Duration::from_millis(100)).await;
    }
    let judge = &server.chat_requests()[2];
    assert!(judge.tool_names().is_empty() && judge.temperature() == Some(0.0), "the third call is the judge");
    engine.shutdown().await;
}

/// Live processes whose command line contains `needle`.
fn processes_with(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.parse::<u32>().is_ok()))
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let state = stat.rsplit(')').next().and_then(|r| r.trim_start().chars().next());
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            state != Some('Z') && String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pause_kills_a_running_gate_and_holds_it_back_until_unpause() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([
        ScriptedResponse::text("Done, I think."),
        ScriptedResponse::text(r#"{"verdict":"done","reason":"ok"}"#),
    ])
    .await
    .unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    // The gate logs each start, then waits for a file; its command line is unique.
    let go = format!("gate-go-{}-{}", std::process::id(), line!());
    let gate = format!("echo run >> gate-runs; while [ ! -f {go} ]; do sleep 0.05; done");
    let runs = engine.work.join("gate-runs");
    let count_runs = |p: &Path| std::fs::read_to_string(p).map(|t| t.lines().count()).unwrap_or(0);
    // The gate first (it waits for the goal), so the goal turn cannot end before it exists.
    engine.send(goal(GoalCmd::Gate(GateCmd::Add(gate))));
    engine.notice("gate 1 added").await;
    engine.send(goal(GoalCmd::Set("say done".into())));
    engine.wait_for("the goal turn", turn_started(TurnTrigger::Goal)).await;
    engine.turn_finished().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while count_runs(&runs) < 1 || processes_with(&go) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the gate did not start");
        engine.collect_for(Duration::from_millis(50)).await;
    }

    // A pause stops the running gate.
    talaria(home.path(), &["pause"]);
    engine.wait_for("the engine paused", |e| matches!(e, Event::Status(s) if s.paused)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while processes_with(&go) > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the gate still runs while paused");
        engine.collect_for(Duration::from_millis(50)).await;
    }
    // ... and it does not start again while paused (nor does the judge run).
    std::fs::write(engine.work.join(&go), "").unwrap();
    engine.collect_for(QUIET).await;
    assert_eq!(count_runs(&runs), 1, "no gate run while paused");
    assert_eq!(server.chat_requests().len(), 1, "no judge while paused");

    // After the pause the gate runs again, passes, and the judge decides.
    talaria(home.path(), &["unpause"]);
    engine.notice("gate 1/1 ✓").await;
    assert_eq!(count_runs(&runs), 2, "the gate ran once more after the pause");
    engine.notice("goal achieved").await;
    assert_eq!(server.chat_requests().len(), 2);
    engine.shutdown().await;
}
