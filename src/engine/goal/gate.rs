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
            // Owner gone: nobody can re-attach to a check, so it goes at once.
            orphan_grace_s: Some(0.0),
            // Like every job (DESIGN §6); a gate that must write elsewhere (~/.cargo, ...)
            // needs that directory in sandbox.writable_roots.
            sandboxed: true,
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
