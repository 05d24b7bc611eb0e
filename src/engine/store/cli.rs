//! The text `talaria sessions list` and `talaria sessions search` print.

use super::{format_utc_minute, Store, StoreError};

const TITLE_CHARS: usize = 60;

/// `talaria sessions list [--limit N]`: most recently updated first.
pub async fn cli_list(store: &Store, limit: usize) -> Result<String, StoreError> {
    let sessions = store.list_sessions(limit).await?;
    if sessions.is_empty() {
        return Ok("No sessions yet.\n".to_string());
    }
    let mut out = format!("{:<20}  {:<16}  {:>5}  TITLE\n", "ID", "UPDATED (UTC)", "MSGS");
    for s in &sessions {
        let title = s.title.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| s.first_line.clone());
        let title = if title.is_empty() { "(untitled)".to_string() } else { clean(&title, TITLE_CHARS) };
        out.push_str(&format!(
            "{:<20}  {:<16}  {:>5}  {}\n",
            s.id,
            format_utc_minute(s.updated_at),
            s.message_count,
            title
        ));
    }
    Ok(out)
}

/// `talaria sessions search <query>`: matching messages grouped under their session,
/// best first. The query is plain words; punctuation is harmless.
pub async fn cli_search(store: &Store, query: &str, limit: usize) -> Result<String, StoreError> {
    let hits = store.search(query, limit).await?;
    if hits.is_empty() {
        return Ok(format!("No matches for {}.\n", clean(query, TITLE_CHARS)));
    }
    Ok(format_hits(&hits))
}

/// Hits grouped by session (sessions in the order of their best hit), each session once
/// and each distinct line once within it.
fn format_hits(hits: &[super::SearchHit]) -> String {
    let mut order: Vec<&str> = Vec::new();
    for hit in hits {
        if !order.contains(&hit.session_id.as_str()) {
            order.push(&hit.session_id);
        }
    }
    let mut out = String::new();
    for session in order {
        let mut seen: Vec<String> = Vec::new();
        for hit in hits.iter().filter(|h| h.session_id == session) {
            if seen.is_empty() {
                let title = hit.title.as_deref().map(|t| clean(t, TITLE_CHARS)).unwrap_or_else(|| "(untitled)".into());
                out.push_str(&format!("{}  {}\n", hit.session_id, title));
            }
            let line = format!("  {}: {}\n", hit.role, clean(&hit.snippet, 200));
            if !seen.contains(&line) {
                out.push_str(&line);
                seen.push(line);
            }
        }
    }
    out
}

/// One line, no escape sequences, at most `max` characters: safe to print to a terminal.
fn clean(text: &str, max: usize) -> String {
    let line = crate::text::strip_ansi(text).split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::{clean, format_hits};
    use crate::engine::store::SearchHit;

    #[test]
    fn each_session_and_each_hit_is_printed_once() {
        let hit = |s: &str, role: &str, text: &str| SearchHit {
            session_id: s.into(),
            title: Some(format!("title {s}")),
            role: role.into(),
            snippet: text.into(),
        };
        let hits = vec![
            hit("a", "assistant", "»goals«"),
            hit("a", "assistant", "»goals«"),
            hit("b", "user", "other »goals«"),
            hit("a", "user", "tell me about »goals«"),
        ];
        assert_eq!(
            format_hits(&hits),
            "a  title a\n  assistant: »goals«\n  user: tell me about »goals«\nb  title b\n  user: other »goals«\n"
        );
    }

    #[test]
    fn printed_text_is_one_safe_line() {
        assert_eq!(clean("a\x1b]52;c;aGk=\x07b\nc", 10), "ab c");
        assert_eq!(clean("abcdef", 4), "abc…");
    }
}
