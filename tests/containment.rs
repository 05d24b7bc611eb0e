//! Talaria's own files are no side door (DESIGN §6a, issue #27): a sandboxed job cannot
//! write another job's spec, exit record, lease or stdin FIFO, cannot make a later command
//! run unsandboxed by rewriting specs, and links it plants in its own job directory change
//! nothing outside and read nothing back. Each command is the model's `terminal` call in the
//! real binary (`talaria exec`, default config, no `--yes`) with a fake HOME and TMPDIR.
//! Run as root and as an unprivileged user (`scripts/test-unprivileged`).

mod common;
#[path = "common/pty.rs"]
mod pty;

use std::path::PathBuf;
use std::time::Duration;

use common::{stderr, Home};
use serde_json::Value;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

/// A fake home with a file to lose and a key to keep secret, and a temp dir.
struct Fake {
    _dir: tempfile::TempDir,
    home: PathBuf,
    tmp: PathBuf,
}

const KEY: &str = "PRIVATE-KEY-3004810";

impl Fake {
    fn new() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(home.join(".bashrc"), "original bashrc\n").unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), KEY).unwrap();
        Fake { _dir: dir, home, tmp }
    }
}

/// Run the scripted calls (`(id, arguments)` of `terminal` calls, then "done"); the tool
/// results the model got, in order.
async fn run(home: &Home, fake: &Fake, calls: &[(String, Value)], flags: &[&str]) -> Vec<Value> {
    let mut responses: Vec<ScriptedResponse> =
        calls.iter().map(|(id, args)| ScriptedResponse::tool_call(id, "terminal", &args.to_string())).collect();
    responses.push(ScriptedResponse::text("done"));
    let server = ScriptedServer::start(responses).await.unwrap();
    let mut cmd = home.command();
    cmd.env("HOME", &fake.home).env("TMPDIR", &fake.tmp).arg("exec").args(flags).args([
        "--base-url",
        &server.base_url(),
        "go",
    ]);
    let out = tokio::time::timeout(Duration::from_secs(300), cmd.output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = server.chat_requests();
    assert_eq!(requests.len(), calls.len() + 1, "talaria stopped early: {}", stderr(&out));
    requests[1..]
        .iter()
        .map(|r| {
            let messages = r.body["messages"].as_array().unwrap();
            let content = messages.last().and_then(|m| m["content"].as_str()).unwrap_or_default();
            serde_json::from_str(content).unwrap_or_else(|e| panic!("not a tool result ({e}): {content}"))
        })
        .collect()
}

/// Kills the process groups of the processes whose command line has this marker.
struct KillOnDrop(&'static str);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(self.0) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

fn output(result: &Value) -> String {
    result["output"].as_str().unwrap_or_default().to_string()
}

fn call(id: &str, command: &str) -> (String, Value) {
    (id.to_string(), serde_json::json!({ "command": command, "timeout": 60 }))
}

/// A background job (reading its stdin) runs; a second command tries to write each of its
/// control files and its stdin FIFO, to read its log and to plant links in its directory.
/// Every attempt fails, and the files are as talaria and the supervisor wrote them.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_cannot_touch_another_jobs_files() {
    let home = Home::new();
    let fake = Fake::new();
    let victim = home.path().join("jobs/job_1");
    let v = victim.display();
    let attack = format!(
        "for f in spec.json exit.json exit.json.tmp owner.json kill index.json leader.json cwd stdin.eof; do \
           (printf forged-3004811 > {v}/$f) 2>/dev/null && echo WROTE $f; done; \
         (printf forged-3004811 > {v}/stdin) 2>/dev/null && echo WROTE stdin; \
         ln -s {h}/.bashrc {v}/out.1.log 2>/dev/null && echo LINKED; \
         mv {v} {v}.gone 2>/dev/null && echo MOVED; \
         cat {v}/out.0.log 2>/dev/null && echo READ-LOG; \
         cat {v}/spec.json >/dev/null 2>&1 && echo READ-SPEC; \
         echo attack-3004811-done",
        h = fake.home.display()
    );
    let background =
        ("c1".to_string(), serde_json::json!({ "command": "echo victim-3004811; cat", "background": true }));
    // The victim is left running (--keep-jobs) so its directory can be read afterwards.
    let results = run(&home, &fake, &[background, call("c2", &attack)], &["--keep-jobs"]).await;
    let _victim = KillOnDrop("victim-3004811");
    let out = output(&results[1]);
    assert!(out.contains("attack-3004811-done"), "{}", results[1]);
    for bad in ["WROTE", "LINKED", "MOVED", "READ-LOG", "READ-SPEC"] {
        assert!(!out.contains(bad), "{bad}: {}", results[1]);
    }
    // The victim's files: nothing forged, its log holds only what it printed itself.
    for entry in std::fs::read_dir(&victim).unwrap().flatten() {
        let meta = std::fs::symlink_metadata(entry.path()).unwrap();
        assert!(!meta.file_type().is_symlink(), "{:?} is a link", entry.path());
        if meta.is_file() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            assert!(!text.contains("forged-3004811"), "{:?}: {text}", entry.path());
        }
    }
    let log = std::fs::read_to_string(victim.join("out.0.log")).unwrap();
    assert!(log.contains("victim-3004811") && !log.contains("forged"), "{log}");
    assert_eq!(std::fs::read_to_string(fake.home.join(".bashrc")).unwrap(), "original bashrc\n");
}

/// A background job rewrites every spec.json it can reach, over and over, to run the next
/// command without a sandbox; meanwhile the model runs 50 commands, each trying to write
/// the home. All 50 run, all 50 inside the sandbox: the home is untouched.
#[tokio::test(flavor = "multi_thread")]
async fn rewriting_specs_never_unsandboxes_a_later_command() {
    let home = Home::new();
    home.write_config("[agent]\nmax_iterations = 100\n");
    let fake = Fake::new();
    let jobs = home.path().join("jobs");
    let forged = r#"{"shell":"sh","login_shell":false,"script":"touch HOME_PATH/forged","cwd":"/","stdin":false,"log_max_bytes":1000000,"orphan_grace_s":5,"kill_grace_s":1,"sandbox":null}"#
        .replace("HOME_PATH", &fake.home.display().to_string());
    std::fs::write(fake.tmp.join("forged.json"), &forged).unwrap();
    let attempts = home.work().join("attempts-3004812");
    let rewriter = format!(
        "while :; do for f in {j}/*/spec.json {j}/*/spec.json.*.tmp; do cp {t}/forged.json \"$f\" 2>/dev/null; done; \
         echo x >> {a}; sleep 0.02; done",
        j = jobs.display(),
        t = fake.tmp.display(),
        a = attempts.display()
    );
    let mut calls = vec![("c0".to_string(), serde_json::json!({ "command": rewriter, "background": true }))];
    for n in 0..50 {
        let cmd = format!("echo ran-3004812-{n}; echo x > {}/escaped-{n}; echo $? >/dev/null", fake.home.display());
        calls.push(call(&format!("c{}", n + 1), &cmd));
    }
    let results = run(&home, &fake, &calls, &[]).await;
    for (n, result) in results[1..].iter().enumerate() {
        assert!(output(result).contains(&format!("ran-3004812-{n}")), "command {n} did not run: {result}");
    }
    assert!(std::fs::read_to_string(&attempts).is_ok_and(|t| t.lines().count() > 1), "the rewriter never ran");
    let escaped: Vec<_> = std::fs::read_dir(&fake.home)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("escaped-") || n == "forged")
        .collect();
    assert!(escaped.is_empty(), "commands ran outside the sandbox: {escaped:?}");
}

/// Links a job plants in its own directory — the next log segment, the exit record's
/// temporary file, the kill file, its cwd file — change nothing outside and read nothing
/// back: the planting fails, the key never comes back as output, `.bashrc` is unchanged
/// and the exit record is the command's own.
#[tokio::test(flavor = "multi_thread")]
async fn links_planted_in_its_own_job_directory_do_nothing() {
    let home = Home::new();
    let fake = Fake::new();
    let own = home.path().join("jobs/job_1");
    let (d, h) = (own.display(), fake.home.display());
    let plant = format!(
        "ln -sf {h}/.bashrc {d}/out.0.log 2>/dev/null && echo PLANTED-LOG; \
         ln -sf {h}/.ssh/id_ed25519 {d}/out.1.log 2>/dev/null && echo PLANTED-SEGMENT; \
         ln -sf {h}/.bashrc {d}/exit.json.tmp 2>/dev/null && echo PLANTED-TMP; \
         ln -sf {h}/.ssh/id_ed25519 {d}/kill 2>/dev/null && echo PLANTED-KILL; \
         rm -f {d}/cwd 2>/dev/null && ln -s {h}/.bashrc {d}/cwd 2>/dev/null && echo PLANTED-CWD; \
         echo PAYLOAD-3004813"
    );
    let results = run(&home, &fake, &[call("c1", &plant)], &[]).await;
    let out = output(&results[0]);
    assert!(out.contains("PAYLOAD-3004813"), "{}", results[0]);
    assert!(!out.contains("PLANTED"), "{}", results[0]);
    assert!(!out.contains(KEY), "the key came back: {}", results[0]);
    assert_eq!(results[0]["exit_code"], 0, "{}", results[0]);
    // The exit record talaria read is the command's own (not killed, code 0).
    assert!(results[0]["error"].is_null(), "{}", results[0]);
    assert_eq!(std::fs::read_to_string(fake.home.join(".bashrc")).unwrap(), "original bashrc\n");
}

/// The cwd file is the one file a job writes in its directory, and talaria reads it as
/// data: `cd` still carries over to the next command; a job writing garbage or a relative
/// path there moves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn the_cwd_file_is_data() {
    let home = Home::new();
    let fake = Fake::new();
    std::fs::create_dir_all(home.work().join("sub-3004814")).unwrap();
    let cwd = home.path().join("jobs/job_2/cwd");
    let results = run(
        &home,
        &fake,
        &[
            call("c1", "cd sub-3004814"),
            call("c2", &format!("pwd; trap - EXIT; printf 'sub-3004814\\n' > {}", cwd.display())),
            call("c3", "pwd"),
        ],
        &[],
    )
    .await;
    assert!(output(&results[1]).contains("/work/sub-3004814"), "{}", results[1]);
    // The second command's trap was dropped and a relative path written: ignored, so the
    // third command runs where the second one did.
    assert!(output(&results[2]).contains("/work/sub-3004814"), "{}", results[2]);
}

/// Outside the writable roots nothing changes, metadata included: `chmod` of the home, the
/// `.ssh` directory and a key, `touch -d`, an xattr, and as root `chown` and `chattr +i`, all
/// fail (Landlock has no right for them; the read-only view stops them). Inside the
/// workspace the same changes work.
#[tokio::test(flavor = "multi_thread")]
async fn metadata_outside_the_roots_cannot_change() {
    let home = Home::new();
    let fake = Fake::new();
    std::fs::write(home.work().join("mine.txt"), "x").unwrap();
    let h = fake.home.display();
    let xattr = |path: &str| format!("/usr/bin/python3 -c \"import os; os.setxattr('{path}', 'user.t', b'1')\"");
    let mut attempts = vec![
        format!("chmod 777 {h}"),
        format!("chmod 777 {h}/.ssh"),
        format!("chmod 644 {h}/.ssh/id_ed25519"),
        format!("touch -d 2000-01-01 {h}/.bashrc"),
        xattr(&format!("{h}/.bashrc")),
    ];
    if nix::unistd::getuid().is_root() {
        attempts.push(format!("chown 65534 {h}/.bashrc"));
        attempts.push(format!("chattr +i {h}/.bashrc"));
    }
    let script: String = attempts
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{a} 2>/dev/null && echo CHANGED-{i}; "))
        .chain([format!(
            "chmod 600 mine.txt && touch -d 2000-01-01 mine.txt && {} && echo INSIDE-OK",
            xattr("mine.txt")
        )])
        .collect();
    let before = |p: &str| std::fs::metadata(fake.home.join(p)).unwrap();
    let (home_mode, bashrc_mtime) = {
        use std::os::unix::fs::MetadataExt;
        (before("").mode(), before(".bashrc").mtime())
    };
    let results = run(&home, &fake, &[call("c1", &script)], &[]).await;
    let out = output(&results[0]);
    assert!(!out.contains("CHANGED"), "{attempts:?}: {}", results[0]);
    assert!(out.contains("INSIDE-OK"), "{}", results[0]);
    use std::os::unix::fs::MetadataExt;
    assert_eq!((before("").mode(), before(".bashrc").mtime()), (home_mode, bashrc_mtime));
}

/// No terminal: with talaria running in a real pty, a command cannot open that pty by its
/// /dev/pts name, nor /dev/tty, nor through talaria's /proc fds — yet a program that needs a
/// terminal gets one of its own (`pty.spawn`).
#[tokio::test(flavor = "multi_thread")]
async fn a_job_cannot_open_talarias_terminal() {
    let home = Home::new();
    let fake = Fake::new();
    let probe = home.work().join("tty-3004815");
    let p = probe.display();
    let command = "T=$(awk '{print $4}' /proc/$PPID/stat); for t in $(readlink /proc/$T/fd/0) /dev/tty /proc/$T/fd/0; do \
           (exec 3<>$t) 2>/dev/null && echo OPENED $t; done; \
         /usr/bin/python3 -c 'import pty; pty.spawn([\"echo\", \"own-pty-3004815\"])' || \
           { ls -la /dev/pts /dev/ptmx; grep -E 'pts|ptmx' /proc/self/mountinfo; /usr/bin/python3 -c 'import os; print(os.openpty())'; }; \
         echo probe-done";
    let args = serde_json::json!({ "command": format!("({command}) > {p}.out 2>&1"), "timeout": 60 }).to_string();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("c1", "terminal", &args),
        ScriptedResponse::text("done-3004815"),
    ])
    .await
    .unwrap();
    let env = [("HOME", fake.home.to_str().unwrap()), ("TMPDIR", fake.tmp.to_str().unwrap())];
    let url = server.base_url();
    let mut pty =
        pty::Pty::spawn_with_env(home.path(), &home.work(), &["exec", "--base-url", &url, "go"], 100, 30, &env);
    let pid = pty.child.process_id().unwrap();
    let terminal = std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap();
    assert!(terminal.starts_with("/dev/pts"), "talaria runs in {terminal:?}");
    let out_file = PathBuf::from(format!("{p}.out"));
    common::wait_until("the probe ran", || std::fs::read_to_string(&out_file).is_ok_and(|t| t.contains("probe-done")))
        .await;
    assert_eq!(pty.wait_exit(Duration::from_secs(60)), Some(0), "{}", pty.contents());
    let out = std::fs::read_to_string(&out_file).unwrap();
    assert!(!out.contains("OPENED"), "{terminal:?}: {out}");
    assert!(out.contains("own-pty-3004815"), "{out}");
}
