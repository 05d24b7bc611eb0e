//! The SQL behind each store request. Everything here runs on the store thread.

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

use super::ids::{derive_title, first_line, now_ms, random_suffix, session_id_at};
use super::COMPACTION_KIND;
use super::{
    ContextRows, MessagePage, OmittedRows, SearchHit, SessionSummary, StoreError, StoredMessage, HISTORY_CAP_PER_CWD,
};
use crate::engine::llm::estimate::{estimate_parts, MESSAGE_OVERHEAD_TOKENS};
use crate::engine::llm::{Role, ToolCall};

/// How long `first_line` in a summary may be.
const FIRST_LINE_CHARS: usize = 80;

/// A user message counts as the start of an exchange (for /undo, /retry, titles and
/// first lines) only when the user typed it as a turn: heartbeat, goal, job-notice and
/// mid-turn deliveries carry a display kind and belong to the exchange they fall in.
const USER_TURN: &str = "role = 'user' AND display_kind IS NULL";

pub(crate) fn create_session(
    conn: &Connection,
    model: &str,
    cwd: &str,
    parent: Option<&str>,
) -> Result<String, StoreError> {
    let now = now_ms();
    for _ in 0..16 {
        let id = session_id_at(now, random_suffix());
        let inserted = conn.execute(
            "INSERT OR IGNORE INTO sessions (id, model, cwd, started_at, updated_at, parent_session_id)
             VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
            params![id, model, cwd, now, parent],
        )?;
        if inserted == 1 {
            return Ok(id);
        }
    }
    Err(StoreError("could not find a free session id after 16 tries; try again".into()))
}

/// Link sub-session `session_id` to job `num`, which runs it (DESIGN §14).
pub(crate) fn set_agent_job(conn: &Connection, session_id: &str, num: i64) -> Result<(), StoreError> {
    let n = conn.execute("UPDATE sessions SET agent_job = ?2 WHERE id = ?1", params![session_id, num])?;
    require_session(n, session_id)
}

/// The sub-session job `num` runs, if it is a sub-agent of `parent`: its id and title.
pub(crate) fn agent_of_job(conn: &Connection, num: i64, parent: &str) -> Result<Option<(String, String)>, StoreError> {
    Ok(conn
        .query_row(
            "SELECT id, COALESCE(title, '') FROM sessions WHERE agent_job = ?1 AND parent_session_id = ?2",
            params![num, parent],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// Tokens the sub-sessions of `parent` used, over every run: (session, prompt, completion).
pub(crate) fn sub_session_usage(conn: &Connection, parent: &str) -> Result<Vec<(String, u64, u64)>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT id, prompt_tokens, completion_tokens FROM sessions WHERE parent_session_id = ?1 ORDER BY started_at",
    )?;
    let rows = stmt.query_map([parent], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (id, p, c) = row?;
        out.push((id, p.max(0) as u64, c.max(0) as u64));
    }
    Ok(out)
}

pub(crate) fn end_session(conn: &Connection, session_id: &str, reason: &str) -> Result<(), StoreError> {
    let n = conn.execute(
        "UPDATE sessions SET ended_at = ?2, end_reason = ?3, updated_at = ?2 WHERE id = ?1",
        params![session_id, now_ms(), reason],
    )?;
    require_session(n, session_id)
}

fn require_session(updated: usize, session_id: &str) -> Result<(), StoreError> {
    if updated == 0 {
        return Err(StoreError(format!("no session with id {session_id}")));
    }
    Ok(())
}

pub(crate) fn append_message(conn: &mut Connection, session_id: &str, msg: &StoredMessage) -> Result<i64, StoreError> {
    // IMMEDIATE: another talaria on the same session must not take the same seq.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let seq = insert_message(&tx, session_id, msg)?;
    tx.commit()?;
    Ok(seq)
}

/// Append several messages in one transaction: all of them are stored or none (a
/// compaction's summary and its kept tail must never be found half written after a crash).
pub(crate) fn append_messages(
    conn: &mut Connection,
    session_id: &str,
    msgs: &[StoredMessage],
) -> Result<Vec<i64>, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let seqs = msgs.iter().map(|m| insert_message(&tx, session_id, m)).collect::<Result<Vec<_>, _>>()?;
    tx.commit()?;
    Ok(seqs)
}

/// Returns the new row's seq.
fn insert_message(tx: &rusqlite::Transaction<'_>, session_id: &str, msg: &StoredMessage) -> Result<i64, StoreError> {
    let tool_calls = if msg.tool_calls.is_empty() {
        None
    } else {
        Some(
            serde_json::to_string(&msg.tool_calls)
                .map_err(|e| StoreError(format!("could not encode tool calls: {e}")))?,
        )
    };
    let now = now_ms();
    // Every statement is prepared once per connection (SQLite's parser showed in profiles).
    let touched = tx
        .prepare_cached("UPDATE sessions SET updated_at = ?2, ended_at = NULL, end_reason = NULL WHERE id = ?1")?
        .execute(params![session_id, now])?;
    require_session(touched, session_id)?;
    let seq: i64 = tx
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?1")?
        .query_row([session_id], |r| r.get(0))?;
    tx.prepare_cached(
        "INSERT INTO messages (session_id, seq, role, content, tool_calls, tool_call_id, tool_name, display_kind,
                               created_at, active, origin)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1, ?10)",
    )?
    .execute(params![
        session_id,
        seq,
        msg.role.as_str(),
        msg.content,
        tool_calls,
        msg.tool_call_id,
        msg.tool_name,
        msg.display_kind,
        now,
        msg.origin.map(crate::protocol::Origin::as_str),
    ])?;
    if msg.role == Role::User && msg.display_kind.as_deref() == Some(super::jobs::NOTICE_KIND) {
        // The exit notice of a job reaches the model: mark it delivered in the same
        // transaction, so it is never told twice, across restarts too (DESIGN §4).
        tx.prepare_cached("UPDATE jobs SET notified = 1 WHERE session_id = ?1 AND notified = 0 AND notice = ?2")?
            .execute(params![session_id, msg.content])?;
    }
    // A title is derived only while the session has none (deriving one costs about as much
    // as the SQL of a short message).
    let untitled = || -> rusqlite::Result<bool> {
        tx.prepare_cached("SELECT title IS NULL FROM sessions WHERE id = ?1")?.query_row([session_id], |r| r.get(0))
    };
    if msg.role == Role::User && msg.display_kind.is_none() && untitled()? {
        if let Some(title) = msg.content.as_deref().and_then(derive_title) {
            tx.prepare_cached("UPDATE sessions SET title = ?2 WHERE id = ?1 AND title IS NULL")?
                .execute(params![session_id, title])?;
        }
    }
    Ok(seq)
}

pub(crate) fn load_messages(conn: &Connection, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT role, content, tool_calls, tool_call_id, tool_name, display_kind, seq, origin
         FROM messages WHERE session_id = ?1 AND active = 1 ORDER BY seq",
    )?;
    let rows = stmt.query_map([session_id], raw_message)?;
    let mut out = Vec::new();
    for row in rows {
        if let Some((msg, _)) = decode_message(session_id, row?)? {
            out.push(msg);
        }
    }
    Ok(out)
}

/// The last `limit` active messages before `before` (a seq; `None`: the end), in order, and
/// whether older ones exist. What a resumed transcript shows first, then page by page.
pub(crate) fn load_page(
    conn: &Connection,
    session_id: &str,
    before: Option<i64>,
    limit: usize,
) -> Result<MessagePage, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT role, content, tool_calls, tool_call_id, tool_name, display_kind, seq, origin
         FROM messages WHERE session_id = ?1 AND active = 1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
    )?;
    let rows = stmt
        .query_map(params![session_id, before.unwrap_or(i64::MAX), limit.min(i64::MAX as usize) as i64], raw_message)?;
    let mut messages = Vec::new();
    let mut first_seq = before;
    for row in rows {
        let row = row?;
        first_seq = Some(row.6);
        if let Some((msg, _)) = decode_message(session_id, row)? {
            messages.push(msg);
        }
    }
    messages.reverse();
    let earlier = match first_seq {
        Some(seq) => conn
            .prepare_cached("SELECT seq FROM messages WHERE session_id = ?1 AND active = 1 AND seq < ?2 LIMIT 1")?
            .query_row(params![session_id, seq], |_| Ok(()))
            .optional()?
            .map(|()| seq),
        None => None,
    };
    Ok(MessagePage { messages, earlier })
}

/// `Store::load_context`: walk back from the end to the last compaction row, keeping rows
/// while their estimated tokens fit `budget`; stop at the last user message that fits (a
/// turn is never split) and describe what is left before it.
pub(crate) fn load_context(
    conn: &Connection,
    session_id: &str,
    budget: Option<u64>,
) -> Result<ContextRows, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT role, content, tool_calls, tool_call_id, tool_name, display_kind, seq, origin
         FROM messages WHERE session_id = ?1 AND active = 1 ORDER BY seq DESC",
    )?;
    let rows = stmt.query_map([session_id], raw_message)?;
    // Newest first while reading.
    let mut held: Vec<(StoredMessage, i64)> = Vec::new();
    let mut tokens = 0u64;
    // How many of `held` make the context start at a user message within the budget.
    let mut start_at: Option<usize> = None;
    let mut over = false;
    for row in rows {
        let Some((message, seq)) = decode_message(session_id, row?)? else { continue };
        tokens = tokens.saturating_add(estimate_stored(&message));
        if budget.is_some_and(|b| tokens > b) && start_at.is_some() {
            over = true;
            break;
        }
        let compaction = message.display_kind.as_deref() == Some(COMPACTION_KIND);
        let user = message.role == Role::User;
        held.push((message, seq));
        // Past the budget with no user message yet: the last turn is read whole anyway.
        if user && (start_at.is_none() || budget.is_none_or(|b| tokens <= b)) {
            start_at = Some(held.len());
        }
        if compaction {
            break;
        }
    }
    drop(stmt);
    let omitted = match (over, start_at) {
        (true, Some(keep)) => {
            held.truncate(keep);
            let before = held.last().map_or(i64::MAX, |(_, seq)| *seq);
            Some(omitted_before(conn, session_id, before)?)
        }
        _ => None,
    };
    let messages = held.into_iter().rev().map(|(m, _)| m).collect();
    Ok(ContextRows { messages, omitted })
}

/// The active rows of the context before seq `before`: from the last compaction row
/// before it (or the first row), with their count and estimated tokens.
fn omitted_before(conn: &Connection, session_id: &str, before: i64) -> Result<OmittedRows, StoreError> {
    let from: i64 = conn
        .prepare_cached(
            "SELECT COALESCE(
                (SELECT MAX(seq) FROM messages
                  WHERE session_id = ?1 AND active = 1 AND seq < ?2 AND display_kind = ?3),
                (SELECT MIN(seq) FROM messages WHERE session_id = ?1 AND active = 1), 0)",
        )?
        .query_row(params![session_id, before, COMPACTION_KIND], |r| r.get(0))?;
    let (count, chars): (i64, i64) = conn
        .prepare_cached(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(COALESCE(content, '')) + LENGTH(COALESCE(tool_calls, ''))
                                           + LENGTH(COALESCE(tool_call_id, ''))), 0)
             FROM messages WHERE session_id = ?1 AND active = 1 AND seq >= ?2 AND seq < ?3",
        )?
        .query_row(params![session_id, from, before], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let count = count.max(0) as u64;
    let tokens = (chars.max(0) as u64).div_ceil(4).saturating_add(count.saturating_mul(MESSAGE_OVERHEAD_TOKENS));
    Ok(OmittedRows { from, before, count, tokens })
}

/// `Store::load_omitted_start`.
pub(crate) fn load_omitted_start(
    conn: &Connection,
    session_id: &str,
    omitted: OmittedRows,
    max: usize,
    size: fn(&StoredMessage) -> usize,
) -> Result<Vec<StoredMessage>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT role, content, tool_calls, tool_call_id, tool_name, display_kind, seq, origin
         FROM messages WHERE session_id = ?1 AND active = 1 AND seq >= ?2 AND seq < ?3 ORDER BY seq",
    )?;
    let rows = stmt.query_map(params![session_id, omitted.from, omitted.before], raw_message)?;
    let mut out = Vec::new();
    let mut total = 0usize;
    for row in rows {
        let Some((message, _)) = decode_message(session_id, row?)? else { continue };
        total = total.saturating_add(size(&message));
        out.push(message);
        if total >= max {
            break;
        }
    }
    Ok(out)
}

type RawMessage =
    (String, Option<String>, Option<String>, Option<String>, Option<String>, Option<String>, i64, Option<String>);

fn raw_message(r: &Row<'_>) -> rusqlite::Result<RawMessage> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?))
}

fn decode_message(session_id: &str, raw: RawMessage) -> Result<Option<(StoredMessage, i64)>, StoreError> {
    let (role, content, tool_calls, tool_call_id, tool_name, display_kind, seq, origin) = raw;
    // A row of a role this version does not know is not part of the conversation.
    let Some(role) = Role::parse(&role) else { return Ok(None) };
    let tool_calls: Vec<ToolCall> = match tool_calls {
        Some(json) => serde_json::from_str(&json).map_err(|e| {
            StoreError(format!("session {session_id}: a stored message has unreadable tool calls ({e})"))
        })?,
        None => Vec::new(),
    };
    let origin = origin.as_deref().and_then(crate::protocol::Origin::parse);
    Ok(Some((StoredMessage { role, content, tool_calls, tool_call_id, tool_name, display_kind, origin }, seq)))
}

const SUMMARY_SELECT: &str = "
SELECT s.id, s.title, s.model, s.cwd, s.started_at, s.updated_at,
       (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.active = 1),
       (SELECT m.content FROM messages m
         WHERE m.session_id = s.id AND m.active = 1 AND m.role = 'user' AND m.display_kind IS NULL
         ORDER BY m.seq LIMIT 1)
FROM sessions s";

fn summary(r: &Row<'_>) -> rusqlite::Result<SessionSummary> {
    let first: Option<String> = r.get(7)?;
    Ok(SessionSummary {
        id: r.get(0)?,
        title: r.get(1)?,
        model: r.get(2)?,
        cwd: r.get(3)?,
        started_at: r.get(4)?,
        updated_at: r.get(5)?,
        message_count: r.get::<_, i64>(6)?.max(0) as u64,
        first_line: first.map(|t| first_line(&t, FIRST_LINE_CHARS)).unwrap_or_default(),
    })
}

fn one_summary(
    conn: &Connection,
    filter: &str,
    param: &dyn rusqlite::ToSql,
) -> Result<Option<SessionSummary>, StoreError> {
    let sql = format!("{SUMMARY_SELECT} WHERE {filter} ORDER BY s.updated_at DESC, s.rowid DESC LIMIT 1");
    Ok(conn.query_row(&sql, [param], summary).optional()?)
}

pub(crate) fn session(conn: &Connection, id: &str) -> Result<Option<SessionSummary>, StoreError> {
    one_summary(conn, "s.id = ?1", &id)
}

/// Sessions whose id starts with `prefix`, latest first (at most `limit`).
pub(crate) fn sessions_with_prefix(
    conn: &Connection,
    prefix: &str,
    limit: usize,
) -> Result<Vec<SessionSummary>, StoreError> {
    let sql = format!(
        "{SUMMARY_SELECT} WHERE substr(s.id, 1, length(?1)) = ?1 ORDER BY s.updated_at DESC, s.rowid DESC LIMIT {}",
        limit.min(1000)
    );
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map([prefix], summary)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(crate) fn find_session(conn: &Connection, id_or_title: &str) -> Result<Option<SessionSummary>, StoreError> {
    let needle = id_or_title.trim();
    if needle.is_empty() {
        return Ok(None);
    }
    if let Some(found) = session(conn, needle)? {
        return Ok(Some(found));
    }
    if let Some(found) = one_summary(conn, "substr(s.id, 1, length(?1)) = ?1", &needle)? {
        return Ok(Some(found));
    }
    one_summary(conn, "s.title = ?1 COLLATE NOCASE", &needle)
}

pub(crate) fn match_sessions(conn: &Connection, words: &str, limit: usize) -> Result<Vec<SessionSummary>, StoreError> {
    let words: Vec<String> = words.split_whitespace().map(|w| w.to_lowercase()).collect();
    if words.is_empty() {
        return Ok(Vec::new());
    }
    let like = |w: &str| format!("%{}%", w.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
    let filter: Vec<String> =
        (1..=words.len()).map(|i| format!("lower(COALESCE(s.title, '')) LIKE ?{i} ESCAPE '\\'")).collect();
    let sql = format!(
        "{SUMMARY_SELECT} WHERE {} ORDER BY s.updated_at DESC, s.rowid DESC LIMIT {}",
        filter.join(" AND "),
        limit.min(1000)
    );
    let params: Vec<String> = words.iter().map(|w| like(w)).collect();
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(params.iter()), summary)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(crate) fn latest_in_cwd(conn: &Connection, cwd: &str) -> Result<Option<SessionSummary>, StoreError> {
    one_summary(conn, "s.cwd = ?1", &cwd)
}

/// The state_meta key that marks a session `talaria exec` started.
pub(crate) fn headless_key(session_id: &str) -> String {
    format!("headless:{session_id}")
}

/// The latest session in `cwd` that an interactive talaria started (not an `exec` run).
pub(crate) fn latest_interactive_in_cwd(conn: &Connection, cwd: &str) -> Result<Option<SessionSummary>, StoreError> {
    one_summary(conn, "s.cwd = ?1 AND NOT EXISTS (SELECT 1 FROM state_meta k WHERE k.key = 'headless:' || s.id)", &cwd)
}

/// Delete a session that never got a message (nor a goal or heartbeat): opening talaria
/// and leaving saves nothing. True when it was deleted.
pub(crate) fn delete_if_empty(conn: &Connection, session_id: &str) -> Result<bool, StoreError> {
    let n = conn.execute(
        "DELETE FROM sessions WHERE id = ?1
           AND NOT EXISTS (SELECT 1 FROM messages WHERE session_id = ?1)
           AND NOT EXISTS (SELECT 1 FROM state_meta WHERE key IN ('goal:' || ?1, 'heartbeat:' || ?1))",
        [session_id],
    )?;
    if n == 1 {
        conn.execute("DELETE FROM state_meta WHERE key = ?1", [headless_key(session_id)])?;
    }
    Ok(n == 1)
}

pub(crate) fn list_sessions(conn: &Connection, limit: usize) -> Result<Vec<SessionSummary>, StoreError> {
    let sql = format!("{SUMMARY_SELECT} ORDER BY s.updated_at DESC, s.rowid DESC LIMIT ?1");
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map([limit.min(i64::MAX as usize) as i64], summary)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(crate) fn set_title(conn: &Connection, session_id: &str, title: &str) -> Result<(), StoreError> {
    let title = title.trim();
    if title.is_empty() {
        return Err(StoreError("a title cannot be empty".into()));
    }
    let n = conn.execute("UPDATE sessions SET title = ?2 WHERE id = ?1", params![session_id, title])?;
    require_session(n, session_id)
}

/// User text as an FTS5 query: each word becomes a quoted phrase (so `-`, `"`, `(`,
/// `*`, `AND`, `NEAR` are just text), all of them required. `None` when no word has
/// a letter or digit in it.
pub(crate) fn fts_query(input: &str) -> Option<String> {
    let terms: Vec<String> = input
        .split_whitespace()
        .filter(|t| t.chars().any(char::is_alphanumeric))
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" "))
}

pub(crate) fn search(conn: &Connection, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
    let Some(fts) = fts_query(query) else {
        return Ok(Vec::new());
    };
    let mut stmt = conn.prepare_cached(
        "SELECT m.session_id, s.title, m.role, snippet(messages_fts, 0, '»', '«', '…', 16)
         FROM messages_fts
         JOIN messages m ON m.id = messages_fts.rowid
         JOIN sessions s ON s.id = m.session_id
         WHERE messages_fts MATCH ?1 AND m.active = 1
         ORDER BY rank LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![fts, limit.min(i64::MAX as usize) as i64], |r| {
        Ok(SearchHit {
            session_id: r.get(0)?,
            title: r.get(1)?,
            role: r.get(2)?,
            snippet: one_line(&r.get::<_, String>(3)?),
        })
    })?;
    rows.collect::<Result<_, _>>().map_err(|e| StoreError(format!("searching for {query:?}: {e}")))
}

/// Escape sequences removed and whitespace runs (newlines too) folded to one space.
fn one_line(text: &str) -> String {
    crate::text::strip_ansi(text).split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(crate) fn deactivate_last_exchanges(
    conn: &mut Connection,
    session_id: &str,
    n: usize,
) -> Result<Option<String>, StoreError> {
    if n == 0 {
        return Ok(None);
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let earliest: Option<(i64, Option<String>)> = {
        let sql = format!(
            "SELECT seq, content FROM messages WHERE session_id = ?1 AND active = 1 AND {USER_TURN}
             ORDER BY seq DESC LIMIT ?2"
        );
        let mut stmt = tx.prepare(&sql)?;
        let rows = stmt.query_map(params![session_id, n.min(i64::MAX as usize) as i64], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
        })?;
        rows.collect::<Result<Vec<_>, _>>()?.pop()
    };
    let Some((seq, text)) = earliest else {
        return Ok(None);
    };
    tx.execute(
        "UPDATE messages SET active = 0 WHERE session_id = ?1 AND active = 1 AND seq >= ?2",
        params![session_id, seq],
    )?;
    tx.execute("UPDATE sessions SET updated_at = ?2 WHERE id = ?1", params![session_id, now_ms()])?;
    tx.commit()?;
    Ok(Some(text.unwrap_or_default()))
}

/// The sequence number the session's next message gets.
pub(crate) fn next_seq(conn: &Connection, session_id: &str) -> Result<i64, StoreError> {
    Ok(conn.query_row("SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?1", [session_id], |r| {
        r.get(0)
    })?)
}

/// Rewind's conversation part: every message from `seq` on leaves the history (kept,
/// inactive). Returns the text of the first user message taken out.
pub(crate) fn deactivate_from(conn: &mut Connection, session_id: &str, seq: i64) -> Result<Option<String>, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let first: Option<Option<String>> = tx
        .query_row(
            &format!(
                "SELECT content FROM messages WHERE session_id = ?1 AND active = 1 AND seq >= ?2 AND {USER_TURN}
                 ORDER BY seq LIMIT 1"
            ),
            params![session_id, seq],
            |r| r.get(0),
        )
        .optional()?;
    tx.execute(
        "UPDATE messages SET active = 0 WHERE session_id = ?1 AND active = 1 AND seq >= ?2",
        params![session_id, seq],
    )?;
    tx.execute("UPDATE sessions SET updated_at = ?2 WHERE id = ?1", params![session_id, now_ms()])?;
    tx.commit()?;
    Ok(first.flatten())
}

pub(crate) fn meta_get(conn: &Connection, key: &str) -> Result<Option<String>, StoreError> {
    Ok(conn.query_row("SELECT value FROM state_meta WHERE key = ?1", [key], |r| r.get(0)).optional()?)
}

pub(crate) fn meta_set(conn: &Connection, key: &str, value: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO state_meta (key, value, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        params![key, value, now_ms()],
    )?;
    Ok(())
}

pub(crate) fn meta_delete(conn: &Connection, key: &str) -> Result<(), StoreError> {
    conn.execute("DELETE FROM state_meta WHERE key = ?1", [key])?;
    Ok(())
}

fn pending_key(session_id: &str) -> String {
    format!("pending:{session_id}")
}

pub(crate) fn pending_set(conn: &Connection, session_id: &str, pending: &[String]) -> Result<(), StoreError> {
    if pending.is_empty() {
        return meta_delete(conn, &pending_key(session_id));
    }
    let json = serde_json::to_string(pending).map_err(|e| StoreError(format!("encoding pending messages: {e}")))?;
    meta_set(conn, &pending_key(session_id), &json)
}

pub(crate) fn pending_get(conn: &Connection, session_id: &str) -> Result<Vec<String>, StoreError> {
    match meta_get(conn, &pending_key(session_id))? {
        None => Ok(Vec::new()),
        Some(json) => serde_json::from_str(&json).map_err(|e| {
            StoreError(format!(
                "the pending messages of session {session_id} are unreadable ({e}); state_meta key {}",
                pending_key(session_id)
            ))
        }),
    }
}

pub(crate) fn add_usage(conn: &Connection, session_id: &str, prompt: u64, completion: u64) -> Result<(), StoreError> {
    let n = conn.execute(
        "UPDATE sessions SET prompt_tokens = prompt_tokens + ?2, completion_tokens = completion_tokens + ?3
         WHERE id = ?1",
        params![session_id, prompt.min(i64::MAX as u64) as i64, completion.min(i64::MAX as u64) as i64],
    )?;
    require_session(n, session_id)
}

pub(crate) fn session_usage(conn: &Connection, session_id: &str) -> Result<Option<(u64, u64)>, StoreError> {
    let row: Option<(i64, i64)> = conn
        .query_row("SELECT prompt_tokens, completion_tokens FROM sessions WHERE id = ?1", [session_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    Ok(row.map(|(p, c)| (p.max(0) as u64, c.max(0) as u64)))
}

pub(crate) fn history_push(conn: &mut Connection, cwd: &str, text: &str) -> Result<(), StoreError> {
    if text.trim().is_empty() {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let last: Option<String> = tx
        .query_row("SELECT text FROM input_history WHERE cwd = ?1 ORDER BY id DESC LIMIT 1", [cwd], |r| r.get(0))
        .optional()?;
    if last.as_deref() == Some(text) {
        return Ok(());
    }
    tx.execute("INSERT INTO input_history (cwd, text, created_at) VALUES (?1, ?2, ?3)", params![cwd, text, now_ms()])?;
    tx.execute(
        "DELETE FROM input_history WHERE cwd = ?1 AND id <= (
            SELECT id FROM input_history WHERE cwd = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
        params![cwd, HISTORY_CAP_PER_CWD as i64],
    )?;
    tx.commit()?;
    Ok(())
}

pub(crate) fn history_list(conn: &Connection, cwd: &str, limit: usize) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT text FROM (SELECT id, text FROM input_history WHERE cwd = ?1 ORDER BY id DESC LIMIT ?2)
         ORDER BY id",
    )?;
    let rows = stmt.query_map(params![cwd, limit.min(i64::MAX as usize) as i64], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The same estimate for a stored row (the part of a long session left in the database).
fn estimate_stored(row: &StoredMessage) -> u64 {
    estimate_parts(row.content.as_deref().unwrap_or(""), &row.tool_calls, row.tool_call_id.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_text_becomes_quoted_phrases() {
        assert_eq!(fts_query("cargo test"), Some("\"cargo\" \"test\"".to_string()));
        assert_eq!(fts_query("foo\"bar"), Some("\"foo\"\"bar\"".to_string()));
        assert_eq!(fts_query("a-b"), Some("\"a-b\"".to_string()));
        assert_eq!(fts_query("( ) * \" -"), None);
        assert_eq!(fts_query("   "), None);
    }

    #[test]
    fn snippets_are_one_clean_line() {
        assert_eq!(one_line("a\n\n  b\x1b[31m c\x1b[0m\td"), "a b c d");
    }
}
