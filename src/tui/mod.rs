//! The ratatui front end: terminal setup and restore, the panic hook, and the event
//! loop that feeds `App::update` and draws on demand. It talks to the engine only
//! through `EngineHandle` (Op out, Event in) and does no other I/O than the terminal.

pub mod app;
pub mod frame;
pub mod keymap;
pub mod markdown;
pub mod sanitize;
pub mod theme;
pub mod transcript;
pub mod view;
pub mod wrap;

#[cfg(test)]
mod tests;

use std::io::{IsTerminal, Stdout, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use crossterm::event::{
    DisableBracketedPaste, EnableBracketedPaste, Event as TermEvent, EventStream, KeyEventKind,
    KeyboardEnhancementFlags, MouseEventKind, PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, BeginSynchronizedUpdate, Clear, ClearType, EndSynchronizedUpdate,
    EnterAlternateScreen, LeaveAlternateScreen,
};
use crossterm::{cursor, execute, queue};
use futures_util::StreamExt;
use ratatui::backend::CrosstermBackend;
use ratatui::{Frame, Terminal};

use crate::config::Config;
use crate::engine::EngineHandle;
use crate::paths::Paths;
use app::{App, AppEvent, ExitState};
use frame::FrameRequester;
use keymap::Keymap;
use theme::Theme;

/// How long quitting waits for the engine's `ShutdownComplete`.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

pub struct TuiOptions {
    pub config: Arc<Config>,
    pub paths: Paths,
    /// Shown at the top of an empty transcript (the demo model's explanation).
    pub banner: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TuiExit {
    /// The session that was active at quit (for "resume with …").
    pub session_id: Option<String>,
}

static TERMINAL_ACTIVE: AtomicBool = AtomicBool::new(false);
static MOUSE_CAPTURED: AtomicBool = AtomicBool::new(false);

/// Run the TUI until the user quits. Fails at once when stdin or stdout is not a terminal.
pub async fn run(options: TuiOptions, engine: EngineHandle) -> anyhow::Result<TuiExit> {
    require_terminal(std::io::stdin().is_terminal(), std::io::stdout().is_terminal())?;
    let keymap = Keymap::load(&options.paths.keymap_file)?;
    let theme = Theme::builtin(&options.config.ui.theme)?;
    let mut app = App::new(&options.config, keymap, theme, options.banner);
    install_panic_hook();
    let mut terminal = match setup(options.config.ui.mouse) {
        Ok(t) => t,
        Err(e) => {
            restore();
            return Err(e);
        }
    };
    let result = event_loop(&mut terminal, &mut app, engine).await;
    restore();
    result?;
    Ok(TuiExit { session_id: app.session.session_id.clone() })
}

/// The full-screen UI needs a terminal on both ends.
fn require_terminal(stdin_is_tty: bool, stdout_is_tty: bool) -> anyhow::Result<()> {
    if stdin_is_tty && stdout_is_tty {
        Ok(())
    } else {
        anyhow::bail!("not a terminal; use `talaria exec`")
    }
}

/// Put the terminal back as it was: raw mode off, main screen, no mouse capture, no
/// bracketed paste, no keyboard-enhancement flags, cursor shown. Safe to call twice and
/// from a panic hook or signal handler.
pub fn restore() {
    if !TERMINAL_ACTIVE.swap(false, Ordering::SeqCst) {
        return;
    }
    let mut out = std::io::stdout();
    if MOUSE_CAPTURED.swap(false, Ordering::SeqCst) {
        let _ = execute!(out, DisableWheelCapture);
    }
    let _ = execute!(
        out,
        EndSynchronizedUpdate,
        PopKeyboardEnhancementFlags,
        DisableBracketedPaste,
        LeaveAlternateScreen,
        cursor::Show
    );
    let _ = disable_raw_mode();
    let _ = out.flush();
}

fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // Restore first, so the message lands on the normal screen.
            restore();
            previous(info);
        }));
    });
}

/// Mouse reporting for buttons and the wheel only (SGR encoding): no motion events,
/// so moving the mouse does not wake the TUI.
struct EnableWheelCapture;
struct DisableWheelCapture;

impl crossterm::Command for EnableWheelCapture {
    fn write_ansi(&self, f: &mut impl std::fmt::Write) -> std::fmt::Result {
        f.write_str("\x1b[?1000h\x1b[?1006h")
    }
}

impl crossterm::Command for DisableWheelCapture {
    fn write_ansi(&self, f: &mut impl std::fmt::Write) -> std::fmt::Result {
        f.write_str("\x1b[?1006l\x1b[?1000l")
    }
}

type Term = Terminal<CrosstermBackend<Stdout>>;

fn setup(mouse: bool) -> anyhow::Result<Term> {
    enable_raw_mode().context("cannot put the terminal in raw mode")?;
    TERMINAL_ACTIVE.store(true, Ordering::SeqCst);
    let mut out = std::io::stdout();
    // Keyboard-enhancement flags are pushed without querying support: the query can
    // block for seconds on some terminals, and a terminal that lacks them ignores this.
    execute!(
        out,
        EnterAlternateScreen,
        Clear(ClearType::All),
        EnableBracketedPaste,
        PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES),
        cursor::Hide
    )
    .context("cannot set up the terminal")?;
    if mouse {
        execute!(out, EnableWheelCapture).context("cannot enable mouse reporting")?;
        MOUSE_CAPTURED.store(true, Ordering::SeqCst);
    }
    // Not `Terminal::clear`: it asks the terminal for the cursor position and waits for
    // the answer, which must never delay the first frame.
    Terminal::new(CrosstermBackend::new(std::io::stdout())).context("cannot read the terminal size")
}

/// Lay out and draw one frame of `app`.
pub fn render(app: &mut App, frame: &mut Frame<'_>) {
    app.prepare(frame.area());
    view::draw(frame, app);
}

fn draw(terminal: &mut Term, app: &mut App) -> anyhow::Result<()> {
    app.now = Instant::now();
    app.wall_ms = app::unix_ms();
    queue!(terminal.backend_mut(), BeginSynchronizedUpdate)?;
    terminal.draw(|f| render(app, f))?;
    execute!(terminal.backend_mut(), EndSynchronizedUpdate)?;
    Ok(())
}

/// Turn a terminal event into an app event; None for those the app ignores. The bool
/// says whether the screen should redraw at once.
fn app_event(event: TermEvent) -> Option<(AppEvent, bool)> {
    match event {
        TermEvent::Key(key) if key.kind != KeyEventKind::Release => Some((AppEvent::Key(key), true)),
        TermEvent::Key(_) | TermEvent::FocusGained | TermEvent::FocusLost => None,
        TermEvent::Mouse(m) => match m.kind {
            MouseEventKind::ScrollUp | MouseEventKind::ScrollDown => Some((AppEvent::Mouse(m), true)),
            _ => None,
        },
        TermEvent::Paste(text) => Some((AppEvent::Paste(text), true)),
        TermEvent::Resize(w, h) => Some((AppEvent::Resize(w, h), true)),
    }
}

fn send_ops(engine: &EngineHandle, ops: Vec<crate::protocol::Op>, app: &App) -> anyhow::Result<()> {
    for op in ops {
        if engine.ops.send(op).is_err() && matches!(app.exit, ExitState::Running) {
            anyhow::bail!("the engine stopped unexpectedly; see the log for why");
        }
    }
    Ok(())
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn event_loop(terminal: &mut Term, app: &mut App, mut engine: EngineHandle) -> anyhow::Result<()> {
    let (frames, mut draw_rx) = FrameRequester::spawn();
    // Terminal input is read by its own task and forwarded over a channel, so the loop can
    // drain everything already waiting without polling the stream with a no-op waker
    // (crossterm's EventStream then never wakes the loop again).
    let (input_tx, mut input) = tokio::sync::mpsc::unbounded_channel();
    let input_task = tokio::spawn(async move {
        let mut stream = EventStream::new();
        while let Some(event) = stream.next().await {
            let stop = event.is_err();
            if input_tx.send(event).is_err() || stop {
                break;
            }
        }
    });
    let _input_guard = AbortOnDrop(input_task);
    draw(terminal, app)?;
    let mut next_tick: Option<tokio::time::Instant> = None;
    loop {
        app.now = Instant::now();
        app.wall_ms = app::unix_ms();
        if next_tick.is_none() {
            next_tick = app.tick_interval().map(|d| tokio::time::Instant::now() + d);
        }
        let deadline = app.next_deadline().map(tokio::time::Instant::from_std);
        let quit_by = match app.exit {
            ExitState::Quitting { since } => Some(tokio::time::Instant::from_std(since + SHUTDOWN_WAIT)),
            ExitState::Running | ExitState::Done => None,
        };
        let mut draw_now = false;
        tokio::select! {
            biased;
            event = input.recv() => {
                let mut pending = Some(event);
                while let Some(event) = pending.take() {
                    match event {
                        Some(Ok(event)) => {
                            if let Some((ev, now)) = app_event(event) {
                                draw_now |= now;
                                let ops = app.update(ev);
                                send_ops(&engine, ops, app)?;
                            }
                        }
                        Some(Err(e)) => return Err(anyhow::anyhow!("reading the terminal failed: {e}")),
                        None => anyhow::bail!("the terminal closed"),
                    }
                    // Take everything already waiting before drawing once.
                    pending = input.try_recv().ok().map(Some);
                }
            }
            event = engine.events.recv() => {
                let Some(event) = event else {
                    if matches!(app.exit, ExitState::Running) {
                        anyhow::bail!("the engine stopped unexpectedly; see the log for why");
                    }
                    break;
                };
                let ops = app.update(AppEvent::Engine(event));
                send_ops(&engine, ops, app)?;
                while let Ok(event) = engine.events.try_recv() {
                    let ops = app.update(AppEvent::Engine(event));
                    send_ops(&engine, ops, app)?;
                }
                frames.schedule_frame();
            }
            Some(()) = draw_rx.recv() => {
                while draw_rx.try_recv().is_ok() {}
                draw_now = true;
            }
            () = sleep_until_opt(next_tick) => {
                next_tick = None;
                frames.schedule_frame();
            }
            () = sleep_until_opt(deadline) => frames.schedule_frame(),
            () = sleep_until_opt(quit_by) => {
                tracing::warn!("the engine did not finish shutting down within {SHUTDOWN_WAIT:?}");
                break;
            }
        }
        if let Some(note) = app.notification.take() {
            let _ = terminal.backend_mut().write_all(note.as_bytes());
        }
        if app.exit == ExitState::Done {
            break;
        }
        if draw_now {
            draw(terminal, app)?;
        }
    }
    Ok(())
}

/// Aborts a task when dropped (the terminal input reader ends with the loop).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
