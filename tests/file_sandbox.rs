//! Every path the model names goes through the kernel sandbox (issue #28, DESIGN §6):
//! the file tools of the real binary (`talaria exec`, no `--yes`), with a fake home that
//! lies outside every writable root (TMPDIR points elsewhere too), in `auto` and `prompt`
//! mode. Reads of credential stores — named, or through a link in the workspace — are
//! refused by the sandbox, never shown; writes through long link chains, dangling links or
//! a directory swapped for a link never land outside the roots unasked; commands outside
//! the sandbox ask, known safe or not.

mod common;

use std::path::{Path, PathBuf};

use common::{stderr, Home};
use serde_json::{json, Value};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

/// In every credential store; never in a result.
const SECRET: &str = "SECRET-MATERIAL-4711";

/// The credential stores of the sandbox's list, as files under the home.
const STORES: &[&str] = &[
    ".ssh/id_ed25519",
    ".gnupg/private-keys-v1.d/k.key",
    ".aws/credentials",
    ".netrc",
    ".docker/config.json",
    ".config/gh/hosts.yml",
    ".config/gcloud/credentials.db",
    ".git-credentials",
    ".config/git/credentials",
    ".kube/config",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials.toml",
    ".cargo/credentials",
];

const RC: &str = "# the user's rc\n";

/// A fake home full of secrets, outside every root, and talaria's home with its config.
struct World {
    talaria: Home,
    _dir: tempfile::TempDir,
    home: PathBuf,
    tmp: PathBuf,
}

impl World {
    fn new(mode: &str) -> World {
        let talaria = Home::new();
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        for store in STORES {
            let path = home.join(store);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("{SECRET} {store}\n")).unwrap();
        }
        std::fs::write(home.join(".bashrc"), RC).unwrap();
        talaria.write_config(&format!(
            "# {SECRET} in talaria's config\n[approvals]\nmode = \"{mode}\"\n[agent]\nmax_iterations = 500\n"
        ));
        let work = talaria.work();
        std::fs::write(work.join("notes.txt"), "ordinary notes\n").unwrap();
        let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, work.join(name)).unwrap();
        link(&home.join(".ssh/id_ed25519"), "innocent.txt");
        link(&home.join(".ssh"), "keys");
        link(&home.join(".aws"), "cloud");
        link(&talaria.path().join("config.toml"), "settings.toml");
        link(&home, "h");
        link(&home.join("planted.txt"), "dangling.txt");
        std::os::unix::fs::symlink(".", work.join("a")).unwrap();
        World { talaria, _dir: dir, home, tmp }
    }

    /// Run the tool calls as the model's turns, one by one; the result of each.
    async fn run(&self, calls: &[(&str, Value)]) -> Vec<Value> {
        let mut script: Vec<ScriptedResponse> = calls
            .iter()
            .enumerate()
            .map(|(i, (tool, args))| ScriptedResponse::tool_call(&format!("c{i}"), tool, &args.to_string()))
            .collect();
        script.push(ScriptedResponse::text("done"));
        let server = ScriptedServer::start(script).await.unwrap();
        let mut cmd = self.talaria.command();
        cmd.env("HOME", &self.home).env("TMPDIR", &self.tmp).args(["exec", "--base-url", &server.base_url(), "go"]);
        let out = tokio::time::timeout(std::time::Duration::from_secs(240), cmd.output())
            .await
            .expect("talaria exec finishes")
            .expect("talaria runs");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let requests = server.chat_requests();
        assert_eq!(requests.len(), calls.len() + 1, "{}", stderr(&out));
        requests[1..]
            .iter()
            .map(|r| {
                let messages = r.body["messages"].as_array().unwrap();
                let content = messages.last().and_then(|m| m["content"].as_str()).unwrap_or_default();
                serde_json::from_str(content).unwrap_or_else(|e| panic!("not a JSON tool result ({e}): {content}"))
            })
            .collect()
    }

    /// The home as it was made: the stores, the rc, nothing added.
    fn untouched(&self) {
        for store in STORES {
            assert_eq!(std::fs::read_to_string(self.home.join(store)).unwrap(), format!("{SECRET} {store}\n"));
        }
        assert_eq!(std::fs::read_to_string(self.home.join(".bashrc")).unwrap(), RC);
        let mut names: Vec<String> =
            std::fs::read_dir(&self.home).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        names.sort();
        let want = [".aws", ".bashrc", ".cargo", ".config", ".docker", ".git-credentials", ".gnupg", ".kube"];
        let want: Vec<String> =
            want.iter().chain(&[".netrc", ".npmrc", ".pypirc", ".ssh"]).map(|s| s.to_string()).collect();
        assert_eq!(names, want, "the fake home changed");
        assert!(
            std::fs::read_to_string(self.talaria.path().join("config.toml")).unwrap().contains("[approvals]"),
            "talaria's config changed"
        );
    }
}

/// Every read of a credential store, by name or through a link, for the model.
fn read_calls(world: &World) -> Vec<(&'static str, Value)> {
    let mut calls: Vec<(&str, Value)> = Vec::new();
    for store in STORES {
        calls.push(("read_file", json!({ "path": format!("~/{store}") })));
        calls.push(("search_files", json!({ "pattern": "SECRET", "path": format!("~/{store}") })));
        let dir = store.rsplit_once('/').map_or(*store, |(d, _)| d);
        calls.push(("search_files", json!({ "pattern": "SECRET", "path": format!("~/{dir}") })));
    }
    let config = world.talaria.path().join("config.toml").display().to_string();
    calls.push(("read_file", json!({ "path": config })));
    for linked in ["innocent.txt", "keys/id_ed25519", "cloud/credentials", "settings.toml", "h/.netrc"] {
        calls.push(("read_file", json!({ "path": linked })));
    }
    for linked in ["keys", "cloud", "innocent.txt", "settings.toml", "h/.ssh"] {
        calls.push(("search_files", json!({ "pattern": "SECRET", "path": linked })));
    }
    calls
}

async fn reads_are_refused_in(mode: &str) {
    let world = World::new(mode);
    let mut calls = read_calls(&world);
    // The helper works: an ordinary file is read, a search finds it.
    calls.push(("read_file", json!({ "path": "notes.txt" })));
    calls.push(("search_files", json!({ "pattern": "ordinary" })));
    let results = world.run(&calls).await;
    let (refusals, ordinary) = results.split_at(results.len() - 2);
    assert!(ordinary[0]["content"].as_str().is_some_and(|c| c.contains("ordinary notes")), "{}", ordinary[0]);
    assert!(ordinary[1]["matches"].as_str().is_some_and(|c| c.contains("notes.txt:1:")), "{}", ordinary[1]);
    let mut refused = 0;
    for ((tool, args), result) in calls.iter().zip(refusals) {
        let text = result.to_string();
        assert!(!text.contains(SECRET), "{mode}: {tool} {args} showed a secret: {text}");
        if *tool == "read_file" {
            let error = result["error"].as_str().unwrap_or_default();
            assert!(error.contains("the sandbox stopped it"), "{mode}: {tool} {args}: {result}");
            assert_eq!(result["status"], "denied", "{result}");
            refused += 1;
        } else {
            assert_eq!(result["count"], 0, "{mode}: {tool} {args}: {result}");
            // A search that met a secret says the sandbox stopped it (one over a
            // directory of links finds nothing to read at all).
            if result["unreadable"].as_u64().is_some_and(|n| n > 0) {
                assert!(result["sandbox"].as_str().is_some_and(|s| s.contains("sandbox stopped it")), "{result}");
                refused += 1;
            }
        }
    }
    println!(
        "{mode}: {} reads and searches of secrets, {refused} refused by the sandbox, none showed one",
        calls.len()
    );
    assert!(refused >= STORES.len() * 2 + 6, "{refused}");
    world.untouched();
}

#[tokio::test(flavor = "multi_thread")]
async fn credential_stores_are_unreadable_by_the_file_tools_in_auto_mode() {
    reads_are_refused_in("auto").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn credential_stores_are_unreadable_by_the_file_tools_in_prompt_mode() {
    reads_are_refused_in("prompt").await;
}

/// Writes that lead outside the roots, or into protected files, by every route; and the
/// commands outside the sandbox. Unattended (no `--yes`), asking means "denied".
async fn writes_and_outside_commands_ask_in(mode: &str) {
    let world = World::new(mode);
    let work = world.talaria.work();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git").args(args).current_dir(&work).output().unwrap().status.success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    let pwned = world.home.join("pwned");
    git(&["config", "core.fsmonitor", &format!("touch {}", pwned.display())]);
    let chain41 = format!("{}h/.bashrc", "a/".repeat(41));
    let chain39 = format!("{}h/.bashrc", "a/".repeat(39));
    let edit = |path: &str| json!({ "path": path, "old_string": "rc", "new_string": "pwned rc" });
    let calls: Vec<(&str, Value)> = vec![
        ("write_file", json!({ "path": chain41, "content": "pwned\n" })),
        ("write_file", json!({ "path": chain39, "content": "pwned\n" })),
        ("edit_file", edit(&chain41)),
        ("edit_file", edit(&chain39)),
        ("write_file", json!({ "path": "dangling.txt", "content": "planted\n" })),
        ("write_file", json!({ "path": "h/.bashrc", "content": "pwned\n" })),
        ("edit_file", edit("h/.bashrc")),
        ("write_file", json!({ "path": "h/.ssh/authorized_keys", "content": "ssh-ed25519 AAAA\n" })),
        ("write_file", json!({ "path": "settings.toml", "content": "[approvals]\nmode = \"off\"\n" })),
        ("write_file", json!({ "path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n" })),
        ("write_file", json!({ "path": ".git/config", "content": "[core]\n" })),
        ("terminal", json!({ "command": "cd && grep -r SECRET .", "sandbox": false })),
        ("terminal", json!({ "command": "cat ~/.netrc", "sandbox": false })),
        ("terminal", json!({ "command": "git status", "sandbox": false })),
        ("terminal", json!({ "command": "sort -S 1 --com=sh notes.txt", "sandbox": false })),
        ("terminal", json!({ "command": "ls", "sandbox": false })),
        // Inside the roots a write just happens.
        ("write_file", json!({ "path": "made/inside.txt", "content": "fine\n" })),
    ];
    let results = world.run(&calls).await;
    let (asked, inside) = results.split_at(results.len() - 1);
    assert_eq!(inside[0]["status"], "ok", "{}", inside[0]);
    assert_eq!(std::fs::read_to_string(work.join("made/inside.txt")).unwrap(), "fine\n");
    for ((tool, args), result) in calls.iter().zip(asked) {
        let text = result.to_string();
        assert!(!text.contains(SECRET), "{mode}: {tool} {args} showed a secret: {text}");
        let error = result["error"].as_str().unwrap_or_default();
        let asked = error.contains("needs approval");
        // The resolver gives up past 40 links; the kernel too (ELOOP) when the helper opens it.
        let too_many_links =
            error.contains("more than 40 symbolic links") || error.contains("Too many levels of symbolic links");
        assert!(asked || too_many_links, "{mode}: {tool} {args} neither asked nor was refused: {result}");
        if *tool == "terminal" {
            assert!(error.contains("full rights"), "{mode}: {args}: {result}");
        }
    }
    println!("{mode}: {} writes and outside commands, each asked or refused", asked.len());
    world.untouched();
    assert!(!world.home.join("planted.txt").exists() && !pwned.exists());
    assert!(!work.join(".git/hooks/pre-commit").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_outside_the_roots_and_outside_commands_ask_in_auto_mode() {
    writes_and_outside_commands_ask_in("auto").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_outside_the_roots_and_outside_commands_ask_in_prompt_mode() {
    writes_and_outside_commands_ask_in("prompt").await;
}

/// A directory swapped for a link to the home (and back) as fast as the kernel allows,
/// while `write_file` writes beneath it 200 times: each write lands in the workspace, is
/// stopped by the sandbox, or asks — none reaches the home.
#[tokio::test(flavor = "multi_thread")]
async fn a_directory_swapped_for_a_link_never_lets_a_write_out() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use talaria::engine::approval::{Approver, PromptPolicy};
    use talaria::engine::tools::files::write_file_at;
    use tokio_util::sync::CancellationToken;

    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (home, work) = (base.join("home"), base.join("work"));
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(work.join("d")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), SECRET).unwrap();
    std::os::unix::fs::symlink(&home, work.join("alt")).unwrap();
    let paths = talaria::paths::Paths::under(&base.join("talaria"));
    let mut policy = talaria::engine::sandbox::Policy::from_config(
        &talaria::config::SandboxConfig::default(),
        &work,
        &paths,
        Some(&home),
    );
    policy.writable_roots = vec![work.clone()];
    assert!(
        matches!(talaria::engine::sandbox::support(), talaria::engine::sandbox::Support::Available { .. }),
        "this test needs the kernel sandbox (Landlock)"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, work) = (stop.clone(), work.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &work.join("d"),
                    nix::fcntl::AT_FDCWD,
                    &work.join("alt"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    for mode in ["auto", "prompt"] {
        let mut config = talaria::config::Config::default();
        config.approvals.mode =
            if mode == "auto" { talaria::config::ApprovalMode::Auto } else { talaria::config::ApprovalMode::Prompt };
        let (events, _rx) = talaria::engine::EventSink::channel();
        let approvals = Approver::new(&config, PromptPolicy::DenyUnattended, None, events);
        approvals.set_sandbox_policy(policy.clone());
        let (mut written, mut stopped, mut asked) = (0, 0, 0);
        for i in 0..200 {
            let r =
                write_file_at(&work.join(format!("d/x{i}.txt")), "x\n", &approvals, &CancellationToken::new()).await;
            let error = r.value["error"].as_str().unwrap_or_default().to_string();
            match () {
                _ if r.ok => written += 1,
                _ if error.contains("the sandbox stopped it") || error.contains("No such file") => stopped += 1,
                _ if error.contains("needs approval") => asked += 1,
                _ => panic!("{mode} try {i}: {:?}", r.value),
            }
        }
        println!("{mode}: 200 writes during the swap loop: {written} written inside, {stopped} stopped, {asked} asked");
        let outside: Vec<_> = std::fs::read_dir(&home).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(outside, vec![std::ffi::OsString::from(".ssh")], "{mode}: a write reached the home");
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 200, "the swapper ran {swaps} times");
}

/// An approved write outside the roots is done beneath the approved directory with
/// `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)`: missing directories are made, but a
/// link anywhere on the way — or swapped in for the file — makes it fail, never follow.
#[test]
fn an_approved_write_outside_the_roots_follows_no_link() {
    use talaria::engine::tools::fs_helper::write_beneath;
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (real, target) = (base.join("real"), base.join("target"));
    std::fs::create_dir_all(&real).unwrap();
    assert!(write_beneath(&base.join("new/sub/f.txt"), b"made\n").unwrap(), "created");
    assert_eq!(std::fs::read_to_string(base.join("new/sub/f.txt")).unwrap(), "made\n");
    assert!(!write_beneath(&base.join("new/sub/f.txt"), b"again\n").unwrap(), "replaced, not created");
    std::os::unix::fs::symlink(&real, base.join("link")).unwrap();
    std::os::unix::fs::symlink(&target, real.join("planted")).unwrap();
    for through in [base.join("link/f.txt"), base.join("link/deeper/f.txt"), real.join("planted")] {
        let e = write_beneath(&through, b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{}: {e}", through.display());
    }
    assert!(!target.exists() && !real.join("f.txt").exists() && !real.join("deeper").exists());
}
