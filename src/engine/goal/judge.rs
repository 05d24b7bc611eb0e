//! The goal judge (DESIGN §5): when every gate passes, a request with no tools at
//! temperature 0 asks whether the goal is done. Replies are read leniently: the last
//! JSON object with a known `verdict`, anywhere in the text, code fences or prose around it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::text::tail_chars;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Verdict {
    Done,
    Continue,
    Blocked,
}

impl Verdict {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Done => "done",
            Verdict::Continue => "continue",
            Verdict::Blocked => "blocked",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JudgeReply {
    pub(crate) verdict: Verdict,
    /// Empty when the judge gave none.
    pub(crate) reason: String,
}

/// Read a judge reply: the last JSON object in `text` whose `verdict` is done, continue
/// or blocked (any case). None when there is no such object.
pub(crate) fn parse_judge_reply(text: &str) -> Option<JudgeReply> {
    let mut found = None;
    for (start, _) in text.match_indices('{') {
        let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        let Some(Ok(Value::Object(map))) = values.next() else { continue };
        let verdict = match map.get("verdict").and_then(Value::as_str).map(|v| v.trim().to_ascii_lowercase()) {
            Some(v) if v == "done" => Verdict::Done,
            Some(v) if v == "continue" => Verdict::Continue,
            Some(v) if v == "blocked" => Verdict::Blocked,
            _ => continue,
        };
        let reason = match map.get("reason") {
            Some(Value::String(s)) => s.trim().to_string(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        found = Some(JudgeReply { verdict, reason });
    }
    found
}

/// The judge's system prompt.
pub(crate) const JUDGE_SYSTEM: &str = "You judge whether an AI coding agent has achieved a standing goal set by its user. \
Reply with exactly one JSON object and nothing else: {\"verdict\":\"done|continue|blocked\",\"reason\":\"<one sentence>\"}. \
\"done\": the goal is fully achieved. \"continue\": more work is needed and the agent can do it on its own. \
\"blocked\": the agent cannot make progress without input or a decision from the user.";

/// How much of the agent's last reply the judge sees.
pub(crate) const JUDGE_REPLY_CHARS: usize = 8000;

/// The judge's user message: the goal, the gates' state, and the end of the agent's last reply.
pub(crate) fn judge_prompt(goal: &str, gates_passed: usize, last_reply: &str) -> String {
    let gates = match gates_passed {
        0 => "No quality gates are configured.".to_string(),
        1 => "The 1 quality gate passed.".to_string(),
        n => format!("All {n} quality gates passed."),
    };
    let reply = last_reply.trim();
    let reply = if reply.is_empty() { "(no text)" } else { tail_chars(reply, JUDGE_REPLY_CHARS) };
    format!("Goal: {goal}\n\n{gates}\n\nThe agent's latest reply:\n{reply}\n\nIs the goal done? Answer with the JSON object only.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn reply(verdict: Verdict, reason: &str) -> Option<JudgeReply> {
        Some(JudgeReply { verdict, reason: reason.into() })
    }

    #[test]
    fn plain_json() {
        assert_eq!(parse_judge_reply(r#"{"verdict":"done","reason":"all green"}"#), reply(Verdict::Done, "all green"));
        assert_eq!(parse_judge_reply(r#"  {"verdict": "Continue"}  "#), reply(Verdict::Continue, ""));
    }

    #[test]
    fn fenced_json() {
        let text = "```json\n{\n  \"verdict\": \"blocked\",\n  \"reason\": \"needs an API key\"\n}\n```";
        assert_eq!(parse_judge_reply(text), reply(Verdict::Blocked, "needs an API key"));
    }

    #[test]
    fn prose_around_the_object() {
        let text =
            "Looking at the output, the tests pass. {\"verdict\":\"done\",\"reason\":\"tests pass\"} Hope that helps!";
        assert_eq!(parse_judge_reply(text), reply(Verdict::Done, "tests pass"));
        // An echoed schema or an unrelated object does not count; the real answer does.
        let text = r#"Format {"verdict":"done|continue|blocked"} noted. {"x":1} Answer: {"verdict":"continue","reason":"docs missing"}"#;
        assert_eq!(parse_judge_reply(text), reply(Verdict::Continue, "docs missing"));
        // Braces inside strings do not confuse it.
        assert_eq!(
            parse_judge_reply(r#"{"verdict":"done","reason":"fixed {x} and }"}"#),
            reply(Verdict::Done, "fixed {x} and }")
        );
    }

    #[test]
    fn garbage() {
        assert_eq!(parse_judge_reply(""), None);
        assert_eq!(parse_judge_reply("I think it is done."), None);
        assert_eq!(parse_judge_reply(r#"{"verdict": "maybe"}"#), None);
        assert_eq!(parse_judge_reply(r#"{"verdict": "done""#), None);
        assert_eq!(parse_judge_reply(r#"{"status": "done"}"#), None);
    }

    #[test]
    fn prompt_has_goal_gates_and_reply() {
        let p = judge_prompt("make tests pass", 2, "  All 40 tests pass now.  ");
        assert_eq!(
            p,
            "Goal: make tests pass\n\nAll 2 quality gates passed.\n\nThe agent's latest reply:\nAll 40 tests pass now.\n\nIs the goal done? Answer with the JSON object only."
        );
        assert!(judge_prompt("g", 0, "").contains("No quality gates"));
    }
}
