//! What the engine reports as data for the front ends to format: saved sessions, the
//! heartbeat and the goal (`/sessions`, `/heartbeat status`, `/goal status`, the status line).
//! Plain-text forms shared by the front ends are in `crate::present`.

use serde::{Deserialize, Serialize};

/// One saved session in a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub id: String,
    pub(crate) title: Option<String>,
    /// Active messages.
    pub message_count: u64,
    /// First line of the first typed user message ("" when there is none).
    pub first_line: String,
    /// Unix milliseconds of the last activity (0 when unknown).
    #[serde(default)]
    pub(crate) updated_at_ms: i64,
}

/// A session's heartbeat (DESIGN §5) as of the moment it was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatInfo {
    pub prompt: String,
    pub interval_s: u64,
    pub paused: bool,
    /// Milliseconds until the next fire when the event was sent (0: due); None while paused.
    pub next_in_ms: Option<u64>,
    pub(crate) fire_count: u64,
    /// Unix milliseconds of the last fire.
    pub(crate) last_fired_at_ms: Option<u64>,
}

/// Where a goal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum GoalState {
    Active,
    Paused,
    Achieved,
    /// No goal is set (never, or cleared); its gates wait for the next `/goal <text>`.
    Unset,
}

/// A session's goal and its gates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalInfo {
    pub(crate) text: String,
    pub(crate) state: GoalState,
    pub(crate) turns_used: u32,
    pub(crate) max_turns: u32,
    pub(crate) pause_reason: Option<String>,
    /// The judge's last verdict and reason.
    pub(crate) last_verdict: Option<String>,
    pub(crate) gates: Vec<GateInfo>,
    /// Failed attempts a gate gets before the goal pauses.
    pub(crate) gate_max_retries: u32,
    /// The gate running now (an index into `gates`).
    pub(crate) running_gate: Option<usize>,
}

/// A quality gate: a shell command that must exit 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GateInfo {
    pub(crate) cmd: String,
    /// Failed attempts since it last passed.
    pub(crate) attempts: u32,
    pub(crate) last: Option<GateRun>,
}

/// How a gate's last run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GateRun {
    pub(crate) passed: bool,
    pub(crate) timed_out: bool,
    pub(crate) exit_code: i32,
}

/// Where an MCP server is (DESIGN §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum McpState {
    /// `enabled = false`.
    Disabled,
    /// Configured; waits for the front end's first frame.
    Waiting,
    Starting,
    Ready,
    /// Connected, but a call timed out and a ping got no answer either (a hung server);
    /// calls still go to it, and an answer to one, or to a later ping, makes it ready.
    Unresponsive,
    /// Did not start, exited, or its connection closed; `last_error` says why.
    Failed,
}

impl McpState {
    pub(crate) fn label(self) -> &'static str {
        match self {
            McpState::Disabled => "disabled",
            McpState::Waiting => "waiting",
            McpState::Starting => "starting",
            McpState::Ready => "ready",
            McpState::Unresponsive => "unresponsive",
            McpState::Failed => "failed",
        }
    }
}

/// One MCP tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct McpToolInfo {
    /// `<server>__<tool>`, the name offered to the model.
    pub(crate) exposed: String,
    pub(crate) description: String,
}

/// One configured MCP server (`/mcp`, `talaria mcp list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerInfo {
    pub(crate) name: String,
    /// `stdio: <command line>` or `http: <url>`.
    pub(crate) transport: String,
    pub(crate) state: McpState,
    pub(crate) tools: Vec<McpToolInfo>,
    pub(crate) last_error: Option<String>,
}
