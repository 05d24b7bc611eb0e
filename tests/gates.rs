//! Goal gates run through the job registry: output, exit codes and signals, the tail cap,
//! a timeout or an interrupt killing the whole group, leftovers of `cmd &` removed.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use talaria::config::Config;
use talaria::engine::goal::gate::{
    GateOutcome, GateRunner, GATE_TAIL_CHARS, INTERRUPTED_EXIT_CODE, SPAWN_FAILED_EXIT_CODE, TIMEOUT_EXIT_CODE,
};
use talaria::engine::jobs::{JobsHandle, JobsOptions, SupervisorExe};
use talaria::engine::EventSink;
use talaria::paths::Paths;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LONG: Duration = Duration::from_secs(60);

/// A job registry of its own under `home` (no sweep).
fn runner(home: &Path) -> GateRunner {
    let paths = Paths::under(home);
    let (events, _rx) = EventSink::channel();
    let options = JobsOptions {
        supervisor: SupervisorExe::Exe(std::path::PathBuf::from(env!("CARGO_BIN_EXE_talaria"))),
        sweep: false,
        attach: None,
    };
    let (jobs, _done) = JobsHandle::start_with(&paths, Arc::new(Config::default()), events, options);
    GateRunner { jobs, session_id: "s".into() }
}

async fn run_gate(cmd: &str, cwd: &Path, timeout: Duration) -> GateOutcome {
    let home = tempfile::tempdir().unwrap();
    let runner = runner(home.path());
    let out = runner.run(cmd, cwd, timeout, &CancellationToken::new()).await;
    assert!(runner.jobs.list().await.is_empty(), "the gate's job is gone from the registry");
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn passing_and_failing_gates() {
    let dir = tempfile::tempdir().unwrap();
    let ok = run_gate("echo ok; pwd", dir.path(), LONG).await;
    assert!(ok.passed());
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(ok.output_tail, format!("ok\n{}\n", cwd.display()));

    let bad = run_gate("echo out; echo err >&2; printf '\\033[31mred\\033[0m\\n'; exit 3", dir.path(), LONG).await;
    assert_eq!(bad, GateOutcome { exit_code: 3, output_tail: "out\nerr\nred\n".into(), timed_out: false });
    assert!(!bad.passed());

    let signalled = run_gate("kill -TERM $$", dir.path(), LONG).await;
    assert_eq!(signalled.exit_code, 128 + 15);
}

#[tokio::test(flavor = "multi_thread")]
async fn output_is_capped_to_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_gate("seq 1 20000", dir.path(), LONG).await;
    assert!(out.passed());
    assert_eq!(out.output_tail.chars().count(), GATE_TAIL_CHARS);
    assert!(out.output_tail.ends_with("19999\n20000\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_directory_is_a_failed_gate_with_a_reason() {
    let out = run_gate("true", Path::new("/nonexistent/talaria-gate-dir"), LONG).await;
    assert_eq!(out.exit_code, SPAWN_FAILED_EXIT_CODE);
    assert!(out.output_tail.contains("/nonexistent/talaria-gate-dir"), "{}", out.output_tail);
}

fn is_gone(pid: i32) -> bool {
    // Gone, or a zombie nobody has reaped yet (it no longer runs).
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()) == Some("Z"),
    }
}

async fn wait_gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if is_gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn timeout_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    let cmd = format!("sleep 300 & echo $! > {}; echo started; trap '' TERM; sleep 300", pidfile.display());
    let out = tokio::time::timeout(Duration::from_secs(30), run_gate(&cmd, dir.path(), Duration::from_secs(1)))
        .await
        .expect("the gate runner itself must not hang");
    assert!(out.timed_out);
    assert!(!out.passed());
    assert_eq!(out.exit_code, TIMEOUT_EXIT_CODE);
    assert_eq!(out.output_tail, "started\n[gate timed out after 1s]");
    let bg: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(wait_gone(bg).await, "background process {bg} of the gate survived");
}

#[tokio::test(flavor = "multi_thread")]
async fn leftover_background_processes_do_not_hold_the_gate() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    let cmd = format!("sleep 300 & echo $! > {}; echo done", pidfile.display());
    let out = tokio::time::timeout(Duration::from_secs(30), run_gate(&cmd, dir.path(), LONG)).await.unwrap();
    assert_eq!(out, GateOutcome { exit_code: 0, output_tail: "done\n".into(), timed_out: false });
    let bg: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(wait_gone(bg).await, "background process {bg} of the gate survived");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_interrupts_the_gate() {
    let dir = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    // Cancelled once the gate has started (its marker file exists), not after a guess.
    let started = dir.path().join("started");
    let seen = started.clone();
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !seen.exists() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        c.cancel();
    });
    // Talaria's home is no place a job may write (the sandbox keeps it read-only), so the
    // gate's workspace is a directory of its own.
    let home = tempfile::tempdir().unwrap();
    let runner = runner(home.path());
    let cmd = format!("echo hi; touch {}; sleep 300.3004420", started.display());
    let out = tokio::time::timeout(Duration::from_secs(30), runner.run(&cmd, dir.path(), LONG, &cancel)).await.unwrap();
    assert!(started.exists(), "the gate never reached its marker, so the cancel proves nothing: {}", out.output_tail);
    assert_eq!(out.exit_code, INTERRUPTED_EXIT_CODE, "{}", out.output_tail);
    assert!(out.output_tail.ends_with("[gate interrupted]"), "{}", out.output_tail);
}
