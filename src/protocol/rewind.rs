//! What rewind (DESIGN §13) tells a front end: each turn's changed paths, the points
//! `/rewind` offers, what a rewind would do, and `/diff`.

use serde::{Deserialize, Serialize};

/// What a rewind puts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewindMode {
    Code,
    Conversation,
    Both,
}

impl RewindMode {
    pub fn restores_code(self) -> bool {
        matches!(self, RewindMode::Code | RewindMode::Both)
    }
    pub fn restores_conversation(self) -> bool {
        matches!(self, RewindMode::Conversation | RewindMode::Both)
    }
    /// As the user types it (`/rewind 2 code`).
    pub fn as_str(self) -> &'static str {
        match self {
            RewindMode::Code => "code",
            RewindMode::Conversation => "conversation",
            RewindMode::Both => "both",
        }
    }
    pub fn parse(word: &str) -> Option<RewindMode> {
        match word {
            "code" => Some(RewindMode::Code),
            "conversation" | "chat" => Some(RewindMode::Conversation),
            "both" => Some(RewindMode::Both),
            _ => None,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            RewindMode::Code => "code",
            RewindMode::Conversation => "conversation",
            RewindMode::Both => "code and conversation",
        }
    }
}

/// `/rewind [n] [code|conversation|both] [--yes] [--all]`: no `n` opens the picker; without
/// `--yes` it shows what it would do and waits for the confirmation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindCmd {
    pub target: Option<usize>,
    pub mode: RewindMode,
    pub yes: bool,
    /// Put back the paths the user changed since, too.
    pub include_user: bool,
}

/// `/diff [n|session]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DiffTarget {
    Last,
    Turn(usize),
    Session,
}

/// One path a turn changed, with its line counts (None for a binary file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedPath {
    pub path: String,
    /// `added`, `modified` or `deleted`.
    pub kind: String,
    pub added: Option<u64>,
    pub removed: Option<u64>,
}

/// A point `/rewind` can go back to: before entry `number`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindPoint {
    pub number: usize,
    /// The user's message (or what started the turn; a rewind says what it rewound).
    pub label: String,
    pub paths: Vec<ChangedPath>,
    /// Whether going back to it can restore the conversation too.
    pub conversation: bool,
}

/// What a rewind would do, for the one confirmation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindPreview {
    pub number: usize,
    /// `code`, `conversation` or `both`.
    pub mode: String,
    /// `restore a.txt`, `remove d/e.txt`, `bring back c.txt`.
    pub steps: Vec<String>,
    /// Paths the user changed since: shown and kept.
    pub kept: Vec<String>,
    /// Said before confirming (a job still running, a remote backend).
    pub warnings: Vec<String>,
    /// The user's paths go back too (`--all`): the confirmation repeats it.
    #[serde(default)]
    pub include_user: bool,
}

impl RewindCmd {
    /// `/rewind` with no point: the picker.
    pub fn picker() -> RewindCmd {
        RewindCmd { target: None, mode: RewindMode::Both, yes: false, include_user: false }
    }
}

impl ChangedPath {
    /// `a.txt +3 −1` (or `binary`), with what happened to it.
    pub fn line(&self) -> String {
        let counts = match (self.added, self.removed) {
            (Some(a), Some(r)) => format!("+{a} −{r}"),
            _ => "binary".to_string(),
        };
        format!("{} {} ({counts})", self.kind, self.path)
    }
}

/// The text front ends without a picker print for each event.
pub fn changes_text(turn: usize, paths: &[ChangedPath]) -> String {
    let list: Vec<String> = paths.iter().map(ChangedPath::line).collect();
    format!("turn {turn} changed {} path{}: {}", paths.len(), if paths.len() == 1 { "" } else { "s" }, list.join(", "))
}

pub fn points_text(points: &[RewindPoint], warnings: &[String]) -> String {
    let mut out: Vec<String> = warnings.iter().map(|w| format!("warning: {w}")).collect();
    if points.is_empty() {
        out.push("nothing to rewind yet: no turn of this session has a snapshot".into());
    }
    for p in points {
        let files: Vec<String> = p.paths.iter().map(ChangedPath::line).collect();
        let files = if files.is_empty() { "no files changed".to_string() } else { files.join(", ") };
        out.push(format!("{:>3}  {}  — {files}", p.number, p.label));
    }
    out.join("\n")
}

pub fn preview_text(p: &RewindPreview) -> String {
    let mut out: Vec<String> = p.warnings.iter().map(|w| format!("warning: {w}")).collect();
    out.push(format!("rewind to before {} ({}):", p.number, p.mode));
    if p.steps.is_empty() {
        out.push("  no file to put back".into());
    }
    out.extend(p.steps.iter().map(|s| format!("  {s}")));
    if !p.kept.is_empty() {
        out.push("kept as you changed them since (--all puts them back too):".into());
        out.extend(p.kept.iter().map(|k| format!("  {k}")));
    }
    out.join("\n")
}
