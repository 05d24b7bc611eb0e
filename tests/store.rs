//! The session database: migrations, ordering, undo, search, privacy, concurrency.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Once;

use pretty_assertions::assert_eq;
use rusqlite::Connection;
use talaria::engine::llm::ToolCall;
use talaria::engine::store::cli::{cli_list, cli_search, resume_match, ResumeMatch};
use talaria::engine::store::{Store, StoreError, StoredMessage, HISTORY_CAP_PER_CWD, SCHEMA_VERSION};
use tempfile::TempDir;

/// Every test keeps its state in a temp dir, and the guard makes the real home off-limits.
fn temp_home() -> TempDir {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        let home = tempfile::tempdir().expect("temp dir").keep();
        std::env::set_var("TALARIA_HOME", home);
        std::env::set_var("TALARIA_TEST_GUARD", "1");
    });
    tempfile::tempdir().expect("temp dir")
}

fn db_path(home: &TempDir) -> PathBuf {
    home.path().join("state.db")
}

fn open(home: &TempDir) -> Store {
    Store::open(&db_path(home)).expect("open store")
}

fn raw(path: &Path) -> Connection {
    Connection::open(path).expect("open raw connection")
}

fn user(text: &str) -> StoredMessage {
    msg("user", Some(text))
}

fn msg(role: &str, content: Option<&str>) -> StoredMessage {
    StoredMessage {
        role: talaria::engine::llm::Role::parse(role).expect("a role"),
        content: content.map(str::to_string),
        tool_calls: Vec::new(),
        tool_call_id: None,
        tool_name: None,
        display_kind: None,
        origin: None,
    }
}

fn assistant_calling(call_id: &str, command: &str) -> StoredMessage {
    StoredMessage {
        tool_calls: vec![ToolCall::new(call_id, "terminal", format!("{{\"command\":{command:?}}}"))],
        ..msg("assistant", None)
    }
}

fn tool_result(call_id: &str, output: &str) -> StoredMessage {
    StoredMessage {
        tool_call_id: Some(call_id.into()),
        tool_name: Some("terminal".into()),
        display_kind: Some("tool:cargo test".into()),
        ..msg("tool", Some(output))
    }
}

/// Wait until the clock the store stamps rows with (unix ms) has moved on: every write
/// made after this is stamped strictly later than every write made before it.
async fn next_millisecond() {
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let start = now();
    while now() <= start {
        tokio::task::yield_now().await;
    }
}

fn contents(messages: &[StoredMessage]) -> Vec<Option<String>> {
    messages.iter().map(|m| m.content.clone()).collect()
}

fn some(texts: &[&str]) -> Vec<Option<String>> {
    texts.iter().map(|t| Some(t.to_string())).collect()
}

/// The version-1 schema exactly as released, written by hand so the test does not
/// depend on the migration code it checks.
const V1_FIXTURE: &str = r#"
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version (version) VALUES (1);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, title TEXT, model TEXT NOT NULL, cwd TEXT NOT NULL,
    started_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, ended_at INTEGER, end_reason TEXT
);
CREATE INDEX sessions_cwd ON sessions (cwd, updated_at);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, role TEXT NOT NULL, content TEXT, tool_calls TEXT,
    tool_call_id TEXT, tool_name TEXT, created_at INTEGER NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO sessions VALUES ('20250101-120000-abcd', 'old work', 'gpt-old', '/proj', 1000, 2000, 3000, 'quit');
INSERT INTO messages VALUES (1, '20250101-120000-abcd', 1, 'user', 'list the files', NULL, NULL, NULL, 1000);
INSERT INTO messages VALUES (2, '20250101-120000-abcd', 2, 'assistant', NULL,
    '[{"id":"c1","type":"function","function":{"name":"terminal","arguments":"{}"}}]', NULL, NULL, 1001);
INSERT INTO messages VALUES (3, '20250101-120000-abcd', 3, 'tool', 'Cargo.toml zeppelin.rs', NULL, 'c1', 'terminal', 1002);
INSERT INTO state_meta VALUES ('heartbeat:20250101-120000-abcd', '{"prompt":"check"}');
"#;

#[tokio::test]
async fn a_version_1_database_is_migrated_and_keeps_its_data() {
    let home = temp_home();
    let path = db_path(&home);
    raw(&path).execute_batch(V1_FIXTURE).unwrap();

    let store = open(&home);
    let sid = "20250101-120000-abcd";
    let loaded = store.load_messages(sid).await.unwrap();
    assert_eq!(
        contents(&loaded),
        vec![Some("list the files".to_string()), None, Some("Cargo.toml zeppelin.rs".into())]
    );
    assert_eq!(loaded[1].tool_calls, vec![ToolCall::new("c1", "terminal", "{}")]);
    assert_eq!(loaded[2].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(loaded[2].display_kind, None);

    // Old text is searchable (the index is filled from existing rows) and new columns work.
    let hits = store.search("zeppelin", 10).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].session_id, sid);
    assert_eq!(hits[0].title.as_deref(), Some("old work"));
    assert_eq!(store.meta_get(&format!("heartbeat:{sid}")).await.unwrap().as_deref(), Some("{\"prompt\":\"check\"}"));
    store.add_usage(sid, 10, 5).await.unwrap();
    assert_eq!(store.session_usage(sid).await.unwrap(), Some((10, 5)));
    let id = store.append_message(sid, user("and now?")).await.unwrap();
    assert!(id > 3, "row id {id}");
    assert_eq!(store.load_messages(sid).await.unwrap().len(), 4);
    assert_eq!(store.deactivate_last_exchanges(sid, 2).await.unwrap().as_deref(), Some("list the files"));
    assert!(store.search("zeppelin", 10).await.unwrap().is_empty());
    store.flush().await.unwrap();

    let conn = raw(&path);
    let version: i64 = conn.query_row("SELECT version FROM schema_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let seqs: Vec<i64> = conn
        .prepare("SELECT seq FROM messages WHERE session_id = ?1 ORDER BY seq")
        .unwrap()
        .query_map([sid], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(seqs, vec![1, 2, 3, 4]);

    // Opening again is a no-op for the schema.
    drop(store);
    let store = open(&home);
    assert_eq!(store.session(sid).await.unwrap().unwrap().title.as_deref(), Some("old work"));
}

#[tokio::test]
async fn a_newer_schema_or_a_foreign_database_is_refused_with_a_reason() {
    let home = temp_home();
    let path = db_path(&home);
    raw(&path)
        .execute_batch(&format!(
            "CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES ({});",
            SCHEMA_VERSION + 1
        ))
        .unwrap();
    let err = Store::open(&path).unwrap_err().to_string();
    assert!(err.contains("newer") && err.contains("upgrade talaria"), "{err}");

    let other = home.path().join("other.db");
    raw(&other).execute_batch("CREATE TABLE photos (id INTEGER);").unwrap();
    let err = Store::open(&other).unwrap_err().to_string();
    assert!(err.contains("not a Talaria one"), "{err}");
}

#[tokio::test]
async fn messages_load_in_order_with_tool_calls_intact_and_survive_a_reopen() {
    let home = temp_home();
    let sent = vec![
        user("run the tests"),
        assistant_calling("call_1", "cargo test"),
        tool_result("call_1", "test result: ok. 3 passed"),
        StoredMessage {
            tool_calls: vec![
                ToolCall::new("call_2", "read_file", "{\"path\":\"a.rs\"}"),
                ToolCall::new("call_3", "read_file", "{\"path\":\"b \\\"q\\\".rs\"}"),
            ],
            ..msg("assistant", Some("Reading two files."))
        },
        tool_result("call_2", "fn a() {}"),
        tool_result("call_3", "fn b() {}"),
        StoredMessage {
            display_kind: Some("oob".into()),
            ..user("[OUT-OF-BAND USER MESSAGE]\nstop\n[/OUT-OF-BAND USER MESSAGE]")
        },
        msg("assistant", Some("All green.")),
    ];
    let sid;
    {
        let store = open(&home);
        sid = store.create_session("m", "/w", None).await.unwrap();
        let mut ids = Vec::new();
        for m in &sent {
            ids.push(store.append_message(&sid, m.clone()).await.unwrap());
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert_eq!(store.load_messages(&sid).await.unwrap(), sent);
    }
    let store = open(&home);
    assert_eq!(store.load_messages(&sid).await.unwrap(), sent);
    let summary = store.session(&sid).await.unwrap().unwrap();
    assert_eq!(summary.message_count, sent.len() as u64);
    assert_eq!(summary.first_line, "run the tests");
    assert!(store.load_messages("no-such-session").await.unwrap().is_empty());
    let err = store.append_message("no-such-session", user("x")).await.unwrap_err().to_string();
    assert!(err.contains("no session with id no-such-session"), "{err}");
}

#[tokio::test]
async fn writes_happen_in_the_order_of_the_calls() {
    let home = temp_home();
    let store = open(&home);
    let sid = store.create_session("m", "/w", None).await.unwrap();
    // Futures are awaited in reverse and one is dropped: requests are queued at the call.
    let first = store.append_message(&sid, user("one"));
    let second = store.append_message(&sid, msg("assistant", Some("two")));
    drop(store.append_message(&sid, msg("assistant", Some("three"))));
    let b = second.await.unwrap();
    let a = first.await.unwrap();
    assert!(a < b);
    assert_eq!(contents(&store.load_messages(&sid).await.unwrap()), some(&["one", "two", "three"]));
}

#[tokio::test]
async fn undo_hides_exchanges_without_deleting_them() {
    let home = temp_home();
    let store = open(&home);
    let sid = store.create_session("m", "/w", None).await.unwrap();
    for m in [
        user("first question"),
        msg("assistant", Some("first answer")),
        user("second question"),
        assistant_calling("c1", "ls"),
        tool_result("c1", "quasar.txt"),
        msg("assistant", Some("second answer")),
        // A heartbeat turn belongs to the exchange before it; it does not start one.
        StoredMessage { display_kind: Some("heartbeat".into()), ..user("[Heartbeat]\ncheck") },
        msg("assistant", Some("nothing changed")),
        user("third question"),
        msg("assistant", Some("third answer")),
    ] {
        store.append_message(&sid, m).await.unwrap();
    }

    assert_eq!(store.deactivate_last_exchanges(&sid, 1).await.unwrap().as_deref(), Some("third question"));
    assert_eq!(store.deactivate_last_exchanges(&sid, 1).await.unwrap().as_deref(), Some("second question"));
    assert_eq!(contents(&store.load_messages(&sid).await.unwrap()), some(&["first question", "first answer"]));
    assert!(store.search("quasar", 10).await.unwrap().is_empty(), "inactive rows leave the index");
    assert_eq!(store.session(&sid).await.unwrap().unwrap().message_count, 2);

    // More than there are: everything from the first typed message goes; then nothing is left.
    assert_eq!(store.deactivate_last_exchanges(&sid, 5).await.unwrap().as_deref(), Some("first question"));
    assert_eq!(store.deactivate_last_exchanges(&sid, 1).await.unwrap(), None);
    assert_eq!(store.deactivate_last_exchanges(&sid, 0).await.unwrap(), None);
    assert!(store.load_messages(&sid).await.unwrap().is_empty());
    store.flush().await.unwrap();

    let rows: Vec<(i64, String, i64)> = raw(store.path())
        .prepare("SELECT seq, role, active FROM messages WHERE session_id = ?1 ORDER BY seq")
        .unwrap()
        .query_map([&sid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 10, "no row was deleted: {rows:?}");
    assert!(rows.iter().all(|(_, _, active)| *active == 0), "{rows:?}");

    // A retry appends after the hidden rows; sequence numbers keep growing.
    store.append_message(&sid, user("first question")).await.unwrap();
    let max_seq: i64 = raw(store.path())
        .query_row("SELECT MAX(seq) FROM messages WHERE session_id = ?1 AND active = 1", [&sid], |r| r.get(0))
        .unwrap();
    assert_eq!(max_seq, 11);
}

#[tokio::test]
async fn search_finds_tool_output_and_punctuation_never_breaks_it() {
    let home = temp_home();
    let store = open(&home);
    let sid = store.create_session("m", "/w", None).await.unwrap();
    store.append_message(&sid, user("why does the build fail?")).await.unwrap();
    store.append_message(&sid, assistant_calling("c1", "cargo build")).await.unwrap();
    let output = "error[E0425]: cannot find value `frobnicate` in this scope\n  --> src/a-b.rs:3";
    store.append_message(&sid, tool_result("c1", output)).await.unwrap();

    let hits = store.search("frobnicate", 10).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].role, "tool");
    assert_eq!(hits[0].title.as_deref(), Some("why does the build fail?"));
    assert!(hits[0].snippet.contains("»frobnicate«"), "{}", hits[0].snippet);
    assert!(!hits[0].snippet.contains('\n'));

    // Stemming: "fails" finds "fail".
    assert_eq!(store.search("fails", 10).await.unwrap().len(), 1);
    assert_eq!(store.search("a-b", 10).await.unwrap().len(), 1);

    for query in ["foo\"bar", "a-b", "(", ")", "\"", "*", "frob*", "NEAR(", "AND", "OR NOT", "col:x", "^", "", "   "] {
        let result = store.search(query, 10).await;
        assert!(result.is_ok(), "{query:?}: {result:?}");
    }
}

#[tokio::test]
async fn the_database_and_its_wal_are_private() {
    let home = temp_home();
    let store = open(&home);
    let sid = store.create_session("m", "/w", None).await.unwrap();
    store.append_message(&sid, user("secret")).await.unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let path = db_path(&home);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&path.with_extension("db-wal")), 0o600);

    // A file left world-readable by something else is tightened on open.
    drop(store);
    let loose = home.path().join("loose.db");
    std::fs::write(&loose, b"").unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _store = Store::open(&loose).unwrap();
    assert_eq!(mode(&loose), 0o600);
}

#[tokio::test]
async fn sessions_are_found_by_id_prefix_and_title() {
    let home = temp_home();
    let store = open(&home);
    let a = store.create_session("m", "/w", None).await.unwrap();
    let b = store.create_session("m", "/w", Some(&a)).await.unwrap();
    assert_ne!(a, b);
    assert!(looks_like_session_id(&a), "{a}");
    store.set_title(&a, "Refactor the parser").await.unwrap();
    store.append_message(&b, user("something else entirely\nsecond line")).await.unwrap();

    let by_id = store.find_session(&a).await.unwrap().unwrap();
    assert_eq!(by_id.id, a);
    assert_eq!(by_id.title.as_deref(), Some("Refactor the parser"));
    assert_eq!(store.find_session(&b[..17]).await.unwrap().unwrap().id, b);
    assert_eq!(store.find_session("refactor THE parser").await.unwrap().unwrap().id, a);
    assert_eq!(store.find_session("something else entirely").await.unwrap().unwrap().id, b, "derived title");
    assert_eq!(store.find_session("nothing like it").await.unwrap(), None);
    assert_eq!(store.find_session("  ").await.unwrap(), None);
    let err = store.set_title(&a, "  ").await.unwrap_err().to_string();
    assert!(err.contains("empty"), "{err}");
    // Words of a title, in any order and case, for /resume; several matches are all listed.
    let ids = |v: Vec<talaria::engine::store::SessionSummary>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(store.match_sessions("PARSER refactor", 10).await.unwrap()), vec![a.clone()]);
    assert_eq!(ids(store.match_sessions("refac", 10).await.unwrap()), vec![a.clone()]);
    let both = store.match_sessions("e", 10).await.unwrap();
    assert_eq!(both.len(), 2);
    assert!(store.match_sessions("100%", 10).await.unwrap().is_empty(), "% is not a wildcard");
}

/// `YYYYMMDD-HHMMSS-xxxx` with lowercase hex.
fn looks_like_session_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 20
        && b[8] == b'-'
        && b[15] == b'-'
        && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit)
        && b[16..].iter().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

#[tokio::test]
async fn titles_come_from_the_first_typed_message_unless_set() {
    let home = temp_home();
    let store = open(&home);
    let sid = store.create_session("m", "/w", None).await.unwrap();
    let heartbeat = StoredMessage { display_kind: Some("heartbeat".into()), ..user("[Heartbeat] tick") };
    store.append_message(&sid, heartbeat).await.unwrap();
    assert_eq!(store.session(&sid).await.unwrap().unwrap().title, None);
    let long = format!("\n  {}\nrest", "x".repeat(100));
    store.append_message(&sid, user(&long)).await.unwrap();
    let title = store.session(&sid).await.unwrap().unwrap().title.unwrap();
    assert_eq!(title, format!("{}…", "x".repeat(59)));
    store.append_message(&sid, user("later message")).await.unwrap();
    assert_eq!(store.session(&sid).await.unwrap().unwrap().title, Some(title));

    let titled = store.create_session("m", "/w", None).await.unwrap();
    store.set_title(&titled, "My title").await.unwrap();
    store.append_message(&titled, user("first words")).await.unwrap();
    assert_eq!(store.session(&titled).await.unwrap().unwrap().title.as_deref(), Some("My title"));
}

#[tokio::test]
async fn latest_in_cwd_follows_activity() {
    let home = temp_home();
    let store = open(&home);
    assert_eq!(store.latest_in_cwd("/p").await.unwrap(), None);
    let older = store.create_session("m", "/p", None).await.unwrap();
    next_millisecond().await;
    let newer = store.create_session("m", "/p", None).await.unwrap();
    let elsewhere = store.create_session("m", "/q", None).await.unwrap();
    assert_eq!(store.latest_in_cwd("/p").await.unwrap().unwrap().id, newer);
    next_millisecond().await;
    store.append_message(&older, user("back to this")).await.unwrap();
    assert_eq!(store.latest_in_cwd("/p").await.unwrap().unwrap().id, older);
    assert_eq!(store.latest_in_cwd("/q").await.unwrap().unwrap().id, elsewhere);

    let listed: Vec<String> = store.list_sessions(10).await.unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(listed, vec![older.clone(), elsewhere, newer]);
    assert_eq!(store.list_sessions(1).await.unwrap().len(), 1);
    store.end_session(&older, "quit").await.unwrap();
    assert!(store.end_session("nope", "quit").await.is_err());
}

#[tokio::test]
async fn meta_pending_and_usage_round_trip() {
    let home = temp_home();
    let store = open(&home);
    assert_eq!(store.meta_get("goal:x").await.unwrap(), None);
    store.meta_set("goal:x", "{\"text\":\"ship\"}").await.unwrap();
    store.meta_set("goal:x", "{\"text\":\"ship it\"}").await.unwrap();
    assert_eq!(store.meta_get("goal:x").await.unwrap().as_deref(), Some("{\"text\":\"ship it\"}"));
    store.meta_delete("goal:x").await.unwrap();
    store.meta_delete("goal:x").await.unwrap();
    assert_eq!(store.meta_get("goal:x").await.unwrap(), None);

    let sid = store.create_session("m", "/w", None).await.unwrap();
    assert_eq!(store.pending_get(&sid).await.unwrap(), Vec::<String>::new());
    let pending = vec!["first\nline two".to_string(), "quote \" and ✓".to_string()];
    store.pending_set(&sid, pending.clone()).await.unwrap();
    drop(store);
    let store = open(&home);
    assert_eq!(store.pending_get(&sid).await.unwrap(), pending);
    assert_eq!(store.pending_get("other").await.unwrap(), Vec::<String>::new());
    store.pending_set(&sid, Vec::new()).await.unwrap();
    assert_eq!(store.pending_get(&sid).await.unwrap(), Vec::<String>::new());
    assert_eq!(store.meta_get(&format!("pending:{sid}")).await.unwrap(), None);

    store.add_usage(&sid, 100, 20).await.unwrap();
    store.add_usage(&sid, 50, 5).await.unwrap();
    assert_eq!(store.session_usage(&sid).await.unwrap(), Some((150, 25)));
    assert_eq!(store.session_usage("nope").await.unwrap(), None);
    assert!(store.add_usage("nope", 1, 1).await.is_err());
}

#[tokio::test]
async fn input_history_is_per_directory_and_capped() {
    let home = temp_home();
    let store = open(&home);
    for text in ["ls", "cargo test", "cargo test", "  ", "git status"] {
        store.history_push("/a", text).await.unwrap();
    }
    store.history_push("/b", "make").await.unwrap();
    assert_eq!(store.history_list("/a", 10).await.unwrap(), vec!["ls", "cargo test", "git status"]);
    assert_eq!(store.history_list("/a", 2).await.unwrap(), vec!["cargo test", "git status"]);
    assert_eq!(store.history_list("/b", 10).await.unwrap(), vec!["make"]);
    assert!(store.history_list("/c", 10).await.unwrap().is_empty());

    for i in 0..HISTORY_CAP_PER_CWD + 25 {
        store.history_push("/cap", &format!("entry {i}")).await.unwrap();
    }
    let kept = store.history_list("/cap", usize::MAX).await.unwrap();
    assert_eq!(kept.len(), HISTORY_CAP_PER_CWD);
    assert_eq!(kept.first().map(String::as_str), Some("entry 25"));
    assert_eq!(kept.last().cloned(), Some(format!("entry {}", HISTORY_CAP_PER_CWD + 24)));
    assert_eq!(store.history_list("/a", 10).await.unwrap().len(), 3, "other directories are untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_share_one_store_and_the_database_stays_sound() {
    let home = temp_home();
    let store = open(&home);
    let shared = store.create_session("m", "/w", None).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let store = store.clone();
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let own = store.create_session("m", &format!("/w{t}"), None).await?;
            for i in 0..60 {
                store.append_message(&own, user(&format!("task {t} message {i}"))).await?;
                store.append_message(&shared, msg("assistant", Some(&format!("t{t} m{i}")))).await?;
                store.meta_set(&format!("k{t}"), &i.to_string()).await?;
                store.history_push("/w", &format!("t{t} {i}")).await?;
            }
            store.deactivate_last_exchanges(&own, 10).await?;
            Ok::<_, StoreError>((t, own))
        }));
    }
    for task in tasks {
        let (t, own) = task.await.unwrap().unwrap();
        let loaded = store.load_messages(&own).await.unwrap();
        let expected: Vec<Option<String>> = (0..50).map(|i| Some(format!("task {t} message {i}"))).collect();
        assert_eq!(contents(&loaded), expected);
        assert_eq!(store.meta_get(&format!("k{t}")).await.unwrap().as_deref(), Some("59"));
    }
    let shared_msgs = store.load_messages(&shared).await.unwrap();
    assert_eq!(shared_msgs.len(), 480);
    // Each task's own messages in the shared session are in the order it wrote them.
    for t in 0..8 {
        let prefix = format!("t{t} ");
        let mine: Vec<String> =
            shared_msgs.iter().filter_map(|m| m.content.clone()).filter(|c| c.starts_with(&prefix)).collect();
        let expected: Vec<String> = (0..60).map(|i| format!("t{t} m{i}")).collect();
        assert_eq!(mine, expected);
    }
    assert_eq!(store.search("message", 1000).await.unwrap().len(), 400);
    assert_eq!(store.history_list("/w", 10_000).await.unwrap().len(), 480);
    store.flush().await.unwrap();

    let conn = raw(store.path());
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    conn.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)", []).unwrap();
    let seqs_ok: bool = conn
        .query_row(
            "SELECT COUNT(*) = COUNT(DISTINCT seq) AND MAX(seq) = COUNT(*) FROM messages WHERE session_id = ?1",
            [&shared],
            |r| r.get(0),
        )
        .unwrap();
    assert!(seqs_ok);
}

#[tokio::test]
async fn the_cli_prints_sessions_and_search_results() {
    let home = temp_home();
    let store = open(&home);
    assert_eq!(cli_list(&store, 20).await.unwrap(), "No sessions yet.\n");
    let sid = store.create_session("m", "/w", None).await.unwrap();
    store.append_message(&sid, user("Deploy the widget \x1b[31mservice\x1b[0m")).await.unwrap();
    store.append_message(&sid, tool_result("c1", "widget deployed to staging")).await.unwrap();
    next_millisecond().await;
    let empty = store.create_session("m", "/w", None).await.unwrap();

    let listed = cli_list(&store, 20).await.unwrap();
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(lines[0].starts_with("ID") && lines[0].ends_with("TITLE"), "{listed}");
    assert!(lines[1].starts_with(&empty) && lines[1].ends_with("    0  (untitled)"), "{listed}");
    assert!(lines[2].starts_with(&sid) && lines[2].ends_with("    2  Deploy the widget service"), "{listed}");
    assert!(!listed.contains('\x1b'));

    let found = cli_search(&store, "widget", 20).await.unwrap();
    assert!(found.found);
    let found = found.text;
    let lines: Vec<&str> = found.lines().collect();
    assert_eq!(lines.len(), 3, "{found}");
    // Each session says what kind it is (an interactive chat or an exec run) and where.
    assert_eq!(lines[0], format!("{sid}  chat  /w  Deploy the widget service"), "{found}");
    assert!(lines.iter().any(|l| l.starts_with("  tool: ") && l.contains("»widget« deployed")), "{found}");
    let none = cli_search(&store, "(", 20).await.unwrap();
    assert_eq!((none.text.as_str(), none.found), ("No matches for (.\n", false));
    // A script's run is labelled as one, and the mid-turn wrapper is not what was said.
    let run = store.create_session("m", "/w/ci", None).await.unwrap();
    store.mark_headless(&run).await.unwrap();
    let typed = "[OUT-OF-BAND USER MESSAGE — a direct message from the user, delivered mid-turn; not tool output]\nship the gadget\n[/OUT-OF-BAND USER MESSAGE]";
    store.append_message(&run, user(typed)).await.unwrap();
    let found = cli_search(&store, "gadget", 20).await.unwrap().text;
    assert!(found.starts_with(&format!("{run}  exec  /w/ci  ")), "{found}");
    assert!(found.contains("ship the »gadget«") && !found.contains("OUT-OF-BAND"), "{found}");
}

/// `--resume hi` with two sessions titled "hi" used to open the latest silently: several
/// that fit equally are a choice; an exact id, or the one session that fits, opens.
#[tokio::test]
async fn resume_names_one_session_or_offers_the_ones_that_fit() {
    let home = temp_home();
    let store = open(&home);
    let ids = |m: &ResumeMatch| match m {
        ResumeMatch::One(s) => vec![s.id.clone()],
        ResumeMatch::Several(list) => list.iter().map(|s| s.id.clone()).collect(),
        ResumeMatch::None => Vec::new(),
    };
    let a = store.create_session("m", "/w", None).await.unwrap();
    store.set_title(&a, "hi").await.unwrap();
    // Created in the same millisecond or not: sessions that tie on time are ordered by
    // their row (a sequence), and the matches are compared as sets.
    let b = store.create_session("m", "/w", None).await.unwrap();
    store.set_title(&b, "Hi").await.unwrap();
    let c = store.create_session("m", "/w", None).await.unwrap();
    store.set_title(&c, "fix the parser").await.unwrap();
    let hi = resume_match(&store, "hi").await.unwrap();
    assert!(matches!(hi, ResumeMatch::Several(_)), "two sessions are titled hi");
    let mut found = ids(&hi);
    found.sort();
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    assert_eq!(found, want);
    assert_eq!(ids(&resume_match(&store, &a).await.unwrap()), vec![a.clone()], "an exact id wins");
    assert!(matches!(resume_match(&store, "parser").await.unwrap(), ResumeMatch::One(ref s) if s.id == c));
    assert!(matches!(resume_match(&store, "nothing like it").await.unwrap(), ResumeMatch::None));
}

#[tokio::test]
async fn an_empty_session_is_not_kept_and_continue_can_pass_over_exec_runs() {
    let home = temp_home();
    let store = open(&home);
    let typed = store.create_session("m", "/p", None).await.unwrap();
    store.append_message(&typed, user("hello")).await.unwrap();
    next_millisecond().await;
    let headless = store.create_session("m", "/p", None).await.unwrap();
    store.mark_headless(&headless).await.unwrap();
    store.append_message(&headless, user("from a script")).await.unwrap();
    assert_eq!(store.latest_in_cwd("/p").await.unwrap().unwrap().id, headless);
    assert_eq!(store.latest_interactive_in_cwd("/p").await.unwrap().unwrap().id, typed);

    let empty = store.create_session("m", "/p", None).await.unwrap();
    assert!(store.delete_if_empty(&empty).await.unwrap());
    assert_eq!(store.session(&empty).await.unwrap(), None);
    assert!(!store.delete_if_empty(&typed).await.unwrap(), "a session with a message stays");
    // A goal set before anything was said keeps the session too.
    let with_goal = store.create_session("m", "/p", None).await.unwrap();
    store.meta_set(&format!("goal:{with_goal}"), "{}").await.unwrap();
    assert!(!store.delete_if_empty(&with_goal).await.unwrap());
}

#[tokio::test]
async fn a_read_only_database_can_still_be_listed_and_searched() {
    let home = temp_home();
    let path = db_path(&home);
    {
        let store = open(&home);
        let sid = store.create_session("m", "/w", None).await.unwrap();
        store.append_message(&sid, user("kept in a read-only file")).await.unwrap();
        store.flush().await.unwrap();
    }
    // The store thread closes the database once the last handle is gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while path.with_extension("db-wal").exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    let store = Store::open_read_only(&path).expect("a read-only file opens for reading");
    assert!(cli_list(&store, 20).await.unwrap().contains("kept in a read-only file"));
    assert!(cli_search(&store, "read-only", 20).await.unwrap().text.contains("read-only"));
    // The connection itself is read-only (this holds even for root, who may write any file).
    let err = store.create_session("m", "/w", None).await.unwrap_err();
    assert!(err.to_string().contains("readonly"), "{err}");
}

#[tokio::test]
async fn several_messages_appended_together_are_stored_all_or_none() {
    let home = temp_home();
    let store = open(&home);
    let sid = store.create_session("m", "/w", None).await.unwrap();
    store.append_message(&sid, user("before")).await.unwrap();
    let ids = store.append_messages(&sid, vec![user("one"), msg("assistant", Some("two"))]).await.unwrap();
    assert_eq!(ids.len(), 2);
    // The database may grow by two pages: a small row fits, a 200 KB one does not.
    store.limit_growth(2).await.unwrap();
    let big = "x".repeat(200_000);
    let err = store.append_messages(&sid, vec![user("small"), user(&big)]).await.unwrap_err();
    assert!(err.to_string().contains("full"), "{err}");
    let texts: Vec<String> = store.load_messages(&sid).await.unwrap().into_iter().filter_map(|m| m.content).collect();
    assert_eq!(texts, ["before", "one", "two"], "the failed batch left nothing behind");
    // The small row alone fits: it was the batch, not the row, that was refused.
    store.append_message(&sid, user("small")).await.unwrap();
    let conn = raw(store.path());
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
}

#[tokio::test]
async fn a_session_loads_page_by_page_from_its_end_and_hidden_rows_are_not_in_any_page() {
    let home = temp_home();
    let store = open(&home);
    let sid = store.create_session("m", "/w", None).await.unwrap();
    let all: Vec<StoredMessage> = (0..1000).map(|i| user(&format!("m{i}"))).collect();
    store.append_messages(&sid, all).await.unwrap();
    // /undo of the last exchange hides "m999".
    store.deactivate_last_exchanges(&sid, 1).await.unwrap();

    let tail = store.load_page(&sid, None, 400).await.unwrap();
    let texts = |page: &talaria::engine::store::MessagePage| contents(&page.messages);
    let expected = |range: std::ops::Range<usize>| range.map(|i| Some(format!("m{i}"))).collect::<Vec<_>>();
    assert_eq!(texts(&tail), expected(599..999));
    // Message i has seq i + 1: the page before starts below the first one shown.
    assert_eq!(tail.earlier, Some(600));
    let middle = store.load_page(&sid, tail.earlier, 400).await.unwrap();
    assert_eq!(texts(&middle), expected(199..599));
    assert_eq!(middle.earlier, Some(200));
    let first = store.load_page(&sid, middle.earlier, 400).await.unwrap();
    assert_eq!(texts(&first), expected(0..199));
    assert_eq!(first.earlier, None);

    // A short session fits in one page; an empty one has none.
    let short = store.create_session("m", "/w", None).await.unwrap();
    store.append_message(&short, user("only")).await.unwrap();
    let page = store.load_page(&short, None, 400).await.unwrap();
    assert_eq!((contents(&page.messages), page.earlier), (some(&["only"]), None));
    let empty = store.create_session("m", "/w", None).await.unwrap();
    let page = store.load_page(&empty, None, 400).await.unwrap();
    assert_eq!((page.messages.len(), page.earlier), (0, None));
}

#[tokio::test]
async fn the_models_part_is_read_from_the_last_compaction_and_of_a_long_stretch_only_its_end() {
    use talaria::engine::store::OmittedRows;
    let home = temp_home();
    let store = open(&home);
    let sid = store.create_session("m", "/w", None).await.unwrap();
    // Each message is 36 characters: 9 tokens + 4 of overhead = 13.
    let text = |i: usize| format!("message {i:04} {}", "x".repeat(23));
    let turn = |i: usize| vec![user(&text(i)), msg("assistant", Some(&text(i + 1)))];
    let before: Vec<StoredMessage> = (0..10).step_by(2).flat_map(turn).collect();
    store.append_messages(&sid, before).await.unwrap();
    let mut summary = user("the summary");
    summary.display_kind = Some("compaction".into());
    let summary_seq = store.append_messages(&sid, vec![summary]).await.unwrap()[0];
    let after: Vec<StoredMessage> = (100..140).step_by(2).flat_map(turn).collect();
    store.append_messages(&sid, after).await.unwrap();

    // No budget: everything from the compaction row on, nothing before it.
    let all = store.load_context(&sid, None).await.unwrap();
    assert_eq!(all.messages.len(), 41);
    assert_eq!(all.messages[0].content.as_deref(), Some("the summary"));
    assert_eq!(all.omitted, None);
    // A budget the whole context fits in changes nothing.
    assert_eq!(store.load_context(&sid, Some(10_000)).await.unwrap(), all);

    // 100 tokens: seven messages fit (91), the held part starts at the last user message
    // among them (six messages, three turns); the summary and 34 messages stay behind.
    let part = store.load_context(&sid, Some(100)).await.unwrap();
    let expected: Vec<Option<String>> = (134..140).map(|i| Some(text(i))).collect();
    assert_eq!(contents(&part.messages), expected);
    let omitted = part.omitted.expect("older messages are left in the database");
    let OmittedRows { from, before, count, tokens } = omitted;
    assert_eq!((from, count), (summary_seq, 35));
    assert_eq!(before, summary_seq + 35);
    // "the summary" is 11 characters, the 34 others 36 each: (11 + 34 * 36) / 4 + 35 * 4.
    assert_eq!(tokens, (11u64 + 34 * 36).div_ceil(4) + 35 * 4);

    // A budget smaller than the last turn still reads that turn whole.
    let last = store.load_context(&sid, Some(1)).await.unwrap();
    assert_eq!(contents(&last.messages), some(&[&text(138), &text(139)]));
    assert_eq!(last.omitted.map(|o| o.count), Some(39));

    // The start of what was left behind, read for a compaction, up to a size.
    let size: fn(&StoredMessage) -> usize = |m| m.content.as_deref().map_or(0, str::len);
    let start = store.load_omitted_start(&sid, omitted, 50, size).await.unwrap();
    // The row that reaches the size is the last one read.
    assert_eq!(contents(&start), some(&["the summary", &text(100), &text(101)]));
}

/// A busy session is never idle long enough for the quiet-moment checkpoint: the WAL is
/// checkpointed by size and its file cut back, so it does not grow with the day (the soak
/// bench saw a 171 MB WAL beside a 1.8 MB database).
#[tokio::test(flavor = "multi_thread")]
async fn the_wal_stays_small_while_writes_never_pause() {
    let home = temp_home();
    let store = open(&home);
    let sid = store.create_session("m", "/w", None).await.unwrap();
    let text = "a line of a long busy day\n".repeat(80);
    // About 2 KB per message and a few pages per write: ~25 MB of WAL frames without checkpoints.
    for _ in 0..2_000 {
        store.append_message(&sid, user(&text)).await.unwrap();
    }
    let wal = std::fs::metadata(home.path().join("state.db-wal")).map(|m| m.len()).unwrap_or(0);
    assert!(wal < 8 << 20, "the WAL is {wal} bytes after 2,000 writes");
    assert_eq!(store.load_messages(&sid).await.unwrap().len(), 2_000);
}
