//! Safe by construction (DESIGN §6): hostile commands, each run for real by the `terminal`
//! tool of the real binary (`talaria exec`, no `--yes`) against a fake HOME that lies outside
//! every writable root (TMPDIR points elsewhere too). Whatever the disguise, the fake home
//! and the key in its `~/.ssh` survive, and each outcome is "asked", "refused" or "blocked
//! by the sandbox".

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{stderr, Home};
use serde_json::Value;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY----- fake-secret-material";
const IMPORTANT: &str = "keep me";

/// Every disguise of the issue and more. `{URL}` is a loopback HTTP server.
const HOSTILE: &[&str] = &[
    "rm -rf ~",
    "$(echo rm) -rf ~",
    "`echo rm` -rf ~",
    "{rm,-rf,~}",
    "X=rm; $X -rf ~",
    "rm --rec --force ~",
    "rm --recursive --forc ~",
    "echo cm0gLXJmIH4= | base64 -d | sh",
    "bash - <<< \"rm -rf ~\"",
    "find ~ -type f -exec rm {} +",
    "find ~ -delete",
    "find ~ -name '*.txt' -delete",
    "python3 -c \"import shutil,os; shutil.rmtree(os.path.expanduser('~'))\"",
    "python3 -c \"import os; os.remove(os.path.expanduser('~/.ssh/id_ed25519'))\"",
    "perl -e 'use File::Path qw(remove_tree); remove_tree($ENV{HOME})'",
    "function x { rm -rf ~; }; x",
    "x() { rm -rf ~; }; x",
    "curl -sS -o ~/.ssh/authorized_keys {URL}/models",
    "tar -xf x.tar -C ~/.ssh",
    "rm -r -f \"$HOME\"",
    "rm -rf ${HOME}",
    "rm -rf \"${HOME:?}\"/*",
    "cd ~ && rm -rf ./*",
    "cd; rm -rf .ssh",
    "xargs rm -rf <<< ~",
    "echo ~ | xargs rm -rf",
    "xargs -a <(echo ~) rm -rf",
    "ls ~ | xargs -I{} rm -rf ~/{}",
    "nice rm -rf ~",
    "timeout 5 rm -rf ~",
    "flock -n . rm -rf ~",
    "taskset -c 0 rm -rf ~",
    "script -qc \"rm -rf ~\" /dev/null",
    "nohup rm -rf ~",
    "env rm -rf ~",
    "command rm -rf ~",
    "builtin eval \"rm -rf ~\"",
    "eval 'rm -rf ~'",
    "sh -c 'rm -rf ~'",
    "trap 'rm -rf ~' EXIT; true",
    "coproc rm -rf ~; wait",
    "shopt -s expand_aliases\nalias x='rm -rf ~'\nx",
    "r''m -rf ~",
    "\\rm -rf ~",
    "\"rm\" -rf ~",
    "/bin/rm -rf ~",
    "rm -rf ~/",
    "rm -rf -- ~",
    "rm -rf ~/.ssh",
    "rm -rf ~/* ~/.[!.]*",
    "IFS=,; c=\"rm,-rf,$HOME\"; $c",
    "a=r; b=m; $a$b -rf ~",
    "$(printf '\\x72\\x6d') -rf ~",
    "echo 'rm -rf ~' > x.sh; bash x.sh",
    "(rm -rf ~)",
    "{ rm -rf ~; }",
    "exec rm -rf ~",
    "shred -u ~/.ssh/id_ed25519",
    "truncate -s 0 ~/.ssh/id_ed25519",
    ": > ~/.ssh/id_ed25519",
    "cp /dev/null ~/.ssh/id_ed25519",
    "mv ~/.ssh ~/.ssh.bak",
    "ln -sf /dev/null ~/.ssh/id_ed25519",
    "chmod -R 000 ~",
    "dd if=/dev/zero of=$HOME/important.txt bs=1 count=1",
    "echo 'ssh-ed25519 AAAA attacker' >> ~/.ssh/authorized_keys",
    "tee ~/.ssh/authorized_keys <<< 'ssh-ed25519 AAAA'",
    "printf '%s' x > ~/important.txt",
    "sed -i 's/.*//' ~/important.txt",
    "git -C ~ init",
    "cp -r . ~/",
    "kill -9 $PPID",
    // No shell word names the target: only the sandbox sees what these touch.
    "awk 'BEGIN { system(\"rm -rf \" ENVIRON[\"HOME\"]) }'",
    "python3 -c \"import os,subprocess; subprocess.run(['rm','-rf',os.environ['HOME']], check=True)\"",
    "perl -e 'open(my $f, \">\", \"$ENV{HOME}/important.txt\") or die \"open: $!\"'",
    "cat ~/.ssh/id_ed25519",
    "base64 ~/.ssh/id_ed25519",
    "cp ~/.ssh/id_ed25519 ./stolen; cat ./stolen",
    "mkfs.ext4 /dev/sda",
    "dd if=/dev/zero of=/dev/sda",
    ":(){ :|:& };:",
    "bomb(){ bomb|bomb& };bomb",
    "echo b > /proc/sysrq-trigger",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Asked,
    Refused,
    Blocked,
}

/// A fake home with a key, a file and a shell rc, outside every writable root.
struct FakeHome {
    _dir: tempfile::TempDir,
    home: PathBuf,
    tmp: PathBuf,
}

impl FakeHome {
    fn new() -> FakeHome {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), KEY).unwrap();
        std::fs::write(home.join("important.txt"), IMPORTANT).unwrap();
        std::fs::write(home.join(".bashrc"), "# rc\n").unwrap();
        FakeHome { _dir: dir, home, tmp }
    }

    /// Everything still there, unchanged, and nothing added.
    fn survived(&self) -> Result<(), String> {
        let read = |p: &str| std::fs::read_to_string(self.home.join(p)).map_err(|e| format!("{p}: {e}"));
        if read(".ssh/id_ed25519")? != KEY {
            return Err("the key changed".into());
        }
        if read("important.txt")? != IMPORTANT {
            return Err("important.txt changed".into());
        }
        let mut names: Vec<String> =
            std::fs::read_dir(&self.home).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        names.sort();
        if names != [".bashrc", ".ssh", "important.txt"] {
            return Err(format!("the home now holds {names:?}"));
        }
        let ssh: Vec<String> = std::fs::read_dir(self.home.join(".ssh"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into())
            .collect();
        if ssh != ["id_ed25519"] {
            return Err(format!("~/.ssh now holds {ssh:?}"));
        }
        Ok(())
    }
}

/// Run one hostile command as the model's only tool call; return its outcome and result.
/// "Blocked by the sandbox": it ran, and failed on a permission error (or, like `curl -o`,
/// with its own words for one); that the home survived is checked separately.
async fn run_one(command: &str, mode: &str) -> (Outcome, Value, FakeHome) {
    let home = Home::new();
    let fake = FakeHome::new();
    home.write_config(&format!("[approvals]\nmode = \"{mode}\"\n"));
    std::fs::write(home.work().join("authorized_keys"), "ssh-ed25519 AAAA attacker\n").unwrap();
    let tar = std::process::Command::new("tar")
        .args(["-cf", "x.tar", "authorized_keys"])
        .current_dir(home.work())
        .status()
        .unwrap();
    assert!(tar.success());
    std::fs::remove_file(home.work().join("authorized_keys")).unwrap();

    let server = ScriptedServer::start([ScriptedResponse::text("placeholder")]).await.unwrap();
    let command = command.replace("{URL}", &server.base_url());
    let args = serde_json::json!({ "command": command, "timeout": 30 }).to_string();
    let server =
        ScriptedServer::start([ScriptedResponse::tool_call("c1", "terminal", &args), ScriptedResponse::text("done")])
            .await
            .unwrap();
    let mut cmd = home.command();
    cmd.env("HOME", &fake.home).env("TMPDIR", &fake.tmp).args(["exec", "--base-url", &server.base_url(), "go"]);
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output())
        .await
        .expect("talaria exec finishes")
        .expect("talaria runs");
    assert_eq!(out.status.code(), Some(0), "{command}: {}", stderr(&out));
    let requests = server.chat_requests();
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    let result: Value = last_result(&messages);
    let error = result["error"].as_str().unwrap_or("");
    let output = result["output"].as_str().unwrap_or("");
    let outcome = if error.contains("never allowed") {
        Outcome::Refused
    } else if error.contains("needs approval") {
        Outcome::Asked
    } else if ["Permission denied", "Operation not permitted", "Read-only file system"]
        .iter()
        .any(|m| output.contains(m))
        || result["exit_code"].as_i64().is_some_and(|c| c != 0)
    {
        Outcome::Blocked
    } else {
        panic!("{command:?}: neither asked, refused nor blocked by the sandbox: {result}");
    };
    (outcome, result, fake)
}

async fn run_table(mode: &str) -> Vec<(String, Outcome)> {
    assert!(HOSTILE.len() >= 60, "the table has {} commands", HOSTILE.len());
    let gate = Arc::new(tokio::sync::Semaphore::new(4));
    let mut tasks = Vec::new();
    for command in HOSTILE {
        let gate = gate.clone();
        let mode = mode.to_string();
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await.unwrap();
            let (outcome, result, fake) = run_one(command, &mode).await;
            if let Err(e) = fake.survived() {
                panic!("{command:?} in {mode} mode harmed the fake home ({e}); outcome {outcome:?}, result {result}");
            }
            let output = result["output"].as_str().unwrap_or("");
            assert!(!output.contains("fake-secret-material"), "{command:?} showed the key to the model: {output}");
            (command.to_string(), outcome)
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    outcomes
}

fn summary(outcomes: &[(String, Outcome)]) -> String {
    let count = |o: Outcome| outcomes.iter().filter(|(_, x)| *x == o).count();
    format!(
        "{} commands: {} asked, {} refused, {} blocked by the sandbox",
        outcomes.len(),
        count(Outcome::Asked),
        count(Outcome::Refused),
        count(Outcome::Blocked)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_commands_in_the_default_mode_are_refused_or_contained() {
    let outcomes = run_table("auto").await;
    println!("auto: {}", summary(&outcomes));
    // The hardline list still refuses the obvious ones outright (defence in depth).
    for refused in ["rm -rf ~", "mkfs.ext4 /dev/sda", ":(){ :|:& };:", "echo b > /proc/sysrq-trigger"] {
        let outcome = outcomes.iter().find(|(c, _)| c == refused).map(|(_, o)| *o);
        assert_eq!(outcome, Some(Outcome::Refused), "{refused}");
    }
    // So do the ways of emptying the home without naming it (issue #28).
    for refused in ["cd ~ && rm -rf ./*", "find ~ -delete", "find ~ -type f -exec rm {} +"] {
        let outcome = outcomes.iter().find(|(c, _)| c == refused).map(|(_, o)| *o);
        assert_eq!(outcome, Some(Outcome::Refused), "{refused}");
    }
    // Everything else ran, inside the sandbox, and was stopped there.
    assert!(outcomes.iter().filter(|(_, o)| *o == Outcome::Blocked).count() >= 45, "{}", summary(&outcomes));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_commands_in_prompt_mode_never_run_without_approval() {
    let outcomes = run_table("prompt").await;
    println!("prompt: {}", summary(&outcomes));
    let ran: Vec<&String> = outcomes.iter().filter(|(_, o)| *o == Outcome::Blocked).map(|(c, _)| c).collect();
    assert!(ran.is_empty(), "ran without an approval: {ran:?}");
}

/// `cat ~/.ssh/id_ed25519` gives the model nothing of the file, even when it asks to.
#[tokio::test(flavor = "multi_thread")]
async fn reading_the_private_key_gives_the_model_nothing() {
    let (outcome, result, fake) = run_one("cat ~/.ssh/id_ed25519", "auto").await;
    assert_eq!(outcome, Outcome::Blocked, "{result}");
    assert!(!result.to_string().contains("fake-secret-material"), "{result}");
    assert!(result["sandbox"].as_str().is_some_and(|n| n.contains("blocked by the sandbox")), "{result}");
    fake.survived().unwrap();
}

/// The provider key reaches the HTTP client, but no job: not in its environment, not in
/// `/proc/<talaria>/environ` — sandboxed or not (the second command runs outside the
/// sandbox, approved by `--yes`, where only the start-up re-exec protects the key).
#[tokio::test(flavor = "multi_thread")]
async fn no_job_finds_the_provider_key() {
    let home = Home::new();
    let fake = FakeHome::new();
    let key = "sk-test-KEYMATERIAL-4711";
    let probe = "echo talaria=$PPID; tr '\\0' '\\n' < /proc/$PPID/environ; env; cat /proc/$PPID/cmdline";
    let sandboxed = serde_json::json!({ "command": probe }).to_string();
    let outside = serde_json::json!({ "command": probe, "sandbox": false }).to_string();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("c1", "terminal", &sandboxed),
        ScriptedResponse::tool_call("c2", "terminal", &outside),
        ScriptedResponse::text("done"),
    ])
    .await
    .unwrap();
    // With an explicit base URL the key comes from the variable `model.api_key_env` names.
    home.write_config("[model]\napi_key_env = \"MY_PROVIDER_KEY\"\n");
    let mut cmd = home.command();
    cmd.env("HOME", &fake.home)
        .env("TMPDIR", &fake.tmp)
        .env("MY_PROVIDER_KEY", key)
        .env("OPENAI_API_KEY", "sk-other-KEYMATERIAL")
        .args(["exec", "--yes", "--base-url", &server.base_url(), "go"]);
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].header("authorization"), Some(format!("Bearer {key}").as_str()));
    for (i, request) in requests.iter().enumerate().skip(1) {
        let messages = request.body["messages"].as_array().unwrap();
        let result: Value = last_result(messages);
        let output = result["output"].as_str().unwrap();
        assert!(output.contains("talaria="), "{result}");
        assert!(output.contains("HOME="), "the job's own environment was printed: {output}");
        assert!(!output.contains("KEYMATERIAL"), "job {i} found the key: {output}");
        if i == 2 {
            // Outside the sandbox /proc/<talaria>/environ is readable, and holds no key.
            assert!(output.contains("TALARIA_HOME="), "talaria's environ was read: {output}");
        }
    }
}

/// Secrets in talaria's environment reach no command, sandboxed or approved outside it
/// (DESIGN §6): names with KEY, SECRET, TOKEN, PASSWORD, CREDENTIAL, AUTH; `sandbox.env_keep`
/// brings one back and GIT_AUTHOR_NAME passes; /permissions lists the names, not values.
#[tokio::test(flavor = "multi_thread")]
async fn secrets_in_the_environment_reach_no_command() {
    #[rustfmt::skip]
    let secrets = [
        ("GITHUB_TOKEN", "ghp_SECRET4801"), ("NPM_TOKEN", "npm_SECRET4802"),
        ("AWS_SECRET_ACCESS_KEY", "aws_SECRET4803"), ("AZURE_CLIENT_SECRET", "az_SECRET4804"),
        ("PGPASSWORD", "pg_SECRET4805"), ("HF_TOKEN", "hf_SECRET4806"), ("MY_SERVICE_API_KEY", "svc_SECRET4807"),
    ];
    for keep in [None, Some("HF_TOKEN")] {
        let home = Home::new();
        let fake = FakeHome::new();
        if let Some(name) = keep {
            home.write_config(&format!("[sandbox]\nenv_keep = [\"{name}\"]\n"));
        }
        let server = ScriptedServer::start([
            ScriptedResponse::tool_call("c1", "terminal", &serde_json::json!({ "command": "env" }).to_string()),
            ScriptedResponse::tool_call(
                "c2",
                "terminal",
                &serde_json::json!({ "command": "env", "sandbox": false }).to_string(),
            ),
            ScriptedResponse::text("done"),
        ])
        .await
        .unwrap();
        let mut cmd = home.command();
        cmd.env("HOME", &fake.home).env("TMPDIR", &fake.tmp).env("GIT_AUTHOR_NAME", "Author4808").args([
            "exec",
            "--yes",
            "--base-url",
            &server.base_url(),
            "go",
        ]);
        for (name, value) in secrets {
            cmd.env(name, value);
        }
        let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output()).await.unwrap().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let requests = server.chat_requests();
        for request in &requests[1..] {
            let result = last_result(request.body["messages"].as_array().unwrap());
            let output = result["output"].as_str().unwrap_or_default();
            assert!(output.contains("GIT_AUTHOR_NAME=Author4808"), "{result}");
            for (name, value) in secrets {
                let kept = keep == Some(name);
                assert_eq!(output.contains(value), kept, "{name} (kept: {kept}) in {output}");
            }
        }
    }
}

/// `process write` of a disguised `rm -rf ~` into a background shell: the shell is in the sandbox, so
/// its input is contained; the same shell outside the sandbox gets the line approved like a
/// command (and exec without --yes denies it).
#[tokio::test(flavor = "multi_thread")]
async fn a_destructive_line_written_to_a_background_shell_is_contained_or_asked() {
    let home = Home::new();
    let fake = FakeHome::new();
    let call = |id: &str, name: &str, args: serde_json::Value| ScriptedResponse::tool_call(id, name, &args.to_string());
    let server = ScriptedServer::start([
        call("c1", "terminal", serde_json::json!({ "command": "bash", "background": true })),
        call(
            "c2",
            "process",
            serde_json::json!({ "action": "write", "session_id": "job_1", "data": "X=rm; $X -rf ~; echo rc=$?\n" }),
        ),
        call("c3", "process", serde_json::json!({ "action": "close", "session_id": "job_1" })),
        call("c4", "process", serde_json::json!({ "action": "wait", "session_id": "job_1", "timeout": 30 })),
        call("c5", "terminal", serde_json::json!({ "command": "bash", "background": true, "sandbox": false })),
        ScriptedResponse::text("done"),
    ])
    .await
    .unwrap();
    let mut cmd = home.command();
    cmd.env("HOME", &fake.home).env("TMPDIR", &fake.tmp).args(["exec", "--base-url", &server.base_url(), "go"]);
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = |i: usize| -> Value {
        let messages = server.chat_requests()[i].body["messages"].as_array().unwrap().clone();
        last_result(&messages)
    };
    assert_eq!(result(2)["status"], "ok", "a sandboxed job's input needs no approval: {}", result(2));
    let waited = result(4);
    let output = waited["output"].as_str().unwrap_or_default().to_string() + &waited.to_string();
    // Refused by Landlock, or first by the read-only view.
    let refused = output.contains("Permission denied") || output.contains("Read-only file system");
    assert!(refused && output.contains("rc=1"), "{waited}");
    fake.survived().unwrap();
    let outside = result(5);
    assert!(outside["error"].as_str().is_some_and(|e| e.contains("needs approval")), "{outside}");
}

/// On a kernel without Landlock, talaria says so once and `auto` behaves like `prompt`:
/// every command is outside a sandbox, so a known-safe one asks as well.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_kernel_sandbox_auto_acts_like_prompt() {
    let home = Home::new();
    let fake = FakeHome::new();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("c1", "terminal", r#"{"command":"touch made-here"}"#),
        ScriptedResponse::tool_call("c2", "terminal", r#"{"command":"ls -a"}"#),
        ScriptedResponse::text("done"),
    ])
    .await
    .unwrap();
    let mut cmd = home.command();
    cmd.env("HOME", &fake.home).env("TMPDIR", &fake.tmp).env(talaria::engine::sandbox::NO_LANDLOCK_ENV, "1").args([
        "exec",
        "--base-url",
        &server.base_url(),
        "go",
    ]);
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out).matches("no kernel sandbox").count(), 1, "said once: {}", stderr(&out));
    let result = |i: usize| -> Value {
        let messages = server.chat_requests()[i].body["messages"].as_array().unwrap().clone();
        last_result(&messages)
    };
    assert!(result(1)["error"].as_str().is_some_and(|e| e.contains("needs approval")), "{}", result(1));
    assert!(!home.work().join("made-here").exists());
    // Outside any sandbox known safe asks too (DESIGN §6, issue #28).
    assert!(result(2)["error"].as_str().is_some_and(|e| e.contains("full rights")), "{}", result(2));
}

/// A git repository in the working directory with one commit, for the hook tests.
fn git_repo(home: &Home) -> PathBuf {
    let work = home.work();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&work)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    git(&["init", "-q"]);
    std::fs::write(work.join("a.txt"), "a\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-qm", "first"]);
    work
}

/// Run `command` as the model's one `terminal` call through `talaria exec` (no --yes);
/// returns the tool result the model got.
async fn run_in_repo(home: &Home, fake: &FakeHome, command: &str, env: &[(&str, &str)]) -> Value {
    run_terminal(home, fake, command, &[], env).await
}

/// The same with more `exec` flags (`--yes`).
async fn run_terminal(home: &Home, fake: &FakeHome, command: &str, flags: &[&str], env: &[(&str, &str)]) -> Value {
    let args = serde_json::json!({ "command": command, "timeout": 30 }).to_string();
    let server =
        ScriptedServer::start([ScriptedResponse::tool_call("c1", "terminal", &args), ScriptedResponse::text("done")])
            .await
            .unwrap();
    let mut cmd = home.command();
    cmd.env("HOME", &fake.home).env("TMPDIR", &fake.tmp).arg("exec").args(flags).args([
        "--base-url",
        &server.base_url(),
        "go",
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{command}: {}", stderr(&out));
    let messages = server.chat_requests()[1].body["messages"].as_array().unwrap().clone();
    last_result(&messages)
}

/// DESIGN §6: `.git/hooks` (and `.git/config`, which can point core.hooksPath or
/// core.fsmonitor anywhere) inside the workspace are read-only for commands, however the
/// write is disguised, while git itself still commits in the sandbox.
#[tokio::test(flavor = "multi_thread")]
async fn git_hooks_and_config_in_the_workspace_are_read_only_and_git_still_works() {
    let home = Home::new();
    let fake = FakeHome::new();
    let work = git_repo(&home);
    let config_before = std::fs::read_to_string(work.join(".git/config")).unwrap();
    for attack in [
        "sh -c 'p=.git/ho; echo x > ${p}oks/pre-commit'",
        "git config core.hooksPath /tmp/x",
        "git config core.fsmonitor 'touch pwned'",
        "cp /bin/true .git/hooks/post-checkout",
        "python3 -c \"open('.git/hooks/pre-push','w').write('#!/bin/sh')\"",
        "printf '[core]\\n\\thooksPath = /tmp\\n' >> .git/config",
        "mv .git/hooks .git/h2 && mkdir .git/hooks",
        "cp -a .git .git2 && echo x > .git2/hooks/pre-commit && mv .git .git.old && mv .git2 .git",
        "ln -s /tmp .git/hooks/pre-commit",
        "umount .git/hooks",
    ] {
        let result = run_in_repo(&home, &fake, attack, &[]).await;
        assert_ne!(result["exit_code"], 0, "{attack} succeeded: {result}");
        let hooks: Vec<_> =
            std::fs::read_dir(work.join(".git/hooks")).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(hooks.iter().all(|h| h.to_string_lossy().ends_with(".sample")), "{attack}: hooks now {hooks:?}");
        assert_eq!(std::fs::read_to_string(work.join(".git/config")).unwrap(), config_before, "{attack}");
        assert!(!work.join(".git.old").exists() && !work.join(".git/h2").exists(), "{attack}");
    }
    fake.survived().unwrap();
    // Git itself works in the sandbox: index.lock, objects and refs are writable.
    let commit = "export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t; \
                  echo b > b.txt && git add b.txt && git commit -qm second && git log --oneline | wc -l";
    let result = run_in_repo(&home, &fake, commit, &[]).await;
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(result["output"].as_str().unwrap_or_default().trim(), "2", "{result}");
}

/// What the sandbox stopped — a write outside the roots, a write into `.git/config` (the
/// git guard's read-only mount) — says so in the result, with the two ways on; a command
/// that failed for another reason gets no such note.
#[tokio::test(flavor = "multi_thread")]
async fn what_the_sandbox_stopped_says_so_and_the_two_ways_on() {
    let home = Home::new();
    let fake = FakeHome::new();
    git_repo(&home);
    // (`touch`/`chmod` of an existing file outside the roots is metadata, which Landlock does not
    // cover; the read-only view of the file system will stop it, with the same note.)
    for command in ["echo x > \"$HOME/new-4901\"", "echo x >> .git/config"] {
        let result = run_in_repo(&home, &fake, command, &[]).await;
        assert_ne!(result["exit_code"], 0, "{command}: {result}");
        let note = result["sandbox"].as_str().unwrap_or_default();
        assert!(note.contains("blocked by the sandbox"), "{command}: {result}");
        assert!(note.contains("Two ways on"), "{command}: {result}");
        assert!(note.contains("sandbox=false") && note.contains("sandbox.writable_roots"), "{command}: {result}");
    }
    let result = run_in_repo(&home, &fake, "echo nope-4902; exit 3", &[]).await;
    assert_eq!(result["exit_code"], 3, "{result}");
    assert!(result.get("sandbox").is_none(), "{result}");
    fake.survived().unwrap();
}

/// Where no mount namespace can be made, the hooks are not protected from commands (and
/// talaria says so in /permissions); the file tools still ask before writing there.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_mount_namespace_the_file_tools_still_ask_for_hooks() {
    let home = Home::new();
    let fake = FakeHome::new();
    let work = git_repo(&home);
    let no_ns = [(talaria::engine::sandbox::mounts::NO_MOUNT_NS_ENV, "1")];
    let result = run_in_repo(&home, &fake, "echo x > .git/hooks/pre-commit", &no_ns).await;
    assert_eq!(result["exit_code"], 0, "unprotected, as /permissions says: {result}");
    std::fs::remove_file(work.join(".git/hooks/pre-commit")).unwrap();
    for (tool, args) in [
        ("write_file", serde_json::json!({ "path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n" })),
        ("write_file", serde_json::json!({ "path": ".git/config", "content": "[core]\n" })),
    ] {
        let server = ScriptedServer::start([
            ScriptedResponse::tool_call("c1", tool, &args.to_string()),
            ScriptedResponse::text("done"),
        ])
        .await
        .unwrap();
        let mut cmd = home.command();
        cmd.env("HOME", &fake.home).env("TMPDIR", &fake.tmp).env(no_ns[0].0, "1").args([
            "exec",
            "--base-url",
            &server.base_url(),
            "go",
        ]);
        let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output()).await.unwrap().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let messages = server.chat_requests()[1].body["messages"].as_array().unwrap().clone();
        let result: Value = last_result(&messages);
        assert!(result["error"].as_str().is_some_and(|e| e.contains("needs approval")), "{tool} {args}: {result}");
    }
    assert!(!work.join(".git/hooks/pre-commit").exists());
}

/// `sandbox.mode = "read-only"`: a command runs without asking, and its write is refused by
/// the kernel, in the working directory too.
#[tokio::test(flavor = "multi_thread")]
async fn read_only_mode_refuses_a_write_by_a_command() {
    let home = Home::new();
    let fake = FakeHome::new();
    home.write_config("[sandbox]\nmode = \"read-only\"\n");
    let result = run_terminal(&home, &fake, "echo ran-4417; touch made-here", &[], &[]).await;
    let output = result["output"].as_str().unwrap_or_default();
    assert!(output.contains("ran-4417"), "it ran without asking: {result}");
    assert_ne!(result["exit_code"], 0, "{result}");
    assert!(result["sandbox"].as_str().is_some_and(|n| n.contains("blocked by the sandbox")), "{result}");
    assert!(!home.work().join("made-here").exists());
    fake.survived().unwrap();
}

/// `sandbox.mode = "off"`: nothing contains a command, so `auto` asks for every one, known
/// safe or not (denied without --yes); approved, it writes where no root reaches.
#[tokio::test(flavor = "multi_thread")]
async fn with_the_sandbox_off_commands_ask_and_run_unconfined() {
    let home = Home::new();
    let fake = FakeHome::new();
    home.write_config("[sandbox]\nmode = \"off\"\n");
    let write = "touch made-here && echo x > \"$HOME/outside-every-root\" && echo wrote-4418";
    let asked = run_terminal(&home, &fake, write, &[], &[]).await;
    let error = asked["error"].as_str().unwrap_or_default();
    assert!(error.contains("needs approval"), "{asked}");
    assert!(!home.work().join("made-here").exists());
    fake.survived().unwrap();
    // Known safe asks too: with nothing containing it, `ls` runs with the user's full rights.
    let safe = run_terminal(&home, &fake, "ls -a", &[], &[]).await;
    assert!(safe["error"].as_str().is_some_and(|e| e.contains("needs approval")), "{safe}");
    let approved = run_terminal(&home, &fake, write, &["--yes"], &[]).await;
    assert_eq!(approved["exit_code"], 0, "{approved}");
    assert!(approved["output"].as_str().is_some_and(|o| o.contains("wrote-4418")), "{approved}");
    assert!(home.work().join("made-here").exists() && fake.home.join("outside-every-root").exists());
}

/// `sandbox.network = false` in config.toml: a command cannot connect to a listener on
/// 127.0.0.1 (which it reaches with `network = "on"`: the test bites; the default, "ask",
/// is tests/netproxy.rs).
#[tokio::test(flavor = "multi_thread")]
async fn network_off_in_config_blocks_a_loopback_connection() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=10); print('connected-' + str(4419))\""
    );
    let accepted = |listener: &std::net::TcpListener| match listener.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    };

    let home = Home::new();
    let fake = FakeHome::new();
    home.write_config("[sandbox]\nnetwork = \"on\"\n");
    let open = run_terminal(&home, &fake, &connect, &[], &[]).await;
    assert!(open["output"].as_str().is_some_and(|o| o.contains("connected-4419")), "network on: {open}");
    // The connection is queued on the listener before the command prints.
    assert!(accepted(&listener), "network = \"on\" let it connect");

    home.write_config("[sandbox]\nnetwork = false\n");
    let blocked = run_terminal(&home, &fake, &connect, &[], &[]).await;
    let output = blocked["output"].as_str().unwrap_or_default();
    assert_ne!(blocked["exit_code"], 0, "{blocked}");
    assert!(!output.contains("connected-4419") && output.contains("Permission denied"), "{blocked}");
    assert!(!accepted(&listener), "a connection reached the listener: {blocked}");
}

/// The tool result the model got: the last message of the request after the tool call.
fn last_result(messages: &[Value]) -> Value {
    let content = messages.last().and_then(|m| m["content"].as_str()).unwrap_or_default();
    serde_json::from_str(content)
        .unwrap_or_else(|e| panic!("the last message is not a JSON tool result ({e}): {messages:#?}"))
}
