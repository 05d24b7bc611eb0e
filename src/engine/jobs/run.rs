//! Spawning a job: a record in SQLite, a job directory, and a supervisor (`talaria
//! __job`) that starts the command and answers with the job's pids once `setsid` has run.

use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;
use tokio::sync::oneshot;

use super::follow::{follow, LogReader};
use super::jobdir::{self, Handshake, JobDir, Owner, Spec};
use super::{lock, now_ms, Job, JobFacts, Registry, RemoteTarget, SpawnSpec, Spawned};
use crate::engine::backend::{remote, RemoteJob};
use crate::engine::process::sh_quote;
use crate::engine::store::jobs::{JobPids, NewJob};
use crate::engine::store::StoreError;

/// How long a supervisor may take to start the command (a loaded machine is slow).
const HANDSHAKE_WAIT: Duration = Duration::from_secs(30);
/// In a remote job's local directory: the transport's stderr (ssh's own messages and the
/// remote script's markers).
pub(super) const TRANSPORT_ERR: &str = "transport.err";
/// In a remote job's local directory: where it runs (`RemoteJob`).
pub(super) const REMOTE_JSON: &str = "remote.json";
/// In a remote job's local directory, while its connection is down and its transport tries
/// to re-attach.
pub(super) const REMOTE_STATE: &str = "remote.state";
/// In a remote job's local directory: the stderr of the current re-attach attempt.
pub(super) const ATTACH_ERR: &str = "attach.err";
/// In a remote job's local directory: why it is lost (no exit code will come).
pub(super) const REMOTE_LOST: &str = "remote.lost";
/// In a remote job's local directory: the job was moved to the background (a foreground
/// remote command re-attaches after a dropped connection only from then on).
pub(super) const BACKGROUND: &str = "background";

/// Why a command could not be started. The text is what the model (or the user) reads.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("talaria is shutting down; no new commands are started")]
    ShuttingDown,
    #[error("cannot start commands: the talaria binary that supervises them was not found")]
    NoSupervisor,
    #[error(
        "too many jobs: {max} are running (jobs.max_jobs); kill one with process(action='kill', session_id=...) first"
    )]
    TooManyJobs { max: usize },
    #[error("cannot record the job: {0}")]
    Record(#[source] StoreError),
    #[error("cannot create {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot write the job directory {}: {source}", path.display())]
    WriteDir { path: PathBuf, source: std::io::Error },
    #[error("cannot start the job supervisor {}: {source}", exe.display())]
    StartSupervisor { exe: PathBuf, source: std::io::Error },
    #[error("the job supervisor has no stdout")]
    NoHandshakePipe,
    #[error("cannot hear from the job supervisor: {0}")]
    Handshake(#[source] std::io::Error),
    #[error("the job supervisor did not start the command within {}s", HANDSHAKE_WAIT.as_secs())]
    HandshakeTimeout,
    /// The supervisor could not start the command; its own words.
    #[error("{0}")]
    CommandFailed(String),
    #[error("the job supervisor exited before starting the command")]
    SupervisorExited,
}

pub(super) async fn spawn(
    reg: &Arc<Registry>,
    spec: SpawnSpec,
    target: Option<RemoteTarget>,
) -> Result<Spawned, SpawnError> {
    if reg.shutting_down.load(Ordering::SeqCst) {
        return Err(SpawnError::ShuttingDown);
    }
    let exe = reg.exe.clone().ok_or(SpawnError::NoSupervisor)?;
    // Until the job is in `reg.jobs`, a sweep must not see its record (it would adopt it).
    let records_gate = reg.records_gate.read().await;
    if reg.shutting_down.load(Ordering::SeqCst) {
        // The shutdown collected the jobs while this spawn waited.
        return Err(SpawnError::ShuttingDown);
    }
    reg.make_room()?;
    let started_at_ms = now_ms();
    let num = job_number(reg, &spec, started_at_ms).await?;
    let id = format!("job_{num}");
    let jd = JobDir::new(&reg.dir, &id);
    let remote_job = target.as_ref().map(|t| RemoteJob {
        backend: t.backend.clone(),
        remote_dir: reg.config.terminal.ssh.remote_dir.clone(),
        tag: format!("{id}-{:08x}", rand_u32()),
    });
    if let (Some(store), Some(r)) = (&reg.store, &remote_job) {
        drop(store.job_set_backend(num as i64, r.backend.label()));
    }
    let transport = match (&target, &remote_job) {
        (Some(t), Some(r)) => Some(transport_script(reg, &spec, t, r, &jd)),
        _ => None,
    };
    let result = start_supervisor(reg, &spec, &jd, &exe, transport.as_ref()).await;
    let (started, child) = match result {
        Ok(ok) => ok,
        Err(e) => {
            if let Some(proxy) = lock(&reg.proxy).as_ref() {
                proxy.job_ended(&id);
            }
            jd.remove();
            if let Some(store) = &reg.store {
                drop(store.job_delete(num as i64));
            }
            return Err(e);
        }
    };
    let Started { supervisor_pid, supervisor_start, pgid, leader_start } = started;
    if let Some(proxy) = lock(&reg.proxy).as_ref() {
        proxy.job_started(&id, supervisor_pid as i32, supervisor_start);
    }
    // Reap the supervisor if it ends while we live (it is our child until we exit).
    tokio::spawn(async move {
        let mut child = child;
        let _ = child.wait().await;
    });
    record_pids(reg, num, &id, &started).await;

    let facts = JobFacts {
        sandboxed: spec.sandboxed && remote_job.is_none(),
        remote: remote_job,
        dies_with_owner: spec.orphan_grace_s.is_some_and(|g| g <= 0.0),
        num,
        id: id.clone(),
        command: spec.command.clone(),
        cwd: spec.cwd.clone(),
        session_id: spec.session_id.clone(),
        dir: jd.clone(),
        pgid,
        leader_start,
        supervisor: (supervisor_pid as i32, supervisor_start),
        started_at_ms,
        started: Instant::now(),
        background: spec.background,
        has_stdin: spec.background,
        call_id: if spec.background { None } else { spec.call_id.clone() },
        ended_away: false,
    };
    let job = Arc::new(Job::running(facts, reg.config.tool_output.max_chars));
    lock(&reg.jobs).insert(num, job.clone());
    drop(records_gate);
    if job.remote.is_some() {
        let lease_s = spec.orphan_grace_s.unwrap_or(reg.config.jobs.orphan_grace_s);
        tokio::spawn(reg.clone().keep_remote_lease(job.clone(), lease_s));
    }
    if spec.background {
        // Announce before following, so even a job that ends at once is seen starting.
        reg.make_background(&job);
    }
    let (exit_tx, exit_rx) = oneshot::channel();
    let reader = LogReader::open(&jd);
    tokio::spawn(follow(reg.clone(), job.clone(), reader, Some(exit_tx)));
    // A shutdown that began while this job was starting collected the running jobs without
    // it (it sets the flag first, then reads the jobs): the job must not escape it.
    if reg.shutting_down.load(Ordering::SeqCst) && (!reg.leave.load(Ordering::SeqCst) || job.dies_with_owner) {
        reg.kill_job_because(&job, super::records::QUIT_REASON).await;
        return Err(SpawnError::ShuttingDown);
    }
    Ok(Spawned { id, pid: pgid as u32, exit: exit_rx })
}

/// The job's number: its row in the database (which counts across restarts), else the next
/// in this process.
async fn job_number(reg: &Registry, spec: &SpawnSpec, started_at_ms: u64) -> Result<u64, SpawnError> {
    Ok(match &reg.store {
        Some(store) => {
            let new = NewJob {
                session_id: spec.session_id.clone(),
                command: spec.command.clone(),
                cwd: spec.cwd.display().to_string(),
                background: spec.background,
                has_stdin: spec.background,
                boot_id: reg.boot_id.clone(),
                started_at: started_at_ms as i64,
            };
            let num = store.job_insert(new).await.map_err(SpawnError::Record)? as u64;
            reg.next_num.fetch_max(num + 1, Ordering::SeqCst);
            num
        }
        None => reg.next_num.fetch_add(1, Ordering::SeqCst),
    })
}

/// The started job's process ids in its row, so a later talaria can find and check it.
async fn record_pids(reg: &Registry, num: u64, id: &str, started: &Started) {
    if let Some(store) = &reg.store {
        let pids = JobPids {
            pgid: i64::from(started.pgid),
            leader_start: started.leader_start as i64,
            supervisor_pid: i64::from(started.supervisor_pid),
            supervisor_start: started.supervisor_start as i64,
        };
        if let Err(e) = store.job_started(num as i64, pids).await {
            tracing::warn!(error = %e, id = %id, "cannot record the job's pids");
        }
    }
}

/// What the supervisor's handshake says about a started job.
#[derive(Clone, Copy)]
struct Started {
    supervisor_pid: u32,
    supervisor_start: u64,
    pgid: i32,
    leader_start: u64,
}

/// Write the job directory and start `<exe> __job <dir>` in its own session; wait for
/// its handshake (the command runs under `setsid` by then).
async fn start_supervisor(
    reg: &Registry,
    spec: &SpawnSpec,
    jd: &JobDir,
    exe: &Path,
    transport: Option<&Transport>,
) -> Result<(Started, tokio::process::Child), SpawnError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&jd.path)
        .map_err(|source| SpawnError::CreateDir { path: jd.path.clone(), source })?;
    let terminal = &reg.config.terminal;
    let cwd_file = spec.track_cwd.then(|| jd.cwd_file());
    if cwd_file.is_some() {
        jd.create_cwd_file().map_err(|source| SpawnError::WriteDir { path: jd.path.clone(), source })?;
    }
    let write = |source: std::io::Error| SpawnError::WriteDir { path: jd.path.clone(), source };
    let script = match transport {
        Some(t) => {
            jobdir::write_json(&jd.path.join(REMOTE_JSON), &t.remote).map_err(write)?;
            t.script.clone()
        }
        None => wrap_command(&spec.command, cwd_file.as_deref()),
    };
    let sandbox = (spec.sandboxed && transport.is_none()).then(|| lock(&reg.sandbox).clone());
    let (proxy_vars, sandbox) = proxy_env(reg, spec, jd, sandbox).await;
    let job_spec = Spec {
        shell: if transport.is_some() { "sh".into() } else { terminal.shell.clone() },
        login_shell: terminal.login_shell && transport.is_none(),
        script,
        cwd: spec.cwd.clone(),
        stdin: spec.background,
        log_max_bytes: reg.config.jobs.log_max_bytes,
        orphan_grace_s: spec.orphan_grace_s.unwrap_or(reg.config.jobs.orphan_grace_s),
        kill_grace_s: terminal.kill_grace_s,
        // The supervisor applies it between fork and exec of the command (engine/sandbox).
        sandbox,
        on_kill: transport.map(|t| t.on_kill.clone()),
        track_cwd: cwd_file.is_some(),
        nice: reg.config.jobs.nice_for(spec.background),
    };
    // For a later talaria (re-attach); the supervisor reads its spec from its stdin.
    jobdir::write_json(&jd.spec(), &job_spec).map_err(write)?;
    jd.write_owner(&Owner::me()).map_err(write)?;
    let spec_bytes = serde_json::to_vec(&job_spec).map_err(|e| write(std::io::Error::other(e)))?;

    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("__job").arg(&jd.path).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    // What looks secret reaches no command (DESIGN §6); ssh of a remote job still needs
    // the agent to log in (the remote command gets none of it: nothing is forwarded).
    let filter = crate::engine::sandbox::env::EnvFilter::from_config(&reg.config);
    for var in filter.dropped_here() {
        if !(transport.is_some() && var == "SSH_AUTH_SOCK") {
            cmd.env_remove(var);
        }
    }
    cmd.envs(proxy_vars);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent. The
    // supervisor gets its own session: a hang-up of talaria's terminal never reaches it.
    unsafe {
        cmd.as_std_mut().pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            close_inherited_fds_on_exec();
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| SpawnError::StartSupervisor { exe: exe.to_path_buf(), source })?;
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        // Closed at the end of this block: the supervisor reads to end of file.
        match tokio::time::timeout(HANDSHAKE_WAIT, stdin.write_all(&spec_bytes)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = child.start_kill();
                return Err(SpawnError::Handshake(e));
            }
            Err(_) => {
                let _ = child.start_kill();
                return Err(SpawnError::HandshakeTimeout);
            }
        }
    }
    let stdout = child.stdout.take().ok_or(SpawnError::NoHandshakePipe)?;
    let mut line = String::new();
    let mut reader = tokio::io::BufReader::new(stdout);
    match tokio::time::timeout(HANDSHAKE_WAIT, reader.read_line(&mut line)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(SpawnError::Handshake(e)),
        Err(_) => {
            let _ = child.start_kill();
            return Err(SpawnError::HandshakeTimeout);
        }
    }
    match serde_json::from_str::<Handshake>(line.trim()) {
        Ok(Handshake::Failed { error }) => Err(SpawnError::CommandFailed(error)),
        Ok(Handshake::Started { supervisor_pid, supervisor_start, pgid, leader_start }) => {
            Ok((Started { supervisor_pid, supervisor_start, pgid, leader_start }, child))
        }
        Err(_) => Err(SpawnError::SupervisorExited),
    }
}

/// A sandboxed job in `network = "ask"` gets its own proxy URL (DESIGN §6b), and its
/// policy lets it reach that URL's port (a proxy restarted on another port has a new one);
/// nothing for the rest (outside the sandbox, remote, `on`/`off`).
async fn proxy_env(
    reg: &Registry,
    spec: &SpawnSpec,
    jd: &JobDir,
    mut policy: Option<crate::engine::sandbox::Policy>,
) -> (Vec<(String, String)>, Option<crate::engine::sandbox::Policy>) {
    let Some(p) = policy.as_mut().filter(|p| p.proxy_only) else { return (Vec::new(), policy) };
    let Some(proxy) = lock(&reg.proxy).clone() else { return (Vec::new(), policy) };
    let id = jd.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let denials = Some(jd.path.join(crate::engine::sandbox::notify::DENIALS_FILE));
    match proxy.register_job(&id, &spec.command, denials).await {
        Some(url) => {
            p.proxy_port = crate::engine::netproxy::url_port(&url).or(p.proxy_port);
            (crate::engine::netproxy::job_env(&url), policy)
        }
        // The proxy is gone: the job has no network (its connects are refused, labelled).
        None => (Vec::new(), policy),
    }
}

/// The local side of a remote job: the supervisor runs `script` (the transport), and
/// `on_kill` when it kills the job itself (lease expiry).
struct Transport {
    script: String,
    on_kill: String,
    remote: RemoteJob,
}

fn transport_script(
    reg: &Registry,
    spec: &SpawnSpec,
    target: &RemoteTarget,
    job: &RemoteJob,
    jd: &JobDir,
) -> Transport {
    let prefix = remote::job_dir_expr(&job.remote_dir, &job.tag);
    let lease_s = spec.orphan_grace_s.unwrap_or(reg.config.jobs.orphan_grace_s).ceil() as u64;
    let start =
        remote::start_script(&prefix, &spec.command, &target.cwd, spec.background, &reg.config.terminal.shell, lease_s);
    let start_argv = reg.backends.transport_argv(&target.backend, &start);
    let mut attach_argv = reg.backends.transport_argv(&target.backend, &remote::attach_script(&prefix));
    // `$0` of the attach script; the offset follows at run time.
    attach_argv.push("talaria-attach".into());
    let script = local_follower(
        &jd.path,
        spec.background,
        &quote_argv(&start_argv),
        &quote_argv(&attach_argv),
        &target.backend.label(),
        reg.config.terminal.ssh.reconnect_timeout_s,
    );
    let kill = remote::kill_script(&prefix, reg.config.terminal.kill_grace_s);
    let on_kill =
        format!("{} </dev/null >/dev/null 2>&1", quote_argv(&reg.backends.transport_argv(&target.backend, &kill)));
    Transport { script, on_kill, remote: job.clone() }
}

/// The local side of a remote job (run by its supervisor with `sh -c`): the transport runs
/// the start script; its output goes to the job's log. A background job's output is
/// counted on its way (`tee` + `wc -c`), so after a dropped connection it re-attaches
/// exactly where its output stopped; a foreground command is not slowed down by that, and
/// one moved to the background resumes at what its log holds (exact for text; the log
/// stores invalid UTF-8 replaced). While the connection is down `remote.state` says so (talaria shows the job
/// reconnecting); every re-attach attempt's stderr is `attach.err` (its started marker
/// means attached). Ends with the command's own exit code, or — when the host stays
/// unreachable for `reconnect_s` or the remote job cannot be followed any more — writes
/// `remote.lost` with the reason and exits 255: the job is lost, not "exited 255".
/// A foreground command whose connection drops ends at once (the tool reports it
/// degraded), unless it was moved to the background (`background` file).
fn local_follower(jd: &Path, background: bool, start: &str, attach: &str, label: &str, reconnect_s: u64) -> String {
    let bg = if background { "1" } else { "0" };
    let gave_up = sh_quote(&format!(
        "{label} did not answer for {reconnect_s}s (terminal.ssh.reconnect_timeout_s); \
         the command may still be running there"
    ));
    format!(
        r#"J={jd}; E=$J/{TRANSPORT_ERR}; BG={bg}; off=0
exec 3>&1
run() {{
  f=$1; shift
  {{ "$@" 3>&-; echo $? > "$J/transport.rc"; }} 2>>"$f" | tee /dev/fd/3 | wc -c > "$J/transport.n" 3>&-
  rc=255; n=0
  read -r rc < "$J/transport.rc"; read -r n < "$J/transport.n"
  off=$((off + n))
}}
scan() {{
  S=0; X=; G=
  while IFS= read -r l; do
    case $l in
      {STARTED}*) S=1 ;;
      "{END} "*) X=${{l#{END} }}; X=${{X%% *}} ;;
      {GONE}*) G=${{l#{GONE}}}; G=${{G# }}; [ -n "$G" ] || G="the remote job cannot be followed any more" ;;
    esac
  done < "$1"
}}
lost() {{
  printf '%s
' "$1" > "$J/{REMOTE_LOST}"
  rm -f "$J/{REMOTE_STATE}"
  exit 255
}}
# What the job's log holds (for a job started in the foreground, whose output was not
# counted on its way in): the supervisor's segments and what rotation dropped.
logged() {{
  off=0
  for f in "$J"/out.*.log; do [ -f "$f" ] && off=$((off + $(wc -c < "$f"))); done
  x=
  [ -f "$J/index.json" ] && read -r x < "$J/index.json"
  case $x in *'"dropped_bytes":'*) x=${{x##*\"dropped_bytes\":}}; x=${{x%%[!0-9]*}}; off=$((off + ${{x:-0}})) ;; esac
}}
if [ $BG = 1 ]; then
  run "$E" {start}
else
  {start} 2>>"$E"
  rc=$?
fi
scan "$E"
[ -n "$X" ] && exit "$X"
[ $S = 1 ] || exit $rc
[ $BG = 1 ] || [ -e "$J/{BACKGROUND}" ] || exit $rc
# The connection dropped while the command runs on over there: re-attach.
echo reconnecting > "$J/{REMOTE_STATE}"
since=$(date +%s); pause=1
if [ $BG = 0 ]; then sleep 1; logged; fi
while :; do
  sleep $pause
  [ $pause -lt 5 ] && pause=$((pause + 1))
  : > "$J/{ATTACH_ERR}"
  run "$J/{ATTACH_ERR}" {attach} "$off"
  scan "$J/{ATTACH_ERR}"
  while IFS= read -r l; do printf '%s
' "$l"; done < "$J/{ATTACH_ERR}" >> "$E"
  : > "$J/{ATTACH_ERR}"
  [ -n "$G" ] && lost "$G"
  if [ -n "$X" ]; then rm -f "$J/{REMOTE_STATE}"; exit "$X"; fi
  if [ $S = 1 ]; then since=$(date +%s); pause=1; fi
  [ $(($(date +%s) - since)) -ge {reconnect_s} ] && lost {gave_up}
done
"#,
        jd = sh_quote(&jd.to_string_lossy()),
        STARTED = remote::STARTED,
        END = remote::END,
        GONE = remote::GONE,
    )
}

/// A remote job's transport gave up on it (`remote.lost`): why.
pub(super) fn remote_lost(jd: &JobDir) -> Option<String> {
    let text = std::fs::read_to_string(jd.path.join(REMOTE_LOST)).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// A remote job's connection is down and its transport is trying to re-attach (no attempt
/// has reached the job yet).
pub(super) fn remote_reconnecting(jd: &JobDir) -> bool {
    jd.path.join(REMOTE_STATE).exists()
        && !std::fs::read_to_string(jd.path.join(ATTACH_ERR)).is_ok_and(|t| t.contains(remote::STARTED))
}

fn quote_argv(argv: &[String]) -> String {
    argv.iter().map(|a| sh_quote(a)).collect::<Vec<_>>().join(" ")
}

/// A random number for remote job directory names (unique across talaria homes that share
/// a host).
fn rand_u32() -> u32 {
    let mut buf = [0u8; 4];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf)).is_err() {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        return nanos ^ std::process::id();
    }
    u32::from_ne_bytes(buf)
}

/// Mark every fd above 2 close-on-exec in a freshly forked child, so a command never
/// inherits descriptors talaria itself inherited without CLOEXEC (a daemon would hold
/// them open). Marking rather than closing keeps std's exec-error pipe working. Only
/// async-signal-safe calls: this runs between fork and exec. Old kernels without
/// close_range simply skip it.
#[cfg(target_os = "linux")]
pub(super) fn close_inherited_fds_on_exec() {
    // SAFETY: a raw syscall with integer arguments; it touches no memory.
    unsafe {
        libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC);
    }
}

/// Elsewhere there is no close_range; commands may inherit stray descriptors.
#[cfg(not(target_os = "linux"))]
pub(super) fn close_inherited_fds_on_exec() {}

/// `<shell> -c` script: remember the final working directory in `cwd_file` on exit
/// (a trap, not an inherited fd, which daemons would hold open).
pub(crate) fn wrap_command(command: &str, cwd_file: Option<&Path>) -> String {
    match cwd_file {
        None => command.to_string(),
        Some(file) => format!(
            "__talaria_cwd_file={}; trap 'pwd -P > \"$__talaria_cwd_file\" 2>/dev/null' EXIT\n{command}",
            sh_quote(&file.to_string_lossy())
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        let wrapped = wrap_command("cd /tmp", Some(Path::new("/x/j.cwd")));
        assert!(wrapped.ends_with("\ncd /tmp"));
        assert!(wrapped.starts_with("__talaria_cwd_file='/x/j.cwd'; trap "));
        assert_eq!(wrap_command("ls", None), "ls");
    }
}
