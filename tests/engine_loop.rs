//! The engine loop never awaits the network for a command: Esc interrupts a `/compact`
//! whose summary request hangs, and `/model` lists models while the engine keeps
//! answering (DESIGN §3a).

mod common;
#[path = "common/inproc.rs"]
mod inproc;

use std::time::Duration;

use talaria::engine::SessionChoice;
use talaria::protocol::{Event, Op, SlashCommand};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

const DEADLINE: Duration = Duration::from_secs(30);

fn submit(text: &str) -> Op {
    Op::Submit { text: text.into(), mode: None }
}

#[tokio::test(flavor = "multi_thread")]
async fn esc_interrupts_a_compact_whose_summary_request_hangs() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([
        ScriptedResponse::text("answer one"),
        ScriptedResponse::text("answer two"),
        ScriptedResponse::hang(),
        ScriptedResponse::text("answer three"),
    ])
    .await
    .unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    for text in ["first question", "second question"] {
        engine.send(submit(text));
        engine.turn_finished().await;
    }

    engine.send(Op::Command(SlashCommand::Compact(None)));
    engine.notice("compacting older turns").await;
    // The summary request has reached the server, which never answers it.
    let requests = server.wait_for_requests(3, DEADLINE).await;
    assert_eq!(requests.iter().filter(|r| r.is_chat()).count(), 3, "the summary request was sent");

    // A message sent meanwhile waits (the compaction owns the history); it does not block
    // the loop either: Esc is handled at once.
    engine.send(submit("third question"));
    engine
        .wait_for(
            "PendingChanged",
            |e| matches!(e, Event::PendingChanged { pending, queued } if !pending.is_empty() || !queued.is_empty()),
        )
        .await;
    let interrupted_at = std::time::Instant::now();
    engine.send(Op::Interrupt);
    engine.notice("not compacted: interrupted").await;
    assert!(interrupted_at.elapsed() < Duration::from_secs(10), "Esc waited {:?}", interrupted_at.elapsed());

    // The queued message then runs with the whole history, not compacted.
    engine.turn_finished().await;
    let chats = server.chat_requests();
    let last = chats.last().expect("a request for the third question");
    let texts: Vec<String> = last.messages().iter().map(|m| m.text().to_string()).collect();
    for expected in ["first question", "answer one", "second question", "answer two", "third question"] {
        assert!(texts.iter().any(|t| t == expected), "{expected:?} missing from {texts:#?}");
    }
    assert!(!texts.iter().any(|t| t.contains("Summary of the earlier conversation")), "{texts:#?}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn listing_models_does_not_hold_up_the_engine() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("still here")]).await.unwrap();
    server.set_models_response(ScriptedResponse::hang());
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;

    engine.send(Op::Command(SlashCommand::Model(None)));
    server.wait_for_requests(1, DEADLINE).await;
    // While the listing hangs, a message is answered.
    engine.send(submit("are you there?"));
    engine.wait_for("the answer", |e| matches!(e, Event::AssistantDone { text, .. } if text == "still here")).await;
    engine.turn_finished().await;
    engine.shutdown().await;
}

/// `/sessions`, `/jobs`, `/heartbeat status` and `/goal status` come back as data (the
/// front ends format them with `talaria::present`), not as text made by the engine.
#[tokio::test(flavor = "multi_thread")]
async fn listings_and_standing_status_arrive_as_data() {
    use talaria::protocol::commands::{GoalCmd, HeartbeatCmd, JobsCmd};
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("hello")]).await.unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    engine.send(submit("list sessions marker 7345"));
    engine.turn_finished().await;
    let sid = engine.session_id();

    engine.send(Op::Command(SlashCommand::Sessions));
    let Event::SessionList { sessions, matching } =
        engine.wait_for("SessionList", |e| matches!(e, Event::SessionList { .. })).await
    else {
        unreachable!()
    };
    assert_eq!(matching, None);
    let this = sessions.iter().find(|s| s.id == sid).expect("this session is listed");
    assert_eq!(this.first_line, "list sessions marker 7345");
    assert_eq!(this.message_count, 2);

    engine.send(Op::Command(SlashCommand::Resume(Some("no such words 7345".into()))));
    let listed = engine.wait_for("an empty match", |e| matches!(e, Event::SessionList { .. })).await;
    assert_eq!(listed, Event::SessionList { sessions: Vec::new(), matching: Some("no such words 7345".into()) });

    engine.send(Op::Command(SlashCommand::Jobs(JobsCmd::List)));
    let jobs = engine.wait_for("JobList", |e| matches!(e, Event::JobList { .. })).await;
    assert_eq!(jobs, Event::JobList { jobs: Vec::new() });

    engine.send(Op::Command(SlashCommand::Heartbeat(HeartbeatCmd::Set { interval_s: 600, prompt: "check".into() })));
    engine.notice("heartbeat set").await;
    engine.send(Op::Command(SlashCommand::Heartbeat(HeartbeatCmd::Status)));
    let Event::HeartbeatStatus { heartbeat: Some(hb) } =
        engine.wait_for("HeartbeatStatus", |e| matches!(e, Event::HeartbeatStatus { .. })).await
    else {
        panic!("no heartbeat in the status")
    };
    assert_eq!((hb.interval_s, hb.paused, hb.prompt.as_str()), (600, false, "check"));
    assert!(hb.next_in_ms.is_some_and(|ms| ms <= 600_000), "{hb:?}");
    assert!(talaria::present::heartbeat_row(&hb).starts_with("♥ every 10m · next in"));

    engine.send(Op::Command(SlashCommand::Goal(GoalCmd::Status)));
    let goal = engine.wait_for("GoalStatus", |e| matches!(e, Event::GoalStatus { .. })).await;
    assert_eq!(goal, Event::GoalStatus { goal: None, gates_only: false });
    engine.shutdown().await;
}

/// `/permissions` through the engine names the sandbox mode, the writable roots and
/// whether the kernel sandbox is active; the status event carries the short label.
#[tokio::test(flavor = "multi_thread")]
async fn permissions_name_the_mode_the_roots_and_whether_the_sandbox_is_active() {
    use talaria::config::Config;
    let home = tempfile::tempdir().unwrap();
    let extra = home.path().join("extra-root");
    std::fs::create_dir_all(&extra).unwrap();
    let extra = std::fs::canonicalize(extra).unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("unused")]).await.unwrap();
    let config = |toml: &str| Config::from_toml(toml, &home.path().join("config.toml")).expect("config");

    let cases = [
        (
            format!("[sandbox]\nnetwork = false\nwritable_roots = [{:?}]\n", extra.display().to_string()),
            "sandbox:offline",
            vec!["sandbox: workspace-write", "Landlock ABI", "active; network off", "approvals: auto (sandboxed"],
        ),
        (
            "[sandbox]\nmode = \"read-only\"\n".to_string(),
            "sandbox:ro",
            vec![
                "sandbox: read-only",
                "active; network through talaria's proxy, host by host (ask)",
                "writable: nothing but talaria's job files",
            ],
        ),
        (
            "[sandbox]\nmode = \"off\"\n".to_string(),
            "NO SANDBOX",
            vec!["sandbox: off (commands run with your full permissions)", "approvals: auto, acting as prompt"],
        ),
    ];
    for (toml, label, needles) in cases {
        let mut engine = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config(&toml)).await;
        let work = std::fs::canonicalize(&engine.work).unwrap().display().to_string();
        engine
            .wait_since(
                0,
                "the sandbox label",
                |e| matches!(e, Event::Status(s) if s.sandbox.as_deref() == Some(label)),
            )
            .await;
        engine.send(Op::Command(SlashCommand::Permissions));
        let text = engine.notice("sandbox:").await;
        for needle in needles {
            assert!(text.contains(needle), "{toml}: {needle:?} missing from\n{text}");
        }
        let roots = text.lines().next().unwrap_or_default();
        if label == "sandbox:offline" {
            assert!(roots.contains(&work) && roots.contains(&extra.display().to_string()), "{roots}");
        } else {
            assert!(!roots.contains(&work), "{toml}: the working directory is no root here: {roots}");
        }
        engine.shutdown().await;
    }
}

/// The liveness watchdog is the running turn's: a stalled turn is interrupted loudly, and a
/// finished one is left alone. (Its task outlived every turn — one more tokio task per turn
/// in the soak bench — and `timeout_s` after an answered turn "interrupted" it with an error.)
#[tokio::test(flavor = "multi_thread")]
async fn the_liveness_watchdog_interrupts_a_stalled_turn_and_stops_with_a_finished_one() {
    let home = tempfile::tempdir().unwrap();
    let server =
        ScriptedServer::start([ScriptedResponse::hang(), ScriptedResponse::text("answered in time")]).await.unwrap();
    let text = "[agent.turn_liveness]\ntimeout_s = 0.3\npoll_s = 0.05\n";
    let config = talaria::config::Config::from_toml(text, std::path::Path::new("config.toml")).unwrap();
    let mut engine = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config).await;

    engine.send(submit("this one stalls"));
    engine.notice("made no progress").await;
    engine.turn_finished().await;

    engine.send(submit("this one answers"));
    engine.wait_for("the answer", |e| matches!(e, Event::AssistantDone { .. })).await;
    engine.turn_finished().await;
    // Many times the timeout: a watchdog left running would have spoken by now.
    let later = engine.collect_for(Duration::from_secs(2)).await;
    let spoke: Vec<_> =
        later.iter().filter(|e| matches!(e, Event::Notice { text, .. } if text.contains("made no progress"))).collect();
    assert!(spoke.is_empty(), "the finished turn was 'interrupted': {spoke:?}");
    engine.shutdown().await;
}

/// What a model call spent is in the session's totals as soon as the call ends, not when
/// the turn does: a crash or a quit in the middle of a long turn keeps it.
#[tokio::test(flavor = "multi_thread")]
async fn a_calls_tokens_are_in_the_database_while_its_turn_still_runs() {
    let home = tempfile::tempdir().unwrap();
    let go = home.path().join("work").join(format!("go-{}", std::process::id()));
    let command = format!("until [ -e {} ]; do sleep 0.05; done", go.display());
    let call = serde_json::json!({ "command": command, "timeout": 120 }).to_string();
    let server =
        ScriptedServer::start([ScriptedResponse::tool_call("c1", "terminal", &call), ScriptedResponse::text("done")])
            .await
            .unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    engine.send(submit("wait for the go file"));
    engine.wait_for("the command", |e| matches!(e, Event::ToolStarted { .. })).await;
    let store = inproc::store(home.path());
    let session = engine.session_id();
    let start = std::time::Instant::now();
    // The first call (10 in / 5 out) ended; its turn waits on the command.
    while store.session_usage(&session).await.unwrap() != Some((10, 5)) {
        assert!(start.elapsed() < DEADLINE, "not counted: {:?}", store.session_usage(&session).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::write(&go, "").unwrap();
    engine.turn_finished().await;
    assert_eq!(store.session_usage(&session).await.unwrap().map(|(p, _)| p), Some(20), "each call counted once");
    engine.shutdown().await;
}
