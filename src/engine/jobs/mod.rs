//! The job registry (DESIGN §4): every command talaria runs is a job. Each job is owned
//! by a supervisor process (`talaria __job`, `supervisor.rs`) that outlives talaria;
//! talaria *follows* it (`follow.rs`: log tail → bounded memory + coalesced events, exit
//! record → finish) and keeps a record of it in SQLite, so another talaria can list,
//! kill and re-attach it. `JobsHandle` is the handle other parts hold. A foreground
//! `terminal` call is a job the tool awaits; yielding just stops awaiting, so no pipe
//! changes hands and no byte is lost.

mod actions;
mod agent_jobs;
pub mod cli;
mod follow;
pub use super::process as group;
pub mod jobdir;
pub mod log;
pub mod output;
mod priority;
pub(crate) mod records;
mod run;
pub(crate) mod supervise;
pub mod supervisor;
pub mod watches;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::engine::store::jobs::{JobEnd, RecordStatus};
use crate::engine::store::Store;
use crate::engine::EventSink;
use crate::paths::Paths;
use crate::protocol::{Event, JobFate, JobId, JobInfo, JobStatus, KilledJob, NoticeLevel};

use self::jobdir::{JobDir, Owner};
use self::log::LogIndex;
use self::output::OutputBuf;

pub(crate) use self::actions::{bumped, format_duration, ProcessAction, ProcessArgs};
pub(crate) use self::agent_jobs::AgentStart;
pub use self::follow::LogReader;
pub(crate) use self::run::SpawnError;
pub(crate) use super::process::sh_quote;

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
    /// How long the job waits for a new owner when talaria dies; None = `jobs.orphan_grace_s`.
    /// A goal gate uses 0: nobody can re-attach to a check.
    pub orphan_grace_s: Option<f64>,
    /// Run inside the kernel sandbox (DESIGN §6). False only for what the user approved to
    /// run outside it.
    pub sandboxed: bool,
}

/// Where a remote job runs: the backend and its working directory there ("" = the
/// remote default).
#[derive(Debug, Clone)]
pub struct RemoteTarget {
    pub backend: crate::engine::backend::Backend,
    pub cwd: String,
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// None when killed by a signal.
    pub code: Option<i32>,
    pub(crate) signal: Option<i32>,
    /// Killed by us (interrupt, timeout, kill action) or by its supervisor (owner gone).
    pub(crate) killed: bool,
    /// The leader exited but other processes of its group were still running: they go on
    /// as a background job (same id).
    pub(crate) leftover: bool,
    /// The shell's final working directory (when `track_cwd`).
    pub(crate) cwd: Option<PathBuf>,
    /// Why it was killed, when talaria did not ask (`owner gone`).
    pub(crate) reason: Option<String>,
    /// Its supervisor vanished without an exit record.
    pub(crate) lost: bool,
}

impl ExitInfo {
    /// The shell convention: the exit code, or 128 + the signal number.
    pub(crate) fn exit_code(&self) -> i32 {
        self.code.unwrap_or_else(|| 128 + self.signal.unwrap_or(0))
    }

    fn lost() -> ExitInfo {
        ExitInfo { code: None, signal: None, killed: false, leftover: false, cwd: None, reason: None, lost: true }
    }

    fn status(&self) -> JobStatus {
        if self.lost {
            JobStatus::Lost
        } else if self.killed {
            JobStatus::Killed
        } else {
            JobStatus::Exited(self.exit_code())
        }
    }
}

/// A freshly spawned job.
pub struct Spawned {
    pub id: JobId,
    /// The leader's pid (= its process group id).
    pub pid: u32,
    /// Resolves when the process group leader exits and output is drained (~200 ms cap
    /// when children still hold the pipe; `ExitInfo::leftover` says so).
    pub exit: oneshot::Receiver<ExitInfo>,
}

/// What a job notice tells the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    /// The job ended (exactly once: appending it as a message with display kind
    /// `job_notice` marks the job notified in the same transaction).
    Exit,
    /// A watch pattern matched (display kind `watch_notice`: it never marks the job
    /// notified, so the exit is still told).
    Watch,
}

/// Something about a job the model has not been told yet: it ended, or a watch matched.
#[derive(Debug, Clone, PartialEq)]
pub struct JobNotice {
    pub id: JobId,
    pub(crate) session_id: String,
    pub kind: NoticeKind,
    /// The user-message text (DESIGN §4 and §4c).
    pub text: String,
    /// When it was queued (unix ms): idle notices arriving within `jobs.notice_window_s`
    /// of the first one start one turn together.
    pub(crate) queued_at_ms: u64,
}

/// Which binary runs the supervisors (`<exe> __job <dir>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupervisorExe {
    /// `std::env::current_exe()`: the talaria binary itself (from a test harness in
    /// `target/*/deps/`, the `talaria` binary next to it).
    CurrentExe,
    /// A given talaria binary (integration tests use `CARGO_BIN_EXE_talaria`).
    Exe(PathBuf),
}

impl SupervisorExe {
    pub(crate) fn resolve(&self) -> std::io::Result<PathBuf> {
        match self {
            SupervisorExe::Exe(p) => Ok(p.clone()),
            SupervisorExe::CurrentExe => {
                let exe = std::env::current_exe()?;
                let in_deps = exe.parent().and_then(|d| d.file_name()).is_some_and(|n| n == "deps");
                match exe.parent().and_then(Path::parent).map(|d| d.join("talaria")) {
                    Some(bin) if in_deps && bin.is_file() => Ok(bin),
                    _ => Ok(exe),
                }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsOptions {
    pub supervisor: SupervisorExe,
    /// Sweep records of jobs whose supervisor is gone: kill what is left, mark them lost.
    pub sweep: bool,
    /// Re-attach the live jobs of this session and deliver what finished meanwhile.
    pub attach: Option<String>,
}

impl Default for JobsOptions {
    fn default() -> Self {
        JobsOptions { supervisor: SupervisorExe::CurrentExe, sweep: true, attach: None }
    }
}

#[derive(Clone)]
pub struct JobsHandle {
    inner: Arc<Registry>,
}

/// How long a shutdown waits for jobs still starting to be registered.
const SPAWNS_SETTLE: Duration = Duration::from_secs(2);

struct Registry {
    config: Arc<Config>,
    dir: PathBuf,
    events: EventSink,
    /// The job records; None when the database cannot be opened (ids then come from
    /// the job directories).
    store: Option<Store>,
    exe: Option<PathBuf>,
    boot_id: String,
    jobs: Mutex<BTreeMap<u64, Arc<Job>>>,
    next_num: AtomicU64,
    notices: Mutex<Vec<JobNotice>>,
    finished_tx: mpsc::UnboundedSender<JobId>,
    shutting_down: AtomicBool,
    /// What sandboxed jobs may touch (the supervisor turns it into a ruleset per spawn).
    sandbox: Mutex<crate::engine::sandbox::Policy>,
    /// Running jobs are left running at shutdown (`Op::LeaveJobs`).
    leave: AtomicBool,
    /// Remote backends: connections, the session's choice (DESIGN §4b).
    backends: crate::engine::backend::Backends,
    /// Spawns hold it shared from their record's insert until the job is registered; a
    /// sweep or re-attach holds it alone, so it never takes a job this process is still
    /// starting for one to adopt (it did under load: a second follower, a foreground
    /// command announced as background and its notice told twice).
    records_gate: tokio::sync::RwLock<()>,
    /// The session's network proxy (`sandbox.network = "ask"`, DESIGN §6b).
    proxy: Mutex<Option<crate::engine::netproxy::client::ProxyClient>>,
    /// Sub-agents' streams: approvals to forward (agent_jobs.rs).
    agents: agent_jobs::Bridge,
}

struct Job {
    /// Runs inside the kernel sandbox (its stdin needs no approval).
    sandboxed: bool,
    /// Runs on a remote backend: its transport is the local job, its remote group is
    /// killed over that backend.
    remote: Option<crate::engine::backend::RemoteJob>,
    /// No orphan grace (a goal gate): nobody can take it over, so when talaria leaves its
    /// jobs running ("keep running" at quit, `exec --keep-jobs`) this one is killed instead.
    dies_with_owner: bool,
    num: u64,
    id: JobId,
    command: String,
    cwd: PathBuf,
    session_id: String,
    dir: JobDir,
    /// The leader's pid = the job's process group id.
    pid: u32,
    pgid: i32,
    leader_start: u64,
    /// The supervisor's pid and start time (clock ticks since boot).
    supervisor: (i32, u64),
    started_at_ms: u64,
    started: Instant,
    state: Mutex<JobState>,
    /// Serialises writes to the stdin FIFO.
    stdin_lock: tokio::sync::Mutex<()>,
    /// Some once the job has finished (leader exited and its group is gone).
    done: watch::Sender<Option<ExitInfo>>,
    /// Cancelled when the job leaves the registry: its follower stops.
    forgotten: CancellationToken,
    kill_requested: AtomicBool,
    /// The model wanted this job's result: it waited for, polled, read or wrote to it
    /// while it ran, or it was a foreground command moved to the background.
    awaited: AtomicBool,
    /// Re-attached by this talaria after it had already ended (while no talaria watched):
    /// a resumed transcript says "finished while away" even once this talaria read its end.
    ended_away: bool,
    /// The model saw the exit through `process`: no notification.
    exit_seen: AtomicBool,
    /// Watch patterns on its output (they end with the job).
    watches: Mutex<watches::Watches>,
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

use crate::util::lock;
pub(crate) use crate::util::now_ms;

/// What tells one running job from another, as its spawn or its re-attach knows it.
struct JobFacts {
    sandboxed: bool,
    remote: Option<crate::engine::backend::RemoteJob>,
    dies_with_owner: bool,
    num: u64,
    id: JobId,
    command: String,
    cwd: PathBuf,
    session_id: String,
    dir: JobDir,
    pgid: i32,
    leader_start: u64,
    supervisor: (i32, u64),
    started_at_ms: u64,
    started: Instant,
    background: bool,
    has_stdin: bool,
    /// The tool call a foreground command answers.
    call_id: Option<String>,
    ended_away: bool,
}

impl Job {
    /// A job that runs (or ran while nobody watched: `ended_away`), nothing read of it yet.
    fn running(facts: JobFacts, output_cap: usize) -> Job {
        let (done, _) = watch::channel(None);
        Job {
            sandboxed: facts.sandboxed,
            remote: facts.remote,
            dies_with_owner: facts.dies_with_owner,
            num: facts.num,
            id: facts.id,
            command: facts.command,
            cwd: facts.cwd,
            session_id: facts.session_id,
            dir: facts.dir,
            pid: facts.pgid.max(0) as u32,
            pgid: facts.pgid,
            leader_start: facts.leader_start,
            supervisor: facts.supervisor,
            started_at_ms: facts.started_at_ms,
            started: facts.started,
            state: Mutex::new(JobState {
                status: JobStatus::Running,
                background: facts.background,
                announced: false,
                has_stdin: facts.has_stdin,
                finished_at: None,
                output: OutputBuf::for_model_cap(output_cap),
                log: Default::default(),
                call_id: facts.call_id,
            }),
            stdin_lock: tokio::sync::Mutex::new(()),
            done,
            forgotten: CancellationToken::new(),
            kill_requested: AtomicBool::new(false),
            exit_seen: AtomicBool::new(false),
            watches: Mutex::new(Default::default()),
            awaited: AtomicBool::new(false),
            ended_away: facts.ended_away,
        }
    }

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
        let command = match &self.remote {
            Some(remote) => format!("[{}] {}", remote.backend, self.command),
            None => self.command.clone(),
        };
        JobInfo {
            id: self.id.clone(),
            command,
            pid: self.pid,
            cwd: self.cwd.display().to_string(),
            started_at_ms: self.started_at_ms,
            status: st.status.clone(),
            background: st.background,
            has_stdin: st.has_stdin,
            last_line: st.output.last_line(200),
            agent: None,
        }
    }

    fn exit(&self) -> Option<ExitInfo> {
        self.done.borrow().clone()
    }
}

impl JobsHandle {
    pub fn start_with(
        paths: &Paths,
        config: Arc<Config>,
        events: EventSink,
        options: JobsOptions,
    ) -> (JobsHandle, mpsc::UnboundedReceiver<JobId>) {
        JobsHandle::start_sharing(paths, config, events, options, None)
    }

    /// [`JobsHandle::start_with`], keeping the job records through `store` (the session's:
    /// a start opens the database once) or, with `None`, a handle of their own.
    pub fn start_sharing(
        paths: &Paths,
        config: Arc<Config>,
        events: EventSink,
        options: JobsOptions,
        store: Option<Store>,
    ) -> (JobsHandle, mpsc::UnboundedReceiver<JobId>) {
        let dir = paths.jobs_dir.clone();
        if let Err(e) = paths.ensure_dirs() {
            events.send(Event::notice(
                NoticeLevel::Warn,
                format!("cannot create {}: {e}; job logs will not be kept", dir.display()),
            ));
        }
        let store = match store.map_or_else(|| Store::open(&paths.state_db), Ok) {
            Ok(store) => Some(store),
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the database for job records");
                events.send(Event::notice(
                    NoticeLevel::Warn,
                    format!("cannot keep job records ({e}); jobs cannot be re-attached after a restart"),
                ));
                None
            }
        };
        let exe = match options.supervisor.resolve() {
            Ok(exe) => Some(exe),
            Err(e) => {
                events.send(Event::notice(
                    NoticeLevel::Error,
                    format!("cannot find the talaria binary to supervise jobs: {e}"),
                ));
                None
            }
        };
        let (finished_tx, finished_rx) = mpsc::unbounded_channel();
        let workspace = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let sandbox = crate::engine::sandbox::Policy::from_config(&config.sandbox, &workspace, paths, home.as_deref());
        let config_for_backends = config.clone();
        let registry = Arc::new(Registry {
            config,
            next_num: AtomicU64::new(records::max_dir_num(&dir) + 1),
            dir,
            events,
            store,
            exe,
            boot_id: jobdir::boot_id(),
            jobs: Mutex::new(BTreeMap::new()),
            notices: Mutex::new(Vec::new()),
            finished_tx,
            shutting_down: AtomicBool::new(false),
            leave: AtomicBool::new(false),
            sandbox: Mutex::new(sandbox),
            records_gate: tokio::sync::RwLock::new(()),
            proxy: Mutex::new(None),
            agents: Default::default(),
            backends: crate::engine::backend::Backends::new(
                config_for_backends,
                paths.jobs_dir.parent().map(|p| p.join("ssh")).unwrap_or_else(|| PathBuf::from("ssh")),
            ),
        });
        if options.sweep || options.attach.is_some() {
            let reg = registry.clone();
            tokio::spawn(async move { reg.sweep_and_attach(options.sweep, options.attach).await });
        }
        (JobsHandle { inner: registry }, finished_rx)
    }

    /// Does job `id` run inside the sandbox? None for an unknown id.
    pub(crate) fn is_sandboxed(&self, id: &str) -> Option<bool> {
        self.inner.get(id).map(|job| job.sandboxed)
    }

    /// The sandbox policy jobs run under.
    pub(crate) fn sandbox_policy(&self) -> crate::engine::sandbox::Policy {
        lock(&self.inner.sandbox).clone()
    }

    /// Make `workspace` (the session's starting directory) the writable root in place of
    /// the process's current directory.
    pub(crate) fn set_workspace(&self, workspace: &Path, paths: &Paths) {
        // Most sessions start where talaria did: the policy is already this one.
        if lock(&self.inner.sandbox).workspace == crate::engine::sandbox::canonical(workspace) {
            return;
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut policy =
            crate::engine::sandbox::Policy::from_config(&self.inner.config.sandbox, workspace, paths, home.as_deref());
        policy.proxy_port = lock(&self.inner.proxy).as_ref().map(|p| p.port());
        *lock(&self.inner.sandbox) = policy;
    }

    /// Sandboxed jobs reach the network through `proxy` from now on (`network = "ask"`).
    pub(crate) fn set_proxy(&self, proxy: crate::engine::netproxy::client::ProxyClient) {
        lock(&self.inner.sandbox).proxy_port = Some(proxy.port());
        *lock(&self.inner.proxy) = Some(proxy);
    }

    /// The session's network proxy, when one runs.
    pub(crate) fn proxy(&self) -> Option<crate::engine::netproxy::client::ProxyClient> {
        lock(&self.inner.proxy).clone()
    }

    /// The talaria binary that runs supervisors (and the network proxy's process).
    pub(crate) fn exe(&self) -> Option<PathBuf> {
        self.inner.exe.clone()
    }

    /// Start a command under its own supervisor, in its own session and process group.
    pub async fn spawn(&self, spec: SpawnSpec) -> Result<Spawned, SpawnError> {
        run::spawn(&self.inner, spec, None).await
    }

    /// Start a command on a remote backend: the local job is its transport (DESIGN §4b).
    /// `spec.cwd` is the local directory the transport runs in; the command runs in
    /// `target.cwd` over there.
    pub async fn spawn_remote(&self, spec: SpawnSpec, target: RemoteTarget) -> Result<Spawned, SpawnError> {
        run::spawn(&self.inner, spec, Some(target)).await
    }

    /// The remote backends (the session's choice, connection states, remote cwds).
    pub fn backends(&self) -> &crate::engine::backend::Backends {
        &self.inner.backends
    }

    /// What the transport of a remote job said on its stderr (markers included), while its
    /// job directory exists.
    pub(crate) fn transport_stderr(&self, id: &str) -> Option<String> {
        let job = self.inner.get(id)?;
        std::fs::read_to_string(job.dir.path.join(run::TRANSPORT_ERR)).ok()
    }

    /// What the job printed so far, as the model sees it: ANSI stripped and capped at
    /// `tool_output.max_chars`. None for an unknown id.
    pub(crate) async fn output_for_model(&self, id: &str) -> Option<String> {
        let job = self.inner.get(id)?;
        let max = self.inner.config.tool_output.max_chars;
        let text = job.state().output.model_text(max);
        Some(text)
    }

    /// The connections the sandbox stopped for job `id`, as its supervisor recorded them.
    pub(crate) fn sandbox_denials(&self, id: &str) -> Vec<crate::engine::sandbox::notify::Denial> {
        let Some(job) = self.inner.get(id) else { return Vec::new() };
        crate::engine::sandbox::notify::read_denials(&job.dir.path.join(crate::engine::sandbox::notify::DENIALS_FILE))
    }

    /// Stop awaiting: the job is a background job from now on (yield). Returns false when
    /// it has already finished (the caller should use its exit instead).
    pub(crate) async fn adopt(&self, id: &str) -> bool {
        match self.inner.get(id) {
            Some(job) => {
                job.awaited.store(true, Ordering::SeqCst);
                self.inner.make_background(&job)
            }
            None => false,
        }
    }

    /// Kill a job's process group (SIGTERM, grace, SIGKILL) and wait until it is gone.
    /// None for an unknown id; a job that had already ended returns its exit.
    pub async fn kill(&self, id: &str) -> Option<ExitInfo> {
        let job = self.inner.get(id)?;
        Some(self.inner.kill_job(&job).await)
    }

    /// Kill a job's group and drop it without telling the model: what a goal gate left
    /// running behind its shell (`cmd &`) belongs to the gate, not to the session. Returns
    /// its exit and what it printed (as `output_for_model`).
    pub(crate) async fn discard(&self, id: &str) -> Option<(ExitInfo, String)> {
        let job = self.inner.get(id)?;
        job.exit_seen.store(true, Ordering::SeqCst);
        let exit = self.inner.kill_job(&job).await;
        lock(&self.inner.notices).retain(|n| n.id != job.id);
        lock(&job.watches).end(now_ms());
        let text = job.state().output.model_text(self.inner.config.tool_output.max_chars);
        self.inner.remove(job.num);
        Some((exit, text))
    }

    /// Drop a finished foreground job from the registry (its result has been built) and
    /// delete its log and record. Background and running jobs are left alone.
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
        self.inner.all().iter().map(|j| self.inner.job_info(j)).collect()
    }

    /// What became of each job of `session_id` that still has a record (by id): a
    /// resumed transcript marks the jobs that no longer run.
    pub(crate) async fn fates(&self, session_id: &str) -> std::collections::HashMap<JobId, JobFate> {
        let mut out = std::collections::HashMap::new();
        let Some(store) = &self.inner.store else { return out };
        let rows = match store.jobs_recent(Some(session_id), 1000).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the job records");
                return out;
            }
        };
        for row in rows {
            let live = self.inner.get(&row.id()).map(|j| j.state().status.clone());
            let fate = match live {
                Some(JobStatus::Running) => JobFate::Running,
                // This talaria saw it end but its record is not written yet.
                Some(status) if row.status == RecordStatus::Running => {
                    let away = self.inner.get(&row.id()).is_some_and(|j| j.ended_away);
                    match JobFate::of_status(&status) {
                        JobFate::Finished { code, .. } if away => JobFate::Finished { code, while_away: true },
                        fate => fate,
                    }
                }
                _ => records::fate_of_row(&self.inner.dir, &row, &self.inner.boot_id),
            };
            out.insert(row.id(), fate);
        }
        out
    }

    /// How long the oldest notice for `session_id` has waited (ms), if there is one (the
    /// scheduler asks: idle notices within `jobs.notice_window_s` start one turn).
    pub(crate) fn notice_wait_ms(&self, session_id: &str) -> Option<u64> {
        let now = now_ms();
        lock(&self.inner.notices)
            .iter()
            .filter(|n| n.session_id == session_id)
            .map(|n| now.saturating_sub(n.queued_at_ms))
            .max()
    }

    /// Notices for `session_id` the model has not been told, in the order they came:
    /// finished jobs whose exit it has not seen, and watch matches. Each is returned once
    /// per talaria process. Delivering an exit notice (appending it as a `job_notice`
    /// message) marks the job notified in the database, so a later talaria does not tell
    /// it again; a watch notice (`watch_notice`) marks nothing.
    pub async fn take_notices(&self, session_id: &str) -> Vec<JobNotice> {
        let taken: Vec<JobNotice> = {
            let mut notices = lock(&self.inner.notices);
            let (taken, kept) = std::mem::take(&mut *notices).into_iter().partition(|n| n.session_id == session_id);
            *notices = kept;
            taken
        };
        for notice in taken.iter().filter(|n| n.kind == NoticeKind::Exit) {
            if let Some(job) = self.inner.get(&notice.id) {
                job.exit_seen.store(true, Ordering::SeqCst);
            }
        }
        taken
    }

    /// Take over the jobs of `session_id` (a `/resume` inside a running talaria), as
    /// `talaria --resume` does at start: its live jobs appear in the pane with their whole
    /// log, and those that ended while nobody watched are noticed once. Jobs followed here
    /// already, and jobs another live talaria owns, are left alone.
    pub fn attach_session(&self, session_id: &str) {
        let reg = self.inner.clone();
        let session = session_id.to_string();
        tokio::spawn(async move { reg.sweep_and_attach(false, Some(session)).await });
    }

    /// Leave running jobs running when talaria shuts down: `detach` = kept on purpose
    /// (no deadline); otherwise each waits `jobs.orphan_grace_s` for a new owner.
    pub fn leave_running(&self, detach: bool) {
        self.inner.leave.store(true, Ordering::SeqCst);
        if detach {
            for job in self.inner.all().iter().filter(|j| j.is_running() && !j.dies_with_owner) {
                if let Err(e) = job.dir.write_owner(&Owner::Detached) {
                    tracing::warn!(error = %e, id = %job.id, "cannot detach the job");
                }
            }
        }
    }

    /// Kill every running job (quit, signals) unless `leave_running` was called. Logs of
    /// jobs that need nothing more are removed. Returns the jobs it killed.
    pub async fn shutdown(&self) -> Vec<KilledJob> {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        let leave = self.inner.leave.load(Ordering::SeqCst);
        // Jobs still starting are registered first, so they are collected below (a spawn
        // that begins from now on refuses). Bounded: a supervisor that hangs in its start
        // is killed by the spawn's own check once it answers.
        let in_flight = tokio::time::timeout(SPAWNS_SETTLE, self.inner.records_gate.write()).await;
        let running: Vec<Arc<Job>> = self.inner.all().into_iter().filter(|j| j.is_running()).collect();
        drop(in_flight);
        // Leaving jobs running still kills those nobody could take over (goal gates).
        let kills = running
            .iter()
            .filter(|job| !leave || job.dies_with_owner)
            .map(|job| self.inner.kill_job_because(job, records::QUIT_REASON));
        futures_util::future::join_all(kills).await;
        let pending: Vec<JobId> =
            lock(&self.inner.notices).iter().filter(|n| n.kind == NoticeKind::Exit).map(|n| n.id.clone()).collect();
        for job in self.inner.all() {
            if job.is_running() || pending.contains(&job.id) {
                job.forgotten.cancel();
            } else if job.state().background {
                // The record stays: a resumed transcript says how the job ended.
                self.inner.remove_keeping_record(job.num);
            } else {
                self.inner.remove(job.num);
            }
        }
        if let Some(store) = &self.inner.store {
            let _ = store.flush().await;
        }
        if leave {
            return Vec::new();
        }
        running
            .iter()
            .map(|j| KilledJob {
                id: j.id.clone(),
                command: j.command.clone(),
                awaited: j.awaited.load(Ordering::SeqCst),
            })
            .collect()
    }
}

impl Registry {
    /// `job_3`, `agent_3` (as the pane names a sub-agent), or just `3` (models do that).
    fn get(&self, id: &str) -> Option<Arc<Job>> {
        let id = id.trim();
        let num: u64 = id.strip_prefix("job_").or_else(|| id.strip_prefix("agent_")).unwrap_or(id).parse().ok()?;
        lock(&self.jobs).get(&num).cloned()
    }

    /// A job as the UI lists it; a sub-agent's last line is its last activity.
    fn job_info(&self, job: &Job) -> JobInfo {
        let mut info = job.info();
        info.agent = self.agent_info(job).map(Box::new);
        if let Some(agent) = &info.agent {
            info.last_line = agent.activity.clone();
        }
        info
    }

    fn all(&self) -> Vec<Arc<Job>> {
        lock(&self.jobs).values().cloned().collect()
    }

    fn kill_grace(&self) -> Duration {
        Duration::from_secs_f64(self.config.terminal.kill_grace_s.max(0.0))
    }

    /// Drop a job: its follower stops, its directory and record go.
    fn remove(&self, num: u64) {
        let job = lock(&self.jobs).remove(&num);
        if let Some(job) = job {
            job.forgotten.cancel();
            job.dir.remove();
            if let Some(store) = &self.store {
                drop(store.job_delete(num as i64));
            }
        }
    }

    /// Drop a finished job from memory and disk; its record (how it ended) stays.
    fn remove_keeping_record(&self, num: u64) {
        let job = lock(&self.jobs).remove(&num);
        if let Some(job) = job {
            job.forgotten.cancel();
            job.dir.remove();
        }
    }

    /// Make room for one more job: prune finished jobs, those the model already heard
    /// about first, oldest first.
    fn make_room(&self) -> Result<(), SpawnError> {
        let max = self.config.jobs.max_jobs.max(1);
        let unseen: Vec<JobId> =
            lock(&self.notices).iter().filter(|n| n.kind == NoticeKind::Exit).map(|n| n.id.clone()).collect();
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
            return Err(SpawnError::TooManyJobs { max });
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
            let was = st.background;
            st.background = true;
            st.call_id = None;
            if !was && job.remote.is_some() {
                // Its transport re-attaches after a dropped connection from now on.
                let _ = std::fs::write(job.dir.path.join(run::BACKGROUND), "");
            }
            if !was {
                if let Some(store) = &self.store {
                    drop(store.job_set_background(job.num as i64));
                }
            }
            let announced = std::mem::replace(&mut st.announced, true);
            drop(st);
            if !was && job.remote.is_none() {
                // A moved job gives way as one started in the background does.
                priority::lower_job(job.pgid, job.leader_start, job.supervisor, self.config.jobs.nice_for(true));
            }
            if announced {
                return true;
            }
            self.job_info(job)
        };
        self.events.send(Event::JobStarted { job: info });
        true
    }

    /// A remote job's connection went down (its transport tries to re-attach) or came
    /// back: the job shows `reconnecting` / `running`, and so does its backend.
    fn track_remote_link(&self, job: &Job) {
        let down = run::remote_reconnecting(&job.dir);
        let event = {
            let mut st = job.state();
            let next = match (&st.status, down) {
                (JobStatus::Running, true) => JobStatus::Reconnecting,
                (JobStatus::Reconnecting, false) => JobStatus::Running,
                _ => return,
            };
            st.status = next.clone();
            let tail = crate::text::tail_chars(st.output.tail(), 2000).to_string();
            st.announced.then(|| Event::JobUpdated { id: job.id.clone(), status: next, tail })
        };
        if let Some(remote) = &job.remote {
            self.backends.job_link(&remote.backend, !down);
        }
        if let Some(event) = event {
            self.events.send(event);
        }
    }

    /// Renew a remote job's lease on its host until it ends (DESIGN §4b): its remote watchdog
    /// kills it when this stops — talaria gone, and the host unreachable when the grace
    /// expired, so the supervisor's own kill could not get there.
    async fn keep_remote_lease(self: Arc<Self>, job: Arc<Job>, lease_s: f64) {
        use crate::engine::backend::remote;
        let Some(remote) = job.remote.clone() else { return };
        let prefix = remote::job_dir_expr(&remote.remote_dir, &remote.tag);
        let every = Duration::from_secs_f64((lease_s / 4.0).clamp(1.0, 60.0));
        let limit = Duration::from_secs(self.config.terminal.ssh.connect_timeout_s + 10);
        let mut done = job.done.subscribe();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = async { drop(done.wait_for(Option::is_some).await) } => return,
                _ = job.forgotten.cancelled() => return,
            }
            let script = remote::lease_script(&prefix, now_ms());
            if let Err(d) = self.backends.run_script(&remote.backend, &script, None, limit).await {
                tracing::debug!(id = %job.id, reason = %d.reason, "cannot renew the remote lease");
            }
        }
    }

    async fn kill_job(&self, job: &Job) -> ExitInfo {
        self.kill_job_because(job, "").await
    }

    /// Kill a job; `reason` (may be empty) goes into its exit record.
    async fn kill_job_because(&self, job: &Job, reason: &str) -> ExitInfo {
        if let Some(exit) = job.exit() {
            return exit;
        }
        if job.is_running() {
            job.kill_requested.store(true, Ordering::SeqCst);
            // The exit record says `killed` whoever reads it.
            let _ = job.dir.write_kill(reason);
            if let Some(remote) = &job.remote {
                self.kill_remote(job, remote).await;
            }
            if !group::kill_group(job.pgid, self.kill_grace()).await {
                tracing::warn!(id = %job.id, pgid = job.pgid, "process group survived SIGKILL");
            }
        }
        let mut done = job.done.subscribe();
        let wait = self.kill_grace() + Duration::from_secs(10);
        let _ = tokio::time::timeout(wait, done.wait_for(Option::is_some)).await;
        let exit = done.borrow().clone();
        exit.unwrap_or(ExitInfo {
            code: None,
            signal: None,
            killed: true,
            leftover: false,
            cwd: None,
            reason: (!reason.is_empty()).then(|| reason.to_string()),
            lost: false,
        })
    }

    /// Kill the remote group of a remote job over its backend (before its local transport).
    async fn kill_remote(&self, job: &Job, remote: &crate::engine::backend::RemoteJob) {
        use crate::engine::backend::remote;
        let script = remote::kill_script(
            &remote::job_dir_expr(&remote.remote_dir, &remote.tag),
            self.config.terminal.kill_grace_s,
        );
        let limit = self.kill_grace() + Duration::from_secs(self.config.terminal.ssh.connect_timeout_s + 15);
        if let Err(d) = self.backends.run_script(&remote.backend, &script, None, limit).await {
            tracing::warn!(id = %job.id, reason = %d.reason, "cannot kill the remote group");
            self.events.send(Event::notice(
                NoticeLevel::Warn,
                format!(
                    "{}: cannot reach {} to kill the remote command ({}); it may still run there",
                    job.id, remote.backend, d.reason
                ),
            ));
        }
    }

    /// The job has ended: record it (once, in SQLite), tell the UI and (for background
    /// jobs) queue the model's notification.
    async fn finish(&self, job: &Job, exit: ExitInfo) {
        // Its proxy credential ends with it, not at quit (a process it left must not go on).
        if let Some(proxy) = lock(&self.proxy).as_ref() {
            proxy.job_ended(&job.id);
        }
        let status = exit.status();
        let (announced, background, tail) = {
            let mut st = job.state();
            st.status = status.clone();
            st.finished_at = Some(Instant::now());
            st.has_stdin = false;
            st.call_id = None;
            (st.announced, st.background, st.output.clean_tail(1000))
        };
        if announced {
            self.events.send(Event::JobFinished { id: job.id.clone(), status: status.clone() });
        }
        // A lost remote job says why (its host stayed unreachable); a lost local one is told
        // by the session's resume.
        let quiet = (exit.lost && exit.reason.is_none()) || !background || self.shutting_down.load(Ordering::SeqCst);
        let mut notice = (!quiet).then(|| match exit.reason.as_deref().filter(|_| exit.lost) {
            Some(why) => actions::lost_notice_text(&job.id, why, job.runtime(), &job.command, &tail),
            None => actions::notice_text(&job.id, &status, job.runtime(), &job.command, &tail),
        });
        if notice.is_some() && !job.exit_seen.load(Ordering::SeqCst) {
            // A sub-agent is told by its final answer, not by its event stream's tail.
            if let Some(text) = self.agent_notice(job, &status).await {
                notice = Some(text);
            }
        }
        if let Some(store) = &self.store {
            let end = JobEnd {
                status: actions::record_status(&status),
                exit_code: exit.code.map(i64::from),
                signal: exit.signal.map(i64::from),
                reason: exit.reason.clone(),
                ended_at: now_ms() as i64,
                notice: notice.clone(),
                notified: notice.is_none() || job.exit_seen.load(Ordering::SeqCst),
            };
            match store.job_finish(job.num as i64, end).await {
                Ok(true) => {}
                // Another talaria recorded it first: deliver its notice if still due.
                Ok(false) => {
                    notice = match store.job_get(job.num as i64).await {
                        Ok(Some(row)) if !row.notified => row.notice,
                        _ => None,
                    }
                }
                Err(e) => tracing::warn!(error = %e, id = %job.id, "cannot record the end of the job"),
            }
        }
        if let Some(text) = notice {
            if !job.exit_seen.load(Ordering::SeqCst) {
                self.queue_notice(job, NoticeKind::Exit, text);
            }
        }
        // Done before the exit is seen: a `process wait` that returns now says so.
        self.agent_done(job);
        job.done.send_replace(Some(exit));
    }

    /// Queue a notice for the model and wake the engine.
    fn queue_notice(&self, job: &Job, kind: NoticeKind, text: String) {
        let notice =
            JobNotice { id: job.id.clone(), session_id: job.session_id.clone(), kind, text, queued_at_ms: now_ms() };
        lock(&self.notices).push(notice);
        let _ = self.finished_tx.send(job.id.clone());
    }

    /// The model saw this job's exit through `process`: never notify it (its watch
    /// notices still go out).
    fn mark_seen(&self, job: &Job) {
        job.exit_seen.store(true, Ordering::SeqCst);
        lock(&self.notices).retain(|n| n.id != job.id || n.kind != NoticeKind::Exit);
        if let Some(store) = &self.store {
            drop(store.job_mark_notified(job.num as i64));
        }
    }
}

impl Registry {
    fn watch_limits(&self) -> watches::Limits {
        let cooldown = self.config.jobs.watch_cooldown_s.max(0.0) * 1000.0;
        watches::Limits { cooldown_ms: cooldown as u64, max_notices: self.config.jobs.watch_max_notices.max(1) }
    }

    fn add_watch(&self, job: &Job, pattern: &str, owner: watches::WatchOwner) -> Result<bool, String> {
        if !job.is_running() {
            return Err(format!(
                "{} has already ended; a watch only sees new output (process(action='log') shows what it printed)",
                job.id
            ));
        }
        // The job's unfinished last line, so a line half written now is matched whole.
        let partial = {
            let st = job.state();
            let tail = crate::text::tail_chars(st.output.tail(), 4096);
            tail.rsplit('\n').next().unwrap_or("").to_string()
        };
        let added = lock(&job.watches).add(pattern, owner, self.watch_limits(), &partial);
        match added {
            Ok(replaced) => {
                self.publish_watches(job);
                Ok(replaced)
            }
            Err(watches::AddError::BadPattern(e)) => Err(e),
            Err(watches::AddError::TooMany) => Err(format!(
                "{} already has {} watches; remove one with process(action='unwatch', session_id, pattern) first",
                job.id,
                watches::MAX_WATCHES
            )),
        }
    }

    /// New output of a job reached talaria: match its watches.
    fn feed_watches(&self, job: &Job, text: &str) {
        self.feed_agent(job, text);
        let hits = {
            let mut watches = lock(&job.watches);
            if watches.is_empty() {
                return;
            }
            let now = now_ms();
            let mut hits = watches.feed(text, now);
            // A job that never goes quiet still has its cooldowns end.
            hits.extend(watches.quiet(now));
            hits
        };
        self.deliver_hits(job, hits);
    }

    /// The job printed nothing new: cooldowns that ended release what they held back.
    fn quiet_watches(&self, job: &Job) {
        let hits = {
            let mut watches = lock(&job.watches);
            if watches.is_empty() {
                return;
            }
            watches.quiet(now_ms())
        };
        self.deliver_hits(job, hits);
    }

    /// The job ended (all its output read): its watches say what is left, then end.
    fn end_watches(&self, job: &Job) {
        let hits = {
            let mut watches = lock(&job.watches);
            if watches.is_empty() {
                return;
            }
            watches.end(now_ms())
        };
        self.deliver_hits(job, hits);
        self.publish_watches(job);
    }

    fn deliver_hits(&self, job: &Job, hits: Vec<watches::Hit>) {
        if hits.is_empty() {
            return;
        }
        let max = self.config.jobs.watch_max_notices.max(1);
        let mut ended = false;
        for hit in hits {
            ended |= hit.fire.last;
            match hit.owner {
                watches::WatchOwner::Model => {
                    let text = watches::notice_text(&job.id, &hit.pattern, &hit.fire, max);
                    self.queue_notice(job, NoticeKind::Watch, text);
                }
                watches::WatchOwner::User => self.events.send(Event::WatchMatched {
                    id: job.id.clone(),
                    pattern: hit.pattern,
                    line: hit.fire.line,
                    more: hit.fire.more,
                    ended: hit.fire.last,
                }),
            }
        }
        if ended {
            self.publish_watches(job);
        }
    }

    /// Tell the UI which patterns the user watches on this job (the log view shows them).
    fn publish_watches(&self, job: &Job) {
        let patterns = lock(&job.watches).patterns(watches::WatchOwner::User);
        self.events.send(Event::JobWatches { id: job.id.clone(), patterns });
    }
}
