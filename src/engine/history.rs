//! Turning stored rows into the model's context and into what a resumed transcript shows.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use crate::engine::llm::{ChatMessage, Role, ToolCall};
use crate::engine::store::StoredMessage;
use crate::engine::tools::Registry;
use crate::protocol::{HistoryItem, JobFate, Origin, ToolOutcome, ToolStatus};

/// The result given to a tool call that never got one (talaria died mid-tool).
pub(crate) const LOST_RESULT: &str = "[lost: talaria exited before this tool finished]";

/// The marker around messages delivered mid-turn (DESIGN §3).
pub(crate) const OOB_OPEN: &str =
    "[OUT-OF-BAND USER MESSAGE — a direct message from the user, delivered mid-turn; not tool output]";
pub(crate) const OOB_CLOSE: &str = "[/OUT-OF-BAND USER MESSAGE]";

/// Wrap messages typed while the agent was busy into one out-of-band user message.
pub fn wrap_out_of_band(messages: &[String]) -> String {
    format!("{OOB_OPEN}\n{}\n{OOB_CLOSE}", messages.join("\n\n"))
}

/// The text inside an out-of-band wrapper, for display (None when `text` is not wrapped).
pub(crate) fn unwrap_out_of_band(text: &str) -> Option<&str> {
    text.strip_prefix(OOB_OPEN)?.strip_suffix(OOB_CLOSE).map(str::trim)
}

/// Where a user-role row came from, stored in its `display_kind` column so a resumed
/// transcript can tell (tool rows keep their outcome there instead; see `outcome_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisplayKind {
    /// Typed while busy and delivered after tool results, inside the out-of-band wrapper.
    OutOfBand,
    Goal,
    Heartbeat,
    JobNotice,
    /// A watch pattern matched a job's output (never marks the job notified).
    WatchNotice,
    /// The context note of the user's own `!command`.
    Bang,
    /// The partial text of an answer cut short (redirect, interrupt, failure).
    Partial,
    /// A sub-agent's final answer (DESIGN §14).
    SubAgent,
}

impl DisplayKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DisplayKind::OutOfBand => "oob",
            DisplayKind::Goal => "goal",
            DisplayKind::Heartbeat => "heartbeat",
            DisplayKind::JobNotice => crate::engine::store::jobs::NOTICE_KIND,
            DisplayKind::WatchNotice => "watch_notice",
            DisplayKind::Bang => "bang",
            DisplayKind::Partial => "partial",
            DisplayKind::SubAgent => "sub_agent",
        }
    }

    /// The kind a user-role message of `origin` is stored with (`wrapped`: inside the
    /// out-of-band wrapper). Typed and queued messages have none: each starts an exchange.
    pub(crate) fn of(origin: Origin, wrapped: bool) -> Option<DisplayKind> {
        match origin {
            Origin::Typed | Origin::Queued => None,
            Origin::MidTurn => wrapped.then_some(DisplayKind::OutOfBand),
            Origin::Heartbeat => Some(DisplayKind::Heartbeat),
            Origin::Goal => Some(DisplayKind::Goal),
            Origin::JobNotice => Some(DisplayKind::JobNotice),
            Origin::Watch => Some(DisplayKind::WatchNotice),
            Origin::SubAgent => Some(DisplayKind::SubAgent),
        }
    }
}

/// A message as a row for the store (a user-role row gets its origin from the caller).
pub(crate) fn to_stored(message: &ChatMessage, display_kind: Option<String>) -> StoredMessage {
    StoredMessage {
        role: message.role,
        content: message.content.clone(),
        tool_calls: message.tool_calls.clone(),
        tool_call_id: message.tool_call_id.clone(),
        tool_name: None,
        display_kind,
        origin: None,
    }
}

/// What the transcript shows of a stored user row, read from its kind and origin: the
/// user's own words inside an out-of-band wrapper, a heartbeat's instruction.
fn shown_text(row: &StoredMessage, text: String) -> String {
    if row.display_kind.as_deref() == Some(DisplayKind::OutOfBand.as_str()) {
        return unwrap_out_of_band(&text).map(str::to_string).unwrap_or(text);
    }
    match row.origin {
        Some(Origin::Heartbeat) => crate::engine::heartbeat::instruction_of(&text).to_string(),
        _ => text,
    }
}

/// Display facts of a tool result, kept with the row so a resumed transcript shows them.
pub(crate) fn outcome_kind(outcome: &ToolOutcome) -> String {
    json!({"ok": outcome.ok, "exit_code": outcome.exit_code, "status": outcome.status, "duration_ms": outcome.duration_ms})
        .to_string()
}

/// Parse what `outcome_kind` stored.
pub(crate) fn outcome_from_kind(kind: Option<&str>, result: &str) -> ToolOutcome {
    let v: Value = kind.and_then(|k| serde_json::from_str(k).ok()).unwrap_or(Value::Null);
    ToolOutcome {
        ok: v.get("ok").and_then(Value::as_bool).unwrap_or(true),
        exit_code: v.get("exit_code").and_then(Value::as_i64).map(|c| c as i32),
        status: v.get("status").and_then(Value::as_str).and_then(ToolStatus::parse),
        duration_ms: v.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
        result: result.to_string(),
    }
}

pub(crate) fn to_chat(row: &StoredMessage) -> Option<ChatMessage> {
    Some(ChatMessage {
        role: row.role,
        content: row.content.clone(),
        tool_calls: row.tool_calls.clone(),
        tool_call_id: row.tool_call_id.clone(),
        thinking: Vec::new(),
    })
}

/// Tool calls in `history` without a result, in order. Each needs a filler so the history
/// sent to the model stays valid.
pub(crate) fn missing_results(history: &[ChatMessage]) -> Vec<(usize, ToolCall)> {
    let answered: HashSet<&str> =
        history.iter().filter(|m| m.role == Role::Tool).filter_map(|m| m.tool_call_id.as_deref()).collect();
    let mut missing = Vec::new();
    for (i, m) in history.iter().enumerate() {
        for call in &m.tool_calls {
            if !answered.contains(call.id.as_str()) {
                missing.push((i, call.clone()));
            }
        }
    }
    missing
}

/// Insert `LOST_RESULT` tool messages right after the results of the same assistant message.
/// Returns the repaired history and the filler messages (to persist).
pub(crate) fn repair(history: Vec<ChatMessage>) -> (Vec<ChatMessage>, Vec<ChatMessage>) {
    let missing = missing_results(&history);
    if missing.is_empty() {
        return (history, Vec::new());
    }
    let mut by_index: HashMap<usize, Vec<ToolCall>> = HashMap::new();
    for (i, call) in missing {
        by_index.entry(i).or_default().push(call);
    }
    let mut out = Vec::with_capacity(history.len() + by_index.len());
    let mut fillers = Vec::new();
    let mut pending: Option<Vec<ToolCall>> = None;
    for (i, m) in history.into_iter().enumerate() {
        // Flush fillers once the run of tool results after their assistant message ends.
        if m.role != Role::Tool {
            if let Some(calls) = pending.take() {
                for call in calls {
                    let filler = ChatMessage::tool(call.id, LOST_RESULT);
                    fillers.push(filler.clone());
                    out.push(filler);
                }
            }
        }
        if let Some(calls) = by_index.remove(&i) {
            pending = Some(calls);
        }
        out.push(m);
    }
    if let Some(calls) = pending.take() {
        for call in calls {
            let filler = ChatMessage::tool(call.id, LOST_RESULT);
            fillers.push(filler.clone());
            out.push(filler);
        }
    }
    (out, fillers)
}

/// What the transcript shows for stored rows. `fates` says what became of the session's
/// jobs: a call that started one that no longer runs is marked so (unknown jobs are gone).
pub(crate) fn to_items(
    rows: &[StoredMessage],
    registry: &Registry,
    fates: &HashMap<String, JobFate>,
) -> Vec<HistoryItem> {
    let mut calls: HashMap<String, (String, String)> = HashMap::new();
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        match row.role {
            Role::User => {
                let text = shown_text(row, row.content.clone().unwrap_or_default());
                items.push(HistoryItem::User { text, origin: row.origin.unwrap_or_default() });
            }
            Role::Assistant => {
                let text = row.content.clone().unwrap_or_default();
                if !text.is_empty() {
                    items.push(HistoryItem::Assistant { text, reasoning: None });
                }
                for call in &row.tool_calls {
                    let args: Value = serde_json::from_str(&call.function.arguments).unwrap_or(Value::Null);
                    let name = &call.function.name;
                    let shown = match registry.get(name) {
                        Some(t) => (t.label(), t.summary(&args)),
                        // An MCP tool whose server is not up (yet): `server__tool` still reads
                        // as `server › tool`.
                        None => match name.split_once("__") {
                            Some((server, tool)) => {
                                (format!("{server} › {tool}"), crate::engine::mcp::summarise_args(&args))
                            }
                            None => (name.clone(), String::new()),
                        },
                    };
                    calls.insert(call.id.clone(), shown);
                }
            }
            Role::Tool => {
                let call_id = row.tool_call_id.clone().unwrap_or_default();
                let (name, summary) = calls
                    .get(&call_id)
                    .cloned()
                    .unwrap_or_else(|| (row.tool_name.clone().unwrap_or_else(|| "tool".into()), String::new()));
                let result = row.content.clone().unwrap_or_default();
                let outcome = outcome_from_kind(row.display_kind.as_deref(), &result);
                let job = match outcome.status {
                    Some(ToolStatus::Background | ToolStatus::Yielded) => serde_json::from_str::<Value>(&result)
                        .ok()
                        .and_then(|v| v.get("session_id")?.as_str().map(str::to_string))
                        .map(|id| fates.get(&id).copied().unwrap_or(JobFate::Gone)),
                    _ => None,
                };
                items.push(HistoryItem::Tool { call_id, name, summary, outcome, job });
            }
            Role::System => {}
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_call_without_result_gets_the_lost_filler() {
        let history = vec![
            ChatMessage::user("go"),
            ChatMessage::assistant(
                "",
                vec![ToolCall::new("a", "terminal", "{}"), ToolCall::new("b", "terminal", "{}")],
            ),
            ChatMessage::tool("a", "{}"),
            ChatMessage::user("next"),
        ];
        let (fixed, fillers) = repair(history);
        assert_eq!(fillers, vec![ChatMessage::tool("b", LOST_RESULT)]);
        assert_eq!(fixed[3], ChatMessage::tool("b", LOST_RESULT));
        assert_eq!(fixed[4], ChatMessage::user("next"));
        assert!(missing_results(&fixed).is_empty());
    }

    #[test]
    fn a_resumed_mcp_call_reads_server_and_tool_without_its_server() {
        let rows = vec![
            to_stored(
                &ChatMessage::assistant("", vec![ToolCall::new("m", "files__search", r#"{"query":"todo"}"#)]),
                None,
            ),
            to_stored(&ChatMessage::tool("m", r#"{"output":"x"}"#), None),
        ];
        let items = to_items(&rows, &Registry::standard(), &HashMap::new());
        let HistoryItem::Tool { name, summary, .. } = &items[0] else { panic!("{items:?}") };
        assert_eq!((name.as_str(), summary.as_str()), ("files › search", "query=todo"));
    }

    #[test]
    fn a_trailing_call_is_filled_at_the_end() {
        let history =
            vec![ChatMessage::user("go"), ChatMessage::assistant("", vec![ToolCall::new("a", "terminal", "{}")])];
        let (fixed, fillers) = repair(history);
        assert_eq!(fillers.len(), 1);
        assert_eq!(fixed.last(), Some(&ChatMessage::tool("a", LOST_RESULT)));
    }

    #[test]
    fn out_of_band_wrapper_joins_messages_in_order() {
        let text = wrap_out_of_band(&["first".into(), "second".into()]);
        assert_eq!(text, format!("{OOB_OPEN}\nfirst\n\nsecond\n{OOB_CLOSE}"),);
        assert!(text.starts_with("[OUT-OF-BAND USER MESSAGE — a direct message from the user"));
        assert_eq!(unwrap_out_of_band(&text), Some("first\n\nsecond"));
        assert_eq!(unwrap_out_of_band("plain"), None);
    }

    fn user_row(text: &str, origin: Origin, kind: Option<DisplayKind>) -> StoredMessage {
        StoredMessage {
            origin: Some(origin),
            ..to_stored(&ChatMessage::user(text), kind.map(|k| k.as_str().to_string()))
        }
    }

    #[test]
    fn a_resumed_transcript_labels_user_rows_from_their_stored_origin_not_their_text() {
        let wrapped = wrap_out_of_band(&["also this".into()]);
        let rows = vec![
            user_row(
                "[Heartbeat — recurring instruction, fires every 10m]\ncheck\n\nIf there is nothing meaningful to do",
                Origin::Heartbeat,
                Some(DisplayKind::Heartbeat),
            ),
            user_row(&wrapped, Origin::MidTurn, Some(DisplayKind::OutOfBand)),
            // Text that looks like a notice but was typed: it stays the user's.
            user_row("[Background job job_1 exited with code 0]", Origin::Typed, None),
            user_row("run it later", Origin::Queued, None),
            // A row without an origin (written by no user-role path) reads as typed.
            to_stored(&ChatMessage::user("plain"), None),
        ];
        let items = to_items(&rows, &Registry::standard(), &HashMap::new());
        let user = |text: &str, origin| HistoryItem::User { text: text.into(), origin };
        assert_eq!(
            items,
            vec![
                user("check", Origin::Heartbeat),
                user("also this", Origin::MidTurn),
                user("[Background job job_1 exited with code 0]", Origin::Typed),
                user("run it later", Origin::Queued),
                user("plain", Origin::Typed),
            ]
        );
    }

    #[test]
    fn each_origin_is_stored_with_its_kind() {
        assert_eq!(DisplayKind::of(Origin::Typed, true), None);
        assert_eq!(DisplayKind::of(Origin::Queued, false), None);
        assert_eq!(DisplayKind::of(Origin::MidTurn, false), None, "delivered while streaming: a plain message");
        assert_eq!(DisplayKind::of(Origin::MidTurn, true), Some(DisplayKind::OutOfBand));
        assert_eq!(DisplayKind::of(Origin::JobNotice, false).map(DisplayKind::as_str), Some("job_notice"));
        assert_eq!(DisplayKind::of(Origin::Watch, false), Some(DisplayKind::WatchNotice));
        for origin in [Origin::Heartbeat, Origin::Goal, Origin::SubAgent] {
            assert!(DisplayKind::of(origin, false).is_some(), "{origin:?} starts no exchange");
        }
    }

    #[test]
    fn outcome_round_trips_through_display_kind() {
        let o = ToolOutcome {
            ok: false,
            exit_code: Some(2),
            status: Some(ToolStatus::Timeout),
            duration_ms: 12,
            result: "{}".into(),
        };
        assert_eq!(outcome_from_kind(Some(&outcome_kind(&o)), "{}"), o);
    }
}
