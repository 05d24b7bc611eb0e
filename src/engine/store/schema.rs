//! The schema and its forward migrations. `MIGRATIONS[i]` takes a database from
//! version `i` to `i + 1`; a new database runs them all. Never edit a released step:
//! add a new one.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::StoreError;

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5];

/// Version 1: sessions, messages and state_meta.
const V1: &str = "
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version (version) VALUES (0);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    title TEXT,
    model TEXT NOT NULL,
    cwd TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    ended_at INTEGER,
    end_reason TEXT
);
CREATE INDEX sessions_cwd ON sessions (cwd, updated_at);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT,
    tool_calls TEXT,
    tool_call_id TEXT,
    tool_name TEXT,
    created_at INTEGER NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

/// Version 2: session lineage and token counts; messages get a display kind and an
/// `active` flag (/retry and /undo hide rows, never delete them); per-directory input
/// history; an FTS5 index over the text of active messages, kept in sync by triggers.
const V2: &str = "
ALTER TABLE sessions ADD COLUMN parent_session_id TEXT;
ALTER TABLE sessions ADD COLUMN prompt_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN completion_tokens INTEGER NOT NULL DEFAULT 0;
CREATE INDEX sessions_updated ON sessions (updated_at);
ALTER TABLE messages ADD COLUMN display_kind TEXT;
ALTER TABLE messages ADD COLUMN active INTEGER NOT NULL DEFAULT 1;
CREATE INDEX messages_active ON messages (session_id, active, seq);
ALTER TABLE state_meta ADD COLUMN updated_at INTEGER NOT NULL DEFAULT 0;
CREATE TABLE input_history (
    id INTEGER PRIMARY KEY,
    cwd TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX input_history_cwd ON input_history (cwd, id);
-- The index covers active messages only; its content table is a view of exactly those
-- rows, so FTS5's own 'rebuild' and 'integrity-check' agree with the triggers.
CREATE VIEW messages_fts_source AS
    SELECT id, content FROM messages WHERE active = 1 AND content IS NOT NULL;
CREATE VIRTUAL TABLE messages_fts USING fts5 (
    content,
    content = 'messages_fts_source',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN new.active = 1 AND new.content IS NOT NULL
BEGIN
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN old.active = 1 AND old.content IS NOT NULL
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, active ON messages
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content)
        SELECT 'delete', old.id, old.content WHERE old.active = 1 AND old.content IS NOT NULL;
    INSERT INTO messages_fts (rowid, content)
        SELECT new.id, new.content WHERE new.active = 1 AND new.content IS NOT NULL;
END;
INSERT INTO messages_fts (messages_fts) VALUES ('rebuild');
";

/// Version 3: job records (DESIGN §4). `num` never repeats within a TALARIA_HOME
/// (AUTOINCREMENT); `notice` is the exit notice waiting for the model and `notified`
/// is set in the same transaction that appends it as a message.
const V3: &str = "
CREATE TABLE jobs (
    num INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    command TEXT NOT NULL,
    cwd TEXT NOT NULL,
    backend TEXT NOT NULL DEFAULT 'local',
    background INTEGER NOT NULL DEFAULT 0,
    has_stdin INTEGER NOT NULL DEFAULT 0,
    pgid INTEGER,
    leader_start INTEGER,
    supervisor_pid INTEGER,
    supervisor_start INTEGER,
    boot_id TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    signal INTEGER,
    reason TEXT,
    started_at INTEGER NOT NULL,
    ended_at INTEGER,
    notice TEXT,
    notified INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_session ON jobs (session_id, status);
CREATE INDEX jobs_status ON jobs (status);
";

/// Version 4: where each user message came from (`protocol::Origin`), so no front end reads
/// it from the text. Rows written before are given theirs from what is known: the display
/// kind, else (for rows older than display kinds) the prompt they start with.
const V4: &str = "
ALTER TABLE messages ADD COLUMN origin TEXT;
UPDATE messages SET origin = CASE
    WHEN display_kind = 'oob' THEN 'mid_turn'
    WHEN display_kind = 'heartbeat' THEN 'heartbeat'
    WHEN display_kind = 'goal' THEN 'goal'
    WHEN display_kind = 'job_notice' THEN 'job_notice'
    WHEN display_kind = 'watch_notice' THEN 'watch'
    WHEN display_kind IS NULL AND content LIKE '[Heartbeat — %' THEN 'heartbeat'
    WHEN display_kind IS NULL AND (content LIKE '[Continuing toward your standing goal%'
                                   OR content LIKE '[Standing goal set%') THEN 'goal'
    WHEN display_kind IS NULL AND content LIKE '[Background job %' THEN 'job_notice'
    WHEN display_kind IS NULL AND content LIKE '[Job % matched /%' THEN 'watch'
    ELSE 'typed'
END
WHERE role = 'user';
";

/// Version 5: a sub-agent's session names the job that runs it (DESIGN §14). With
/// `parent_session_id` this is what makes a job a sub-agent: the link, never its command line.
const V5: &str = "
ALTER TABLE sessions ADD COLUMN agent_job INTEGER;
CREATE INDEX sessions_agent_job ON sessions (agent_job);
";

/// The version recorded in the database; 0 for an empty database.
pub(crate) fn current_version(conn: &Connection) -> Result<i64, StoreError> {
    let has_table: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version')",
        [],
        |r| r.get(0),
    )?;
    if has_table {
        let version: Option<i64> =
            conn.query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0)).optional()?.flatten();
        return Ok(version.unwrap_or(0));
    }
    let tables: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0))?;
    if tables > 0 {
        return Err(StoreError(
            "this file is an SQLite database but not a Talaria one (it has no schema_version table); \
             move it aside or point TALARIA_HOME elsewhere"
                .into(),
        ));
    }
    Ok(0)
}

/// Bring the database to `SCHEMA_VERSION`, one step per transaction.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let mut version = current_version(conn)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError(format!(
            "the database has schema version {version}, newer than this talaria understands ({SCHEMA_VERSION}); \
             upgrade talaria"
        )));
    }
    // Every step in one transaction: all or none, and a first start commits (and writes its
    // new WAL) once instead of once per version.
    while version < SCHEMA_VERSION {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Another process may have migrated while this one waited for the lock.
        if current_version(&tx)? != version {
            tx.commit()?;
            version = current_version(conn)?;
            continue;
        }
        for step in version..SCHEMA_VERSION {
            tx.execute_batch(MIGRATIONS[step as usize])
                .map_err(|e| StoreError(format!("migrating the database to version {}: {e}", step + 1)))?;
        }
        tx.execute("UPDATE schema_version SET version = ?1", [SCHEMA_VERSION])?;
        tx.commit()?;
        tracing::info!(from = version, to = SCHEMA_VERSION, "database schema migrated");
        version = SCHEMA_VERSION;
    }
    Ok(())
}
