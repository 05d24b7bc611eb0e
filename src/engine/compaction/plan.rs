//! Compaction planning: the older part of the conversation is replaced by a summary the
//! model writes, and the last few user turns are kept as they are.
//!
//! Pure planning and rewriting; only [`summarise`] talks to a model. The engine:
//! `plan` → `summary_request` → `summarise` → `apply`, then stores the new history.

use std::collections::{HashMap, HashSet};

use crate::engine::llm::{ChatMessage, ChatRequest, LlmError, Provider, Role, StreamDelta};
use crate::engine::store::StoredMessage;
use crate::text::truncate_for_model;

/// The first line of the message that replaces the compacted part.
pub const SUMMARY_HEADER: &str = "[Summary of the earlier conversation — compacted by Talaria]";

/// User turns kept verbatim by default.
pub(crate) const DEFAULT_KEEP_USER_TURNS: usize = 2;

/// The summary request's transcript is cut to about this many characters (~60k tokens):
/// its beginning and its end are kept.
pub(crate) const DEFAULT_TRANSCRIPT_CHARS: usize = 240_000;

/// Per-message caps inside the transcript sent for summarising.
const MAX_TOOL_OUTPUT_CHARS: usize = 2_000;
const MAX_ARGUMENTS_CHARS: usize = 1_000;
const MAX_TEXT_CHARS: usize = 8_000;
const MAX_EARLIER_SUMMARY_CHARS: usize = 32_000;

const SUMMARY_SYSTEM_PROMPT: &str = "\
You compact the conversation of a coding agent so it can carry on its work with a smaller context. \
You will get a transcript of the earlier part of the conversation. Write a faithful working summary \
of it, addressed to the agent that will continue, covering:

1. Goals: what the user asked for, with their exact constraints and preferences.
2. Decisions: what was decided or agreed, and why.
3. Files: every file read, created or changed (full paths) and what changed in it.
4. Commands: the commands run and their results (exit codes, test outcomes, key error messages).
5. Open problems: what is unfinished, failing or still to do next.

Be concrete: keep exact paths, names, commands, numbers and error text. Do not invent anything \
that is not in the transcript, and say so when something is unknown. If the transcript starts \
with an earlier summary, carry its facts over. Answer with the summary only, no preamble.";

/// Where to cut: `history[..cut]` is summarised, `history[cut..]` is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionPlan {
    pub cut: usize,
}

/// Choose a cut that keeps the last `keep_recent_user_turns` user messages and everything
/// after them. The kept part starts at a user message (or is empty when 0 turns are kept
/// and every call has its result), and never holds a tool result whose call was cut away. `None` when there is nothing to
/// summarise (too few turns, or one turn that cannot be split).
pub fn plan(history: &[ChatMessage], keep_recent_user_turns: usize) -> Option<CompactionPlan> {
    // Where each tool call gets its result, so a cut never falls between the two.
    let mut result_at: HashMap<&str, usize> = HashMap::new();
    for (i, m) in history.iter().enumerate() {
        if let (Role::Tool, Some(id)) = (m.role, m.tool_call_id.as_deref()) {
            result_at.insert(id, i);
        }
    }
    // `reach[i]`: the last result index of any call made before `i`. A call with no result
    // yet may still get one (a turn in flight), so nothing after it is a place to cut.
    let mut reach = Vec::with_capacity(history.len() + 1);
    let mut furthest = 0usize;
    for (i, m) in history.iter().enumerate() {
        reach.push(furthest);
        for call in &m.tool_calls {
            let at = result_at.get(call.id.as_str()).copied().unwrap_or(usize::MAX);
            if at > i {
                furthest = furthest.max(at);
            }
        }
    }
    reach.push(furthest);
    let is_safe = |i: usize| i == 0 || reach[i] < i;

    let mut users_after = 0usize;
    let mut cut = None;
    if keep_recent_user_turns == 0 && is_safe(history.len()) {
        cut = Some(history.len());
    } else {
        for i in (0..history.len()).rev() {
            if history[i].role != Role::User {
                continue;
            }
            users_after += 1;
            if users_after >= keep_recent_user_turns && is_safe(i) {
                cut = Some(i);
                break;
            }
        }
    }
    let cut = cut?;
    let summarisable = history[..cut].iter().any(|m| m.role != Role::System);
    summarisable.then_some(CompactionPlan { cut })
}

/// The request asking the model for the summary of `older` (`history[..cut]`): no tools,
/// temperature 0, the conversation as a plain transcript with long outputs shortened.
pub fn summary_request(model: &str, older: &[ChatMessage], focus: Option<&str>) -> ChatRequest<'static> {
    summary_request_within(model, older, focus, DEFAULT_TRANSCRIPT_CHARS)
}

/// [`summary_request`] with the transcript capped at `max_transcript_chars` (pick about
/// half the context window × 4 so the request itself fits).
pub(crate) fn summary_request_within(
    model: &str,
    older: &[ChatMessage],
    focus: Option<&str>,
    max_transcript_chars: usize,
) -> ChatRequest<'static> {
    summary_request_of(model, TranscriptParts { start: &[], gap: 0, rest: older }, focus, max_transcript_chars)
}

/// What a summary request covers: `start`, then `gap` messages not at hand (left in the
/// database), then `rest`. Without a gap, `start` and `rest` are one run of messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TranscriptParts<'a> {
    pub(crate) start: &'a [ChatMessage],
    pub(crate) gap: usize,
    pub(crate) rest: &'a [ChatMessage],
}

/// [`summary_request_within`] of messages in parts.
pub(crate) fn summary_request_of(
    model: &str,
    parts: TranscriptParts<'_>,
    focus: Option<&str>,
    max_transcript_chars: usize,
) -> ChatRequest<'static> {
    let transcript = transcript(parts, max_transcript_chars);
    let mut ask = format!("Here is the transcript to summarise:\n\n<transcript>\n{transcript}\n</transcript>\n\n");
    match focus.map(str::trim).filter(|f| !f.is_empty()) {
        Some(focus) => ask.push_str(&format!(
            "The user asked that the summary focus on: {focus}\n\
             Cover that in full detail and keep it first; keep the rest shorter.\n\n\
             Write the working summary now."
        )),
        None => ask.push_str("Write the working summary now."),
    }
    ChatRequest {
        temperature: Some(0.0),
        ..ChatRequest::owned(model, vec![ChatMessage::system(SUMMARY_SYSTEM_PROMPT), ChatMessage::user(ask)])
    }
}

/// How much of a transcript of `max_chars` its start may take (the rest is its end).
pub(crate) fn head_chars(max_chars: usize) -> usize {
    max_chars / 4
}

/// About the characters a stored message takes in a transcript (each part capped as
/// [`render`] caps it), to know how many of the oldest to read for its start.
pub(crate) fn stored_size(row: &StoredMessage) -> usize {
    let text = row.content.as_deref().unwrap_or("");
    let cap = if text.starts_with(SUMMARY_HEADER) { MAX_EARLIER_SUMMARY_CHARS } else { MAX_TEXT_CHARS };
    let text = text.len().min(cap);
    let calls: usize = row.tool_calls.iter().map(|c| c.function.arguments.len().min(MAX_ARGUMENTS_CHARS) + 20).sum();
    text + calls + 20
}

/// The messages as a readable transcript, each shortened, the whole kept under `max_chars`
/// by dropping messages from the middle (the start holds the goal and any earlier summary,
/// the end the current state). A gap in the parts is always in the dropped middle.
fn transcript(parts: TranscriptParts<'_>, max_chars: usize) -> String {
    let TranscriptParts { start, gap, rest } = parts;
    let mut names: HashMap<&str, &str> = HashMap::new();
    for call in start.iter().chain(rest).flat_map(|m| &m.tool_calls) {
        names.insert(&call.id, &call.function.name);
    }
    let shown = |ms: &[ChatMessage]| -> Vec<String> {
        ms.iter().filter(|m| m.role != Role::System).map(|m| render(m, &names)).collect()
    };
    let mut entries = shown(start);
    // Where the gap is: the start may not reach past it, nor the end before it.
    let boundary = if gap > 0 { entries.len() } else { usize::MAX };
    entries.extend(shown(rest));
    let size = |e: &String| e.chars().count() + 2;
    let total: usize = entries.iter().map(size).sum();
    if gap == 0 && total <= max_chars {
        return entries.join("\n\n");
    }
    let mut head_len = 0;
    let mut head = 0;
    while head < entries.len().min(boundary) && head_len + size(&entries[head]) <= head_chars(max_chars) {
        head_len += size(&entries[head]);
        head += 1;
    }
    let mut tail_len = 0;
    let mut tail = entries.len();
    let floor = if gap > 0 { boundary } else { head };
    while tail > floor && head_len + tail_len + size(&entries[tail - 1]) <= max_chars {
        tail_len += size(&entries[tail - 1]);
        tail -= 1;
    }
    let omitted = tail - head + gap;
    let mut parts: Vec<String> = entries[..head].to_vec();
    parts.push(format!("[… {omitted} messages omitted here to keep this request small …]"));
    parts.extend_from_slice(&entries[tail..]);
    parts.join("\n\n")
}

fn render(message: &ChatMessage, names: &HashMap<&str, &str>) -> String {
    let text = message.text().trim();
    match message.role {
        Role::User => {
            let cap = if text.starts_with(SUMMARY_HEADER) { MAX_EARLIER_SUMMARY_CHARS } else { MAX_TEXT_CHARS };
            format!("[user]\n{}", truncate_for_model(text, cap))
        }
        Role::Assistant => {
            let mut out = String::from("[assistant]");
            if !text.is_empty() {
                out.push('\n');
                out.push_str(&truncate_for_model(text, MAX_TEXT_CHARS));
            }
            for call in &message.tool_calls {
                let args = truncate_for_model(&call.function.arguments, MAX_ARGUMENTS_CHARS);
                out.push_str(&format!("\n→ calls {} {args}", call.function.name));
            }
            out
        }
        Role::Tool => {
            let id = message.tool_call_id.as_deref().unwrap_or("");
            let name = names.get(id).copied().unwrap_or("tool");
            format!("[{name} result]\n{}", truncate_for_model(text, MAX_TOOL_OUTPUT_CHARS))
        }
        Role::System => format!("[system]\n{}", truncate_for_model(text, MAX_TEXT_CHARS)),
    }
}

/// The compacted history: system messages from the start of the cut part (if any), the
/// summary as one user message, then `history[cut..]`. A tool result in the kept part
/// whose call was cut away (only possible with a cut not from [`plan`]) is dropped so the
/// history stays valid.
pub fn apply(mut history: Vec<ChatMessage>, cut: usize, summary: &str) -> Vec<ChatMessage> {
    let cut = cut.min(history.len());
    let tail = history.split_off(cut);
    let mut out: Vec<ChatMessage> = history.into_iter().take_while(|m| m.role == Role::System).collect();
    out.push(ChatMessage::user(format!("{SUMMARY_HEADER}\n{}", summary.trim())));
    let calls: HashSet<String> = tail.iter().flat_map(|m| &m.tool_calls).map(|c| c.id.clone()).collect();
    out.extend(
        tail.into_iter()
            .filter(|m| m.role != Role::Tool || m.tool_call_id.as_deref().is_some_and(|id| calls.contains(id))),
    );
    out
}

/// Ask the model for the summary. Errors when the answer has no text (nothing should be
/// compacted away then).
pub async fn summarise(provider: &dyn Provider, request: &ChatRequest<'_>) -> Result<String, LlmError> {
    let completion = provider.stream_chat(request, &mut |_: StreamDelta| {}).await?;
    let summary = strip_thinking(&completion.content).trim().to_string();
    if summary.is_empty() {
        return Err(LlmError::Protocol("the answer to the summary request had no text; nothing was compacted".into()));
    }
    Ok(summary)
}

/// Drop a leading `<think>…</think>` block some local models write into the content.
fn strip_thinking(text: &str) -> &str {
    let trimmed = text.trim_start();
    match trimmed.strip_prefix("<think>").and_then(|rest| rest.split_once("</think>")) {
        Some((_, after)) => after,
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::history::missing_results;
    use crate::engine::llm::client::{ClientSettings, OpenAiClient};
    use crate::engine::llm::ToolCall;
    use crate::testkit::scripted::{ScriptedResponse, ScriptedServer};
    use pretty_assertions::assert_eq;
    use std::time::Duration;

    fn call(id: &str) -> ToolCall {
        ToolCall::new(id, "terminal", format!(r#"{{"command":"echo {id}"}}"#))
    }

    /// user, assistant(call), tool, assistant — `turns` times.
    fn conversation(turns: usize) -> Vec<ChatMessage> {
        let mut h = Vec::new();
        for t in 0..turns {
            let id = format!("c{t}");
            h.push(ChatMessage::user(format!("task {t}")));
            h.push(ChatMessage::assistant("", vec![call(&id)]));
            h.push(ChatMessage::tool(&id, format!("out {t}")));
            h.push(ChatMessage::assistant(format!("done {t}"), vec![]));
        }
        h
    }

    fn assert_valid(history: &[ChatMessage]) {
        assert!(missing_results(history).is_empty(), "a call without result: {history:#?}");
        let calls: HashSet<&str> = history.iter().flat_map(|m| &m.tool_calls).map(|c| c.id.as_str()).collect();
        for m in history.iter().filter(|m| m.role == Role::Tool) {
            assert!(calls.contains(m.tool_call_id.as_deref().unwrap()), "a result without its call: {m:?}");
        }
    }

    #[test]
    fn keeps_the_last_user_turns() {
        let h = conversation(4);
        assert_eq!(plan(&h, 2), Some(CompactionPlan { cut: 8 }));
        assert_eq!(plan(&h, 1), Some(CompactionPlan { cut: 12 }));
        assert_eq!(plan(&h, 0), Some(CompactionPlan { cut: 16 }));
        assert_eq!(plan(&h, 4), None, "everything would be kept");
        assert_eq!(plan(&h, 9), None);
        assert_eq!(plan(&[], 0), None);
    }

    #[test]
    fn the_cut_never_separates_a_call_from_its_results() {
        // A user message (a job notice, an out-of-band message) arriving between a call and
        // its result is not a place to cut.
        let h = vec![
            ChatMessage::user("one"),
            ChatMessage::assistant("", vec![call("a"), call("b")]),
            ChatMessage::tool("a", "A"),
            ChatMessage::user("[job 3 finished]"),
            ChatMessage::tool("b", "B"),
            ChatMessage::user("two"),
            ChatMessage::assistant("ok", vec![]),
        ];
        assert_eq!(plan(&h, 2), None, "index 3 is inside a call; only index 0 is left");
        assert_eq!(plan(&h, 1), Some(CompactionPlan { cut: 5 }));
        for keep in 0..4 {
            if let Some(p) = plan(&h, keep) {
                assert_valid(&apply(h.clone(), p.cut, "s"));
            }
        }
    }

    #[test]
    fn a_call_still_waiting_for_its_result_stays_in_the_kept_part() {
        let mut h = conversation(2);
        h.push(ChatMessage::user("go"));
        h.push(ChatMessage::assistant("", vec![call("z")]));
        // Its result may still be appended, so the turn holding it is kept even with 0 turns.
        assert_eq!(plan(&h, 0), Some(CompactionPlan { cut: 8 }));
        assert_eq!(plan(&h, 1), Some(CompactionPlan { cut: 8 }));
        h.push(ChatMessage::tool("z", "Z"));
        assert_eq!(plan(&h, 0), Some(CompactionPlan { cut: h.len() }));
    }

    #[test]
    fn a_leading_system_message_is_kept_and_not_counted_as_conversation() {
        let mut h = vec![ChatMessage::system("sys")];
        h.extend(conversation(3));
        let p = plan(&h, 1).unwrap();
        assert_eq!(p.cut, 9);
        let out = apply(h.clone(), p.cut, "the summary");
        assert_eq!(out[0], ChatMessage::system("sys"));
        assert_eq!(out[1], ChatMessage::user(format!("{SUMMARY_HEADER}\nthe summary")));
        assert_eq!(&out[2..], &h[9..]);
        assert_eq!(plan(&[ChatMessage::system("s"), ChatMessage::user("u")], 1), None);
    }

    #[test]
    fn apply_puts_the_summary_before_the_kept_tail() {
        let h = conversation(3);
        let out = apply(h.clone(), 8, "  Goals: x.\n");
        let mut expected = vec![ChatMessage::user(format!("{SUMMARY_HEADER}\nGoals: x."))];
        expected.extend_from_slice(&h[8..]);
        assert_eq!(out, expected);
        assert_valid(&out);
        // Everything summarised.
        assert_eq!(apply(h.clone(), 99, "s"), vec![ChatMessage::user(format!("{SUMMARY_HEADER}\ns"))]);
    }

    #[test]
    fn apply_drops_a_result_whose_call_was_cut_away() {
        let h = conversation(2);
        // Cutting at 2 (bad: between call c0 and its result) must not leave an orphan result.
        let out = apply(h.clone(), 2, "s");
        assert_valid(&out);
        assert_eq!(out.len(), 1 + h.len() - 2 - 1);
    }

    #[test]
    fn a_long_history_plans_and_applies_quickly() {
        let h = conversation(1_250);
        assert_eq!(h.len(), 5_000);
        let started = std::time::Instant::now();
        let p = plan(&h, 3).unwrap();
        assert_eq!(p.cut, 5_000 - 12);
        let request = summary_request("m", &h[..p.cut], None);
        let out = apply(h, p.cut, "s");
        assert_eq!(out.len(), 13);
        assert_valid(&out);
        assert!(request.messages[1].text().contains("task 1246"));
        // Generous: the point is linear work, not a benchmark.
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn the_summary_request_has_no_tools_temperature_zero_and_shortened_outputs() {
        let mut h = conversation(1);
        h.push(ChatMessage::user("now the log"));
        h.push(ChatMessage::assistant("", vec![call("big")]));
        h.push(ChatMessage::tool("big", format!("START{}END", "x".repeat(50_000))));
        let request = summary_request("the-model", &h, None);
        assert_eq!(request.model, "the-model");
        assert_eq!(request.tools, Vec::<serde_json::Value>::new());
        assert_eq!(request.temperature, Some(0.0));
        assert_eq!(request.messages.len(), 2);
        assert_eq!(*request.messages[0], ChatMessage::system(SUMMARY_SYSTEM_PROMPT));
        let ask = request.messages[1].text();
        assert!(ask.len() < 5_000, "the 50k output is shortened: {} bytes", ask.len());
        assert!(ask.contains("START") && ask.contains("END") && ask.contains("OUTPUT TRUNCATED"));
        assert!(ask.contains("[user]\ntask 0"));
        assert!(ask.contains(r#"→ calls terminal {"command":"echo c0"}"#));
        assert!(ask.contains("[terminal result]\nout 0"));
        assert!(ask.contains("[assistant]\ndone 0"));
        assert!(!ask.contains("focus"));
    }

    #[test]
    fn the_focus_is_emphasised() {
        let request = summary_request("m", &conversation(1), Some("  the failing migration "));
        let ask = request.messages[1].text();
        assert!(ask.contains("The user asked that the summary focus on: the failing migration\n"), "{ask}");
        assert_eq!(summary_request("m", &conversation(1), Some("  ")).messages[1].text().contains("focus"), false);
    }

    #[test]
    fn a_transcript_over_budget_keeps_its_start_and_end() {
        let h = conversation(500);
        let request = summary_request_within("m", &h, None, 4_000);
        let ask = request.messages[1].text();
        assert!(ask.contains("[user]\ntask 0\n"));
        assert!(ask.contains("done 499"));
        assert!(ask.contains("messages omitted here to keep this request small"));
        assert!(!ask.contains("task 250\n"));
        assert!(ask.chars().count() < 4_000 + 1_000);
    }

    #[test]
    fn messages_left_in_the_database_are_a_gap_in_the_middle_even_when_all_else_fits() {
        let start = conversation(2);
        let rest = conversation(3);
        let parts = |gap| TranscriptParts { start: &start, gap, rest: &rest };
        // No gap and room for all: one run of messages, no marker.
        let whole = transcript(parts(0), 100_000);
        assert!(!whole.contains("omitted"));
        // A gap is said even with room for everything at hand.
        let gapped = transcript(parts(40), 100_000);
        assert!(gapped.contains("[… 40 messages omitted here to keep this request small …]"), "{gapped}");
        let (before, after) = gapped.split_once("omitted here").unwrap();
        assert!(before.contains("done 1") && after.contains("task 2"));
        // Tight: the start keeps a quarter, the end fills the rest, never across the gap.
        let tight = transcript(parts(40), 160);
        assert!(tight.starts_with("[user]\ntask 0\n"), "{tight}");
        assert!(tight.contains("done 2") && !tight.contains("task 1\n"), "{tight}");
        let omitted: usize = tight.split("[… ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert_eq!(omitted, 40 + 8 + 12 - tight.matches("\n\n[").count());
    }

    #[test]
    fn stored_sizes_follow_the_caps_of_the_transcript() {
        let row = |text: String| StoredMessage {
            role: Role::User,
            content: Some(text),
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            display_kind: None,
            origin: None,
        };
        assert_eq!(stored_size(&row("abc".into())), 23);
        assert_eq!(stored_size(&row("x".repeat(50_000))), MAX_TEXT_CHARS + 20);
        let summary = format!("{SUMMARY_HEADER}\n{}", "y".repeat(50_000));
        assert_eq!(stored_size(&row(summary)), MAX_EARLIER_SUMMARY_CHARS + 20);
    }

    #[test]
    fn thinking_is_not_part_of_the_summary() {
        assert_eq!(strip_thinking("<think>hmm</think>\nGoals"), "\nGoals");
        assert_eq!(strip_thinking("Goals <think>"), "Goals <think>");
    }

    #[tokio::test]
    async fn the_request_after_compaction_carries_the_summary_not_the_old_turns() {
        let server = ScriptedServer::start([ScriptedResponse::text("Goals: ship it. Files: src/a.rs.")]).await.unwrap();
        let client = OpenAiClient::new(ClientSettings::new(server.base_url())).unwrap();
        let h = conversation(3);
        let p = plan(&h, 1).unwrap();
        let request = summary_request("scripted-model", &h[..p.cut], Some("files"));
        let summary = summarise(&client, &request).await.unwrap();
        assert_eq!(summary, "Goals: ship it. Files: src/a.rs.");

        let sent = server.wait_for_chat_requests(1, Duration::from_secs(10)).await;
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].tool_names(), Vec::<String>::new());
        assert_eq!(sent[0].temperature(), Some(0.0));
        assert_eq!(sent[0].messages(), request.messages.iter().map(|m| m.as_ref().clone()).collect::<Vec<_>>());
        let asked = sent[0].messages()[1].text().to_string();
        assert!(asked.contains("task 0") && asked.contains("task 1") && !asked.contains("task 2"));

        let compacted = apply(h.clone(), p.cut, &summary);
        assert_valid(&compacted);
        let mut expected = vec![ChatMessage::user(format!("{SUMMARY_HEADER}\nGoals: ship it. Files: src/a.rs."))];
        expected.extend_from_slice(&h[8..]);
        assert_eq!(compacted, expected);
        let texts: Vec<&str> = compacted.iter().map(ChatMessage::text).collect();
        assert!(!texts.iter().any(|t| t.contains("task 0") || t.contains("task 1")));
    }

    #[tokio::test]
    async fn an_empty_summary_is_an_error() {
        let server = ScriptedServer::start([ScriptedResponse::text("  ")]).await.unwrap();
        let client = OpenAiClient::new(ClientSettings::new(server.base_url())).unwrap();
        let err = summarise(&client, &summary_request("m", &conversation(1), None)).await.unwrap_err();
        assert!(matches!(err, LlmError::Protocol(_)), "{err}");
    }
}
