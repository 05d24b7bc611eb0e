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
    let mut out = String::new();
    let mut last_session: Option<&str> = None;
    for hit in &hits {
        if last_session != Some(hit.session_id.as_str()) {
            let title = hit.title.as_deref().map(|t| clean(t, TITLE_CHARS)).unwrap_or_else(|| "(untitled)".into());
            out.push_str(&format!("{}  {}\n", hit.session_id, title));
            last_session = Some(hit.session_id.as_str());
        }
        out.push_str(&format!("  {}: {}\n", hit.role, clean(&hit.snippet, 200)));
    }
    Ok(out)
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
    use super::clean;

    #[test]
    fn printed_text_is_one_safe_line() {
        assert_eq!(clean("a\x1b]52;c;aGk=\x07b\nc", 10), "ab c");
        assert_eq!(clean("abcdef", 4), "abc…");
    }
}
