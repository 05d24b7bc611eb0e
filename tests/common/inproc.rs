//! The engine in-process (`talaria::engine::start`) against a scripted server, for tests
//! that drive slash commands and watch events. Include with
//! `#[path = "common/inproc.rs"] mod inproc;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use talaria::config::Config;
use talaria::engine::approval::PromptPolicy;
use talaria::engine::llm::client::{ClientSettings, OpenAiClient};
use talaria::engine::llm::Provider;
use talaria::engine::store::Store;
use talaria::engine::{EngineOptions, SessionChoice};
use talaria::paths::Paths;
use talaria::protocol::EngineHandle;
use talaria::protocol::{Event, JobAction, JobStatus, Op, ToolStatus};

/// Every wait for an event has this deadline (a loaded 2-core machine is slow).
pub const DEADLINE: Duration = Duration::from_secs(30);

pub struct Running {
    pub handle: EngineHandle,
    pub join: tokio::task::JoinHandle<()>,
    pub store: Store,
    pub paths: Paths,
    pub work: PathBuf,
    /// Every event received so far, in order.
    pub seen: Vec<Event>,
}

/// A TALARIA_HOME under `home` with a `work` directory; returns the paths.
pub fn paths(home: &Path) -> (Paths, PathBuf) {
    let paths = Paths::under(home);
    paths.ensure_dirs().expect("create home dirs");
    let work = home.join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    (paths, work)
}

/// Open the store of `home` (the engine shares the same file).
pub fn store(home: &Path) -> Store {
    let (paths, _) = paths(home);
    Store::open(&paths.state_db).expect("open state.db")
}

pub async fn start(home: &Path, base_url: &str, session: SessionChoice) -> Running {
    start_with(home, base_url, session, Config::default()).await
}

pub async fn start_with(home: &Path, base_url: &str, session: SessionChoice, config: Config) -> Running {
    let settings = ClientSettings::new(base_url).max_retries(0);
    let provider = Arc::new(OpenAiClient::new(settings).expect("client"));
    start_provider(home, provider, "scripted-model", session, config).await
}

/// The engine talking to `provider` (any wire protocol) as `model`.
pub async fn start_provider(
    home: &Path,
    provider: Arc<dyn Provider>,
    model: &str,
    session: SessionChoice,
    config: Config,
) -> Running {
    start_with_policy(home, provider, model, session, config, PromptPolicy::DenyUnattended).await
}

/// The same with the approval policy of a given front end (`Ask`: the TUI's).
pub async fn start_with_policy(
    home: &Path,
    provider: Arc<dyn Provider>,
    model: &str,
    session: SessionChoice,
    config: Config,
    approval_policy: PromptPolicy,
) -> Running {
    let (paths, work) = paths(home);
    let store = Store::open(&paths.state_db).expect("open state.db");
    let options = EngineOptions {
        config: Arc::new(config),
        paths: paths.clone(),
        provider,
        model: model.into(),
        provider_label: "scripted".into(),
        demo: false,
        store: store.clone(),
        session,
        cwd: work.clone(),
        approval_policy,
        reaper: false,
        inherited_sandbox: None,
    };
    let (handle, join) = talaria::engine::start(options).await.expect("engine starts");
    let mut running = Running { handle, join, store, paths, work, seen: Vec::new() };
    running.wait_for("SessionReady", |e| matches!(e, Event::SessionReady { .. })).await;
    running
}

impl Running {
    pub fn send(&self, op: Op) {
        self.handle.ops.send(op).expect("engine is running");
    }

    /// The next event matching `pred` (30 s deadline); every event is kept in `seen`.
    pub async fn wait_for(&mut self, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let event = match tokio::time::timeout_at(deadline, self.handle.events.recv()).await {
                Ok(Some(event)) => event,
                Ok(None) => panic!("the engine stopped before {what}; events: {:#?}", self.tail()),
                Err(_) => panic!("no {what} within {DEADLINE:?}; events: {:#?}", self.tail()),
            };
            self.seen.push(event.clone());
            if pred(&event) {
                return event;
            }
        }
    }

    /// Like `wait_for`, but an event already seen at index `since` or later counts too
    /// (for events whose order among themselves is not fixed).
    pub async fn wait_since(&mut self, since: usize, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
        if let Some(event) = self.seen[since.min(self.seen.len())..].iter().find(|e| pred(e)) {
            return event.clone();
        }
        self.wait_for(what, pred).await
    }

    /// Collect events for `period` (for checks that something does NOT happen).
    pub async fn collect_for(&mut self, period: Duration) -> Vec<Event> {
        let deadline = tokio::time::Instant::now() + period;
        let mut got = Vec::new();
        while let Ok(Some(event)) = tokio::time::timeout_at(deadline, self.handle.events.recv()).await {
            self.seen.push(event.clone());
            got.push(event);
        }
        got
    }

    pub async fn turn_finished(&mut self) -> Event {
        self.wait_for("TurnFinished", |e| matches!(e, Event::TurnFinished { .. })).await
    }

    /// A notice whose text contains `needle`.
    pub async fn notice(&mut self, needle: &str) -> String {
        let needle = needle.to_string();
        match self
            .wait_for(
                &format!("a notice containing {needle:?}"),
                |e| matches!(e, Event::Notice { text, .. } if text.contains(&needle)),
            )
            .await
        {
            Event::Notice { text, .. } => text,
            _ => unreachable!(),
        }
    }

    pub fn session_id(&self) -> String {
        self.seen
            .iter()
            .rev()
            .find_map(|e| match e {
                Event::SessionReady { session_id, .. } => Some(session_id.clone()),
                _ => None,
            })
            .expect("a SessionReady event was seen")
    }

    /// The result JSON and status of tool call `call_id`, once it has finished.
    pub async fn tool_result(&mut self, call_id: &str) -> (serde_json::Value, Option<ToolStatus>) {
        let id = call_id.to_string();
        let ev = self
            .wait_for(
                &format!("{call_id} finished"),
                |e| matches!(e, Event::ToolFinished { call_id, .. } if *call_id == id),
            )
            .await;
        let Event::ToolFinished { outcome, .. } = ev else { unreachable!() };
        (serde_json::from_str(&outcome.result).expect("result JSON"), outcome.status)
    }

    /// Ask for job `id`'s log until it contains every one of `needles`, at most `tries`
    /// times 50 ms apart; whether it did.
    pub async fn log_shows(&mut self, id: &str, needles: &[&str], tries: usize) -> bool {
        for _ in 0..tries {
            self.send(Op::Job { id: id.to_string(), action: JobAction::Log { offset: None, limit: None } });
            let ev = self.wait_for("the log", |e| matches!(e, Event::JobLog { .. })).await;
            if let Event::JobLog { text, .. } = ev {
                if needles.iter().all(|n| text.contains(n)) {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Kill job `id` as the jobs pane does, and wait until it has finished as killed.
    pub async fn kill_job(&mut self, id: &str) {
        self.send(Op::Job { id: id.to_string(), action: JobAction::Kill });
        self.wait_for("killed", |e| matches!(e, Event::JobFinished { id: i, status: JobStatus::Killed } if i == id))
            .await;
    }

    /// Shut the engine down and wait for it.
    pub async fn shutdown(mut self) {
        let _ = self.handle.ops.send(Op::Shutdown);
        let _ = self.wait_for("ShutdownComplete", |e| matches!(e, Event::ShutdownComplete)).await;
        let _ = tokio::time::timeout(DEADLINE, self.join).await;
    }

    fn tail(&self) -> Vec<String> {
        let start = self.seen.len().saturating_sub(40);
        self.seen[start..].iter().map(|e| format!("{e:?}")).map(|s| s.chars().take(300).collect()).collect()
    }
}
