//! Rewind end to end (issue #29): a scripted session through the real binary — file tools
//! and a shell command change files, the user edits one between turns — then
//! `talaria rewind` puts back what the later turns changed and keeps the user's edit.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{stderr, stdout, wait_until, Home};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

/// Every file under `dir` with its bytes.
fn tree_bytes(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.insert(p.strip_prefix(base).unwrap().display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@e", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read(home: &Home, path: &str) -> String {
    std::fs::read_to_string(home.work().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One `exec` turn: the model calls `tool` with `args`, then answers. Returns the JSON events.
async fn turn(home: &Home, first: bool, prompt: &str, tool: &str, args: Value) -> Vec<Value> {
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_1", tool, &args.to_string()),
        ScriptedResponse::text("done"),
    ])
    .await
    .unwrap();
    let url = server.base_url();
    let mut argv = vec!["exec", "--json", "--yes", "--base-url", &url];
    if !first {
        argv.push("-c");
    }
    argv.push(prompt);
    let out = home.run(&argv).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The paths a turn's `TurnChanges` event lists.
fn changed(events: &[Value]) -> Vec<(String, String)> {
    let e = events.iter().find(|e| e["type"] == "TurnChanges").expect("a TurnChanges event");
    e["data"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["path"].as_str().unwrap().to_string(), p["kind"].as_str().unwrap().to_string()))
        .collect()
}

fn pair(path: &str, kind: &str) -> (String, String) {
    (path.to_string(), kind.to_string())
}

async fn active_messages(home: &Home) -> u64 {
    let store = talaria::engine::store::Store::open(&home.path().join("state.db")).unwrap();
    let sessions = store.list_sessions(5).await.unwrap();
    assert_eq!(sessions.len(), 1, "one session");
    sessions[0].message_count
}

/// The session of the issue: turn 1 writes a.txt; turn 2's command edits b.txt with
/// `sed -i`, removes c.txt and creates d/e.txt; the user edits f.txt; turn 3 edits a.txt.
/// `check` runs after every step (the user's repository stays as it was). Returns the
/// number of messages after turn 1.
async fn scripted_session(home: &Home, check: &dyn Fn(&str)) -> u64 {
    let w = home.work();
    let t1 = turn(home, true, "turn one", "write_file", json!({"path": "a.txt", "content": "one\n"})).await;
    assert_eq!(changed(&t1), vec![pair("a.txt", "added")]);
    check("turn 1");
    let after_one = active_messages(home).await;
    let command = "sed -i 's/two/TWO/' b.txt && rm c.txt && mkdir -p d && echo e > d/e.txt";
    let t2 = turn(home, false, "turn two", "terminal", json!({ "command": command })).await;
    assert_eq!(changed(&t2), vec![pair("b.txt", "modified"), pair("c.txt", "deleted"), pair("d/e.txt", "added")]);
    check("turn 2");
    std::fs::write(w.join("f.txt"), "the user's edit\n").unwrap();
    let edit = json!({"path": "a.txt", "old_string": "one", "new_string": "three"});
    let t3 = turn(home, false, "turn three", "edit_file", edit).await;
    assert_eq!(changed(&t3), vec![pair("a.txt", "modified")], "f.txt is the user's, not turn 3's");
    check("turn 3");
    assert_eq!(read(home, "a.txt"), "three\n");
    after_one
}

fn seed(home: &Home) {
    let w = home.work();
    std::fs::write(w.join("b.txt"), "one\ntwo\n").unwrap();
    std::fs::write(w.join("c.txt"), "see\n").unwrap();
    std::fs::write(w.join("f.txt"), "f\n").unwrap();
}

async fn rewind(home: &Home, args: &[&str]) -> std::process::Output {
    let mut argv = vec!["rewind"];
    argv.extend_from_slice(args);
    home.run(&argv).await
}

#[tokio::test(flavor = "multi_thread")]
async fn rewind_code_only_in_a_git_repository_keeps_the_users_edit_and_leaves_git_alone() {
    let home = Home::new();
    let w = home.work();
    seed(&home);
    git(&w, &["init", "-q"]);
    git(&w, &["add", "."]);
    git(&w, &["commit", "-qm", "start"]);
    std::fs::write(w.join("b.txt"), "one\ntwo\nstashed\n").unwrap();
    git(&w, &["stash", "-q"]);
    std::fs::write(w.join("staged.txt"), "s\n").unwrap();
    git(&w, &["add", "staged.txt"]);
    // Status first (it may refresh the index itself); then nothing may touch .git.
    let status = git(&w, &["status", "--porcelain"]);
    assert_eq!(status, "A  staged.txt\n");
    let dot_git = tree_bytes(&w.join(".git"));
    let check = |when: &str| {
        assert!(tree_bytes(&w.join(".git")) == dot_git, "{when}: .git changed");
    };
    scripted_session(&home, &check).await;
    let messages = active_messages(&home).await;

    let list = rewind(&home, &["list", "--json"]).await;
    assert_eq!(list.status.code(), Some(0), "{}", stderr(&list));
    let listed: Value = serde_json::from_str(&stdout(&list)).unwrap();
    let turns = listed["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    assert_eq!(turns[1]["label"], "turn two");
    let paths: Vec<&str> = turns[1]["paths"].as_array().unwrap().iter().map(|p| p["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["b.txt", "c.txt", "d/e.txt"]);

    // Without --yes: what it would do, nothing done, exit 1.
    let dry = rewind(&home, &["2", "--code"]).await;
    assert_eq!(dry.status.code(), Some(1), "{}", stderr(&dry));
    let said = stdout(&dry);
    for line in ["restore a.txt", "restore b.txt", "bring back c.txt", "remove d/e.txt", "f.txt"] {
        assert!(said.contains(line), "{line} in {said}");
    }
    assert_eq!(read(&home, "a.txt"), "three\n");
    check("the dry run");

    let done = rewind(&home, &["2", "--code", "--yes"]).await;
    assert_eq!(done.status.code(), Some(0), "{}{}", stdout(&done), stderr(&done));
    assert_eq!(read(&home, "a.txt"), "one\n", "as after turn 1");
    assert_eq!(read(&home, "b.txt"), "one\ntwo\n");
    assert_eq!(read(&home, "c.txt"), "see\n");
    assert!(!w.join("d").exists(), "d/ is gone");
    assert_eq!(read(&home, "f.txt"), "the user's edit\n", "the user's edit is kept");
    assert_eq!(active_messages(&home).await, messages, "the conversation is unchanged");
    check("the rewind");
    let mut status: Vec<String> = git(&w, &["status", "--porcelain"]).lines().map(String::from).collect();
    status.sort();
    assert_eq!(status, [" M f.txt", "?? a.txt", "A  staged.txt"], "the user's index and edit as they were");
    assert_eq!(git(&w, &["stash", "list"]).lines().count(), 1);

    // The rewind is entry 4; going back to before it undoes it.
    let undo = rewind(&home, &["4", "--code", "--yes"]).await;
    assert_eq!(undo.status.code(), Some(0), "{}{}", stdout(&undo), stderr(&undo));
    assert_eq!(read(&home, "a.txt"), "three\n");
    assert_eq!(read(&home, "b.txt"), "one\nTWO\n");
    assert!(!w.join("c.txt").exists());
    assert_eq!(read(&home, "d/e.txt"), "e\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn rewind_code_and_conversation_outside_a_git_repository_with_a_binary_and_a_50_mb_file() {
    let home = Home::new();
    let w = home.work();
    seed(&home);
    let binary: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    std::fs::write(w.join("blob.bin"), &binary).unwrap();
    std::fs::write(w.join("big.bin"), vec![1u8; 50 * 1024 * 1024]).unwrap();
    let first =
        turn(&home, true, "turn one", "terminal", json!({"command": "printf 'x' >> blob.bin && echo 1 > a.txt"})).await;
    let said: Vec<&str> =
        first.iter().filter(|e| e["type"] == "Notice").filter_map(|e| e["data"]["text"].as_str()).collect();
    assert!(
        said.iter().any(|t| t.contains("big.bin (50 MB)") && t.contains("not kept")),
        "the 50 MB file is said: {said:?}"
    );
    assert_eq!(changed(&first), vec![pair("a.txt", "added"), pair("blob.bin", "modified")]);
    let after_one = active_messages(&home).await;
    let edit = json!({"path": "a.txt", "old_string": "1", "new_string": "2"});
    turn(&home, false, "turn two", "edit_file", edit).await;
    std::fs::write(w.join("f.txt"), "the user's edit\n").unwrap();
    assert!(active_messages(&home).await > after_one);

    let done = rewind(&home, &["1", "--both", "--yes"]).await;
    assert_eq!(done.status.code(), Some(0), "{}{}", stdout(&done), stderr(&done));
    assert!(!w.join("a.txt").exists(), "created by turn 1: removed");
    assert_eq!(std::fs::read(w.join("blob.bin")).unwrap(), binary, "the binary file as it was");
    assert_eq!(std::fs::metadata(w.join("big.bin")).unwrap().len(), 50 * 1024 * 1024, "the skipped file is left alone");
    assert_eq!(read(&home, "f.txt"), "the user's edit\n");
    assert_eq!(active_messages(&home).await, 0, "the conversation is back to before turn 1");
}

/// The same point as the first test, "code and conversation", in a second run (outside a
/// git repository): the files as in the code-only rewind, and the conversation as it was
/// before turn 2 (turn 2's message is the last thing dropped).
#[tokio::test(flavor = "multi_thread")]
async fn rewind_code_and_conversation_to_before_turn_2_of_the_scripted_session() {
    let home = Home::new();
    let w = home.work();
    seed(&home);
    let after_one = scripted_session(&home, &|_| {}).await;
    assert!(active_messages(&home).await > after_one);
    let done = rewind(&home, &["2", "--both", "--yes"]).await;
    assert_eq!(done.status.code(), Some(0), "{}{}", stdout(&done), stderr(&done));
    assert!(stdout(&done).contains("the conversation is back to before it"), "{}", stdout(&done));
    assert_eq!(read(&home, "a.txt"), "one\n", "as after turn 1");
    assert_eq!(read(&home, "b.txt"), "one\ntwo\n");
    assert_eq!(read(&home, "c.txt"), "see\n");
    assert!(!w.join("d").exists(), "d/ is gone");
    assert_eq!(read(&home, "f.txt"), "the user's edit\n", "the user's edit is kept");
    assert_eq!(active_messages(&home).await, after_one, "the conversation as after turn 1");
    // `talaria -c` goes on from there: the next turn's request holds turn 1 and not turn 2.
    let server = ScriptedServer::start([ScriptedResponse::text("again")]).await.unwrap();
    let url = server.base_url();
    let out = home.run(&["exec", "--json", "--yes", "--base-url", &url, "-c", "turn four"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let requests = server.wait_for_chat_requests(1, std::time::Duration::from_secs(30)).await;
    let body = serde_json::to_string(&requests[0].messages()).unwrap();
    assert!(body.contains("turn one") && !body.contains("turn two") && !body.contains("turn three"), "{body}");
}

/// The snapshot before a turn starts once the turn's first model request is on the wire
/// (issue #33): a first tool call that overwrites a file still finds the old content kept,
/// also when the snapshot has 2,000 files to hash first (the tool waits for it).
#[tokio::test(flavor = "multi_thread")]
async fn a_first_tool_call_that_overwrites_a_file_finds_its_old_content_in_the_snapshot_before_the_turn() {
    let home = Home::new();
    let w = home.work();
    for i in 0..2000 {
        let dir = w.join(format!("d{}", i % 20));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
    }
    std::fs::write(w.join("zz.txt"), "old\n").unwrap();
    let write = json!({"path": "zz.txt", "content": "new\n"});
    let t1 = turn(&home, true, "overwrite zz", "write_file", write).await;
    assert_eq!(changed(&t1), vec![pair("zz.txt", "modified")], "the snapshot was taken before the write");
    assert_eq!(read(&home, "zz.txt"), "new\n");
    let done = rewind(&home, &["1", "--code", "--yes"]).await;
    assert_eq!(done.status.code(), Some(0), "{}{}", stdout(&done), stderr(&done));
    assert_eq!(read(&home, "zz.txt"), "old\n", "the content before the turn");
}

/// A turn that sends no request — nothing listens at the model's address, or the message
/// cannot fit the window — still gets its snapshots before and after, and ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_that_fails_before_any_request_still_snapshots_and_ends() {
    let home = Home::new();
    std::fs::write(home.work().join("a.txt"), "a\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let exec = |args: Vec<String>| {
        let home = &home;
        async move {
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            tokio::time::timeout(std::time::Duration::from_secs(60), home.run(&argv))
                .await
                .expect("the turn ended (no wait for a request that never went out)")
        }
    };
    let refused =
        exec(["exec", "--json", "--yes", "--model", "m", "--base-url", &url, "no server"].map(String::from).to_vec())
            .await;
    assert_eq!(refused.status.code(), Some(1), "stderr: {}", stderr(&refused));
    let events: Vec<Value> = stdout(&refused).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(stdout(&refused).contains("nothing is listening"), "{}", stdout(&refused));
    assert_eq!(changed(&events), vec![], "snapshots before and after the turn");

    home.write_config("[model]\ncontext_window = 1000\n");
    let server = ScriptedServer::start([ScriptedResponse::text("never asked")]).await.unwrap();
    let huge = format!("too large {}", "x".repeat(20_000));
    let args = ["exec", "--json", "--yes", "--base-url", &server.base_url(), "-c", &huge].map(String::from);
    let too_large = exec(args.to_vec()).await;
    assert_eq!(too_large.status.code(), Some(1), "stderr: {}", stderr(&too_large));
    assert!(stdout(&too_large).contains("cannot fit the model's context window"), "{}", stdout(&too_large));
    let events: Vec<Value> = stdout(&too_large).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(changed(&events), vec![]);
    assert_eq!(server.chat_requests().len(), 0, "no model request went out");

    let list = rewind(&home, &["list", "--json"]).await;
    assert_eq!(list.status.code(), Some(0), "{}", stderr(&list));
    let listed: Value = serde_json::from_str(&stdout(&list)).unwrap();
    let labels: Vec<&str> = listed["turns"].as_array().unwrap().iter().map(|t| t["label"].as_str().unwrap()).collect();
    assert_eq!(labels.len(), 2, "{listed}");
    assert_eq!(labels[0], "no server");
}

/// The kinds of the records in the one session journal under `home`.
fn journal_kinds(home: &Home) -> Vec<String> {
    let mut kinds = Vec::new();
    for store in std::fs::read_dir(home.path().join("rewind")).into_iter().flatten().flatten() {
        for journal in std::fs::read_dir(store.path().join("sessions")).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(journal.path()).unwrap_or_default();
            for line in text.lines() {
                let record: Value = serde_json::from_str(line).unwrap();
                kinds.push(record["record"].as_str().unwrap().to_string());
            }
        }
    }
    kinds
}

/// The next JSON line of exec's output (30 s deadline), None at its end.
async fn next_event(lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>) -> Option<Value> {
    let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line()).await;
    line.expect("an event within 30 s").unwrap().map(|l| serde_json::from_str(&l).unwrap())
}

/// A model that writes a.txt and answers "done".
async fn server_writing_a_txt() -> ScriptedServer {
    ScriptedServer::start([
        ScriptedResponse::tool_call("call_1", "write_file", r#"{"path":"a.txt","content":"one\n"}"#),
        ScriptedResponse::text("done"),
    ])
    .await
    .unwrap()
}

/// Issue #33: exec's turn ends without waiting for the snapshot after it (held here by
/// `TALARIA_TEST_HOLD`), and exec quitting right after the answer still waits for it: the
/// End record is in the journal and the changes are printed, after `TurnFinished` and before
/// `ShutdownComplete`.
#[tokio::test(flavor = "multi_thread")]
async fn exec_quitting_right_after_the_answer_still_writes_the_end_record_and_prints_the_changes() {
    use tokio::io::AsyncBufReadExt;
    let home = Home::new();
    let server = server_writing_a_txt().await;
    let release = home.path().join(format!("release-{}", std::process::id()));
    let held = home.path().join(format!("release-{}.held", std::process::id()));
    let url = server.base_url();
    let mut child = home
        .command()
        .args(["exec", "--json", "--yes", "--base-url", &url, "write a.txt"])
        .env("TALARIA_TEST_HOLD", format!("end_snapshot:{}", release.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut events: Vec<Value> = Vec::new();
    while !events.last().is_some_and(|e| e["type"] == "TurnFinished") {
        events.push(next_event(&mut lines).await.expect("TurnFinished before the end of the output"));
    }
    // The turn is over while the snapshot after it is held: no End record, no changes yet.
    // The worker reaches the hold on its own thread, maybe after TurnFinished is out.
    wait_until("the end snapshot to be held", || held.exists()).await;
    assert_eq!(journal_kinds(&home), ["start"]);
    assert!(!events.iter().any(|e| e["type"] == "TurnChanges"));
    std::fs::write(&release, b"").unwrap();
    while let Some(event) = next_event(&mut lines).await {
        events.push(event);
    }
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(journal_kinds(&home), ["start", "end"]);
    let at = |kind: &str| events.iter().position(|e| e["type"] == kind).unwrap_or_else(|| panic!("no {kind}"));
    assert!(at("TurnFinished") < at("TurnChanges") && at("TurnChanges") < at("ShutdownComplete"));
    assert_eq!(changed(&events), vec![pair("a.txt", "added")]);
}

/// The same in text mode: the changed files are on stderr when exec has quit.
#[tokio::test(flavor = "multi_thread")]
async fn exec_in_text_mode_prints_the_turns_changed_files() {
    let home = Home::new();
    let server = server_writing_a_txt().await;
    let url = server.base_url();
    let out = home.run(&["exec", "--yes", "--base-url", &url, "write a.txt"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("turn 1 changed 1 path: added a.txt (+1 −0)"), "the changed file is printed:\n{err}");
    assert_eq!(journal_kinds(&home), ["start", "end"]);
}
