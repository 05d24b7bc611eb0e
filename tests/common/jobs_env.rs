//! The job registry on real processes, each under its own supervisor (this talaria binary),
//! for tests that call the `terminal` / `process` tools directly. Include with
//! `#[path = "common/jobs_env.rs"] mod jobs_env;`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use talaria::config::{ApprovalMode, Config};
use talaria::engine::approval::{Approver, PromptPolicy};
use talaria::engine::jobs::{JobsHandle, JobsOptions, SupervisorExe};
use talaria::engine::tools::process::ProcessTool;
use talaria::engine::tools::{Tool, ToolCtx, ToolSignals};
use talaria::engine::EventSink;
use talaria::paths::Paths;
use talaria::protocol::{Event, JobId};
use tokio::sync::mpsc;

/// Every wait has this deadline (a loaded 2-core machine is slow).
pub const DEADLINE: Duration = Duration::from_secs(30);

pub struct JobsEnv {
    /// TALARIA_HOME, and the tools' working directory.
    pub home: tempfile::TempDir,
    pub paths: Paths,
    pub config: Arc<Config>,
    pub jobs: JobsHandle,
    /// The id of each background job that ends.
    pub finished: mpsc::UnboundedReceiver<JobId>,
    pub events: mpsc::UnboundedReceiver<Event>,
    pub sink: EventSink,
    pub cwd: Arc<Mutex<PathBuf>>,
}

impl JobsEnv {
    /// Approvals off, then `tweak`. `sweep`: sweep the jobs of dead talarias at start.
    pub fn start(sweep: bool, tweak: impl FnOnce(&mut Config)) -> JobsEnv {
        let home = tempfile::tempdir().expect("tempdir");
        let paths = Paths::under(home.path());
        let mut config = Config::default();
        config.approvals.mode = ApprovalMode::Off;
        tweak(&mut config);
        let config = Arc::new(config);
        let (sink, events) = EventSink::channel();
        let options = JobsOptions {
            supervisor: SupervisorExe::Exe(PathBuf::from(env!("CARGO_BIN_EXE_talaria"))),
            sweep,
            attach: None,
        };
        let (jobs, finished) = JobsHandle::start_with(&paths, config.clone(), sink.clone(), options);
        let cwd = Arc::new(Mutex::new(home.path().canonicalize().expect("canonical home")));
        JobsEnv { home, paths, config, jobs, finished, events, sink, cwd }
    }

    /// A tool call's context in session `s1`, approvals allowed unattended.
    pub fn ctx(&self, signals: ToolSignals) -> ToolCtx {
        ToolCtx {
            call_id: "call_1".into(),
            session_id: "s1".into(),
            config: self.config.clone(),
            cwd: self.cwd.clone(),
            jobs: self.jobs.clone(),
            approvals: Approver::new(&self.config, PromptPolicy::AllowUnattended, None, self.sink.clone()),
            signals,
            events: self.sink.clone(),
        }
    }

    /// The `process` tool's result for `args`.
    pub async fn process(&self, args: Value) -> Value {
        ProcessTool.call(args, self.ctx(ToolSignals::inert())).await.value
    }

    /// Wait for an event matching `pred`, keeping the others out of the way.
    pub async fn wait_event(&mut self, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
        let found = tokio::time::timeout(DEADLINE, async {
            while let Some(event) = self.events.recv().await {
                if pred(&event) {
                    return Some(event);
                }
            }
            None
        })
        .await;
        found.ok().flatten().unwrap_or_else(|| panic!("no event: {what}"))
    }
}
