//! How full the model's context window is: the server's own count for the last request
//! when it reports one, plus an estimate of what was added since.

use std::fmt;

use crate::engine::llm::ChatMessage;

pub(crate) use crate::engine::llm::estimate::{estimate_text_tokens, estimate_tokens};

/// The context meter shown as `ctx 42%` and consulted for auto-compaction.
///
/// Use: after each model response, [`ContextMeter::observe_usage`] with the usage's
/// `prompt_tokens` (when the server sent usage), then [`ContextMeter::add_estimate`] for
/// every message appended to the history after that request was sent (the assistant answer,
/// tool results, user messages). After the history is replaced (compaction, resume, `/new`)
/// call [`ContextMeter::reset`] with the new history (and the system prompt).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextMeter {
    /// The model's context window in tokens; 0 means unknown (no percentage, no compaction).
    pub(crate) window: u64,
    /// `prompt_tokens` the server reported for the last request, if it reported any.
    pub(crate) last_prompt_tokens: Option<u64>,
    /// Estimated tokens of messages added since that request (or of everything, before any).
    pub(crate) estimated_since: u64,
}

impl ContextMeter {
    pub fn new(window: u64) -> ContextMeter {
        ContextMeter { window, last_prompt_tokens: None, estimated_since: 0 }
    }

    /// The server counted this request's prompt: it replaces every estimate so far.
    pub fn observe_usage(&mut self, prompt_tokens: u64) {
        self.last_prompt_tokens = Some(prompt_tokens);
        self.estimated_since = 0;
    }

    /// Messages were added to the conversation since the last counted request.
    pub fn add_estimate(&mut self, messages: &[ChatMessage]) {
        self.estimated_since = self.estimated_since.saturating_add(estimate_tokens(messages));
    }

    /// The conversation was replaced: forget the server's count, estimate it all afresh.
    pub fn reset(&mut self, messages: &[ChatMessage]) {
        self.last_prompt_tokens = None;
        self.estimated_since = estimate_tokens(messages);
    }

    /// The conversation was replaced and `tokens` more of it stay in the database (the
    /// older part of a long, uncompacted session): they count until it is compacted.
    pub(crate) fn reset_with(&mut self, messages: &[ChatMessage], tokens: u64) {
        self.reset(messages);
        self.estimated_since = self.estimated_since.saturating_add(tokens);
    }

    /// Best guess of the tokens the next request's prompt takes.
    pub(crate) fn used(&self) -> u64 {
        self.last_prompt_tokens.unwrap_or(0).saturating_add(self.estimated_since)
    }

    /// Share of the window used, rounded to the nearest percent, at most 100; 0 when the
    /// window is unknown.
    pub fn percent(&self) -> u8 {
        if self.window == 0 {
            return 0;
        }
        let used = u128::from(self.used());
        let window = u128::from(self.window);
        let percent = (used * 100 + window / 2) / window;
        percent.min(100) as u8
    }

    /// Time to compact: the prompt reaches `compact_at` (a fraction, `agent.compact_at`) of
    /// the window. Never with an unknown window or a fraction outside (0, 1].
    pub fn should_compact(&self, compact_at: f64) -> bool {
        if self.window == 0 || !(compact_at > 0.0 && compact_at <= 1.0) {
            return false;
        }
        self.used() as f64 >= self.window as f64 * compact_at
    }

    /// The status text: `ctx 42%`, or `ctx 12k` (tokens) when the window is unknown.
    pub fn label(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for ContextMeter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.window == 0 {
            return write!(f, "ctx {}", short_count(self.used()));
        }
        write!(f, "ctx {}%", self.percent())
    }
}

/// `950`, `12k`, `1.2M`.
fn short_count(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{}k", (n + 500) / 1_000),
        _ => format!("{:.1}M", n as f64 / 1_000_000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::llm::ToolCall;
    use pretty_assertions::assert_eq;

    #[test]
    fn estimate_is_a_quarter_of_the_characters_plus_overhead() {
        assert_eq!(estimate_tokens(&[]), 0);
        assert_eq!(estimate_tokens(&[ChatMessage::user("")]), 4);
        // 8 chars → 2 tokens; 9 chars round up to 3.
        assert_eq!(estimate_tokens(&[ChatMessage::user("abcdefgh")]), 6);
        assert_eq!(estimate_tokens(&[ChatMessage::user("abcdefghi")]), 7);
        // Characters, not bytes.
        assert_eq!(estimate_tokens(&[ChatMessage::user("éééé")]), 5);
        assert_eq!(estimate_tokens(&[ChatMessage::user("abcd"), ChatMessage::user("abcd")]), 10);
        assert_eq!(estimate_text_tokens(""), 0);
        assert_eq!(estimate_text_tokens("abcde"), 2);
    }

    #[test]
    fn tool_calls_and_results_are_counted() {
        // id 2 + name 8 + arguments 14 = 24 chars → 6, + 4 per message + 8 per call.
        let call = ChatMessage::assistant("", vec![ToolCall::new("c1", "terminal", r#"{"command":""}"#)]);
        assert_eq!(estimate_tokens(&[call]), 18);
        // id 2 + text 6 = 8 chars → 2, + 4.
        assert_eq!(estimate_tokens(&[ChatMessage::tool("c1", "output")]), 6);
    }

    #[test]
    fn percent_prefers_the_server_count_plus_what_came_after() {
        let mut meter = ContextMeter::new(1_000);
        meter.add_estimate(&[ChatMessage::user("x".repeat(400))]); // 104
        assert_eq!(meter.used(), 104);
        assert_eq!(meter.percent(), 10);
        meter.observe_usage(300);
        assert_eq!((meter.used(), meter.percent()), (300, 30));
        meter.add_estimate(&[ChatMessage::tool("c", "y".repeat(198))]); // 200/4 + 4 = 54
        assert_eq!((meter.used(), meter.percent()), (354, 35));
        assert_eq!(meter.label(), "ctx 35%");
        meter.reset(&[ChatMessage::user("z".repeat(36))]); // 13
        assert_eq!(meter, ContextMeter { window: 1_000, last_prompt_tokens: None, estimated_since: 13 });
    }

    #[test]
    fn percent_rounds_to_nearest_and_clamps_at_100() {
        let at = |used| ContextMeter { window: 1_000, last_prompt_tokens: Some(used), estimated_since: 0 }.percent();
        assert_eq!(at(0), 0);
        assert_eq!(at(4), 0);
        assert_eq!(at(5), 1);
        assert_eq!(at(424), 42);
        assert_eq!(at(425), 43);
        assert_eq!(at(994), 99);
        assert_eq!(at(995), 100);
        assert_eq!(at(1_000), 100);
        assert_eq!(at(50_000), 100);
        assert_eq!(at(u64::MAX), 100);
        let huge = ContextMeter { window: u64::MAX, last_prompt_tokens: Some(u64::MAX), estimated_since: u64::MAX };
        assert_eq!(huge.percent(), 100);
    }

    #[test]
    fn compaction_starts_at_the_threshold() {
        let meter = |used| ContextMeter { window: 128_000, last_prompt_tokens: Some(used), estimated_since: 0 };
        assert!(!meter(108_799).should_compact(0.85));
        assert!(meter(108_800).should_compact(0.85));
        assert!(meter(200_000).should_compact(1.0));
        assert!(!meter(127_999).should_compact(1.0));
        assert!(!meter(200_000).should_compact(0.0));
        assert!(!meter(200_000).should_compact(f64::NAN));
    }

    #[test]
    fn an_unknown_window_shows_tokens_and_never_compacts() {
        let mut meter = ContextMeter::new(0);
        meter.observe_usage(12_345);
        assert_eq!(meter.percent(), 0);
        assert!(!meter.should_compact(0.5));
        assert_eq!(meter.label(), "ctx 12k");
        meter.observe_usage(950);
        assert_eq!(meter.label(), "ctx 950");
        meter.observe_usage(2_345_678);
        assert_eq!(meter.label(), "ctx 2.3M");
    }
}
