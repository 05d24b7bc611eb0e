//! The scheduling core (DESIGN §3a): every decision about what the engine does next, made
//! by one owner of the state it decides about. `Scheduler::handle(&mut self, Input) ->
//! Vec<Effect>`: no async, no I/O, no clock. The messages typed while busy, the queue, the
//! notices held for the next turn and the phase live here; the effects carry the data, so
//! the engine (`session`) only performs them and feeds what happened back as an `Input`.

use std::collections::{HashSet, VecDeque};

use crate::protocol::commands::SlashCommand;
use crate::protocol::{Approval, BusyMode, JobId, NoticeLevel, Origin, Phase, TurnOutcome, TurnTrigger};

/// A message the user sent, as accepted. `typed` is what they wrote (the pending line shows
/// it, and it is what goes back to the input box); `text` is what the model reads, its
/// `@path` mentions expanded once, when the message was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserMessage {
    pub(crate) typed: String,
    pub(crate) text: String,
}

impl UserMessage {
    #[cfg(test)]
    pub(crate) fn plain(text: &str) -> UserMessage {
        UserMessage { typed: text.into(), text: text.into() }
    }
}

/// A user-role message a turn starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnInput {
    /// What the model reads.
    pub text: String,
    /// What the transcript shows (a heartbeat shows its instruction, not the whole prompt).
    pub shown: String,
    pub origin: Origin,
    /// What the user typed, given back to the input box when it cannot be sent (None for
    /// what Talaria wrote itself).
    pub restore: Option<String>,
}

impl TurnInput {
    /// A message the user typed, as it reads.
    pub fn typed(text: impl Into<String>) -> TurnInput {
        let text = text.into();
        TurnInput { shown: text.clone(), restore: Some(text.clone()), text, origin: Origin::Typed }
    }

    fn user(message: UserMessage, origin: Origin) -> TurnInput {
        TurnInput { shown: message.text.clone(), text: message.text, origin, restore: Some(message.typed) }
    }

    /// Something Talaria wrote for the model (a notice, a goal continuation, a heartbeat).
    pub(crate) fn injected(text: String, shown: String, origin: Origin) -> TurnInput {
        TurnInput { text, shown, origin, restore: None }
    }
}

/// A job's notice for the model (its exit, or a watch match), taken from the job registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobNote {
    pub(crate) id: JobId,
    /// `Origin::JobNotice` (an exit) or `Origin::Watch`.
    pub(crate) origin: Origin,
    pub(crate) text: String,
}

impl JobNote {
    fn input(self) -> TurnInput {
        TurnInput::injected(self.text.clone(), self.text, self.origin)
    }
}

/// What runs in the foreground of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Running {
    #[default]
    Nothing,
    /// A model turn (streaming or running tools).
    Turn,
    /// The user's own `!command`.
    Bang,
    /// `/compact` summarising the history (it owns the history until it ends).
    Compaction,
}

/// Where a goal's turn boundary stands (the goal machine says; the engine passes it on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Boundary {
    #[default]
    None,
    /// The workspace fingerprint or a gate is being run.
    Gates,
    /// The judge was asked.
    Judging,
}

/// What is due when nothing runs, read by the engine from the clock and the job registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Due {
    /// The heartbeat's time has come.
    pub(crate) heartbeat: bool,
    /// Notices for the model wait in the job registry: how long the oldest has waited, in ms.
    pub(crate) job_notices: Option<u64>,
}

/// Something that happened.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Input {
    /// The user sent a message; `mode` None = the configured busy mode.
    Message { message: UserMessage, mode: Option<BusyMode> },
    /// The user sent `!command` (`typed`: the whole input, given back when it cannot run).
    Bang { typed: String, command: String },
    /// Esc, Ctrl+C while busy, `/stop`.
    Interrupt,
    /// Ctrl+B: running foreground commands become jobs, no message.
    YieldForeground,
    /// The user answered an approval prompt.
    ApprovalAnswered { id: u64, decision: Approval },
    /// A slash command for the engine.
    Command(SlashCommand),
    /// The running turn reached a delivery point and asks for the messages typed since.
    DeliveryPoint,
    /// The turn has stored (or given back) what the last delivery point handed it.
    Delivered,
    /// The answer to the delivery point found no turn waiting: what it held waits again.
    Undelivered,
    /// The running turn or `!command` ended.
    TurnFinished { outcome: TurnOutcome },
    /// `/compact` ended (done, failed or interrupted).
    CompactionFinished,
    /// The pause file appeared (with its reason) or went away.
    PauseChanged { paused: bool, reason: Option<String> },
    /// The goal's turn boundary now stands here.
    Boundary(Boundary),
    /// The goal wants this continuation turn when the session is idle (None: no longer).
    GoalContinuation(Option<String>),
    /// The user killed this job: its exit notice is no reason to start a turn.
    JobKilled(JobId),
    /// Notices taken from the job registry (the engine's answer to `Effect::TakeNotices`).
    NoticesTaken(Vec<JobNote>),
    /// Work the engine has ready to run as a turn now: a heartbeat that fired, `/retry`.
    Run { input: TurnInput, trigger: TurnTrigger },
    /// Nothing new: what should run next? Asked after every other input.
    Settle(Due),
}

/// Something for the engine to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// Start a model turn with these user-role messages, in order.
    StartTurn { inputs: Vec<TurnInput>, trigger: TurnTrigger },
    /// Run the user's own `!command`.
    StartBang(String),
    /// Start `/compact` (with its focus).
    StartCompaction(Option<String>),
    /// The answer to the turn's question at a delivery point (it may be empty).
    Deliver(Vec<UserMessage>),
    /// Tell the front ends what waits (typed text): `pending` for the next delivery point
    /// of the running turn, `queued` for turns of their own; save both as the crash copy.
    Publish { pending: Vec<String>, queued: Vec<String> },
    /// Abort a model stream in progress (its partial text is kept).
    AbortStream,
    /// Running foreground commands become background jobs; the turn goes on.
    YieldTools,
    /// A `process wait` returns early.
    ReleaseWait,
    /// Cancel the running turn or `!command`: foreground commands are killed.
    InterruptTurn,
    /// Deny every approval prompt still open (the interrupted turn cannot use them).
    DenyApprovals,
    /// Pass the user's answer to the approval it belongs to.
    AnswerApproval { id: u64, decision: Approval },
    /// Stop the goal's gates or judge; the goal pauses.
    InterruptBoundary,
    /// Stop `/compact`'s summary request; the history stays as it was.
    CancelCompaction,
    /// Put this text back into the input box (never dropped, never sent).
    RestoreInput(String),
    /// The goal machine learns that a model turn ended.
    GoalTurnEnded(TurnOutcome),
    /// Carry out the command.
    RunCommand(SlashCommand),
    /// Take the notices waiting in the job registry and answer with `Input::NoticesTaken`.
    TakeNotices,
    /// Fire the heartbeat and answer with `Input::Run`.
    FireHeartbeat,
    /// Say something in the transcript.
    Notice { level: NoticeLevel, text: String },
    /// Send the status line again.
    SendStatus,
    /// The phase changed: tell the front ends.
    Phase(Phase),
}

fn notice(level: NoticeLevel, text: impl Into<String>) -> Effect {
    Effect::Notice { level, text: text.into() }
}

/// What a pause means, in one notice (with the reason when one was given).
pub(crate) fn pause_notice(reason: Option<&str>) -> String {
    let why = reason.map(str::trim).filter(|r| !r.is_empty()).map(|r| format!(" — {r}")).unwrap_or_default();
    format!(
        "PAUSED{why}: no heartbeat, goal, queued message or job notice runs, and typed messages wait, until /unpause (or talaria unpause in a shell)"
    )
}

/// The owner of the session's scheduling state.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Scheduler {
    running: Running,
    boundary: Boundary,
    paused: bool,
    /// `agent.busy_input_mode` (or `/busy`).
    busy_mode: BusyMode,
    /// Typed while busy, for the next delivery point.
    pending: Vec<UserMessage>,
    /// Handed to the turn at its last delivery point, not yet stored: still in the crash copy.
    delivering: Vec<UserMessage>,
    /// Waiting to run as turns of their own.
    queued: VecDeque<UserMessage>,
    /// Notices of jobs the user killed: the model reads them with the next turn's inputs.
    deferred: Vec<TurnInput>,
    user_killed: HashSet<JobId>,
    goal_continuation: Option<String>,
    /// `jobs.notice_window_s` in ms: idle notices start a turn only once the oldest has
    /// waited this long, so those arriving together make one turn.
    notice_window_ms: u64,
    /// `jobs.notify_starts_turn`.
    notify_starts_turn: bool,
    /// The phase the front ends were last told.
    told: Phase,
}

impl Scheduler {
    pub(crate) fn new(busy_mode: BusyMode, paused: bool, notice_window_ms: u64, notify_starts_turn: bool) -> Scheduler {
        let mut scheduler =
            Scheduler { busy_mode, paused, notice_window_ms, notify_starts_turn, ..Scheduler::default() };
        scheduler.told = scheduler.phase();
        scheduler
    }

    /// What the engine is doing, as every front end is told it.
    pub(crate) fn phase(&self) -> Phase {
        match (self.running, self.boundary) {
            (Running::Turn, _) => Phase::Turn,
            (Running::Bang, _) => Phase::Shell,
            (Running::Compaction, _) => Phase::Compacting,
            (Running::Nothing, Boundary::Gates) => Phase::Gates,
            (Running::Nothing, Boundary::Judging) => Phase::Judging,
            (Running::Nothing, Boundary::None) if self.paused => Phase::Paused,
            (Running::Nothing, Boundary::None) => Phase::Idle,
        }
    }

    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    pub(crate) fn busy_mode(&self) -> BusyMode {
        self.busy_mode
    }

    /// Messages waiting for the running turn's next delivery point (a tool that starts
    /// meanwhile is released at once).
    pub(crate) fn waiting(&self) -> usize {
        self.pending.len() + self.delivering.len()
    }

    /// DESIGN §3: no turn, gate run, judge call or approval in progress; no queued or
    /// pending message; no goal continuation due; not paused.
    pub(crate) fn idle(&self) -> bool {
        self.phase() == Phase::Idle
            && self.pending.is_empty()
            && self.queued.is_empty()
            && self.goal_continuation.is_none()
    }

    /// Nothing runs in the foreground (a goal boundary may).
    fn free(&self) -> bool {
        self.running == Running::Nothing
    }

    /// Handle one input: update the state, say what to do.
    pub(crate) fn handle(&mut self, input: Input) -> Vec<Effect> {
        let mut effects = match input {
            Input::Message { message, mode } => self.message(message, mode.unwrap_or(self.busy_mode)),
            Input::Bang { typed, command } => self.bang(typed, command),
            Input::Interrupt => self.interrupt(),
            Input::YieldForeground => match self.running {
                Running::Turn | Running::Bang => vec![Effect::YieldTools],
                Running::Nothing | Running::Compaction => {
                    vec![notice(NoticeLevel::Info, "nothing is running in the foreground")]
                }
            },
            Input::ApprovalAnswered { id, decision } => vec![Effect::AnswerApproval { id, decision }],
            Input::Command(command) => self.command(command),
            Input::DeliveryPoint => {
                self.delivering.append(&mut self.pending);
                vec![Effect::Deliver(self.delivering.clone())]
            }
            Input::Delivered if self.delivering.is_empty() => Vec::new(),
            Input::Delivered => {
                self.delivering.clear();
                vec![self.publish()]
            }
            Input::Undelivered => {
                let mut back = std::mem::take(&mut self.delivering);
                back.append(&mut self.pending);
                self.pending = back;
                Vec::new()
            }
            Input::TurnFinished { outcome } => self.turn_finished(outcome),
            Input::CompactionFinished => {
                self.running = Running::Nothing;
                vec![Effect::SendStatus]
            }
            Input::PauseChanged { paused, reason } => self.pause_changed(paused, reason),
            Input::Boundary(boundary) => {
                self.boundary = boundary;
                Vec::new()
            }
            Input::GoalContinuation(prompt) => {
                self.goal_continuation = prompt;
                Vec::new()
            }
            Input::JobKilled(id) => {
                self.user_killed.insert(id);
                Vec::new()
            }
            Input::NoticesTaken(notes) => self.notices_taken(notes),
            Input::Run { input, trigger } => self.run(input, trigger),
            Input::Settle(due) => self.next(due),
        };
        let phase = self.phase();
        if phase != self.told {
            self.told = phase;
            effects.push(Effect::Phase(phase));
        }
        effects
    }

    /// Tell the front ends what waits, and keep the crash copy (`Publish`).
    fn publish(&self) -> Effect {
        let typed = |m: &UserMessage| m.typed.clone();
        Effect::Publish {
            pending: self.delivering.iter().chain(&self.pending).map(typed).collect(),
            queued: self.queued.iter().map(typed).collect(),
        }
    }

    /// A turn starts: the notices held for it go first.
    fn start(&mut self, inputs: Vec<TurnInput>, trigger: TurnTrigger) -> Effect {
        self.running = Running::Turn;
        let mut all = std::mem::take(&mut self.deferred);
        all.extend(inputs);
        Effect::StartTurn { inputs: all, trigger }
    }

    /// A message typed by the user (DESIGN §3 busy-mode table).
    fn message(&mut self, message: UserMessage, mode: BusyMode) -> Vec<Effect> {
        match self.running {
            // Typed messages wait out a pause as queued turns of their own.
            Running::Nothing if self.paused => {
                self.queued.push_back(message);
                vec![
                    self.publish(),
                    notice(
                        NoticeLevel::Warn,
                        "paused: your message waits and is sent when you unpause (/unpause, or talaria unpause \
                         in a shell); Esc takes it back into the input",
                    ),
                ]
            }
            Running::Nothing => vec![self.start(vec![TurnInput::user(message, Origin::Typed)], TurnTrigger::User)],
            // Nothing runs that could take the message in: it waits for its own turn.
            Running::Compaction => {
                self.queued.push_back(message);
                vec![self.publish()]
            }
            Running::Turn | Running::Bang => match mode {
                // The count of waiting messages goes out before the signals: a tool that
                // starts in between sees it.
                BusyMode::Redirect => {
                    self.pending.push(message);
                    vec![self.publish(), Effect::ReleaseWait, Effect::AbortStream, Effect::YieldTools]
                }
                BusyMode::Steer => {
                    self.pending.push(message);
                    vec![self.publish(), Effect::ReleaseWait]
                }
                BusyMode::Queue => {
                    self.queued.push_back(message);
                    vec![self.publish()]
                }
            },
        }
    }

    /// `!command`: the user's own command runs only when nothing else does. A pause stops
    /// autonomous work, not the user.
    fn bang(&mut self, typed: String, command: String) -> Vec<Effect> {
        if self.free() {
            self.running = Running::Bang;
            return vec![Effect::StartBang(command)];
        }
        vec![
            notice(NoticeLevel::Warn, "!command runs when the agent is idle; press Esc to stop the turn first"),
            Effect::RestoreInput(typed),
        ]
    }

    fn interrupt(&mut self) -> Vec<Effect> {
        match self.running {
            Running::Turn | Running::Bang => vec![Effect::InterruptTurn, Effect::DenyApprovals],
            Running::Compaction => vec![Effect::CancelCompaction],
            Running::Nothing if self.boundary != Boundary::None => vec![Effect::InterruptBoundary],
            // Messages waiting out a pause: Esc takes them back.
            Running::Nothing if !self.queued.is_empty() || !self.pending.is_empty() => self.restore_waiting(),
            Running::Nothing => vec![notice(NoticeLevel::Info, "nothing to interrupt")],
        }
    }

    /// Pending and queued messages go back into the input box (never dropped, never sent).
    fn restore_waiting(&mut self) -> Vec<Effect> {
        let back: Vec<String> = self.pending.drain(..).chain(self.queued.drain(..)).map(|m| m.typed).collect();
        if back.is_empty() {
            return Vec::new();
        }
        vec![Effect::RestoreInput(back.join("\n\n")), self.publish()]
    }

    /// Commands that replace or rewrite the history wait until nothing runs.
    fn command(&mut self, command: SlashCommand) -> Vec<Effect> {
        let name = match &command {
            SlashCommand::Stop => return self.interrupt(),
            SlashCommand::New => Some("/new"),
            SlashCommand::Resume(_) => Some("/resume"),
            SlashCommand::Retry => Some("/retry"),
            SlashCommand::Undo(_) => Some("/undo"),
            SlashCommand::Model(Some(_)) => Some("/model"),
            SlashCommand::Compact(_) => Some("/compact"),
            SlashCommand::Backend(Some(_)) => Some("/backend"),
            SlashCommand::Rewind(r) if r.target.is_some() => Some("/rewind"),
            SlashCommand::Sessions
            | SlashCommand::Title(_)
            | SlashCommand::Busy(_)
            | SlashCommand::Jobs(_)
            | SlashCommand::Model(None)
            | SlashCommand::Heartbeat(_)
            | SlashCommand::Goal(_)
            | SlashCommand::Pause(_)
            | SlashCommand::Unpause
            | SlashCommand::Usage
            | SlashCommand::Backend(None)
            | SlashCommand::Permissions
            | SlashCommand::Network
            | SlashCommand::Approvals(_)
            | SlashCommand::Rewind(_)
            | SlashCommand::Diff(_)
            | SlashCommand::Mcp(_) => None,
        };
        if let (Some(name), false) = (name, self.free()) {
            return vec![notice(
                NoticeLevel::Warn,
                format!("{name} is not available while a turn runs; press Esc to stop it first"),
            )];
        }
        match command {
            SlashCommand::Compact(focus) => {
                self.running = Running::Compaction;
                vec![Effect::StartCompaction(focus)]
            }
            SlashCommand::Busy(Some(mode)) => {
                self.busy_mode = mode;
                vec![Effect::RunCommand(command)]
            }
            // Another session: what waits here (a pause held it) goes back to the input,
            // and the notices held for this session's next turn are of no use there.
            SlashCommand::New | SlashCommand::Resume(Some(_)) => {
                self.deferred.clear();
                self.user_killed.clear();
                self.goal_continuation = None;
                let mut effects = self.restore_waiting();
                effects.push(Effect::RunCommand(command));
                effects
            }
            other => vec![Effect::RunCommand(other)],
        }
    }

    fn turn_finished(&mut self, outcome: TurnOutcome) -> Vec<Effect> {
        let was = std::mem::take(&mut self.running);
        let mut effects = Vec::new();
        // A `!command` is not a model turn: goals do not count it.
        if was == Running::Turn {
            effects.push(Effect::GoalTurnEnded(outcome));
        }
        // What the turn was handed and did not confirm is in the store or back in the input.
        let unconfirmed = !std::mem::take(&mut self.delivering).is_empty();
        if outcome == TurnOutcome::Interrupted {
            effects.extend(self.restore_waiting());
        }
        if unconfirmed && !effects.iter().any(|e| matches!(e, Effect::Publish { .. })) {
            effects.push(self.publish());
        }
        effects
    }

    /// A pause is announced when it begins and when it ends, once each.
    fn pause_changed(&mut self, paused: bool, reason: Option<String>) -> Vec<Effect> {
        if paused == self.paused {
            return Vec::new();
        }
        self.paused = paused;
        let said = if paused {
            notice(NoticeLevel::Warn, pause_notice(reason.as_deref()))
        } else {
            notice(NoticeLevel::Info, "unpaused")
        };
        vec![said, Effect::SendStatus]
    }

    /// Notices taken from the job registry: a kill the user made is news to the model, not a
    /// reason to start a turn (it is noted with the next turn's inputs); the rest, which came
    /// within the window, start one turn together.
    fn notices_taken(&mut self, notes: Vec<JobNote>) -> Vec<Effect> {
        let mut effects = Vec::new();
        let mut theirs = Vec::new();
        for note in notes {
            if note.origin == Origin::JobNotice && self.user_killed.remove(&note.id) {
                effects.push(notice(
                    NoticeLevel::Info,
                    format!("{} killed: the model hears of it with your next message", note.id),
                ));
                self.deferred.push(note.input());
            } else {
                theirs.push(note.input());
            }
        }
        match (theirs.is_empty(), self.free()) {
            (true, _) => {}
            (false, true) => effects.push(self.start(theirs, TurnTrigger::JobNotification)),
            // Something started meanwhile: they go in with its successor's inputs.
            (false, false) => self.deferred.extend(theirs),
        }
        effects
    }

    fn run(&mut self, input: TurnInput, trigger: TurnTrigger) -> Vec<Effect> {
        if self.free() {
            return vec![self.start(vec![input], trigger)];
        }
        // Never expected (the engine fires only what `Settle` chose); kept for the next turn.
        self.deferred.push(input);
        Vec::new()
    }

    /// What runs next when nothing runs: pending > queued > goal > job notices > heartbeat.
    fn next(&mut self, due: Due) -> Vec<Effect> {
        if !self.free() || self.paused {
            return Vec::new();
        }
        if !self.pending.is_empty() {
            // Left when the last turn ended: delivered together, as one message.
            let pending: Vec<UserMessage> = std::mem::take(&mut self.pending);
            let joined = |f: fn(&UserMessage) -> &str| pending.iter().map(f).collect::<Vec<_>>().join("\n\n");
            let message = UserMessage { typed: joined(|m| &m.typed), text: joined(|m| &m.text) };
            return vec![
                self.start(vec![TurnInput::user(message, Origin::Queued)], TurnTrigger::Queued),
                self.publish(),
            ];
        }
        if let Some(message) = self.queued.pop_front() {
            return vec![
                self.start(vec![TurnInput::user(message, Origin::Queued)], TurnTrigger::Queued),
                self.publish(),
            ];
        }
        // The goal's gates and judge decide what comes next; nothing autonomous starts meanwhile.
        if self.boundary != Boundary::None {
            return Vec::new();
        }
        if let Some(prompt) = self.goal_continuation.take() {
            let input = TurnInput::injected(prompt.clone(), prompt, Origin::Goal);
            return vec![self.start(vec![input], TurnTrigger::Goal), Effect::SendStatus];
        }
        if let Some(waited) = due.job_notices.filter(|_| self.notify_starts_turn) {
            // Within the window the turn waits for more notices (and the heartbeat waits
            // behind them).
            return if waited >= self.notice_window_ms { vec![Effect::TakeNotices] } else { Vec::new() };
        }
        if due.heartbeat {
            return vec![Effect::FireHeartbeat];
        }
        Vec::new()
    }

    /// In how many ms the waiting job notices start a turn, when nothing but their window
    /// holds them back (the engine wakes then); None when they are not what runs next.
    pub(crate) fn job_notices_due_in_ms(&self, waited: Option<u64>) -> Option<u64> {
        let waited = waited?;
        let mut probe = self.clone();
        let next = probe.next(Due { heartbeat: false, job_notices: Some(u64::MAX) });
        (next == [Effect::TakeNotices]).then(|| self.notice_window_ms.saturating_sub(waited))
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
