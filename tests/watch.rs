//! Watch patterns on job output (DESIGN §4c), with real processes: `process watch` /
//! `unwatch`, the rate limit under a flood, a watch the user set (told to the user, never
//! to the model), and end to end through the engine and the scripted model server: a
//! READY line becomes a new turn, exactly once, a second match within the cooldown is
//! folded into a count, and notices arriving together make one turn without breaking the
//! exactly-once exit notice.

#[path = "common/inproc.rs"]
mod inproc;
#[path = "common/jobs_env.rs"]
mod jobs_env;

use std::path::Path;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;
use talaria::config::Config;
use talaria::engine::jobs::{JobNotice, NoticeKind};
use talaria::engine::tools::terminal::TerminalTool;
use talaria::engine::tools::{Tool, ToolSignals};
use talaria::engine::SessionChoice;
use talaria::protocol::{Event, JobAction, Op, TurnTrigger};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

use jobs_env::{JobsEnv as Env, DEADLINE};

fn setup(tweak: impl FnOnce(&mut Config)) -> Env {
    Env::start(false, tweak)
}

impl Env {
    /// Start `command` as a background job; its id.
    async fn background(&self, command: &str) -> String {
        let r =
            TerminalTool.call(json!({"command": command, "background": true}), self.ctx(ToolSignals::inert())).await;
        r.value["session_id"].as_str().unwrap_or_else(|| panic!("no job in {}", r.value)).to_string()
    }

    fn go(&self, name: &str) {
        std::fs::write(self.home.path().join(name), "").expect("write the go file");
    }

    /// Take notices for s1 until `done` says enough (they may come in several pieces).
    async fn notices_until(&self, done: impl Fn(&[JobNotice]) -> bool) -> Vec<JobNotice> {
        let start = Instant::now();
        let mut all = Vec::new();
        loop {
            all.extend(self.jobs.take_notices("s1").await);
            if done(&all) {
                return all;
            }
            assert!(start.elapsed() < DEADLINE, "notices so far: {all:#?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A shell line that waits for the file `name` in the job's directory (the test's home).
fn until_file(name: &str) -> String {
    format!("until [ -e {name} ]; do sleep 0.02; done")
}

fn texts(notices: &[JobNotice], kind: NoticeKind) -> Vec<String> {
    notices.iter().filter(|n| n.kind == kind).map(|n| n.text.clone()).collect()
}

/// "(+N more)" at the end of a watch notice, 0 without one.
fn more_of(text: &str) -> u64 {
    text.rsplit_once("(+")
        .and_then(|(_, rest)| rest.split_once(" more)"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn watch_lists_refuses_bad_patterns_and_unwatch_removes() {
    let env = setup(|_| {});
    let id = env.background(&format!("echo 'server READY early'; {}; sleep 3001101", until_file("never"))).await;
    // The early line is in the log before the watch: the result says so.
    let start = Instant::now();
    let v = loop {
        let v = env.process(json!({"action": "watch", "session_id": id, "pattern": "READY"})).await;
        if v["earlier_matches"] == json!(1) {
            break v;
        }
        assert!(start.elapsed() < DEADLINE, "{v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(v["last_earlier_match"], json!("server READY early"));
    assert!(v["status"].as_str().unwrap_or("").starts_with("watching"), "{v}");
    let v = env.process(json!({"action": "watch", "session_id": id, "pattern": "(unclosed"})).await;
    let error = v["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("bad pattern /(unclosed/:"), "{v}");
    env.process(json!({"action": "watch", "session_id": id, "pattern": "error:"})).await;
    let v = env.process(json!({"action": "watch", "session_id": id})).await;
    let patterns: Vec<&str> =
        v["watches"].as_array().expect("list").iter().filter_map(|w| w["pattern"].as_str()).collect();
    assert_eq!(patterns, ["READY", "error:"]);
    assert_eq!(v["watches"][0]["set_by"], json!("model"));
    let v = env.process(json!({"action": "unwatch", "session_id": id, "pattern": "nope"})).await;
    assert!(v["error"].as_str().is_some_and(|e| e.contains("no watch /nope/")), "{v}");
    let v = env.process(json!({"action": "unwatch", "session_id": id, "pattern": "READY"})).await;
    assert_eq!((&v["status"], &v["removed"]), (&json!("ok"), &json!(1)));
    let v = env.process(json!({"action": "unwatch", "session_id": id})).await;
    assert_eq!((&v["removed"], &v["watches"]), (&json!(1), &json!([])));
    env.process(json!({"action": "kill", "session_id": id})).await;
    let v = env.process(json!({"action": "watch", "session_id": id, "pattern": "x"})).await;
    assert!(v["error"].as_str().is_some_and(|e| e.contains("already ended")), "{v}");
}

#[tokio::test]
async fn a_flood_of_matching_lines_gives_at_most_the_cap_with_the_rest_counted() {
    let env = setup(|c| {
        // Far longer than a flood of 5,000 lines takes, even on a loaded machine.
        c.jobs.watch_cooldown_s = 2.0;
        c.jobs.watch_max_notices = 3;
    });
    // Two floods of 5,000 matching lines, the second once the test has seen what the first
    // gave. Colour around the number: the pattern matches the line as a terminal shows it.
    let flood =
        |from: u32| format!("for i in $(seq {from} {}); do printf 'hit \\033[31m%s\\033[0m\\n' $i; done", from + 4_999);
    let command =
        format!("{}; {}; {}; {}; exit 0", until_file("go_flood"), flood(1), until_file("go_flood2"), flood(5_001));
    let id = env.background(&command).await;
    let v = env.process(json!({"action": "watch", "session_id": id, "pattern": "^hit [0-9]+$"})).await;
    assert!(v["status"].as_str().is_some_and(|s| s.starts_with("watching")), "{v}");
    env.go("go_flood");
    // The first line at once, the other 4,999 as one notice when the cooldown ends.
    let first = env.notices_until(|n| n.len() >= 2).await;
    assert_eq!(
        texts(&first, NoticeKind::Watch),
        [
            format!("[Job {id} matched /^hit [0-9]+$/: hit 1]"),
            format!("[Job {id} matched /^hit [0-9]+$/: hit 2 (+4998 more)]")
        ]
    );
    env.go("go_flood2");
    let rest = env.notices_until(|n| n.iter().any(|n| n.kind == NoticeKind::Exit)).await;
    let watch = texts(&rest, NoticeKind::Watch);
    eprintln!("10,000 matching lines gave 3 notices: {first:#?} {watch:#?}");
    // The cap: one more notice, which says the watch has ended; the rest is not told.
    assert_eq!(watch.len(), 1, "{watch:#?}");
    assert!(watch[0].starts_with(&format!("[Job {id} matched /^hit [0-9]+$/: hit 5001")), "{watch:#?}");
    assert!(watch[0].contains("This watch has sent its 3 notices"), "{watch:#?}");
    assert!(more_of(&watch[0]) < 5_000, "{watch:#?}");
    // Watch notices come first, then the exit notice, which they did not replace.
    assert_eq!(rest.last().map(|n| n.kind), Some(NoticeKind::Exit));
    assert_eq!(texts(&rest, NoticeKind::Exit).len(), 1);
}

#[tokio::test]
async fn a_watch_the_user_set_tells_the_user_and_not_the_model() {
    let mut env = setup(|c| c.jobs.watch_cooldown_s = 60.0);
    let id = env.background(&format!("{}; echo 'Listening on :8080'; exec sleep 3001102", until_file("go_user"))).await;
    let answer = env.jobs.ui_action(&id, JobAction::Watch { pattern: "Listening".into() }).await;
    assert!(matches!(&answer, Event::Notice { text, .. } if text.contains("watching")), "{answer:?}");
    env.wait_event(
        "the user's watches",
        |e| matches!(e, Event::JobWatches { patterns, .. } if patterns == &["Listening"]),
    )
    .await;
    env.go("go_user");
    let matched = env.wait_event("WatchMatched", |e| matches!(e, Event::WatchMatched { .. })).await;
    assert_eq!(
        matched,
        Event::WatchMatched {
            id: id.clone(),
            pattern: "Listening".into(),
            line: "Listening on :8080".into(),
            more: 0,
            ended: false
        }
    );
    assert!(env.jobs.take_notices("s1").await.is_empty(), "the model is not told");
    // The model's listing shows it, but the model cannot remove it.
    let v = env.process(json!({"action": "watch", "session_id": id})).await;
    assert_eq!(v["watches"][0]["set_by"], json!("user"));
    let v = env.process(json!({"action": "unwatch", "session_id": id})).await;
    assert_eq!(v["removed"], json!(0));
    let answer = env.jobs.ui_action(&id, JobAction::Unwatch { pattern: None }).await;
    assert!(matches!(&answer, Event::Notice { text, .. } if text.contains("stopped watching")), "{answer:?}");
    env.process(json!({"action": "kill", "session_id": id})).await;
}

// ---------------------------------------------------------------------------------------
// End to end: the engine, the scripted model, real jobs
// ---------------------------------------------------------------------------------------

fn terminal_call(id: &str, command: &str) -> ScriptedResponse {
    ScriptedResponse::tool_call(id, "terminal", &json!({"command": command, "background": true}).to_string())
}

fn watch_call(id: &str, pattern: &str) -> ScriptedResponse {
    let args = json!({"action": "watch", "session_id": "job_1", "pattern": pattern});
    ScriptedResponse::tool_call(id, "process", &args.to_string())
}

/// The user-role texts of chat request `n` (1-based).
async fn user_texts(server: &ScriptedServer, n: usize) -> Vec<String> {
    let requests = server.wait_for_chat_requests(n, DEADLINE).await;
    assert!(requests.len() >= n, "only {} requests", requests.len());
    requests[n - 1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect()
}

fn count(texts: &[String], prefix: &str) -> usize {
    texts.iter().filter(|t| t.starts_with(prefix)).count()
}

fn wall_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

async fn turn_started(engine: &mut inproc::Running) -> TurnTrigger {
    match engine.wait_for("TurnStarted", |e| matches!(e, Event::TurnStarted { .. })).await {
        Event::TurnStarted { trigger } => trigger,
        _ => unreachable!(),
    }
}

fn go_file(work: &Path, name: &str) {
    std::fs::write(work.join(name), "").expect("write the go file");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_model_watches_for_ready_and_hears_of_it_as_a_new_turn_once() {
    let home = tempfile::tempdir().expect("tempdir");
    // The server prints READY 3 s after the test lets it start (a file it waits for, so
    // the watch is surely set first), stamps the time, then two more READY lines at once.
    let command = format!(
        "echo booting; {}; sleep 3; date +%s%3N > ready_at; printf 'server \\033[1mREADY\\033[0m a\\n'; \
         echo 'server READY b'; echo 'server READY c'; exec sleep 3001201",
        until_file("go_ready")
    );
    let server = ScriptedServer::start([
        terminal_call("c1", &command),
        watch_call("c2", "READY"),
        ScriptedResponse::text("I will tell you when it is ready."),
        ScriptedResponse::text("The server is ready."),
        ScriptedResponse::text("It said READY again."),
    ])
    .await
    .expect("server");
    let mut config = Config::default();
    config.jobs.watch_cooldown_s = 2.0;
    let mut engine = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config).await;
    engine.send(Op::Submit { text: "start the server; tell me when it is ready".into(), mode: None });
    engine.turn_finished().await;
    let watch_result = server.wait_for_chat_requests(3, DEADLINE).await[2].body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
        .and_then(|m| m["content"].as_str())
        .map(str::to_string)
        .unwrap_or_default();
    assert!(watch_result.contains("\"status\":\"watching\""), "{watch_result}");

    go_file(&engine.work, "go_ready");
    assert_eq!(turn_started(&mut engine).await, TurnTrigger::JobNotification);
    let seen_at = wall_ms();
    engine.turn_finished().await;
    let texts = user_texts(&server, 4).await;
    assert_eq!(texts.last().map(String::as_str), Some("[Job job_1 matched /READY/: server READY a]"));
    assert_eq!(count(&texts, "[Job job_1 matched"), 1, "exactly once: {texts:#?}");
    let ready_at: u128 =
        std::fs::read_to_string(engine.work.join("ready_at")).expect("ready_at").trim().parse().expect("a time in ms");
    eprintln!("READY printed → notice turn started: {} ms", seen_at.saturating_sub(ready_at));

    // READY b and c came within the cooldown: one notice when it ends, counting c.
    assert_eq!(turn_started(&mut engine).await, TurnTrigger::JobNotification);
    engine.turn_finished().await;
    let texts = user_texts(&server, 5).await;
    assert_eq!(texts.last().map(String::as_str), Some("[Job job_1 matched /READY/: server READY b (+1 more)]"));
    assert_eq!(count(&texts, "[Job job_1 matched"), 2, "{texts:#?}");
    // Nothing more: the job stays quiet.
    let later = engine.collect_for(Duration::from_millis(2500)).await;
    assert!(!later.iter().any(|e| matches!(e, Event::TurnStarted { .. })), "{later:#?}");
    assert_eq!(server.chat_requests().len(), 5);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_match_and_the_exit_arriving_together_make_one_turn_and_the_exit_is_told_once() {
    let home = tempfile::tempdir().expect("tempdir");
    let command = format!("{}; echo 'error: disk full'; exit 3", until_file("go_exit"));
    let server = ScriptedServer::start([
        terminal_call("c1", &command),
        watch_call("c2", "^error:"),
        ScriptedResponse::text("Watching."),
        ScriptedResponse::text("It failed: disk full."),
        ScriptedResponse::text("Nothing new."),
    ])
    .await
    .expect("server");
    // The exit comes a moment after the line that matched, and on a loaded machine more
    // than the default 0.3 s later: the window "together" means is wide enough here.
    let config = Config::from_toml("[jobs]\nnotice_window_s = 3\n", Path::new("config.toml")).expect("config");
    let mut engine = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config).await;
    engine.send(Op::Submit { text: "run it and watch for errors".into(), mode: None });
    engine.turn_finished().await;
    go_file(&engine.work, "go_exit");
    assert_eq!(turn_started(&mut engine).await, TurnTrigger::JobNotification);
    engine.turn_finished().await;
    let texts = user_texts(&server, 4).await;
    let tail = &texts[texts.len() - 2..];
    assert_eq!(tail[0], "[Job job_1 matched /^error:/: error: disk full]");
    assert!(tail[1].starts_with("[Background job job_1 exited with code 3 after "), "{tail:#?}");
    // Both in one turn: no second notification turn.
    engine.send(Op::Submit { text: "anything new?".into(), mode: None });
    assert_eq!(turn_started(&mut engine).await, TurnTrigger::User);
    engine.turn_finished().await;
    let texts = user_texts(&server, 5).await;
    assert_eq!(count(&texts, "[Background job job_1 exited"), 1, "never twice: {texts:#?}");
    assert_eq!(count(&texts, "[Job job_1 matched"), 1, "{texts:#?}");
    let triggers: Vec<TurnTrigger> = engine
        .seen
        .iter()
        .filter_map(|e| match e {
            Event::TurnStarted { trigger } => Some(trigger.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(triggers, [TurnTrigger::User, TurnTrigger::JobNotification, TurnTrigger::User]);
    let row = engine.store.job_get(1).await.expect("job row").expect("job 1");
    assert!(row.notified, "the exit notice marked the job notified");
    engine.shutdown().await;
}
