//! Opening a session: which one, what the front end shows of it first, and what the model
//! gets of it (repaired, with the input that was pending when talaria last stopped).

use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::{standing, Engine, EngineOptions};
use crate::config::Config;
use crate::engine::approval::{Approver, PromptPolicy};
use crate::engine::context::ContextMeter;
use crate::engine::goal::GoalMachine;
use crate::engine::jobs::{JobsHandle, JobsOptions, SupervisorExe};
use crate::engine::llm::spend::Spend;
use crate::engine::llm::ChatMessage;
use crate::engine::scheduler::{Input, Scheduler};
use crate::engine::store::OmittedRows;
use crate::engine::tools::Registry;
use crate::engine::turn::TurnEnv;
use crate::engine::EventSink;
use crate::engine::{estop, history, instructions};
use crate::protocol::{EngineHandle, Event, NoticeLevel};

pub(crate) const SYSTEM_PROMPT: &str = include_str!("../../../assets/system_prompt.md");

/// Stored messages a transcript page holds: what a resumed session shows first, and what
/// each `Op::LoadEarlier` adds above it.
pub const HISTORY_PAGE: usize = 400;

/// Which session to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionChoice {
    New,
    /// The most recent session started in this working directory (a new one if none).
    Continue,
    /// The same, passing over sessions `talaria exec` started (`talaria -c`).
    ContinueInteractive,
    /// By id, id prefix or title.
    Resume(String),
}

/// `sandbox.network = "ask"`: the session's network proxy (DESIGN §6b). Without it, jobs
/// reach nothing over IP (their policy names no proxy port).
async fn start_proxy(env: &TurnEnv, paths: &crate::paths::Paths) {
    let (session, jobs, approver, events) = (&env.session_id, &env.jobs, &env.approver, &env.events);
    let sandbox = &env.config.sandbox;
    if sandbox.mode == crate::config::SandboxMode::Off || sandbox.network != crate::config::NetworkMode::Ask {
        return;
    }
    let settings = crate::engine::netproxy::Settings {
        allow: sandbox.network_allow.clone(),
        deny: sandbox.network_deny.clone(),
        config_file: Some(paths.config_file.clone()),
    };
    let gate: Arc<dyn crate::engine::netproxy::Gate> = Arc::new(approver.clone());
    // A process of its own, so that jobs kept running after talaria quits keep it.
    let dir = paths.jobs_dir.parent().map(|p| p.join("netproxy")).unwrap_or_else(|| "netproxy".into());
    let Some(exe) = jobs.exe() else { return };
    let logs = &paths.logs_dir;
    let client =
        crate::engine::netproxy::client::ProxyClient::open(&exe, &dir, logs, session, settings, gate, events.clone());
    match client.await {
        Ok(proxy) => {
            jobs.set_proxy(proxy);
            approver.set_sandbox_policy(jobs.sandbox_policy());
        }
        Err(e) => events.send(Event::notice(
            NoticeLevel::Warn,
            format!("cannot start the network proxy ({e}): sandboxed commands have no network this session"),
        )),
    }
}

/// Open (or create) the session and start the engine task.
pub async fn start(opts: EngineOptions) -> anyhow::Result<(EngineHandle, JoinHandle<()>)> {
    let (op_tx, op_rx) = mpsc::unbounded_channel();
    let (events, event_rx) = EventSink::channel();
    let cwd = opts.cwd.canonicalize().unwrap_or_else(|_| opts.cwd.clone());
    let (session_id, title, created) = open_session(&opts, &cwd).await?;
    // Start-up's steps at debug level (`TALARIA_LOG=debug`): where a slow start spends it.
    tracing::debug!(session = %session_id, "start: session opened");
    let opts_session = opts.session.clone();
    let jobs_options =
        JobsOptions { supervisor: SupervisorExe::CurrentExe, sweep: true, attach: Some(session_id.clone()) };
    let (jobs, job_done) = JobsHandle::start_sharing(
        &opts.paths,
        opts.config.clone(),
        events.clone(),
        jobs_options,
        Some(opts.store.clone()),
    );
    jobs.set_workspace(&cwd, &opts.paths);
    // A sub-agent's jobs run under its parent's policy as it is: never wider (DESIGN §14).
    if let Some(policy) = &opts.inherited_sandbox {
        jobs.set_sandbox_policy(policy.clone());
    }
    let backend_changed = jobs.backends().subscribe();
    let instruction_files = instructions::discover(&cwd, &opts.paths.user_instructions);
    let (pause_file, _watch_task) = estop::watch(opts.paths.estop.clone());
    let approver =
        Approver::new(&opts.config, opts.approval_policy, Some(opts.paths.config_file.clone()), events.clone());
    approver.set_sandbox_policy(jobs.sandbox_policy());
    jobs.set_agent_approver(approver.clone());
    warn_if_no_sandbox(&opts.config, &events);
    let mcp = start_mcp(&opts, &cwd, &events);
    let jobs_config = &opts.config.jobs;
    let scheduler = Scheduler::new(
        opts.config.agent.busy_input_mode,
        estop::is_paused(&opts.paths.estop),
        (jobs_config.notice_window_s.max(0.0) * 1000.0) as u64,
        jobs_config.notify_starts_turn,
    );
    let scheduler_paused = scheduler.paused();
    let env = TurnEnv {
        provider: opts.provider,
        model: opts.model,
        registry: Registry::standard().with_agents(&opts.config).with_source(Arc::new(mcp.clone())),
        mcp: Some(mcp),
        config: opts.config.clone(),
        store: opts.store,
        events: events.clone(),
        jobs,
        approver,
        cwd: Arc::new(Mutex::new(cwd.clone())),
        session_id,
        system_prompt: system_prompt(&opts.config, &cwd, &instruction_files),
    };
    let (asks_tx, asks) = mpsc::unbounded_channel();
    let mut engine = Engine {
        env,
        paths: opts.paths,
        provider_label: opts.provider_label,
        demo: opts.demo,
        ops: op_rx,
        job_done,
        history: Vec::new(),
        omitted: None,
        scheduler,
        turn: None,
        compaction: None,
        asks,
        asks_tx,
        reply: None,
        waiting: watch::channel(0).0,
        title,
        meter: ContextMeter::new(opts.config.model.context_window),
        session_usage: Spend::default(),
        last_turn_usage: Spend::default(),
        heartbeat: None,
        goal: GoalMachine::new(opts.config.goals.clone()),
        boundary: standing::Boundary::new(),
        paused: watch::channel(scheduler_paused).0,
        pause_file,
        instruction_files,
        backend_changed,
        // Opened on the engine task, after the first screen (`finish_start`).
        rewind: None,
    };
    // The end of the session goes to the front end now; reading the whole of a long session
    // for the model happens on the engine task, before it takes the first op.
    engine.show_session().await?;
    tracing::debug!("start: session shown");
    // `talaria -c` with nothing to continue here says so instead of starting afresh silently.
    if created && matches!(opts_session, SessionChoice::Continue | SessionChoice::ContinueInteractive) {
        let cwd_text = cwd.display().to_string();
        engine.notice(
            NoticeLevel::Info,
            format!("no earlier session in {cwd_text} to continue: this is a new one (talaria sessions list shows the others)"),
        );
    }
    let join = tokio::spawn(load_and_run(engine));
    Ok((EngineHandle { ops: op_tx, events: event_rx }, join))
}

/// The engine task: read the session for the model (its status and context use go to the
/// front end: the first screen is complete), start what that screen does not show, then
/// take ops until shutdown.
async fn load_and_run(mut engine: Engine) {
    let inputs = match engine.load_context().await {
        Ok(inputs) => inputs,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "cannot load the session");
            engine.notice(NoticeLevel::Error, format!("cannot load session {}: {e:#}", engine.env.session_id));
            return;
        }
    };
    tracing::debug!("start: context and status sent");
    engine.finish_start().await;
    tracing::debug!("start: proxy and rewind ready");
    for input in inputs {
        engine.feed(input).await;
    }
    // A front end starts out assuming idle: a session opened paused says so.
    engine.events().send(Event::Phase { phase: engine.scheduler.phase() });
    engine.run().await
}

impl Engine {
    /// The network proxy (a process, waited for) and the workspace's snapshot store (git,
    /// which on a first start creates its repository), together: after the first screen
    /// has what it shows, before the first op, so no command runs without its proxy and no
    /// turn without its snapshot.
    async fn finish_start(&mut self) {
        let proxy = start_proxy(&self.env, &self.paths);
        let cwd = self.env.cwd();
        let rewind = open_rewind(&self.env.config, &self.paths, &cwd, &self.env.events);
        ((), self.rewind) = tokio::join!(proxy, rewind);
    }
}

/// Without a kernel sandbox every command asks: say so once, at the start.
fn warn_if_no_sandbox(config: &Config, events: &EventSink) {
    if config.sandbox.mode != crate::config::SandboxMode::Off {
        if let crate::engine::sandbox::Support::Unavailable { reason } = crate::engine::sandbox::support() {
            events.send(Event::notice(
                NoticeLevel::Warn,
                format!("no kernel sandbox: {reason}; every command will ask (it runs with your full rights; approvals act as \"prompt\")"),
            ));
        }
    }
}

/// The session's MCP servers. Headless runs have no first frame to wait for: their servers
/// start at once, and the first model request waits for them (each within its
/// startup_timeout_s).
fn start_mcp(opts: &EngineOptions, cwd: &Path, events: &EventSink) -> crate::engine::mcp::McpHandle {
    let headless = opts.approval_policy != PromptPolicy::Ask;
    let mcp = crate::engine::mcp::McpHandle::new(
        opts.config.clone(),
        &opts.paths.logs_dir,
        cwd.to_path_buf(),
        events.clone(),
        headless,
    );
    if headless {
        mcp.begin();
    }
    mcp
}

/// The workspace's snapshot store, unless rewind is off or cannot work here (said once).
async fn open_rewind(
    config: &Config,
    paths: &crate::paths::Paths,
    cwd: &Path,
    events: &EventSink,
) -> Option<Arc<crate::engine::rewind::Rewinder>> {
    if !config.rewind.enabled {
        return None;
    }
    let data = paths.state_db.parent()?.to_path_buf();
    let (cwd, max) = (cwd.to_path_buf(), config.rewind.max_file_bytes);
    let opened = tokio::task::spawn_blocking(move || crate::engine::rewind::Rewinder::open(&data, &cwd, max)).await;
    match opened {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "rewind is off");
            events.send(Event::notice(NoticeLevel::Warn, format!("rewind is off: {e}")));
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "rewind is off");
            None
        }
    }
}

/// The session `opts` asks for (created when there is none): its id and title, and whether it
/// was created.
pub(super) async fn open_session(opts: &EngineOptions, cwd: &Path) -> anyhow::Result<(String, Option<String>, bool)> {
    let cwd_text = cwd.display().to_string();
    let store = &opts.store;
    let existing = match &opts.session {
        SessionChoice::New => None,
        SessionChoice::Continue => store.latest_in_cwd(&cwd_text).await?,
        SessionChoice::ContinueInteractive => store.latest_interactive_in_cwd(&cwd_text).await?,
        SessionChoice::Resume(key) => Some(
            store
                .find_session(key)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no session matches '{key}'; `talaria sessions list` shows them"))?,
        ),
    };
    Ok(match existing {
        Some(s) => (s.id, s.title, false),
        None => {
            let id = store.create_session(&opts.model, &cwd_text, None).await?;
            // A front end that cannot ask the user is `exec`: `talaria -c` passes over it.
            if opts.approval_policy != PromptPolicy::Ask {
                store.mark_headless(&id).await?;
            }
            (id, None, true)
        }
    })
}

pub(super) fn system_prompt(config: &Config, cwd: &Path, files: &[instructions::InstructionFile]) -> String {
    let mut prompt = SYSTEM_PROMPT.trim_end().to_string();
    prompt.push_str(&format!("\n\nWorking directory: {}\n", cwd.display()));
    let section = instructions::system_prompt_section(files);
    if !section.is_empty() {
        prompt.push('\n');
        prompt.push_str(&section);
        prompt.push('\n');
    }
    if !config.agent.system_prompt_extra.trim().is_empty() {
        prompt.push('\n');
        prompt.push_str(config.agent.system_prompt_extra.trim());
        prompt.push('\n');
    }
    prompt
}

impl Engine {
    /// Show the session, then load what the model needs of it (both at once, for commands
    /// that switch sessions; at start-up `start` sends the first part before the rest).
    pub(super) async fn load_session(&mut self) -> anyhow::Result<Vec<Input>> {
        self.show_session().await?;
        self.load_context().await
    }

    /// The end of the session for the front end: one page of history, the rest on request
    /// (`Op::LoadEarlier`), so a long session is on screen before it is read whole.
    pub(super) async fn show_session(&mut self) -> anyhow::Result<()> {
        let cwd_text = self.env.cwd().display().to_string();
        let input_history = self.env.store.history_list(&cwd_text, 500).await.unwrap_or_default();
        self.send_session_ready(input_history).await
    }

    async fn send_session_ready(&mut self, input_history: Vec<String>) -> anyhow::Result<()> {
        let page = self.env.store.load_page(&self.env.session_id, None, HISTORY_PAGE).await?;
        let fates = self.env.jobs.fates(&self.env.session_id).await;
        let items = history::to_items(&page.messages, &self.env.registry, &fates);
        self.events().send(Event::SessionReady {
            session_id: self.env.session_id.clone(),
            title: self.title.clone(),
            model: self.env.model.clone(),
            provider: self.provider_label.clone(),
            demo: self.demo,
            cwd: self.env.cwd().display().to_string(),
            busy_mode: self.scheduler.busy_mode(),
            history: items,
            input_history,
            earlier: page.earlier,
        });
        Ok(())
    }

    /// `Op::LoadEarlier`: the page of history before seq `before`.
    pub(super) async fn send_earlier(&mut self, before: i64) {
        match self.env.store.load_page(&self.env.session_id, Some(before), HISTORY_PAGE).await {
            Ok(page) => {
                let fates = self.env.jobs.fates(&self.env.session_id).await;
                let items = history::to_items(&page.messages, &self.env.registry, &fates);
                self.events().send(Event::EarlierHistory { items, earlier: page.earlier });
            }
            Err(e) => self.notice(NoticeLevel::Error, format!("cannot load earlier messages: {e}")),
        }
    }

    /// The conversation for the model (repaired where a crash left a tool call without its
    /// result), the pending input, instructions, goal and heartbeat. What the scheduler must
    /// learn of the session's goal comes back for the caller to feed it.
    pub(super) async fn load_context(&mut self) -> anyhow::Result<Vec<Input>> {
        let (history, omitted, fillers) = self.read_context().await?;
        for filler in &fillers {
            crate::engine::turn::persist(&self.env, filler, None).await;
        }
        self.history = history;
        self.omitted = omitted;
        if !fillers.is_empty() {
            // The transcript was sent before the repair: send it again with the fillers.
            self.send_session_ready(Vec::new()).await?;
        }
        let mut all = crate::engine::turn::fixed_context(&self.env);
        all.extend_from_slice(&self.history);
        self.meter.reset_with(&all, self.omitted.map_or(0, |o| o.tokens));
        drop(all);
        // The rows read and their copies were tens of MiB glibc would keep for the process.
        crate::memory::trim_heap();
        self.restore_pending().await;
        if !self.instruction_files.is_empty() {
            self.notice(NoticeLevel::Info, instructions::describe(&self.instruction_files));
        }
        let inputs = self.load_standing().await;
        crate::engine::turn::send_context(&self.env, &self.meter);
        self.send_status();
        Ok(inputs)
    }

    /// Messages typed but not delivered before talaria last stopped go back into the input.
    async fn restore_pending(&mut self) {
        let key = self.pending_key();
        let Ok(Some(saved)) = self.env.store.meta_get(&key).await else { return };
        if let Ok(messages) = serde_json::from_str::<Vec<String>>(&saved) {
            if !messages.is_empty() {
                self.events().send(Event::RestoreInput { text: messages.join("\n\n") });
                self.notice(NoticeLevel::Info, "messages you typed before talaria stopped are back in the input");
            }
        }
        let _ = self.env.store.meta_delete(&key).await;
    }

    /// What the model gets of this session, read from the database: the messages from the
    /// last compaction on, repaired (with the fillers to store), and, when they are more
    /// than fit the window, only their end: the rest stays there (`omitted`) for the next
    /// compaction to summarise. An unknown window (0) reads them all.
    pub(super) async fn read_context(
        &self,
    ) -> anyhow::Result<(Vec<ChatMessage>, Option<OmittedRows>, Vec<ChatMessage>)> {
        let window = self.env.config.model.context_window;
        let budget = (window > 0).then(|| {
            let fixed = crate::engine::context::estimate_tokens(&crate::engine::turn::fixed_context(&self.env));
            // What may be sent before a compaction is due; at least the last turn is read.
            let threshold = (window as f64 * self.env.config.agent.compact_at.clamp(0.0, 1.0)) as u64;
            threshold.saturating_sub(fixed).max(1)
        });
        let rows = self.env.store.load_context(&self.env.session_id, budget).await?;
        let history: Vec<ChatMessage> = rows.messages.iter().filter_map(history::to_chat).collect();
        let (history, fillers) = history::repair(history);
        Ok((history, rows.omitted, fillers))
    }

    /// Read the context again after a task that held it crashed.
    pub(super) async fn reload_context(&mut self) {
        (self.history, self.omitted) = match self.read_context().await {
            Ok((history, omitted, _)) => (history, omitted),
            Err(_) => (Vec::new(), None),
        };
    }
}
