//! Persistence end to end (DESIGN §7): every completed message is in state.db at once, a
//! resumed session gives the model exactly the messages it had, `/retry` and `/undo` hide
//! rows without deleting them, the index finds tool output, and a `kill -9` at any point
//! loses at most the message being streamed (a tool call cut short gets the `[lost: …]`
//! result).

mod common;
#[path = "common/inproc.rs"]
mod inproc;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{slow_stream, spawn_json, stderr, stdout, wait_event, Home};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use talaria::engine::SessionChoice;
use talaria::protocol::{Event, Op, SlashCommand, TurnOutcome, TurnTrigger};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};
use tokio::process::Child;

const LOST: &str = "[lost: talaria exited before this tool finished]";
const DEADLINE: Duration = Duration::from_secs(30);

/// The messages of a recorded chat request, as the JSON that was sent.
fn sent(request: &talaria::testkit::scripted::RecordedRequest) -> Vec<Value> {
    request.body["messages"].as_array().expect("messages array").clone()
}

async fn kill_9(mut child: Child) {
    child.start_kill().expect("SIGKILL talaria");
    let status = tokio::time::timeout(DEADLINE, child.wait()).await.expect("talaria died").expect("wait");
    assert!(!status.success(), "talaria was killed: {status:?}");
}

fn integrity_ok(db: &Path) {
    let conn = rusqlite::Connection::open(db).expect("open state.db");
    let result: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity_check");
    assert_eq!(result, "ok");
}

/// (role, content, active) of every row of a session, in order.
fn rows(db: &Path, session_id: &str) -> Vec<(String, String, bool)> {
    let conn = rusqlite::Connection::open(db).expect("open state.db");
    let mut stmt = conn
        .prepare("SELECT role, COALESCE(content, ''), active FROM messages WHERE session_id = ?1 ORDER BY seq")
        .unwrap();
    stmt.query_map([session_id], |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? == 1)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn session_id_of(json_stdout: &str) -> String {
    json_stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "SessionReady")
        .and_then(|v| v["data"]["session_id"].as_str().map(str::to_string))
        .expect("a SessionReady event")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_session_sends_the_model_the_same_messages_tool_calls_included() {
    let home = Home::new();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_1", "terminal", r#"{"command":"printf 'wombat%s' 42"}"#),
        ScriptedResponse::text("The command printed it."),
        ScriptedResponse::text("second answer"),
        ScriptedResponse::text("third answer"),
    ])
    .await
    .unwrap();
    let url = server.base_url();

    let first = home.run(&["exec", "--json", "--base-url", &url, "run the printf"]).await;
    assert_eq!(first.status.code(), Some(0), "stderr: {}", stderr(&first));
    let sid = session_id_of(&stdout(&first));
    let second = home.run(&["exec", "-c", "--base-url", &url, "continue please"]).await;
    assert_eq!(second.status.code(), Some(0), "stderr: {}", stderr(&second));
    let third = home.run(&["--resume", &sid, "exec", "--base-url", &url, "and resume"]).await;
    assert_eq!(third.status.code(), Some(0), "stderr: {}", stderr(&third));

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 4);
    let r2 = sent(&requests[1]);
    let r3 = sent(&requests[2]);
    let r4 = sent(&requests[3]);
    // The second request of the first run: system, user, the tool call, its result.
    assert_eq!(r2.len(), 4, "{r2:#?}");
    assert_eq!(r2[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(r2[3]["tool_call_id"], "call_1");
    assert!(r2[3]["content"].as_str().unwrap().contains("wombat42"), "{}", r2[3]);

    // `-c`: exactly what the model had, then the answer and the new message.
    assert_eq!(r3[..r2.len()], r2[..], "the continued session replays the same messages");
    assert_eq!(r3.len(), r2.len() + 2);
    assert_eq!(r3[r2.len()]["role"], "assistant");
    assert_eq!(r3[r2.len()]["content"], "The command printed it.");
    assert_eq!(r3[r2.len() + 1], json!({"role": "user", "content": "continue please"}));

    // `--resume <id>`: the same again.
    assert_eq!(r4[..r3.len()], r3[..]);
    assert_eq!(r4.len(), r3.len() + 2);
    assert_eq!(r4[r3.len()]["content"], "second answer");
    assert_eq!(r4[r3.len() + 1], json!({"role": "user", "content": "and resume"}));

    // The index finds a word that only the tool's output holds.
    let search = home.run(&["sessions", "search", "wombat42"]).await;
    assert_eq!(search.status.code(), Some(0), "stderr: {}", stderr(&search));
    let found = stdout(&search);
    assert!(found.contains(&sid) && found.contains("tool"), "{found}");

    // state.db (and the WAL files that follow it) are private.
    for name in ["state.db", "state.db-wal", "state.db-shm"] {
        let path = home.path().join(name);
        if name == "state.db" || path.exists() {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{name} has mode {mode:o}");
        }
    }
    integrity_ok(&home.path().join("state.db"));
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_and_undo_hide_rows_without_deleting_them() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([
        ScriptedResponse::text("answer one"),
        ScriptedResponse::text("answer two"),
        ScriptedResponse::text("answer two again"),
        ScriptedResponse::text("answer three"),
    ])
    .await
    .unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    let sid = engine.session_id();
    let db = engine.paths.state_db.clone();

    for text in ["question one", "question two"] {
        engine.send(Op::Submit { text: text.into(), mode: None });
        engine.turn_finished().await;
    }
    engine.send(Op::Command(SlashCommand::Retry));
    engine.wait_for("the retry turn", |e| matches!(e, Event::TurnStarted { trigger: TurnTrigger::Retry })).await;
    engine.turn_finished().await;

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(sent(&requests[2]), sent(&requests[1]), "a retry sends the same conversation again");
    let row = |role: &str, content: &str, active: bool| (role.to_string(), content.to_string(), active);
    assert_eq!(
        rows(&db, &sid),
        vec![
            row("user", "question one", true),
            row("assistant", "answer one", true),
            row("user", "question two", false),
            row("assistant", "answer two", false),
            row("user", "question two", true),
            row("assistant", "answer two again", true),
        ]
    );

    engine.send(Op::Command(SlashCommand::Undo(1)));
    let restored = engine.wait_for("RestoreInput", |e| matches!(e, Event::RestoreInput { .. })).await;
    assert_eq!(restored, Event::RestoreInput { text: "question two".into() });
    let after_undo = rows(&db, &sid);
    assert_eq!(after_undo.len(), 6, "undo deletes nothing");
    assert_eq!(after_undo.iter().filter(|r| r.2).count(), 2, "{after_undo:#?}");

    engine.send(Op::Submit { text: "question three".into(), mode: None });
    engine.turn_finished().await;
    let last = sent(&server.chat_requests()[3]);
    let texts: Vec<&str> = last[1..].iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(texts, ["question one", "answer one", "question three"]);

    // Hidden rows are out of the search index too.
    let hits = engine.store.search("again", 10).await.unwrap();
    assert!(hits.is_empty(), "{hits:?}");
    engine.shutdown().await;
    integrity_ok(&db);
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_the_first_stream_keeps_the_user_message() {
    let home = Home::new();
    let server = ScriptedServer::start([slow_stream()]).await.unwrap();
    let url = server.base_url();
    let (child, mut lines) = spawn_json(&home, &["--base-url", &url, "prompt before the crash"]);
    wait_event(&mut lines, "AssistantDelta", |_| true).await;
    kill_9(child).await;
    integrity_ok(&home.path().join("state.db"));

    server.push(ScriptedResponse::text("back again"));
    let out = home.run(&["exec", "-c", "--base-url", &url, "after the crash"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let resumed = sent(&server.chat_requests()[1]);
    assert_eq!(
        resumed[1..],
        [
            json!({"role": "user", "content": "prompt before the crash"}),
            json!({"role": "user", "content": "after the crash"})
        ]
    );
    integrity_ok(&home.path().join("state.db"));
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_the_second_stream_keeps_the_tool_call_and_its_result() {
    let home = Home::new();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_1", "terminal", r#"{"command":"printf 'done-%s' 1"}"#),
        slow_stream(),
    ])
    .await
    .unwrap();
    let url = server.base_url();
    let (child, mut lines) = spawn_json(&home, &["--base-url", &url, "run it then talk"]);
    wait_event(&mut lines, "ToolFinished", |_| true).await;
    wait_event(&mut lines, "AssistantDelta", |_| true).await;
    kill_9(child).await;
    integrity_ok(&home.path().join("state.db"));

    server.push(ScriptedResponse::text("resumed"));
    let out = home.run(&["exec", "-c", "--base-url", &url, "after the crash"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 3);
    let before = sent(&requests[1]);
    let resumed = sent(&requests[2]);
    assert_eq!(before.len(), 4, "system, user, tool call, result: {before:#?}");
    assert!(before[3]["content"].as_str().unwrap().contains("done-1"));
    assert_eq!(resumed[..4], before[..], "the resumed history holds the call and its result as sent");
    assert_eq!(resumed[4..], [json!({"role": "user", "content": "after the crash"})]);
    integrity_ok(&home.path().join("state.db"));
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_a_running_command_gives_the_call_a_lost_result() {
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::tool_call(
        "call_9",
        "terminal",
        r#"{"command":"echo sleeping-now; sleep 300"}"#,
    )])
    .await
    .unwrap();
    let url = server.base_url();
    let (child, mut lines) = spawn_json(&home, &["--base-url", &url, "sleep for a while"]);
    // The command runs once its output shows.
    wait_event(&mut lines, "ToolOutput", |e| e["data"]["chunk"].as_str().is_some_and(|c| c.contains("sleeping-now")))
        .await;
    kill_9(child).await;
    integrity_ok(&home.path().join("state.db"));

    server.push(ScriptedResponse::text("it was lost"));
    let out = home.run(&["exec", "--json", "-c", "--base-url", &url, "what happened?"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let resumed = sent(&server.chat_requests()[1]);
    assert_eq!(resumed.len(), 5, "{resumed:#?}");
    assert_eq!(resumed[1], json!({"role": "user", "content": "sleep for a while"}));
    assert_eq!(resumed[2]["tool_calls"][0]["id"], "call_9");
    assert_eq!(resumed[3], json!({"role": "tool", "tool_call_id": "call_9", "content": LOST}));
    assert_eq!(resumed[4], json!({"role": "user", "content": "what happened?"}));

    // The filler is stored once: the session reads the same the next time.
    let sid = session_id_of(&stdout(&out));
    let lost_rows = rows(&home.path().join("state.db"), &sid).into_iter().filter(|r| r.1 == LOST).count();
    assert_eq!(lost_rows, 1);
    integrity_ok(&home.path().join("state.db"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_answer_keeps_its_partial_text_for_the_next_run() {
    let home = Home::new();
    let server = ScriptedServer::start([slow_stream()]).await.unwrap();
    let url = server.base_url();
    let (child, mut lines) = spawn_json(&home, &["--base-url", &url, "talk slowly"]);
    wait_event(&mut lines, "AssistantDelta", |_| true).await;
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let done = wait_event(&mut lines, "AssistantDone", |_| true).await;
    let partial = done["data"]["text"].as_str().unwrap().to_string();
    assert!(partial.starts_with("slow"), "{partial}");
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(130));

    server.push(ScriptedResponse::text("ok"));
    let out = home.run(&["exec", "-c", "--base-url", &url, "go on"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let resumed = sent(&server.chat_requests()[1]);
    assert_eq!(
        resumed[1..],
        [
            json!({"role": "user", "content": "talk slowly"}),
            json!({"role": "assistant", "content": partial}),
            json!({"role": "user", "content": "go on"}),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queued_message_survives_a_restart_as_pending_input() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([slow_stream()]).await.unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    engine.send(Op::Submit { text: "first".into(), mode: None });
    engine.wait_for("a delta", |e| matches!(e, Event::AssistantDelta(_))).await;
    engine.send(Op::Submit { text: "do this next".into(), mode: Some(talaria::protocol::BusyMode::Queue) });
    engine
        .wait_for(
            "the pending list",
            |e| matches!(e, Event::PendingChanged { pending, queued } if !pending.is_empty() || !queued.is_empty()),
        )
        .await;
    engine.shutdown().await;

    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::Continue).await;
    let restored = engine.wait_for("RestoreInput", |e| matches!(e, Event::RestoreInput { .. })).await;
    assert_eq!(restored, Event::RestoreInput { text: "do this next".into() });
    // It was never sent: only the first message reached the model.
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1);
    assert!(!requests[0].raw_body.contains("do this next"));
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_that_cannot_be_saved_is_not_sent_and_nothing_stored_is_damaged() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("first answer"), ScriptedResponse::text("never asked")])
        .await
        .unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    engine.send(Op::Submit { text: "a first message".into(), mode: None });
    assert!(matches!(engine.turn_finished().await, Event::TurnFinished { outcome: TurnOutcome::Completed }));
    let session = engine.session_id();

    // The disk is now full: a write that needs one more page fails with SQLITE_FULL.
    engine.store.limit_growth(0).await.unwrap();
    let big = "a long paste ".repeat(20_000);
    engine.send(Op::Submit { text: big.clone(), mode: None });
    let finished = engine.turn_finished().await;
    assert!(matches!(finished, Event::TurnFinished { outcome: TurnOutcome::Failed }), "{finished:?}");
    let saved = engine.seen.iter().any(|e| matches!(e, Event::Notice { text, .. } if text.contains("could not save")));
    assert!(saved, "the user is told: {:?}", engine.seen.iter().rev().take(8).collect::<Vec<_>>());
    assert!(
        engine.seen.iter().any(|e| matches!(e, Event::RestoreInput { text } if *text == big)),
        "the unsent message goes back to the input box"
    );
    assert!(
        !engine.seen.iter().any(|e| matches!(e, Event::UserMessage { text, .. } if *text == big)),
        "it is not shown as sent"
    );
    assert_eq!(server.chat_requests().len(), 1, "nothing unsaved reaches the model");

    let stored = engine.store.load_messages(&session).await.unwrap();
    let roles: Vec<&str> = stored.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant"], "the earlier exchange is intact");
    engine.shutdown().await;
    let db = rusqlite::Connection::open(inproc::paths(home.path()).0.state_db).unwrap();
    let check: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
}

/// A job the user kills is noted to the model with the next turn, not in a turn of its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_the_user_killed_is_noted_at_the_next_turn_without_a_turn_of_its_own() {
    let home = Home::new();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("c1", "terminal", r#"{"command":"sleep 3002177","background":true}"#),
        ScriptedResponse::text("Started it."),
        ScriptedResponse::text("Noted that you killed it."),
    ])
    .await
    .unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    engine.send(Op::Submit { text: "start the sleeper".into(), mode: None });
    let started = engine.wait_for("the job", |e| matches!(e, Event::JobStarted { .. })).await;
    let Event::JobStarted { job } = started else { unreachable!() };
    engine.turn_finished().await;
    engine.send(Op::Job { id: job.id.clone(), action: talaria::protocol::JobAction::Kill });
    engine.wait_for("the kill", |e| matches!(e, Event::JobFinished { .. })).await;
    let said = engine.notice("the model hears of it with your next message").await;
    assert_eq!(said, format!("{} killed: the model hears of it with your next message", job.id));
    // The user's next message starts the only turn; the kill notice goes in before it.
    engine.send(Op::Submit { text: "what now?".into(), mode: None });
    let turn = engine.wait_for("a turn", |e| matches!(e, Event::TurnStarted { .. })).await;
    assert_eq!(turn, Event::TurnStarted { trigger: TurnTrigger::User }, "no turn of the notice's own");
    engine.turn_finished().await;
    let requests = server.wait_for_requests(3, Duration::from_secs(30)).await;
    assert_eq!(requests.len(), 3, "one request per turn step, none for the notice alone");
    let messages = requests[2].messages();
    let texts: Vec<String> = messages
        .iter()
        .filter(|m| m.role == talaria::engine::llm::Role::User)
        .filter_map(|m| m.content.clone())
        .collect();
    let n = texts.len();
    assert!(texts[n - 2].contains(&format!("[Background job {} was killed", job.id)), "{texts:?}");
    assert_eq!(texts[n - 1], "what now?");
    let own_turns = engine
        .seen
        .iter()
        .filter(|e| matches!(e, Event::TurnStarted { trigger: TurnTrigger::JobNotification }))
        .count();
    assert_eq!(own_turns, 0);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_session_shows_its_end_first_loads_earlier_pages_on_request_and_the_model_gets_all_of_it() {
    use talaria::engine::llm::Role;
    use talaria::engine::store::StoredMessage;
    use talaria::protocol::HistoryItem;

    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::text("still here")]).await.unwrap();
    let store = inproc::store(home.path());
    let (_, work) = inproc::paths(home.path());
    let sid = store.create_session("scripted-model", &work.display().to_string(), None).await.unwrap();
    let rows: Vec<StoredMessage> = (0..1000)
        .map(|i| StoredMessage {
            role: if i % 2 == 0 { Role::User } else { Role::Assistant },
            content: Some(format!("m{i}")),
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            display_kind: None,
            origin: None,
        })
        .collect();
    store.append_messages(&sid, rows).await.unwrap();

    let text = |item: &HistoryItem| match item {
        HistoryItem::User { text, .. } | HistoryItem::Assistant { text, .. } => text.clone(),
        other => format!("{other:?}"),
    };
    let expected = |range: std::ops::Range<usize>| range.map(|i| format!("m{i}")).collect::<Vec<_>>();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::Resume(sid.clone())).await;
    let Some(Event::SessionReady { history, earlier, .. }) =
        engine.seen.iter().find(|e| matches!(e, Event::SessionReady { .. })).cloned()
    else {
        panic!("no SessionReady: {:#?}", engine.seen)
    };
    let page = talaria::engine::session::HISTORY_PAGE;
    assert_eq!(history.iter().map(text).collect::<Vec<_>>(), expected(1000 - page..1000));
    let before = earlier.expect("older history is announced");

    engine.send(Op::LoadEarlier { before });
    let Event::EarlierHistory { items, earlier } =
        engine.wait_for("EarlierHistory", |e| matches!(e, Event::EarlierHistory { .. })).await
    else {
        unreachable!()
    };
    assert_eq!(items.iter().map(text).collect::<Vec<_>>(), expected(1000 - 2 * page..1000 - page));
    engine.send(Op::LoadEarlier { before: earlier.expect("still older history") });
    let Event::EarlierHistory { items, earlier } =
        engine.wait_for("EarlierHistory", |e| matches!(e, Event::EarlierHistory { .. })).await
    else {
        unreachable!()
    };
    assert_eq!(items.iter().map(text).collect::<Vec<_>>(), expected(0..1000 - 2 * page));
    assert_eq!(earlier, None);

    // The model's context is the whole session, not the pages the transcript loaded.
    engine.send(Op::Submit { text: "and now?".into(), mode: None });
    engine.turn_finished().await;
    let requests = server.chat_requests();
    let messages = sent(&requests[0]);
    let contents: Vec<&str> = messages.iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(contents[1..1001], expected(0..1000).iter().map(String::as_str).collect::<Vec<_>>()[..]);
    assert_eq!(contents.last(), Some(&"and now?"));

    // The new message says where it is stored: the page before it ends with the old history
    // (a transcript that let go of its oldest cells reads them back so).
    let seq = engine.seen.iter().find_map(|e| match e {
        Event::UserMessage { text, seq, .. } if text == "and now?" => *seq,
        _ => None,
    });
    engine.send(Op::LoadEarlier { before: seq.expect("the live message has its seq") });
    let Event::EarlierHistory { items, earlier } =
        engine.wait_for("EarlierHistory", |e| matches!(e, Event::EarlierHistory { .. })).await
    else {
        unreachable!()
    };
    assert_eq!(items.iter().map(text).collect::<Vec<_>>(), expected(1000 - page..1000));
    assert!(earlier.is_some());
    engine.shutdown().await;
}

/// A session far longer than the model's window: the engine reads only its end (what a
/// request can carry), leaves the rest in the database, and the first turn compacts it
/// all — the start read back from the database, the middle left out, the held end.
#[tokio::test]
async fn a_session_longer_than_the_window_is_read_from_its_end_and_compacted_whole() {
    use talaria::engine::llm::Role;
    use talaria::engine::store::StoredMessage;

    let home = Home::new();
    let server = ScriptedServer::start([
        ScriptedResponse::text("SUMMARY of the long session"),
        ScriptedResponse::text("carrying on"),
    ])
    .await
    .unwrap();
    let store = inproc::store(home.path());
    let (_, work) = inproc::paths(home.path());
    let sid = store.create_session("scripted-model", &work.display().to_string(), None).await.unwrap();
    // 3,000 messages of ~60 tokens: ~180k tokens against a 40k window.
    let rows: Vec<StoredMessage> = (0..3000)
        .map(|i| StoredMessage {
            role: if i % 2 == 0 { Role::User } else { Role::Assistant },
            content: Some(format!("m{i}: {}", "words of a long session ".repeat(9))),
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            display_kind: None,
            origin: None,
        })
        .collect();
    store.append_messages(&sid, rows).await.unwrap();

    let mut config = talaria::config::Config::default();
    config.model.context_window = 40_000;
    let mut engine =
        inproc::start_with(home.path(), &server.base_url(), SessionChoice::Resume(sid.clone()), config).await;
    engine.send(Op::Submit { text: "and now?".into(), mode: None });
    engine.turn_finished().await;
    let compacted = engine.seen.iter().find_map(|e| match e {
        Event::Notice { text, .. } if text.starts_with("context compacted") => Some(text.clone()),
        _ => None,
    });
    // All but the last user turn before "and now?" (m2998, m2999) were summarised.
    assert!(compacted.as_deref().is_some_and(|t| t.contains(": 2998 earlier messages summarised")), "{compacted:?}");

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 2);
    // The summary request: the start of the session from the database, a gap, and the end.
    let ask = sent(&requests[0])[1]["content"].as_str().unwrap().to_string();
    assert!(ask.contains("[user]\nm0: "), "the start is summarised");
    assert!(ask.contains("messages omitted here to keep this request small"));
    assert!(ask.contains("[assistant]\nm2997: "), "the end before the kept turn is summarised");
    assert!(!ask.contains("m1500: "), "the middle is left out");
    assert!(!ask.contains("m2998: "), "the kept turn is not summarised");
    // The request after it: the summary, the kept turn and the new message, nothing older.
    let contents: Vec<String> =
        sent(&requests[1]).iter().filter_map(|m| m["content"].as_str().map(str::to_string)).collect();
    assert_eq!(contents.len(), 5, "{contents:#?}");
    assert!(contents[1].contains("SUMMARY of the long session"));
    assert!(contents[2].starts_with("m2998: ") && contents[3].starts_with("m2999: "));
    assert_eq!(contents[4], "and now?");
    engine.shutdown().await;

    // Resumed again, the model's part starts at the stored summary.
    let server = ScriptedServer::start([ScriptedResponse::text("ok")]).await.unwrap();
    let mut engine = inproc::start(home.path(), &server.base_url(), SessionChoice::Resume(sid)).await;
    engine.send(Op::Submit { text: "still there?".into(), mode: None });
    engine.turn_finished().await;
    let contents: Vec<String> =
        sent(&server.chat_requests()[0]).iter().filter_map(|m| m["content"].as_str().map(str::to_string)).collect();
    assert!(contents[1].contains("SUMMARY of the long session"), "{contents:#?}");
    // The system prompt, the summary, m2998, m2999, "and now?", "carrying on", "still there?".
    assert_eq!(contents.len(), 7, "{contents:#?}");
    engine.shutdown().await;
}
