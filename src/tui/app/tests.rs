//! `update()` driven by keys and engine events, with no terminal and no engine.

use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use pretty_assertions::assert_eq;

use super::{App, ExitState, Focus, Modal, APPROVAL_ARM, DOUBLE_CTRL_C, LOG_LIMIT};
use crate::config::Config;
use crate::engine::commands::SlashCommand;
use crate::protocol::{Approval, BusyMode, JobAction, NoticeLevel, Op};
use crate::protocol::{Event, JobInfo, JobStatus, TurnTrigger};
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
fn quitting_with_running_jobs_asks_and_kills_by_default() {
    let mut app = app();
    app.update(AppEvent::Engine(Event::JobStarted { job: running_job("job_1") }));
    assert_eq!(key(&mut app, KeyCode::Char('d'), KeyModifiers::CONTROL), vec![]);
    assert_eq!(app.modal, Some(Modal::QuitConfirm));
    assert_eq!(key(&mut app, KeyCode::Esc, KeyModifiers::NONE), vec![]);
    assert_eq!(app.modal, None);
    key(&mut app, KeyCode::Char('d'), KeyModifiers::CONTROL);
    assert_eq!(
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
        vec![Op::Job { id: "job_1".into(), action: JobAction::Kill }, Op::Shutdown]
    );
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
    key(&mut app, KeyCode::Char('w'), KeyModifiers::NONE);
    type_text(&mut app, "yes");
    assert_eq!(
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
        vec![Op::Job { id: "job_3".into(), action: JobAction::Write { data: "yes\n".into() } }]
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
    app.update(AppEvent::Engine(Event::UserMessage { text: "go".into(), trigger: TurnTrigger::User }));
    app.update(AppEvent::Engine(Event::AssistantDelta("working".into())));
    app.update(AppEvent::Engine(Event::UserMessage { text: "also this".into(), trigger: TurnTrigger::User }));
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
