//! The session database (DESIGN §7): `state.db` with sessions, messages, state_meta,
//! per-directory input history and an FTS5 index over message text.
//!
//! One thread owns the SQLite connection; a cloneable [`Store`] sends it requests over a
//! channel and awaits a oneshot reply, so no SQL ever runs on the UI thread. A request
//! is queued when the method is *called* (not when its future is first polled), so
//! writes happen in the order of the calls, and a write whose future is dropped still
//! happens. Timestamps are Unix milliseconds.

pub mod cli;
mod ids;
pub mod jobs;
mod ops;
mod schema;

use std::fmt;
use std::future::Future;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::engine::llm::{Role, ToolCall};

pub(crate) use ids::format_utc_minute;
pub use schema::SCHEMA_VERSION;

/// The display kind of a compaction summary row: the stored history starts at the latest one.
pub(crate) const COMPACTION_KIND: &str = "compaction";

/// Input history entries kept per working directory; older ones are dropped.
pub const HISTORY_CAP_PER_CWD: usize = 1_000;

/// How long a write waits for another process holding the database lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A message row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    pub role: Role,
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    /// How the UI shows it when it is not plain: e.g. "oob" (delivered mid-turn),
    /// "heartbeat", "goal", "job_notice", "tool:<summary>", "compaction".
    /// A user message without one is a turn the user typed: it starts an exchange
    /// (/undo, /retry) and can give the session its title.
    pub display_kind: Option<String>,
    /// Where a user-role row came from (None for other roles).
    #[serde(default)]
    pub origin: Option<crate::protocol::Origin>,
}

/// A window of a session's active messages (`Store::load_page`).
#[derive(Debug, Clone, PartialEq)]
pub struct MessagePage {
    /// Oldest first.
    pub messages: Vec<StoredMessage>,
    /// Older messages exist: the seq to ask for the page before this one with.
    pub earlier: Option<i64>,
}

/// The part of a session the model gets (`Store::load_context`): the messages from the
/// last compaction on; of a longer stretch only its end, the older ones left here.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextRows {
    /// Oldest first; starts at a user message (a whole turn) when older ones are left out.
    pub messages: Vec<StoredMessage>,
    pub omitted: Option<OmittedRows>,
}

/// The older messages of a context that were not read (`ContextRows::omitted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OmittedRows {
    /// Seq of the first of them: the last compaction row, or the session's first message.
    pub from: i64,
    /// Seq of the first message read: they all come before it.
    pub before: i64,
    /// How many there are.
    pub count: u64,
    /// Their tokens, estimated from their length in the database (a quarter of the
    /// characters of text, tool calls and ids, plus the per-message overhead).
    pub tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub id: String,
    pub title: Option<String>,
    pub(crate) model: String,
    pub(crate) cwd: String,
    /// Unix milliseconds.
    pub(crate) started_at: i64,
    /// Unix milliseconds: creation, the last message, /undo, or the end of the session.
    pub(crate) updated_at: i64,
    /// Active messages.
    pub message_count: u64,
    /// First line of the first typed user message ("" when there is none).
    pub first_line: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    pub session_id: String,
    pub title: Option<String>,
    pub role: String,
    /// One line of the matching text; matches are marked `»like this«`.
    pub snippet: String,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub(crate) String);

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError(format!("session database: {e}"))
    }
}

type Request = Box<dyn FnOnce(&mut Connection) + Send>;

/// A cloneable handle; all SQL runs on one thread off the UI. The thread ends (and the
/// database is closed) when the last handle is dropped.
#[derive(Clone)]
pub struct Store {
    requests: mpsc::Sender<Request>,
    path: Arc<PathBuf>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Open (creating and migrating as needed) the database at `path`. Blocking: call it
    /// at start-up, before the UI runs.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        check_test_guard(path)?;
        create_private_file(path)?;
        let mut conn = Connection::open(path).map_err(|e| StoreError(format!("opening {}: {e}", path.display())))?;
        configure(&conn).map_err(|e| StoreError(format!("opening {}: {e}", path.display())))?;
        schema::migrate(&mut conn).map_err(|e| StoreError(format!("{}: {e}", path.display())))?;

        let (requests, inbox) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("talaria-store".into())
            .spawn(move || serve(conn, inbox))
            .map_err(|e| StoreError(format!("could not start the database thread: {e}")))?;
        Ok(Store { requests, path: Arc::new(path.to_path_buf()) })
    }

    /// Open the database at `path` for reading only (`talaria sessions`): works on a
    /// read-only file, never creates or migrates one; a write through it fails. A missing
    /// file is created as by `open`.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        if !path.exists() {
            return Store::open(path);
        }
        check_test_guard(path)?;
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| StoreError(format!("opening {} (read-only): {e}", path.display())))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| StoreError(format!("opening {}: {e}", path.display())))?;
        stable_plans(&conn).map_err(|e| StoreError(format!("opening {}: {e}", path.display())))?;
        let (requests, inbox) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("talaria-store".into())
            .spawn(move || serve(conn, inbox))
            .map_err(|e| StoreError(format!("could not start the database thread: {e}")))?;
        Ok(Store { requests, path: Arc::new(path.to_path_buf()) })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Let the database grow by at most `pages` more pages (SQLite's `max_page_count`); a
    /// write past that fails as on a full disk (`SQLITE_FULL`). For fault tests.
    pub fn limit_growth(&self, pages: u64) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        self.call(move |c| {
            let count: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            c.query_row(
                &format!("PRAGMA max_page_count = {}", count.saturating_add(i64::try_from(pages).unwrap_or(i64::MAX))),
                [],
                |_| Ok(()),
            )?;
            Ok(())
        })
    }

    /// Queue `f` for the store thread now; the returned future yields its result.
    fn call<T, F>(&self, f: F) -> impl Future<Output = Result<T, StoreError>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let queued = self.requests.send(Box::new(move |conn: &mut Connection| {
            let _ = reply.send(f(conn));
        }));
        async move {
            if queued.is_err() {
                return Err(StoreError("the database thread has stopped; restart talaria (see the log)".into()));
            }
            answer.await.map_err(|_| StoreError("a database request failed unexpectedly (see the log)".into()))?
        }
    }

    /// A new session; returns its id (e.g. `20261129-173000-3f2a`).
    pub fn create_session(
        &self,
        model: &str,
        cwd: &str,
        parent: Option<&str>,
    ) -> impl Future<Output = Result<String, StoreError>> + Send + 'static {
        let (model, cwd, parent) = (model.to_string(), cwd.to_string(), parent.map(str::to_string));
        self.call(move |c| ops::create_session(c, &model, &cwd, parent.as_deref()))
    }

    /// Link sub-session `session_id` to job `num`, which runs it.
    pub(crate) fn set_agent_job(
        &self,
        session_id: &str,
        num: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::set_agent_job(c, &sid, num))
    }

    /// The sub-session (id, title) job `num` runs, if it is a sub-agent of session `parent`.
    pub(crate) fn agent_of_job(
        &self,
        num: i64,
        parent: &str,
    ) -> impl Future<Output = Result<Option<(String, String)>, StoreError>> + Send + 'static {
        let parent = parent.to_string();
        self.call(move |c| ops::agent_of_job(c, num, &parent))
    }

    /// Tokens of each sub-session of `parent` over every run: (session, prompt, completion).
    pub(crate) fn sub_session_usage(
        &self,
        parent: &str,
    ) -> impl Future<Output = Result<Vec<(String, u64, u64)>, StoreError>> + Send + 'static {
        let parent = parent.to_string();
        self.call(move |c| ops::sub_session_usage(c, &parent))
    }

    /// Record why and when a session ended (a later message clears it again).
    pub fn end_session(
        &self,
        session_id: &str,
        reason: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let (sid, reason) = (session_id.to_string(), reason.to_string());
        self.call(move |c| ops::end_session(c, &sid, &reason))
    }

    /// Append a message at the end of the session; returns its seq. The first typed
    /// user message gives an untitled session its title.
    pub fn append_message(
        &self,
        session_id: &str,
        msg: StoredMessage,
    ) -> impl Future<Output = Result<i64, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::append_message(c, &sid, &msg))
    }

    /// Append several messages at the end of the session in one transaction: all are
    /// stored or none is.
    pub fn append_messages(
        &self,
        session_id: &str,
        msgs: Vec<StoredMessage>,
    ) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::append_messages(c, &sid, &msgs))
    }

    /// Active messages in order.
    pub fn load_messages(
        &self,
        session_id: &str,
    ) -> impl Future<Output = Result<Vec<StoredMessage>, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::load_messages(c, &sid))
    }

    /// The model's part of the session: the active messages from the last compaction on,
    /// read from the end; once they reach `budget` estimated tokens, the ones before the
    /// last user message that still fits stay in the database (`omitted`). `None`: all.
    pub fn load_context(
        &self,
        session_id: &str,
        budget: Option<u64>,
    ) -> impl Future<Output = Result<ContextRows, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::load_context(c, &sid, budget))
    }

    /// The first active messages of `omitted`, in order, until `size` of them adds up to
    /// `max` (at least one): the start of what a compaction summarises.
    pub fn load_omitted_start(
        &self,
        session_id: &str,
        omitted: OmittedRows,
        max: usize,
        size: fn(&StoredMessage) -> usize,
    ) -> impl Future<Output = Result<Vec<StoredMessage>, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::load_omitted_start(c, &sid, omitted, max, size))
    }

    /// The last `limit` active messages before seq `before` (`None`: the end), in order,
    /// and whether there are older ones: a long session's transcript loads page by page.
    pub fn load_page(
        &self,
        session_id: &str,
        before: Option<i64>,
        limit: usize,
    ) -> impl Future<Output = Result<MessagePage, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::load_page(c, &sid, before, limit))
    }

    pub fn session(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<SessionSummary>, StoreError>> + Send + 'static {
        let id = id.to_string();
        self.call(move |c| ops::session(c, &id))
    }

    /// Sessions whose id starts with `prefix`, latest first (at most `limit`).
    pub fn sessions_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<SessionSummary>, StoreError>> + Send + 'static {
        let prefix = prefix.trim().to_string();
        self.call(move |c| ops::sessions_with_prefix(c, &prefix, limit))
    }

    /// By exact id, id prefix, or title (latest match).
    pub fn find_session(
        &self,
        id_or_title: &str,
    ) -> impl Future<Output = Result<Option<SessionSummary>, StoreError>> + Send + 'static {
        let needle = id_or_title.to_string();
        self.call(move |c| ops::find_session(c, &needle))
    }

    /// Sessions whose title starts with `words` or contains every one of them (latest
    /// first, at most `limit`): what `/resume` offers when nothing matches exactly.
    pub fn match_sessions(
        &self,
        words: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<SessionSummary>, StoreError>> + Send + 'static {
        let words = words.to_string();
        self.call(move |c| ops::match_sessions(c, &words, limit))
    }

    /// The most recently updated session started in `cwd`.
    pub fn latest_in_cwd(
        &self,
        cwd: &str,
    ) -> impl Future<Output = Result<Option<SessionSummary>, StoreError>> + Send + 'static {
        let cwd = cwd.to_string();
        self.call(move |c| ops::latest_in_cwd(c, &cwd))
    }

    /// The latest session in `cwd` started interactively (not by `talaria exec`).
    pub fn latest_interactive_in_cwd(
        &self,
        cwd: &str,
    ) -> impl Future<Output = Result<Option<SessionSummary>, StoreError>> + Send + 'static {
        let cwd = cwd.to_string();
        self.call(move |c| ops::latest_interactive_in_cwd(c, &cwd))
    }

    /// Mark a session as started by `talaria exec` (`talaria -c` passes over it).
    pub fn mark_headless(&self, session_id: &str) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let key = ops::headless_key(session_id);
        self.call(move |c| ops::meta_set(c, &key, "1"))
    }

    /// Delete the session if it never got a message; true when it did.
    pub fn delete_if_empty(&self, session_id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send + 'static {
        let id = session_id.to_string();
        self.call(move |c| ops::delete_if_empty(c, &id))
    }

    /// Most recently updated first.
    pub fn list_sessions(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<SessionSummary>, StoreError>> + Send + 'static {
        self.call(move |c| ops::list_sessions(c, limit))
    }

    /// `/title`: replaces any title, derived or not. An empty title is an error.
    pub fn set_title(
        &self,
        session_id: &str,
        title: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let (sid, title) = (session_id.to_string(), title.to_string());
        self.call(move |c| ops::set_title(c, &sid, &title))
    }

    /// Full-text search over active messages of every session, best match first. The
    /// query is taken as plain words (all required); punctuation cannot break it.
    pub fn search(
        &self,
        query: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<SearchHit>, StoreError>> + Send + 'static {
        let query = query.to_string();
        self.call(move |c| ops::search(c, &query, limit))
    }

    /// Mark the last `n` exchanges (a user message and everything after it) inactive.
    /// Returns the text of the earliest user message deactivated.
    pub fn deactivate_last_exchanges(
        &self,
        session_id: &str,
        n: usize,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::deactivate_last_exchanges(c, &sid, n))
    }

    /// The sequence number the session's next message gets (rewind's conversation point).
    pub fn next_seq(&self, session_id: &str) -> impl Future<Output = Result<i64, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::next_seq(c, &sid))
    }

    /// Take every message from `seq` on out of the history (rewind's conversation part).
    pub fn deactivate_from(
        &self,
        session_id: &str,
        seq: i64,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::deactivate_from(c, &sid, seq))
    }

    pub fn meta_get(&self, key: &str) -> impl Future<Output = Result<Option<String>, StoreError>> + Send + 'static {
        let key = key.to_string();
        self.call(move |c| ops::meta_get(c, &key))
    }

    pub fn meta_set(&self, key: &str, value: &str) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let (key, value) = (key.to_string(), value.to_string());
        self.call(move |c| ops::meta_set(c, &key, &value))
    }

    pub fn meta_delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let key = key.to_string();
        self.call(move |c| ops::meta_delete(c, &key))
    }

    pub fn add_usage(
        &self,
        session_id: &str,
        prompt: u64,
        completion: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::add_usage(c, &sid, prompt, completion))
    }

    /// (prompt, completion) tokens so far; `None` for an unknown session.
    pub fn session_usage(
        &self,
        session_id: &str,
    ) -> impl Future<Output = Result<Option<(u64, u64)>, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::session_usage(c, &sid))
    }

    /// Replace the session's typed-but-undelivered messages (empty clears them).
    /// Kept in state_meta under `pending:<session_id>`.
    pub fn pending_set(
        &self,
        session_id: &str,
        pending: Vec<String>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::pending_set(c, &sid, &pending))
    }

    pub fn pending_get(
        &self,
        session_id: &str,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send + 'static {
        let sid = session_id.to_string();
        self.call(move |c| ops::pending_get(c, &sid))
    }

    /// Remember an input line for `cwd`. Blank lines and a repeat of the latest entry are
    /// skipped; only the newest [`HISTORY_CAP_PER_CWD`] entries are kept.
    pub fn history_push(&self, cwd: &str, text: &str) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let (cwd, text) = (cwd.to_string(), text.to_string());
        self.call(move |c| ops::history_push(c, &cwd, &text))
    }

    /// The newest `limit` entries for `cwd`, oldest first (the last one is what ↑ shows first).
    pub fn history_list(
        &self,
        cwd: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send + 'static {
        let cwd = cwd.to_string();
        self.call(move |c| ops::history_list(c, &cwd, limit))
    }

    /// Resolves once every request queued before it has been carried out.
    pub fn flush(&self) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        self.call(|_| Ok(()))
    }
}

/// The store thread: one request at a time, in arrival order. A panic inside a request
/// drops only that request's reply (its caller gets an error) and is logged.
///
/// SQLite's automatic WAL checkpoint would run inside whichever write crosses the
/// threshold (two fsyncs: tens of ms on a slow disk), so it is off and the thread
/// checkpoints when it has been idle for a moment instead — or when the WAL has grown past
/// [`WAL_CHECKPOINT_BYTES`]: a busy session (turns back to back, jobs recording) is never
/// idle that long, and a request count alone let the WAL reach 171 MB in the soak bench for
/// a 1.8 MB database.
fn serve(mut conn: Connection, inbox: mpsc::Receiver<Request>) {
    let wal = conn.path().map(|p| PathBuf::from(format!("{p}-wal")));
    let mut since_checkpoint = 0usize;
    loop {
        let request = match inbox.recv_timeout(CHECKPOINT_WHEN_IDLE_FOR) {
            Ok(request) => request,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if since_checkpoint > 0 {
                    checkpoint(&conn, "PASSIVE");
                    since_checkpoint = 0;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if std::panic::catch_unwind(AssertUnwindSafe(|| request(&mut conn))).is_err() {
            tracing::error!("a session database request panicked; the database thread carries on");
        }
        since_checkpoint += 1;
        if since_checkpoint % CHECK_WAL_EVERY == 0 && wal_bytes(wal.as_deref()) > WAL_CHECKPOINT_BYTES {
            checkpoint(&conn, "PASSIVE");
            since_checkpoint = 0;
        }
    }
    checkpoint(&conn, "TRUNCATE");
    tracing::debug!("session database closed");
}

const CHECKPOINT_WHEN_IDLE_FOR: std::time::Duration = std::time::Duration::from_millis(500);
/// How often (in requests) the thread looks at the WAL's size: one stat.
const CHECK_WAL_EVERY: usize = 16;
/// A WAL larger than this is checkpointed without waiting for a quiet moment.
const WAL_CHECKPOINT_BYTES: u64 = 4 << 20;
/// What SQLite truncates the WAL file to when it starts over after a checkpoint (without
/// it the file keeps its largest size for as long as the database is open).
const WAL_SIZE_LIMIT: i64 = 4 << 20;

/// The page cache's bound (KiB). SQLite's default, 2 MiB, filled as a long session's file
/// grew (the soak: a steady part of its memory growth); appends touch the tables' and the
/// search index's newest pages, and what a resume or search reads once is in the OS's
/// cache anyway.
const PAGE_CACHE_KIB: i64 = 512;

fn wal_bytes(wal: Option<&Path>) -> u64 {
    wal.and_then(|p| std::fs::metadata(p).ok()).map_or(0, |m| m.len())
}

fn checkpoint(conn: &Connection, mode: &str) {
    if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
        return;
    }
    let result = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(()));
    if let Err(e) = result {
        tracing::warn!(error = %e, "WAL checkpoint failed");
    }
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    stable_plans(conn)?;
    // Before the switch to WAL: on a first start the switch is the new file's first write,
    // and under the default (FULL) it waited for more fsyncs than the schema after it.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(mode, "the session database could not switch to WAL");
    }
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Checkpoints are run by the store thread when idle (see `serve`).
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
    conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)?;
    Ok(())
}

/// Query plans that do not depend on bound values (SQLite's QPSG). Without it SQLite
/// re-prepared the append's `MAX(seq)` query on every call — its parameter is marked as one
/// a better plan might follow from — and that cost as much as the rest of the append.
fn stable_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// Create the database file with mode 0600 before SQLite opens it (SQLite gives the
/// -wal and -shm files the same mode), and tighten an existing file that is looser.
fn create_private_file(path: &Path) -> Result<(), StoreError> {
    let fail = |what: &str, e: std::io::Error| StoreError(format!("{what} {}: {e}", path.display()));
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| fail("creating the directory for", e))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| fail("creating", e))?;
    let meta = file.metadata().map_err(|e| fail("reading", e))?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| fail("making private (chmod 600)", e))?;
    }
    Ok(())
}

/// With the test guard set, refuse a database inside the real home directory.
fn check_test_guard(path: &Path) -> Result<(), StoreError> {
    let mut paths = crate::paths::Paths::under(Path::new("/"));
    paths.state_db = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    paths.check_test_guard().map_err(|e| StoreError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes the connection's page cache holds now (`SQLITE_DBSTATUS_CACHE_USED`).
    fn cache_used(conn: &Connection) -> i32 {
        let (mut now, mut highest) = (0, 0);
        // SAFETY: the handle is the open connection's, used on this thread only while
        // `conn` is borrowed; the two out-pointers are valid for the call.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_db_status(
                conn.handle(),
                rusqlite::ffi::SQLITE_DBSTATUS_CACHE_USED,
                &mut now,
                &mut highest,
                0,
            )
        };
        assert_eq!(rc, rusqlite::ffi::SQLITE_OK);
        now
    }

    /// A long session's database grows well past the page cache's bound, and the cache
    /// stays within it however much is written and read back.
    #[test]
    fn the_page_cache_stays_bounded_as_the_database_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut conn = Connection::open(&path).unwrap();
        configure(&conn).unwrap();
        schema::migrate(&mut conn).unwrap();
        let sid = ops::create_session(&conn, "m", "/w", None).unwrap();
        let text = "a line of a long busy day\n".repeat(80);
        for _ in 0..3_000 {
            let message = StoredMessage {
                role: Role::User,
                content: Some(text.clone()),
                tool_calls: Vec::new(),
                tool_call_id: None,
                tool_name: None,
                display_kind: None,
                origin: None,
            };
            ops::append_message(&mut conn, &sid, &message).unwrap();
        }
        let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
        let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        assert!(pages * size > 4 << 20, "the database is {} bytes", pages * size);
        assert_eq!(ops::load_page(&conn, &sid, None, 3_000).unwrap().messages.len(), 3_000);
        let used = cache_used(&conn);
        // The bound counts page bodies; the cache's own headers add about a tenth.
        assert!(i64::from(used) < PAGE_CACHE_KIB * 1024 * 5 / 4, "the page cache holds {used} bytes");
    }
}
