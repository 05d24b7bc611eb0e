//! Git, whole (DESIGN §6, issue #27): what a sandboxed command plants in or around `.git`
//! never runs when the user next uses git outside the sandbox, and git itself still works
//! inside it. Each test is one real `talaria exec` session (scripted model, no `--yes`) with
//! a fake home and TMPDIR outside the workspace; after it the test plays the user and runs
//! plain `git status` and `git commit` in the workspace, then looks for the markers the
//! planted programs would have made.

mod common;

use std::path::{Path, PathBuf};

use common::{stderr, Home};
use serde_json::Value;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

/// A fake home, a TMPDIR (a writable root) and a marker directory, outside the workspace.
struct Outside {
    _dir: tempfile::TempDir,
    home: PathBuf,
    tmp: PathBuf,
    marks: PathBuf,
}

impl Outside {
    fn new() -> Outside {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (home, tmp, marks) = (base.join("home"), base.join("tmp"), base.join("marks"));
        for d in [&home, &tmp, &marks] {
            std::fs::create_dir_all(d).unwrap();
        }
        Outside { _dir: dir, home, tmp, marks }
    }

    /// The markers planted programs made.
    fn marks(&self) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(&self.marks).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        names.sort();
        names
    }
}

/// Plain git as the user runs it: no sandbox, the repository's own config.
fn git(dir: &Path, outside: &Outside, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", &outside.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap()
}

fn git_ok(dir: &Path, outside: &Outside, args: &[&str]) {
    let out = git(dir, outside, args);
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn repo_with_a_commit(dir: &Path, outside: &Outside) {
    git_ok(dir, outside, &["init", "-q"]);
    std::fs::write(dir.join("a.txt"), "a\n").unwrap();
    git_ok(dir, outside, &["add", "a.txt"]);
    git_ok(dir, outside, &["commit", "-qm", "first"]);
}

/// What the user does next, outside the sandbox: the moments planted programs would run.
fn play_the_user(dir: &Path, outside: &Outside) {
    let _ = git(dir, outside, &["status"]);
    let _ = git(dir, outside, &["commit", "-q", "--allow-empty", "-m", "by the user"]);
}

/// One session: each command is one `terminal` call; the results the model got, in order.
async fn session(home: &Home, outside: &Outside, commands: &[String]) -> Vec<Value> {
    let mut script: Vec<ScriptedResponse> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let args = serde_json::json!({ "command": c, "timeout": 30 }).to_string();
            ScriptedResponse::tool_call(&format!("c{i}"), "terminal", &args)
        })
        .collect();
    script.push(ScriptedResponse::text("done"));
    let server = ScriptedServer::start(script).await.unwrap();
    let mut cmd = home.command();
    cmd.env("HOME", &outside.home).env("TMPDIR", &outside.tmp).args(["exec", "--base-url", &server.base_url(), "go"]);
    let out = tokio::time::timeout(std::time::Duration::from_secs(300), cmd.output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = server.chat_requests();
    assert_eq!(requests.len(), commands.len() + 1);
    requests[1..]
        .iter()
        .map(|r| {
            let messages = r.body["messages"].as_array().unwrap();
            let content = messages.last().and_then(|m| m["content"].as_str()).unwrap_or_default();
            serde_json::from_str(content).unwrap_or_else(|e| panic!("not a tool result ({e}): {content}"))
        })
        .collect()
}

const AUTHOR: &str = "export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t";

/// A program line that leaves marker `name` (`{M}` is the marker directory).
fn touch(outside: &Outside, name: &str) -> String {
    format!("touch {}/{name}", outside.marks.display())
}

/// In a repository that existed when the session started: a planted `commondir` (to a
/// copy of `.git` whose config sets core.fsmonitor), rewrites of config, hooks, info and
/// description, and a fsmonitor script the config names inside the tree — none runs for
/// the user; `git commit` and `git stash` still work in the sandbox.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_command_plants_in_a_repository_never_runs_for_the_user() {
    let home = Home::new();
    let outside = Outside::new();
    let work = home.work().canonicalize().unwrap();
    repo_with_a_commit(&work, &outside);
    let evil = outside.tmp.join("evil-7301");
    let attacks = [
        // commondir: the user's git would read the copy's config.
        format!(
            "cp -r .git {e} && printf '[core]\\n\\tfsmonitor = \"{t}; echo\"\\n' >> {e}/config && echo {e} > .git/commondir",
            e = evil.display(),
            t = touch(&outside, "commondir")
        ),
        format!("printf '#!/bin/sh\\n{}\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit", touch(&outside, "hook")),
        format!("git config core.fsmonitor '{}; echo'", touch(&outside, "config")),
        format!("printf '[core]\\n\\thooksPath = {}\\n' > .git/config.worktree", outside.tmp.display()),
        "mkdir -p .git/info && echo '* filter=evil' > .git/info/attributes".to_string(),
        "echo planted > .git/description".to_string(),
        "rm -rf .git/hooks".to_string(),
        "mv .git/config .git/config.old".to_string(),
    ];
    let mut commands: Vec<String> = attacks.to_vec();
    // No false positives: commit and stash inside the sandbox.
    commands.push(format!(
        "{AUTHOR}; echo b > b.txt && git add b.txt && git commit -qm second && echo c >> a.txt && git stash -q \
         && git stash list | wc -l && git log --oneline | wc -l"
    ));
    let results = session(&home, &outside, &commands).await;
    // The commondir went in (git needs its directory writable) and was moved aside at once.
    let moved = results[0]["git_guard"].as_str().unwrap_or_default();
    assert!(moved.contains("commondir"), "{}", results[0]);
    assert!(!work.join(".git/commondir").exists());
    for (attack, result) in attacks.iter().zip(&results).skip(1) {
        // A new name in .git is writable (as index.lock must be); this one means nothing
        // while the (read-only) config does not turn extensions.worktreeConfig on.
        if !attack.contains("config.worktree") {
            assert_ne!(result["exit_code"], 0, "{attack} succeeded: {result}");
        }
    }
    let last = results.last().unwrap();
    assert_eq!(last["exit_code"], 0, "{last}");
    assert_eq!(
        last["output"].as_str().unwrap_or_default().split_whitespace().collect::<Vec<_>>(),
        ["1", "2"],
        "{last}"
    );
    assert!(!std::fs::read_to_string(work.join(".git/config")).unwrap().contains("fsmonitor"));
    assert!(work.join(".git/hooks").is_dir() && !work.join(".git/hooks/pre-commit").exists());
    play_the_user(&work, &outside);
    assert_eq!(outside.marks(), Vec::<String>::new());
}

/// The workspace is a linked worktree (its `.git` is a file) of a repository in TMPDIR, a
/// writable root: the `.git` file, the worktree's own `commondir` and the common config
/// and hooks are all out of reach; committing still works.
#[tokio::test(flavor = "multi_thread")]
async fn a_worktree_s_git_file_and_common_directory_are_guarded() {
    let home = Home::new();
    let outside = Outside::new();
    let main = outside.tmp.join("main-7302");
    std::fs::create_dir_all(&main).unwrap();
    repo_with_a_commit(&main, &outside);
    let work = home.work().canonicalize().unwrap();
    git_ok(&main, &outside, &["worktree", "add", "-q", "-b", "side", work.to_str().unwrap()]);
    let dot_git = std::fs::read_to_string(work.join(".git")).unwrap();
    let evil = outside.tmp.join("evil-7302");
    let attacks = [
        format!("cp -r {m}/.git {e} && echo 'gitdir: {e}' > .git", m = main.display(), e = evil.display()),
        format!("echo {} > \"$(git rev-parse --git-dir)/commondir\"", evil.display()),
        format!("git config core.fsmonitor '{}; echo'", touch(&outside, "common-config")),
        format!(
            "printf '#!/bin/sh\\n{}\\n' > \"$(git rev-parse --git-common-dir)/hooks/pre-commit\"",
            touch(&outside, "common-hook")
        ),
    ];
    let mut commands: Vec<String> = attacks.to_vec();
    commands.push(format!(
        "{AUTHOR}; echo w > w.txt && git add w.txt && git commit -qm in-worktree && git log --oneline | wc -l"
    ));
    let results = session(&home, &outside, &commands).await;
    for (attack, result) in attacks.iter().zip(&results) {
        assert_ne!(result["exit_code"], 0, "{attack} succeeded: {result}");
    }
    let last = results.last().unwrap();
    assert_eq!(last["exit_code"], 0, "{last}");
    assert_eq!(last["output"].as_str().unwrap_or_default().trim(), "2", "{last}");
    assert_eq!(std::fs::read_to_string(work.join(".git")).unwrap(), dot_git);
    play_the_user(&work, &outside);
    assert_eq!(outside.marks(), Vec::<String>::new());
}

/// `.git/hooks` a symlink into the tree, and `core.hooksPath` naming a directory in the
/// tree: the link cannot be swapped and neither directory written.
#[tokio::test(flavor = "multi_thread")]
async fn symlinked_hooks_and_a_hooks_path_in_the_tree_are_guarded() {
    let home = Home::new();
    let outside = Outside::new();
    let work = home.work().canonicalize().unwrap();
    repo_with_a_commit(&work, &outside);
    std::fs::remove_dir_all(work.join(".git/hooks")).unwrap();
    std::fs::create_dir(work.join("githooks")).unwrap();
    std::os::unix::fs::symlink("../githooks", work.join(".git/hooks")).unwrap();
    let hook = |name: &str| format!("'#!/bin/sh\\n{}\\n'", touch(&outside, name));
    let attacks = [
        format!("printf {} > githooks/pre-commit && chmod +x githooks/pre-commit", hook("linked")),
        format!("rm .git/hooks && mkdir .git/hooks && printf {} > .git/hooks/pre-commit", hook("swapped")),
        format!("ln -sfn {} .git/hooks", outside.tmp.display()),
    ];
    let results = session(&home, &outside, &attacks).await;
    for (attack, result) in attacks.iter().zip(&results) {
        assert_ne!(result["exit_code"], 0, "{attack} succeeded: {result}");
    }
    play_the_user(&work, &outside);
    assert_eq!(outside.marks(), Vec::<String>::new());
    // A hooksPath inside the workspace root itself is guarded.
    std::fs::remove_file(work.join(".git/hooks")).unwrap();
    std::fs::create_dir(work.join(".git/hooks")).unwrap();
    git_ok(&work, &outside, &["config", "core.hooksPath", "tools/hooks"]);
    let results = session(
        &home,
        &outside,
        &[format!(
            "mkdir -p tools/hooks; printf {} > tools/hooks/pre-commit && chmod +x tools/hooks/pre-commit",
            hook("hp")
        )],
    )
    .await;
    assert_ne!(results[0]["exit_code"], 0, "{}", results[0]);
    play_the_user(&work, &outside);
    assert_eq!(outside.marks(), Vec::<String>::new());
}

/// A repository created during the session (`git init` works) keeps no config that names
/// a program nor hooks its creator wrote; the next command's guard covers it as well.
#[tokio::test(flavor = "multi_thread")]
async fn a_repository_created_during_the_session_keeps_no_planted_program() {
    let home = Home::new();
    let outside = Outside::new();
    let work = home.work().canonicalize().unwrap();
    let commands = [
        format!(
            "{AUTHOR}; git init -q && echo a > a && git add a && git commit -qm one && git config core.fsmonitor '{}; echo' \
             && printf '#!/bin/sh\\n{}\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
            touch(&outside, "init-config"),
            touch(&outside, "init-hook")
        ),
        format!("git config core.fsmonitor '{}; echo'", touch(&outside, "later")),
        format!("{AUTHOR}; echo b > b && git add b && git commit -qm two && git log --oneline | wc -l"),
    ];
    let results = session(&home, &outside, &commands).await;
    assert_eq!(results[0]["exit_code"], 0, "git init works: {}", results[0]);
    let moved = results[0]["git_guard"].as_str().unwrap_or_default();
    assert!(moved.contains(".git/config") && moved.contains(".git/hooks"), "{}", results[0]);
    assert_ne!(results[1]["exit_code"], 0, "the new repository is guarded now: {}", results[1]);
    assert_eq!(results[2]["exit_code"], 0, "{}", results[2]);
    assert_eq!(results[2]["output"].as_str().unwrap_or_default().trim(), "2", "{}", results[2]);
    play_the_user(&work, &outside);
    assert_eq!(outside.marks(), Vec::<String>::new());
}
