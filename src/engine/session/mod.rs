//! The engine task: owns the session, receives `Op`, starts turns, emits `Event`.
//! All effects happen here; deciding what a typed message does while busy is
//! `route_busy_message` (pure).

mod standing;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::engine::approval::{Approver, PromptPolicy};
use crate::engine::context::ContextMeter;
use crate::engine::goal::GoalMachine;
use crate::engine::heartbeat::Heartbeat;
use crate::engine::jobs::{JobsHandle, JobsOptions, ReaperMode};
use crate::engine::llm::spend::{cost_of, Spend};
use crate::engine::llm::{ChatMessage, Provider};
use crate::engine::store::Store;
use crate::engine::tools::Registry;
use crate::engine::turn::{lock, run_turn, TurnControl, TurnEnv, TurnInput, TurnResult};
use crate::engine::EventSink;
use crate::engine::{compaction, history, instructions};
use crate::paths::Paths;
use crate::protocol::commands::{JobsCmd, SlashCommand};
use crate::protocol::{
    BusyMode, EngineHandle, Event, JobAction, JobId, NoticeLevel, Op, StatusInfo, TurnOutcome, TurnTrigger,
};

pub const SYSTEM_PROMPT: &str = include_str!("../../../assets/system_prompt.md");

/// Which session to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionChoice {
    New,
    /// The most recent session started in this working directory (a new one if none).
    Continue,
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
    /// Start the `talaria __reaper` guard process (off in library tests).
    pub reaper: bool,
}

/// What a message typed while a turn runs does (DESIGN §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyRoute {
    /// Add to the messages delivered at the next delivery point.
    pub pending: bool,
    /// Add to the messages run as later turns.
    pub queue: bool,
    /// Abort a model stream in progress.
    pub abort_stream: bool,
    /// Ask running tools to yield (foreground commands become jobs).
    pub yield_tools: bool,
    /// Release a `process wait` early.
    pub release_wait: bool,
}

pub fn route_busy_message(mode: BusyMode) -> BusyRoute {
    match mode {
        BusyMode::Redirect => {
            BusyRoute { pending: true, queue: false, abort_stream: true, yield_tools: true, release_wait: true }
        }
        BusyMode::Steer => {
            BusyRoute { pending: true, queue: false, abort_stream: false, yield_tools: false, release_wait: true }
        }
        BusyMode::Queue => {
            BusyRoute { pending: false, queue: true, abort_stream: false, yield_tools: false, release_wait: false }
        }
    }
}

struct RunningTurn {
    control: TurnControl,
    join: JoinHandle<TurnResult>,
    /// A `!command` run, not a model turn (goals do not count it).
    bang: bool,
}

struct Engine {
    env: TurnEnv,
    paths: Paths,
    provider_label: String,
    demo: bool,
    ops: mpsc::UnboundedReceiver<Op>,
    job_done: mpsc::UnboundedReceiver<JobId>,
    history: Vec<ChatMessage>,
    turn: Option<RunningTurn>,
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
    instruction_files: Vec<instructions::InstructionFile>,
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
        SessionChoice::Resume(key) => Some(
            store
                .find_session(key)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no session matches '{key}'; `talaria sessions list` shows them"))?,
        ),
    };
    let (session_id, title) = match existing {
        Some(s) => (s.id, s.title),
        None => (store.create_session(&opts.model, &cwd_text, None).await?, None),
    };
    let jobs_options =
        JobsOptions { reaper: if opts.reaper { ReaperMode::CurrentExe } else { ReaperMode::Off }, sweep: true };
    let (jobs, job_done) = JobsHandle::start_with(&opts.paths, opts.config.clone(), events.clone(), jobs_options);
    let instruction_files = instructions::discover(&cwd, &opts.paths.user_instructions);
    let (paused, _watch_task) = crate::engine::estop::watch(opts.paths.estop.clone());
    let approver =
        Approver::new(&opts.config, opts.approval_policy, Some(opts.paths.config_file.clone()), events.clone());
    let env = TurnEnv {
        provider: opts.provider,
        model: opts.model,
        registry: Registry::standard(),
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
        turn: None,
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
        instruction_files,
    };
    engine.load_session().await?;
    let join = tokio::spawn(async move { engine.run().await });
    Ok((EngineHandle { ops: op_tx, events: event_rx }, join))
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

impl Engine {
    fn events(&self) -> &EventSink {
        &self.env.events
    }

    fn notice(&self, level: NoticeLevel, text: impl Into<String>) {
        self.events().send(Event::notice(level, text));
    }

    fn is_busy(&self) -> bool {
        self.turn.is_some()
    }

    fn is_paused(&self) -> bool {
        *self.paused.borrow() || crate::engine::estop::is_paused(&self.paths.estop)
    }

    /// DESIGN §3: no turn, gate run, judge call or approval in progress; no queued or
    /// pending message; no goal continuation due; not paused.
    fn is_idle(&self) -> bool {
        self.turn.is_none()
            && !self.goal.in_boundary()
            && lock(&self.pending).is_empty()
            && self.queued.is_empty()
            && self.goal_continuation.is_none()
            && !self.is_paused()
    }

    async fn run(mut self) {
        loop {
            let wake = self.next_wake_ms();
            tokio::select! {
                op = self.ops.recv() => {
                    let Some(op) = op else { break };
                    if let Op::Shutdown = op {
                        break;
                    }
                    self.handle_op(op).await;
                }
                result = turn_done(&mut self.turn) => {
                    let bang = self.turn.take().is_some_and(|t| t.bang);
                    self.on_turn_finished(result, bang).await;
                }
                Some(_) = self.job_done.recv() => {}
                Some(result) = self.boundary.results.recv() => self.on_boundary_result(result).await,
                changed = self.paused.changed() => {
                    if changed.is_ok() {
                        let paused = *self.paused.borrow();
                        self.notice(
                            if paused { NoticeLevel::Warn } else { NoticeLevel::Info },
                            if paused { "PAUSED: no heartbeat, goal, queued message or job notice runs until unpaused" } else { "unpaused" },
                        );
                        self.send_status();
                    }
                }
                _ = standing::sleep_until_ms(wake) => self.on_timer().await,
            }
            let effects = std::mem::take(&mut self.pending_effects);
            self.perform_goal_effects(effects).await;
            self.start_next_turn().await;
        }
        self.shutdown().await;
    }

    async fn shutdown(&mut self) {
        if let Some(turn) = self.turn.take() {
            turn.control.interrupt.cancel();
            self.env.approver.deny_all();
            if let Ok(Ok(result)) = tokio::time::timeout(Duration::from_secs(5), turn.join).await {
                self.history = result.history;
                self.events().send(Event::TurnFinished { outcome: result.outcome });
            }
        }
        let killed = self.env.jobs.shutdown().await;
        if killed > 0 {
            self.notice(NoticeLevel::Info, format!("killed {killed} running job(s)"));
        }
        self.events().send(Event::ShutdownComplete);
    }

    async fn load_session(&mut self) -> anyhow::Result<()> {
        let rows = self.env.store.load_messages(&self.env.session_id).await?;
        let history: Vec<ChatMessage> = compaction::context_rows(&rows).iter().filter_map(history::to_chat).collect();
        let (history, fillers) = history::repair(history);
        for filler in &fillers {
            crate::engine::turn::persist(&self.env, filler, None).await;
        }
        self.history = history;
        let mut rows = rows;
        if !fillers.is_empty() {
            rows = self.env.store.load_messages(&self.env.session_id).await?;
        }
        let items = history::to_items(&rows, &self.env.registry);
        let mut all = crate::engine::turn::fixed_context(&self.env);
        all.extend_from_slice(&self.history);
        self.meter.reset(&all);
        let cwd_text = self.env.cwd().display().to_string();
        let input_history = self.env.store.history_list(&cwd_text, 500).await.unwrap_or_default();
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
        });
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

    fn pending_key(&self) -> String {
        format!("pending:{}", self.env.session_id)
    }

    fn send_status(&self) {
        self.events().send(Event::Status(StatusInfo {
            model: self.env.model.clone(),
            session_id: self.env.session_id.clone(),
            busy_mode: Some(self.busy_mode),
            paused: self.is_paused(),
            heartbeat: self.heartbeat.as_ref().map(|h| h.status_text(crate::engine::heartbeat::now_ms())),
            goal: self.goal.row(),
            context_pct: (self.meter.window > 0).then(|| self.meter.percent()),
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
            Op::Interrupt => self.interrupt(),
            Op::YieldForeground => match &self.turn {
                Some(turn) => TurnControl::bump(&turn.control.yield_tx),
                None => self.notice(NoticeLevel::Info, "nothing is running in the foreground"),
            },
            Op::Approve { id, decision } => self.env.approver.answer(id, decision),
            Op::Command(command) => self.command(command).await,
            Op::Job { id, action } => self.job_action(id, action).await,
            Op::Shutdown => {}
        }
    }

    fn interrupt(&mut self) {
        match &self.turn {
            Some(turn) => {
                turn.control.interrupt.cancel();
                self.env.approver.deny_all();
            }
            None if self.goal.in_boundary() => {
                let effects = self.goal.on_interrupt();
                self.boundary.cancel();
                self.pending_effects.extend(effects);
            }
            None => self.notice(NoticeLevel::Info, "nothing to interrupt"),
        }
    }

    async fn submit(&mut self, text: String, mode: Option<BusyMode>) {
        if text.trim().is_empty() {
            return;
        }
        // Input history persists per working directory (↑/↓ in the next run too).
        let cwd_text = self.env.cwd().display().to_string();
        let _ = self.env.store.history_push(&cwd_text, &text).await;
        if let Some(command) = crate::engine::bang::parse_bang(&text) {
            if self.turn.is_some() {
                self.notice(
                    NoticeLevel::Warn,
                    "`!command` runs when the agent is idle; press Esc to stop the turn first",
                );
                self.events().send(Event::RestoreInput { text });
            } else {
                self.begin_bang(command.to_string());
            }
            return;
        }
        let Some(turn) = &self.turn else {
            if self.is_paused() {
                self.notice(
                    NoticeLevel::Warn,
                    "paused: nothing is sent to the model until `/unpause` (or `talaria unpause`)",
                );
                self.events().send(Event::RestoreInput { text });
                return;
            }
            let text = crate::engine::mentions::expand(&text, &self.env.cwd());
            self.begin_turn(vec![TurnInput { text, display_kind: None }], TurnTrigger::User);
            return;
        };
        let route = route_busy_message(mode.unwrap_or(self.busy_mode));
        let control = turn.control.clone();
        if route.queue {
            self.queued.push_back(text);
        } else if route.pending {
            lock(&self.pending).push(text);
        }
        if route.release_wait {
            TurnControl::bump(&control.release_tx);
        }
        if route.abort_stream {
            TurnControl::bump(&control.redirect_tx);
        }
        if route.yield_tools {
            TurnControl::bump(&control.yield_tx);
        }
        self.publish_pending().await;
    }

    fn begin_turn(&mut self, inputs: Vec<TurnInput>, trigger: TurnTrigger) {
        let control = TurnControl::new(self.pending.clone());
        let history = std::mem::take(&mut self.history);
        let env = self.env.clone();
        let ctl = control.clone();
        let meter = self.meter;
        self.spawn_watchdog(&control);
        let join = tokio::spawn(async move { run_turn(env, ctl, history, inputs, trigger, meter).await });
        self.turn = Some(RunningTurn { control, join, bang: false });
    }

    /// `!cmd`: the user's own command, run as a foreground job in the transcript (Esc stops
    /// it, Ctrl+B backgrounds it); its output tail becomes context for the next message.
    fn begin_bang(&mut self, command: String) {
        let control = TurnControl::new(self.pending.clone());
        let history = std::mem::take(&mut self.history);
        let env = self.env.clone();
        let ctl = control.clone();
        let meter = self.meter;
        let join = tokio::spawn(async move { crate::engine::turn::run_bang(env, ctl, history, command, meter).await });
        self.turn = Some(RunningTurn { control, join, bang: true });
    }

    async fn on_turn_finished(&mut self, result: Result<TurnResult, tokio::task::JoinError>, bang: bool) {
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
                let rows = self.env.store.load_messages(&self.env.session_id).await.unwrap_or_default();
                let context = compaction::context_rows(&rows);
                self.history = history::repair(context.iter().filter_map(history::to_chat).collect()).0;
                self.events().send(Event::TurnFinished { outcome: TurnOutcome::Failed });
                return;
            }
        };
        self.history = result.history;
        self.meter = result.meter;
        self.events().send(Event::TurnFinished { outcome: result.outcome });
        if !result.usage.is_empty() {
            let cost = cost_of(&self.env.config.prices, self.env.provider.kind(), &self.env.model, &result.usage);
            self.last_turn_usage = Spend::default();
            self.last_turn_usage.add(&result.usage, cost);
            self.session_usage.add(&result.usage, cost);
        }
        let last_reply = self
            .history
            .iter()
            .rev()
            .find(|m| m.role == crate::engine::llm::Role::Assistant)
            .map(|m| m.text().to_string())
            .unwrap_or_default();
        if !bang {
            let effects = self.goal.on_turn_end(result.outcome, &last_reply);
            self.pending_effects.extend(effects);
        }
        if result.usage.prompt_tokens + result.usage.completion_tokens > 0 {
            let _ = self
                .env
                .store
                .add_usage(&self.env.session_id, result.usage.prompt_tokens, result.usage.completion_tokens)
                .await;
        }
        if result.outcome == TurnOutcome::Interrupted {
            // Never dropped, never auto-sent: typed messages go back into the input box.
            let mut back: Vec<String> = std::mem::take(&mut *lock(&self.pending));
            back.extend(self.queued.drain(..));
            if !back.is_empty() {
                self.events().send(Event::RestoreInput { text: back.join("\n\n") });
            }
            self.publish_pending().await;
        }
    }

    /// When idle: leftover pending messages, then queued ones, then job notices.
    async fn start_next_turn(&mut self) {
        if self.is_busy() || self.is_paused() {
            return;
        }
        let pending: Vec<String> = std::mem::take(&mut *lock(&self.pending));
        if !pending.is_empty() {
            self.publish_pending().await;
            self.begin_turn(vec![TurnInput { text: pending.join("\n\n"), display_kind: None }], TurnTrigger::Queued);
            return;
        }
        if let Some(text) = self.queued.pop_front() {
            self.publish_pending().await;
            self.begin_turn(vec![TurnInput { text, display_kind: None }], TurnTrigger::Queued);
            return;
        }
        if self.goal.in_boundary() {
            return;
        }
        if let Some(prompt) = self.goal_continuation.take() {
            self.begin_turn(vec![TurnInput { text: prompt, display_kind: Some("goal".into()) }], TurnTrigger::Goal);
            self.send_status();
            return;
        }
        if self.env.config.jobs.notify_starts_turn {
            let notices = self.env.jobs.take_exit_notices(&self.env.session_id).await;
            if !notices.is_empty() {
                let inputs = notices
                    .into_iter()
                    .map(|n| TurnInput { text: n.text, display_kind: Some("job_notice".into()) })
                    .collect();
                self.begin_turn(inputs, TurnTrigger::JobNotification);
                return;
            }
        }
        self.maybe_fire_heartbeat().await;
    }

    /// A job action from the UI runs as its own task: reading a large log must not hold up
    /// the engine loop (a redirect or interrupt typed meanwhile is handled at once).
    async fn job_action(&mut self, id: JobId, action: JobAction) {
        let jobs = self.env.jobs.clone();
        let events = self.env.events.clone();
        tokio::spawn(async move { events.send(jobs.ui_action(&id, action).await) });
    }

    async fn command(&mut self, command: SlashCommand) {
        let busy = self.is_busy();
        let refuse = |name: &str| format!("{name} is not available while a turn runs; press Esc to stop it first");
        match command {
            SlashCommand::Stop => self.interrupt(),
            SlashCommand::New if busy => self.notice(NoticeLevel::Warn, refuse("/new")),
            SlashCommand::New => {
                let cwd = self.env.cwd().display().to_string();
                match self.env.store.create_session(&self.env.model, &cwd, None).await {
                    Ok(id) => {
                        self.env.session_id = id;
                        self.title = None;
                        self.queued.clear();
                        lock(&self.pending).clear();
                        if let Err(e) = self.load_session().await {
                            self.notice(NoticeLevel::Error, format!("could not open the new session: {e}"));
                        }
                    }
                    Err(e) => self.notice(NoticeLevel::Error, format!("could not create a session: {e}")),
                }
            }
            SlashCommand::Resume(_) if busy => self.notice(NoticeLevel::Warn, refuse("/resume")),
            SlashCommand::Resume(None) | SlashCommand::Sessions => self.list_sessions().await,
            SlashCommand::Resume(Some(key)) => match self.env.store.find_session(&key).await {
                Ok(Some(s)) => {
                    self.env.session_id = s.id;
                    self.title = s.title;
                    if let Err(e) = self.load_session().await {
                        self.notice(NoticeLevel::Error, format!("could not resume: {e}"));
                    }
                }
                Ok(None) => self.notice(NoticeLevel::Error, format!("no session matches '{key}'")),
                Err(e) => self.notice(NoticeLevel::Error, format!("could not search sessions: {e}")),
            },
            SlashCommand::Title(title) => match self.env.store.set_title(&self.env.session_id, &title).await {
                Ok(()) => {
                    self.title = Some(title.clone());
                    self.notice(NoticeLevel::Info, format!("session titled \"{title}\""));
                }
                Err(e) => self.notice(NoticeLevel::Error, format!("could not set the title: {e}")),
            },
            SlashCommand::Retry if busy => self.notice(NoticeLevel::Warn, refuse("/retry")),
            SlashCommand::Retry => self.retry().await,
            SlashCommand::Undo(_) if busy => self.notice(NoticeLevel::Warn, refuse("/undo")),
            SlashCommand::Undo(n) => self.undo(n).await,
            SlashCommand::Busy(None) => self.notice(
                NoticeLevel::Info,
                format!("busy mode: {} (redirect | steer | queue)", self.busy_mode.as_str()),
            ),
            SlashCommand::Busy(Some(mode)) => {
                self.busy_mode = mode;
                let saved =
                    crate::config_edit::set_string(&self.paths.config_file, "agent", "busy_input_mode", mode.as_str());
                match saved {
                    Ok(()) => self.notice(NoticeLevel::Info, format!("busy mode: {} (saved)", mode.as_str())),
                    Err(e) => self.notice(NoticeLevel::Warn, format!("busy mode: {} (not saved: {e})", mode.as_str())),
                }
                self.send_status();
            }
            SlashCommand::Jobs(JobsCmd::List) => {
                let jobs = self.env.jobs.list().await;
                if jobs.is_empty() {
                    self.notice(NoticeLevel::Info, "no background jobs");
                } else {
                    let lines: Vec<String> = jobs
                        .iter()
                        .map(|j| format!("{}  {:<10} {}  {}", j.id, j.status.label(), j.command, j.last_line))
                        .collect();
                    self.notice(NoticeLevel::Info, lines.join("\n"));
                }
            }
            SlashCommand::Jobs(JobsCmd::Log(id)) => {
                self.job_action(id, JobAction::Log { offset: None, limit: None }).await
            }
            SlashCommand::Jobs(JobsCmd::Poll(id)) => self.job_action(id, JobAction::Poll).await,
            SlashCommand::Jobs(JobsCmd::Kill(id)) => self.job_action(id, JobAction::Kill).await,
            SlashCommand::Model(None) => match self.env.provider.list_models().await {
                Ok(models) => self
                    .notice(NoticeLevel::Info, format!("model: {} · available: {}", self.env.model, models.join(", "))),
                Err(e) => {
                    self.notice(NoticeLevel::Warn, format!("model: {} · could not list models: {e}", self.env.model))
                }
            },
            SlashCommand::Model(Some(_)) if busy => self.notice(NoticeLevel::Warn, refuse("/model")),
            SlashCommand::Model(Some(name)) => {
                self.env.model = name.clone();
                self.notice(NoticeLevel::Info, format!("model for this session: {name}"));
                self.send_status();
            }
            SlashCommand::Heartbeat(cmd) => self.heartbeat_command(&cmd).await,
            SlashCommand::Usage => {
                let priced = self.env.config.prices.find(self.env.provider.kind(), &self.env.model).is_some();
                let unpriced = if priced { "" } else { " (no price for this model in [prices]: tokens only)" };
                self.notice(
                    NoticeLevel::Info,
                    format!(
                        "this session: {} · last turn: {} · {}{unpriced}",
                        self.session_usage.describe(),
                        self.last_turn_usage.describe(),
                        self.meter.label()
                    ),
                );
            }
            SlashCommand::Compact(_) if busy => self.notice(NoticeLevel::Warn, refuse("/compact")),
            SlashCommand::Compact(focus) => self.compact(focus.as_deref()).await,
            SlashCommand::Goal(cmd) => {
                // Nothing running that the goal must wait for. A pause or a queued message
                // does not count: the continuation waits for them in `start_next_turn`
                // (a goal set while paused would otherwise never start).
                let idle = !busy && !self.goal.in_boundary();
                let effects = self.goal.command(&cmd, idle);
                self.perform_goal_effects(effects).await;
                if self.goal_continuation.is_some() && self.is_paused() {
                    self.notice(NoticeLevel::Info, "◎ paused: the goal starts when you unpause");
                }
                self.send_status();
            }
            SlashCommand::Pause(reason) => {
                match crate::engine::estop::pause(&self.paths.estop, reason.as_deref()) {
                    Ok(_) => self.notice(
                        NoticeLevel::Warn,
                        "paused: no heartbeat, goal, queued message or job notice runs until /unpause",
                    ),
                    Err(e) => self.notice(NoticeLevel::Error, format!("could not pause: {e}")),
                }
                self.send_status();
            }
            SlashCommand::Unpause => {
                match crate::engine::estop::unpause(&self.paths.estop) {
                    Ok(true) => self.notice(NoticeLevel::Info, "unpaused"),
                    Ok(false) => self.notice(NoticeLevel::Info, "not paused"),
                    Err(e) => self.notice(NoticeLevel::Error, format!("could not unpause: {e}")),
                }
                self.send_status();
            }
        }
    }

    async fn list_sessions(&self) {
        match self.env.store.list_sessions(20).await {
            Ok(sessions) if sessions.is_empty() => self.notice(NoticeLevel::Info, "no sessions yet"),
            Ok(sessions) => {
                let lines: Vec<String> = sessions
                    .iter()
                    .map(|s| {
                        format!(
                            "{}  {:<30} {:>4} msgs  {}",
                            s.id,
                            s.title.clone().unwrap_or_else(|| "(untitled)".into()),
                            s.message_count,
                            s.first_line
                        )
                    })
                    .collect();
                self.notice(NoticeLevel::Info, format!("{}\n/resume <id|title> to open one", lines.join("\n")));
            }
            Err(e) => self.notice(NoticeLevel::Error, format!("could not list sessions: {e}")),
        }
    }

    async fn reload_history(&mut self) -> anyhow::Result<()> {
        self.load_session().await
    }

    async fn retry(&mut self) {
        match self.env.store.deactivate_last_exchanges(&self.env.session_id, 1).await {
            Ok(Some(text)) => {
                if let Err(e) = self.reload_history().await {
                    self.notice(NoticeLevel::Error, format!("could not reload the session: {e}"));
                    return;
                }
                self.begin_turn(vec![TurnInput { text, display_kind: None }], TurnTrigger::Retry);
            }
            Ok(None) => self.notice(NoticeLevel::Info, "nothing to retry"),
            Err(e) => self.notice(NoticeLevel::Error, format!("could not retry: {e}")),
        }
    }

    async fn undo(&mut self, n: usize) {
        match self.env.store.deactivate_last_exchanges(&self.env.session_id, n).await {
            Ok(Some(text)) => {
                if let Err(e) = self.reload_history().await {
                    self.notice(NoticeLevel::Error, format!("could not reload the session: {e}"));
                    return;
                }
                self.events().send(Event::RestoreInput { text });
                self.notice(
                    NoticeLevel::Info,
                    format!("removed the last {n} exchange(s); the message is back in the input"),
                );
            }
            Ok(None) => self.notice(NoticeLevel::Info, "nothing to undo"),
            Err(e) => self.notice(NoticeLevel::Error, format!("could not undo: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_routing_matches_the_design_table() {
        let r = route_busy_message(BusyMode::Redirect);
        assert!(r.pending && r.abort_stream && r.yield_tools && r.release_wait && !r.queue);
        let s = route_busy_message(BusyMode::Steer);
        assert!(s.pending && !s.abort_stream && !s.yield_tools && s.release_wait && !s.queue);
        let q = route_busy_message(BusyMode::Queue);
        assert!(!q.pending && !q.abort_stream && !q.yield_tools && !q.release_wait && q.queue);
    }

    #[test]
    fn redirect_interrupts_both_phases_and_delivers_at_once() {
        assert_eq!(
            route_busy_message(BusyMode::Redirect),
            BusyRoute { pending: true, queue: false, abort_stream: true, yield_tools: true, release_wait: true }
        );
    }

    #[test]
    fn steer_waits_for_the_running_tools_but_not_for_a_process_wait() {
        assert_eq!(
            route_busy_message(BusyMode::Steer),
            BusyRoute { pending: true, queue: false, abort_stream: false, yield_tools: false, release_wait: true }
        );
    }

    #[test]
    fn queue_touches_nothing_running() {
        assert_eq!(
            route_busy_message(BusyMode::Queue),
            BusyRoute { pending: false, queue: true, abort_stream: false, yield_tools: false, release_wait: false }
        );
    }

    #[test]
    fn every_mode_keeps_the_message_exactly_once() {
        for mode in [BusyMode::Redirect, BusyMode::Steer, BusyMode::Queue] {
            let r = route_busy_message(mode);
            assert!(r.pending ^ r.queue, "{mode:?} goes to exactly one of pending and queued");
            assert!(!r.abort_stream || r.pending, "{mode:?}: an aborted stream is followed by the message");
            assert!(!r.yield_tools || r.pending, "{mode:?}: yielded tools are followed by the message");
        }
    }
}
