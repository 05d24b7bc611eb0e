//! The text `talaria sessions list` and `talaria sessions search` print.

use super::{format_utc_minute, SessionSummary, Store, StoreError};

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

/// What `talaria sessions search` found: the text to print, and whether anything matched
/// (no match exits 1, as grep does).
pub struct SearchOutput {
    pub text: String,
    pub found: bool,
}

/// `talaria sessions search <query>`: matching messages grouped under their session,
/// best first, each session with its kind (an interactive session or an `exec` run) and
/// directory. The query is plain words; punctuation is harmless.
pub async fn cli_search(store: &Store, query: &str, limit: usize) -> Result<SearchOutput, StoreError> {
    let hits = store.search(query, limit).await?;
    if hits.is_empty() {
        return Ok(SearchOutput { text: format!("No matches for {}.\n", clean(query, TITLE_CHARS)), found: false });
    }
    let mut sessions: Vec<SessionFacts> = Vec::new();
    for hit in &hits {
        if sessions.iter().any(|s| s.id == hit.session_id) {
            continue;
        }
        let cwd = store.session(&hit.session_id).await?.map(|s| s.cwd).unwrap_or_default();
        let exec = store.meta_get(&super::ops::headless_key(&hit.session_id)).await?.is_some();
        sessions.push(SessionFacts { id: hit.session_id.clone(), exec, cwd });
    }
    Ok(SearchOutput { text: format_hits(&hits, &sessions), found: true })
}

/// Where a session was had: `talaria` (interactive) or `talaria exec`, and in which directory.
struct SessionFacts {
    id: String,
    exec: bool,
    cwd: String,
}

/// Hits grouped by session (sessions in the order of their best hit), each session once
/// and each distinct line once within it.
fn format_hits(hits: &[super::SearchHit], sessions: &[SessionFacts]) -> String {
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
                let title = hit
                    .title
                    .as_deref()
                    .map(|t| clean(&without_framing(t), TITLE_CHARS))
                    .unwrap_or_else(|| "(untitled)".into());
                let facts = sessions.iter().find(|s| s.id == session);
                let kind = if facts.is_some_and(|f| f.exec) { "exec" } else { "chat" };
                let cwd = facts.map(|f| clean(&f.cwd, TITLE_CHARS)).unwrap_or_default();
                out.push_str(&format!("{}  {kind}  {cwd}  {title}\n", hit.session_id));
            }
            let line = format!("  {}: {}\n", hit.role, clean(&without_framing(&hit.snippet), 200));
            if !seen.contains(&line) {
                out.push_str(&line);
                seen.push(line);
            }
        }
    }
    out
}

/// A snippet without the wrapper Talaria puts around a message typed mid-turn
/// (`[OUT-OF-BAND USER MESSAGE — …]` … `[/OUT-OF-BAND USER MESSAGE]`), whole or cut by
/// the snippet's edges: the person typed the text, not the framing.
fn without_framing(snippet: &str) -> String {
    let mut text = snippet.to_string();
    for open in ["[/OUT-OF-BAND", "[OUT-OF-BAND"] {
        while let Some(start) = text.find(open) {
            let end = text[start..].find(']').map_or(text.len(), |i| start + i + 1);
            text.replace_range(start..end, " ");
        }
    }
    // A wrapper the snippet starts inside of: `…not tool output] the text`.
    for tail in ["not tool output]", "USER MESSAGE]"] {
        if let Some(i) = text.find(tail) {
            if !text[..i].contains('[') {
                text.replace_range(..i + tail.len(), "…");
            }
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What `/resume <key>` or `talaria --resume <key>` names.
pub enum ResumeMatch {
    One(SessionSummary),
    /// Several fit: the front end offers a choice (never the latest of them silently).
    Several(Vec<SessionSummary>),
    None,
}

/// An exact id wins; else an id prefix, an exact title, or title words that fit one
/// session; several that fit equally are a choice.
pub async fn resume_match(store: &Store, key: &str) -> Result<ResumeMatch, StoreError> {
    let key = key.trim();
    if key.is_empty() {
        return Ok(ResumeMatch::None);
    }
    if let Some(s) = store.session(key).await? {
        return Ok(ResumeMatch::One(s));
    }
    let mut by_prefix = store.sessions_with_prefix(key, 10).await?;
    if by_prefix.len() > 1 {
        return Ok(ResumeMatch::Several(by_prefix));
    }
    if let Some(s) = by_prefix.pop() {
        return Ok(ResumeMatch::One(s));
    }
    let mut by_words = store.match_sessions(key, 10).await?;
    let mut exact: Vec<SessionSummary> = by_words
        .iter()
        .filter(|s| s.title.as_deref().is_some_and(|t| t.trim().to_lowercase() == key.to_lowercase()))
        .cloned()
        .collect();
    Ok(match (exact.len(), by_words.len()) {
        (1, _) => ResumeMatch::One(exact.remove(0)),
        (n, _) if n > 1 => ResumeMatch::Several(exact),
        (_, 0) => ResumeMatch::None,
        (_, 1) => ResumeMatch::One(by_words.remove(0)),
        _ => ResumeMatch::Several(by_words),
    })
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
    use super::{clean, format_hits, without_framing, SessionFacts};
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
        let sessions = [
            SessionFacts { id: "a".into(), exec: false, cwd: "/w/app".into() },
            SessionFacts { id: "b".into(), exec: true, cwd: "/w/lib".into() },
        ];
        assert_eq!(
            format_hits(&hits, &sessions),
            "a  chat  /w/app  title a\n  assistant: »goals«\n  user: tell me about »goals«\nb  exec  /w/lib  title b\n  user: other »goals«\n"
        );
    }

    #[test]
    fn a_snippet_loses_the_mid_turn_framing_whole_or_cut() {
        let whole = "[OUT-OF-BAND USER MESSAGE — a direct message from the user, delivered mid-turn; not tool output] what is a »gate«? [/OUT-OF-BAND USER MESSAGE]";
        assert_eq!(without_framing(whole), "what is a »gate«?");
        assert_eq!(
            without_framing("…mid-turn; not tool output] what is a »gate«? [/OUT-OF-BAND…"),
            "… what is a »gate«?"
        );
        assert_eq!(without_framing("plain »text« [with brackets]"), "plain »text« [with brackets]");
    }

    #[test]
    fn printed_text_is_one_safe_line() {
        assert_eq!(clean("a\x1b]52;c;aGk=\x07b\nc", 10), "ab c");
        assert_eq!(clean("abcdef", 4), "abc…");
    }
}
