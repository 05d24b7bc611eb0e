//! Job records (DESIGN §4): one row per job, so any talaria process can list, read, kill
//! and re-attach the jobs of any session. The supervisor never opens the database: its
//! truth is `jobs/<id>/exit.json`, folded into the row by whichever talaria sees it first.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use rusqlite::{params, Connection, Row, ToSql};
use serde::Serialize;

use super::{Store, StoreError};

/// `display_kind` of a job's exit notice; appending one marks its job `notified`.
pub(crate) const NOTICE_KIND: &str = "job_notice";

/// What a job's record says of it. Stored as its lower-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordStatus {
    /// Started and not seen ending (a remote job reconnecting is still running).
    Running,
    Exited,
    Killed,
    /// Its supervisor or host went away without an exit record.
    Lost,
}

impl RecordStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RecordStatus::Running => "running",
            RecordStatus::Exited => "exited",
            RecordStatus::Killed => "killed",
            RecordStatus::Lost => "lost",
        }
    }
}

impl std::fmt::Display for RecordStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ToSql for RecordStatus {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for RecordStatus {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value.as_str()? {
            "running" => Ok(RecordStatus::Running),
            "exited" => Ok(RecordStatus::Exited),
            "killed" => Ok(RecordStatus::Killed),
            "lost" => Ok(RecordStatus::Lost),
            other => Err(FromSqlError::Other(format!("unknown job status {other:?}").into())),
        }
    }
}

/// A job row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobRow {
    pub(crate) num: i64,
    pub(crate) session_id: String,
    pub(crate) command: String,
    pub(crate) cwd: String,
    pub(crate) backend: String,
    pub(crate) background: bool,
    pub(crate) has_stdin: bool,
    pub(crate) pgid: Option<i64>,
    pub(crate) leader_start: Option<i64>,
    pub supervisor_pid: Option<i64>,
    pub(crate) supervisor_start: Option<i64>,
    pub(crate) boot_id: String,
    pub(crate) status: RecordStatus,
    pub(crate) exit_code: Option<i64>,
    pub(crate) signal: Option<i64>,
    pub(crate) reason: Option<String>,
    /// Unix milliseconds.
    pub(crate) started_at: i64,
    pub(crate) ended_at: Option<i64>,
    /// The exit notice waiting for the model, if any.
    pub(crate) notice: Option<String>,
    pub notified: bool,
}

impl JobRow {
    pub(crate) fn id(&self) -> String {
        format!("job_{}", self.num)
    }
}

/// What a new row says before the supervisor has started.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub session_id: String,
    pub command: String,
    pub cwd: String,
    pub background: bool,
    pub has_stdin: bool,
    pub boot_id: String,
    pub started_at: i64,
}

/// The process identities of a started job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobPids {
    pub pgid: i64,
    pub leader_start: i64,
    pub supervisor_pid: i64,
    pub supervisor_start: i64,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobEnd {
    pub(crate) status: RecordStatus,
    pub(crate) exit_code: Option<i64>,
    pub(crate) signal: Option<i64>,
    pub(crate) reason: Option<String>,
    pub(crate) ended_at: i64,
    pub(crate) notice: Option<String>,
    /// The model already saw the exit (through `process`): no notice.
    pub(crate) notified: bool,
}

const COLUMNS: &str = "num, session_id, command, cwd, backend, background, has_stdin, pgid, leader_start,
    supervisor_pid, supervisor_start, boot_id, status, exit_code, signal, reason, started_at, ended_at,
    notice, notified";

fn row(r: &Row<'_>) -> rusqlite::Result<JobRow> {
    Ok(JobRow {
        num: r.get(0)?,
        session_id: r.get(1)?,
        command: r.get(2)?,
        cwd: r.get(3)?,
        backend: r.get(4)?,
        background: r.get(5)?,
        has_stdin: r.get(6)?,
        pgid: r.get(7)?,
        leader_start: r.get(8)?,
        supervisor_pid: r.get(9)?,
        supervisor_start: r.get(10)?,
        boot_id: r.get(11)?,
        status: r.get(12)?,
        exit_code: r.get(13)?,
        signal: r.get(14)?,
        reason: r.get(15)?,
        started_at: r.get(16)?,
        ended_at: r.get(17)?,
        notice: r.get(18)?,
        notified: r.get(19)?,
    })
}

fn select(conn: &Connection, filter: &str, args: impl rusqlite::Params) -> Result<Vec<JobRow>, StoreError> {
    let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM jobs {filter}"))?;
    let rows = stmt.query_map(args, row)?.collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

impl Store {
    /// A new record (status `running`); returns its number, never used before.
    pub fn job_insert(
        &self,
        job: NewJob,
    ) -> impl std::future::Future<Output = Result<i64, StoreError>> + Send + 'static {
        self.call(move |c| {
            c.execute(
                "INSERT INTO jobs (session_id, command, cwd, background, has_stdin, boot_id, status, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7)",
                params![
                    job.session_id,
                    job.command,
                    job.cwd,
                    job.background,
                    job.has_stdin,
                    job.boot_id,
                    job.started_at
                ],
            )?;
            Ok(c.last_insert_rowid())
        })
    }

    pub fn job_started(
        &self,
        num: i64,
        pids: JobPids,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static {
        self.call(move |c| {
            c.execute(
                "UPDATE jobs SET pgid = ?2, leader_start = ?3, supervisor_pid = ?4, supervisor_start = ?5 WHERE num = ?1",
                params![num, pids.pgid, pids.leader_start, pids.supervisor_pid, pids.supervisor_start],
            )?;
            Ok(())
        })
    }

    /// Where the job runs (`local`, `ssh:<host>`, `docker:<container>`).
    pub(crate) fn job_set_backend(
        &self,
        num: i64,
        backend: String,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static {
        self.call(move |c| {
            c.execute("UPDATE jobs SET backend = ?2 WHERE num = ?1", rusqlite::params![num, backend])?;
            Ok(())
        })
    }

    pub(crate) fn job_set_background(
        &self,
        num: i64,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static {
        self.call(move |c| {
            c.execute("UPDATE jobs SET background = 1 WHERE num = ?1", [num])?;
            Ok(())
        })
    }

    /// Record the end of a job once: a row that has already ended is left as it is.
    /// Returns whether this call recorded it.
    pub(crate) fn job_finish(
        &self,
        num: i64,
        end: JobEnd,
    ) -> impl std::future::Future<Output = Result<bool, StoreError>> + Send + 'static {
        self.call(move |c| {
            let n = c.execute(
                "UPDATE jobs SET status = ?2, exit_code = ?3, signal = ?4, reason = ?5, ended_at = ?6, notice = ?7,
                        notified = ?8
                 WHERE num = ?1 AND status = 'running'",
                params![num, end.status, end.exit_code, end.signal, end.reason, end.ended_at, end.notice, end.notified],
            )?;
            Ok(n > 0)
        })
    }

    /// The model saw this job's exit through `process`: no notice.
    pub(crate) fn job_mark_notified(
        &self,
        num: i64,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static {
        self.call(move |c| {
            c.execute("UPDATE jobs SET notified = 1 WHERE num = ?1", [num])?;
            Ok(())
        })
    }

    pub(crate) fn job_delete(
        &self,
        num: i64,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static {
        self.call(move |c| {
            c.execute("DELETE FROM jobs WHERE num = ?1", [num])?;
            Ok(())
        })
    }

    pub fn job_get(
        &self,
        num: i64,
    ) -> impl std::future::Future<Output = Result<Option<JobRow>, StoreError>> + Send + 'static {
        self.call(move |c| Ok(select(c, "WHERE num = ?1", [num])?.into_iter().next()))
    }

    /// Every record still marked running, any session, oldest first.
    pub(crate) fn jobs_running(
        &self,
    ) -> impl std::future::Future<Output = Result<Vec<JobRow>, StoreError>> + Send + 'static {
        self.call(|c| select(c, "WHERE status = 'running' ORDER BY num", []))
    }

    /// The newest `limit` records of a session (or of every session), oldest first.
    pub(crate) fn jobs_recent(
        &self,
        session_id: Option<&str>,
        limit: usize,
    ) -> impl std::future::Future<Output = Result<Vec<JobRow>, StoreError>> + Send + 'static {
        let sid = session_id.map(str::to_string);
        self.call(move |c| {
            let limit = limit as i64;
            let mut rows = match sid {
                Some(sid) => select(c, "WHERE session_id = ?1 ORDER BY num DESC LIMIT ?2", params![sid, limit])?,
                None => select(c, "ORDER BY num DESC LIMIT ?1", [limit])?,
            };
            rows.reverse();
            Ok(rows)
        })
    }
}
