//! `Scheduler::handle`, one test per cell of the tables in DESIGN §3 and §3a.

use super::*;
use crate::protocol::commands::{GoalCmd, HeartbeatCmd, JobsCmd, McpCmd};
use pretty_assertions::assert_eq;

fn idle() -> Scheduler {
    Scheduler::new(BusyMode::Redirect, false, 0, true)
}

/// A scheduler with `running` in the foreground (the front ends already told so).
fn with(running: Running) -> Scheduler {
    let mut s = idle();
    s.running = running;
    s.told = s.phase();
    s
}

fn in_turn() -> Scheduler {
    with(Running::Turn)
}

fn paused() -> Scheduler {
    let mut s = idle();
    s.paused = true;
    s.told = s.phase();
    s
}

fn msg(text: &str, mode: Option<BusyMode>) -> Input {
    Input::Message { message: UserMessage::plain(text), mode }
}

fn has(effects: &[Effect], e: &Effect) -> bool {
    effects.contains(e)
}

fn publish(pending: &[&str], queued: &[&str]) -> Effect {
    Effect::Publish {
        pending: pending.iter().map(|s| s.to_string()).collect(),
        queued: queued.iter().map(|s| s.to_string()).collect(),
    }
}

fn started(effects: &[Effect]) -> Option<(Vec<(String, Origin)>, TurnTrigger)> {
    effects.iter().find_map(|e| match e {
        Effect::StartTurn { inputs, trigger } => {
            Some((inputs.iter().map(|i| (i.text.clone(), i.origin)).collect(), trigger.clone()))
        }
        _ => None,
    })
}

fn is_refused(effects: &[Effect]) -> bool {
    matches!(effects, [Effect::Notice { level: NoticeLevel::Warn, text }] if text.contains("not available while a turn runs"))
}

fn settle(s: &mut Scheduler) -> Vec<Effect> {
    s.handle(Input::Settle(Due::default()))
}

// --- The busy-mode table (DESIGN §3): one test per cell. -----------------------------

#[test]
fn redirect_during_streaming_aborts_the_stream_and_delivers_the_message_next() {
    let mut s = in_turn();
    let e = s.handle(msg("now", Some(BusyMode::Redirect)));
    assert!(has(&e, &Effect::AbortStream));
    assert_eq!(s.pending, vec![UserMessage::plain("now")]);
    assert!(s.queued.is_empty());
}

#[test]
fn redirect_during_tools_yields_them_and_releases_a_wait() {
    let e = in_turn().handle(msg("now", Some(BusyMode::Redirect)));
    assert!(has(&e, &Effect::YieldTools));
    assert!(has(&e, &Effect::ReleaseWait));
    assert!(!has(&e, &Effect::InterruptTurn), "a redirect never kills");
}

#[test]
fn steer_during_streaming_leaves_the_stream_alone() {
    let mut s = in_turn();
    let e = s.handle(msg("then", Some(BusyMode::Steer)));
    assert!(!has(&e, &Effect::AbortStream));
    assert_eq!(s.pending.len(), 1);
}

#[test]
fn steer_during_tools_does_not_yield_but_releases_a_process_wait() {
    let e = in_turn().handle(msg("then", Some(BusyMode::Steer)));
    assert!(!has(&e, &Effect::YieldTools));
    assert!(has(&e, &Effect::ReleaseWait));
}

#[test]
fn queue_during_streaming_waits_for_its_own_turn() {
    let mut s = in_turn();
    assert_eq!(s.handle(msg("later", Some(BusyMode::Queue))), vec![publish(&[], &["later"])]);
    assert_eq!(s.queued.len(), 1);
}

#[test]
fn queue_during_tools_touches_nothing_running() {
    let e = in_turn().handle(msg("later", Some(BusyMode::Queue)));
    for signal in [Effect::AbortStream, Effect::YieldTools, Effect::ReleaseWait, Effect::InterruptTurn] {
        assert!(!has(&e, &signal), "{signal:?}");
    }
}

#[test]
fn every_mode_keeps_the_message_exactly_once_and_shows_it_before_any_signal() {
    for mode in [BusyMode::Redirect, BusyMode::Steer, BusyMode::Queue] {
        let mut s = in_turn();
        let e = s.handle(msg("m", Some(mode)));
        assert_eq!(s.pending.len() + s.queued.len(), 1, "{mode:?}");
        // A tool starting between the two sees the message waiting (DESIGN §3).
        assert!(matches!(e.first(), Some(Effect::Publish { .. })), "{mode:?}: {e:?}");
    }
}

#[test]
fn no_mode_given_uses_the_configured_one() {
    for mode in [BusyMode::Queue, BusyMode::Steer] {
        let mut s = in_turn();
        s.busy_mode = mode;
        assert_eq!(s.clone().handle(msg("m", None)), s.handle(msg("m", Some(mode))), "{mode:?}");
    }
}

#[test]
fn an_explicit_mode_beats_the_configured_one() {
    let mut s = in_turn();
    assert_eq!(s.handle(msg("m", Some(BusyMode::Queue))), vec![publish(&[], &["m"])]);
}

#[test]
fn a_message_while_a_bang_command_runs_is_routed_like_during_a_turn() {
    let mut bang = with(Running::Bang);
    assert_eq!(bang.handle(msg("m", None)), in_turn().handle(msg("m", None)));
}

#[test]
fn a_message_while_compacting_waits_as_a_queued_turn() {
    for mode in [BusyMode::Redirect, BusyMode::Steer, BusyMode::Queue] {
        let mut s = with(Running::Compaction);
        assert_eq!(s.handle(msg("m", Some(mode))), vec![publish(&[], &["m"])]);
    }
}

#[test]
fn a_message_when_idle_starts_a_turn_whatever_the_mode() {
    for mode in [BusyMode::Redirect, BusyMode::Steer, BusyMode::Queue] {
        let mut s = idle();
        let e = s.handle(msg("hello", Some(mode)));
        assert_eq!(started(&e), Some((vec![("hello".into(), Origin::Typed)], TurnTrigger::User)), "{mode:?}");
        assert_eq!(e.last(), Some(&Effect::Phase(Phase::Turn)));
    }
}

#[test]
fn the_model_reads_the_expanded_text_and_the_input_gets_back_what_was_typed() {
    let message = UserMessage { typed: "see @a.txt".into(), text: "see @a.txt\n\n[Attached file: a.txt]".into() };
    let e = idle().handle(Input::Message { message, mode: None });
    let Some(Effect::StartTurn { inputs, .. }) = e.first() else { panic!("{e:?}") };
    assert_eq!(inputs[0].text, "see @a.txt\n\n[Attached file: a.txt]");
    assert_eq!(inputs[0].restore.as_deref(), Some("see @a.txt"));
}

#[test]
fn a_bang_command_runs_when_idle_even_while_paused() {
    for mut s in [idle(), paused()] {
        let e = s.handle(Input::Bang { typed: "!ls".into(), command: "ls".into() });
        assert_eq!(e[0], Effect::StartBang("ls".into()));
        assert_eq!(s.phase(), Phase::Shell);
    }
}

#[test]
fn a_bang_command_while_busy_is_refused_and_kept() {
    for running in [Running::Turn, Running::Bang, Running::Compaction] {
        let e = with(running).handle(Input::Bang { typed: "!ls".into(), command: "ls".into() });
        assert!(has(&e, &Effect::RestoreInput("!ls".into())), "{running:?}");
        assert!(!e.iter().any(|e| matches!(e, Effect::StartBang(_))), "{running:?}");
    }
}

// --- The turn asks for its messages (one owner of the pending list). ------------------

#[test]
fn a_delivery_point_hands_over_what_is_pending_and_keeps_it_saved_until_stored() {
    let mut s = in_turn();
    s.handle(msg("first", Some(BusyMode::Steer)));
    s.handle(msg("second", Some(BusyMode::Steer)));
    let e = s.handle(Input::DeliveryPoint);
    assert_eq!(e, vec![Effect::Deliver(vec![UserMessage::plain("first"), UserMessage::plain("second")])]);
    // Typed meanwhile: waits for the next point; the crash copy still holds all three.
    assert_eq!(s.handle(msg("third", Some(BusyMode::Steer)))[0], publish(&["first", "second", "third"], &[]));
    assert_eq!(s.handle(Input::Delivered), vec![publish(&["third"], &[])]);
    assert_eq!(s.waiting(), 1);
}

#[test]
fn a_delivery_point_with_nothing_pending_answers_empty() {
    let mut s = in_turn();
    assert_eq!(s.handle(Input::DeliveryPoint), vec![Effect::Deliver(Vec::new())]);
    assert_eq!(s.handle(Input::Delivered), vec![], "nothing to publish");
}

#[test]
fn a_queued_message_stays_on_the_pending_line_and_saved_after_a_redirect_is_delivered() {
    // The finding of #35: LONG command, Tab-queue a message, type a redirect.
    let mut s = in_turn();
    s.handle(msg("do this next", Some(BusyMode::Queue)));
    s.handle(msg("stop and look", Some(BusyMode::Redirect)));
    assert_eq!(s.handle(Input::DeliveryPoint), vec![Effect::Deliver(vec![UserMessage::plain("stop and look")])]);
    assert_eq!(s.handle(Input::Delivered), vec![publish(&[], &["do this next"])]);
    // ... and it runs as the next turn.
    s.handle(Input::TurnFinished { outcome: TurnOutcome::Completed });
    let e = settle(&mut s);
    assert_eq!(started(&e), Some((vec![("do this next".into(), Origin::Queued)], TurnTrigger::Queued)));
    assert!(has(&e, &publish(&[], &[])));
}

#[test]
fn a_message_typed_while_busy_reaches_the_model_expanded() {
    let mut s = in_turn();
    let message = UserMessage { typed: "look at @a.txt".into(), text: "look at @a.txt\n[Attached file: a.txt]".into() };
    assert_eq!(s.handle(Input::Message { message: message.clone(), mode: None })[0], publish(&["look at @a.txt"], &[]));
    assert_eq!(s.handle(Input::DeliveryPoint), vec![Effect::Deliver(vec![message])]);
}

#[test]
fn waiting_counts_what_the_next_delivery_point_gets() {
    let mut s = in_turn();
    assert_eq!(s.waiting(), 0);
    s.handle(msg("a", Some(BusyMode::Steer)));
    s.handle(msg("b", Some(BusyMode::Queue)));
    assert_eq!(s.waiting(), 1, "a queued message does not release a wait");
}

// --- What runs next when idle: one test per priority rule. ---------------------------

fn everything_due() -> (Scheduler, Due) {
    let mut s = in_turn();
    s.handle(msg("pending", Some(BusyMode::Steer)));
    s.handle(msg("queued 1", Some(BusyMode::Queue)));
    s.handle(msg("queued 2", Some(BusyMode::Queue)));
    s.handle(Input::TurnFinished { outcome: TurnOutcome::Completed });
    s.handle(Input::GoalContinuation(Some("go on".into())));
    (s, Due { heartbeat: true, job_notices: Some(0) })
}

#[test]
fn pending_messages_come_first_as_one_queued_turn() {
    let (mut s, due) = everything_due();
    let e = s.handle(Input::Settle(due));
    assert_eq!(started(&e), Some((vec![("pending".into(), Origin::Queued)], TurnTrigger::Queued)));
    assert!(has(&e, &publish(&[], &["queued 1", "queued 2"])));
}

#[test]
fn several_pending_messages_left_at_the_end_run_together_in_order() {
    let mut s = in_turn();
    s.handle(msg("one", Some(BusyMode::Steer)));
    s.handle(msg("two", Some(BusyMode::Steer)));
    s.handle(Input::TurnFinished { outcome: TurnOutcome::Completed });
    assert_eq!(started(&settle(&mut s)).map(|(i, _)| i), Some(vec![("one\n\ntwo".into(), Origin::Queued)]));
}

#[test]
fn queued_messages_come_before_the_goal_one_at_a_time() {
    let (mut s, due) = everything_due();
    s.pending.clear();
    let e = s.handle(Input::Settle(due));
    assert_eq!(started(&e), Some((vec![("queued 1".into(), Origin::Queued)], TurnTrigger::Queued)));
    assert!(has(&e, &publish(&[], &["queued 2"])));
}

#[test]
fn the_goal_comes_before_job_notices() {
    let (mut s, due) = everything_due();
    s.pending.clear();
    s.queued.clear();
    let e = s.handle(Input::Settle(due));
    assert_eq!(started(&e), Some((vec![("go on".into(), Origin::Goal)], TurnTrigger::Goal)));
    assert!(has(&e, &Effect::SendStatus));
    assert_eq!(s.goal_continuation, None, "it runs once");
}

#[test]
fn job_notices_come_before_the_heartbeat() {
    let due = Due { heartbeat: true, job_notices: Some(0) };
    assert_eq!(idle().handle(Input::Settle(due)), vec![Effect::TakeNotices]);
}

#[test]
fn the_heartbeat_comes_last() {
    let due = Due { heartbeat: true, job_notices: None };
    assert_eq!(idle().handle(Input::Settle(due)), vec![Effect::FireHeartbeat]);
}

#[test]
fn nothing_due_starts_nothing() {
    assert_eq!(settle(&mut idle()), vec![]);
}

#[test]
fn nothing_starts_while_something_runs() {
    for running in [Running::Turn, Running::Bang, Running::Compaction] {
        let (mut s, due) = everything_due();
        s.running = running;
        s.told = s.phase();
        assert_eq!(s.handle(Input::Settle(due)), vec![], "{running:?}");
    }
}

#[test]
fn nothing_starts_while_paused() {
    let (mut s, due) = everything_due();
    s.paused = true;
    s.told = s.phase();
    assert_eq!(s.handle(Input::Settle(due)), vec![]);
}

#[test]
fn a_goal_boundary_holds_back_autonomous_work_but_not_the_user() {
    let mut s = idle();
    s.handle(Input::Boundary(Boundary::Gates));
    s.handle(Input::GoalContinuation(Some("go on".into())));
    assert_eq!(s.handle(Input::Settle(Due { heartbeat: true, job_notices: Some(0) })), vec![]);
    s.queued.push_back(UserMessage::plain("mine"));
    assert_eq!(started(&settle(&mut s)).map(|(_, t)| t), Some(TurnTrigger::Queued));
}

#[test]
fn job_notices_wait_when_they_may_not_start_a_turn() {
    let mut s = idle();
    s.notify_starts_turn = false;
    assert_eq!(s.handle(Input::Settle(Due { heartbeat: true, job_notices: Some(0) })), vec![Effect::FireHeartbeat]);
}

#[test]
fn notices_within_the_window_wait_for_each_other() {
    let mut waiting = idle();
    waiting.notice_window_ms = 300;
    let early = Due { heartbeat: true, job_notices: Some(100) };
    assert_eq!(waiting.clone().handle(Input::Settle(early)), vec![], "the heartbeat waits behind them too");
    assert_eq!(waiting.job_notices_due_in_ms(Some(100)), Some(200));
    let due = Due { heartbeat: true, job_notices: Some(300) };
    assert_eq!(waiting.clone().handle(Input::Settle(due)), vec![Effect::TakeNotices]);
    assert_eq!(waiting.job_notices_due_in_ms(Some(300)), Some(0));
    // Nothing to wake for when they are not what runs next.
    let mut states = vec![waiting.clone(); 5];
    states[0].running = Running::Turn;
    states[1].paused = true;
    states[2].boundary = Boundary::Gates;
    states[3].queued.push_back(UserMessage::plain("q"));
    states[4].notify_starts_turn = false;
    for state in states {
        assert_eq!(state.job_notices_due_in_ms(Some(100)), None, "{state:?}");
    }
    assert_eq!(waiting.job_notices_due_in_ms(None), None);
}

#[test]
fn idle_means_what_the_design_says() {
    assert!(idle().idle());
    assert!(!in_turn().idle());
    let mut s = idle();
    s.pending.push(UserMessage::plain("p"));
    assert!(!s.idle());
    let mut s = idle();
    s.queued.push_back(UserMessage::plain("q"));
    assert!(!s.idle());
    let mut s = idle();
    s.boundary = Boundary::Judging;
    assert!(!s.idle());
    let mut s = idle();
    s.goal_continuation = Some("g".into());
    assert!(!s.idle());
    assert!(!paused().idle());
}

// --- Notices of jobs. -----------------------------------------------------------------

fn note(id: &str, origin: Origin) -> JobNote {
    JobNote { id: id.into(), origin, text: format!("[{id} news]") }
}

#[test]
fn notices_that_came_together_start_one_turn() {
    let mut s = idle();
    let e = s.handle(Input::NoticesTaken(vec![note("job_1", Origin::JobNotice), note("job_2", Origin::Watch)]));
    let want = vec![("[job_1 news]".into(), Origin::JobNotice), ("[job_2 news]".into(), Origin::Watch)];
    assert_eq!(started(&e), Some((want, TurnTrigger::JobNotification)));
}

#[test]
fn a_kill_the_user_made_waits_for_the_next_turn_and_goes_in_first() {
    let mut s = idle();
    s.handle(Input::JobKilled("job_1".into()));
    let e = s.handle(Input::NoticesTaken(vec![note("job_1", Origin::JobNotice)]));
    assert!(
        matches!(e.as_slice(), [Effect::Notice { text, .. }] if text == "job_1 killed: the model hears of it with your next message"),
        "{e:?}"
    );
    let e = s.handle(msg("what now?", None));
    let want = vec![("[job_1 news]".into(), Origin::JobNotice), ("what now?".into(), Origin::Typed)];
    assert_eq!(started(&e), Some((want, TurnTrigger::User)));
    // Told once.
    s.handle(Input::TurnFinished { outcome: TurnOutcome::Completed });
    let e = s.handle(msg("and then?", None));
    assert_eq!(started(&e).map(|(i, _)| i.len()), Some(1));
}

#[test]
fn a_watch_match_of_a_killed_job_still_starts_a_turn() {
    let mut s = idle();
    s.handle(Input::JobKilled("job_1".into()));
    let e = s.handle(Input::NoticesTaken(vec![note("job_1", Origin::Watch)]));
    assert_eq!(started(&e).map(|(_, t)| t), Some(TurnTrigger::JobNotification));
}

#[test]
fn a_heartbeat_that_fired_runs_with_its_origin() {
    let mut s = idle();
    let input = TurnInput::injected("[Heartbeat …]\ncheck".into(), "check".into(), Origin::Heartbeat);
    let e = s.handle(Input::Run { input, trigger: TurnTrigger::Heartbeat });
    assert_eq!(started(&e), Some((vec![("[Heartbeat …]\ncheck".into(), Origin::Heartbeat)], TurnTrigger::Heartbeat)));
}

// --- Commands refused while busy. ----------------------------------------------------

#[test]
fn new_is_refused_while_busy() {
    assert!(is_refused(&in_turn().handle(Input::Command(SlashCommand::New))));
}

#[test]
fn resume_is_refused_while_busy() {
    assert!(is_refused(&in_turn().handle(Input::Command(SlashCommand::Resume(Some("x".into()))))));
    assert!(is_refused(&in_turn().handle(Input::Command(SlashCommand::Resume(None)))));
}

#[test]
fn retry_is_refused_while_busy() {
    assert!(is_refused(&in_turn().handle(Input::Command(SlashCommand::Retry))));
}

#[test]
fn undo_is_refused_while_busy() {
    assert!(is_refused(&in_turn().handle(Input::Command(SlashCommand::Undo(1)))));
}

#[test]
fn switching_the_model_is_refused_while_busy_but_listing_is_not() {
    assert!(is_refused(&in_turn().handle(Input::Command(SlashCommand::Model(Some("m".into()))))));
    let e = in_turn().handle(Input::Command(SlashCommand::Model(None)));
    assert_eq!(e, vec![Effect::RunCommand(SlashCommand::Model(None))]);
}

#[test]
fn compact_is_refused_while_busy_and_while_compacting() {
    assert!(is_refused(&in_turn().handle(Input::Command(SlashCommand::Compact(None)))));
    let mut compacting = with(Running::Compaction);
    assert!(is_refused(&compacting.handle(Input::Command(SlashCommand::Compact(None)))));
    assert!(is_refused(&compacting.handle(Input::Command(SlashCommand::Retry))));
}

#[test]
fn history_commands_run_when_idle() {
    for c in [
        SlashCommand::New,
        SlashCommand::Resume(None),
        SlashCommand::Retry,
        SlashCommand::Undo(2),
        SlashCommand::Model(Some("m".into())),
    ] {
        assert_eq!(idle().handle(Input::Command(c.clone())), vec![Effect::RunCommand(c.clone())], "{c:?}");
    }
}

#[test]
fn commands_that_leave_the_history_alone_run_while_busy() {
    for c in [
        SlashCommand::Sessions,
        SlashCommand::Title("t".into()),
        SlashCommand::Busy(None),
        SlashCommand::Jobs(JobsCmd::List),
        SlashCommand::Heartbeat(HeartbeatCmd::Status),
        SlashCommand::Goal(GoalCmd::Status),
        SlashCommand::Pause(None),
        SlashCommand::Unpause,
        SlashCommand::Usage,
        SlashCommand::Permissions,
        SlashCommand::Mcp(McpCmd::List),
        SlashCommand::Mcp(McpCmd::Restart("x".into())),
    ] {
        assert_eq!(in_turn().handle(Input::Command(c.clone())), vec![Effect::RunCommand(c.clone())], "{c:?}");
    }
}

#[test]
fn busy_sets_the_mode_the_next_message_uses() {
    let mut s = in_turn();
    let e = s.handle(Input::Command(SlashCommand::Busy(Some(BusyMode::Queue))));
    assert_eq!(e, vec![Effect::RunCommand(SlashCommand::Busy(Some(BusyMode::Queue)))]);
    assert_eq!(s.busy_mode(), BusyMode::Queue);
    assert_eq!(s.handle(msg("m", None)), vec![publish(&[], &["m"])]);
}

#[test]
fn compact_starts_the_compaction_and_says_the_phase() {
    let mut s = idle();
    let e = s.handle(Input::Command(SlashCommand::Compact(Some("focus".into()))));
    assert_eq!(e, vec![Effect::StartCompaction(Some("focus".into())), Effect::Phase(Phase::Compacting)]);
    assert_eq!(s.handle(Input::CompactionFinished), vec![Effect::SendStatus, Effect::Phase(Phase::Idle)]);
}

#[test]
fn another_session_takes_what_waits_back_into_the_input_first() {
    let mut s = paused();
    s.handle(msg("held", None));
    s.deferred.push(TurnInput::typed("old news"));
    let e = s.handle(Input::Command(SlashCommand::New));
    assert_eq!(e, vec![Effect::RestoreInput("held".into()), publish(&[], &[]), Effect::RunCommand(SlashCommand::New)]);
    assert!(s.deferred.is_empty());
}

// --- Interrupts, yields and approvals. -----------------------------------------------

#[test]
fn an_interrupt_cancels_the_turn_and_denies_open_approvals() {
    assert_eq!(in_turn().handle(Input::Interrupt), vec![Effect::InterruptTurn, Effect::DenyApprovals]);
}

#[test]
fn an_interrupt_stops_a_bang_command_too() {
    assert_eq!(with(Running::Bang).handle(Input::Interrupt), vec![Effect::InterruptTurn, Effect::DenyApprovals]);
}

#[test]
fn stop_is_the_same_as_esc() {
    let mut gates = idle();
    gates.handle(Input::Boundary(Boundary::Gates));
    for s in [idle(), in_turn(), gates, with(Running::Compaction)] {
        assert_eq!(s.clone().handle(Input::Command(SlashCommand::Stop)), s.clone().handle(Input::Interrupt));
    }
}

#[test]
fn an_interrupt_while_the_gates_run_stops_them() {
    let mut s = idle();
    assert_eq!(s.handle(Input::Boundary(Boundary::Gates)), vec![Effect::Phase(Phase::Gates)]);
    assert_eq!(s.handle(Input::Interrupt), vec![Effect::InterruptBoundary]);
    assert_eq!(s.handle(Input::Boundary(Boundary::Judging)), vec![Effect::Phase(Phase::Judging)]);
    assert_eq!(s.handle(Input::Interrupt), vec![Effect::InterruptBoundary]);
    assert_eq!(s.handle(Input::Boundary(Boundary::None)), vec![Effect::Phase(Phase::Idle)]);
}

#[test]
fn an_interrupt_never_waits_behind_compact() {
    assert_eq!(with(Running::Compaction).handle(Input::Interrupt), vec![Effect::CancelCompaction]);
}

#[test]
fn an_interrupt_with_nothing_running_only_says_so() {
    let e = idle().handle(Input::Interrupt);
    assert!(matches!(e.as_slice(), [Effect::Notice { level: NoticeLevel::Info, .. }]), "{e:?}");
}

#[test]
fn a_yield_moves_commands_to_the_background_without_touching_approvals() {
    // A yield raised while an approval is open must not deny it: the approved command
    // then runs (the stale-interrupt guarantee).
    assert_eq!(in_turn().handle(Input::YieldForeground), vec![Effect::YieldTools]);
}

#[test]
fn a_redirect_never_denies_an_open_approval() {
    let e = in_turn().handle(msg("m", Some(BusyMode::Redirect)));
    assert!(!has(&e, &Effect::DenyApprovals));
    assert!(!has(&e, &Effect::InterruptTurn));
}

#[test]
fn a_yield_with_nothing_in_the_foreground_only_says_so() {
    for mut s in [idle(), with(Running::Compaction)] {
        let e = s.handle(Input::YieldForeground);
        assert!(matches!(e.as_slice(), [Effect::Notice { .. }]), "{e:?}");
    }
}

#[test]
fn an_approval_answer_reaches_its_prompt_busy_or_not() {
    let answer = Input::ApprovalAnswered { id: 7, decision: Approval::Once };
    for mut s in [in_turn(), idle()] {
        assert_eq!(s.handle(answer.clone()), vec![Effect::AnswerApproval { id: 7, decision: Approval::Once }]);
    }
}

// --- The end of a turn. --------------------------------------------------------------

#[test]
fn an_interrupted_turn_puts_typed_messages_back_into_the_input() {
    let mut s = in_turn();
    s.handle(msg("a steer", Some(BusyMode::Steer)));
    s.handle(msg("a queued one", Some(BusyMode::Queue)));
    let e = s.handle(Input::TurnFinished { outcome: TurnOutcome::Interrupted });
    assert_eq!(
        e,
        vec![
            Effect::GoalTurnEnded(TurnOutcome::Interrupted),
            Effect::RestoreInput("a steer\n\na queued one".into()),
            publish(&[], &[]),
            Effect::Phase(Phase::Idle),
        ]
    );
    assert_eq!(settle(&mut s), vec![], "never auto-sent");
}

#[test]
fn a_completed_turn_keeps_pending_messages_for_the_next_turn() {
    for outcome in [TurnOutcome::Completed, TurnOutcome::Failed, TurnOutcome::BudgetExhausted] {
        let mut s = in_turn();
        s.handle(msg("later", Some(BusyMode::Steer)));
        let e = s.handle(Input::TurnFinished { outcome });
        assert_eq!(e, vec![Effect::GoalTurnEnded(outcome), Effect::Phase(Phase::Idle)], "{outcome:?}");
        assert_eq!(s.pending.len(), 1);
    }
}

#[test]
fn a_bang_command_is_not_a_goal_turn() {
    let e = with(Running::Bang).handle(Input::TurnFinished { outcome: TurnOutcome::Completed });
    assert_eq!(e, vec![Effect::Phase(Phase::Idle)]);
}

// --- Pause. ----------------------------------------------------------------------------

#[test]
fn pausing_and_unpausing_are_announced_once_each() {
    let mut s = idle();
    let e = s.handle(Input::PauseChanged { paused: true, reason: Some("lunch".into()) });
    assert!(
        matches!(&e[0], Effect::Notice { level: NoticeLevel::Warn, text } if text.starts_with("PAUSED — lunch: ") && text.contains("typed messages wait")),
        "{e:?}"
    );
    assert_eq!(e[1..], [Effect::SendStatus, Effect::Phase(Phase::Paused)]);
    // The file watcher reports the same change a moment later: nothing more is said.
    assert_eq!(s.handle(Input::PauseChanged { paused: true, reason: Some("lunch".into()) }), vec![]);
    let e = s.handle(Input::PauseChanged { paused: false, reason: None });
    assert!(matches!(&e[0], Effect::Notice { level: NoticeLevel::Info, text } if text == "unpaused"), "{e:?}");
    assert_eq!(s.handle(Input::PauseChanged { paused: false, reason: None }), vec![]);
}

#[test]
fn the_pause_notices_print_no_markup() {
    assert!(!pause_notice(None).contains('`'), "{}", pause_notice(None));
    let e = paused().handle(msg("m", None));
    assert!(e.iter().all(|e| !matches!(e, Effect::Notice { text, .. } if text.contains('`'))), "{e:?}");
}

#[test]
fn a_message_typed_while_paused_waits_queued_and_runs_on_unpause() {
    let mut s = paused();
    let e = s.handle(msg("hello while paused", None));
    assert_eq!(e[0], publish(&[], &["hello while paused"]));
    assert!(matches!(&e[1], Effect::Notice { level: NoticeLevel::Warn, text } if text.contains("waits")), "{e:?}");
    assert!(!e.iter().any(|e| matches!(e, Effect::StartTurn { .. } | Effect::RestoreInput(_))), "{e:?}");
    assert_eq!(settle(&mut s), vec![], "not while paused");
    s.handle(Input::PauseChanged { paused: false, reason: None });
    let e = settle(&mut s);
    assert_eq!(started(&e), Some((vec![("hello while paused".into(), Origin::Queued)], TurnTrigger::Queued)));
}

#[test]
fn esc_while_paused_takes_the_waiting_messages_back() {
    let mut s = paused();
    s.handle(msg("one", None));
    s.handle(msg("two", None));
    let e = s.handle(Input::Interrupt);
    assert_eq!(e, vec![Effect::RestoreInput("one\n\ntwo".into()), publish(&[], &[])]);
    s.handle(Input::PauseChanged { paused: false, reason: None });
    assert_eq!(settle(&mut s), vec![]);
}

// --- The phase every front end reads. ---------------------------------------------------

#[test]
fn the_phase_is_told_when_it_changes_and_only_then() {
    let mut s = idle();
    assert_eq!(s.phase(), Phase::Idle);
    let e = s.handle(msg("go", None));
    assert_eq!(e.iter().filter(|e| matches!(e, Effect::Phase(_))).count(), 1);
    let e = s.handle(msg("more", Some(BusyMode::Steer)));
    assert!(!e.iter().any(|e| matches!(e, Effect::Phase(_))), "still a turn: {e:?}");
    // A turn while paused is still a turn; paused shows once it ends.
    s.handle(Input::PauseChanged { paused: true, reason: None });
    assert_eq!(s.phase(), Phase::Turn);
    let e = s.handle(Input::TurnFinished { outcome: TurnOutcome::Completed });
    assert_eq!(e.last(), Some(&Effect::Phase(Phase::Paused)));
}

#[test]
fn a_session_starting_paused_says_so() {
    let s = Scheduler::new(BusyMode::Steer, true, 0, true);
    assert_eq!((s.phase(), s.told, s.busy_mode()), (Phase::Paused, Phase::Paused, BusyMode::Steer));
}
