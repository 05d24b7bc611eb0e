//! `update()` driven by keys and engine events, with no terminal and no engine.

use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use pretty_assertions::assert_eq;

use super::{App, ExitState, Focus, Modal, APPROVAL_ARM, DOUBLE_CTRL_C, LOG_LIMIT};
use crate::config::Config;
use crate::protocol::commands::SlashCommand;
use crate::protocol::{Approval, BusyMode, JobAction, NoticeLevel, Op};
use crate::protocol::{Event, JobInfo, JobStatus, Origin, Phase, TurnTrigger};
use crate::tui::app::AppEvent;
use crate::tui::keymap::Keymap;
use crate::tui::theme::Theme;
use crate::tui::transcript::CellBody;

fn app() -> App {
    App::new(&Config::default(), Keymap::builtin(), Theme::default(), None)
}

fn key(app: &mut App, code: KeyCode, mods: KeyModifiers) -> Vec<Op> {
    app.update(AppEvent::Key(KeyEvent::new(code, mods)))
}

fn type_text(app: &mut App, text: &str) {
    for c in text.chars() {
        key(app, KeyCode::Char(c), KeyModifiers::NONE);
    }
}

fn busy(app: &mut App) {
    app.update(AppEvent::Engine(Event::Phase { phase: Phase::Turn }));
    app.update(AppEvent::Engine(Event::TurnStarted { trigger: TurnTrigger::User }));
}

fn running_job(id: &str) -> JobInfo {
    JobInfo {
        id: id.into(),
        command: "sleep 100".into(),
        pid: 42,
        cwd: "/tmp".into(),
        started_at_ms: 0,
        status: JobStatus::Running,
        background: true,
        has_stdin: true,
        last_line: String::new(),
        agent: None,
    }
}

#[test]
fn enter_sends_with_the_configured_mode_even_while_busy() {
    let mut app = app();
    type_text(&mut app, "hello");
    assert_eq!(
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
        vec![Op::Submit { text: "hello".into(), mode: None }]
    );
    assert!(app.input_is_empty());
    busy(&mut app);
    type_text(&mut app, "more");
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![Op::Submit { text: "more".into(), mode: None }]);
}

#[test]
fn tab_while_busy_queues() {
    let mut app = app();
    busy(&mut app);
    type_text(&mut app, "later");
    assert_eq!(
        key(&mut app, KeyCode::Tab, KeyModifiers::NONE),
        vec![Op::Submit { text: "later".into(), mode: Some(BusyMode::Queue) }]
    );
}

#[test]
fn esc_interrupts_only_when_busy() {
    let mut app = app();
    assert_eq!(key(&mut app, KeyCode::Esc, KeyModifiers::NONE), vec![]);
    busy(&mut app);
    assert_eq!(key(&mut app, KeyCode::Esc, KeyModifiers::NONE), vec![Op::Interrupt]);
}

#[test]
fn ctrl_c_twice_quits() {
    let mut app = app();
    type_text(&mut app, "draft");
    assert_eq!(key(&mut app, KeyCode::Char('c'), KeyModifiers::CONTROL), vec![]);
    assert!(app.input_is_empty(), "the first Ctrl+C clears the input");
    app.now += Duration::from_millis(500);
    assert_eq!(key(&mut app, KeyCode::Char('c'), KeyModifiers::CONTROL), vec![Op::Shutdown]);
    assert!(matches!(app.exit, ExitState::Quitting { .. }));
}

#[test]
fn ctrl_c_interrupts_when_busy_and_a_slow_second_does_not_quit() {
    let mut app = app();
    busy(&mut app);
    assert_eq!(key(&mut app, KeyCode::Char('c'), KeyModifiers::CONTROL), vec![Op::Interrupt]);
    app.now += DOUBLE_CTRL_C + Duration::from_millis(1);
    assert_eq!(key(&mut app, KeyCode::Char('c'), KeyModifiers::CONTROL), vec![Op::Interrupt]);
    assert_eq!(app.exit, ExitState::Running);
}

#[test]
fn quitting_with_running_jobs_asks_and_enter_is_the_safe_answer() {
    let mut app = app();
    app.update(AppEvent::Engine(Event::JobStarted { job: running_job("job_1") }));
    assert_eq!(key(&mut app, KeyCode::Char('d'), KeyModifiers::CONTROL), vec![]);
    assert_eq!(app.modal, Some(Modal::QuitConfirm));
    assert_eq!(key(&mut app, KeyCode::Esc, KeyModifiers::NONE), vec![]);
    assert_eq!(app.modal, None);
    key(&mut app, KeyCode::Char('d'), KeyModifiers::CONTROL);
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![], "Enter cancels");
    assert_eq!(app.modal, None);
    key(&mut app, KeyCode::Char('d'), KeyModifiers::CONTROL);
    // Shutdown kills the running jobs itself, recording "talaria quit" as the reason.
    assert_eq!(key(&mut app, KeyCode::Char('y'), KeyModifiers::NONE), vec![Op::Shutdown]);
}

#[test]
fn slash_commands_are_parsed_or_rejected_locally() {
    let mut app = app();
    type_text(&mut app, "/busy steer");
    assert_eq!(
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
        vec![Op::Command(SlashCommand::Busy(Some(BusyMode::Steer)))]
    );
    type_text(&mut app, "/frobnicate");
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![]);
    assert_eq!(app.input_text(), "/frobnicate", "a bad command stays in the input to fix");
    let last = app.transcript.cells().last().map(|c| c.body.clone());
    assert!(
        matches!(last, Some(CellBody::Notice { level: NoticeLevel::Error, text }) if text.contains("unknown command"))
    );
    app.reset_input(String::new());
    type_text(&mut app, "/help");
    key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    assert_eq!(app.modal, Some(Modal::Help { scroll: 0 }));
    key(&mut app, KeyCode::Esc, KeyModifiers::NONE);
    type_text(&mut app, "/stop");
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![Op::Interrupt]);
    type_text(&mut app, "/quit");
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![Op::Shutdown]);
}

#[test]
fn newline_keys_and_paste_do_not_send() {
    let mut app = app();
    type_text(&mut app, "a");
    key(&mut app, KeyCode::Enter, KeyModifiers::ALT);
    type_text(&mut app, "b");
    key(&mut app, KeyCode::Char('j'), KeyModifiers::CONTROL);
    app.update(AppEvent::Paste("c\r\nd".into()));
    assert_eq!(app.input_text(), "a\nb\nc\nd");
    assert_eq!(
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
        vec![Op::Submit { text: "a\nb\nc\nd".into(), mode: None }]
    );
}

#[test]
fn readline_keys_edit_the_input() {
    let mut app = app();
    type_text(&mut app, "one two three");
    key(&mut app, KeyCode::Char('w'), KeyModifiers::CONTROL);
    assert_eq!(app.input_text(), "one two ");
    key(&mut app, KeyCode::Char('a'), KeyModifiers::CONTROL);
    type_text(&mut app, ">");
    key(&mut app, KeyCode::Char('e'), KeyModifiers::CONTROL);
    type_text(&mut app, "!");
    assert_eq!(app.input_text(), ">one two !");
    key(&mut app, KeyCode::Char('b'), KeyModifiers::ALT);
    key(&mut app, KeyCode::Char('k'), KeyModifiers::CONTROL);
    assert_eq!(app.input_text(), ">one two ");
    key(&mut app, KeyCode::Char('u'), KeyModifiers::CONTROL);
    assert_eq!(app.input_text(), "");
}

#[test]
fn up_and_down_recall_earlier_messages_on_an_empty_input() {
    let mut app = app();
    for text in ["first", "second"] {
        type_text(&mut app, text);
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    }
    key(&mut app, KeyCode::Up, KeyModifiers::NONE);
    assert_eq!(app.input_text(), "second");
    key(&mut app, KeyCode::Up, KeyModifiers::NONE);
    assert_eq!(app.input_text(), "first");
    key(&mut app, KeyCode::Down, KeyModifiers::NONE);
    assert_eq!(app.input_text(), "second");
    key(&mut app, KeyCode::Down, KeyModifiers::NONE);
    assert_eq!(app.input_text(), "");
}

#[test]
fn approvals_queue_and_answer_in_order() {
    let mut app = app();
    for id in [7, 8] {
        app.update(AppEvent::Engine(Event::ApprovalNeeded {
            id,
            command: "rm -rf build".into(),
            reason: "recursive delete".into(),
            grounds: Vec::new(),
            from: None,
        }));
    }
    assert_eq!(key(&mut app, KeyCode::Char('o'), KeyModifiers::NONE), vec![], "not armed yet");
    app.now += APPROVAL_ARM;
    assert_eq!(
        key(&mut app, KeyCode::Char('s'), KeyModifiers::NONE),
        vec![Op::Approve { id: 7, decision: Approval::Session }]
    );
    assert_eq!(
        key(&mut app, KeyCode::Esc, KeyModifiers::NONE),
        vec![Op::Approve { id: 8, decision: Approval::Deny }, Op::Interrupt]
    );
    assert!(app.approvals.is_empty());
}

#[test]
fn jobs_pane_opens_logs_kills_with_confirmation_and_writes() {
    let mut app = app();
    app.update(AppEvent::Engine(Event::JobStarted { job: running_job("job_3") }));
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    assert_eq!(app.focus, Focus::Jobs);
    assert_eq!(
        key(&mut app, KeyCode::Char('p'), KeyModifiers::NONE),
        vec![Op::Job { id: "job_3".into(), action: JobAction::Poll }]
    );
    assert_eq!(key(&mut app, KeyCode::Char('k'), KeyModifiers::NONE), vec![]);
    assert_eq!(app.modal, Some(Modal::KillConfirm { id: "job_3".into() }));
    assert_eq!(
        key(&mut app, KeyCode::Char('y'), KeyModifiers::NONE),
        vec![Op::Job { id: "job_3".into(), action: JobAction::Kill }]
    );
    key(&mut app, KeyCode::Char('i'), KeyModifiers::NONE);
    type_text(&mut app, "yes");
    assert_eq!(
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
        vec![Op::Job { id: "job_3".into(), action: JobAction::Write { data: "yes\n".into() } }]
    );
    // w watches the job's output for a pattern; an empty one stops the user's watches.
    key(&mut app, KeyCode::Char('w'), KeyModifiers::NONE);
    type_text(&mut app, "READY|error");
    assert_eq!(
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
        vec![Op::Job { id: "job_3".into(), action: JobAction::Watch { pattern: "READY|error".into() } }]
    );
    key(&mut app, KeyCode::Char('w'), KeyModifiers::NONE);
    assert_eq!(
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
        vec![Op::Job { id: "job_3".into(), action: JobAction::Unwatch { pattern: None } }]
    );
    let ops = key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    assert_eq!(
        ops,
        vec![Op::Job { id: "job_3".into(), action: JobAction::Log { offset: None, limit: Some(LOG_LIMIT) } }]
    );
    app.update(AppEvent::Engine(Event::JobLog {
        id: "job_3".into(),
        text: "\x1b[32mok\x1b[0m\n\x1b]52;c;eA==\x07done".into(),
        first_line: 1,
        total_lines: 2,
        from: 1,
        to: 2,
    }));
    let view = app.log_view.as_ref().expect("log view open");
    assert_eq!(view.lines.iter().map(|l| l.to_string()).collect::<Vec<_>>(), vec!["ok", "done"]);
    // Following: an update asks for the newest lines once until they arrive.
    let update = Event::JobUpdated { id: "job_3".into(), status: JobStatus::Running, tail: "x".into() };
    assert_eq!(app.update(AppEvent::Engine(update.clone())).len(), 1);
    assert_eq!(app.update(AppEvent::Engine(update)).len(), 0);
    key(&mut app, KeyCode::Esc, KeyModifiers::NONE);
    assert!(app.log_view.is_none());
    key(&mut app, KeyCode::Esc, KeyModifiers::NONE);
    assert_eq!(app.focus, Focus::Input);
}

#[test]
fn ctrl_b_yields_only_while_something_runs() {
    let mut app = app();
    assert_eq!(key(&mut app, KeyCode::Char('b'), KeyModifiers::CONTROL), vec![]);
    busy(&mut app);
    assert_eq!(key(&mut app, KeyCode::Char('b'), KeyModifiers::CONTROL), vec![Op::YieldForeground]);
}

#[test]
fn restored_input_and_mid_turn_messages() {
    let mut app = app();
    app.update(AppEvent::Engine(Event::RestoreInput { text: "put back".into() }));
    assert_eq!(app.input_text(), "put back");
    busy(&mut app);
    app.update(AppEvent::Engine(Event::UserMessage {
        seq: None,
        text: "go".into(),
        trigger: TurnTrigger::User,
        origin: Origin::Typed,
    }));
    app.update(AppEvent::Engine(Event::AssistantDelta("working".into())));
    app.update(AppEvent::Engine(Event::UserMessage {
        seq: None,
        text: "also this".into(),
        trigger: TurnTrigger::User,
        origin: Origin::MidTurn,
    }));
    let origins: Vec<_> = app
        .transcript
        .cells()
        .iter()
        .filter_map(|c| match &c.body {
            CellBody::User { origin, .. } => Some(*origin),
            _ => None,
        })
        .collect();
    use crate::tui::transcript::UserOrigin;
    assert_eq!(origins, vec![UserOrigin::Typed, UserOrigin::MidTurn]);
}

#[test]
fn slash_lists_matching_commands_and_tab_completes_the_unique_one() {
    let mut app = app();
    type_text(&mut app, "/");
    assert_eq!(app.completions().len(), crate::protocol::commands::COMMANDS.len());
    type_text(&mut app, "co");
    let names: Vec<&str> = app.completions().iter().map(|c| c.usage).collect();
    assert_eq!(names, vec!["/compact [focus]", "/copy"]);
    type_text(&mut app, "m");
    assert_eq!(key(&mut app, KeyCode::Tab, KeyModifiers::NONE), vec![]);
    // /compact takes an argument: the cursor lands after a space, and the popup closes.
    assert_eq!(app.input_text(), "/compact ");
    assert!(app.completions().is_empty());
    // Two entries share /goal: Tab completes the name they share.
    app.reset_input("/goa".into());
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    assert_eq!(app.input_text(), "/goal ");
    // Not at the start of the input: no popup.
    app.reset_input("see /co".into());
    assert!(app.completions().is_empty());
}

#[test]
fn up_and_down_choose_the_completion_that_tab_takes() {
    let mut app = app();
    type_text(&mut app, "/u");
    let names: Vec<&str> = app.completions().iter().map(|c| c.usage).collect();
    assert_eq!(names, vec!["/undo [n]", "/unpause", "/usage"]);
    assert_eq!(app.completion_selected(), 0);
    key(&mut app, KeyCode::Down, KeyModifiers::NONE);
    key(&mut app, KeyCode::Down, KeyModifiers::NONE);
    assert_eq!(app.completion_selected(), 2);
    key(&mut app, KeyCode::Up, KeyModifiers::NONE);
    assert_eq!(app.completion_selected(), 1);
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    assert_eq!(app.input_text(), "/unpause");
    // Enter then runs it as typed.
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![Op::Command(SlashCommand::Unpause)]);
}

#[test]
fn esc_closes_the_popup_until_the_input_changes() {
    let mut app = app();
    type_text(&mut app, "/co");
    assert_eq!(app.completions().len(), 2);
    key(&mut app, KeyCode::Esc, KeyModifiers::NONE);
    assert!(app.completions().is_empty());
    assert_eq!(app.input_text(), "/co");
    // Tab no longer completes; it does what it did before (nothing, with no panes).
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    assert_eq!(app.input_text(), "/co");
    type_text(&mut app, "p");
    assert_eq!(app.completions().len(), 1);
}

#[test]
fn tab_while_busy_queues_instead_of_completing() {
    let mut app = app();
    busy(&mut app);
    type_text(&mut app, "/sto");
    assert_eq!(app.completions().len(), 1, "the popup shows while busy too");
    type_text(&mut app, "p");
    // Tab while busy queues, as before; a slash command runs at once.
    assert_eq!(key(&mut app, KeyCode::Tab, KeyModifiers::NONE), vec![Op::Interrupt]);
    assert_eq!(app.input_text(), "");
}

#[test]
fn mouse_command_and_f2_toggle_mouse_capture_without_telling_the_engine() {
    let mut app = app();
    let start = app.mouse;
    type_text(&mut app, "/mouse");
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![]);
    assert_eq!(app.mouse, !start);
    assert_eq!(key(&mut app, KeyCode::F(2), KeyModifiers::NONE), vec![]);
    assert_eq!(app.mouse, start);
    let notices = app.transcript.cells().iter().filter(|c| matches!(c.body, CellBody::Notice { .. })).count();
    assert_eq!(notices, 2);
}

#[test]
fn copy_puts_the_last_answer_on_the_clipboard_with_osc52() {
    let mut app = app();
    type_text(&mut app, "/copy");
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![]);
    assert_eq!(app.clipboard, None, "nothing to copy before an answer");
    app.update(AppEvent::Engine(Event::AssistantDone { text: "first".into(), reasoning: None }));
    app.update(AppEvent::Engine(Event::AssistantDone { text: "hi".into(), reasoning: None }));
    type_text(&mut app, "/copy");
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![]);
    assert_eq!(app.clipboard.as_deref(), Some("\x1b]52;c;aGk=\x07"));
}

#[test]
fn ctrl_z_asks_the_event_loop_to_suspend() {
    let mut app = app();
    type_text(&mut app, "draft");
    assert_eq!(key(&mut app, KeyCode::Char('z'), KeyModifiers::CONTROL), vec![]);
    assert_eq!(app.terminal_request, Some(super::TerminalRequest::Suspend));
    assert_eq!(app.input_text(), "draft");
}

#[test]
fn ctrl_g_hands_the_input_to_the_editor_and_takes_its_text_back() {
    let mut app = app();
    type_text(&mut app, "draft");
    app.update(AppEvent::Paste((0..30).map(|i| format!("l{i}\n")).collect()));
    assert_eq!(key(&mut app, KeyCode::Char('g'), KeyModifiers::CONTROL), vec![]);
    let Some(super::TerminalRequest::Editor(text)) = app.terminal_request.take() else {
        panic!("expected an editor request, got {:?}", app.terminal_request);
    };
    assert!(text.starts_with("draftl0\nl1\n"), "the editor gets the pasted text, not the placeholder: {text:?}");
    app.editor_done(Ok("edited\ntwo lines\n".into()));
    assert_eq!(app.input_text(), "edited\ntwo lines");
    assert!(app.pastes.is_empty());
    app.editor_done(Err("the editor `nope` exited with 127".into()));
    assert_eq!(app.input_text(), "edited\ntwo lines", "a failed editor leaves the input alone");
    assert!(matches!(
        app.transcript.cells().last().map(|c| &c.body),
        Some(CellBody::Notice { level: NoticeLevel::Error, .. })
    ));
}

#[test]
fn a_large_paste_shows_a_placeholder_and_is_sent_whole() {
    let mut app = app();
    let big: String = (0..240).map(|i| format!("line {i}\n")).collect();
    type_text(&mut app, "look: ");
    app.update(AppEvent::Paste(big.clone()));
    assert_eq!(app.input_text(), "look: [pasted 240 lines]");
    let long = "x".repeat(2_500);
    app.update(AppEvent::Paste(long.clone()));
    app.update(AppEvent::Paste(big.clone()));
    assert_eq!(app.input_text(), "look: [pasted 240 lines][pasted 2500 chars][pasted 240 lines #2]");
    let ops = key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    assert_eq!(ops, vec![Op::Submit { text: format!("look: {big}{long}{big}"), mode: None }]);
    assert!(app.pastes.is_empty());
    // A small paste goes in as it is.
    app.update(AppEvent::Paste("a\nb".into()));
    assert_eq!(app.input_text(), "a\nb");
    assert!(app.pastes.is_empty());
}

#[test]
fn context_use_reaches_the_status() {
    let mut app = app();
    app.update(AppEvent::Engine(Event::Context { label: "ctx 42%".into(), percent: Some(42) }));
    assert_eq!(app.status.context_pct, Some(42));
    app.update(AppEvent::Engine(Event::Status(crate::protocol::StatusInfo::default())));
    assert_eq!(app.status.context_pct, Some(42), "a status without context use keeps the last one");
    app.update(AppEvent::Engine(Event::Status(crate::protocol::StatusInfo {
        context_pct: Some(7),
        ..Default::default()
    })));
    assert_eq!(app.status.context_pct, Some(7));
}

#[test]
fn every_new_key_is_in_the_keymap_and_the_help() {
    use crate::tui::keymap::{Action, Context};
    let app = app();
    let help: String = crate::tui::view::help_lines(&app, 100)
        .iter()
        .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect::<String>() + "\n")
        .collect();
    for (context, action, key) in [
        (Context::Global, Action::ToggleMouse, "F2"),
        (Context::Global, Action::Suspend, "Ctrl+Z"),
        (Context::Input, Action::Complete, "Tab"),
        (Context::Input, Action::ExternalEditor, "Ctrl+G"),
    ] {
        assert_eq!(app.keymap.hint(context, action), key);
        assert!(help.contains(key), "{key} missing from the help");
    }
    assert!(help.contains("$VISUAL"));
    assert!(help.contains("mouse capture"));
}

#[test]
fn enter_in_the_slash_popup_takes_the_highlighted_command_never_a_bare_slash() {
    let mut app = app();
    type_text(&mut app, "/");
    key(&mut app, KeyCode::Down, KeyModifiers::NONE);
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![Op::Command(SlashCommand::New)]);
    assert!(app.input_is_empty());
    // A command that needs an argument is completed and waits for it.
    type_text(&mut app, "/ti");
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![]);
    assert_eq!(app.input_text(), "/title ");
    // The second of two entries with the same name completes to its own words.
    app.reset_input(String::new());
    type_text(&mut app, "/goal");
    key(&mut app, KeyCode::Down, KeyModifiers::NONE);
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    assert_eq!(app.input_text(), "/goal gate ");
}

#[test]
fn tab_on_text_with_nothing_to_complete_stays_in_the_input_and_says_so() {
    let mut app = app();
    app.update(AppEvent::Engine(Event::JobStarted { job: running_job("job_1") }));
    type_text(&mut app, "hello");
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    assert_eq!(app.focus, Focus::Input);
    assert_eq!(app.input_text(), "hello");
    assert_eq!(app.input_hint.as_deref(), Some("Tab: nothing to complete"));
    type_text(&mut app, "!");
    assert_eq!(app.input_text(), "hello!", "the next keys still type");
    assert_eq!(app.input_hint, None, "the hint goes with the next key");
    // Where the side column is hidden (narrow terminals), Tab on an empty input still
    // focuses the panes: the focused one is drawn in the transcript's place (#32).
    app.reset_input(String::new());
    app.panes_shown = false;
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    assert_eq!(app.focus, Focus::Jobs);
}

#[test]
fn running_jobs_sort_first_and_the_selection_follows_its_job() {
    let mut app = app();
    for i in 1..=4 {
        let mut job = running_job(&format!("job_{i}"));
        job.started_at_ms = i;
        app.update(AppEvent::Engine(Event::JobStarted { job }));
    }
    app.wall_ms = 100;
    app.update(AppEvent::Engine(Event::JobFinished { id: "job_1".into(), status: JobStatus::Exited(0) }));
    app.wall_ms = 200;
    app.update(AppEvent::Engine(Event::JobFinished { id: "job_3".into(), status: JobStatus::Killed }));
    let order: Vec<&str> = app.jobs.iter().map(|j| j.info.id.as_str()).collect();
    assert_eq!(order, vec!["job_2", "job_4", "job_3", "job_1"]);
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    key(&mut app, KeyCode::Down, KeyModifiers::NONE);
    assert_eq!(app.jobs[app.job_sel].info.id, "job_4");
    app.update(AppEvent::Engine(Event::JobFinished { id: "job_2".into(), status: JobStatus::Exited(1) }));
    assert_eq!(app.jobs[app.job_sel].info.id, "job_4", "the selection stays on its job");
    assert_eq!(app.jobs[0].info.id, "job_4");
}

#[test]
fn a_bad_command_stays_selected_so_typing_replaces_it() {
    let mut app = app();
    type_text(&mut app, "/frobnicate");
    key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    assert_eq!(app.input_text(), "/frobnicate");
    assert!(app.input_hint.as_deref().is_some_and(|h| h.contains("typing replaces")));
    type_text(&mut app, "/help");
    assert_eq!(app.input_text(), "/help", "typing replaced the bad command instead of appending");
    // An arrow key keeps the text to edit it.
    app.reset_input(String::new());
    type_text(&mut app, "/busy sideways");
    key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    key(&mut app, KeyCode::End, KeyModifiers::NONE);
    key(&mut app, KeyCode::Left, KeyModifiers::NONE);
    type_text(&mut app, "X");
    assert_eq!(app.input_text(), "/busy sidewayXs");
}

#[test]
fn copy_inside_tmux_says_the_terminal_may_not_get_it() {
    let mut app = app();
    app.update(AppEvent::Engine(Event::AssistantDone { text: "the answer".into(), reasoning: None }));
    app.in_tmux = true;
    type_text(&mut app, "/copy");
    key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    let last = app.transcript.cells().last().map(|c| c.body.clone());
    assert!(matches!(&last, Some(CellBody::Notice { text, .. }) if text.contains("set-clipboard on")), "{last:?}");
}

#[test]
fn keys_with_nothing_to_do_still_say_something() {
    let mut app = app();
    assert_eq!(key(&mut app, KeyCode::Char('b'), KeyModifiers::CONTROL), vec![]);
    assert_eq!(app.input_hint.as_deref(), Some("nothing is running to move to the background"));
    key(&mut app, KeyCode::Char('t'), KeyModifiers::CONTROL);
    assert_eq!(app.input_hint.as_deref(), Some("the model's reasoning is shown"));
}

#[test]
fn tab_completes_an_at_path_from_the_listing_the_event_loop_gives() {
    let mut app = app();
    type_text(&mut app, "see @RE");
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    assert_eq!(app.path_request.take().as_deref(), Some("RE"));
    app.paths_listed("RE", vec!["README.md".into()]);
    assert_eq!(app.input_text(), "see @README.md ");
    type_text(&mut app, "and @s");
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    let prefix = app.path_request.take().unwrap();
    app.paths_listed(&prefix, vec!["scripts/".into(), "src/".into()]);
    assert_eq!(app.input_text(), "see @README.md and @s");
    assert_eq!(app.input_hint.as_deref(), Some("2 files: scripts src"));
    app.paths_listed("s", vec!["src/".into()]);
    assert_eq!(app.input_text(), "see @README.md and @src/", "a directory is completed without a space");
    type_text(&mut app, " @zz");
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    let prefix = app.path_request.take().unwrap();
    app.paths_listed(&prefix, Vec::new());
    assert_eq!(app.input_hint.as_deref(), Some("no file here starts with zz"));
}

fn ready_with(history: Vec<crate::protocol::HistoryItem>, earlier: Option<i64>) -> Event {
    Event::SessionReady {
        session_id: "s1".into(),
        title: None,
        model: "m".into(),
        provider: "openai".into(),
        demo: false,
        cwd: "/w".into(),
        busy_mode: BusyMode::Redirect,
        history,
        input_history: Vec::new(),
        earlier,
    }
}

fn user_items(prefix: &str, n: usize) -> Vec<crate::protocol::HistoryItem> {
    (0..n)
        .map(|i| crate::protocol::HistoryItem::User { text: format!("{prefix} {i}"), origin: Origin::Typed })
        .collect()
}

fn cell_text(app: &App, i: usize) -> String {
    match &app.transcript.cells()[i].body {
        CellBody::User { text, .. } => text.clone(),
        other => format!("{other:?}"),
    }
}

#[test]
fn scrolling_to_the_top_of_a_resumed_session_loads_the_page_before_it_once_and_keeps_the_view() {
    let mut app = app();
    app.update(AppEvent::Engine(ready_with(user_items("recent", 100), Some(7))));
    app.prepare(ratatui::layout::Rect::new(0, 0, 80, 20));
    // Following the end: nothing more is asked for.
    assert_eq!(key(&mut app, KeyCode::Char('x'), KeyModifiers::NONE), Vec::<Op>::new());
    key(&mut app, KeyCode::Backspace, KeyModifiers::NONE);
    // Home on an empty input goes to the oldest cell loaded: the page before it is asked for.
    assert_eq!(key(&mut app, KeyCode::Home, KeyModifiers::NONE), vec![Op::LoadEarlier { before: 7 }]);
    assert_eq!(app.transcript.scroll, crate::tui::transcript::Scroll::Anchor { cell: 0, line: 0 });
    // Asked once, not again while the answer is on its way.
    assert_eq!(key(&mut app, KeyCode::Home, KeyModifiers::NONE), Vec::<Op>::new());

    let older = user_items("older", 3);
    app.update(AppEvent::Engine(Event::EarlierHistory { items: older, earlier: None }));
    assert_eq!(app.transcript.cells().len(), 103);
    assert_eq!(cell_text(&app, 0), "older 0");
    assert_eq!(cell_text(&app, 3), "recent 0");
    // The view stays on what it showed ("recent 0" at the top).
    assert_eq!(app.transcript.scroll, crate::tui::transcript::Scroll::Anchor { cell: 3, line: 0 });
    // Nothing older exists: the top is the top.
    assert_eq!(key(&mut app, KeyCode::Home, KeyModifiers::NONE), Vec::<Op>::new());
    assert_eq!(app.transcript.scroll, crate::tui::transcript::Scroll::Anchor { cell: 0, line: 0 });
    assert_eq!(app.earlier, None);
}

/// A long day in one sitting: the transcript lets go of its oldest cells, and scrolling up
/// to the oldest one left asks the engine for what came before it, by the stored seq of that
/// cell's message — not while an earlier page is still on its way (it would go above a gap).
#[test]
fn a_long_session_lets_go_of_old_cells_and_scrolling_up_reads_them_back_from_the_store() {
    let mut app = app();
    app.update(AppEvent::Engine(ready_with(user_items("resumed", 5), Some(3))));
    app.prepare(ratatui::layout::Rect::new(0, 0, 80, 20));
    for n in 0..1_000 {
        let text = format!("turn {n}");
        let message =
            Event::UserMessage { text, trigger: TurnTrigger::User, origin: Origin::Typed, seq: Some(100 + n) };
        app.update(AppEvent::Engine(message));
        app.update(AppEvent::Engine(Event::AssistantDone { text: format!("done {n}"), reasoning: None }));
    }
    let cells = app.transcript.cells().len();
    assert!(cells <= 600, "{cells} cells after 1,000 turns");
    let first = cell_text(&app, 0);
    let n: i64 = first.strip_prefix("turn ").and_then(|n| n.parse().ok()).expect("the oldest cell is a turn's message");
    assert_eq!(app.earlier, Some(100 + n));
    assert_eq!(key(&mut app, KeyCode::Home, KeyModifiers::NONE), vec![Op::LoadEarlier { before: 100 + n }]);

    // Back at the end with that page still on its way: nothing more goes.
    key(&mut app, KeyCode::End, KeyModifiers::NONE);
    assert_eq!(app.transcript.scroll, crate::tui::transcript::Scroll::Follow);
    for m in 1_000..2_000 {
        let text = format!("turn {m}");
        let message =
            Event::UserMessage { text, trigger: TurnTrigger::User, origin: Origin::Typed, seq: Some(100 + m) };
        app.update(AppEvent::Engine(message));
    }
    assert_eq!(cell_text(&app, 0), first);
    assert_eq!(app.earlier, Some(100 + n));
}

#[test]
fn a_session_switch_forgets_the_earlier_page_of_the_previous_session() {
    let mut app = app();
    app.update(AppEvent::Engine(ready_with(user_items("a", 10), Some(3))));
    app.update(AppEvent::Engine(ready_with(user_items("b", 10), None)));
    app.prepare(ratatui::layout::Rect::new(0, 0, 80, 5));
    assert_eq!(key(&mut app, KeyCode::Home, KeyModifiers::NONE), Vec::<Op>::new());
    assert_eq!(cell_text(&app, 0), "b 0");
}

fn notice_texts(app: &App) -> Vec<String> {
    app.transcript
        .cells()
        .iter()
        .filter_map(|c| match &c.body {
            CellBody::Notice { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn jobs_killed_at_quit_are_counted_in_words_not_job_s() {
    let mut app = app();
    let killed = |ids: &[&str]| Event::JobsKilled {
        jobs: ids
            .iter()
            .map(|id| crate::protocol::KilledJob { id: (*id).into(), command: "sleep 9".into(), awaited: false })
            .collect(),
    };
    app.update(AppEvent::Engine(killed(&["job_1"])));
    app.update(AppEvent::Engine(killed(&["job_2", "job_3"])));
    assert_eq!(notice_texts(&app), vec!["killed 1 running job: job_1", "killed 2 running jobs: job_2, job_3"]);
}

#[test]
fn enter_on_the_kill_confirmation_keeps_the_job() {
    let mut app = app();
    app.update(AppEvent::Engine(Event::JobStarted { job: running_job("job_3") }));
    key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
    key(&mut app, KeyCode::Char('k'), KeyModifiers::NONE);
    assert_eq!(app.modal, Some(Modal::KillConfirm { id: "job_3".into() }));
    assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![], "Enter is the safe answer: no kill");
    assert_eq!(app.modal, None);
    key(&mut app, KeyCode::Char('k'), KeyModifiers::NONE);
    assert_eq!(key(&mut app, KeyCode::Char('n'), KeyModifiers::NONE), vec![]);
    assert_eq!(app.modal, None);
    assert!(app.jobs.iter().any(|j| j.info.id == "job_3" && j.info.status == JobStatus::Running));
}

#[test]
fn a_command_the_engine_refuses_comes_back_selected_so_typing_replaces_it() {
    use crate::protocol::commands::{GateCmd, GoalCmd};
    let mut app = app();
    type_text(&mut app, "/goal gate remove 9");
    assert_eq!(
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
        vec![Op::Command(SlashCommand::Goal(GoalCmd::Gate(GateCmd::Remove(9))))]
    );
    assert!(app.input_is_empty());
    // Progress of a turn already running is not the answer.
    app.update(AppEvent::Engine(Event::AssistantDelta("still streaming".into())));
    app.update(AppEvent::Engine(Event::notice(NoticeLevel::Error, "no gate 9: no gates are waiting for a goal")));
    assert_eq!(app.input_text(), "/goal gate remove 9");
    assert!(app.input_hint.as_deref().is_some_and(|h| h.contains("typing replaces")));
    type_text(&mut app, "/goal status");
    assert_eq!(app.input_text(), "/goal status", "typing replaced it");

    // A command that worked leaves the input alone, and a later error is not its answer.
    app.reset_input(String::new());
    type_text(&mut app, "/title parser");
    key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    app.update(AppEvent::Engine(Event::notice(NoticeLevel::Info, "session titled \"parser\"")));
    app.update(AppEvent::Engine(Event::notice(NoticeLevel::Error, "model request failed: HTTP 500")));
    assert!(app.input_is_empty());

    // Nor is an error after a message; and what the user typed meanwhile is never replaced.
    type_text(&mut app, "hello");
    key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    app.update(AppEvent::Engine(Event::notice(NoticeLevel::Error, "model request failed: HTTP 500")));
    assert!(app.input_is_empty());
    type_text(&mut app, "/jobs kill job_9");
    key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    type_text(&mut app, "draft");
    app.update(AppEvent::Engine(Event::notice(
        NoticeLevel::Error,
        "No job_9 here: this session has no background jobs.",
    )));
    assert_eq!(app.input_text(), "draft");
    // An empty /resume match is a failure too.
    app.reset_input(String::new());
    type_text(&mut app, "/resume nothing like it");
    key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
    app.update(AppEvent::Engine(Event::SessionList { sessions: Vec::new(), matching: Some("nothing like it".into()) }));
    assert_eq!(app.input_text(), "/resume nothing like it");
}

/// The log view's colours come from the emulator's cells: named as a terminal names the
/// sixteen colours, bold and the rest as modifiers, and the default look left to the view.
#[test]
fn job_output_keeps_its_colours_and_bold_in_the_log_lines() {
    use ratatui::style::{Color, Modifier, Style};
    use ratatui::text::{Line, Span};
    let lines = super::events::log_lines(
        "\x1b[32mok\x1b[0m then \x1b[1;91mFAIL\x1b[0m\n\x1b[38;5;208;2mdim\x1b]52;c;eA==\x07\n",
    );
    assert_eq!(
        lines,
        vec![
            Line::from(vec![
                Span::styled("ok", Style::default().fg(Color::Green)),
                Span::raw(" then "),
                Span::styled("FAIL", Style::default().fg(Color::LightRed).add_modifier(Modifier::BOLD)),
            ]),
            Line::from(vec![Span::styled("dim", Style::default().fg(Color::Indexed(208)).add_modifier(Modifier::DIM))]),
        ]
    );
}
