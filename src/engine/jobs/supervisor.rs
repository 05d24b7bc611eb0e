//! `talaria __job <dir>`: the supervisor of one job (DESIGN §4). No tokio, no threads:
//! one `poll` loop. It starts the command in its own session with `PR_SET_PDEATHSIG`
//! (a SIGKILLed supervisor takes the leader with it), reads its output pipe into the
//! capped log, keeps the stdin FIFO open until talaria asks to close it, watches the
//! lease, and writes `exit.json` when the job's group is gone — whether or not any
//! talaria is alive. It lives in its own session, outside the job's group.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::stat::Mode;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::jobdir::{self, ExitRecord, Handshake, IndexFile, JobDir, LeaderExit, OutputTotals, Spec};
use super::log::LogWriter;
use super::output::Utf8Decoder;
use super::supervise::{self, Signals};
use super::{group, now_ms};
use crate::engine::sandbox;

/// After the leader exits, how long output may still be drained before what is left of
/// the group counts as a leftover (`cmd &`).
const DRAIN: Duration = Duration::from_millis(200);
/// How often a leftover group is checked for life, and the lease for its holder.
const GROUP_POLL: Duration = Duration::from_millis(250);
const LEASE_POLL: Duration = Duration::from_secs(1);
/// Bytes read per loop turn at most, so the other checks keep running during a flood.
const READ_BUDGET: usize = 1 << 20;

/// What a terminal or a dying pipe reader would send the supervisor: blocked (and read
/// away with SIGCHLD), so they do nothing. The job gets the default actions back.
const QUIET: [Signal; 5] = [Signal::SIGHUP, Signal::SIGINT, Signal::SIGPIPE, Signal::SIGQUIT, Signal::SIGTSTP];

/// The body of `talaria __job <dir>`. Never returns.
pub fn run(dir: &Path) -> ! {
    let jd = JobDir { path: dir.to_path_buf() };
    let code = match start(&jd) {
        Ok(job) => {
            job.supervise();
            0
        }
        Err(e) => {
            say(&Handshake::Failed { error: e.clone() });
            // The job never ran: still leave an exit record, so nobody waits for it.
            if let Ok(mut log) = jobdir::create_new(&jd.segment(0)) {
                let _ = log.write_all(format!("talaria: {e}\n").as_bytes());
            }
            let _ = jobdir::write_json(
                &jd.exit(),
                &ExitRecord {
                    code: Some(127),
                    signal: None,
                    killed: false,
                    reason: None,
                    ended_at_ms: now_ms(),
                    output: Default::default(),
                },
            );
            1
        }
    };
    std::process::exit(code)
}

/// The most a spec may take on stdin (the script is in it).
const SPEC_MAX: u64 = 64 << 20;

/// The job's spec, as talaria wrote it to our stdin before closing it.
fn read_spec() -> Result<Spec, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin().lock().take(SPEC_MAX).read_to_end(&mut bytes).map_err(|e| format!("cannot read the spec: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("cannot read the spec: {e}"))
}

/// The first and only line on stdout; then stdio goes to /dev/null so talaria's end of
/// the pipe sees end of file.
fn say(handshake: &Handshake) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, handshake);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
    drop(out);
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

struct Running {
    jd: JobDir,
    spec: Spec,
    pid: i32,
    output: OwnedFd,
    /// SIGCHLD (and the quiet signals), read instead of handled.
    signals: Signals,
    /// The supervisor's own write end of the stdin FIFO: the job sees end of file only
    /// once talaria asks (`stdin.eof`) and this is dropped.
    stdin_writer: Option<OwnedFd>,
    /// Serves the job's mediated socket calls (DESIGN §6a).
    sockets: Option<sandbox::notify::Server>,
    /// The job's own cgroup (`sandbox.limits.processes`), removed when it is gone.
    cgroup: Option<sandbox::limits::JobCgroup>,
}

fn start(jd: &JobDir) -> Result<Running, String> {
    // Own session already (talaria started us with setsid). Before any thread starts: the
    // signals are blocked and read from a descriptor; an inherited SIG_IGN for SIGCHLD would
    // reap the job behind our back.
    supervise::reset_dispositions(&[Signal::SIGCHLD]);
    let mut blocked = QUIET.to_vec();
    blocked.push(Signal::SIGCHLD);
    let signals = Signals::block(&blocked).map_err(|e| format!("cannot watch the job: {e}"))?;
    // The spec comes over stdin from the talaria that started us, never from a file a job
    // could have rewritten (DESIGN §6a).
    let mut spec = read_spec()?;
    if let (Some(policy), true) = (spec.sandbox.as_mut(), spec.track_cwd) {
        // The one file of the job directory the job may write: where its shell says it ended.
        policy.job_files.push(jd.cwd_file());
    }
    // This process and its own session; the command's session gets it after its setsid.
    super::priority::lower_self(spec.nice);
    let job_autogroup = super::priority::ChildAutogroup::new(spec.nice);
    become_subreaper();
    let (out_read, out_write) = pipe_cloexec()?;
    let (stdin, stdin_writer) = if spec.stdin { fifo(jd)? } else { (Stdio::null(), None) };

    let mut cmd = Command::new(&spec.shell);
    if spec.login_shell {
        cmd.arg("-l");
    }
    let out_dup = out_write.try_clone().map_err(|e| format!("cannot duplicate the output pipe: {e}"))?;
    cmd.arg("-c")
        .arg(&spec.script)
        .current_dir(&spec.cwd)
        .stdin(stdin)
        .stdout(Stdio::from(out_write))
        .stderr(Stdio::from(out_dup));
    let me = nix::unistd::getpid();
    // The sandbox is built here, before fork; the child only applies it.
    let cgroup = spec.sandbox.as_ref().and_then(|p| sandbox::limits::JobCgroup::create(&p.limits));
    let mut prepared = match &spec.sandbox {
        Some(policy) => Some(sandbox::prepare(policy).map_err(|e| e.to_string())?.with_cgroup(policy, cgroup.as_ref())),
        None => None,
    };
    // The child hands its socket mediation listener over before exec; std's spawn blocks
    // until then, so a short-lived thread takes it (see engine/sandbox/notify.rs).
    let receiver =
        prepared.as_mut().and_then(|p| p.take_notify()).map(|ends| std::thread::spawn(move || ends.receive()));
    let mut sandbox = prepared;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Its own session and process group (pgid = pid).
            nix::unistd::setsid()?;
            if let Some(autogroup) = &job_autogroup {
                autogroup.apply();
            }
            // Unblocked signals, the death signal, and the supervisor still its parent
            // (had it died before the death signal was armed, nobody would take the
            // leader down: then it does not start at all).
            supervise::child_prelude(me)?;
            supervise::reset_dispositions(&QUIET);
            supervise::reset_dispositions(&[Signal::SIGCHLD]);
            super::run::close_inherited_fds_on_exec();
            if let Some(prepared) = sandbox.as_mut() {
                crate::engine::sandbox::apply_in_child(prepared)?;
            }
            Ok(())
        });
    }
    // spawn() returns once the child has exec'd (or failed to): setsid has run.
    let spawned = cmd.spawn();
    // Closes our copies of the child's handoff ends: a receiver still waiting sees end of file.
    drop(cmd);
    let listener = receiver.map(|r| r.join().map_err(|_| "the socket mediation failed".to_string()));
    let child = spawned.map_err(|e| {
        if let Some(cg) = &cgroup {
            cg.remove();
        }
        format!("cannot start {}: {e}", spec.shell)
    })?;
    // The child only execs once the listener is ours, so a spawned child means it is.
    let sockets = match (listener, &spec.sandbox) {
        (Some(Ok(Ok(listener))), Some(policy)) => Some(sandbox::notify::Server::new(
            listener,
            policy.notify_settings(jd.path.join(sandbox::notify::DENIALS_FILE)),
        )),
        _ => None,
    };
    let pid = child.id() as i32;
    // The pid is reaped with waitpid(pid) below; std's handle is not needed.
    std::mem::forget(child);
    let leader_start = group::proc_stat(pid).map(|s| s.start_ticks).unwrap_or(0);
    let supervisor_start = group::proc_stat(me.as_raw()).map(|s| s.start_ticks).unwrap_or(0);
    say(&Handshake::Started { supervisor_pid: me.as_raw() as u32, supervisor_start, pgid: pid, leader_start });
    let _ = supervise::set_nonblocking(&out_read, true);
    Ok(Running { jd: jd.clone(), spec, pid, output: out_read, signals, stdin_writer, sockets, cgroup })
}

/// Orphans among the job's descendants — a daemon that left the group with `setsid` once its
/// parent died, a double fork — become our children instead of init's, so a kill can still
/// reach them ([`kill_adopted`]). Left alone when the job ends by itself.
#[cfg(target_os = "linux")]
fn become_subreaper() {
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

#[cfg(not(target_os = "linux"))]
fn become_subreaper() {}

/// Reap adopted orphans that have exited, never the leader (its status is `reap`'s): peek
/// with `WNOWAIT` and stop at the leader.
fn reap_adopted(leader: i32) {
    let peek = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        let pid = match nix::sys::wait::waitid(Id::All, peek) {
            Ok(status @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => status.pid(),
            _ => None,
        };
        match pid {
            Some(pid) if pid.as_raw() > 0 && pid.as_raw() != leader => {
                let _ = nix::sys::wait::waitpid(pid, Some(WaitPidFlag::WNOHANG));
            }
            _ => return,
        }
    }
}

/// SIGKILL every live child we adopted (a group leader with its group) and reap it, until
/// none is left; their own orphans come to us in turn. Two seconds at most.
fn kill_adopted(leader: i32) {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let children = group::live_children(me);
        if children.is_empty() || Instant::now() >= deadline {
            break;
        }
        for (pid, pgid) in children {
            if pid == pgid && pgid > 1 && pgid != me {
                let _ = group::signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
            } else {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        reap_adopted(leader);
        std::thread::sleep(Duration::from_millis(5));
    }
    reap_adopted(leader);
}

fn pipe_cloexec() -> Result<(OwnedFd, OwnedFd), String> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("cannot create a pipe: {e}"))
}

/// The stdin FIFO: the job's end (blocking reads) and our own writer, held open.
fn fifo(jd: &JobDir) -> Result<(Stdio, Option<OwnedFd>), String> {
    let path = jd.stdin();
    let _ = std::fs::remove_file(&path);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let open = |flags: OFlag| -> Result<OwnedFd, String> {
        nix::fcntl::open(&path, flags | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW, Mode::empty())
            .map_err(|e| format!("cannot open {}: {e}", path.display()))
    };
    let reader = open(OFlag::O_RDONLY)?;
    let writer = open(OFlag::O_WRONLY)?;
    // The job reads with ordinary blocking reads.
    supervise::set_nonblocking(&reader, false).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    Ok((Stdio::from(reader), Some(writer)))
}

/// Where the leader is.
enum Leader {
    Running,
    /// Exited at this instant; output is draining.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
        at: Instant,
    },
}

impl Running {
    fn supervise(mut self) {
        let mut log = LogWriter::new(&self.jd.path, "out", self.spec.log_max_bytes);
        let mut decoder = Utf8Decoder::default();
        let mut totals = OutputTotals::default();
        let mut rotations = 0;
        let mut eof = false;
        let mut leader = Leader::Running;
        let mut leftover = false;
        let mut group_gone: Option<Instant> = None;
        let mut last_group_check = Instant::now();
        let mut last_lease_check = Instant::now();
        let mut lease = Lease::new(&self.jd);
        let stdin_eof = self.jd.stdin_eof();
        let mut orphaned_at: Option<Instant> = None;
        let mut own_kill: Option<String> = None;
        // Not zeroed: an idle job's supervisor never touches the pages of a buffer that
        // read(2) has not filled (a zeroed one would be 64 KiB of private memory at once).
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        // Read owner.json once now, so the loop's checks only stat it.
        lease.held();
        // Start-up is over: give back the heap it freed and the code and constant pages it
        // touched; the loop refaults what it uses.
        crate::memory::trim_heap();
        crate::memory::drop_read_only_pages();
        loop {
            self.wait_readable(eof, Duration::from_millis(if matches!(leader, Leader::Running) { 500 } else { 50 }));
            if !eof {
                let mut budget = READ_BUDGET;
                while budget > 0 {
                    // SAFETY: read(2) into the capacity of our own buffer.
                    let n = unsafe { libc::read(self.output.as_raw_fd(), buf.as_mut_ptr().cast(), buf.capacity()) };
                    if n > 0 {
                        let n = n as usize;
                        // SAFETY: read(2) initialised the first n bytes.
                        unsafe { buf.set_len(n) };
                        let text = decoder.decode(&buf);
                        totals.bytes += text.len() as u64;
                        totals.chars += text.chars().count() as u64;
                        log.write(&text);
                        budget = budget.saturating_sub(n);
                    } else if n == 0 {
                        eof = true;
                        break;
                    } else {
                        let err = std::io::Error::last_os_error();
                        if err.kind() == std::io::ErrorKind::Interrupted {
                            continue;
                        }
                        if err.kind() != std::io::ErrorKind::WouldBlock {
                            eof = true;
                        }
                        break;
                    }
                }
                if log.rotations() != rotations {
                    rotations = log.rotations();
                    write_index(&self.jd, &log);
                }
            }
            if let Leader::Running = leader {
                if let Some(end) = supervise::reap(self.pid) {
                    let (code, signal) = end.parts();
                    leader = Leader::Exited { code, signal, at: Instant::now() };
                }
            }
            reap_adopted(self.pid);
            if self.stdin_writer.is_some() && std::fs::symlink_metadata(&stdin_eof).is_ok() {
                self.stdin_writer = None;
            }
            if last_lease_check.elapsed() >= LEASE_POLL && own_kill.is_none() {
                last_lease_check = Instant::now();
                own_kill = self.check_owner(&mut lease, &mut orphaned_at);
            }
            let Leader::Exited { code, signal, at } = leader else { continue };
            if !leftover {
                if eof && !group::group_alive(self.pid) {
                    break self.finish(log, decoder, totals, code, signal, own_kill);
                }
                if at.elapsed() >= DRAIN {
                    if group::group_alive(self.pid) {
                        // `cmd &`: the leader is done, its children are not.
                        leftover = true;
                        let _ = jobdir::write_json(&self.jd.leader(), &LeaderExit { code, signal });
                    } else {
                        // A process outside the group (a daemon) holds the pipe: stop here.
                        break self.finish(log, decoder, totals, code, signal, own_kill);
                    }
                }
                continue;
            }
            match group_gone {
                None => {
                    if last_group_check.elapsed() >= GROUP_POLL {
                        last_group_check = Instant::now();
                        if !group::group_alive(self.pid) {
                            group_gone = Some(Instant::now());
                        }
                    }
                }
                // The last writers are gone; take their last bytes.
                Some(gone) if eof || gone.elapsed() >= DRAIN => {
                    break self.finish(log, decoder, totals, code, signal, own_kill);
                }
                Some(_) => {}
            }
        }
    }

    /// Is the job still owned? Without an owner for `orphan_grace_s` (or without its job
    /// directory) the supervisor kills the group itself and says why.
    fn check_owner(&self, lease: &mut Lease, orphaned_at: &mut Option<Instant>) -> Option<String> {
        // No owner file counts as no owner.
        let held = lease.held();
        let why = if !self.jd.path.exists() {
            // The job directory was deleted (its TALARIA_HOME is gone): no record
            // can point to this job any more, so no grace either.
            "job directory removed".to_string()
        } else if held {
            *orphaned_at = None;
            return None;
        } else {
            let since = *orphaned_at.get_or_insert_with(Instant::now);
            if since.elapsed().as_secs_f64() < self.spec.orphan_grace_s {
                return None;
            }
            super::records::OWNER_GONE_REASON.to_string()
        };
        let grace = Duration::from_secs_f64(self.spec.kill_grace_s.max(0.0));
        run_on_kill(self.spec.on_kill.as_deref());
        group::kill_groups_blocking(&[self.pid], grace);
        Some(why)
    }

    /// Sleep until output, SIGCHLD or a socket call to mediate arrives, or `timeout`;
    /// then serve the socket calls that are ready.
    fn wait_readable(&mut self, eof: bool, timeout: Duration) {
        let mut fds = vec![PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
        if !eof {
            fds.push(PollFd::new(self.output.as_fd(), PollFlags::POLLIN));
        }
        let base = fds.len();
        let mut timeout = timeout;
        if let Some(server) = &self.sockets {
            server.poll_fds(&mut fds);
            timeout = server.poll_timeout().map_or(timeout, |t| t.min(timeout));
        }
        let _ = nix::poll::poll(&mut fds, PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX));
        let ready: Vec<PollFlags> = fds[base..].iter().map(|f| f.revents().unwrap_or(PollFlags::empty())).collect();
        drop(fds);
        if let Some(server) = &mut self.sockets {
            server.serve(&ready);
        }
        // SIGCHLD woke us (or a quiet signal, ignored): the loop reaps what it has to.
        self.signals.drain();
    }

    fn finish(
        &self,
        mut log: LogWriter,
        mut decoder: Utf8Decoder,
        mut totals: OutputTotals,
        code: Option<i32>,
        signal: Option<i32>,
        own_kill: Option<String>,
    ) {
        let rest = decoder.finish();
        totals.bytes += rest.len() as u64;
        totals.chars += rest.chars().count() as u64;
        log.write(&rest);
        write_index(&self.jd, &log);
        // What talaria wrote in `kill`, as data (bounded, escaped).
        let asked = self.jd.read_kill();
        let killed = own_kill.is_some() || asked.is_some();
        if killed {
            // The job was killed: so is what left its group with `setsid` and was adopted by us
            // when its parent died (the exit record is written once they are gone).
            kill_adopted(self.pid);
        }
        let reason = own_kill.or(asked.filter(|r| !r.is_empty()));
        let output = OutputTotals { chars: totals.chars, bytes: totals.bytes, lines: log.index().end_line };
        let record = ExitRecord { code, signal, killed, reason, ended_at_ms: now_ms(), output };
        if let Some(cg) = &self.cgroup {
            cg.remove();
        }
        let _ = jobdir::write_json(&self.jd.exit(), &record);
    }
}

/// The lease as the supervisor follows it, every `LEASE_POLL`. The answer is today's
/// (`owner.json` read, the owner process checked by pid and start time) whenever it is "not
/// held"; a "held" answer may come from what was read before, while `owner.json` is the same
/// file (talaria replaces it with a rename) and the owner process has not exited, which a
/// pidfd tells without reading /proc. So an idle supervisor's check is a `stat` and a `poll`:
/// no file read, no JSON, no /proc parsing, and none of their code in its memory.
struct Lease {
    path: std::path::PathBuf,
    /// (device, inode, ctime, mtime, size) of `owner.json` when it was last read.
    seen: Option<(u64, u64, i64, i64, i64, i64, u64)>,
    /// The owner read then, and a pidfd of it when it was alive (None: no pidfd support).
    held_by: Option<(jobdir::Owner, Option<OwnedFd>)>,
}

impl Lease {
    fn new(jd: &JobDir) -> Lease {
        Lease { path: jd.owner(), seen: None, held_by: None }
    }

    fn held(&mut self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::symlink_metadata(&self.path) else {
            // No owner file counts as no owner.
            self.held_by = None;
            return false;
        };
        let id =
            (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec(), meta.mtime(), meta.mtime_nsec(), meta.size());
        if self.seen == Some(id) {
            let still = match &self.held_by {
                Some((jobdir::Owner::Detached, _)) => true,
                Some((jobdir::Owner::Process { .. }, Some(pidfd))) => !exited(pidfd),
                _ => false,
            };
            if still {
                return true;
            }
        }
        self.seen = Some(id);
        self.held_by = None;
        // As before the cache: read the file, check the process.
        let Some(owner) = jobdir::read_json::<jobdir::Owner>(&self.path) else { return false };
        if !owner.holds() {
            return false;
        }
        let pidfd = match &owner {
            jobdir::Owner::Process { pid, .. } => open_pidfd(*pid as i32).filter(|_| owner.holds()),
            jobdir::Owner::Detached => None,
        };
        self.held_by = Some((owner, pidfd));
        true
    }
}

/// A pidfd of `pid` (Linux 5.3+; close-on-exec), None where there is none. The caller checks
/// the process's identity after opening it, so it refers to the process it checked.
#[cfg(target_os = "linux")]
fn open_pidfd(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2) with a pid and no flags; the fd is owned from here on.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a fresh descriptor nobody else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(not(target_os = "linux"))]
fn open_pidfd(_pid: i32) -> Option<OwnedFd> {
    None
}

/// Has the process of this pidfd exited? (It polls readable once it has.)
fn exited(pidfd: &OwnedFd) -> bool {
    let mut fd = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    !matches!(nix::poll::poll(&mut fd, PollTimeout::ZERO), Ok(0))
}

fn write_index(jd: &JobDir, log: &LogWriter) {
    let index = log.index();
    let segments = index
        .segments
        .iter()
        .filter_map(|s| {
            let name = s.path.file_name()?.to_str()?;
            let n = name.strip_prefix("out.")?.strip_suffix(".log")?.parse().ok()?;
            Some(jobdir::IndexSegment { n, start_line: s.start_line, mid_line: s.mid_line })
        })
        .collect();
    let _ = jobdir::write_json(&jd.index(), &IndexFile { segments, dropped_bytes: index.dropped_bytes });
}

/// A remote job's kill hook (its remote group, over its backend): run it with `sh -c` and
/// wait for it, at most a minute, before the local group goes.
fn run_on_kill(hook: Option<&str>) {
    let Some(hook) = hook else { return };
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(hook)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return };
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::jobs::jobdir::Owner;

    #[test]
    fn the_lease_follows_owner_json_and_the_owner_process() {
        let dir = tempfile::tempdir().unwrap();
        let jd = JobDir { path: dir.path().to_path_buf() };
        let mut lease = Lease::new(&jd);
        assert!(!lease.held(), "no owner file");
        jd.write_owner(&Owner::Detached).unwrap();
        assert!(lease.held());
        assert!(lease.held());
        // A live owner process, then the same process gone (its pidfd tells).
        let mut child = std::process::Command::new("sleep").arg("3004417").spawn().unwrap();
        let pid = child.id();
        let start = group::proc_stat(pid as i32).map(|s| s.start_ticks);
        jd.write_owner(&Owner::Process { pid, start }).unwrap();
        assert!(lease.held());
        assert!(lease.held());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!lease.held());
        // A pid that is alive but started at another time is not the owner.
        jd.write_owner(&Owner::Process { pid: std::process::id(), start: Some(1) }).unwrap();
        assert!(!lease.held());
        jd.write_owner(&Owner::me()).unwrap();
        assert!(lease.held());
        std::fs::remove_file(jd.owner()).unwrap();
        assert!(!lease.held());
    }
}
