//! The only types the engine and its front ends share.
//!
//! `Op` flows from a front end (TUI, `talaria exec`, tests) to the engine; `Event` flows
//! back. Both are matched exhaustively everywhere, so a new variant shows every place
//! that must handle it. `talaria exec --json` prints each `Event` as
//! `{"type":"<Variant>","data":{...}}`.

pub mod agent;
mod backend;
pub mod commands;
pub(crate) mod info;
pub mod network;
pub mod rewind;
pub(crate) mod usage;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

pub use backend::Backend;
pub use commands::{Command, SlashCommand, UiCommand};
pub(crate) use info::{
    GateInfo, GateRun, GoalInfo, GoalState, HeartbeatInfo, McpServerInfo, McpState, McpToolInfo, SessionInfo,
};

/// A front end's end of the engine: send `Op`s, receive `Event`s.
pub struct EngineHandle {
    pub ops: mpsc::UnboundedSender<Op>,
    pub events: mpsc::UnboundedReceiver<Event>,
}

/// A background job id as the model and the user see it: `job_<n>`.
pub type JobId = String;

/// What asks before it runs (`approvals.mode`, DESIGN §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// Sandboxed commands run; every command outside the sandbox asks.
    #[default]
    Auto,
    /// Inside the sandbox what is not known safe asks; outside it everything asks.
    Prompt,
    /// Nothing asks (hardline commands are still refused; the sandbox still applies).
    Off,
}

impl ApprovalMode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Auto => "auto",
            ApprovalMode::Prompt => "prompt",
            ApprovalMode::Off => "off",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<ApprovalMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(ApprovalMode::Auto),
            "prompt" => Some(ApprovalMode::Prompt),
            "off" => Some(ApprovalMode::Off),
            _ => None,
        }
    }
}

/// What a message typed while the agent is busy does (DESIGN §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BusyMode {
    /// Abort the stream / yield running tools, deliver the message at once.
    #[default]
    Redirect,
    /// Deliver after the next tool results, without yielding.
    Steer,
    /// Run as the next turn.
    Queue,
}

impl BusyMode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BusyMode::Redirect => "redirect",
            BusyMode::Steer => "steer",
            BusyMode::Queue => "queue",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<BusyMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "redirect" => Some(BusyMode::Redirect),
            "steer" => Some(BusyMode::Steer),
            "queue" => Some(BusyMode::Queue),
            _ => None,
        }
    }
}

/// The user's answer to an approval prompt (DESIGN §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    Once,
    Session,
    Always,
    Deny,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "action")]
pub enum JobAction {
    Poll,
    Kill,
    Write {
        data: String,
    },
    Close,
    Log {
        offset: Option<u64>,
        limit: Option<u64>,
    },
    /// A watch set by the user (`w` in the log view): a matching line notifies the user.
    Watch {
        pattern: String,
    },
    /// Remove the user's watches on the job (all of them when `pattern` is None).
    Unwatch {
        pattern: Option<String>,
    },
}

/// Front end -> engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A message from the user. `mode` None = the configured busy mode.
    Submit {
        text: String,
        mode: Option<BusyMode>,
    },
    /// Esc / Ctrl+C while busy / `/stop`: abort the turn, kill foreground commands.
    Interrupt,
    /// Ctrl+B: move running foreground commands to background jobs, no message.
    YieldForeground,
    Approve {
        id: u64,
        decision: Approval,
    },
    Command(SlashCommand),
    Job {
        id: JobId,
        action: JobAction,
    },
    /// Sent just before `Shutdown`: leave running jobs running instead of killing them.
    /// `detach`: kept on purpose, with no deadline (`jobs.on_quit = keep`); otherwise
    /// they wait `jobs.orphan_grace_s` for a new owner (the terminal went away).
    LeaveJobs {
        detach: bool,
    },
    /// The front end has drawn its first frame: background start-up work (MCP servers)
    /// may begin now without competing with it.
    FrontEndReady,
    /// The transcript was scrolled to the top of what it has: send the page of history
    /// before seq `before` (the `earlier` of `SessionReady` or of the last `EarlierHistory`).
    LoadEarlier {
        before: i64,
    },
    Shutdown,
}

/// Why a turn started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnTrigger {
    User,
    Queued,
    JobNotification,
    Heartbeat,
    Goal,
    Retry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnOutcome {
    Completed,
    Interrupted,
    Failed,
    /// The iteration budget ran out before the model stopped calling tools.
    BudgetExhausted,
}

impl TurnOutcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TurnOutcome::Completed => "completed",
            TurnOutcome::Interrupted => "interrupted",
            TurnOutcome::Failed => "failed",
            TurnOutcome::BudgetExhausted => "budget_exhausted",
        }
    }
}

/// How a tool call ended, beyond ok / failed (shown in the tool cell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// A `terminal` call started a background job.
    Background,
    /// A foreground command was moved to the background (redirect, Ctrl+B).
    Yielded,
    Interrupted,
    Timeout,
    Denied,
    /// Not run: a message arrived before the call started.
    Skipped,
    Failed,
    /// A remote backend could not be reached (DESIGN §4b): the command did not run there.
    Degraded,
    /// `process`: the job was killed, had exited already, is still running, …
    Killed,
    AlreadyExited,
    Running,
    Exited,
    Released,
    NotFound,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Background => "background",
            ToolStatus::Yielded => "yielded",
            ToolStatus::Interrupted => "interrupted",
            ToolStatus::Timeout => "timeout",
            ToolStatus::Denied => "denied",
            ToolStatus::Skipped => "skipped",
            ToolStatus::Failed => "failed",
            ToolStatus::Degraded => "degraded",
            ToolStatus::Killed => "killed",
            ToolStatus::AlreadyExited => "already_exited",
            ToolStatus::Running => "running",
            ToolStatus::Exited => "exited",
            ToolStatus::Released => "released",
            ToolStatus::NotFound => "not_found",
        }
    }

    /// The status word of a tool's JSON result (`"status"`), when it is one of these.
    pub(crate) fn parse(s: &str) -> Option<ToolStatus> {
        [
            ToolStatus::Background,
            ToolStatus::Yielded,
            ToolStatus::Interrupted,
            ToolStatus::Timeout,
            ToolStatus::Denied,
            ToolStatus::Skipped,
            ToolStatus::Failed,
            ToolStatus::Degraded,
            ToolStatus::Killed,
            ToolStatus::AlreadyExited,
            ToolStatus::Running,
            ToolStatus::Exited,
            ToolStatus::Released,
            ToolStatus::NotFound,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}

/// How a tool call ended, for display.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutcome {
    /// True when the tool did what it was asked (exit code 0 for commands).
    pub ok: bool,
    pub exit_code: Option<i32>,
    pub status: Option<ToolStatus>,
    pub duration_ms: u64,
    /// The JSON text the model sees (already capped).
    pub result: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoticeLevel {
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "state", content = "code")]
pub enum JobStatus {
    Running,
    /// A remote job whose connection dropped: it runs on over there while talaria tries to
    /// re-attach (DESIGN §4b). Counts as running.
    Reconnecting,
    Exited(i32),
    Killed,
    Lost,
}

impl JobStatus {
    pub(crate) fn is_running(&self) -> bool {
        matches!(self, JobStatus::Running | JobStatus::Reconnecting)
    }

    pub(crate) fn label(&self) -> String {
        match self {
            JobStatus::Running => "running".into(),
            JobStatus::Reconnecting => "reconnecting".into(),
            JobStatus::Exited(code) => format!("exited {code}"),
            JobStatus::Killed => "killed".into(),
            JobStatus::Lost => "lost".into(),
        }
    }
}

/// A job as the UI lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub id: JobId,
    pub(crate) command: String,
    pub(crate) pid: u32,
    pub(crate) cwd: String,
    /// Unix time in milliseconds.
    pub(crate) started_at_ms: u64,
    pub status: JobStatus,
    /// False while a foreground tool call is still awaiting it.
    pub background: bool,
    pub has_stdin: bool,
    pub last_line: String,
    /// Set when the job is a sub-agent (DESIGN §14).
    #[serde(default)]
    pub agent: Option<Box<agent::AgentInfo>>,
}

/// Where a user-role message came from, stored with it (the `origin` column) so every
/// front end labels it from the type, live and on resume, never from its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Typed by the user and sent when the agent was idle (or re-sent by `/retry`).
    #[default]
    Typed,
    /// Typed while the agent was busy and delivered into the running turn (inside the
    /// out-of-band wrapper when it came after tool results).
    MidTurn,
    /// Typed while busy (or paused) and run as a turn of its own.
    Queued,
    Heartbeat,
    /// A goal's continuation (or its first turn).
    Goal,
    /// A background job's exit notice.
    JobNotice,
    /// A watch pattern matched a job's output.
    Watch,
    /// A sub-agent's final answer (DESIGN §14).
    SubAgent,
}

impl Origin {
    /// The word stored in the `origin` column.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Origin::Typed => "typed",
            Origin::MidTurn => "mid_turn",
            Origin::Queued => "queued",
            Origin::Heartbeat => "heartbeat",
            Origin::Goal => "goal",
            Origin::JobNotice => "job_notice",
            Origin::Watch => "watch",
            Origin::SubAgent => "sub_agent",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Origin> {
        [
            Origin::Typed,
            Origin::MidTurn,
            Origin::Queued,
            Origin::Heartbeat,
            Origin::Goal,
            Origin::JobNotice,
            Origin::Watch,
            Origin::SubAgent,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

/// What the engine is doing (DESIGN §3a). Every front end reads it to decide what Esc,
/// Ctrl+C, Ctrl+B and Tab do; it is sent (`Event::Phase`) whenever it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    #[default]
    Idle,
    /// A model turn runs (streaming, running tools, or waiting for an approval).
    Turn,
    /// The user's own `!command` runs.
    Shell,
    /// `/compact` is summarising the history.
    Compacting,
    /// A goal's workspace check or quality gates run at a turn boundary.
    Gates,
    /// A goal's judge is being asked.
    Judging,
    /// Nothing runs and the pause sentinel is set: nothing autonomous starts and typed
    /// messages wait (queued) until unpause. A turn running when the pause came stays `Turn`.
    Paused,
}

impl Phase {
    /// Something runs that Esc (or Ctrl+C, `/stop`) stops.
    pub fn busy(self) -> bool {
        match self {
            Phase::Turn | Phase::Shell | Phase::Compacting | Phase::Gates | Phase::Judging => true,
            Phase::Idle | Phase::Paused => false,
        }
    }

    /// Foreground commands may run (Ctrl+B moves them to the background).
    pub fn runs_commands(self) -> bool {
        match self {
            Phase::Turn | Phase::Shell => true,
            Phase::Idle | Phase::Compacting | Phase::Gates | Phase::Judging | Phase::Paused => false,
        }
    }
}

/// One message of a session as the UI shows it (on resume).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum HistoryItem {
    User {
        text: String,
        #[serde(default)]
        origin: Origin,
    },
    Assistant {
        text: String,
        reasoning: Option<String>,
    },
    Tool {
        call_id: String,
        name: String,
        summary: String,
        outcome: ToolOutcome,
        /// For a call that started a background job: what became of that job since.
        #[serde(default)]
        job: Option<JobFate>,
    },
    Notice {
        level: NoticeLevel,
        text: String,
    },
}

/// What became of the job a `terminal` call started or yielded, so a transcript never
/// shows a job that has ended as running (a resumed one above all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "fate")]
pub enum JobFate {
    Running,
    /// Killed because Talaria quit (`jobs.on_quit = kill`, or the quit dialog).
    KilledAtQuit,
    /// Talaria went away without keeping it; it was killed after `jobs.orphan_grace_s`.
    KilledOwnerGone,
    Killed,
    /// `while_away`: it ended while no Talaria was watching it (kept running at quit).
    Finished {
        code: i32,
        while_away: bool,
    },
    /// Its supervisor died or the machine restarted.
    Lost,
    /// No record is left (pruned): all that is known is that it no longer runs.
    Gone,
}

impl JobFate {
    /// The words after the job id in a transcript cell.
    pub fn describe(self) -> String {
        match self {
            JobFate::Running => "running in the background".into(),
            JobFate::KilledAtQuit => "killed when Talaria quit".into(),
            JobFate::KilledOwnerGone => "killed after Talaria went away".into(),
            JobFate::Killed => "killed".into(),
            JobFate::Finished { code, while_away: true } => format!("finished while away (exit {code})"),
            JobFate::Finished { code, while_away: false } => format!("finished (exit {code})"),
            JobFate::Lost => "lost (its supervisor is gone)".into(),
            JobFate::Gone => "no longer running".into(),
        }
    }

    /// The fate of a job that ended while this Talaria watched it.
    pub(crate) fn of_status(status: &JobStatus) -> JobFate {
        match status {
            JobStatus::Running | JobStatus::Reconnecting => JobFate::Running,
            JobStatus::Exited(code) => JobFate::Finished { code: *code, while_away: false },
            JobStatus::Killed => JobFate::Killed,
            JobStatus::Lost => JobFate::Lost,
        }
    }
}

/// Why an approval is asked (DESIGN §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AskGround {
    /// It would run outside the kernel sandbox, with the user's full permissions.
    OutsideSandbox,
    /// It is not on the known-safe allow-list of plain read-only commands.
    NotKnownSafe,
    /// The classifier recognises something destructive in it (`reason` says what).
    LooksDangerous,
    /// A file write outside the writable roots.
    OutsideRoots,
    /// A file write to a protected path (credential store, git hooks or config, talaria's files).
    ProtectedPath,
    /// An MCP server's tool that is not trusted in the config.
    UntrustedTool,
    /// A command wants a host through the network proxy (`sandbox.network = "ask"`).
    Network,
}

impl AskGround {
    /// One line for the approval modal.
    pub(crate) fn explain(self) -> &'static str {
        match self {
            AskGround::OutsideSandbox => "it would run outside the sandbox, with your full permissions",
            AskGround::NotKnownSafe => "it is not a known-safe read-only command (those run without asking)",
            AskGround::LooksDangerous => "it looks destructive",
            AskGround::OutsideRoots => "it writes outside the writable roots",
            AskGround::ProtectedPath => "it writes to a protected path",
            AskGround::UntrustedTool => "the MCP server is not marked trust = true",
            AskGround::Network => "the host is not in sandbox.network_allow (a command's connection waits for you)",
        }
    }
}

/// A job killed because Talaria stopped (exec's end, quit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KilledJob {
    pub(crate) id: JobId,
    pub(crate) command: String,
    /// The model wanted its result (waited for, polled, read or wrote to it, or it was a
    /// foreground command moved to the background): the answer depended on it.
    pub awaited: bool,
}

/// Slow-changing facts for the status line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusInfo {
    pub(crate) model: String,
    pub(crate) session_id: String,
    pub(crate) busy_mode: Option<BusyMode>,
    pub paused: bool,
    /// The session's heartbeat (shown e.g. as "♥ every 10m · next in 4m").
    pub(crate) heartbeat: Option<HeartbeatInfo>,
    /// The session's goal (shown e.g. as "goal 3/20 · gate ✓"); None without one.
    pub goal: Option<Box<GoalInfo>>,
    /// Context window use in percent, when known.
    pub(crate) context_pct: Option<u8>,
    /// The session's title, once it has one.
    #[serde(default)]
    pub(crate) title: Option<String>,
    /// The sandbox in a few characters (`sandbox`, `sandbox:ro`, `NO SANDBOX`), DESIGN §6.
    #[serde(default)]
    pub sandbox: Option<String>,
    /// A remote backend and its state (`ssh:box connected`); None when local (DESIGN §4b).
    #[serde(default)]
    pub backend: Option<String>,
}

/// Engine -> front end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum Event {
    SessionReady {
        session_id: String,
        title: Option<String>,
        model: String,
        provider: String,
        demo: bool,
        cwd: String,
        busy_mode: BusyMode,
        /// The end of the session (a long one is not sent whole).
        history: Vec<HistoryItem>,
        /// Messages typed earlier in this working directory, oldest first (↑ recalls them).
        input_history: Vec<String>,
        /// Older history exists: `Op::LoadEarlier { before: this }` asks for it.
        #[serde(default)]
        earlier: Option<i64>,
    },
    /// A page of history before what the transcript has (answers `Op::LoadEarlier`).
    EarlierHistory {
        items: Vec<HistoryItem>,
        /// Still older history exists: `Op::LoadEarlier { before: this }`.
        earlier: Option<i64>,
    },
    TurnStarted {
        trigger: TurnTrigger,
    },
    /// A user-role message reached the model's context (submitted, delivered mid-turn,
    /// or injected by a heartbeat / goal / job notification).
    UserMessage {
        text: String,
        trigger: TurnTrigger,
        #[serde(default)]
        origin: Origin,
        /// Where it is stored: `Op::LoadEarlier { before: seq }` reads what came before it
        /// (a front end that lets go of older cells reads them back so).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<i64>,
    },
    /// Messages typed while busy (or paused) that have not reached the model yet:
    /// `pending` for the running turn's next delivery point, `queued` for turns of their own.
    PendingChanged {
        pending: Vec<String>,
        #[serde(default)]
        queued: Vec<String>,
    },
    /// The engine's phase changed (DESIGN §3a).
    Phase {
        phase: Phase,
    },
    /// Text the front end should put back into its input box (after an interrupt).
    RestoreInput {
        text: String,
    },
    AssistantDelta(String),
    ReasoningDelta(String),
    AssistantDone {
        text: String,
        reasoning: Option<String>,
    },
    ToolStarted {
        call_id: String,
        name: String,
        summary: String,
    },
    ToolOutput {
        call_id: String,
        chunk: String,
    },
    ToolFinished {
        call_id: String,
        outcome: ToolOutcome,
    },
    ApprovalNeeded {
        id: u64,
        /// Exactly what would run (raw: the front end reveals hidden characters).
        command: String,
        /// What it looks like or where it writes, in words.
        reason: String,
        /// Why it asks rather than runs (the modal lists each).
        #[serde(default)]
        grounds: Vec<AskGround>,
        /// Who asks: a sub-agent's name (`agent_3`), or None for this session's own agent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
    },
    JobStarted {
        job: JobInfo,
    },
    JobUpdated {
        id: JobId,
        status: JobStatus,
        tail: String,
    },
    JobFinished {
        id: JobId,
        status: JobStatus,
    },
    /// A sub-agent's state, last activity or spend changed (DESIGN §14).
    AgentUpdated {
        id: JobId,
        /// Boxed: the other events stay small.
        agent: Box<agent::AgentInfo>,
    },
    /// A window of a job's log. `first_line`: where the kept log starts; `from`..=`to`:
    /// the lines of the log (as written, newline-counted) this window covers — the text is
    /// raw, and once a terminal shows it (redraws applied) it can be fewer lines.
    JobLog {
        id: JobId,
        text: String,
        first_line: u64,
        total_lines: u64,
        #[serde(default)]
        from: u64,
        #[serde(default)]
        to: u64,
    },
    /// A line of a job matched a watch the user set (`w` in the log view). `more`:
    /// matches folded into this one by the cooldown; `ended`: the watch reached its cap.
    WatchMatched {
        id: JobId,
        pattern: String,
        line: String,
        more: u64,
        ended: bool,
    },
    /// The patterns the user watches on a job now (after a change).
    JobWatches {
        id: JobId,
        patterns: Vec<String>,
    },
    TurnFinished {
        outcome: TurnOutcome,
    },
    Notice {
        level: NoticeLevel,
        text: String,
    },
    /// `/mcp` (`tools`: `/mcp tools`, each server's tools listed too).
    McpStatus {
        servers: Vec<McpServerInfo>,
        tools: bool,
    },
    /// `/jobs`: the session's background jobs.
    JobList {
        jobs: Vec<JobInfo>,
    },
    /// What turn `turn` (as `talaria rewind list` numbers it) changed in the workspace.
    TurnChanges {
        turn: usize,
        paths: Vec<rewind::ChangedPath>,
    },
    /// `/rewind`: the points to go back to, newest first, and what to warn about.
    RewindPoints {
        points: Vec<rewind::RewindPoint>,
        warnings: Vec<String>,
    },
    /// `/rewind <n> <mode>`: what it would do, waiting for one confirmation.
    RewindPreview(rewind::RewindPreview),
    /// `/diff [n]`: a unified diff of what a turn (or the session) changed.
    Diff {
        title: String,
        text: String,
    },
    /// `/sessions`, or the sessions a `/resume <words>` matched (`matching`: the words).
    SessionList {
        sessions: Vec<SessionInfo>,
        #[serde(default)]
        matching: Option<String>,
    },
    /// `/heartbeat status`: the session's heartbeat, if it has one.
    HeartbeatStatus {
        heartbeat: Option<HeartbeatInfo>,
    },
    /// `/goal status` (or only its gates: `/goal gate list`).
    GoalStatus {
        goal: Option<Box<GoalInfo>>,
        gates_only: bool,
    },
    Status(StatusInfo),
    /// Tokens of one model call; `prompt_tokens` includes the cache reads and writes.
    Usage {
        prompt_tokens: u64,
        completion_tokens: u64,
        #[serde(default)]
        cache_read_tokens: u64,
        #[serde(default)]
        cache_write_tokens: u64,
        /// Of `cache_write_tokens`, those written with the 1-hour lifetime.
        #[serde(default)]
        cache_write_1h_tokens: u64,
        /// Dollars, when the price table knows the model.
        #[serde(default)]
        cost_usd: Option<f64>,
    },
    /// How full the model's context is: `label` is e.g. `ctx 42%`.
    Context {
        label: String,
        percent: Option<u8>,
    },
    /// `/resume` matched several sessions: the user picks one (`Op::Command(Resume(id))`).
    SessionChoices {
        query: String,
        sessions: Vec<SessionInfo>,
    },
    /// Shutting down killed these running jobs (not sent when none were killed).
    JobsKilled {
        jobs: Vec<KilledJob>,
    },
    /// A connection through the session's network proxy ended or was refused (DESIGN §6b).
    NetworkConnection(network::Connection),
    /// The engine has finished shutting down; nothing follows.
    ShutdownComplete,
}

impl Event {
    /// A `Usage` event's tokens and dollars (every front end adds them up the same way).
    pub(crate) fn spent(&self) -> Option<(usage::Usage, Option<f64>)> {
        let Event::Usage {
            prompt_tokens,
            completion_tokens,
            cache_read_tokens,
            cache_write_tokens,
            cache_write_1h_tokens,
            cost_usd,
        } = self
        else {
            return None;
        };
        let tokens = usage::Usage {
            prompt_tokens: *prompt_tokens,
            completion_tokens: *completion_tokens,
            cache_read_tokens: *cache_read_tokens,
            cache_write_tokens: *cache_write_tokens,
            cache_write_1h_tokens: *cache_write_1h_tokens,
        };
        Some((tokens, *cost_usd))
    }

    pub(crate) fn notice(level: NoticeLevel, text: impl Into<String>) -> Event {
        Event::Notice { level, text: text.into() }
    }
}
