//! Compaction (`/compact [focus]` and automatic): summarise older turns through the model,
//! persist the summary, and rebuild the model's context from the database. The pure
//! planning and rewriting is in [`plan`]; this file holds the storage side.
//!
//! In the database a compaction is a `display_kind = "compaction"` user row holding the
//! summary, followed by copies of the kept recent messages (`display_kind = "copy:…"`).
//! The model's context is everything from the last compaction row on (`Store::load_context`;
//! of a long stretch without one only its end is read, the rest summarised by the next
//! compaction); the transcript shows every original row, so nothing is lost.

pub mod plan;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::engine::history::{to_chat, to_stored};
use crate::engine::llm::{ChatMessage, Provider};
use crate::engine::store::{OmittedRows, Store};

pub use plan::SUMMARY_HEADER;

pub(crate) use crate::engine::store::COMPACTION_KIND;
pub(crate) const COPY_PREFIX: &str = "copy:";

/// A row re-stored as part of a compaction's kept tail (not shown twice).
#[cfg(test)]
pub(crate) fn is_copy(row: &crate::engine::store::StoredMessage) -> bool {
    row.display_kind.as_deref().is_some_and(|k| k.starts_with(COPY_PREFIX))
}

/// Strip the copy marker to get the original display kind.
#[cfg(test)]
pub(crate) fn original_kind(kind: Option<&str>) -> Option<&str> {
    kind.map(|k| k.strip_prefix(COPY_PREFIX).unwrap_or(k))
}

/// How a compaction went.
pub(crate) struct Compacted {
    pub(crate) history: Vec<ChatMessage>,
    pub(crate) summarised: usize,
}

/// What a compaction needs: the model that summarises and the session it is stored in.
/// Owned, so a compaction can run as its own task outside the engine loop.
#[derive(Clone)]
pub(crate) struct Compactor {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) model: String,
    pub(crate) store: Store,
    pub(crate) session_id: String,
    /// The model's context window in tokens (sizes the summary request).
    pub(crate) context_window: u64,
}

/// Summarise all but the most recent turns of `history`, and the older messages of the
/// context that were left in the database (`omitted`) before them. Errors leave the
/// history as it was.
pub(crate) async fn compact_history(
    with: &Compactor,
    history: Vec<ChatMessage>,
    omitted: Option<OmittedRows>,
    focus: Option<&str>,
    cancel: &CancellationToken,
) -> Result<Compacted, (Vec<ChatMessage>, String)> {
    let planned = plan::plan(&history, plan::DEFAULT_KEEP_USER_TURNS).or_else(|| plan::plan(&history, 0));
    // With older messages in the database there is something to summarise even when every
    // held message is kept (the held part starts at a user message: a safe cut).
    let cut = match (planned, omitted) {
        (Some(planned), _) => planned.cut,
        (None, Some(_)) => 0,
        (None, None) => return Err((history, "nothing to compact yet".into())),
    };
    let planned = plan::CompactionPlan { cut };
    let window_chars = usize::try_from(with.context_window).unwrap_or(usize::MAX).saturating_mul(2).max(20_000);
    let request = match omitted {
        None => plan::summary_request_within(&with.model, &history[..cut], focus, window_chars),
        Some(omitted) => {
            // Only the start of what was left in the database can be in the request (its
            // middle is left out like the middle of any long transcript): read just that.
            let start = with
                .store
                .load_omitted_start(&with.session_id, omitted, plan::head_chars(window_chars), plan::stored_size)
                .await;
            let start: Vec<ChatMessage> = match start {
                Ok(rows) => rows.iter().filter_map(to_chat).collect(),
                Err(e) => return Err((history, format!("could not read the older messages: {e}"))),
            };
            let gap = usize::try_from(omitted.count).unwrap_or(usize::MAX).saturating_sub(start.len());
            let parts = plan::TranscriptParts { start: &start, gap, rest: &history[..cut] };
            plan::summary_request_of(&with.model, parts, focus, window_chars)
        }
    };
    // Only the summary request waits on the network, so only it can be interrupted; the
    // rows below are written all or (on a store error) not at all before the next turn.
    let summary = tokio::select! {
        s = plan::summarise(with.provider.as_ref(), &request) => match s {
            Ok(s) => s,
            Err(e) => return Err((history, format!("could not summarise: {e}"))),
        },
        _ = cancel.cancelled() => return Err((history, "interrupted".into())),
    };
    let kept_from = planned.cut;
    let new_history = plan::apply(history.clone(), planned.cut, &summary);
    // new_history = [summary] + history[kept_from..]
    let summary_message = &new_history[0];
    let mut rows = vec![to_stored(summary_message, Some(COMPACTION_KIND.into()))];
    for m in &history[kept_from..] {
        rows.push(to_stored(m, Some(format!("{COPY_PREFIX}{}", "kept"))));
    }
    // One transaction: a crash never leaves a summary without the messages it keeps (the
    // model's context starts at the summary row, so a half-written tail would be lost).
    if let Err(e) = with.store.append_messages(&with.session_id, rows).await {
        return Err((history, format!("could not save the compaction: {e}")));
    }
    let left_in_store = omitted.map_or(0, |o| usize::try_from(o.count).unwrap_or(usize::MAX));
    Ok(Compacted { history: new_history, summarised: kept_from.saturating_add(left_in_store) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::store::StoredMessage;

    fn row(kind: Option<&str>) -> StoredMessage {
        StoredMessage {
            role: crate::engine::llm::Role::User,
            content: Some("x".into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            display_kind: kind.map(str::to_string),
            origin: None,
        }
    }

    #[test]
    fn a_copy_keeps_its_original_kind() {
        let copy = row(Some("copy:kept"));
        assert!(is_copy(&copy));
        assert!(!is_copy(&row(Some("compaction"))) && !is_copy(&row(None)));
        assert_eq!(original_kind(Some("copy:kept")), Some("kept"));
        assert_eq!(original_kind(Some("oob")), Some("oob"));
    }
}
