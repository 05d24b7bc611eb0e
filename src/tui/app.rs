//! The TUI's state as plain data, and `update(AppEvent) -> Vec<Op>`: every decision the
//! front end makes, with no I/O, so it is tested without a terminal or an engine.

mod agent_log;
mod events;
mod extras;
mod keys;
mod log;
pub(crate) mod rewind;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crossterm::event::{KeyEvent, MouseEvent, MouseEventKind};
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::Line;
use ratatui_textarea::TextArea;

pub(crate) use extras::{Paste, TerminalRequest, POPUP_MAX_ROWS};
pub(crate) use log::{highlight, hit_style};

use super::keymap::Keymap;
use super::theme::Theme;
use super::transcript::{Scroll, Slice, Transcript};
use crate::config::{Config, NotifyMode, OnQuit};
use crate::protocol::{
    BusyMode, Event, HeartbeatInfo, JobId, JobInfo, NoticeLevel, Op, Phase, SessionInfo, StatusInfo, TurnOutcome,
};

/// A second Ctrl+C within this window quits.
pub(crate) const DOUBLE_CTRL_C: Duration = Duration::from_secs(2);
/// Keys typed this soon after an approval appears are ignored (they were meant for the input).
pub(crate) const APPROVAL_ARM: Duration = Duration::from_millis(300);
/// Lines of a job log requested at once.
pub(crate) const LOG_LIMIT: u64 = 2_000;
/// How long the answer to a key in the log view (poll, kill, a search) stays in its footer.
pub(crate) const LOG_MESSAGE_FOR: Duration = Duration::from_secs(5);
/// A log view that does not follow re-reads its part of the log at most this often.
pub(crate) const LOG_REFRESH_EVERY: Duration = Duration::from_secs(1);
/// Output kept per running tool for its log view.
const TOOL_OUTPUT_MAX: usize = 64 * 1024;
/// Job rows kept in the pane; finished jobs go first.
const JOB_ROWS_MAX: usize = 64;
/// Messages kept for ↑/↓ recall.
const HISTORY_MAX: usize = 500;
/// Rows the mouse wheel scrolls.
const WHEEL_ROWS: usize = 3;
/// Scrolled within this many cells of the oldest loaded one, the page before it is asked for.
const EARLIER_PREFETCH_CELLS: usize = 50;
/// The empty input's hint, and the one for inputs too narrow for it.
const PLACEHOLDER: &str = "Message Talaria · Enter send · ? help";
const PLACEHOLDER_SHORT: &str = "Message · Enter · ? help";

/// Everything the TUI reacts to.
#[derive(Debug, Clone, PartialEq)]
pub enum AppEvent {
    Key(KeyEvent),
    Paste(String),
    Mouse(MouseEvent),
    Resize(u16, u16),
    Engine(Event),
}

/// What takes the keys and what is drawn over what. [`App::layers`] lists the layers
/// present, topmost first: keys go to the first, and the view draws them in reverse so the
/// one with the keys is always on top. This is the one place the order is written down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    /// An approval question (the oldest waiting one).
    Approval,
    /// Help, a confirmation, or a one-line prompt (`Modal`).
    Modal,
    /// A job's log (or the transcript's) over the main area.
    LogView,
    /// The jobs or tools pane has the focus.
    Pane,
    /// The input box has the focus.
    Input,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Focus {
    Input,
    Jobs,
    Tools,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunningTool {
    pub(crate) call_id: String,
    pub(crate) name: String,
    pub(crate) summary: String,
    pub(crate) started: Instant,
    pub(crate) last_line: String,
    /// The tail of its output (capped), for the log view.
    pub(crate) output: String,
    /// Waiting for the user's approval; `started` is reset when it is answered.
    pub(crate) awaiting: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobRow {
    pub(crate) info: JobInfo,
    /// Wall-clock time (unix ms) the UI learnt the job ended; freezes its runtime.
    pub(crate) finished_at_ms: Option<u64>,
    /// The patterns the user watches on it (`w`).
    pub(crate) watches: Vec<String>,
}

impl JobRow {
    pub(crate) fn runtime_ms(&self, wall_ms: u64) -> u64 {
        self.finished_at_ms.unwrap_or(wall_ms).saturating_sub(self.info.started_at_ms)
    }

    /// The runtime as shown: whole seconds while it runs (the pane ticks once a second),
    /// the exact figure once it ended, as its exit notice gives it (`18.4s`, not `18.0s`).
    pub(crate) fn shown_runtime_ms(&self, wall_ms: u64) -> u64 {
        let ms = self.runtime_ms(wall_ms);
        if self.finished_at_ms.is_some() {
            ms
        } else {
            ms / 1000 * 1000
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogSource {
    Job(JobId),
    Tool(String),
    /// `/diff`: what a turn (or the session) changed; the title says which.
    Diff(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LogView {
    pub(crate) source: LogSource,
    pub(crate) lines: Vec<Line<'static>>,
    /// The log's line number of `lines[0]` (1-based).
    pub(crate) first_line: u64,
    pub(crate) total_lines: u64,
    /// Keep the newest line in view and refresh as output arrives.
    pub(crate) follow: bool,
    /// The first line shown when not following (an index into `lines`).
    pub(crate) top: usize,
    /// A log request is on its way (don't ask again until it answers).
    pub(crate) inflight: bool,
    /// The last search (`/` in the log view); `n`/`N` move between its matches.
    pub(crate) search: Option<String>,
    /// The line of the match `n`/`N` went to last.
    pub(crate) current_match: Option<usize>,
    /// The answer to the last thing done from the view (poll, kill, write): shown in its
    /// footer until the next key or for `LOG_MESSAGE_FOR`, never among the job's output.
    pub(crate) message: Option<LogMessage>,
    /// When the engine was last asked for this view's lines.
    pub(crate) requested_at: Option<Instant>,
    /// The log lines (as written) the loaded chunk covers, when a terminal shows them as a
    /// different number of lines (redraws collapsed): line numbers are then not per line.
    pub(crate) redrawn: Option<(u64, u64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LogMessage {
    pub(crate) level: NoticeLevel,
    pub(crate) text: String,
    pub(crate) at: Instant,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Modal {
    Help {
        scroll: usize,
    },
    QuitConfirm,
    KillConfirm {
        id: JobId,
    },
    WritePrompt {
        id: JobId,
        text: String,
    },
    /// Typing a pattern to watch the job's output for (`w`).
    WatchPrompt {
        id: JobId,
        text: String,
    },
    /// Typing a search for the open log view.
    LogSearch {
        text: String,
    },
    /// `/resume` matched several sessions: pick one.
    Sessions {
        query: String,
        sessions: Vec<SessionInfo>,
        selected: usize,
    },
    /// `/rewind` (or Esc Esc): a point to go back to (newest first), then what to restore.
    Rewind(rewind::RewindPicker),
    /// What a rewind would do: the one confirmation.
    RewindConfirm(crate::protocol::rewind::RewindPreview),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PendingApproval {
    pub(crate) id: u64,
    /// The command with every hidden character revealed (`\x1b`, `<U+202E>`).
    pub(crate) command: String,
    /// Something was revealed: the modal warns about it.
    pub(crate) hidden: bool,
    pub(crate) reason: String,
    pub(crate) grounds: Vec<crate::protocol::AskGround>,
    /// A sub-agent that asks (`agent_3`); None for this session's own agent.
    pub(crate) from: Option<String>,
    pub(crate) shown_at: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitState {
    Running,
    /// `Op::Shutdown` was sent; waiting for `ShutdownComplete`.
    Quitting {
        since: Instant,
    },
    Done,
}

/// Facts about the session from `SessionReady` and `Status`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SessionFacts {
    pub(crate) session_id: Option<String>,
    pub(crate) title: Option<String>,
    pub(crate) provider: String,
    pub(crate) cwd: String,
    pub(crate) demo: bool,
    pub(crate) busy_mode: BusyMode,
}

pub struct App {
    pub(crate) theme: Theme,
    pub(crate) keymap: Keymap,
    pub(crate) banner: Option<String>,
    pub(crate) mouse: bool,
    notify_mode: NotifyMode,
    /// `jobs.on_quit`: what quitting does with running jobs.
    on_quit: OnQuit,
    notify_after: Duration,
    /// The clock for this update or frame; set by the event loop (tests set it directly).
    pub(crate) now: Instant,
    /// Wall-clock unix milliseconds matching `now` (job runtimes).
    pub(crate) wall_ms: u64,
    pub(crate) transcript: Transcript,
    pub(crate) input: TextArea<'static>,
    history: Vec<String>,
    history_pos: Option<usize>,
    /// Typed while busy, waiting for the running turn's next delivery point...
    pub(crate) pending: Vec<String>,
    /// ...and waiting for turns of their own (shown as waiting while paused).
    pub(crate) queued: Vec<String>,
    /// What the engine is doing (`Event::Phase`): what Esc, Ctrl+C, Ctrl+B and Tab do.
    pub(crate) phase: Phase,
    turn_started: Option<Instant>,
    pub(crate) last_outcome: Option<TurnOutcome>,
    pub(crate) session: SessionFacts,
    pub(crate) status: StatusInfo,
    pub(crate) usage: Option<(u64, u64)>,
    /// Every model call of this run added up (for the exit summary).
    pub(crate) spend: crate::protocol::usage::Spend,
    pub(crate) tools: Vec<RunningTool>,
    pub(crate) jobs: Vec<JobRow>,
    /// Every sub-agent of this run as last heard of (the pane's rows are pruned; the exit
    /// summary counts them all).
    pub(crate) agents: std::collections::BTreeMap<JobId, crate::protocol::agent::AgentInfo>,
    /// The conversation of the sub-agent whose log view is open.
    pub(crate) agent_feed: Option<agent_log::AgentFeed>,
    pub(crate) focus: Focus,
    pub(crate) tool_sel: usize,
    pub(crate) job_sel: usize,
    pub(crate) log_view: Option<LogView>,
    pub(crate) modal: Option<Modal>,
    pub(crate) approvals: VecDeque<PendingApproval>,
    pub(crate) last_ctrl_c: Option<Instant>,
    pub(crate) exit: ExitState,
    /// What the transcript showed in the last frame (set by `prepare`).
    pub visible: Vec<Slice>,
    /// The transcript's area in the last frame (for paging).
    pub(crate) transcript_area: Rect,
    /// The log view's area in the last frame.
    pub(crate) log_area: Rect,
    /// The whole frame in the last draw (the help's size).
    pub(crate) frame_area: Rect,
    /// How far the help could scroll when it was last drawn (the view writes it, as a
    /// stateful widget would; End and the clamp of the other scroll keys read it).
    pub(crate) help_max_scroll: std::cell::Cell<usize>,
    /// The side column (jobs and tools panes) was on screen in the last frame (not at
    /// narrow widths, where a focused pane replaces the transcript instead).
    pub(crate) panes_shown: bool,
    /// Rows the welcome took above the transcript in the last frame (0 once something is said).
    pub(crate) welcome_rows: u16,
    /// The input shows the short placeholder (a narrow terminal).
    placeholder_short: bool,
    /// The jobs left running on purpose when quitting ("keep them running"), to name them.
    pub(crate) kept_jobs: Vec<JobId>,
    /// How each message typed while busy was sent (steer, queue…): the pending list marks them.
    pub(crate) sent_modes: Vec<(String, BusyMode)>,
    /// Large pastes of the messages sent, so the transcript folds them as the input did.
    pub(crate) sent_pastes: Vec<Paste>,
    /// When the last status (and its heartbeat countdown) arrived.
    pub(crate) status_at: Instant,
    /// A status has arrived: the status line shows the engine's facts, not placeholders.
    pub(crate) status_known: bool,
    /// `@path` completion: the event loop lists the paths starting with this, then calls
    /// `paths_listed`.
    pub(crate) path_request: Option<String>,
    /// Running inside tmux, where OSC 52 reaches the terminal only with `set-clipboard on`.
    pub(crate) in_tmux: bool,
    /// A one-off hint in the input's border (what Tab did not do, …); cleared by the next key.
    pub(crate) input_hint: Option<String>,
    /// A bell or OSC 9 text the event loop should write, then clear.
    pub(crate) notification: Option<String>,
    /// An OSC 52 clipboard write the event loop should send, then clear.
    pub(crate) clipboard: Option<String>,
    /// Suspend or run the editor: the event loop does it, then clears this.
    pub(crate) terminal_request: Option<TerminalRequest>,
    /// The highlighted row of the slash-command popup.
    completion_sel: usize,
    /// Esc closed the popup for this input text; it opens again once the text changes.
    completion_dismissed: Option<String>,
    /// Large pastes standing behind placeholders in the input.
    pub(crate) pastes: Vec<Paste>,
    /// Older history the engine has not sent (the seq to ask for it with).
    pub(crate) earlier: Option<i64>,
    /// `Op::LoadEarlier` is on its way; its answer clears this.
    earlier_requested: bool,
    /// The slash command sent to the engine whose answer has not come yet: an error gives
    /// it back to the input, selected.
    awaiting_command: Option<String>,
    /// When Esc last did nothing on an empty, idle input (a second one soon opens /rewind).
    last_idle_esc: Option<Instant>,
}

impl App {
    pub fn new(config: &Config, keymap: Keymap, theme: Theme, banner: Option<String>) -> App {
        let mut app = App {
            theme,
            keymap,
            banner,
            mouse: config.ui.mouse,
            notify_mode: config.ui.notify,
            on_quit: config.jobs.on_quit,
            notify_after: Duration::from_secs(config.ui.notify_after_s),
            now: Instant::now(),
            wall_ms: crate::util::now_ms(),
            transcript: Transcript::default(),
            input: TextArea::default(),
            history: Vec::new(),
            history_pos: None,
            pending: Vec::new(),
            queued: Vec::new(),
            phase: Phase::Idle,
            turn_started: None,
            last_outcome: None,
            session: SessionFacts { busy_mode: config.agent.busy_input_mode, ..SessionFacts::default() },
            status: StatusInfo {
                model: config.model.name.clone(),
                busy_mode: Some(config.agent.busy_input_mode),
                ..StatusInfo::default()
            },
            usage: None,
            spend: Default::default(),
            tools: Vec::new(),
            jobs: Vec::new(),
            agents: Default::default(),
            agent_feed: None,
            focus: Focus::Input,
            tool_sel: 0,
            job_sel: 0,
            log_view: None,
            modal: None,
            approvals: VecDeque::new(),
            last_ctrl_c: None,
            exit: ExitState::Running,
            visible: Vec::new(),
            transcript_area: Rect::new(0, 0, 80, 20),
            log_area: Rect::new(0, 0, 80, 20),
            frame_area: Rect::new(0, 0, 80, 24),
            help_max_scroll: std::cell::Cell::new(0),
            panes_shown: true,
            welcome_rows: 0,
            placeholder_short: false,
            kept_jobs: Vec::new(),
            sent_modes: Vec::new(),
            sent_pastes: Vec::new(),
            status_at: Instant::now(),
            status_known: false,
            input_hint: None,
            in_tmux: false,
            path_request: None,
            notification: None,
            clipboard: None,
            terminal_request: None,
            completion_sel: 0,
            completion_dismissed: None,
            pastes: Vec::new(),
            earlier: None,
            earlier_requested: false,
            awaiting_command: None,
            last_idle_esc: None,
        };
        app.reset_input(String::new());
        app
    }

    /// The engine has said which session this is and sent its status (model, sandbox,
    /// context use): a frame drawn now is the complete first screen.
    pub fn first_screen_known(&self) -> bool {
        self.session.session_id.is_some() && self.status_known
    }

    /// Handle one event; returns what the engine must be told.
    pub fn update(&mut self, event: AppEvent) -> Vec<Op> {
        let mut ops = Vec::new();
        match event {
            AppEvent::Key(key) => self.on_key(key, &mut ops),
            AppEvent::Paste(text) => self.on_paste(&text),
            AppEvent::Mouse(mouse) => self.on_mouse(mouse),
            AppEvent::Resize(_, _) => {}
            AppEvent::Engine(event) => self.on_engine(event, &mut ops),
        }
        self.normalise_focus();
        // A sub-agent's conversation is kept only while its log view is open.
        if let Some(feed) = &self.agent_feed {
            if self.log_view.as_ref().map(|v| &v.source) != Some(&LogSource::Job(feed.id.clone())) {
                self.agent_feed = None;
            }
        }
        self.sync_input_style();
        self.load_earlier_near_the_top(&mut ops);
        ops
    }

    /// Scrolled up to within a few cells of the oldest one the transcript has: ask for the
    /// page before it (once; the answer goes above without moving the view).
    fn load_earlier_near_the_top(&mut self, ops: &mut Vec<Op>) {
        let Some(before) = self.earlier.filter(|_| !self.earlier_requested) else { return };
        if matches!(self.transcript.scroll, Scroll::Anchor { cell, .. } if cell < EARLIER_PREFETCH_CELLS) {
            self.earlier_requested = true;
            ops.push(Op::LoadEarlier { before });
        }
    }

    /// Lay out the transcript for a frame of `area` (caches wrapped lines).
    pub(crate) fn prepare(&mut self, area: Rect) {
        let areas = super::layout::layout(area, &self.layout_facts());
        self.frame_area = area;
        self.panes_shown = areas.side;
        self.log_area = areas.main;
        let mut t = areas.transcript;
        // Until something is said, the welcome stays on top and notices (the instructions
        // loaded, a sandbox warning) go under it; they never take its place.
        self.welcome_rows = 0;
        let notices = if self.transcript.has_conversation() {
            usize::MAX
        } else {
            self.transcript.total_height(t.width, &self.theme)
        };
        // Many notices (more than half the view) have the room to themselves.
        if notices <= usize::from(t.height) / 2 {
            let welcome = super::view::welcome_height(self, t.width);
            let rows = welcome.min(usize::from(t.height) - notices);
            self.welcome_rows = u16::try_from(rows).unwrap_or(0);
            t.y += self.welcome_rows;
            t.height -= self.welcome_rows;
        }
        self.transcript_area = t;
        self.visible = self.transcript.prepare(t.width, usize::from(t.height), &self.theme);
        self.render_agent_log();
        // The full hint where it fits; at 40 columns a shorter one, never a cut one.
        let short = usize::from(areas.input.width.saturating_sub(4)) < super::wrap::str_width(PLACEHOLDER);
        if short != self.placeholder_short {
            self.placeholder_short = short;
            self.input.set_placeholder_text(if short { PLACEHOLDER_SHORT } else { PLACEHOLDER });
        }
    }

    /// The layers present, topmost first; the last is always the pane or the input.
    pub(crate) fn layers(&self) -> Vec<Layer> {
        let mut layers = Vec::with_capacity(4);
        if !self.approvals.is_empty() {
            layers.push(Layer::Approval);
        }
        if self.modal.is_some() {
            layers.push(Layer::Modal);
        }
        if self.log_view.is_some() {
            layers.push(Layer::LogView);
        }
        layers.push(if self.focus == Focus::Input { Layer::Input } else { Layer::Pane });
        layers
    }

    /// The layer that gets the keys.
    pub(crate) fn top_layer(&self) -> Layer {
        self.layers().first().copied().unwrap_or(Layer::Input)
    }

    /// What the frame layout depends on.
    pub(crate) fn layout_facts(&self) -> super::layout::LayoutFacts<'_> {
        use super::layout::Pane;
        super::layout::LayoutFacts {
            input_lines: self.input.lines(),
            pending: self.pending.len() + self.queued.len(),
            tools: self.tools.len(),
            focused_pane: match self.focus {
                Focus::Input => None,
                Focus::Jobs => Some(Pane::Jobs),
                Focus::Tools => Some(Pane::Tools),
            },
        }
    }

    pub(crate) fn input_text(&self) -> String {
        self.input.lines().join("\n")
    }

    pub(crate) fn input_is_empty(&self) -> bool {
        self.input.lines().iter().all(|l| l.is_empty())
    }

    /// Something runs that Esc stops (a turn, `/compact`, the goal's gates or judge).
    pub(crate) fn busy(&self) -> bool {
        self.phase.busy()
    }

    /// What waits to reach the model, labelled, in the order it will.
    pub(crate) fn waiting(&self) -> Vec<(&'static str, &str)> {
        let queued = if self.phase == Phase::Paused { "waiting" } else { "queued" };
        let pending = self.pending.iter().map(|p| ("pending", p.as_str()));
        pending.chain(self.queued.iter().map(|q| (queued, q.as_str()))).collect()
    }

    /// The busy mode Enter uses while a turn runs.
    pub(crate) fn busy_mode(&self) -> BusyMode {
        self.status.busy_mode.unwrap_or(self.session.busy_mode)
    }

    pub(crate) fn running_jobs(&self) -> usize {
        self.jobs.iter().filter(|j| j.info.status.is_running()).count()
    }

    /// How often the screen must redraw by itself: only while something animates.
    pub(crate) fn tick_interval(&self) -> Option<Duration> {
        if !matches!(self.exit, ExitState::Running) {
            return None;
        }
        if self.busy() || !self.tools.is_empty() || self.transcript.has_running_tool() {
            Some(Duration::from_millis(100))
        } else if self.running_jobs() > 0 {
            Some(Duration::from_secs(1))
        } else {
            None
        }
    }

    /// A moment when the screen changes by itself once (the Ctrl+C hint expires).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let ctrl_c = self.last_ctrl_c.map(|t| t + DOUBLE_CTRL_C).filter(|&t| t > self.now);
        let message = self.log_view.as_ref().and_then(|v| v.message.as_ref()).map(|m| m.at + LOG_MESSAGE_FOR);
        [ctrl_c, message.filter(|&t| t > self.now), self.heartbeat_changes_at()].into_iter().flatten().min()
    }

    /// The heartbeat as it stands now: its countdown goes on between the engine's statuses.
    pub(crate) fn heartbeat_now(&self, hb: &HeartbeatInfo) -> HeartbeatInfo {
        let elapsed = u64::try_from(self.now.saturating_duration_since(self.status_at).as_millis()).unwrap_or(u64::MAX);
        HeartbeatInfo { next_in_ms: hb.next_in_ms.map(|ms| ms.saturating_sub(elapsed)), ..hb.clone() }
    }

    /// When the status line's `next in Nm` next changes (it counts whole minutes, rounded up).
    fn heartbeat_changes_at(&self) -> Option<Instant> {
        let hb = self.status.heartbeat.as_ref().filter(|hb| !hb.paused)?;
        let left = self.heartbeat_now(hb).next_in_ms.filter(|&ms| ms > 0)?;
        let shown = left.div_ceil(60_000);
        Some(self.now + Duration::from_millis(left - (shown - 1) * 60_000))
    }

    /// The status line's spinner position: advances every 100 ms of the running turn.
    pub(crate) fn spinner_frame(&self) -> usize {
        self.turn_started.map_or(0, |t| (self.now.saturating_duration_since(t).as_millis() / 100) as usize)
    }

    /// The "press Ctrl+C again" hint is showing.
    pub(crate) fn ctrl_c_armed(&self) -> bool {
        self.last_ctrl_c.is_some_and(|t| self.now.saturating_duration_since(t) < DOUBLE_CTRL_C)
    }

    fn reset_input(&mut self, text: String) {
        let lines: Vec<String> =
            if text.is_empty() { vec![String::new()] } else { text.split('\n').map(String::from).collect() };
        let mut input = TextArea::new(lines);
        input.set_cursor_line_style(Style::default());
        input.set_placeholder_text(if self.placeholder_short { PLACEHOLDER_SHORT } else { PLACEHOLDER });
        input.set_placeholder_style(Style::default().fg(self.theme.dim));
        input.set_wrap_mode(ratatui_textarea::WrapMode::WordOrGlyph);
        input.move_cursor(ratatui_textarea::CursorMove::Bottom);
        input.move_cursor(ratatui_textarea::CursorMove::End);
        self.input = input;
        self.history_pos = None;
        if self.input_is_empty() {
            self.pastes.clear();
        }
    }

    fn sync_input_style(&mut self) {
        let typing = self.top_layer() == Layer::Input;
        let style =
            if typing { Style::default().add_modifier(ratatui::style::Modifier::REVERSED) } else { Style::default() };
        if self.input.cursor_style() != style {
            self.input.set_cursor_style(style);
        }
    }

    fn normalise_focus(&mut self) {
        match self.focus {
            Focus::Jobs if self.jobs.is_empty() => self.focus = Focus::Input,
            Focus::Tools if self.tools.is_empty() => self.focus = Focus::Input,
            Focus::Input | Focus::Jobs | Focus::Tools => {}
        }
        self.job_sel = self.job_sel.min(self.jobs.len().saturating_sub(1));
        self.tool_sel = self.tool_sel.min(self.tools.len().saturating_sub(1));
    }

    fn push_history(&mut self, text: &str) {
        if self.history.last().map(String::as_str) != Some(text) {
            self.history.push(text.to_string());
            if self.history.len() > HISTORY_MAX {
                self.history.remove(0);
            }
        }
    }

    fn on_paste(&mut self, text: &str) {
        let text = text.replace("\r\n", "\n").replace('\r', "\n");
        if let Some(
            Modal::WritePrompt { text: buf, .. }
            | Modal::WatchPrompt { text: buf, .. }
            | Modal::LogSearch { text: buf },
        ) = &mut self.modal
        {
            buf.push_str(text.lines().next().unwrap_or(""));
            return;
        }
        if !self.approvals.is_empty() || self.modal.is_some() {
            return;
        }
        self.log_view = None;
        self.focus = Focus::Input;
        self.paste_into_input(text);
    }

    fn on_mouse(&mut self, mouse: MouseEvent) {
        let up = match mouse.kind {
            MouseEventKind::ScrollUp => true,
            MouseEventKind::ScrollDown => false,
            MouseEventKind::Down(_)
            | MouseEventKind::Up(_)
            | MouseEventKind::Drag(_)
            | MouseEventKind::Moved
            | MouseEventKind::ScrollLeft
            | MouseEventKind::ScrollRight => return,
        };
        if let Some(Modal::Help { scroll }) = &mut self.modal {
            *scroll = if up { scroll.saturating_sub(WHEEL_ROWS) } else { *scroll + WHEEL_ROWS };
        } else if self.log_view.is_some() {
            if up {
                self.log_scroll_up(WHEEL_ROWS);
            } else {
                self.log_scroll_down(WHEEL_ROWS);
            }
        } else if up {
            self.scroll_transcript_up(WHEEL_ROWS);
        } else {
            self.scroll_transcript_down(WHEEL_ROWS);
        }
    }

    fn page_rows(&self) -> usize {
        usize::from(self.transcript_area.height.saturating_sub(2)).max(1)
    }

    fn scroll_transcript_up(&mut self, n: usize) {
        let a = self.transcript_area;
        self.transcript.scroll_up(n, a.width, usize::from(a.height), &self.theme);
    }

    fn scroll_transcript_down(&mut self, n: usize) {
        let a = self.transcript_area;
        self.transcript.scroll_down(n, a.width, usize::from(a.height), &self.theme);
    }

    fn notify(&mut self, text: &str) {
        self.notification = match self.notify_mode {
            NotifyMode::Bell => Some("\x07".to_string()),
            // Every escape sequence and control character removed, C1 controls (a string
            // terminator would end the OSC early) and bidi overrides neutralised.
            NotifyMode::Osc9 => Some(format!("\x1b]9;{}\x07", crate::text::for_terminal(text).replace('\n', " "))),
            NotifyMode::Off => None,
        };
    }
}
