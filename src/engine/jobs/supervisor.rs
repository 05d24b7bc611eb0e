//! `talaria __job <dir>`: the supervisor of one job (DESIGN §4). No tokio, no threads:
//! one `poll` loop. It starts the command in its own session with `PR_SET_PDEATHSIG`
//! (a SIGKILLed supervisor takes the leader with it), reads its output pipe into the
//! capped log, keeps the stdin FIFO open until talaria asks to close it, watches the
//! lease, and writes `exit.json` when the job's group is gone — whether or not any
//! talaria is alive. It lives in its own session, outside the job's group.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use super::jobdir::{self, ExitRecord, Handshake, IndexFile, JobDir, LeaderExit, OutputTotals, Spec};
use super::log::LogWriter;
use super::output::Utf8Decoder;
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

/// Write end of the SIGCHLD self-pipe (the handler may only do async-signal-safe work).
static SIGCHLD_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_sigchld(_: libc::c_int) {
    let fd = SIGCHLD_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) on a valid fd with a one-byte buffer is async-signal-safe.
        unsafe {
            libc::write(fd, [1u8].as_ptr().cast(), 1);
        }
    }
}

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
        // SAFETY: dup2 onto the standard descriptors; `null` stays valid for the call.
        unsafe {
            for fd in 0..3 {
                libc::dup2(null.as_raw_fd(), fd);
            }
        }
    }
}

struct Running {
    jd: JobDir,
    spec: Spec,
    pid: i32,
    output: OwnedFd,
    sigchld: OwnedFd,
    /// The supervisor's own write end of the stdin FIFO: the job sees end of file only
    /// once talaria asks (`stdin.eof`) and this is dropped.
    stdin_writer: Option<OwnedFd>,
    /// Serves the job's mediated socket calls (DESIGN §6a).
    sockets: Option<sandbox::notify::Server>,
    /// The job's own cgroup (`sandbox.limits.processes`), removed when it is gone.
    cgroup: Option<sandbox::limits::JobCgroup>,
}

fn start(jd: &JobDir) -> Result<Running, String> {
    // Own session already (talaria started us with setsid); ignore what a terminal or a
    // dying pipe reader would send. The job gets default dispositions back before exec.
    // SAFETY: SIG_IGN installs no handler code.
    unsafe {
        for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGPIPE, libc::SIGQUIT, libc::SIGTSTP] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    // The spec comes over stdin from the talaria that started us, never from a file a job
    // could have rewritten (DESIGN §6a).
    let mut spec = read_spec()?;
    if let (Some(policy), true) = (spec.sandbox.as_mut(), spec.track_cwd) {
        // The one file of the job directory the job may write: where its shell says it ended.
        policy.job_files.push(jd.cwd_file());
    }
    set_nice(spec.nice);
    become_subreaper();
    let sigchld = self_pipe()?;
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
    let me = std::process::id() as libc::pid_t;
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
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            set_parent_death_signal();
            // The supervisor may have died before the line above: then nobody would
            // take the leader down, so do not start at all.
            if libc::getppid() != me {
                return Err(std::io::Error::other("the supervisor is gone"));
            }
            for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGPIPE, libc::SIGQUIT, libc::SIGTSTP, libc::SIGCHLD] {
                libc::signal(sig, libc::SIG_DFL);
            }
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
    let supervisor_start = group::proc_stat(me).map(|s| s.start_ticks).unwrap_or(0);
    say(&Handshake::Started { supervisor_pid: me as u32, supervisor_start, pgid: pid, leader_start });
    set_nonblocking(&out_read);
    Ok(Running { jd: jd.clone(), spec, pid, output: out_read, sigchld, stdin_writer, sockets, cgroup })
}

/// Lower this process's CPU priority (`jobs.nice`); the command inherits it. Raising a nice
/// value needs no privilege, so this only fails for values out of range.
fn set_nice(nice: i32) {
    if nice > 0 {
        // SAFETY: setpriority(2) on this (single-threaded) process; no memory is involved.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, 0, nice);
        }
    }
}

/// Orphans among the job's descendants — a daemon that left the group with `setsid` once its
/// parent died, a double fork — become our children instead of init's, so a kill can still
/// reach them ([`kill_adopted`]). Left alone when the job ends by itself.
#[cfg(target_os = "linux")]
fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(not(target_os = "linux"))]
fn become_subreaper() {}

/// Reap adopted orphans that have exited, never the leader (its status is `reap`'s): peek
/// with `WNOWAIT` and stop at the leader.
fn reap_adopted(leader: i32) {
    loop {
        // SAFETY: waitid(2) into a zeroed siginfo of our own; WNOWAIT leaves the child as is.
        let pid = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            if libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) != 0 {
                return;
            }
            info.si_pid()
        };
        if pid <= 0 || pid == leader {
            return;
        }
        let mut status = 0;
        // SAFETY: waitpid on one exited child of ours.
        unsafe {
            libc::waitpid(pid, &mut status, libc::WNOHANG);
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
                // SAFETY: kill(2) on a child of ours.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        reap_adopted(leader);
        std::thread::sleep(Duration::from_millis(5));
    }
    reap_adopted(leader);
}

#[cfg(target_os = "linux")]
fn set_parent_death_signal() {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(not(target_os = "linux"))]
fn set_parent_death_signal() {}

fn pipe_cloexec() -> Result<(OwnedFd, OwnedFd), String> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("cannot create a pipe: {e}"))
}

fn set_nonblocking(fd: &OwnedFd) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}

fn self_pipe() -> Result<OwnedFd, String> {
    let (read, write) = pipe_cloexec()?;
    set_nonblocking(&read);
    set_nonblocking(&write);
    SIGCHLD_FD.store(write.as_raw_fd(), Ordering::Relaxed);
    std::mem::forget(write);
    // SAFETY: installs a handler that only calls write(2).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigchld as *const () as usize;
        action.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut()) != 0 {
            return Err(format!("cannot watch the job: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(read)
}

/// The stdin FIFO: the job's end (blocking reads) and our own writer, held open.
fn fifo(jd: &JobDir) -> Result<(Stdio, Option<OwnedFd>), String> {
    let path = jd.stdin();
    let _ = std::fs::remove_file(&path);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let open = |flags: libc::c_int| -> Result<OwnedFd, String> {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: open(2) with a valid C string; the fd is owned from here on.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOFOLLOW) };
        if fd < 0 {
            return Err(format!("cannot open {}: {}", path.display(), std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let reader = open(libc::O_RDONLY)?;
    let writer = open(libc::O_WRONLY)?;
    // The job reads with ordinary blocking reads.
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(reader.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(reader.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
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
                if let Some((code, signal)) = reap(self.pid) {
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
        let mut fds = vec![libc::pollfd { fd: self.sigchld.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        if !eof {
            fds.push(libc::pollfd { fd: self.output.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        let base = fds.len();
        let mut timeout = timeout;
        if let Some(server) = &self.sockets {
            server.poll_fds(&mut fds);
            timeout = server.poll_timeout().map_or(timeout, |t| t.min(timeout));
        }
        // SAFETY: poll(2) on our own array.
        unsafe {
            libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout.as_millis() as libc::c_int);
        }
        if let Some(server) = &mut self.sockets {
            server.serve(&fds[base..]);
        }
        let mut sink = [0u8; 64];
        // SAFETY: draining our own non-blocking pipe.
        while unsafe { libc::read(self.sigchld.as_raw_fd(), sink.as_mut_ptr().cast(), sink.len()) } > 0 {}
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
    let mut fd = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: poll(2) on one descriptor we own, without waiting.
    unsafe { libc::poll(&mut fd, 1, 0) != 0 }
}

/// waitpid on our one child only (never -1); None while it runs.
fn reap(pid: i32) -> Option<(Option<i32>, Option<i32>)> {
    let mut status = 0;
    // SAFETY: waitpid with a pid and a status out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if r == pid {
        let status = std::process::ExitStatus::from_raw(status);
        return Some((status.code(), status.signal()));
    }
    if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
        return Some((None, None));
    }
    None
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
