//! Running a quality gate: a shell command in the session's working directory, started
//! through the job registry like every command (its own process group, killed on quit, on
//! Esc and by the reaper if talaria dies), with a timeout. The goal state machine only
//! sees the `GateOutcome`.

use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine::jobs::{ExitInfo, JobsHandle, SpawnSpec};
use crate::text::tail_chars;

/// Characters of gate output kept for the continuation prompt (DESIGN §5).
pub const GATE_TAIL_CHARS: usize = 3000;
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

/// Where a gate runs: the session's job registry and the session it belongs to.
#[derive(Clone)]
pub struct GateRunner {
    pub jobs: JobsHandle,
    pub session_id: String,
}

impl GateRunner {
    /// Run `cmd` in `cwd`; after `timeout`, or when `cancel` fires (an interrupt), its whole
    /// process group is killed. Processes that outlive the shell are part of the gate and
    /// go with it: a check never leaves anything running.
    pub async fn run(&self, cmd: &str, cwd: &Path, timeout: Duration, cancel: &CancellationToken) -> GateOutcome {
        if !cwd.is_dir() {
            return spawn_failed(format!("working directory {} does not exist", cwd.display()));
        }
        let spec = SpawnSpec {
            command: cmd.to_string(),
            cwd: cwd.to_path_buf(),
            background: false,
            session_id: self.session_id.clone(),
            track_cwd: false,
            call_id: None,
        };
        let spawned = match self.jobs.spawn(spec).await {
            Ok(s) => s,
            Err(e) => return spawn_failed(format!("{e} (in {})", cwd.display())),
        };
        let id = spawned.id;
        let mut note = None;
        let exit = tokio::select! {
            exit = spawned.exit => exit.ok(),
            _ = tokio::time::sleep(timeout) => {
                note = Some((TIMEOUT_EXIT_CODE, format!("[gate timed out after {}s]", timeout.as_secs())));
                None
            }
            _ = cancel.cancelled() => {
                note = Some((INTERRUPTED_EXIT_CODE, "[gate interrupted]".to_string()));
                None
            }
        };
        let (exit, text) = match exit {
            // The shell is done but part of its group is not: that part goes too.
            Some(exit) if exit.leftover => match self.jobs.discard(&id).await {
                Some((_, text)) => (Some(exit), text),
                None => (Some(exit), String::new()),
            },
            Some(exit) => (Some(exit), self.output(&id).await),
            None => {
                let killed = self.jobs.kill(&id).await;
                (killed, self.output(&id).await)
            }
        };
        self.jobs.forget(&id).await;
        let mut text = text;
        let (exit_code, timed_out) = match note {
            Some((code, line)) => {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(&line);
                (code, code == TIMEOUT_EXIT_CODE)
            }
            None => (exit.as_ref().map(exit_code_of).unwrap_or(-1), false),
        };
        GateOutcome { exit_code, output_tail: tail_chars(&text, GATE_TAIL_CHARS).to_string(), timed_out }
    }

    async fn output(&self, id: &str) -> String {
        self.jobs.output_for_model(id).await.unwrap_or_default()
    }
}

fn spawn_failed(what: String) -> GateOutcome {
    GateOutcome {
        exit_code: SPAWN_FAILED_EXIT_CODE,
        output_tail: format!("[gate could not start: {what}]"),
        timed_out: false,
    }
}

fn exit_code_of(exit: &ExitInfo) -> i32 {
    exit.code.or_else(|| exit.signal.map(|s| 128 + s)).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    use std::sync::Arc;

    use tokio::time::Instant;

    use crate::config::Config;
    use crate::engine::jobs::{JobsOptions, ReaperMode};
    use crate::engine::EventSink;

    const LONG: Duration = Duration::from_secs(60);

    /// A job registry of its own under `home` (no reaper, no sweep).
    fn runner(home: &Path) -> GateRunner {
        let paths = crate::paths::Paths::under(home);
        let (events, _rx) = EventSink::channel();
        let options = JobsOptions { reaper: ReaperMode::Off, sweep: false };
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
        let runner = runner(dir.path());
        let out =
            tokio::time::timeout(Duration::from_secs(30), runner.run("echo hi; sleep 300", dir.path(), LONG, &cancel))
                .await
                .unwrap();
        assert_eq!(out.exit_code, INTERRUPTED_EXIT_CODE);
        assert!(out.output_tail.ends_with("[gate interrupted]"), "{}", out.output_tail);
    }
}
