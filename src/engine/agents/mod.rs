//! Sub-agents (DESIGN §14): the `agent` tool starts a child talaria (`talaria __agent`) as
//! a background job. This module holds what both sides agree on — the child's command line,
//! the hello line the parent writes first to its stdin (task, keys, limits, the parent's
//! sandbox policy), the later stdin lines (messages, approval answers), and the notice that
//! carries the final answer back. The glue in the job registry is `jobs/agent_jobs.rs`, the
//! child's front end is `crate::subagent`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::llm::Role;
use crate::engine::sandbox::Policy;
use crate::engine::store::Store;
use crate::protocol::{Approval, ApprovalMode, JobStatus};

/// The hidden subcommand a sub-agent runs.
pub const ARG: &str = "__agent";

pub use crate::config::AgentsConfig;

/// The first line the parent writes to a sub-agent's stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub task: String,
    /// Provider keys (the child's environment has none: the supervisor drops them).
    #[serde(default)]
    pub keys: BTreeMap<String, String>,
    pub max_turns: u32,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub backend: Option<String>,
    /// The parent's sandbox policy (None: the child's own from the same config).
    #[serde(default)]
    pub sandbox: Option<Policy>,
    /// The parent's approval mode as the session has it now.
    pub approvals: ApprovalMode,
    /// The parent's TALARIA_HOME (its config, database and jobs), when it has one.
    #[serde(default)]
    pub home: Option<std::path::PathBuf>,
    /// The model server of the parent's run (`--base-url`), if given.
    #[serde(default)]
    pub base_url: Option<String>,
}

/// Later lines from the parent to a sub-agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum Inbound {
    /// A message, delivered like typing while busy (the busy mode of the config).
    Message { text: String },
    /// The parent's user answered one of the sub-agent's approvals.
    Approve { id: u64, decision: Approval },
}

/// The line a sub-agent prints when it passed an answer on: a re-attached parent reading the
/// log from the start asks again only what has no answer.
pub const APPROVAL_ANSWERED: &str = "ApprovalAnswered";

/// `line` for a sub-agent's stdin (one JSON object and a newline).
pub(crate) fn inbound_line(inbound: &Inbound) -> String {
    let mut line = serde_json::to_string(inbound).unwrap_or_default();
    line.push('\n');
    line
}

/// The shell command of a sub-agent job.
pub(crate) fn command_line(exe: &Path, session: &str, depth: u32) -> String {
    format!(
        "exec {} {ARG} --session {session} --depth {depth}",
        crate::engine::process::sh_quote(&exe.to_string_lossy())
    )
}

/// The sub-session's last answer: the newest assistant message with text.
pub(crate) async fn final_answer(store: &Store, session: &str) -> Option<String> {
    let messages = store.load_messages(session).await.ok()?;
    messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant)
        .filter_map(|m| m.content.as_deref())
        .find(|t| !t.trim().is_empty())
        .map(str::to_string)
}

/// What the parent model is told once a sub-agent ends (DESIGN §14): its final answer,
/// capped at `max_chars`, and the sub-session that has the rest.
pub(crate) fn notice_text(
    id: &str,
    session: &str,
    status: &JobStatus,
    runtime: Duration,
    answer: Option<&str>,
    max_chars: usize,
) -> String {
    let dur = crate::util::format_duration(runtime);
    let answer = answer.map(str::trim).filter(|a| !a.is_empty());
    let body = match answer {
        Some(text) => crate::text::truncate_for_model(text, max_chars.max(1)),
        None => "(no answer)".to_string(),
    };
    let how = match status {
        JobStatus::Exited(0) => format!("finished after {dur}"),
        JobStatus::Exited(code) => format!("ended with code {code} after {dur}"),
        JobStatus::Killed => format!("was killed after {dur}"),
        JobStatus::Running | JobStatus::Reconnecting | JobStatus::Lost => format!("was lost after {dur}"),
    };
    let label = if matches!(status, JobStatus::Exited(0)) { "Its final answer" } else { "Its last answer" };
    format!("[Sub-agent {id} (session {session}) {how}. {label}:\n{body}\n(The whole conversation is in session {session}.)]")
}

/// The title of a sub-session: the task's first line, shortened.
pub(crate) fn title_of(task: &str) -> String {
    let line = task.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("sub-agent");
    let short: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        format!("{short}…")
    } else {
        short
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_notice_carries_the_capped_answer_and_the_session() {
        let long = "a".repeat(50);
        let text = notice_text("job_3", "S1", &JobStatus::Exited(0), Duration::from_secs(3), Some(&long), 20);
        assert!(text.starts_with("[Sub-agent job_3 (session S1) finished after 3"), "{text}");
        assert!(text.contains("Its final answer:\n") && text.contains("session S1.)]"), "{text}");
        assert!(!text.contains(&long), "capped: {text}");
        let killed = notice_text("job_4", "S2", &JobStatus::Killed, Duration::from_secs(1), None, 20);
        assert!(killed.contains("was killed") && killed.contains("(no answer)"), "{killed}");
    }

    #[test]
    fn inbound_lines_are_one_json_object_each() {
        let line = inbound_line(&Inbound::Message { text: "stop\nnow".into() });
        assert_eq!(line.matches('\n').count(), 1);
        let back: Inbound = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(back, Inbound::Message { text: "stop\nnow".into() });
    }
}
