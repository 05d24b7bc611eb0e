//! How many tokens a prompt takes, estimated: the context meter (`ctx 42%`), the stored
//! part of a long session and the demo model's usage all count the same way.

use super::{ChatMessage, ToolCall};

/// Tokens each message costs beyond its text (role, separators in the chat template).
pub(crate) const MESSAGE_OVERHEAD_TOKENS: u64 = 4;
/// Tokens each tool call costs beyond its name and arguments.
pub(crate) const TOOL_CALL_OVERHEAD_TOKENS: u64 = 8;

/// A rough token count: a quarter of the characters (rounded up) of each message's text,
/// tool call names, ids and arguments, plus a fixed overhead per message and per call.
pub(crate) fn estimate_tokens(messages: &[ChatMessage]) -> u64 {
    messages.iter().map(estimate_message).sum()
}

/// The same heuristic for loose text (tool definitions, a system prompt), no overhead.
pub(crate) fn estimate_text_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

fn estimate_message(message: &ChatMessage) -> u64 {
    estimate_parts(message.text(), &message.tool_calls, message.tool_call_id.as_deref())
}

pub(crate) fn estimate_parts(text: &str, tool_calls: &[ToolCall], tool_call_id: Option<&str>) -> u64 {
    let mut chars = text.chars().count() as u64;
    let mut overhead = MESSAGE_OVERHEAD_TOKENS;
    for call in tool_calls {
        chars += (call.id.chars().count()
            + call.function.name.chars().count()
            + call.function.arguments.chars().count()) as u64;
        overhead += TOOL_CALL_OVERHEAD_TOKENS;
    }
    if let Some(id) = tool_call_id {
        chars += id.chars().count() as u64;
    }
    chars.div_ceil(4) + overhead
}
