//! ACP `session/update` payloads built from Talaria's protocol types, as JSON (the SDK's
//! schema types are made from it at the edge). Pure: no I/O, no state.
//!
//! What ACP has no word for — background jobs, their exit notices, watch matches, why a
//! turn started — goes out as readable text with a `_meta.talaria` object beside it, so a
//! client that knows the fields can show a jobs list and one that does not still reads it.

use serde_json::{json, Value};

use crate::protocol::commands::COMMANDS;
use crate::protocol::{HistoryItem, JobInfo, JobStatus, NoticeLevel, Origin, ToolOutcome, ToolStatus, TurnTrigger};

/// `_meta` of an update: `{"talaria": inner}`.
pub(crate) fn meta(inner: Value) -> Value {
    json!({ "talaria": inner })
}

fn text_block(text: &str) -> Value {
    json!({ "type": "text", "text": text })
}

pub(crate) fn agent_text(text: &str) -> Value {
    json!({ "sessionUpdate": "agent_message_chunk", "content": text_block(text) })
}

pub(crate) fn agent_thought(text: &str) -> Value {
    json!({ "sessionUpdate": "agent_thought_chunk", "content": text_block(text) })
}

pub(crate) fn user_text(text: &str) -> Value {
    json!({ "sessionUpdate": "user_message_chunk", "content": text_block(text) })
}

/// Agent text that carries Talaria fields: set apart on its own lines.
pub(crate) fn agent_note(text: &str, talaria: Value) -> Value {
    let mut update = agent_text(&format!("\n{text}\n"));
    update["_meta"] = meta(talaria);
    update
}

/// What ACP calls the kind of a Talaria tool (it picks the client's icon).
pub(crate) fn tool_kind(name: &str) -> &'static str {
    match name {
        "terminal" => "execute",
        "read_file" => "read",
        "write_file" | "edit_file" => "edit",
        "search_files" => "search",
        _ => "other",
    }
}

pub(crate) fn tool_call(call_id: &str, name: &str, summary: &str) -> Value {
    json!({
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": title(name, summary),
        "kind": tool_kind(name),
        "status": "in_progress",
        "_meta": meta(json!({ "tool": name })),
    })
}

fn title(name: &str, summary: &str) -> String {
    if summary.trim().is_empty() {
        name.to_string()
    } else {
        summary.to_string()
    }
}

/// A running command's output so far (ACP content replaces, it does not append).
pub(crate) fn tool_output(call_id: &str, output: &str) -> Value {
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "content": [{ "type": "content", "content": text_block(output) }],
    })
}

/// A finished tool call: its status, what it printed (or the result the model read), and
/// the result as JSON in `rawOutput`. A command moved to the background ends `completed`
/// with the job named in `_meta.talaria`.
pub(crate) fn tool_finished(call_id: &str, output: &str, outcome: &ToolOutcome) -> Value {
    let raw: Value = serde_json::from_str(&outcome.result).unwrap_or_else(|_| Value::String(outcome.result.clone()));
    let moved = matches!(outcome.status, Some(ToolStatus::Yielded | ToolStatus::Background));
    let status = if outcome.ok || moved { "completed" } else { "failed" };
    let shown = if output.trim().is_empty() { outcome.result.as_str() } else { output };
    let mut talaria = json!({
        "exitCode": outcome.exit_code,
        "status": outcome.status.map(ToolStatus::as_str),
        "durationMs": outcome.duration_ms,
    });
    if let Some(job) = raw.get("session_id").and_then(Value::as_str).filter(|_| moved) {
        talaria["job"] = json!(job);
    }
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": status,
        "content": [{ "type": "content", "content": text_block(shown) }],
        "rawOutput": raw,
        "_meta": meta(talaria),
    })
}

fn job_fields(job: &JobInfo) -> Value {
    json!({
        "id": job.id,
        "command": job.command,
        "pid": job.pid,
        "cwd": job.cwd,
        "startedAtMs": job.started_at_ms,
        "status": job.status.label(),
        "background": job.background,
        "lastLine": job.last_line,
    })
}

pub(crate) fn job_started(job: &JobInfo) -> Value {
    let text = format!("↳ {} running in the background: {}", job.id, job.command);
    agent_note(&text, json!({ "event": "job_started", "job": job_fields(job) }))
}

/// A running job's latest output: data only (no text), for clients with a jobs list.
pub(crate) fn job_updated(id: &str, status: &JobStatus, tail: &str) -> Value {
    json!({
        "sessionUpdate": "session_info_update",
        "_meta": meta(json!({ "event": "job_updated", "job": { "id": id, "status": status.label(), "tail": tail } })),
    })
}

pub(crate) fn job_finished(id: &str, status: &JobStatus) -> Value {
    let text = format!("↳ {id} {}", status.label());
    agent_note(&text, json!({ "event": "job_finished", "job": { "id": id, "status": status.label() } }))
}

pub(crate) fn watch_matched(id: &str, pattern: &str, line: &str, more: u64) -> Value {
    let more_text = if more > 0 { format!(" (+{more} more)") } else { String::new() };
    let text = format!("↳ {id} matched /{pattern}/: {line}{more_text}");
    agent_note(
        &text,
        json!({ "event": "watch_matched", "watch": { "job": id, "pattern": pattern, "line": line, "more": more } }),
    )
}

pub(crate) fn notice(level: NoticeLevel, text: &str) -> Value {
    let (prefix, word) = match level {
        NoticeLevel::Info => ("talaria: ", "info"),
        NoticeLevel::Warn => ("talaria: warning: ", "warn"),
        NoticeLevel::Error => ("talaria: error: ", "error"),
    };
    agent_note(&format!("{prefix}{text}"), json!({ "event": "notice", "level": word }))
}

fn trigger_word(trigger: &TurnTrigger) -> &'static str {
    match trigger {
        TurnTrigger::User => "user",
        TurnTrigger::Queued => "queued",
        TurnTrigger::JobNotification => "job_notification",
        TurnTrigger::Heartbeat => "heartbeat",
        TurnTrigger::Goal => "goal",
        TurnTrigger::Retry => "retry",
    }
}

/// A user-role message the engine itself gave the model (a job's exit notice, the
/// heartbeat, a goal continuation): the client did not send it, so it is shown.
pub(crate) fn engine_message(text: &str, trigger: &TurnTrigger) -> Value {
    let mut update = user_text(text);
    update["_meta"] = meta(json!({ "trigger": trigger_word(trigger) }));
    update
}

/// The slash commands as ACP `available_commands` (names without the slash).
pub(crate) fn available_commands() -> Value {
    let commands: Vec<Value> = COMMANDS
        .iter()
        .filter(|c| !EDITOR_HAS_ITS_OWN.iter().any(|own| c.usage.starts_with(own)))
        .map(|c| {
            let mut words = c.usage.trim_start_matches('/').splitn(2, ' ');
            let name = words.next().unwrap_or_default();
            let mut command = json!({ "name": name, "description": c.help });
            if let Some(hint) = words.next() {
                command["input"] = json!({ "hint": hint });
            }
            command
        })
        .collect();
    json!({ "sessionUpdate": "available_commands_update", "availableCommands": commands })
}

/// Commands that an editor does in its own way (its session list, its new-session button,
/// its clipboard): not offered over ACP.
pub(crate) const EDITOR_HAS_ITS_OWN: &[&str] = &["/new", "/resume", "/sessions", "/quit", "/mouse", "/copy"];

/// A stored session replayed for `session/load`, in order.
pub(crate) fn replay(items: &[HistoryItem]) -> Vec<Value> {
    let mut out = Vec::new();
    for item in items {
        match item {
            HistoryItem::User { text, origin } => {
                let mut update = user_text(text);
                if *origin == Origin::MidTurn {
                    update["_meta"] = meta(json!({ "origin": "mid_turn" }));
                }
                out.push(update);
            }
            HistoryItem::Assistant { text, reasoning } => {
                if let Some(r) = reasoning.as_deref().filter(|r| !r.is_empty()) {
                    out.push(agent_thought(r));
                }
                if !text.is_empty() {
                    out.push(agent_text(text));
                }
            }
            HistoryItem::Tool { call_id, name, summary, outcome, job } => {
                out.push(tool_call(call_id, name, summary));
                let mut finished = tool_finished(call_id, "", outcome);
                if let Some(fate) = job {
                    finished["_meta"]["talaria"]["jobFate"] = json!(fate.describe());
                }
                out.push(finished);
            }
            HistoryItem::Notice { level, text } => out.push(notice(*level, text)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::SessionUpdate;
    use pretty_assertions::assert_eq;

    /// Every update here must be one the SDK's schema accepts.
    fn parses(update: &Value) -> SessionUpdate {
        serde_json::from_value(update.clone()).unwrap_or_else(|e| panic!("not a SessionUpdate: {update}: {e}"))
    }

    fn outcome(ok: bool, status: Option<ToolStatus>, result: &str) -> ToolOutcome {
        ToolOutcome { ok, exit_code: Some(if ok { 0 } else { 1 }), status, duration_ms: 12, result: result.into() }
    }

    #[test]
    fn a_yielded_command_completes_and_names_its_job() {
        let result = r#"{"status":"yielded_to_background","session_id":"job_3","pid":7,"output":"tick","exit_code":null,"error":null}"#;
        let update = tool_finished("call_1", "tick\n", &outcome(false, Some(ToolStatus::Yielded), result));
        assert_eq!(update["status"], "completed");
        assert_eq!(update["_meta"]["talaria"]["job"], "job_3");
        assert_eq!(update["rawOutput"]["pid"], 7);
        assert_eq!(update["content"][0]["content"]["text"], "tick\n");
        parses(&update);
    }

    #[test]
    fn a_failed_command_is_failed_and_shows_the_result_when_it_printed_nothing() {
        let update = tool_finished("c", "", &outcome(false, None, r#"{"output":"","exit_code":1,"error":null}"#));
        assert_eq!(update["status"], "failed");
        assert_eq!(update["content"][0]["content"]["text"], r#"{"output":"","exit_code":1,"error":null}"#);
        assert_eq!(update["_meta"]["talaria"].get("job"), None);
        parses(&update);
    }

    #[test]
    fn job_events_are_readable_text_with_talaria_fields() {
        let job = JobInfo {
            id: "job_2".into(),
            command: "sleep 300".into(),
            pid: 42,
            cwd: "/w".into(),
            started_at_ms: 1,
            status: JobStatus::Running,
            background: true,
            has_stdin: false,
            last_line: String::new(),
            agent: None,
        };
        let started = job_started(&job);
        assert_eq!(started["content"]["text"], "\n↳ job_2 running in the background: sleep 300\n");
        assert_eq!(started["_meta"]["talaria"]["job"]["id"], "job_2");
        let finished = job_finished("job_2", &JobStatus::Exited(0));
        assert_eq!(finished["content"]["text"], "\n↳ job_2 exited 0\n");
        let watch = watch_matched("job_2", "ERROR", "ERROR disk full", 2);
        assert_eq!(watch["content"]["text"], "\n↳ job_2 matched /ERROR/: ERROR disk full (+2 more)\n");
        let updated = job_updated("job_2", &JobStatus::Running, "tick 9");
        assert_eq!(updated["_meta"]["talaria"]["job"]["tail"], "tick 9");
        for update in [started, finished, watch, updated] {
            parses(&update);
        }
    }

    #[test]
    fn commands_are_offered_without_their_slash_and_with_a_hint() {
        let update = available_commands();
        let commands = update["availableCommands"].as_array().unwrap();
        let busy = commands.iter().find(|c| c["name"] == "busy").unwrap();
        assert_eq!(busy["input"]["hint"], "[redirect|steer|queue]");
        let stop = commands.iter().find(|c| c["name"] == "stop").unwrap();
        assert_eq!(stop.get("input"), None);
        for own in ["new", "resume", "sessions", "quit", "mouse", "copy"] {
            assert!(!commands.iter().any(|c| c["name"] == own), "{own} is the editor's to do");
        }
        parses(&update);
    }

    #[test]
    fn a_stored_session_replays_in_order() {
        let items = vec![
            HistoryItem::User { text: "list files".into(), origin: Origin::Typed },
            HistoryItem::Assistant { text: "Here.".into(), reasoning: Some("think".into()) },
            HistoryItem::Tool {
                call_id: "c1".into(),
                name: "terminal".into(),
                summary: "ls".into(),
                outcome: outcome(true, None, r#"{"output":"a\n","exit_code":0,"error":null}"#),
                job: None,
            },
            HistoryItem::User { text: "and now?".into(), origin: Origin::MidTurn },
            HistoryItem::Notice { level: NoticeLevel::Warn, text: "careful".into() },
        ];
        let kinds: Vec<String> =
            replay(&items).iter().map(|u| u["sessionUpdate"].as_str().unwrap().to_string()).collect();
        assert_eq!(
            kinds,
            [
                "user_message_chunk",
                "agent_thought_chunk",
                "agent_message_chunk",
                "tool_call",
                "tool_call_update",
                "user_message_chunk",
                "agent_message_chunk"
            ]
        );
        for update in replay(&items) {
            parses(&update);
        }
    }
}
