//! The engine task: owns the session, receives `Op`, emits `Event`. It decides nothing by
//! itself: each input goes to the `Scheduler`, which owns the scheduling state, and `perform`
//! carries out what it says, one effect at a time. Opening a session is in `load`, turns and
//! `!commands` in `turns`, slash commands in `commands`, standing work (heartbeat, goal,
//! compaction) in `standing`.

mod commands;
mod load;
mod rewind;
mod standing;
mod turns;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::engine::approval::PromptPolicy;
use crate::engine::compaction::Compacted;
use crate::engine::context::ContextMeter;
use crate::engine::goal::GoalMachine;
use crate::engine::heartbeat::Heartbeat;
use crate::engine::llm::spend::Spend;
use crate::engine::llm::{ChatMessage, Provider};
use crate::engine::scheduler::{Due, Effect, Input, JobNote, Scheduler, UserMessage};
use crate::engine::store::{OmittedRows, Store};
use crate::engine::turn::{notice_origin, TurnAsk, TurnControl, TurnEnv, TurnResult};
use crate::engine::EventSink;
use crate::engine::{estop, instructions};
use crate::paths::Paths;
use crate::protocol::{Event, GoalState, JobId, NoticeLevel, Op, StatusInfo};

pub use load::{start, SessionChoice, HISTORY_PAGE};

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
    /// A sub-agent's: its parent's sandbox policy, which its jobs run under as it is (so a
    /// sub-agent never has more than its parent, whatever its own directory).
    pub inherited_sandbox: Option<crate::engine::sandbox::Policy>,
}

/// A model turn or `!command` running as its own task.
struct RunningTurn {
    control: TurnControl,
    join: JoinHandle<TurnResult>,
    /// The turn's liveness watchdog, stopped when the turn is over (else it outlived every
    /// turn and, `timeout_s` after a finished one, "interrupted" it with an error notice).
    _watchdog: Option<tokio_util::sync::DropGuard>,
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
    /// The owner of what is pending, queued, held back and the phase.
    scheduler: Scheduler,
    turn: Option<RunningTurn>,
    compaction: Option<RunningCompaction>,
    /// What the running turn asks at its delivery points...
    asks: mpsc::UnboundedReceiver<TurnAsk>,
    asks_tx: mpsc::UnboundedSender<TurnAsk>,
    /// ...the answer owed to its last question...
    reply: Option<oneshot::Sender<Vec<UserMessage>>>,
    /// ...and how many messages wait for its next delivery point.
    waiting: watch::Sender<usize>,
    title: Option<String>,
    meter: ContextMeter,
    session_usage: Spend,
    last_turn_usage: Spend,
    heartbeat: Option<Heartbeat>,
    goal: GoalMachine,
    boundary: standing::Boundary,
    /// The pause file's watcher: it only wakes the loop (and may lag behind the file).
    pause_file: watch::Receiver<bool>,
    /// Whether the scheduler is paused, for the gate and judge tasks to wait on: it follows
    /// the scheduler, so a task started right after a pause sees it.
    paused: watch::Sender<bool>,
    instruction_files: Vec<instructions::InstructionFile>,
    /// The backend or its connection state changed: the status line follows.
    backend_changed: watch::Receiver<u64>,
    /// Snapshots before and after each turn (DESIGN §13); None when rewind is off.
    rewind: Option<Arc<crate::engine::rewind::Rewinder>>,
}

/// The state_meta key of a session's backend (`/backend`).
pub(super) fn backend_key(session_id: &str) -> String {
    format!("backend:{session_id}")
}

/// Await a store write off the engine loop, logging a failure.
fn spawn_write(
    write: impl std::future::Future<Output = Result<(), crate::engine::store::StoreError>> + Send + 'static,
) {
    tokio::spawn(async move {
        if let Err(e) = write.await {
            tracing::warn!(error = %e, "could not save the pending messages");
        }
    });
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
                Some(ask) = self.asks.recv() => self.on_ask(ask).await,
                result = turn_done(&mut self.turn) => self.on_turn_finished(result).await,
                result = compaction_done(&mut self.compaction) => self.on_compaction_finished(result).await,
                Some(_) = self.job_done.recv() => {}
                Some(result) = self.boundary.results.recv() => self.on_boundary_result(result).await,
                changed = self.pause_file.changed() => if changed.is_ok() { self.sync_pause().await },
                _ = standing::sleep_until_ms(wake) => self.send_status(),
                Ok(()) = self.backend_changed.changed() => self.send_status(),
            }
            // `talaria pause` from another shell counts at once, not at the watcher's next look.
            self.sync_pause().await;
            let due = self.due();
            self.feed(Input::Settle(due)).await;
        }
        self.shutdown().await;
    }

    /// What is due by the clock and the job registry (the scheduler decides what runs).
    fn due(&self) -> Due {
        let now = crate::engine::heartbeat::now_ms();
        Due {
            heartbeat: self.heartbeat.as_ref().is_some_and(|h| h.due(now, true)),
            job_notices: self.env.jobs.notice_wait_ms(&self.env.session_id),
        }
    }

    /// Tell the scheduler what the pause file says, when it says something new (the file
    /// is the truth; its watcher only wakes the loop, and may lag behind `/unpause`).
    async fn sync_pause(&mut self) {
        let paused = estop::is_paused(&self.paths.estop);
        if paused != self.scheduler.paused() {
            let reason = estop::read(&self.paths.estop).and_then(|i| i.reason);
            self.feed(Input::PauseChanged { paused, reason }).await;
        }
    }

    /// Hand `input` to the scheduler and perform what it says, then what that leads to.
    async fn feed(&mut self, input: Input) {
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            for effect in self.scheduler.handle(input) {
                inputs.extend(self.perform(effect).await);
            }
        }
        let paused = self.scheduler.paused();
        self.paused.send_if_modified(|p| std::mem::replace(p, paused) != paused);
    }

    /// Carry out one effect; what it learns goes back to the scheduler as inputs.
    async fn perform(&mut self, effect: Effect) -> Vec<Input> {
        match effect {
            Effect::StartTurn { inputs, trigger } => self.begin(turns::Work::Turn { inputs, trigger }),
            Effect::StartBang(command) => self.begin(turns::Work::Bang(command)),
            Effect::StartCompaction(focus) => self.compact(focus),
            Effect::Deliver(messages) => return self.deliver(messages),
            Effect::Publish { pending, queued } => self.publish(pending, queued),
            Effect::AbortStream => self.signal_turn(|c| &c.redirect_tx),
            Effect::YieldTools => self.signal_turn(|c| &c.yield_tx),
            Effect::ReleaseWait => self.signal_turn(|c| &c.release_tx),
            Effect::InterruptTurn => {
                if let Some(turn) = &self.turn {
                    turn.control.interrupt.cancel();
                }
            }
            Effect::DenyApprovals => self.env.approver.deny_all(),
            Effect::AnswerApproval { id, decision } => self.env.approver.answer(id, decision),
            Effect::InterruptBoundary => {
                let effects = self.goal.on_interrupt();
                self.boundary.cancel();
                return self.perform_goal_effects(effects).await;
            }
            Effect::CancelCompaction => {
                if let Some(c) = &self.compaction {
                    c.cancel.cancel();
                }
            }
            Effect::RestoreInput(text) => self.events().send(Event::RestoreInput { text }),
            Effect::GoalTurnEnded(outcome) => {
                let effects = self.goal.on_turn_end(outcome, &self.last_reply());
                return self.perform_goal_effects(effects).await;
            }
            Effect::RunCommand(command) => return self.run_command(command).await,
            Effect::TakeNotices => {
                let notices = self.env.jobs.take_notices(&self.env.session_id).await;
                let notes = notices
                    .into_iter()
                    .map(|n| JobNote { origin: notice_origin(n.kind), id: n.id, text: n.text })
                    .collect();
                return vec![Input::NoticesTaken(notes)];
            }
            Effect::FireHeartbeat => return self.fire_heartbeat().await,
            Effect::Notice { level, text } => self.notice(level, text),
            Effect::SendStatus => self.send_status(),
            Effect::Phase(phase) => self.events().send(Event::Phase { phase }),
        }
        Vec::new()
    }

    fn signal_turn(&self, which: impl Fn(&TurnControl) -> &Arc<watch::Sender<u64>>) {
        if let Some(turn) = &self.turn {
            TurnControl::bump(which(&turn.control));
        }
    }

    /// The running turn asks for its messages at a delivery point, or says it stored them.
    async fn on_ask(&mut self, ask: TurnAsk) {
        match ask {
            TurnAsk::Messages(reply) => {
                self.reply = Some(reply);
                self.feed(Input::DeliveryPoint).await;
            }
            TurnAsk::Delivered => self.feed(Input::Delivered).await,
        }
    }

    /// The scheduler's answer to the turn's question.
    fn deliver(&mut self, messages: Vec<UserMessage>) -> Vec<Input> {
        let delivered = match self.reply.take() {
            Some(reply) => reply.send(messages).is_ok(),
            None => false,
        };
        // The turn stopped asking (its deadline passed): they wait for the next point.
        if delivered {
            Vec::new()
        } else {
            vec![Input::Undelivered]
        }
    }

    /// Show what waits, and keep the crash copy: the one writer of `pending:{session}`.
    fn publish(&self, pending: Vec<String>, queued: Vec<String>) {
        self.waiting.send_replace(self.scheduler.waiting());
        let saved: Vec<String> = pending.iter().chain(&queued).cloned().collect();
        self.events().send(Event::PendingChanged { pending, queued });
        let key = self.pending_key();
        // The store takes a write in the order it is asked for; only its answer is awaited
        // (off the loop, so the signals that follow a message are not held up by the disk).
        if saved.is_empty() {
            spawn_write(self.env.store.meta_delete(&key));
        } else {
            spawn_write(self.env.store.meta_set(&key, &json!(saved).to_string()));
        }
    }

    fn pending_key(&self) -> String {
        format!("pending:{}", self.env.session_id)
    }

    fn send_status(&self) {
        self.events().send(Event::Status(StatusInfo {
            model: self.env.model.clone(),
            session_id: self.env.session_id.clone(),
            busy_mode: Some(self.scheduler.busy_mode()),
            paused: self.scheduler.paused(),
            heartbeat: self.heartbeat.as_ref().map(|h| h.info(crate::engine::heartbeat::now_ms())),
            goal: self.goal.info().filter(|g| g.state != GoalState::Unset).map(Box::new),
            context_pct: (self.meter.window > 0).then(|| self.meter.percent()),
            title: self.title.clone(),
            sandbox: Some(self.env.jobs.sandbox_policy().short_label()),
            backend: self.env.jobs.backends().status_label(),
        }));
    }

    async fn handle_op(&mut self, op: Op) {
        match op {
            Op::Submit { text, mode } => self.submit(text, mode).await,
            Op::Interrupt => self.feed(Input::Interrupt).await,
            Op::YieldForeground => self.feed(Input::YieldForeground).await,
            Op::Approve { id, decision } => self.feed(Input::ApprovalAnswered { id, decision }).await,
            Op::Command(command) => self.feed(Input::Command(command)).await,
            Op::Job { id, action } => {
                for input in self.job_action(id, action) {
                    self.feed(input).await;
                }
            }
            Op::LeaveJobs { detach } => self.env.jobs.leave_running(detach),
            Op::FrontEndReady => {
                if let Some(mcp) = &self.env.mcp {
                    mcp.begin();
                }
            }
            Op::LoadEarlier { before } => self.send_earlier(before).await,
            Op::Shutdown => {}
        }
    }

    /// A message from the user: accepted here (its `@path` mentions expanded once, whatever
    /// the phase), routed by the scheduler.
    async fn submit(&mut self, text: String, mode: Option<crate::protocol::BusyMode>) {
        if text.trim().is_empty() {
            return;
        }
        tracing::trace!(target: "enter_request", "submit: at the engine");
        // Input history persists per working directory (↑/↓ in the next run too). Queued,
        // not awaited: the store writes in the order it is asked, so this entry is in before
        // the turn's message, and Enter -> request does not wait a store round trip for it.
        let cwd_text = self.env.cwd().display().to_string();
        drop(self.env.store.history_push(&cwd_text, &text));
        self.sync_pause().await;
        if let Some(command) = crate::engine::bang::parse_bang(&text).map(str::to_string) {
            return self.feed(Input::Bang { typed: text, command }).await;
        }
        let policy = self.env.approver.sandbox_policy();
        let (expanded, missing) = crate::engine::mentions::expand(&text, &self.env.cwd(), &policy).await;
        for path in missing {
            self.notice(NoticeLevel::Warn, format!("@{path}: no such file here — not attached"));
        }
        let message = UserMessage { typed: text, text: expanded };
        tracing::trace!(target: "enter_request", "submit: history pushed, mentions expanded");
        self.feed(Input::Message { message, mode }).await;
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
            // A turn stopping may still ask at a delivery point: nothing more is delivered.
            self.asks.close();
            if let Ok(Ok(result)) = tokio::time::timeout(Duration::from_secs(5), turn.join).await {
                self.history = result.history;
                self.events().send(Event::TurnFinished { outcome: result.outcome });
            }
        }
        // The end snapshots still running go into the journal first (a turn's end does not
        // wait for its own), within the same deadline as a stopping turn.
        if let Some(rewind) = &self.rewind {
            if tokio::time::timeout(Duration::from_secs(5), rewind.settled()).await.is_err() {
                tracing::warn!("the last snapshot after a turn did not finish in time");
            }
        }
        // A session nothing was said in is not kept (nor listed, nor continued).
        let _ = self.env.store.delete_if_empty(&self.env.session_id).await;
        if let Some(mcp) = &self.env.mcp {
            mcp.shutdown().await;
        }
        let killed = self.env.jobs.shutdown().await;
        if !killed.is_empty() {
            self.events().send(Event::JobsKilled { jobs: killed });
        }
        self.events().send(Event::ShutdownComplete);
    }
}
