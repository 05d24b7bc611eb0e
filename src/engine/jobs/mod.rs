//! The job registry (DESIGN §4): every command talaria runs is a job spawned and owned
//! here. `JobsHandle` is the handle other parts hold; behind it each job has a reader task
//! (pipe → bounded memory + capped log + coalesced events) and a supervisor task (exit →
//! drain → leftover group → finish). A foreground `terminal` call is a job the tool
//! awaits; yielding just stops awaiting, so no pipe changes hands and no byte is lost.

mod actions;
pub mod group;
pub mod log;
pub mod output;
pub mod reaper;
pub mod records;
mod run;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::process::ChildStdin;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::engine::EventSink;
use crate::paths::Paths;
use crate::protocol::{Event, JobId, JobInfo, JobStatus, NoticeLevel};

use self::log::LogIndex;
use self::output::OutputBuf;
use self::reaper::ReaperLink;

pub use self::actions::{bumped, changed_from, format_duration, status_str, JobLog};

/// What to run.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    pub command: String,
    pub cwd: PathBuf,
    /// Foreground: a tool call awaits it (stdin /dev/null). Background: stdin is a pipe.
    pub background: bool,
    /// Session that owns the job (notifications go to it).
    pub session_id: String,
    /// Carry the working directory over: the shell writes its final `pwd -P` on exit and
    /// `ExitInfo::cwd` has it.
    pub track_cwd: bool,
    /// The tool call a foreground job belongs to: its output is sent as
    /// `Event::ToolOutput` for this call (coalesced) until the job is yielded.
    pub call_id: Option<String>,
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// None when killed by a signal.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Killed by us (interrupt, timeout, kill action).
    pub killed: bool,
    /// The leader exited but other processes of its group were still running: they go on
    /// as a background job (same id).
    pub leftover: bool,
    /// The shell's final working directory (when `track_cwd`).
    pub cwd: Option<PathBuf>,
}

impl ExitInfo {
    /// The shell convention: the exit code, or 128 + the signal number.
    pub fn exit_code(&self) -> i32 {
        self.code.unwrap_or_else(|| 128 + self.signal.unwrap_or(0))
    }

    fn lost() -> ExitInfo {
        ExitInfo { code: None, signal: None, killed: false, leftover: false, cwd: None }
    }
}

/// A freshly spawned job.
pub struct Spawned {
    pub id: JobId,
    pub pid: u32,
    /// Resolves when the process group leader exits and output is drained (~200 ms cap
    /// when children still hold the pipe; `ExitInfo::leftover` says so).
    pub exit: oneshot::Receiver<ExitInfo>,
}

/// A finished job the model has not seen yet (exactly-once notifications).
#[derive(Debug, Clone, PartialEq)]
pub struct ExitNotice {
    pub id: JobId,
    pub session_id: String,
    /// The user-message text of DESIGN §4.
    pub text: String,
}

/// Which binary serves as the reaper (`<exe> __reaper`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReaperMode {
    /// `std::env::current_exe()`: the talaria binary itself.
    CurrentExe,
    /// A given talaria binary (integration tests use `CARGO_BIN_EXE_talaria`).
    Exe(PathBuf),
    /// No reaper: jobs die with talaria only if talaria shuts down cleanly (library tests,
    /// where the current executable is a test binary).
    Off,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsOptions {
    pub reaper: ReaperMode,
    /// Sweep records of a dead talaria at start: kill what is left, list them as `lost`.
    pub sweep: bool,
}

impl Default for JobsOptions {
    fn default() -> Self {
        JobsOptions { reaper: ReaperMode::CurrentExe, sweep: true }
    }
}

#[derive(Clone)]
pub struct JobsHandle {
    inner: Arc<Registry>,
}

struct Registry {
    config: Arc<Config>,
    dir: PathBuf,
    events: EventSink,
    owner_pid: u32,
    owner_start: Option<u64>,
    jobs: Mutex<BTreeMap<u64, Arc<Job>>>,
    next_num: AtomicU64,
    notices: Mutex<Vec<ExitNotice>>,
    finished_tx: mpsc::UnboundedSender<JobId>,
    reaper: Option<ReaperLink>,
    shutting_down: AtomicBool,
}

struct Job {
    num: u64,
    id: JobId,
    command: String,
    cwd: PathBuf,
    session_id: String,
    pid: u32,
    pgid: i32,
    started_at_ms: u64,
    started: Instant,
    state: Mutex<JobState>,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    /// Some once the job has finished (leader exited and its group is gone).
    done: watch::Sender<Option<ExitInfo>>,
    /// True once the output pipe reached end of file.
    reader_eof: watch::Sender<bool>,
    /// Cancelled when the job leaves the registry: its reader stops even if a process
    /// outside the group (a daemon) still holds the pipe.
    forgotten: CancellationToken,
    kill_requested: AtomicBool,
    /// The model saw the exit through `process`: no notification.
    exit_seen: AtomicBool,
    /// Record file while running (None for lost jobs).
    record: Option<PathBuf>,
}

struct JobState {
    status: JobStatus,
    background: bool,
    /// `Event::JobStarted` was sent (the UI lists it).
    announced: bool,
    has_stdin: bool,
    finished_at: Option<Instant>,
    output: OutputBuf,
    log: LogIndex,
    call_id: Option<String>,
}

/// The end of a lost job's log, so `poll` and the UI have something to show.
fn lost_tail(index: &LogIndex) -> OutputBuf {
    use std::io::{Read, Seek, SeekFrom};
    let mut buf = OutputBuf::new(0, 4096);
    if let Some(seg) = index.segments.last() {
        if let Ok(mut file) = std::fs::File::open(&seg.path) {
            let from = seg.bytes.saturating_sub(4096);
            let mut bytes = Vec::new();
            if file.seek(SeekFrom::Start(from)).is_ok() && file.read_to_end(&mut bytes).is_ok() {
                buf.push(&String::from_utf8_lossy(&bytes));
            }
        }
    }
    buf
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl Job {
    fn state(&self) -> MutexGuard<'_, JobState> {
        lock(&self.state)
    }

    fn is_running(&self) -> bool {
        self.state().status.is_running()
    }

    fn runtime(&self) -> Duration {
        let end = self.state().finished_at.unwrap_or_else(Instant::now);
        end.saturating_duration_since(self.started)
    }

    fn info(&self) -> JobInfo {
        let st = self.state();
        JobInfo {
            id: self.id.clone(),
            command: self.command.clone(),
            pid: self.pid,
            cwd: self.cwd.display().to_string(),
            started_at_ms: self.started_at_ms,
            status: st.status.clone(),
            background: st.background,
            has_stdin: st.has_stdin,
            last_line: st.output.last_line(200),
        }
    }

    fn exit(&self) -> Option<ExitInfo> {
        self.done.borrow().clone()
    }
}

impl JobsHandle {
    /// Start the registry with the default options (reaper = this executable, sweep).
    /// The receiver gets the id of each background job that ends (a wake-up: call
    /// `take_exit_notices` to learn what the model should be told). Needs a tokio runtime.
    pub fn start(
        paths: &Paths,
        config: Arc<Config>,
        events: EventSink,
    ) -> (JobsHandle, mpsc::UnboundedReceiver<JobId>) {
        JobsHandle::start_with(paths, config, events, JobsOptions::default())
    }

    pub fn start_with(
        paths: &Paths,
        config: Arc<Config>,
        events: EventSink,
        options: JobsOptions,
    ) -> (JobsHandle, mpsc::UnboundedReceiver<JobId>) {
        let dir = paths.jobs_dir.clone();
        if let Err(e) = paths.ensure_dirs() {
            events.send(Event::notice(
                NoticeLevel::Warn,
                format!("cannot create {}: {e}; job logs will not be kept", dir.display()),
            ));
        }
        let grace = Duration::from_secs_f64(config.terminal.kill_grace_s);
        let reaper = match &options.reaper {
            ReaperMode::Off => None,
            mode => {
                let exe = match mode {
                    ReaperMode::Exe(p) => Ok(p.clone()),
                    _ => std::env::current_exe(),
                };
                match exe.and_then(|exe| ReaperLink::spawn(&exe, grace)) {
                    Ok(link) => Some(link),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the job reaper");
                        events.send(Event::notice(
                            NoticeLevel::Warn,
                            format!("cannot start the job reaper ({e}); if talaria crashes, its jobs may keep running"),
                        ));
                        None
                    }
                }
            }
        };
        let owner_pid = std::process::id();
        let (finished_tx, finished_rx) = mpsc::unbounded_channel();
        let registry = Arc::new(Registry {
            config,
            dir,
            events,
            owner_pid,
            owner_start: group::proc_stat(owner_pid as i32).map(|s| s.start_ticks),
            jobs: Mutex::new(BTreeMap::new()),
            next_num: AtomicU64::new(1),
            notices: Mutex::new(Vec::new()),
            finished_tx,
            reaper,
            shutting_down: AtomicBool::new(false),
        });
        if options.sweep {
            registry.sweep(grace);
        }
        (JobsHandle { inner: registry }, finished_rx)
    }

    /// Start a command in its own session and process group.
    pub async fn spawn(&self, spec: SpawnSpec) -> Result<Spawned, String> {
        run::spawn(&self.inner, spec)
    }

    /// What the job printed so far, as the model sees it: ANSI stripped and capped at
    /// `tool_output.max_chars`. None for an unknown id.
    pub async fn output_for_model(&self, id: &str) -> Option<String> {
        let job = self.inner.get(id)?;
        let max = self.inner.config.tool_output.max_chars;
        let text = job.state().output.model_text(max);
        Some(text)
    }

    /// Stop awaiting: the job is a background job from now on (yield). Returns false when
    /// it has already finished (the caller should use its exit instead).
    pub async fn adopt(&self, id: &str) -> bool {
        match self.inner.get(id) {
            Some(job) => self.inner.make_background(&job),
            None => false,
        }
    }

    /// Kill a job's process group (SIGTERM, grace, SIGKILL) and wait until it is gone.
    /// None for an unknown id; a job that had already ended returns its exit.
    pub async fn kill(&self, id: &str) -> Option<ExitInfo> {
        let job = self.inner.get(id)?;
        Some(self.inner.kill_job(&job).await)
    }

    /// Drop a finished foreground job from the registry (its result has been built) and
    /// delete its log. Background and running jobs are left alone.
    pub async fn forget(&self, id: &str) {
        let Some(job) = self.inner.get(id) else { return };
        let forget = {
            let st = job.state();
            !st.background && !st.status.is_running()
        };
        if forget {
            self.inner.remove(job.num);
        }
    }

    /// Every job the UI and the model can see (foreground jobs still awaited included).
    pub async fn list(&self) -> Vec<JobInfo> {
        self.inner.all().iter().map(|j| j.info()).collect()
    }

    /// One job as the UI lists it.
    pub async fn info(&self, id: &str) -> Option<JobInfo> {
        self.inner.get(id).map(|j| j.info())
    }

    /// Whether `take_exit_notices` would return something now (the scheduler asks).
    pub async fn has_exit_notices(&self, session_id: &str) -> bool {
        lock(&self.inner.notices).iter().any(|n| n.session_id == session_id)
    }

    /// Finished jobs of `session_id` whose exit the model has not seen; each is returned
    /// once and marked seen.
    pub async fn take_exit_notices(&self, session_id: &str) -> Vec<ExitNotice> {
        let taken: Vec<ExitNotice> = {
            let mut notices = lock(&self.inner.notices);
            let (taken, kept) = std::mem::take(&mut *notices).into_iter().partition(|n| n.session_id == session_id);
            *notices = kept;
            taken
        };
        for notice in &taken {
            if let Some(job) = self.inner.get(&notice.id) {
                job.exit_seen.store(true, Ordering::SeqCst);
            }
        }
        taken
    }

    /// Kill every running job and tell the reaper goodbye (quit, signals). Logs and
    /// records are removed. Returns how many jobs were killed.
    pub async fn shutdown(&self) -> usize {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        let running: Vec<Arc<Job>> = self.inner.all().into_iter().filter(|j| j.is_running()).collect();
        let kills = running.iter().map(|job| self.inner.kill_job(job));
        futures_util::future::join_all(kills).await;
        if let Some(reaper) = &self.inner.reaper {
            reaper.bye();
        }
        let all: Vec<u64> = self.inner.all().iter().map(|j| j.num).collect();
        for num in all {
            self.inner.remove(num);
        }
        running.len()
    }

    /// Where job logs and records live.
    pub fn jobs_dir(&self) -> &Path {
        &self.inner.dir
    }
}

impl Registry {
    /// `job_3`, or just `3` (models do that).
    fn get(&self, id: &str) -> Option<Arc<Job>> {
        let id = id.trim();
        let num: u64 = id.strip_prefix("job_").unwrap_or(id).parse().ok()?;
        lock(&self.jobs).get(&num).cloned()
    }

    fn all(&self) -> Vec<Arc<Job>> {
        lock(&self.jobs).values().cloned().collect()
    }

    fn remove(&self, num: u64) {
        let job = lock(&self.jobs).remove(&num);
        if let Some(job) = job {
            job.forgotten.cancel();
            job.state().log.remove_files();
            if let Some(record) = &job.record {
                let _ = std::fs::remove_file(record);
            }
        }
    }

    /// Make room for one more job: prune finished jobs, those the model already heard
    /// about first, oldest first.
    fn make_room(&self) -> Result<(), String> {
        let max = self.config.jobs.max_jobs.max(1);
        let unseen: Vec<JobId> = lock(&self.notices).iter().map(|n| n.id.clone()).collect();
        let victims: Vec<u64> = {
            let jobs = lock(&self.jobs);
            if jobs.len() < max {
                return Ok(());
            }
            let mut finished: Vec<(bool, u64)> =
                jobs.values().filter(|j| !j.is_running()).map(|j| (unseen.contains(&j.id), j.num)).collect();
            finished.sort();
            finished.into_iter().take(jobs.len() + 1 - max).map(|(_, num)| num).collect()
        };
        for num in &victims {
            self.remove(*num);
        }
        if lock(&self.jobs).len() >= max {
            return Err(format!(
                "too many jobs: {max} are running (jobs.max_jobs); kill one with process(action='kill', session_id=...) first"
            ));
        }
        Ok(())
    }

    /// Turn a job into a background job and tell the UI. False once it has finished.
    fn make_background(&self, job: &Job) -> bool {
        let info = {
            let mut st = job.state();
            if !st.status.is_running() {
                return false;
            }
            st.background = true;
            st.call_id = None;
            if st.announced {
                return true;
            }
            st.announced = true;
            drop(st);
            job.info()
        };
        self.events.send(Event::JobStarted { job: info });
        true
    }

    async fn kill_job(&self, job: &Job) -> ExitInfo {
        if let Some(exit) = job.exit() {
            return exit;
        }
        if job.is_running() {
            job.kill_requested.store(true, Ordering::SeqCst);
            let grace = Duration::from_secs_f64(self.config.terminal.kill_grace_s);
            if !group::kill_group(job.pgid, grace).await {
                tracing::warn!(id = %job.id, pgid = job.pgid, "process group survived SIGKILL");
            }
        }
        let mut done = job.done.subscribe();
        let wait = Duration::from_secs_f64(self.config.terminal.kill_grace_s) + Duration::from_secs(10);
        let _ = tokio::time::timeout(wait, done.wait_for(Option::is_some)).await;
        let exit = done.borrow().clone();
        exit.unwrap_or(ExitInfo { code: None, signal: None, killed: true, leftover: false, cwd: None })
    }

    /// The job has ended: record it, tell the UI and (for background jobs) queue the
    /// model's notification.
    fn finish(&self, job: &Job, exit: ExitInfo) {
        let status = if exit.killed { JobStatus::Killed } else { JobStatus::Exited(exit.exit_code()) };
        let (announced, background, tail) = {
            let mut st = job.state();
            st.status = status.clone();
            st.finished_at = Some(Instant::now());
            st.has_stdin = false;
            st.call_id = None;
            (st.announced, st.background, st.output.clean_tail(1000))
        };
        if let Ok(mut stdin) = job.stdin.try_lock() {
            stdin.take();
        }
        if let Some(record) = &job.record {
            let _ = std::fs::remove_file(record);
        }
        if let Some(reaper) = &self.reaper {
            reaper.del(job.pgid);
        }
        if announced {
            self.events.send(Event::JobFinished { id: job.id.clone(), status: status.clone() });
        }
        if background && !job.exit_seen.load(Ordering::SeqCst) {
            let text = actions::notice_text(&job.id, &status, job.runtime(), &job.command, &tail);
            lock(&self.notices).push(ExitNotice { id: job.id.clone(), session_id: job.session_id.clone(), text });
            let _ = self.finished_tx.send(job.id.clone());
        }
        job.done.send_replace(Some(exit));
    }

    /// The model saw this job's exit through `process`: never notify it.
    fn mark_seen(&self, job: &Job) {
        job.exit_seen.store(true, Ordering::SeqCst);
        lock(&self.notices).retain(|n| n.id != job.id);
    }

    /// Jobs of a talaria that died: kill what is left of them, list them as `lost`.
    fn sweep(&self, grace: Duration) {
        let swept = records::sweep(&self.dir, self.owner_pid);
        if !swept.alive_groups.is_empty() {
            let groups = swept.alive_groups.clone();
            tracing::warn!(?groups, "killing process groups left by a previous talaria");
            let spawned = std::thread::Builder::new().name("sweep-kill".into()).spawn(move || {
                group::kill_groups_blocking(&groups, grace);
            });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot kill the groups of a previous talaria");
            }
        }
        for record in swept.lost {
            let segments = records::lost_segments(&self.dir, &record);
            let mut index = LogIndex::default();
            let mut line = 1;
            for path in segments {
                let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                let newlines = std::fs::read(&path).map(|b| output::memchr_count(&b, b'\n')).unwrap_or(0);
                index.segments.push(log::Segment { path, start_line: line, bytes, mid_line: false });
                line += newlines;
            }
            let num = self.next_num.fetch_add(1, Ordering::SeqCst);
            let (done, _) = watch::channel(Some(ExitInfo::lost()));
            let (reader_eof, _) = watch::channel(true);
            let started = Instant::now();
            let job = Arc::new(Job {
                num,
                id: format!("job_{num}"),
                command: record.command.clone(),
                cwd: PathBuf::from(&record.cwd),
                session_id: record.session_id.clone(),
                pid: record.pgid.max(0) as u32,
                pgid: record.pgid,
                started_at_ms: record.started_at_ms,
                started,
                state: Mutex::new(JobState {
                    status: JobStatus::Lost,
                    background: true,
                    announced: true,
                    has_stdin: false,
                    finished_at: Some(started),
                    output: lost_tail(&index),
                    log: index,
                    call_id: None,
                }),
                stdin: tokio::sync::Mutex::new(None),
                done,
                reader_eof,
                forgotten: CancellationToken::new(),
                kill_requested: AtomicBool::new(false),
                exit_seen: AtomicBool::new(true),
                record: None,
            });
            lock(&self.jobs).insert(num, job.clone());
            self.events.send(Event::JobStarted { job: job.info() });
        }
    }
}
