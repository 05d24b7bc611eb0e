use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;

use super::*;

fn write(root: &Path, path: &str, text: &str) {
    let full = root.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(full, text).unwrap();
}

fn paths(changes: &[Change]) -> Vec<(String, ChangeKind)> {
    changes.iter().map(|c| (c.path.clone(), c.kind)).collect()
}

/// Every file under `dir` with its bytes (what "byte-for-byte the same" compares).
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

#[test]
fn snapshots_give_each_stretch_its_paths_and_a_restore_puts_them_back() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    write(w, "b.txt", "one\ntwo\n");
    write(w, "c.txt", "see\n");
    write(w, ".gitignore", "target/\n");
    write(w, "target/out.o", "ignored");
    let ws = Workspace::open(data.path(), w, 1 << 20).unwrap();
    let s0 = ws.store.snapshot().unwrap().tree;
    write(w, "a.txt", "alpha\n");
    let s1 = ws.store.snapshot().unwrap().tree;
    assert_eq!(paths(&ws.store.changes(&s0, &s1).unwrap()), vec![("a.txt".into(), ChangeKind::Added)]);
    write(w, "b.txt", "one\nTWO\n");
    std::fs::remove_file(w.join("c.txt")).unwrap();
    write(w, "d/e.txt", "new\n");
    write(w, "target/out.o", "still ignored");
    let s2 = ws.store.snapshot().unwrap().tree;
    let changes = ws.store.changes(&s1, &s2).unwrap();
    assert_eq!(
        paths(&changes),
        vec![
            ("b.txt".into(), ChangeKind::Modified),
            ("c.txt".into(), ChangeKind::Deleted),
            ("d/e.txt".into(), ChangeKind::Added)
        ]
    );
    assert_eq!(counts(&changes[0]), "+1 −1");
    ws.store.restore(&s1, &["b.txt".into(), "c.txt".into(), "d/e.txt".into()]).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("b.txt")).unwrap(), "one\ntwo\n");
    assert_eq!(std::fs::read_to_string(w.join("c.txt")).unwrap(), "see\n");
    assert!(!w.join("d").exists(), "the directory the removal left empty goes too");
    assert_eq!(ws.store.snapshot().unwrap().tree, s1);
}

#[test]
fn a_file_over_the_cap_is_skipped_and_said_and_a_binary_file_is_kept() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::write(w.join("big.bin"), vec![7u8; 4096]).unwrap();
    std::fs::write(w.join("small.bin"), [0u8, 159, 146, 150, 0, 1]).unwrap();
    let ws = Workspace::open(data.path(), w, 1000).unwrap();
    let snap = ws.store.snapshot().unwrap();
    assert_eq!(snap.skipped, vec![Skipped { path: "big.bin".into(), bytes: 4096 }]);
    std::fs::write(w.join("small.bin"), [1u8, 2, 0]).unwrap();
    let next = ws.store.snapshot().unwrap();
    let changes = ws.store.changes(&snap.tree, &next.tree).unwrap();
    assert_eq!(paths(&changes), vec![("small.bin".into(), ChangeKind::Modified)]);
    assert_eq!(counts(&changes[0]), "binary");
    ws.store.restore(&snap.tree, &["small.bin".into()]).unwrap();
    assert_eq!(std::fs::read(w.join("small.bin")).unwrap(), [0u8, 159, 146, 150, 0, 1]);
}

#[test]
fn the_users_repository_is_byte_for_byte_the_same_after_snapshots_and_a_restore() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    git(w, &["init", "-q"]);
    write(w, "a.txt", "a\n");
    write(w, ".gitattributes", "*.txt filter=boom\n");
    git(w, &["add", "."]);
    git(w, &["commit", "-qm", "one"]);
    write(w, "a.txt", "a2\n");
    git(w, &["stash", "-q"]);
    write(w, "staged.txt", "s\n");
    git(w, &["add", "staged.txt"]);
    write(w, "a.txt", "a3\n");
    // A hook and a filter that would leave a mark if anything ran them.
    let mark = w.join("ran");
    let hook = w.join(".git/hooks/post-index-change");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", mark.display())).unwrap();
    Command::new("chmod").arg("+x").arg(&hook).status().unwrap();
    git(w, &["config", "filter.boom.clean", &format!("touch {}; cat", mark.display())]);
    // Status first: it runs the filter and may refresh the user's index itself.
    let status = git(w, &["status", "--porcelain"]);
    let stash = git(w, &["stash", "list"]);
    let before = tree_bytes(&w.join(".git"));
    let _ = std::fs::remove_file(&mark);
    let ws = Workspace::open(data.path(), w, 1 << 20).unwrap();
    let s0 = ws.store.snapshot().unwrap().tree;
    write(w, "a.txt", "agent\n");
    write(w, "new.txt", "n\n");
    let s1 = ws.store.snapshot().unwrap().tree;
    assert_eq!(
        paths(&ws.store.changes(&s0, &s1).unwrap()),
        vec![("a.txt".into(), ChangeKind::Modified), ("new.txt".into(), ChangeKind::Added)]
    );
    ws.store.restore(&s0, &["a.txt".into(), "new.txt".into()]).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "a3\n");
    assert!(!mark.exists(), "no user hook or filter ran");
    assert_eq!(tree_bytes(&w.join(".git")), before, ".git is byte-for-byte the same");
    assert_eq!(git(w, &["status", "--porcelain"]), status);
    assert_eq!(git(w, &["stash", "list"]), stash);
    assert!(!paths(&ws.store.changes(crate::engine::rewind::git::EMPTY_TREE, &s0).unwrap())
        .iter()
        .any(|(p, _)| p.starts_with(".git/")));
}

#[test]
fn a_timeline_keeps_the_users_edits_between_turns_and_a_rewind_is_an_entry_that_undoes() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    write(w, "b.txt", "b\n");
    write(w, "f.txt", "f\n");
    let ws = Workspace::open(data.path(), w, 1 << 20).unwrap();
    let j = ws.journal("s1");
    let start = |id: u64, seq: i64| {
        let tree = ws.store.snapshot().unwrap().tree;
        j.append(&Record::Start {
            id,
            trigger: "user".into(),
            text: format!("t{id}"),
            seq,
            tree,
            at_ms: 0,
            skipped: vec![],
        })
        .unwrap();
    };
    let end = |id: u64| j.append(&Record::End { id, tree: ws.store.snapshot().unwrap().tree }).unwrap();
    start(1, 1);
    write(w, "a.txt", "a1\n");
    end(1);
    start(2, 3);
    write(w, "b.txt", "b2\n");
    end(2);
    write(w, "f.txt", "user\n");
    start(3, 5);
    write(w, "a.txt", "a3\n");
    // No end: talaria was killed in the middle of turn 3.
    let tl = Timeline::load(&ws, &j).unwrap();
    assert_eq!(paths(&tl.changes(&ws, 1).unwrap()), vec![("b.txt".into(), ChangeKind::Modified)]);
    assert_eq!(paths(&tl.user_changes(&ws, 1).unwrap()), vec![("f.txt".into(), ChangeKind::Modified)]);
    assert_eq!(paths(&tl.changes(&ws, 2).unwrap()), vec![("a.txt".into(), ChangeKind::Modified)]);
    let plan = tl.plan(&ws, 2, false).unwrap();
    assert_eq!(plan.kept, vec!["f.txt".to_string()]);
    tl.apply(&ws, &j, 2, RewindMode::Code, &plan).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "a1\n");
    assert_eq!(std::fs::read_to_string(w.join("b.txt")).unwrap(), "b\n");
    assert_eq!(std::fs::read_to_string(w.join("f.txt")).unwrap(), "user\n");
    // The rewind is entry 4; rewinding to before it undoes it.
    let tl = Timeline::load(&ws, &j).unwrap();
    assert_eq!(tl.entries[3].kind, EntryKind::Rewind { target: 2, mode: RewindMode::Code });
    let undo = tl.plan(&ws, 4, false).unwrap();
    tl.apply(&ws, &j, 4, RewindMode::Code, &undo).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "a3\n");
    assert_eq!(std::fs::read_to_string(w.join("b.txt")).unwrap(), "b2\n");
}

/// Issue #33: the rewinder's order is taken when work is handed over, not when its future
/// is first awaited: an end snapshot handed over while other work holds the order runs
/// before anything asked later, whatever is awaited first, and `settled` waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_runs_in_the_order_it_was_handed_over_and_settled_waits_for_it() {
    use std::sync::Mutex;
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    write(work.path(), "b.txt", "b\n");
    let r = Rewinder::open(data.path(), work.path(), 1 << 20).unwrap();
    let (id, _) = r.turn_started("s1", "user".into(), "turn one".into(), 1).await.unwrap();
    write(work.path(), "a.txt", "a\n");
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    // Something holds the order (as a long snapshot would) until told to go on.
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let holding = r.with("s1", move |_, _| {
        wait.recv().ok();
        Ok(())
    });
    let ended = log.clone();
    r.turn_ended("s1", id, move |result| {
        let (number, changes) = result.unwrap();
        ended.lock().unwrap().push(format!("end {number}: {:?}", paths(&changes)));
    });
    let later_log = log.clone();
    let later = r.with("s1", move |_, journal| {
        let entries = journal::entries(&journal.load()?);
        later_log.lock().unwrap().push(format!("later: end recorded {}", entries[0].end.is_some()));
        Ok(())
    });
    let settled = r.settled();
    go.send(()).unwrap();
    // Awaited in the other order than handed over.
    later.await.unwrap();
    settled.await;
    holding.await.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        [format!("end 1: {:?}", [("a.txt".to_string(), ChangeKind::Added)]), "later: end recorded true".into()]
    );
    let records = r.ws.journal("s1").load().unwrap();
    assert!(matches!(records.as_slice(), [Record::Start { .. }, Record::End { .. }]), "{records:?}");
}
