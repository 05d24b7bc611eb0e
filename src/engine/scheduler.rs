//! The scheduling core (DESIGN §3a): every decision about what the engine does next, as
//! one pure function. `decide(&State, Input) -> Vec<Effect>`: no async, no I/O, no clock.
//! The engine (`session`) takes a snapshot of its state, asks, performs the effects in
//! order and feeds what happened back as the next `Input`.

use crate::protocol::commands::SlashCommand;
use crate::protocol::{BusyMode, NoticeLevel, TurnOutcome};

/// What the engine is doing right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Phase {
    #[default]
    Idle,
    /// A model turn runs (streaming or running tools).
    Turn,
    /// The user's own `!command` runs.
    Bang,
    /// `/compact` is summarising the history (it owns the history until it ends).
    Compacting,
}

/// A snapshot of what the decisions depend on. Plain data.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct State {
    pub(crate) phase: Phase,
    /// `agent.busy_input_mode` (or `/busy`).
    pub(crate) busy_mode: BusyMode,
    /// Messages typed while busy that wait for the next delivery point.
    pub(crate) pending: usize,
    /// Messages waiting to run as turns of their own.
    pub(crate) queued: usize,
    /// The goal's gates or judge are running (a turn boundary in progress).
    pub(crate) goal_boundary: bool,
    /// A goal continuation is due.
    pub(crate) goal_continuation: bool,
    /// Notices for the model waiting in the job registry (exits, watch matches): how long
    /// the oldest has waited, in ms.
    pub(crate) job_notices: Option<u64>,
    /// `jobs.notice_window_s` in ms: idle notices start a turn only once the oldest has
    /// waited this long, so those arriving together make one turn.
    pub(crate) notice_window_ms: u64,
    /// `jobs.notify_starts_turn`.
    pub(crate) notify_starts_turn: bool,
    /// The heartbeat's time has come (whether the session is idle is decided here).
    pub(crate) heartbeat_due: bool,
    /// The pause sentinel is set.
    pub(crate) paused: bool,
}

impl State {
    /// A turn, a `!command` or a compaction runs.
    pub(crate) fn busy(&self) -> bool {
        self.phase != Phase::Idle
    }

    /// DESIGN §3: no turn, gate run, judge call or approval in progress; no queued or
    /// pending message; no goal continuation due; not paused.
    pub(crate) fn idle(&self) -> bool {
        !self.busy()
            && !self.goal_boundary
            && self.pending == 0
            && self.queued == 0
            && !self.goal_continuation
            && !self.paused
    }
}

/// Something that happened.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Input {
    /// The user sent a message; `mode` None = the configured busy mode.
    Message { mode: Option<BusyMode> },
    /// The user sent a `!command`.
    Bang,
    /// Esc, Ctrl+C while busy, `/stop`.
    Interrupt,
    /// Ctrl+B: running foreground commands become jobs, no message.
    YieldForeground,
    /// The user answered an approval prompt.
    ApprovalAnswered,
    /// A slash command for the engine.
    Command(SlashCommand),
    /// The running turn or `!command` ended.
    TurnFinished { outcome: TurnOutcome },
    /// `/compact` ended (done, failed or interrupted).
    CompactionFinished,
    /// The pause sentinel changed.
    /// The pause file appeared (with its reason) or went away.
    PauseChanged { paused: bool, reason: Option<String> },
    /// Nothing new: what should run next? Asked after every other input.
    Settle,
}

/// What starts a turn when the engine is idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// The message the user just sent.
    User,
    /// Messages left pending when the last turn ended (delivered together).
    Pending,
    /// The oldest queued message.
    Queued,
    Goal,
    JobNotices,
    Heartbeat,
}

/// Something for the engine to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    StartTurn(Start),
    /// Run the message as the user's `!command`.
    StartBang,
    /// Add the message to those delivered at the next delivery point.
    AddPending,
    /// Add the message to those run as later turns.
    AddQueued,
    /// Tell the front end what is pending and queued (and save it).
    PublishPending,
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
    AnswerApproval,
    /// Stop the goal's gates or judge; the goal pauses.
    InterruptBoundary,
    /// Stop `/compact`'s summary request; the history stays as it was.
    CancelCompaction,
    /// Pending and queued messages go back into the input box (never dropped, never sent).
    RestorePending,
    /// The message just sent goes back into the input box (it was not accepted).
    RestoreInput,
    /// The goal machine learns that a model turn ended.
    GoalTurnEnded,
    /// Carry out the command.
    RunCommand,
    /// Say something in the transcript.
    Notice {
        level: NoticeLevel,
        text: String,
    },
    /// Send the status line again.
    SendStatus,
}

fn notice(level: NoticeLevel, text: impl Into<String>) -> Effect {
    Effect::Notice { level, text: text.into() }
}

/// The one decision function.
pub(crate) fn decide(state: &State, input: Input) -> Vec<Effect> {
    match input {
        Input::Message { mode } => message(state, mode.unwrap_or(state.busy_mode)),
        Input::Bang => bang(state),
        Input::Interrupt => interrupt(state),
        Input::YieldForeground => match state.phase {
            Phase::Turn | Phase::Bang => vec![Effect::YieldTools],
            Phase::Idle | Phase::Compacting => {
                vec![notice(NoticeLevel::Info, "nothing is running in the foreground")]
            }
        },
        Input::ApprovalAnswered => vec![Effect::AnswerApproval],
        Input::Command(command) => command_allowed(state, &command),
        Input::TurnFinished { outcome } => turn_finished(state, outcome),
        Input::CompactionFinished => vec![Effect::SendStatus],
        Input::PauseChanged { paused, reason } => vec![
            if paused {
                notice(NoticeLevel::Warn, pause_notice(reason.as_deref()))
            } else {
                notice(NoticeLevel::Info, "unpaused")
            },
            Effect::SendStatus,
        ],
        Input::Settle => next(state).into_iter().collect(),
    }
}

/// What a pause means, in one notice (with the reason when one was given).
pub(crate) fn pause_notice(reason: Option<&str>) -> String {
    let why = reason.map(str::trim).filter(|r| !r.is_empty()).map(|r| format!(" — {r}")).unwrap_or_default();
    format!(
        "PAUSED{why}: no heartbeat, goal, queued message or job notice runs, and typed messages wait, until /unpause (or `talaria unpause`)"
    )
}

/// A message typed by the user (DESIGN §3 busy-mode table).
fn message(state: &State, mode: BusyMode) -> Vec<Effect> {
    match state.phase {
        Phase::Idle if state.paused => vec![
            notice(NoticeLevel::Warn, "paused: nothing is sent to the model until `/unpause` (or `talaria unpause`)"),
            Effect::RestoreInput,
        ],
        Phase::Idle => vec![Effect::StartTurn(Start::User)],
        // Nothing runs that could take the message in: it waits for its own turn.
        Phase::Compacting => vec![Effect::AddQueued, Effect::PublishPending],
        Phase::Turn | Phase::Bang => match mode {
            BusyMode::Redirect => vec![
                Effect::AddPending,
                Effect::ReleaseWait,
                Effect::AbortStream,
                Effect::YieldTools,
                Effect::PublishPending,
            ],
            BusyMode::Steer => vec![Effect::AddPending, Effect::ReleaseWait, Effect::PublishPending],
            BusyMode::Queue => vec![Effect::AddQueued, Effect::PublishPending],
        },
    }
}

/// `!command`: the user's own command runs only when nothing else does. A pause stops
/// autonomous work, not the user.
fn bang(state: &State) -> Vec<Effect> {
    if state.busy() {
        vec![
            notice(NoticeLevel::Warn, "`!command` runs when the agent is idle; press Esc to stop the turn first"),
            Effect::RestoreInput,
        ]
    } else {
        vec![Effect::StartBang]
    }
}

fn interrupt(state: &State) -> Vec<Effect> {
    match state.phase {
        Phase::Turn | Phase::Bang => vec![Effect::InterruptTurn, Effect::DenyApprovals],
        Phase::Compacting => vec![Effect::CancelCompaction],
        Phase::Idle if state.goal_boundary => vec![Effect::InterruptBoundary],
        Phase::Idle => vec![notice(NoticeLevel::Info, "nothing to interrupt")],
    }
}

/// Commands that replace or rewrite the history wait until nothing runs.
fn command_allowed(state: &State, command: &SlashCommand) -> Vec<Effect> {
    if let SlashCommand::Stop = command {
        return interrupt(state);
    }
    let name = match command {
        SlashCommand::New => Some("/new"),
        SlashCommand::Resume(_) => Some("/resume"),
        SlashCommand::Retry => Some("/retry"),
        SlashCommand::Undo(_) => Some("/undo"),
        SlashCommand::Model(Some(_)) => Some("/model"),
        SlashCommand::Compact(_) => Some("/compact"),
        SlashCommand::Backend(Some(_)) => Some("/backend"),
        SlashCommand::Sessions
        | SlashCommand::Title(_)
        | SlashCommand::Stop
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
        | SlashCommand::Mcp(_) => None,
    };
    match name {
        Some(name) if state.busy() => vec![notice(
            NoticeLevel::Warn,
            format!("{name} is not available while a turn runs; press Esc to stop it first"),
        )],
        _ => vec![Effect::RunCommand],
    }
}

fn turn_finished(state: &State, outcome: TurnOutcome) -> Vec<Effect> {
    let mut effects = Vec::new();
    // A `!command` is not a model turn: goals do not count it.
    if state.phase == Phase::Turn {
        effects.push(Effect::GoalTurnEnded);
    }
    if outcome == TurnOutcome::Interrupted {
        effects.push(Effect::RestorePending);
        effects.push(Effect::PublishPending);
    }
    effects
}

/// What runs next when nothing runs: pending > queued > goal > job notices > heartbeat.
fn next(state: &State) -> Option<Effect> {
    if state.busy() || state.paused {
        return None;
    }
    if state.pending > 0 {
        return Some(Effect::StartTurn(Start::Pending));
    }
    if state.queued > 0 {
        return Some(Effect::StartTurn(Start::Queued));
    }
    // The goal's gates and judge decide what comes next; nothing autonomous starts meanwhile.
    if state.goal_boundary {
        return None;
    }
    if state.goal_continuation {
        return Some(Effect::StartTurn(Start::Goal));
    }
    if let Some(waited) = state.job_notices.filter(|_| state.notify_starts_turn) {
        // Within the window the turn waits for more notices (and the heartbeat waits
        // behind them).
        return (waited >= state.notice_window_ms).then_some(Effect::StartTurn(Start::JobNotices));
    }
    if state.heartbeat_due {
        return Some(Effect::StartTurn(Start::Heartbeat));
    }
    None
}

/// In how many ms the waiting job notices start a turn, when nothing but their window
/// holds them back (the engine wakes then); None when they are not what runs next.
pub(crate) fn job_notices_due_in_ms(state: &State) -> Option<u64> {
    let waited = state.job_notices?;
    let due = State { job_notices: Some(u64::MAX), ..state.clone() };
    (next(&due) == Some(Effect::StartTurn(Start::JobNotices))).then(|| state.notice_window_ms.saturating_sub(waited))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::commands::{GoalCmd, HeartbeatCmd, JobsCmd};
    use pretty_assertions::assert_eq;

    fn idle() -> State {
        State { notify_starts_turn: true, ..State::default() }
    }

    fn in_turn() -> State {
        State { phase: Phase::Turn, ..idle() }
    }

    fn msg(mode: BusyMode) -> Input {
        Input::Message { mode: Some(mode) }
    }

    fn has(effects: &[Effect], e: &Effect) -> bool {
        effects.contains(e)
    }

    fn is_refused(effects: &[Effect]) -> bool {
        matches!(effects, [Effect::Notice { level: NoticeLevel::Warn, text }] if text.contains("not available while a turn runs"))
    }

    // --- The busy-mode table (DESIGN §3): one test per cell. -----------------------------

    #[test]
    fn redirect_during_streaming_aborts_the_stream_and_delivers_the_message_next() {
        let e = decide(&in_turn(), msg(BusyMode::Redirect));
        assert!(has(&e, &Effect::AbortStream));
        assert!(has(&e, &Effect::AddPending));
        assert!(!has(&e, &Effect::AddQueued));
    }

    #[test]
    fn redirect_during_tools_yields_them_and_releases_a_wait() {
        let e = decide(&in_turn(), msg(BusyMode::Redirect));
        assert!(has(&e, &Effect::YieldTools));
        assert!(has(&e, &Effect::ReleaseWait));
        assert!(!has(&e, &Effect::InterruptTurn), "a redirect never kills");
    }

    #[test]
    fn steer_during_streaming_leaves_the_stream_alone() {
        let e = decide(&in_turn(), msg(BusyMode::Steer));
        assert!(!has(&e, &Effect::AbortStream));
        assert!(has(&e, &Effect::AddPending));
    }

    #[test]
    fn steer_during_tools_does_not_yield_but_releases_a_process_wait() {
        let e = decide(&in_turn(), msg(BusyMode::Steer));
        assert!(!has(&e, &Effect::YieldTools));
        assert!(has(&e, &Effect::ReleaseWait));
    }

    #[test]
    fn queue_during_streaming_waits_for_its_own_turn() {
        let e = decide(&in_turn(), msg(BusyMode::Queue));
        assert_eq!(e, vec![Effect::AddQueued, Effect::PublishPending]);
    }

    #[test]
    fn queue_during_tools_touches_nothing_running() {
        let e = decide(&in_turn(), msg(BusyMode::Queue));
        for signal in [Effect::AbortStream, Effect::YieldTools, Effect::ReleaseWait, Effect::InterruptTurn] {
            assert!(!has(&e, &signal), "{signal:?}");
        }
    }

    #[test]
    fn every_mode_keeps_the_message_exactly_once_and_shows_it() {
        for mode in [BusyMode::Redirect, BusyMode::Steer, BusyMode::Queue] {
            let e = decide(&in_turn(), msg(mode));
            assert!(has(&e, &Effect::AddPending) ^ has(&e, &Effect::AddQueued), "{mode:?}");
            assert_eq!(e.last(), Some(&Effect::PublishPending), "{mode:?}");
        }
    }

    #[test]
    fn no_mode_given_uses_the_configured_one() {
        let state = State { busy_mode: BusyMode::Queue, ..in_turn() };
        assert_eq!(decide(&state, Input::Message { mode: None }), decide(&state, msg(BusyMode::Queue)));
        let state = State { busy_mode: BusyMode::Steer, ..in_turn() };
        assert_eq!(decide(&state, Input::Message { mode: None }), decide(&state, msg(BusyMode::Steer)));
    }

    #[test]
    fn an_explicit_mode_beats_the_configured_one() {
        let state = State { busy_mode: BusyMode::Redirect, ..in_turn() };
        assert_eq!(decide(&state, msg(BusyMode::Queue)), vec![Effect::AddQueued, Effect::PublishPending]);
    }

    #[test]
    fn a_message_while_a_bang_command_runs_is_routed_like_during_a_turn() {
        let state = State { phase: Phase::Bang, ..idle() };
        assert_eq!(decide(&state, msg(BusyMode::Redirect)), decide(&in_turn(), msg(BusyMode::Redirect)));
    }

    #[test]
    fn a_message_while_compacting_waits_as_a_queued_turn() {
        let state = State { phase: Phase::Compacting, ..idle() };
        for mode in [BusyMode::Redirect, BusyMode::Steer, BusyMode::Queue] {
            assert_eq!(decide(&state, msg(mode)), vec![Effect::AddQueued, Effect::PublishPending]);
        }
    }

    #[test]
    fn a_message_when_idle_starts_a_turn_whatever_the_mode() {
        for mode in [BusyMode::Redirect, BusyMode::Steer, BusyMode::Queue] {
            assert_eq!(decide(&idle(), msg(mode)), vec![Effect::StartTurn(Start::User)]);
        }
    }

    #[test]
    fn a_message_while_paused_is_not_sent_and_goes_back_to_the_input() {
        let state = State { paused: true, ..idle() };
        let e = decide(&state, Input::Message { mode: None });
        assert!(has(&e, &Effect::RestoreInput));
        assert!(!e.iter().any(|e| matches!(e, Effect::StartTurn(_))));
    }

    #[test]
    fn a_bang_command_runs_when_idle_even_while_paused() {
        assert_eq!(decide(&idle(), Input::Bang), vec![Effect::StartBang]);
        assert_eq!(decide(&State { paused: true, ..idle() }, Input::Bang), vec![Effect::StartBang]);
    }

    #[test]
    fn a_bang_command_while_busy_is_refused_and_kept() {
        for phase in [Phase::Turn, Phase::Bang, Phase::Compacting] {
            let e = decide(&State { phase, ..idle() }, Input::Bang);
            assert!(has(&e, &Effect::RestoreInput), "{phase:?}");
            assert!(!has(&e, &Effect::StartBang), "{phase:?}");
        }
    }

    // --- What runs next when idle: one test per priority rule. ---------------------------

    fn everything_due() -> State {
        State { pending: 1, queued: 2, goal_continuation: true, job_notices: Some(0), heartbeat_due: true, ..idle() }
    }

    #[test]
    fn pending_messages_come_first() {
        assert_eq!(decide(&everything_due(), Input::Settle), vec![Effect::StartTurn(Start::Pending)]);
    }

    #[test]
    fn queued_messages_come_before_the_goal() {
        let state = State { pending: 0, ..everything_due() };
        assert_eq!(decide(&state, Input::Settle), vec![Effect::StartTurn(Start::Queued)]);
    }

    #[test]
    fn the_goal_comes_before_job_notices() {
        let state = State { pending: 0, queued: 0, ..everything_due() };
        assert_eq!(decide(&state, Input::Settle), vec![Effect::StartTurn(Start::Goal)]);
    }

    #[test]
    fn job_notices_come_before_the_heartbeat() {
        let state = State { pending: 0, queued: 0, goal_continuation: false, ..everything_due() };
        assert_eq!(decide(&state, Input::Settle), vec![Effect::StartTurn(Start::JobNotices)]);
    }

    #[test]
    fn the_heartbeat_comes_last() {
        let state = State { heartbeat_due: true, ..idle() };
        assert_eq!(decide(&state, Input::Settle), vec![Effect::StartTurn(Start::Heartbeat)]);
    }

    #[test]
    fn nothing_due_starts_nothing() {
        assert_eq!(decide(&idle(), Input::Settle), vec![]);
    }

    #[test]
    fn nothing_starts_while_a_turn_runs() {
        for phase in [Phase::Turn, Phase::Bang, Phase::Compacting] {
            assert_eq!(decide(&State { phase, ..everything_due() }, Input::Settle), vec![], "{phase:?}");
        }
    }

    #[test]
    fn nothing_starts_while_paused() {
        assert_eq!(decide(&State { paused: true, ..everything_due() }, Input::Settle), vec![]);
    }

    #[test]
    fn a_goal_boundary_holds_back_autonomous_work_but_not_the_user() {
        let state = State { pending: 0, queued: 0, goal_boundary: true, ..everything_due() };
        assert_eq!(decide(&state, Input::Settle), vec![]);
        let state = State { queued: 1, goal_boundary: true, ..idle() };
        assert_eq!(decide(&state, Input::Settle), vec![Effect::StartTurn(Start::Queued)]);
    }

    #[test]
    fn job_notices_wait_when_they_may_not_start_a_turn() {
        let state = State { job_notices: Some(0), notify_starts_turn: false, heartbeat_due: true, ..idle() };
        assert_eq!(decide(&state, Input::Settle), vec![Effect::StartTurn(Start::Heartbeat)]);
    }

    #[test]
    fn notices_within_the_window_wait_for_each_other() {
        let waiting = State { job_notices: Some(100), notice_window_ms: 300, heartbeat_due: true, ..idle() };
        assert_eq!(decide(&waiting, Input::Settle), vec![], "the heartbeat waits behind them too");
        assert_eq!(job_notices_due_in_ms(&waiting), Some(200));
        let due = State { job_notices: Some(300), ..waiting.clone() };
        assert_eq!(decide(&due, Input::Settle), vec![Effect::StartTurn(Start::JobNotices)]);
        assert_eq!(job_notices_due_in_ms(&due), Some(0));
        // Nothing to wake for when they are not what runs next.
        for state in [
            State { phase: Phase::Turn, ..waiting.clone() },
            State { paused: true, ..waiting.clone() },
            State { goal_boundary: true, ..waiting.clone() },
            State { queued: 1, ..waiting.clone() },
            State { notify_starts_turn: false, ..waiting.clone() },
            State { job_notices: None, ..waiting.clone() },
        ] {
            assert_eq!(job_notices_due_in_ms(&state), None, "{state:?}");
        }
    }

    #[test]
    fn idle_means_what_the_design_says() {
        assert!(idle().idle());
        assert!(!in_turn().idle());
        assert!(!State { pending: 1, ..idle() }.idle());
        assert!(!State { queued: 1, ..idle() }.idle());
        assert!(!State { goal_boundary: true, ..idle() }.idle());
        assert!(!State { goal_continuation: true, ..idle() }.idle());
        assert!(!State { paused: true, ..idle() }.idle());
        // Running background jobs and due notices do not make the session busy.
        assert!(State { job_notices: Some(0), ..idle() }.idle());
    }

    // --- Commands refused while busy. ----------------------------------------------------

    #[test]
    fn new_is_refused_while_busy() {
        assert!(is_refused(&decide(&in_turn(), Input::Command(SlashCommand::New))));
    }

    #[test]
    fn resume_is_refused_while_busy() {
        assert!(is_refused(&decide(&in_turn(), Input::Command(SlashCommand::Resume(Some("x".into()))))));
        assert!(is_refused(&decide(&in_turn(), Input::Command(SlashCommand::Resume(None)))));
    }

    #[test]
    fn retry_is_refused_while_busy() {
        assert!(is_refused(&decide(&in_turn(), Input::Command(SlashCommand::Retry))));
    }

    #[test]
    fn undo_is_refused_while_busy() {
        assert!(is_refused(&decide(&in_turn(), Input::Command(SlashCommand::Undo(1)))));
    }

    #[test]
    fn switching_the_model_is_refused_while_busy_but_listing_is_not() {
        assert!(is_refused(&decide(&in_turn(), Input::Command(SlashCommand::Model(Some("m".into()))))));
        assert_eq!(decide(&in_turn(), Input::Command(SlashCommand::Model(None))), vec![Effect::RunCommand]);
    }

    #[test]
    fn compact_is_refused_while_busy_and_while_compacting() {
        assert!(is_refused(&decide(&in_turn(), Input::Command(SlashCommand::Compact(None)))));
        let compacting = State { phase: Phase::Compacting, ..idle() };
        assert!(is_refused(&decide(&compacting, Input::Command(SlashCommand::Compact(None)))));
        assert!(is_refused(&decide(&compacting, Input::Command(SlashCommand::Retry))));
    }

    #[test]
    fn history_commands_run_when_idle() {
        for c in [
            SlashCommand::New,
            SlashCommand::Resume(None),
            SlashCommand::Retry,
            SlashCommand::Undo(2),
            SlashCommand::Model(Some("m".into())),
            SlashCommand::Compact(Some("focus".into())),
        ] {
            assert_eq!(decide(&idle(), Input::Command(c.clone())), vec![Effect::RunCommand], "{c:?}");
        }
    }

    #[test]
    fn commands_that_leave_the_history_alone_run_while_busy() {
        for c in [
            SlashCommand::Sessions,
            SlashCommand::Title("t".into()),
            SlashCommand::Busy(Some(BusyMode::Steer)),
            SlashCommand::Jobs(JobsCmd::List),
            SlashCommand::Heartbeat(HeartbeatCmd::Status),
            SlashCommand::Goal(GoalCmd::Status),
            SlashCommand::Pause(None),
            SlashCommand::Unpause,
            SlashCommand::Usage,
            SlashCommand::Permissions,
            SlashCommand::Mcp(crate::protocol::commands::McpCmd::List),
            SlashCommand::Mcp(crate::protocol::commands::McpCmd::Restart("x".into())),
        ] {
            assert_eq!(decide(&in_turn(), Input::Command(c.clone())), vec![Effect::RunCommand], "{c:?}");
        }
    }

    // --- Interrupts, yields and approvals. -----------------------------------------------

    #[test]
    fn an_interrupt_cancels_the_turn_and_denies_open_approvals() {
        assert_eq!(decide(&in_turn(), Input::Interrupt), vec![Effect::InterruptTurn, Effect::DenyApprovals]);
    }

    #[test]
    fn an_interrupt_stops_a_bang_command_too() {
        let state = State { phase: Phase::Bang, ..idle() };
        assert_eq!(decide(&state, Input::Interrupt), vec![Effect::InterruptTurn, Effect::DenyApprovals]);
    }

    #[test]
    fn stop_is_the_same_as_esc() {
        for state in [idle(), in_turn(), State { goal_boundary: true, ..idle() }] {
            assert_eq!(decide(&state, Input::Command(SlashCommand::Stop)), decide(&state, Input::Interrupt));
        }
    }

    #[test]
    fn an_interrupt_during_the_goal_boundary_stops_the_gates() {
        let state = State { goal_boundary: true, ..idle() };
        assert_eq!(decide(&state, Input::Interrupt), vec![Effect::InterruptBoundary]);
    }

    #[test]
    fn an_interrupt_never_waits_behind_compact() {
        let state = State { phase: Phase::Compacting, ..idle() };
        assert_eq!(decide(&state, Input::Interrupt), vec![Effect::CancelCompaction]);
    }

    #[test]
    fn an_interrupt_with_nothing_running_only_says_so() {
        let e = decide(&idle(), Input::Interrupt);
        assert!(matches!(e.as_slice(), [Effect::Notice { level: NoticeLevel::Info, .. }]), "{e:?}");
    }

    #[test]
    fn a_yield_moves_commands_to_the_background_without_touching_approvals() {
        // A yield raised while an approval is open must not deny it: the approved command
        // then runs (the stale-interrupt guarantee).
        assert_eq!(decide(&in_turn(), Input::YieldForeground), vec![Effect::YieldTools]);
    }

    #[test]
    fn a_redirect_never_denies_an_open_approval() {
        let e = decide(&in_turn(), msg(BusyMode::Redirect));
        assert!(!has(&e, &Effect::DenyApprovals));
        assert!(!has(&e, &Effect::InterruptTurn));
    }

    #[test]
    fn a_yield_with_nothing_running_only_says_so() {
        let e = decide(&idle(), Input::YieldForeground);
        assert!(matches!(e.as_slice(), [Effect::Notice { .. }]), "{e:?}");
    }

    #[test]
    fn an_approval_answer_reaches_its_prompt_busy_or_not() {
        assert_eq!(decide(&in_turn(), Input::ApprovalAnswered), vec![Effect::AnswerApproval]);
        assert_eq!(decide(&idle(), Input::ApprovalAnswered), vec![Effect::AnswerApproval]);
    }

    // --- The end of a turn. --------------------------------------------------------------

    #[test]
    fn an_interrupted_turn_puts_typed_messages_back_into_the_input() {
        let state = State { pending: 1, queued: 1, ..in_turn() };
        let e = decide(&state, Input::TurnFinished { outcome: TurnOutcome::Interrupted });
        assert_eq!(e, vec![Effect::GoalTurnEnded, Effect::RestorePending, Effect::PublishPending]);
    }

    #[test]
    fn a_completed_turn_keeps_pending_messages_for_the_next_turn() {
        for outcome in [TurnOutcome::Completed, TurnOutcome::Failed, TurnOutcome::BudgetExhausted] {
            let e = decide(&in_turn(), Input::TurnFinished { outcome });
            assert_eq!(e, vec![Effect::GoalTurnEnded], "{outcome:?}");
        }
    }

    #[test]
    fn a_bang_command_is_not_a_goal_turn() {
        let state = State { phase: Phase::Bang, ..idle() };
        assert_eq!(decide(&state, Input::TurnFinished { outcome: TurnOutcome::Completed }), vec![]);
    }

    #[test]
    fn pausing_and_unpausing_are_announced() {
        let e = decide(&idle(), Input::PauseChanged { paused: true, reason: Some("lunch".into()) });
        assert!(
            matches!(&e[0], Effect::Notice { level: NoticeLevel::Warn, text } if text.starts_with("PAUSED — lunch: ") && text.contains("typed messages wait")),
            "{e:?}"
        );
        assert_eq!(e[1], Effect::SendStatus);
        let e = decide(&idle(), Input::PauseChanged { paused: false, reason: None });
        assert!(matches!(&e[0], Effect::Notice { level: NoticeLevel::Info, .. }));
    }

    #[test]
    fn a_finished_compaction_refreshes_the_status() {
        assert_eq!(decide(&idle(), Input::CompactionFinished), vec![Effect::SendStatus]);
    }
}
