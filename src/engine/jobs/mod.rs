//! The job registry (DESIGN §4): an actor that spawns and owns every command.
//! SKELETON — the jobs helper replaces the bodies; the signatures are the contract.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::engine::EventSink;
use crate::paths::Paths;
use crate::protocol::{JobId, JobInfo};

/// What to run.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    pub command: String,
    pub cwd: PathBuf,
    /// Foreground: a tool call awaits it (stdin /dev/null). Background: stdin is a pipe.
    pub background: bool,
    /// Session that owns the job (notifications go to it).
    pub session_id: String,
    /// Where the shell should write its final working directory (cwd carry-over);
    /// None = don't track.
    pub cwd_file: Option<PathBuf>,
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// None when killed by a signal.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Killed by us (interrupt, timeout, kill action).
    pub killed: bool,
}

/// A freshly spawned job.
pub struct Spawned {
    pub id: JobId,
    pub pid: u32,
    /// Resolves when the process group leader exits and output is drained (~200 ms cap
    /// when children still hold the pipe).
    pub exit: oneshot::Receiver<ExitInfo>,
}

/// A finished job the model has not seen yet (exactly-once notifications).
#[derive(Debug, Clone, PartialEq)]
pub struct ExitNotice {
    pub id: JobId,
    pub session_id: String,
    /// The user-message text of DESIGN §4.
    pub text: String,
}

#[derive(Clone)]
pub struct JobsHandle {
    _tx: mpsc::UnboundedSender<()>,
}

impl JobsHandle {
    /// Start the registry actor. `finished` receives a wake-up each time a job ends.
    pub fn start(
        _paths: &Paths,
        _config: Arc<Config>,
        _events: EventSink,
    ) -> (JobsHandle, mpsc::UnboundedReceiver<JobId>) {
        todo!()
    }
    pub async fn spawn(&self, _spec: SpawnSpec) -> Result<Spawned, String> {
        todo!()
    }
    /// Output so far (sanitised text) of a job, from the beginning of the kept log.
    pub async fn output_since_start(&self, _id: &str) -> String {
        todo!()
    }
    /// Stop awaiting: the job is a background job from now on (yield).
    pub async fn adopt(&self, _id: &str) {
        todo!()
    }
    /// Kill a job's process group (SIGTERM, grace, SIGKILL) and wait until it is gone.
    pub async fn kill(&self, _id: &str) -> Option<ExitInfo> {
        todo!()
    }
    pub async fn list(&self) -> Vec<JobInfo> {
        todo!()
    }
    /// The `process` tool's actions; returns the JSON shapes of DESIGN §4a.
    pub async fn process_action(
        &self,
        _args: &Value,
        _release: tokio::sync::watch::Receiver<u64>,
        _timeout_cap: Duration,
    ) -> Value {
        todo!()
    }
    /// Finished jobs of `session_id` whose exit the model has not seen; marks them seen.
    pub async fn take_exit_notices(&self, _session_id: &str) -> Vec<ExitNotice> {
        todo!()
    }
    /// Kill every running job (quit, signals). Returns how many were killed.
    pub async fn shutdown(&self) -> usize {
        todo!()
    }
}
