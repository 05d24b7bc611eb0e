//! The event loop's input-first rules: job output is coalesced to one update per job per
//! frame, and ingestion stops for a key that is waiting.

use crossterm::event::{Event as TermEvent, KeyCode, KeyEvent, KeyModifiers};
use pretty_assertions::assert_eq;
use tokio::sync::mpsc;

use super::app::{App, AppEvent};
use super::inbox::JobOutputBatch;
use super::keymap::Keymap;
use super::theme::Theme;
use super::{apply_job_output, drain_engine, on_terminal_input, take_engine_event};
use crate::config::Config;
use crate::protocol::{EngineHandle, Event, JobAction, JobInfo, JobStatus, Op};

struct Harness {
    app: App,
    engine: EngineHandle,
    events: mpsc::UnboundedSender<Event>,
    ops: mpsc::UnboundedReceiver<Op>,
}

fn harness() -> Harness {
    let (ops_tx, ops) = mpsc::unbounded_channel();
    let (events, events_rx) = mpsc::unbounded_channel();
    let mut app = App::new(&Config::default(), Keymap::builtin(), Theme::default(), None);
    app.wall_ms = 1_700_000_000_000;
    let job = JobInfo {
        id: "job_1".into(),
        command: "make".into(),
        pid: 4242,
        cwd: "/work".into(),
        started_at_ms: app.wall_ms - 1000,
        status: JobStatus::Running,
        background: true,
        has_stdin: false,
        last_line: "first line".into(),
        agent: None,
    };
    app.update(AppEvent::Engine(Event::JobStarted { job }));
    Harness { app, engine: EngineHandle { ops: ops_tx, events: events_rx }, events, ops }
}

fn output(i: usize) -> Event {
    Event::JobUpdated { id: "job_1".into(), status: JobStatus::Running, tail: format!("build step {i}\n") }
}

fn sent(ops: &mut mpsc::UnboundedReceiver<Op>) -> Vec<Op> {
    std::iter::from_fn(|| ops.try_recv().ok()).collect()
}

fn last_line(app: &App) -> String {
    app.jobs[0].info.last_line.clone()
}

#[test]
fn many_job_output_events_between_two_frames_make_one_pane_update_and_one_log_refresh() {
    let mut h = harness();
    // The job's log view is open and its first window has arrived.
    h.app.update(AppEvent::Key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE)));
    let ops = h.app.update(AppEvent::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)));
    assert!(matches!(ops.as_slice(), [Op::Job { action: JobAction::Log { .. }, .. }]), "{ops:?}");
    let window =
        Event::JobLog { id: "job_1".into(), text: "first line".into(), first_line: 1, total_lines: 1, from: 1, to: 1 };
    h.app.update(AppEvent::Engine(window));

    let mut batch = JobOutputBatch::default();
    for i in 0..300 {
        h.events.send(output(i)).unwrap();
    }
    let input = mpsc::unbounded_channel::<std::io::Result<TermEvent>>().1;
    let taken = drain_engine(&mut h.app, &mut h.engine, &mut batch, &input).unwrap();
    assert_eq!(taken, 300);
    assert_eq!(last_line(&h.app), "first line", "nothing is applied before the frame");
    assert_eq!(sent(&mut h.ops), vec![]);

    // The frame: one update of the pane, one request for the log view's newest lines.
    apply_job_output(&mut h.app, &h.engine, &mut batch).unwrap();
    assert_eq!(last_line(&h.app), "build step 299");
    assert_eq!((batch.received, batch.applied), (300, 1));
    let ops = sent(&mut h.ops);
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert!(matches!(&ops[0], Op::Job { id, action: JobAction::Log { offset: None, .. } } if id == "job_1"));
    // No new output: the next frame has nothing to apply.
    apply_job_output(&mut h.app, &h.engine, &mut batch).unwrap();
    assert_eq!(batch.applied, 1);
}

#[test]
fn a_job_end_is_applied_after_the_output_that_came_before_it() {
    let mut h = harness();
    let mut batch = JobOutputBatch::default();
    for i in 0..10 {
        take_engine_event(&mut h.app, &h.engine, &mut batch, output(i)).unwrap();
    }
    let end = Event::JobFinished { id: "job_1".into(), status: JobStatus::Exited(0) };
    take_engine_event(&mut h.app, &h.engine, &mut batch, end).unwrap();
    assert!(batch.is_empty(), "the output went in first");
    assert_eq!(last_line(&h.app), "build step 9");
    assert_eq!(h.app.jobs[0].info.status, JobStatus::Exited(0), "and the end was not undone by it");
}

#[test]
fn a_key_waiting_behind_queued_job_output_is_handled_first() {
    let mut h = harness();
    let mut batch = JobOutputBatch::default();
    let (input_tx, mut input) = mpsc::unbounded_channel();
    // The engine has queued a flood of output when the key arrives.
    for i in 0..500 {
        h.events.send(output(i)).unwrap();
    }
    input_tx.send(Ok(TermEvent::Key(KeyEvent::new(KeyCode::Char('x'), KeyModifiers::NONE)))).unwrap();

    // The loop had taken the first engine event; the drain stops for the key at once.
    let first = h.engine.events.try_recv().unwrap();
    take_engine_event(&mut h.app, &h.engine, &mut batch, first).unwrap();
    assert_eq!(drain_engine(&mut h.app, &mut h.engine, &mut batch, &input).unwrap(), 0);

    // Next the key is read and applied (and drawn), with the output still queued.
    let key = input.try_recv().ok();
    let draw_now = on_terminal_input(&mut h.app, &h.engine, key, &mut input).unwrap();
    assert!(draw_now, "a key draws at once");
    assert_eq!(h.app.input_text(), "x");
    assert_eq!(last_line(&h.app), "first line", "no job output was applied before the key");

    // Then the output goes in, as one update at the next frame.
    assert_eq!(drain_engine(&mut h.app, &mut h.engine, &mut batch, &input).unwrap(), 499);
    apply_job_output(&mut h.app, &h.engine, &mut batch).unwrap();
    assert_eq!(last_line(&h.app), "build step 499");
}
