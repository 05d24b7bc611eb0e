//! Running a quality gate: a shell command in the session's working directory, in its
//! own session and process group (so the whole group can be killed), with a timeout.
//! This does I/O; the goal state machine only sees the `GateOutcome`.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::text::{strip_ansi, tail_chars};

/// Characters of gate output kept for the continuation prompt (DESIGN §5).
pub const GATE_TAIL_CHARS: usize = 3000;
/// Bytes kept in memory while a gate runs (enough for the tail after escape stripping).
const KEEP_BYTES: usize = 64 * 1024;
/// How long output is drained after the shell exits while other processes hold the pipe.
const DRAIN: Duration = Duration::from_millis(200);
/// Exit code reported for a gate that timed out (as `timeout(1)` does).
pub const TIMEOUT_EXIT_CODE: i32 = 124;
/// Exit code reported for a gate stopped by an interrupt.
pub const INTERRUPTED_EXIT_CODE: i32 = 130;
/// Exit code reported when the shell could not be started.
pub const SPAWN_FAILED_EXIT_CODE: i32 = 127;

/// How a gate run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateOutcome {
    /// The shell's exit code; 128+N for a signal, 124 on timeout, 130 when interrupted.
    pub exit_code: i32,
    /// The last `GATE_TAIL_CHARS` characters of stdout and stderr (one stream, in
    /// order), escape sequences removed.
    pub output_tail: String,
    pub timed_out: bool,
}

impl GateOutcome {
    pub fn passed(&self) -> bool {
        self.exit_code == 0 && !self.timed_out
    }
}

/// How gates are started.
#[derive(Debug, Clone)]
pub struct GateOptions {
    /// Run as `<shell> -c <cmd>`.
    pub shell: String,
    /// Between SIGTERM and SIGKILL of the group.
    pub kill_grace: Duration,
    /// Environment variables the gate must not see (the API key variable).
    pub env_remove: Vec<String>,
}

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions { shell: "bash".into(), kill_grace: Duration::from_secs(1), env_remove: Vec::new() }
    }
}

/// Run `cmd` in `cwd` with `bash`, killing its process group after `timeout`.
pub async fn run_gate(cmd: &str, cwd: &Path, timeout: Duration) -> GateOutcome {
    run_gate_with(&GateOptions::default(), cmd, cwd, timeout, &CancellationToken::new()).await
}

/// Run a gate; `cancel` (an interrupt) kills its group and reports exit code 130.
pub async fn run_gate_with(
    opts: &GateOptions,
    cmd: &str,
    cwd: &Path,
    timeout: Duration,
    cancel: &CancellationToken,
) -> GateOutcome {
    let spawn_failed = |what: String| GateOutcome {
        exit_code: SPAWN_FAILED_EXIT_CODE,
        output_tail: format!("[gate could not start: {what}]"),
        timed_out: false,
    };
    // One pipe on fds 1 and 2 keeps stdout and stderr in order. Close-on-exec: only the
    // gate's own fds 1 and 2 are inherited, never a stray copy in another child.
    let (reader, writer) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return spawn_failed(format!("no pipe: {e}")),
    };
    let writer2 = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return spawn_failed(format!("no pipe: {e}")),
    };
    let mut command = tokio::process::Command::new(&opts.shell);
    command.arg("-c").arg(cmd).current_dir(cwd).stdin(Stdio::null()).stdout(writer).stderr(writer2);
    for var in &opts.env_remove {
        command.env_remove(var);
    }
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
    }
    let spawned = command.spawn();
    // Our copies of the pipe's write end must close, or the reader never sees EOF.
    drop(command);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return spawn_failed(format!("{} in {}: {e}", opts.shell, cwd.display())),
    };
    let pgid = child.id().map(|id| Pid::from_raw(id as i32));
    let kept = Arc::new(Mutex::new(Vec::new()));
    let mut reading = tokio::spawn(read_tail(reader, kept.clone()));

    let deadline = Instant::now() + timeout;
    let mut note = None;
    let status = tokio::select! {
        status = child.wait() => status.ok(),
        _ = tokio::time::sleep_until(deadline) => {
            note = Some((TIMEOUT_EXIT_CODE, format!("[gate timed out after {}s]", timeout.as_secs())));
            None
        }
        _ = cancel.cancelled() => {
            note = Some((INTERRUPTED_EXIT_CODE, "[gate interrupted]".to_string()));
            None
        }
    };
    let status = match status {
        Some(s) => Some(s),
        None => {
            if let Some(pgid) = pgid {
                let _ = killpg(pgid, Signal::SIGTERM);
                let exited = tokio::time::timeout(opts.kill_grace, child.wait()).await;
                // The leader may have gone while others in its group ignore SIGTERM.
                let _ = killpg(pgid, Signal::SIGKILL);
                match exited {
                    Ok(s) => s.ok(),
                    Err(_) => {
                        tokio::time::timeout(Duration::from_secs(10), child.wait()).await.ok().and_then(Result::ok)
                    }
                }
            } else {
                None
            }
        }
    };

    // Drain what is left. Processes that outlive the shell are part of the gate, so they
    // go with it: a check must not leave anything running.
    let drained = tokio::time::timeout(DRAIN, &mut reading).await;
    if let Some(pgid) = pgid {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    if drained.is_err() && tokio::time::timeout(Duration::from_secs(1), &mut reading).await.is_err() {
        // Something outside the group still holds the pipe: keep what was read so far.
        reading.abort();
    }
    let bytes = std::mem::take(&mut *kept.lock().unwrap_or_else(|p| p.into_inner()));

    let mut text = strip_ansi(&String::from_utf8_lossy(&bytes));
    let (exit_code, timed_out) = match note {
        Some((code, line)) => {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&line);
            (code, code == TIMEOUT_EXIT_CODE)
        }
        None => (status.map(exit_code_of).unwrap_or(-1), false),
    };
    GateOutcome { exit_code, output_tail: tail_chars(&text, GATE_TAIL_CHARS).to_string(), timed_out }
}

fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(-1)
}

/// Read the pipe to EOF into `kept`, keeping only the last `KEEP_BYTES` bytes.
async fn read_tail(fd: OwnedFd, kept: Arc<Mutex<Vec<u8>>>) {
    let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return;
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match rx.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > KEEP_BYTES {
                    let excess = kept.len() - KEEP_BYTES;
                    kept.drain(..excess);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
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

    #[tokio::test]
    async fn output_is_capped_to_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let out = run_gate("seq 1 20000", dir.path(), LONG).await;
        assert!(out.passed());
        assert_eq!(out.output_tail.chars().count(), GATE_TAIL_CHARS);
        assert!(out.output_tail.ends_with("19999\n20000\n"));
    }

    #[tokio::test]
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

    #[tokio::test]
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

    #[tokio::test]
    async fn leftover_background_processes_do_not_hold_the_gate() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("bg.pid");
        let cmd = format!("sleep 300 & echo $! > {}; echo done", pidfile.display());
        let out = tokio::time::timeout(Duration::from_secs(30), run_gate(&cmd, dir.path(), LONG)).await.unwrap();
        assert_eq!(out, GateOutcome { exit_code: 0, output_tail: "done\n".into(), timed_out: false });
        let bg: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        assert!(wait_gone(bg).await, "background process {bg} of the gate survived");
    }

    #[tokio::test]
    async fn cancel_interrupts_the_gate() {
        let dir = tempfile::tempdir().unwrap();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            c.cancel();
        });
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            run_gate_with(&GateOptions::default(), "echo hi; sleep 300", dir.path(), LONG, &cancel),
        )
        .await
        .unwrap();
        assert_eq!(out.exit_code, INTERRUPTED_EXIT_CODE);
        assert!(out.output_tail.ends_with("[gate interrupted]"), "{}", out.output_tail);
    }
}
