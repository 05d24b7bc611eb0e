//! The ratatui front end: terminal setup and restore, the panic hook, and the event
//! loop that feeds `App::update` and draws on demand. It talks to the engine only
//! through `EngineHandle` (Op out, Event in) and does no other I/O than the terminal
//! (and, for Ctrl+G, the user's editor on a temporary file: see `edit_in_editor`).

pub mod app;
pub(crate) mod diff;
pub(crate) mod frame;
pub mod inbox;
pub mod keymap;
pub(crate) mod layout;
pub mod markdown;
pub mod theme;
pub(crate) mod transcript;
pub(crate) mod view;
pub mod wrap;

#[cfg(test)]
mod loop_tests;
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
use crate::paths::Paths;
use crate::protocol::{EngineHandle, Op};
use app::{App, AppEvent, ExitState, TerminalRequest};
use frame::FrameRequester;
use keymap::Keymap;
use theme::Theme;

/// Entries a path completion lists at most.
const PATHS_MAX: usize = 200;

/// Names in the directory part of `prefix` (relative to the working directory) that
/// start with its last part; directories end with `/`. Hidden ones only when asked for.
fn list_paths(prefix: &str) -> Vec<String> {
    let (dir, base) = match prefix.rfind('/') {
        Some(i) => (&prefix[..=i], &prefix[i + 1..]),
        None => ("", prefix),
    };
    let Ok(entries) = std::fs::read_dir(if dir.is_empty() { "." } else { dir }) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let wanted = name.starts_with(base) && (base.starts_with('.') || !name.starts_with('.'));
            let slash = if e.file_type().is_ok_and(|t| t.is_dir()) { "/" } else { "" };
            wanted.then(|| format!("{dir}{name}{slash}"))
        })
        .take(PATHS_MAX)
        .collect();
    names.sort();
    names
}

/// How long quitting waits for the engine's `ShutdownComplete`.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);
/// After the first frame, how long start-up (store, session, provider) gets before the
/// pages only it needed are given back (see `event_loop`).
const SETTLE_AFTER: Duration = Duration::from_secs(1);
/// How long the first frame waits, from taking the terminal, for the session and its
/// status: drawn when they are known it is complete, with nothing filling in a moment
/// later; drawn at this bound (a slow provider, a slow disk) it shows what is known.
pub const FIRST_FRAME_WAIT: Duration = Duration::from_millis(50);

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
    /// What the model calls of this run used and cost (`None` when there were none).
    pub spend: Option<String>,
    /// The jobs left running on purpose ("keep them running"), to name on the way out.
    pub kept_jobs: Vec<String>,
}

impl TuiExit {
    /// `2 jobs keep running (job_13, job_14); talaria -c re-attaches them`.
    pub fn kept_jobs_line(&self) -> Option<String> {
        let n = self.kept_jobs.len();
        let (noun, them) = if n == 1 { ("job keeps", "it") } else { ("jobs keep", "them") };
        (n > 0).then(|| format!("{n} {noun} running ({}); talaria -c re-attaches {them}", self.kept_jobs.join(", ")))
    }
}

static TERMINAL_ACTIVE: AtomicBool = AtomicBool::new(false);
static MOUSE_CAPTURED: AtomicBool = AtomicBool::new(false);

/// The terminal, taken before the engine has started. Its first frame is drawn when the
/// session and its status are known, or `FIRST_FRAME_WAIT` after the terminal was taken,
/// whichever comes first (`first_frame_due`, `draw_first_frame`, and the event loop).
/// Dropping it gives the terminal back.
pub struct Screen {
    terminal: Term,
    app: App,
    first_due: tokio::time::Instant,
}

impl Screen {
    /// Take the terminal (raw mode, the alternate screen); the first frame follows. Fails
    /// at once when stdin or stdout is not a terminal.
    pub fn open(options: TuiOptions) -> anyhow::Result<Screen> {
        require_terminal(std::io::stdin().is_terminal(), std::io::stdout().is_terminal())?;
        let keymap = Keymap::load(&options.paths.keymap_file)?;
        let theme = Theme::builtin(options.config.ui.theme.as_str())?;
        let mut app = App::new(&options.config, keymap, theme, options.banner);
        app.in_tmux = std::env::var_os("TMUX").is_some_and(|v| !v.is_empty());
        install_panic_hook();
        let terminal = match setup(options.config.ui.mouse) {
            Ok(t) => t,
            Err(e) => {
                restore();
                return Err(e);
            }
        };
        // Keys typed from now on wait in the terminal until the event loop reads them.
        let first_due = tokio::time::Instant::now() + FIRST_FRAME_WAIT;
        Ok(Screen { terminal, app, first_due })
    }

    /// When the first frame is drawn at the latest, whatever is known by then.
    pub fn first_frame_due(&self) -> tokio::time::Instant {
        self.first_due
    }

    /// Draw the first frame now, with what is known (start-up is taking longer than
    /// `FIRST_FRAME_WAIT`: the status line fills in when the session is ready). Called at
    /// `first_frame_due`, so the event loop draws at once too.
    pub fn draw_first_frame(&mut self) -> anyhow::Result<()> {
        tracing::debug!("start: first frame drawn at its bound, before the engine started");
        draw(&mut self.terminal, &mut self.app)
    }

    /// Run until the user quits; `banner` (the demo model's explanation) tops an empty
    /// transcript.
    ///
    /// The loop runs on a thread of its own with its own single-threaded runtime: the
    /// engine's tasks (dozens of job followers ingesting output, the model stream, the
    /// store) can fill every worker of the main runtime, and a key must never wait in a
    /// queue behind them — only for the CPU.
    pub async fn run(mut self, engine: EngineHandle, banner: Option<String>) -> anyhow::Result<TuiExit> {
        if banner.is_some() {
            self.app.banner = banner;
        }
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("talaria-ui".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
                let result = match runtime {
                    Ok(runtime) => {
                        let first = FirstFrame { due: self.first_due, drawn: false };
                        runtime.block_on(event_loop(&mut self.terminal, &mut self.app, engine, first))
                    }
                    Err(e) => Err(anyhow::anyhow!("cannot start the UI's runtime: {e}")),
                };
                let _ = done_tx.send((self, result));
            })
            .context("cannot start the UI thread")?;
        let Ok((screen, result)) = done_rx.await else {
            // The loop panicked (the hook restored the terminal): as fatal as it was on the
            // main runtime.
            match thread.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => anyhow::bail!("the UI thread ended without a result"),
            }
        };
        let _ = thread.join();
        restore();
        result?;
        let app = &screen.app;
        let agents: Vec<(String, crate::protocol::agent::AgentInfo)> = app.agents.clone().into_iter().collect();
        let spent = !app.spend.usage.is_empty() || agents.iter().any(|(_, a)| !a.usage.is_empty());
        let spend = spent.then(|| crate::protocol::agent::spend_summary(&app.spend, &agents));
        // Only a session something was said in is kept, so only that one can be resumed.
        let said = app.transcript.cells().iter().any(|c| matches!(c.body, transcript::CellBody::User { .. }));
        let session_id = app.session.session_id.clone().filter(|_| said);
        Ok(TuiExit { session_id, spend, kept_jobs: app.kept_jobs.clone() })
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Read the user's keymap file as the TUI will: a bad one is an error to report before the
/// terminal is taken (as a bad config file is).
pub fn check_keymap(paths: &Paths) -> Result<(), keymap::KeymapError> {
    Keymap::load(&paths.keymap_file).map(|_| ())
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

/// The screen: a frame is written in one piece. Stdout alone is line-buffered with a 1 KiB
/// buffer, so a full frame (tens of KiB of cells and colours, no newline) left in dozens of
/// writes and a terminal could show it half drawn (the first-frame driver saw the first screen
/// arrive in two parts 3 ms apart).
type Term = Terminal<CrosstermBackend<std::io::BufWriter<Stdout>>>;

/// Room for the largest frame: a 300×100 screen of styled cells.
const FRAME_BUFFER_BYTES: usize = 1 << 20;

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
    let screen = std::io::BufWriter::with_capacity(FRAME_BUFFER_BYTES, std::io::stdout());
    Terminal::new(CrosstermBackend::new(screen)).context("cannot read the terminal size")
}

/// Lay out and draw one frame of `app`.
pub fn render(app: &mut App, frame: &mut Frame<'_>) {
    app.prepare(frame.area());
    view::draw(frame, app);
}

fn draw(terminal: &mut Term, app: &mut App) -> anyhow::Result<()> {
    app.now = Instant::now();
    app.wall_ms = crate::util::now_ms();
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

fn send_ops(engine: &EngineHandle, ops: Vec<Op>, app: &App) -> anyhow::Result<()> {
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

/// The first frame: whether it is on screen, and when it is drawn at the latest.
struct FirstFrame {
    due: tokio::time::Instant,
    drawn: bool,
}

impl FirstFrame {
    /// Draw when `wanted`; before the first frame is on screen, instead, as soon as the
    /// first screen is complete (without the frame-rate cap) or its time has come, and
    /// never before. Whether it drew.
    fn paint(
        &mut self,
        terminal: &mut Term,
        app: &mut App,
        engine: &EngineHandle,
        wanted: bool,
        stats: &mut LoopStats,
    ) -> anyhow::Result<bool> {
        let now = match self.drawn {
            true => wanted,
            false => app.first_screen_known() || tokio::time::Instant::now() >= self.due,
        };
        if !now {
            return Ok(false);
        }
        draw_counted(terminal, app, stats)?;
        if !self.drawn {
            self.drawn = true;
            first_frame_drawn(engine, app);
        }
        Ok(true)
    }

    /// The bound to wake up for, while the first frame waits.
    fn pending_due(&self) -> Option<tokio::time::Instant> {
        (!self.drawn).then_some(self.due)
    }
}

/// The first frame is on screen: start-up work that must not delay it (MCP servers) may
/// begin now.
fn first_frame_drawn(engine: &EngineHandle, app: &App) {
    tracing::debug!(complete = app.first_screen_known(), "start: first frame drawn");
    let _ = engine.ops.send(crate::protocol::Op::FrontEndReady);
}

/// What waiting took from the loop's clock: the app reads `now` when it handles what woke
/// it (a quit's shutdown deadline, an approval's arming, a turn's start), not the time the
/// wait began, seconds earlier on an idle screen.
fn woke(app: &mut App) {
    app.now = Instant::now();
    app.wall_ms = crate::util::now_ms();
}

async fn event_loop(
    terminal: &mut Term,
    app: &mut App,
    mut engine: EngineHandle,
    mut first: FirstFrame,
) -> anyhow::Result<()> {
    let (frames, mut draw_rx) = FrameRequester::spawn();
    // Terminal input is read by its own task and forwarded over a channel, so the loop can
    // drain everything already waiting without polling the stream with a no-op waker
    // (crossterm's EventStream then never wakes the loop again).
    let (rx, input_task) = spawn_input();
    let mut input = Input { rx, guard: AbortOnDrop(input_task) };
    let mut stats = LoopStats::new();
    first.paint(terminal, app, &engine, false, &mut stats)?;
    // Start-up touches code it never runs again (argument and config parsing, opening the
    // store, building the provider) and frees heap it will not reuse soon. Once it has
    // settled, give both back as a job supervisor does (`memory.rs`): clean,
    // shared file pages leave this process's page tables and fault back in from the page
    // cache when touched again; free heap goes back to the kernel.
    tokio::spawn(async {
        tokio::time::sleep(SETTLE_AFTER).await;
        crate::memory::trim_heap();
        crate::memory::drop_read_only_pages();
    });
    // SIGTERM and SIGINT from outside never ask: shut the engine down (it kills every job's
    // process group); SIGHUP leaves jobs to their lease. Then the caller restores the
    // terminal and exits.
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut next_tick: Option<tokio::time::Instant> = None;
    let mut batch = inbox::JobOutputBatch::default();
    loop {
        app.now = Instant::now();
        app.wall_ms = crate::util::now_ms();
        if next_tick.is_none() {
            next_tick = app.tick_interval().map(|d| tokio::time::Instant::now() + d);
        }
        let deadline = app.next_deadline().map(tokio::time::Instant::from_std);
        let quit_by = match app.exit {
            ExitState::Quitting { since } => Some(tokio::time::Instant::from_std(since + SHUTDOWN_WAIT)),
            ExitState::Running | ExitState::Done => None,
        };
        let mut draw_now = false;
        stats.log_every(STATS_EVERY, &batch);
        // Terminal input first: a key waiting is read, applied and drawn before any engine
        // event queued behind it (`biased`, and the drain below stops for it).
        tokio::select! {
            biased;
            event = input.rx.recv() => {
                woke(app);
                stats.input += 1;
                stats.key_read.get_or_insert_with(Instant::now);
                draw_now |= on_terminal_input(app, &engine, event, &mut input.rx)?;
            }
            event = engine.events.recv() => {
                woke(app);
                let Some(event) = event else { return engine_gone(app) };
                stats.engine += 1;
                take_engine_event(app, &engine, &mut batch, event)?;
                stats.engine += drain_engine(app, &mut engine, &mut batch, &input.rx)?;
                frames.schedule_frame();
            }
            Some(()) = draw_rx.recv() => {
                woke(app);
                while draw_rx.try_recv().is_ok() {}
                // The jobs' output since the last frame, one update per job.
                apply_job_output(app, &engine, &mut batch)?;
                draw_now = true;
            }
            () = sleep_until_opt(next_tick) => {
                woke(app);
                next_tick = None;
                frames.schedule_frame();
            }
            () = sleep_until_opt(deadline) => {
                woke(app);
                frames.schedule_frame();
            }
            () = sleep_until_opt(first.pending_due()) => draw_now = true,
            () = sleep_until_opt(quit_by) => {
                tracing::warn!("the engine did not finish shutting down within {SHUTDOWN_WAIT:?}");
                break;
            }
            Some(()) = async {
                tokio::select! {
                    s = sigterm.recv() => s,
                    s = sigint.recv() => s,
                }
            } => {
                woke(app);
                tracing::info!("signal received; shutting down");
                if matches!(app.exit, ExitState::Running) {
                    let ops = app.quit_now();
                    send_ops(&engine, ops, app)?;
                }
            }
            Some(()) = sighup.recv() => {
                woke(app);
                // The terminal went away: running jobs wait `jobs.orphan_grace_s` for a
                // `talaria -c` to re-attach them instead of dying with the window.
                tracing::info!("hang-up; leaving running jobs to their supervisors");
                if matches!(app.exit, ExitState::Running) {
                    let ops = app.quit_hangup();
                    send_ops(&engine, ops, app)?;
                }
            }
        }
        draw_now |= carry_out_requests(terminal, app, &mut input).await?;
        if app.exit == ExitState::Done {
            break;
        }
        first.paint(terminal, app, &engine, draw_now, &mut stats)?;
    }
    Ok(())
}

/// A frame of the loop, counted; after input, how long it took to reach the terminal.
fn draw_counted(terminal: &mut Term, app: &mut App, stats: &mut LoopStats) -> anyhow::Result<()> {
    stats.frames += 1;
    let drawing = Instant::now();
    draw(terminal, app)?;
    if let Some(read) = stats.key_read.take() {
        // Where a slow keystroke's time goes inside talaria (`TALARIA_LOG=talaria::tui=debug`):
        // taken by the loop -> applied and written; the rest a terminal sees is scheduling.
        tracing::debug!(
            read_to_drawn_us = read.elapsed().as_micros() as u64,
            draw_us = drawing.elapsed().as_micros() as u64,
            "input drawn"
        );
    }
    Ok(())
}

/// How often the loop writes what it did to the log (at debug level: `TALARIA_LOG=debug`).
const STATS_EVERY: Duration = Duration::from_secs(5);

/// What the event loop handled since its last stats line: where a busy screen's time goes.
struct LoopStats {
    since: Instant,
    input: u64,
    engine: u64,
    frames: u64,
    /// When the loop took the oldest input not drawn yet.
    key_read: Option<Instant>,
}

impl LoopStats {
    fn new() -> LoopStats {
        LoopStats { since: Instant::now(), input: 0, engine: 0, frames: 0, key_read: None }
    }

    fn log_every(&mut self, every: Duration, batch: &inbox::JobOutputBatch) {
        let secs = self.since.elapsed().as_secs_f64();
        if secs < every.as_secs_f64() || self.engine + self.input == 0 {
            return;
        }
        let per_s = |n: u64| n as f64 / secs;
        tracing::debug!(
            "ui loop: {:.0} input wakeups/s, {:.0} engine events/s ({:.0} job updates/s coalesced into {:.0} applied/s), {:.0} frames/s",
            per_s(self.input),
            per_s(self.engine),
            per_s(batch.received),
            per_s(batch.applied),
            per_s(self.frames)
        );
        *self = LoopStats { key_read: self.key_read, ..LoopStats::new() };
    }
}

/// One engine event into the app: job output waits in `batch` for the next frame
/// (coalesced); anything else is applied now, after the output it may depend on. The ops
/// the app asks for. (Public for the performance guard's `jobs` workload.)
pub fn engine_event(app: &mut App, batch: &mut inbox::JobOutputBatch, event: crate::protocol::Event) -> Vec<Op> {
    let Some(event) = batch.offer(event) else { return Vec::new() };
    let mut ops = if inbox::needs_flush(&event) { job_output_for_frame(app, batch) } else { Vec::new() };
    ops.extend(app.update(AppEvent::Engine(event)));
    ops
}

/// Before a frame: the coalesced job output into the app, one pane update (and at most one
/// log-view refresh) per job whatever the jobs printed. The ops the app asks for.
pub fn job_output_for_frame(app: &mut App, batch: &mut inbox::JobOutputBatch) -> Vec<Op> {
    let mut ops = Vec::new();
    for event in batch.take() {
        ops.extend(app.update(AppEvent::Engine(event)));
    }
    ops
}

fn take_engine_event(
    app: &mut App,
    engine: &EngineHandle,
    batch: &mut inbox::JobOutputBatch,
    event: crate::protocol::Event,
) -> anyhow::Result<()> {
    let ops = engine_event(app, batch, event);
    send_ops(engine, ops, app)
}

/// Take the engine events already queued, but stop as soon as terminal input is waiting:
/// ingestion never holds a key back. How many were taken.
fn drain_engine(
    app: &mut App,
    engine: &mut EngineHandle,
    batch: &mut inbox::JobOutputBatch,
    input: &InputRx,
) -> anyhow::Result<u64> {
    let mut taken = 0;
    while input.is_empty() {
        let Ok(event) = engine.events.try_recv() else { break };
        take_engine_event(app, engine, batch, event)?;
        taken += 1;
    }
    Ok(taken)
}

fn apply_job_output(app: &mut App, engine: &EngineHandle, batch: &mut inbox::JobOutputBatch) -> anyhow::Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let ops = job_output_for_frame(app, batch);
    send_ops(engine, ops, app)
}

/// The terminal's input: the channel its reader task feeds, and that task.
struct Input {
    rx: InputRx,
    guard: AbortOnDrop,
}

/// Keys, pastes, mouse and resizes: everything already waiting is taken before drawing
/// once. Whether a frame is due at once.
fn on_terminal_input(
    app: &mut App,
    engine: &EngineHandle,
    event: Option<std::io::Result<TermEvent>>,
    rx: &mut InputRx,
) -> anyhow::Result<bool> {
    let mut draw_now = false;
    let mut pending = Some(event);
    while let Some(event) = pending.take() {
        match event {
            Some(Ok(event)) => {
                if let Some((ev, now)) = app_event(event) {
                    draw_now |= now;
                    let ops = app.update(ev);
                    send_ops(engine, ops, app)?;
                }
            }
            Some(Err(e)) => return Err(anyhow::anyhow!("reading the terminal failed: {e}")),
            None => anyhow::bail!("the terminal closed"),
        }
        pending = rx.try_recv().ok().map(Some);
    }
    Ok(draw_now)
}

/// The engine's channel closed: fine while quitting; otherwise an engine that could not go
/// on says why in an error notice.
fn engine_gone(app: &App) -> anyhow::Result<()> {
    if !matches!(app.exit, ExitState::Running) {
        return Ok(());
    }
    let why = app.transcript.cells().iter().rev().take(3).find_map(|c| match &c.body {
        transcript::CellBody::Notice { level: crate::protocol::NoticeLevel::Error, text } => Some(text.clone()),
        _ => None,
    });
    match why {
        Some(why) => anyhow::bail!("{why}"),
        None => anyhow::bail!("the engine stopped unexpectedly; see the log for why"),
    }
}

/// What the app asked the terminal for (a notification, the clipboard, mouse capture, a
/// path listing, the shell or the editor). Whether a frame is due at once.
async fn carry_out_requests(terminal: &mut Term, app: &mut App, input: &mut Input) -> anyhow::Result<bool> {
    let mut draw_now = false;
    if let Some(note) = app.notification.take() {
        let _ = terminal.backend_mut().write_all(note.as_bytes());
    }
    if let Some(osc) = app.clipboard.take() {
        let _ = terminal.backend_mut().write_all(osc.as_bytes());
        let _ = terminal.backend_mut().flush();
    }
    if app.mouse != MOUSE_CAPTURED.load(Ordering::SeqCst) {
        set_mouse_capture(terminal, app.mouse)?;
    }
    if let Some(prefix) = app.path_request.take() {
        let found = list_paths(&prefix);
        app.paths_listed(&prefix, found);
        draw_now = true;
    }
    if let Some(request) = app.terminal_request.take() {
        // The input reader must stop first: it would take the keys meant for the
        // shell or the editor. A fresh one starts afterwards.
        input.guard.0.abort();
        let _ = (&mut input.guard.0).await;
        match request {
            TerminalRequest::Suspend => suspend(terminal, app.mouse)?,
            TerminalRequest::Editor(text) => {
                let result = edit_in_editor(terminal, app.mouse, &text).await?;
                app.editor_done(result);
            }
        }
        let (rx, task) = spawn_input();
        *input = Input { rx, guard: AbortOnDrop(task) };
        draw_now = true;
    }
    Ok(draw_now)
}

type InputRx = tokio::sync::mpsc::UnboundedReceiver<std::io::Result<TermEvent>>;

/// Read terminal input on its own task and forward it over a channel, so the loop can
/// drain everything already waiting without polling the stream with a no-op waker
/// (crossterm's EventStream then never wakes the loop again).
fn spawn_input() -> (InputRx, tokio::task::JoinHandle<()>) {
    let (input_tx, input) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = EventStream::new();
        while let Some(event) = stream.next().await {
            let stop = event.is_err();
            if input_tx.send(event).is_err() || stop {
                break;
            }
        }
    });
    (input, task)
}

fn set_mouse_capture(terminal: &mut Term, on: bool) -> anyhow::Result<()> {
    if on {
        execute!(terminal.backend_mut(), EnableWheelCapture).context("cannot enable mouse reporting")?;
    } else {
        execute!(terminal.backend_mut(), DisableWheelCapture).context("cannot disable mouse reporting")?;
    }
    MOUSE_CAPTURED.store(on, Ordering::SeqCst);
    Ok(())
}

/// Set the terminal up again after a suspend or an editor, with a fresh `Terminal` so
/// the next frame draws every cell.
fn resume(terminal: &mut Term, mouse: bool) -> anyhow::Result<()> {
    *terminal = setup(mouse)?;
    Ok(())
}

/// Ctrl+Z: restore the terminal, stop with SIGTSTP as a shell job, and when `fg`
/// continues us, take the terminal again.
fn suspend(terminal: &mut Term, mouse: bool) -> anyhow::Result<()> {
    restore();
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGTSTP).context("cannot suspend (SIGTSTP)")?;
    // Execution continues here after SIGCONT.
    resume(terminal, mouse)
}

/// Ctrl+G: edit `text` in `$VISUAL`/`$EDITOR` (falling back to `vi`) in a temporary file.
/// This is the one place the TUI starts a process: it needs the terminal handed over,
/// which only this module can do. Err(message) when the editor could not run or failed;
/// the outer error is for a terminal that could not be set up again.
async fn edit_in_editor(terminal: &mut Term, mouse: bool, text: &str) -> anyhow::Result<Result<String, String>> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "vi".to_string());
    let (dir, path) = match write_draft(text) {
        Ok(made) => made,
        Err(e) => return Ok(Err(format!("cannot write the draft for the editor: {e}"))),
    };
    restore();
    // Through the shell, as git does, so `EDITOR="code --wait"` works.
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("talaria-editor")
        .arg(&path)
        .status()
        .await;
    let back = resume(terminal, mouse);
    let result = match status {
        Ok(s) if s.success() => {
            std::fs::read_to_string(&path).map_err(|e| format!("cannot read {} after editing: {e}", path.display()))
        }
        Ok(s) => Err(format!("the editor `{editor}` exited with {s}; the message is unchanged")),
        Err(e) => Err(format!("cannot start the editor `{editor}`: {e}; set $VISUAL or $EDITOR")),
    };
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
    back?;
    Ok(result)
}

/// The Ctrl+G draft: in a fresh private directory (`mkdtemp`, mode 0700, a random name
/// nobody could have prepared), created `O_EXCL|O_NOFOLLOW` with mode 0600, so no link
/// a job planted can send the draft into another file. Returns the directory and file.
pub(crate) fn write_draft(text: &str) -> std::io::Result<(std::path::PathBuf, std::path::PathBuf)> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = nix::unistd::mkdtemp(&std::env::temp_dir().join("talaria-draft-XXXXXX"))?;
    let path = dir.join("message.md");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&path)?;
    file.write_all(text.as_bytes())?;
    Ok((dir, path))
}

/// Aborts a task when dropped (the terminal input reader ends with the loop).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod draft_tests {
    #[test]
    fn the_draft_lives_in_a_private_directory_and_follows_no_link() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, path) = super::write_draft("hello").unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello");
        // A second draft gets its own directory: the name cannot be predicted.
        let (other, other_path) = super::write_draft("x").unwrap();
        assert_ne!(dir, other);
        for (d, p) in [(dir, path), (other, other_path)] {
            std::fs::remove_file(p).unwrap();
            std::fs::remove_dir(d).unwrap();
        }
    }
}
