//! What a starting talaria does with the job records in SQLite: jobs whose supervisor is
//! gone without an exit record are `lost` (what is left of their group is killed, its
//! identity checked), exits recorded while no talaria was alive are folded in (their
//! notices wait for their session), and the live jobs of the resumed session are
//! re-attached. After a reboot every unfinished record is lost.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::follow::{follow, LogReader};
use super::jobdir::{ExitRecord, JobDir, Owner};
use super::{actions, group, lock, now_ms, ExitInfo, Job, JobFacts, Registry};
use crate::engine::store::jobs::{JobEnd, JobRow, RecordStatus};
use crate::protocol::JobFate;

/// What talaria writes as the kill reason when it kills its jobs because it quits.
pub(crate) const QUIT_REASON: &str = "talaria quit";
/// What a supervisor records when it killed its job because no talaria kept it.
pub(crate) const OWNER_GONE_REASON: &str = "owner gone";

/// What became of a job by its record, for a resumed transcript. A record still marked
/// running may have ended while no talaria watched it: its exit record says how.
pub(super) fn fate_of_row(dir: &Path, row: &JobRow, boot_id: &str) -> JobFate {
    let ended = |killed: bool, code: i32, reason: Option<&str>, while_away: bool| match reason {
        _ if !killed => JobFate::Finished { code, while_away },
        Some(QUIT_REASON) => JobFate::KilledAtQuit,
        Some(OWNER_GONE_REASON) => JobFate::KilledOwnerGone,
        _ => JobFate::Killed,
    };
    let code = |code: Option<i64>, signal: Option<i64>| code.unwrap_or_else(|| 128 + signal.unwrap_or(0)) as i32;
    match row.status {
        RecordStatus::Running => {
            let jd = JobDir::new(dir, &row.id());
            match jd.read_exit() {
                Some(exit) if !exit.killed && super::run::remote_lost(&jd).is_some() => JobFate::Lost,
                Some(exit) => ended(
                    exit.killed,
                    code(exit.code.map(i64::from), exit.signal.map(i64::from)),
                    exit.reason.as_deref(),
                    true,
                ),
                None if row.boot_id == boot_id && supervisor_alive(row) => JobFate::Running,
                None => JobFate::Lost,
            }
        }
        RecordStatus::Exited => ended(false, code(row.exit_code, row.signal), None, !row.notified),
        RecordStatus::Killed => ended(true, 0, row.reason.as_deref(), false),
        RecordStatus::Lost => JobFate::Lost,
    }
}

/// The highest `job_<n>` directory (ids for a talaria without its database).
pub(super) fn max_dir_num(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("job_")?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// Is the process group `pgid` still the one a job started? A live process whose pid is
/// the pgid must be the leader we recorded (same start time); without one, the pgid
/// cannot have been reused while any member of the group lives, so members are ours.
pub(crate) fn group_is_ours(pgid: i32, leader_start: u64) -> bool {
    match group::proc_stat(pgid) {
        Some(stat) if stat.state != 'Z' && stat.state != 'X' => stat.start_ticks == leader_start,
        _ => true,
    }
}

/// Kill what is left of a job's group, unless the pgid now belongs to someone else.
pub(crate) async fn kill_remains(pgid: i32, leader_start: u64, grace: Duration) {
    if pgid > 1 && group_is_ours(pgid, leader_start) && group::group_alive(pgid) {
        tracing::warn!(pgid, "killing what is left of a job whose supervisor is gone");
        group::kill_group(pgid, grace).await;
    }
}

/// The supervisor recorded in the row is alive (pid and start time).
pub(crate) fn supervisor_alive(row: &JobRow) -> bool {
    match (row.supervisor_pid, row.supervisor_start) {
        (Some(pid), Some(start)) => group::process_alive(pid as i32, Some(start as u64)),
        _ => false,
    }
}

/// How an exit record reads as a status, code and notice.
pub(super) fn end_from_exit(dir: &Path, row: &JobRow, exit: &ExitRecord) -> JobEnd {
    let jd = JobDir::new(dir, &row.id());
    // A remote job whose transport gave up (its host stayed unreachable) is lost, with why.
    let gave_up = super::run::remote_lost(&jd).filter(|_| !exit.killed);
    let info = ExitInfo {
        code: exit.code,
        signal: exit.signal,
        killed: exit.killed,
        leftover: false,
        cwd: None,
        reason: gave_up.clone().or(exit.reason.clone()),
        lost: gave_up.is_some(),
    };
    let status = info.status();
    let runtime = Duration::from_millis((exit.ended_at_ms as i64 - row.started_at).max(0) as u64);
    let tail = log_tail(&jd);
    let notice = match &gave_up {
        Some(why) => actions::lost_notice_text(&row.id(), why, runtime, &row.command, &tail),
        None => actions::notice_text(&row.id(), &status, runtime, &row.command, &tail),
    };
    JobEnd {
        status: actions::record_status(&status),
        exit_code: exit.code.map(i64::from).filter(|_| gave_up.is_none()),
        signal: exit.signal.map(i64::from),
        reason: info.reason.clone(),
        ended_at: exit.ended_at_ms as i64,
        notice: Some(notice),
        notified: false,
    }
}

/// The last 1,000 characters of a job's log, ANSI stripped (for a notice).
pub(super) fn log_tail(jd: &JobDir) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let saved: Option<super::jobdir::IndexFile> = super::jobdir::read_json(&jd.index());
    let newest = saved.and_then(|s| s.segments.last().map(|s| jd.segment(s.n))).or_else(|| Some(jd.segment(0)));
    let Some(path) = newest else { return String::new() };
    let Ok(mut file) = super::jobdir::open_read(&path) else { return String::new() };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(len.saturating_sub(4096))).is_err() || file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let clean = crate::emulate::plain(&String::from_utf8_lossy(&bytes));
    crate::text::tail_chars(&clean, 1000).to_string()
}

pub(super) fn lost_end() -> JobEnd {
    JobEnd {
        status: RecordStatus::Lost,
        exit_code: None,
        signal: None,
        reason: Some("supervisor gone".into()),
        ended_at: now_ms() as i64,
        notice: None,
        notified: true,
    }
}

impl Registry {
    /// Start-up: sweep every unfinished record, then re-attach the jobs of `attach`.
    pub(super) async fn sweep_and_attach(self: Arc<Self>, sweep: bool, attach: Option<String>) {
        let Some(store) = self.store.clone() else { return };
        let _no_spawn_in_flight = self.records_gate.write().await;
        let rows = match store.jobs_running().await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the job records");
                return;
            }
        };
        let mut mine = Vec::new();
        for row in rows {
            let ours = attach.as_deref() == Some(row.session_id.as_str());
            if lock(&self.jobs).contains_key(&(row.num as u64)) {
                continue;
            }
            let jd = JobDir::new(&self.dir, &row.id());
            if row.boot_id != self.boot_id {
                drop(store.job_finish(row.num, lost_end()));
                continue;
            }
            if ours {
                // Owned by another live talaria on the same session: leave it to that one.
                let taken = jd.read_owner().is_some_and(|o| o != Owner::Detached && o != Owner::me() && o.holds());
                if !taken {
                    mine.push(row);
                }
                continue;
            }
            if !sweep {
                continue;
            }
            if let Some(exit) = jd.read_exit() {
                let end = end_from_exit(&self.dir, &row, &exit);
                drop(store.job_finish(row.num, end));
            } else if !supervisor_alive(&row) && row.supervisor_pid.is_some() {
                if let (Some(pgid), Some(start)) = (row.pgid, row.leader_start) {
                    kill_remains(pgid as i32, start as u64, self.kill_grace()).await;
                }
                drop(store.job_finish(row.num, lost_end()));
            }
        }
        let Some(session) = attach else { return };
        // Finished while no talaria watched, notice not yet delivered.
        match store.jobs_recent(Some(&session), self.config.jobs.max_jobs.max(1)).await {
            Ok(rows) => {
                for row in rows {
                    let known = lock(&self.jobs).contains_key(&(row.num as u64));
                    if row.status != RecordStatus::Running && !row.notified && row.notice.is_some() && !known {
                        mine.push(row);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the job records"),
        }
        mine.sort_by_key(|r| r.num);
        mine.dedup_by_key(|r| r.num);
        for row in mine {
            self.attach_row(row).await;
        }
        drop(_no_spawn_in_flight);
        // Sub-agents that were queued when the last talaria went start while there is room.
        self.start_queued_agents().await;
    }

    /// Follow a job a previous talaria started: it appears in the pane with its whole
    /// log; its end is recorded and noticed as for any job.
    async fn attach_row(self: &Arc<Self>, row: JobRow) {
        let jd = JobDir::new(&self.dir, &row.id());
        let num = row.num as u64;
        let running = row.status == RecordStatus::Running;
        let ended_away = !running || jd.read_exit().is_some();
        if !ended_away {
            if let Err(e) = jd.write_owner(&Owner::me()) {
                tracing::warn!(error = %e, id = %row.id(), "cannot take over the job");
            }
        }
        let age = Duration::from_millis(now_ms().saturating_sub(row.started_at.max(0) as u64));
        let started = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
        let has_stdin = running && row.has_stdin && jd.stdin().exists() && !jd.stdin_eof().exists();
        let spec = super::jobdir::read_json::<super::jobdir::Spec>(&jd.spec());
        let facts = JobFacts {
            remote: super::jobdir::read_json::<crate::engine::backend::RemoteJob>(
                &jd.path.join(super::run::REMOTE_JSON),
            ),
            // Re-attached: sandboxed only if its spec says so (else its input asks).
            sandboxed: spec.as_ref().is_some_and(|s| s.sandbox.is_some()),
            dies_with_owner: spec.as_ref().is_some_and(|s| s.orphan_grace_s <= 0.0),
            num,
            id: row.id(),
            command: row.command.clone(),
            cwd: PathBuf::from(&row.cwd),
            session_id: row.session_id.clone(),
            dir: jd.clone(),
            pgid: row.pgid.unwrap_or(0) as i32,
            leader_start: row.leader_start.unwrap_or(0) as u64,
            supervisor: (row.supervisor_pid.unwrap_or(0) as i32, row.supervisor_start.unwrap_or(0) as u64),
            started_at_ms: row.started_at.max(0) as u64,
            started,
            background: true,
            has_stdin,
            call_id: None,
            ended_away,
        };
        let job = Arc::new(Job::running(facts, self.config.tool_output.max_chars));
        self.recognise_agent(&job).await;
        lock(&self.jobs).insert(num, job.clone());
        if job.remote.is_some() && !ended_away {
            let lease_s = spec.as_ref().map_or(self.config.jobs.orphan_grace_s, |s| s.orphan_grace_s);
            tokio::spawn(self.clone().keep_remote_lease(job.clone(), lease_s));
        }
        self.next_num.fetch_max(num + 1, Ordering::SeqCst);
        self.make_background(&job);
        let reader = LogReader::open(&jd);
        tokio::spawn(follow(self.clone(), job, reader, None));
    }
}
