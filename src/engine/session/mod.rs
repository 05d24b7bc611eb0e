//! The engine task: owns the session, receives `Op`, emits `Event`. It decides nothing
//! by itself: each input goes to `scheduler::decide` and this file performs the effects.
//! Slash commands are in `commands`, standing work (heartbeat, goal, compaction) in
//! `standing`.

mod commands;
mod standing;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::engine::approval::{Approver, PromptPolicy};
use crate::engine::compaction::Compacted;
use crate::engine::context::ContextMeter;
use crate::engine::goal::GoalMachine;
use crate::engine::heartbeat::Heartbeat;
use crate::engine::history::DisplayKind;
use crate::engine::jobs::{JobsHandle, JobsOptions, NoticeKind, SupervisorExe};
use crate::engine::llm::spend::{cost_of, Spend};
use crate::engine::llm::{ChatMessage, Provider};
use crate::engine::scheduler::{self, Effect, Input, Phase, Start, State};
use crate::engine::store::{OmittedRows, Store};
use crate::engine::tools::Registry;
use crate::engine::turn::{lock, notice_kind, run_turn, TurnControl, TurnEnv, TurnInput, TurnResult};
use crate::engine::EventSink;
use crate::engine::{history, instructions};
use crate::paths::Paths;
use crate::protocol::{
    BusyMode, EngineHandle, Event, GoalState, JobAction, JobId, NoticeLevel, Op, StatusInfo, TurnOutcome, TurnTrigger,
};

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

pub struct EngineOptions {
    pub config: Arc<Config>,
    pub paths: Paths,
    pub provider: Arc<dyn Provider>,
    pub model: String,
    pub provider_label: String,
    pub demo: bool,
    pub store: Store,
    pub session: SessionChoice,
    pub cwd: PathBuf,
    pub approval_policy: PromptPolicy,
    /// Unused: jobs are supervised by `talaria __job` (kept so callers need not change).
    pub reaper: bool,
}

struct RunningTurn {
    control: TurnControl,
    join: JoinHandle<TurnResult>,
    /// A `!command` run, not a model turn (goals do not count it).
    bang: bool,
}

/// `/compact` running as its own task (the engine loop never awaits the model).
struct RunningCompaction {
    cancel: CancellationToken,
    join: JoinHandle<Result<Compacted, (Vec<ChatMessage>, String)>>,
}

struct Engine {
    env: TurnEnv,
    paths: Paths,
    provider_label: String,
    demo: bool,
    ops: mpsc::UnboundedReceiver<Op>,
    job_done: mpsc::UnboundedReceiver<JobId>,
    /// What the model gets of the conversation (from the last compaction on, and of a long
    /// stretch without one only the end that fits the window)...
    history: Vec<ChatMessage>,
    /// ...and the older messages of it left in the database until a compaction.
    omitted: Option<OmittedRows>,
    turn: Option<RunningTurn>,
    compaction: Option<RunningCompaction>,
    pending: Arc<Mutex<Vec<String>>>,
    queued: VecDeque<String>,
    busy_mode: BusyMode,
    title: Option<String>,
    meter: ContextMeter,
    session_usage: Spend,
    last_turn_usage: Spend,
    heartbeat: Option<Heartbeat>,
    goal: GoalMachine,
    /// A goal continuation waiting for the session to be idle (and unpaused).
    goal_continuation: Option<String>,
    /// Goal effects produced where they could not be awaited (performed by the loop).
    pending_effects: Vec<crate::engine::goal::GoalEffect>,
    boundary: standing::Boundary,
    paused: tokio::sync::watch::Receiver<bool>,
    /// `/pause` or `/unpause` already said so: the watcher's notice of that change is dropped.
    pause_announced: Option<bool>,
    /// Jobs the user killed: their exit notice starts no turn of its own.
    user_killed: std::collections::HashSet<JobId>,
    /// Exit notices of those jobs, given to the model with the next turn's inputs.
    deferred_notices: Vec<TurnInput>,
    instruction_files: Vec<instructions::InstructionFile>,
    /// The backend or its connection state changed: the status line follows.
    backend_changed: tokio::sync::watch::Receiver<u64>,
}

/// The state_meta key of a session's backend (`/backend`).
pub(super) fn backend_key(session_id: &str) -> String {
    format!("backend:{session_id}")
}

/// Open (or create) the session and start the engine task.
pub async fn start(opts: EngineOptions) -> anyhow::Result<(EngineHandle, JoinHandle<()>)> {
    let (op_tx, op_rx) = mpsc::unbounded_channel();
    let (events, event_rx) = EventSink::channel();
    let cwd = opts.cwd.canonicalize().unwrap_or_else(|_| opts.cwd.clone());
    let cwd_text = cwd.display().to_string();
    let store = opts.store.clone();
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
    // `talaria -c` with nothing to continue here says so instead of starting afresh silently.
    let nothing_to_continue =
        existing.is_none() && matches!(opts.session, SessionChoice::Continue | SessionChoice::ContinueInteractive);
    let (session_id, title) = match existing {
        Some(s) => (s.id, s.title),
        None => {
            let id = store.create_session(&opts.model, &cwd_text, None).await?;
            // A front end that cannot ask the user is `exec`: `talaria -c` passes over it.
            if opts.approval_policy != PromptPolicy::Ask {
                store.mark_headless(&id).await?;
            }
            (id, None)
        }
    };
    let jobs_options =
        JobsOptions { supervisor: SupervisorExe::CurrentExe, sweep: true, attach: Some(session_id.clone()) };
    let (jobs, job_done) = JobsHandle::start_with(&opts.paths, opts.config.clone(), events.clone(), jobs_options);
    jobs.set_workspace(&cwd, &opts.paths);
    let jobs_backends_rx = jobs.backends().subscribe();
    let instruction_files = instructions::discover(&cwd, &opts.paths.user_instructions);
    let (paused, _watch_task) = crate::engine::estop::watch(opts.paths.estop.clone());
    let approver =
        Approver::new(&opts.config, opts.approval_policy, Some(opts.paths.config_file.clone()), events.clone());
    approver.set_sandbox_policy(jobs.sandbox_policy());
    if opts.config.sandbox.mode != crate::config::SandboxMode::Off {
        if let crate::engine::sandbox::Support::Unavailable { reason } = crate::engine::sandbox::support() {
            events.send(Event::notice(
                NoticeLevel::Warn,
                format!("no kernel sandbox: {reason}; every command that is not known safe will ask (approvals act as \"prompt\")"),
            ));
        }
    }
    // Headless runs have no first frame to wait for: their servers start at once, and the
    // first model request waits for them (each within its startup_timeout_s).
    let headless = opts.approval_policy != PromptPolicy::Ask;
    let mcp = crate::engine::mcp::McpHandle::new(
        opts.config.clone(),
        &opts.paths.logs_dir,
        cwd.clone(),
        events.clone(),
        headless,
    );
    if headless {
        mcp.begin();
    }
    let env = TurnEnv {
        provider: opts.provider,
        model: opts.model,
        registry: Registry::standard().with_mcp(mcp),
        config: opts.config.clone(),
        store,
        events: events.clone(),
        jobs,
        approver,
        cwd: Arc::new(Mutex::new(cwd.clone())),
        session_id,
        system_prompt: system_prompt(&opts.config, &cwd, &instruction_files),
    };
    let mut engine = Engine {
        busy_mode: opts.config.agent.busy_input_mode,
        env,
        paths: opts.paths,
        provider_label: opts.provider_label,
        demo: opts.demo,
        ops: op_rx,
        job_done,
        history: Vec::new(),
        omitted: None,
        turn: None,
        compaction: None,
        pending: Arc::new(Mutex::new(Vec::new())),
        queued: VecDeque::new(),
        title,
        meter: ContextMeter::new(opts.config.model.context_window),
        session_usage: Spend::default(),
        last_turn_usage: Spend::default(),
        heartbeat: None,
        goal: GoalMachine::new(opts.config.goals.clone()),
        goal_continuation: None,
        pending_effects: Vec::new(),
        boundary: standing::Boundary::new(),
        paused,
        pause_announced: None,
        user_killed: std::collections::HashSet::new(),
        deferred_notices: Vec::new(),
        backend_changed: jobs_backends_rx,
        instruction_files,
    };
    // The end of the session goes to the front end now; reading the whole of a long session
    // for the model happens on the engine task, before it takes the first op.
    engine.show_session().await?;
    if nothing_to_continue {
        engine.notice(
            NoticeLevel::Info,
            format!("no earlier session in {cwd_text} to continue: this is a new one (talaria sessions list shows the others)"),
        );
    }
    let join = tokio::spawn(async move {
        if let Err(e) = engine.load_context().await {
            tracing::error!(error = %format!("{e:#}"), "cannot load the session");
            engine.notice(NoticeLevel::Error, format!("cannot load session {}: {e:#}", engine.env.session_id));
            return;
        }
        engine.run().await
    });
    Ok((EngineHandle { ops: op_tx, events: event_rx }, join))
}

/// Give the pages freed after reading a long session back to the system: the rows and
/// their copies were tens of MiB that glibc would otherwise keep for the process.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the kernel; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn system_prompt(config: &Config, cwd: &std::path::Path, files: &[instructions::InstructionFile]) -> String {
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

/// Await the running turn, or never (so `select!` can include it unconditionally).
async fn turn_done(turn: &mut Option<RunningTurn>) -> Result<TurnResult, tokio::task::JoinError> {
    match turn {
        Some(t) => (&mut t.join).await,
        None => std::future::pending().await,
    }
}

/// Await the running compaction, or never.
async fn compaction_done(
    c: &mut Option<RunningCompaction>,
) -> Result<Result<Compacted, (Vec<ChatMessage>, String)>, tokio::task::JoinError> {
    match c {
        Some(c) => (&mut c.join).await,
        None => std::future::pending().await,
    }
}

impl Engine {
    fn events(&self) -> &EventSink {
        &self.env.events
    }

    fn notice(&self, level: NoticeLevel, text: impl Into<String>) {
        self.events().send(Event::notice(level, text));
    }

    fn is_paused(&self) -> bool {
        *self.paused.borrow() || crate::engine::estop::is_paused(&self.paths.estop)
    }

    fn phase(&self) -> Phase {
        match (&self.turn, &self.compaction) {
            (Some(t), _) if t.bang => Phase::Bang,
            (Some(_), _) => Phase::Turn,
            (None, Some(_)) => Phase::Compacting,
            (None, None) => Phase::Idle,
        }
    }

    /// What the scheduler decides on. `job_notices`: how long the oldest notice waiting
    /// in the job registry has waited (ms).
    fn snapshot(&self, job_notices: Option<u64>) -> State {
        let now = crate::engine::heartbeat::now_ms();
        State {
            phase: self.phase(),
            busy_mode: self.busy_mode,
            pending: lock(&self.pending).len(),
            queued: self.queued.len(),
            goal_boundary: self.goal.in_boundary(),
            goal_continuation: self.goal_continuation.is_some(),
            job_notices,
            notice_window_ms: (self.env.config.jobs.notice_window_s.max(0.0) * 1000.0) as u64,
            notify_starts_turn: self.env.config.jobs.notify_starts_turn,
            heartbeat_due: self.heartbeat.as_ref().is_some_and(|h| h.due(now, true)),
            paused: self.is_paused(),
        }
    }

    async fn state(&self) -> State {
        self.snapshot(self.env.jobs.notice_wait_ms(&self.env.session_id))
    }

    async fn decide(&self, input: Input) -> Vec<Effect> {
        scheduler::decide(&self.state().await, input)
    }

    async fn run(mut self) {
        loop {
            let wake = self.next_wake_ms();
            tokio::select! {
                op = self.ops.recv() => {
                    let Some(op) = op else { break };
                    if let Op::Shutdown = op {
                        crate::paths::test_panic_point("shutdown");
                        break;
                    }
                    self.handle_op(op).await;
                }
                result = turn_done(&mut self.turn) => self.on_turn_finished(result).await,
                result = compaction_done(&mut self.compaction) => self.on_compaction_finished(result).await,
                Some(_) = self.job_done.recv() => {}
                Some(result) = self.boundary.results.recv() => self.on_boundary_result(result).await,
                changed = self.paused.changed() => {
                    if changed.is_ok() {
                        let paused = *self.paused.borrow();
                        let reason = crate::engine::estop::read(&self.paths.estop).and_then(|i| i.reason);
                        let mut effects = self.decide(Input::PauseChanged { paused, reason }).await;
                        if self.pause_announced.take() == Some(paused) {
                            effects.retain(|e| !matches!(e, Effect::Notice { .. }));
                        }
                        self.perform_all(effects).await;
                    }
                }
                _ = standing::sleep_until_ms(wake) => self.send_status(),
                Ok(()) = self.backend_changed.changed() => self.send_status(),
            }
            let effects = std::mem::take(&mut self.pending_effects);
            self.perform_goal_effects(effects).await;
            let effects = self.decide(Input::Settle).await;
            self.perform_all(effects).await;
        }
        self.shutdown().await;
    }

    async fn shutdown(&mut self) {
        if let Some(c) = self.compaction.take() {
            c.cancel.cancel();
            if let Ok(Ok(Err((history, _)) | Ok(Compacted { history, .. }))) =
                tokio::time::timeout(Duration::from_secs(5), c.join).await
            {
                self.history = history;
            }
        }
        if let Some(turn) = self.turn.take() {
            turn.control.interrupt.cancel();
            self.env.approver.deny_all();
            if let Ok(Ok(result)) = tokio::time::timeout(Duration::from_secs(5), turn.join).await {
                self.history = result.history;
                self.events().send(Event::TurnFinished { outcome: result.outcome });
            }
        }
        // A session nothing was said in is not kept (nor listed, nor continued).
        let _ = self.env.store.delete_if_empty(&self.env.session_id).await;
        if let Some(mcp) = self.env.registry.mcp() {
            mcp.shutdown().await;
        }
        let killed = self.env.jobs.shutdown().await;
        if !killed.is_empty() {
            self.events().send(Event::JobsKilled { jobs: killed });
        }
        self.events().send(Event::ShutdownComplete);
    }

    /// Show the session, then load what the model needs of it (both at once, for commands
    /// that switch sessions; at start-up `start` sends the first part before the rest).
    async fn load_session(&mut self) -> anyhow::Result<()> {
        self.show_session().await?;
        self.load_context().await
    }

    /// The end of the session for the front end: one page of history, the rest on request
    /// (`Op::LoadEarlier`), so a long session is on screen before it is read whole.
    async fn show_session(&mut self) -> anyhow::Result<()> {
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
            busy_mode: self.busy_mode,
            history: items,
            input_history,
            earlier: page.earlier,
        });
        Ok(())
    }

    /// `Op::LoadEarlier`: the page of history before seq `before`.
    async fn send_earlier(&mut self, before: i64) {
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
    /// result), the pending input, instructions, goal and heartbeat.
    async fn load_context(&mut self) -> anyhow::Result<()> {
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
        release_freed_memory();
        // Messages typed but not delivered before talaria last stopped.
        if let Ok(Some(saved)) = self.env.store.meta_get(&self.pending_key()).await {
            if let Ok(messages) = serde_json::from_str::<Vec<String>>(&saved) {
                if !messages.is_empty() {
                    self.events().send(Event::RestoreInput { text: messages.join("\n\n") });
                    self.notice(NoticeLevel::Info, "messages you typed before talaria stopped are back in the input");
                }
            }
            let _ = self.env.store.meta_delete(&self.pending_key()).await;
        }
        if !self.instruction_files.is_empty() {
            self.notice(NoticeLevel::Info, instructions::describe(&self.instruction_files));
        }
        self.load_standing().await;
        crate::engine::turn::send_context(&self.env, &self.meter);
        self.send_status();
        Ok(())
    }

    /// What the model gets of this session, read from the database: the messages from the
    /// last compaction on, repaired (with the fillers to store), and, when they are more
    /// than fit the window, only their end: the rest stays there (`omitted`) for the next
    /// compaction to summarise. An unknown window (0) reads them all.
    async fn read_context(&self) -> anyhow::Result<(Vec<ChatMessage>, Option<OmittedRows>, Vec<ChatMessage>)> {
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

    fn pending_key(&self) -> String {
        format!("pending:{}", self.env.session_id)
    }

    fn send_status(&self) {
        self.events().send(Event::Status(StatusInfo {
            model: self.env.model.clone(),
            session_id: self.env.session_id.clone(),
            busy_mode: Some(self.busy_mode),
            paused: self.is_paused(),
            heartbeat: self.heartbeat.as_ref().map(|h| h.info(crate::engine::heartbeat::now_ms())),
            goal: self.goal.info().filter(|g| g.state != GoalState::Unset).map(Box::new),
            context_pct: (self.meter.window > 0).then(|| self.meter.percent()),
            title: self.title.clone(),
            sandbox: Some(self.env.jobs.sandbox_policy().short_label()),
            backend: self.env.jobs.backends().status_label(),
        }));
    }

    async fn publish_pending(&self) {
        let mut all = lock(&self.pending).clone();
        all.extend(self.queued.iter().cloned());
        self.events().send(Event::PendingChanged { pending: all.clone() });
        let key = self.pending_key();
        if all.is_empty() {
            let _ = self.env.store.meta_delete(&key).await;
        } else {
            let _ = self.env.store.meta_set(&key, &json!(all).to_string()).await;
        }
    }

    async fn handle_op(&mut self, op: Op) {
        match op {
            Op::Submit { text, mode } => self.submit(text, mode).await,
            Op::Interrupt => {
                let effects = self.decide(Input::Interrupt).await;
                self.perform_all(effects).await;
            }
            Op::YieldForeground => {
                let effects = self.decide(Input::YieldForeground).await;
                self.perform_all(effects).await;
            }
            Op::Approve { id, decision } => {
                for effect in self.decide(Input::ApprovalAnswered).await {
                    match effect {
                        Effect::AnswerApproval => self.env.approver.answer(id, decision),
                        other => self.perform(other).await,
                    }
                }
            }
            Op::Command(command) => {
                for effect in self.decide(Input::Command(command.clone())).await {
                    match effect {
                        Effect::RunCommand => self.run_command(command.clone()).await,
                        other => self.perform(other).await,
                    }
                }
            }
            Op::Job { id, action } => self.job_action(id, action),
            Op::LeaveJobs { detach } => self.env.jobs.leave_running(detach),
            Op::FrontEndReady => {
                if let Some(mcp) = self.env.registry.mcp() {
                    mcp.begin();
                }
            }
            Op::LoadEarlier { before } => self.send_earlier(before).await,
            Op::Shutdown => {}
        }
    }

    async fn submit(&mut self, text: String, mode: Option<BusyMode>) {
        if text.trim().is_empty() {
            return;
        }
        // Input history persists per working directory (↑/↓ in the next run too).
        let cwd_text = self.env.cwd().display().to_string();
        let _ = self.env.store.history_push(&cwd_text, &text).await;
        let bang = crate::engine::bang::parse_bang(&text).map(str::to_string);
        let input = if bang.is_some() { Input::Bang } else { Input::Message { mode } };
        for effect in self.decide(input).await {
            match effect {
                Effect::StartTurn(Start::User) => {
                    let (text, missing) = crate::engine::mentions::expand(&text, &self.env.cwd());
                    for path in missing {
                        self.notice(NoticeLevel::Warn, format!("@{path}: no such file here — not attached"));
                    }
                    // Exit notices already waiting go in first (a kill the user just made
                    // among them), rather than in a turn of their own afterwards.
                    for n in self.env.jobs.take_notices(&self.env.session_id).await {
                        if n.kind == NoticeKind::Exit {
                            self.user_killed.remove(&n.id);
                        }
                        self.deferred_notices.push(TurnInput { text: n.text, display_kind: Some(notice_kind(n.kind)) });
                    }
                    self.begin_turn(vec![TurnInput { text, display_kind: None }], TurnTrigger::User);
                }
                Effect::StartBang => {
                    if let Some(command) = &bang {
                        self.begin_bang(command.clone());
                    }
                }
                Effect::AddPending => lock(&self.pending).push(text.clone()),
                Effect::AddQueued => self.queued.push_back(text.clone()),
                Effect::RestoreInput => self.events().send(Event::RestoreInput { text: text.clone() }),
                other => self.perform(other).await,
            }
        }
    }

    async fn perform_all(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            self.perform(effect).await;
        }
    }

    /// Perform one effect that needs nothing but the engine's state. Effects about the
    /// input being handled (its text, its command) are performed by that input's handler.
    async fn perform(&mut self, effect: Effect) {
        match effect {
            Effect::StartTurn(start) => self.start(start).await,
            Effect::PublishPending => self.publish_pending().await,
            Effect::AbortStream => self.signal_turn(|c| &c.redirect_tx),
            Effect::YieldTools => self.signal_turn(|c| &c.yield_tx),
            Effect::ReleaseWait => self.signal_turn(|c| &c.release_tx),
            Effect::InterruptTurn => {
                if let Some(turn) = &self.turn {
                    turn.control.interrupt.cancel();
                }
            }
            Effect::DenyApprovals => self.env.approver.deny_all(),
            Effect::InterruptBoundary => {
                let effects = self.goal.on_interrupt();
                self.boundary.cancel();
                self.pending_effects.extend(effects);
            }
            Effect::CancelCompaction => {
                if let Some(c) = &self.compaction {
                    c.cancel.cancel();
                }
            }
            Effect::RestorePending => {
                // Never dropped, never auto-sent: typed messages go back into the input box.
                let mut back: Vec<String> = std::mem::take(&mut *lock(&self.pending));
                back.extend(self.queued.drain(..));
                if !back.is_empty() {
                    self.events().send(Event::RestoreInput { text: back.join("\n\n") });
                }
            }
            Effect::Notice { level, text } => self.notice(level, text),
            Effect::SendStatus => self.send_status(),
            Effect::StartBang
            | Effect::AddPending
            | Effect::AddQueued
            | Effect::AnswerApproval
            | Effect::RestoreInput
            | Effect::GoalTurnEnded
            | Effect::RunCommand => {
                tracing::error!(?effect, "an effect reached the engine without the input it belongs to");
            }
        }
    }

    fn signal_turn(&self, which: impl Fn(&TurnControl) -> &Arc<tokio::sync::watch::Sender<u64>>) {
        if let Some(turn) = &self.turn {
            TurnControl::bump(which(&turn.control));
        }
    }

    /// Start what the scheduler chose to run next.
    async fn start(&mut self, start: Start) {
        match start {
            // The user's own message is started by `submit`, which holds its text.
            Start::User => {}
            Start::Pending => {
                let pending: Vec<String> = std::mem::take(&mut *lock(&self.pending));
                self.publish_pending().await;
                self.begin_turn(
                    vec![TurnInput { text: pending.join("\n\n"), display_kind: None }],
                    TurnTrigger::Queued,
                );
            }
            Start::Queued => {
                let Some(text) = self.queued.pop_front() else { return };
                self.publish_pending().await;
                self.begin_turn(vec![TurnInput { text, display_kind: None }], TurnTrigger::Queued);
            }
            Start::Goal => {
                let Some(prompt) = self.goal_continuation.take() else { return };
                self.begin_turn(
                    vec![TurnInput { text: prompt, display_kind: Some(DisplayKind::Goal) }],
                    TurnTrigger::Goal,
                );
                self.send_status();
            }
            Start::JobNotices => {
                let notices = self.env.jobs.take_notices(&self.env.session_id).await;
                // A kill the user made is news to the model, not a reason to start a turn:
                // it is noted with the next turn's inputs. Notices that came within the
                // window (exits, watch matches) start one turn together.
                let (mine, theirs): (Vec<_>, Vec<_>) =
                    notices.into_iter().partition(|n| n.kind == NoticeKind::Exit && self.user_killed.remove(&n.id));
                let notice = |n: crate::engine::jobs::JobNotice| TurnInput {
                    text: n.text,
                    display_kind: Some(notice_kind(n.kind)),
                };
                for n in &mine {
                    self.notice(
                        NoticeLevel::Info,
                        format!("{} killed: the model hears of it with your next message", n.id),
                    );
                }
                self.deferred_notices.extend(mine.into_iter().map(notice));
                if theirs.is_empty() {
                    return;
                }
                self.begin_turn(theirs.into_iter().map(notice).collect(), TurnTrigger::JobNotification);
            }
            Start::Heartbeat => self.fire_heartbeat().await,
        }
    }

    fn begin_turn(&mut self, inputs: Vec<TurnInput>, trigger: TurnTrigger) {
        let mut inputs = inputs;
        if !self.deferred_notices.is_empty() {
            let mut all = std::mem::take(&mut self.deferred_notices);
            all.append(&mut inputs);
            inputs = all;
        }
        let control = TurnControl::new(self.pending.clone());
        let history = std::mem::take(&mut self.history);
        let omitted = self.omitted;
        let env = self.env.clone();
        let ctl = control.clone();
        let meter = self.meter;
        self.spawn_watchdog(&control);
        let join = tokio::spawn(async move { run_turn(env, ctl, history, omitted, inputs, trigger, meter).await });
        self.turn = Some(RunningTurn { control, join, bang: false });
    }

    /// `!cmd`: the user's own command, run as a foreground job in the transcript (Esc stops
    /// it, Ctrl+B backgrounds it); its output tail becomes context for the next message.
    fn begin_bang(&mut self, command: String) {
        let control = TurnControl::new(self.pending.clone());
        let history = std::mem::take(&mut self.history);
        let omitted = self.omitted;
        let env = self.env.clone();
        let ctl = control.clone();
        let meter = self.meter;
        let join =
            tokio::spawn(
                async move { crate::engine::turn::run_bang(env, ctl, history, omitted, command, meter).await },
            );
        self.turn = Some(RunningTurn { control, join, bang: true });
    }

    async fn on_turn_finished(&mut self, result: Result<TurnResult, tokio::task::JoinError>) {
        // Decide while the turn still counts as running (its phase says turn or `!command`).
        let state = self.state().await;
        self.turn = None;
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                // The turn task itself panicked: the history it owned is lost from memory but
                // every completed message is in the store, so reload from there.
                tracing::error!(error = %e, "turn task failed");
                self.notice(
                    NoticeLevel::Error,
                    format!("the turn crashed: {e}; reloading the session from the database"),
                );
                (self.history, self.omitted) = match self.read_context().await {
                    Ok((history, omitted, _)) => (history, omitted),
                    Err(_) => (Vec::new(), None),
                };
                self.events().send(Event::TurnFinished { outcome: TurnOutcome::Failed });
                return;
            }
        };
        self.history = result.history;
        self.omitted = result.omitted;
        self.meter = result.meter;
        self.events().send(Event::TurnFinished { outcome: result.outcome });
        if !result.usage.is_empty() {
            let cost = cost_of(&self.env.config.prices, self.env.provider.kind(), &self.env.model, &result.usage);
            self.last_turn_usage = Spend::default();
            self.last_turn_usage.add(&result.usage, cost);
            self.session_usage.add(&result.usage, cost);
        }
        if result.usage.prompt_tokens + result.usage.completion_tokens > 0 {
            let _ = self
                .env
                .store
                .add_usage(&self.env.session_id, result.usage.prompt_tokens, result.usage.completion_tokens)
                .await;
        }
        for effect in scheduler::decide(&state, Input::TurnFinished { outcome: result.outcome }) {
            match effect {
                Effect::GoalTurnEnded => {
                    let last_reply = self
                        .history
                        .iter()
                        .rev()
                        .find(|m| m.role == crate::engine::llm::Role::Assistant)
                        .map(|m| m.text().to_string())
                        .unwrap_or_default();
                    let effects = self.goal.on_turn_end(result.outcome, &last_reply);
                    self.pending_effects.extend(effects);
                }
                other => self.perform(other).await,
            }
        }
    }

    /// A job action from the UI runs as its own task: reading a large log must not hold up
    /// the engine loop (a redirect or interrupt typed meanwhile is handled at once).
    fn job_action(&mut self, id: JobId, action: JobAction) {
        if action == JobAction::Kill {
            self.user_killed.insert(id.clone());
        }
        let jobs = self.env.jobs.clone();
        let events = self.env.events.clone();
        let poll = action == JobAction::Poll;
        tokio::spawn(async move {
            let event = jobs.ui_action(&id, action).await;
            // A poll the user asked for says what it found (the pane alone may be hidden).
            if let (true, Event::JobUpdated { id, status, tail }) = (poll, &event) {
                events.send(Event::notice(NoticeLevel::Info, poll_text(id, status, tail)));
            }
            events.send(event)
        });
    }
}

/// What `/jobs poll` (or `p`) found: the status and the last line of output.
fn poll_text(id: &str, status: &crate::protocol::JobStatus, tail: &str) -> String {
    let last = crate::emulate::plain(tail);
    let last = last.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let state = match status {
        crate::protocol::JobStatus::Reconnecting => "is reconnecting (it runs on over there)".to_string(),
        _ if status.is_running() => "is running".to_string(),
        _ => status.label(),
    };
    if last.is_empty() {
        format!("{id} {state} · no output{}", if status.is_running() { " yet" } else { "" })
    } else {
        format!("{id} {state} · last output: {last}")
    }
}

#[cfg(test)]
mod poll_tests {
    use super::poll_text;
    use crate::protocol::JobStatus;

    #[test]
    fn a_poll_says_the_status_and_the_last_line() {
        assert_eq!(
            poll_text("job_3", &JobStatus::Running, "tick 1\n\x1b[32mtick 2\x1b[0m\n\n"),
            "job_3 is running · last output: tick 2"
        );
        assert_eq!(poll_text("job_4", &JobStatus::Exited(0), ""), "job_4 exited 0 · no output");
    }
}
