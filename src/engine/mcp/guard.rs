//! `talaria __mcp-guard <owner-pid> <command> [args…]`: the guard of one stdio MCP server.
//! No tokio, no threads: one `poll` loop, like the job supervisor.
//!
//! Talaria starts the guard in a session and process group of its own, with the server's
//! stdin, stdout, stderr, environment and working directory; the server inherits them, so
//! the protocol goes straight between talaria and the server, untouched. The guard's fd 3
//! is one end of a socket pair whose other end only talaria holds: the guard writes one
//! line there (`ok <pid>` or `err <why>`), then waits. When that socket reads as closed
//! (talaria is gone, however it died, `kill -9` included), when its parent changes or
//! when a SIGTERM comes (the death signal, or talaria stopping the server), the guard
//! kills the whole group — the server and whatever it started, an `npx` wrapper's
//! `node` say — with SIGTERM, then SIGKILL after a grace, itself included. When the
//! server exits by itself, the guard ends what it left running in the group, then exits
//! the same way as the server.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::engine::process as group;

/// The first argument that makes `talaria` the guard.
pub const ARG: &str = "__mcp-guard";
/// The guard's end of the socket pair talaria holds the other end of.
pub(crate) const OWNER_FD: RawFd = 3;
/// Between SIGTERM and SIGKILL for the group once talaria is gone.
const GRACE: Duration = Duration::from_millis(500);

/// The body of `talaria __mcp-guard …` (`args`: what follows `__mcp-guard`). Never returns.
pub fn run(args: Vec<OsString>) -> ! {
    let mut args = args.into_iter();
    let owner = args.next().and_then(|a| a.to_str().and_then(|s| s.parse::<i32>().ok()));
    let (Some(owner), Some(program)) = (owner, args.next()) else {
        eprintln!("usage: talaria {ARG} <owner-pid> <command> [args…] (started by talaria, not by hand)");
        std::process::exit(2);
    };
    // SAFETY: fcntl/sigprocmask/signalfd/prctl on this process's own state, before any
    // other thread exists (there never is one).
    let signals = unsafe {
        // fd 3 must be there (started by talaria), and must not leak into the server.
        if libc::fcntl(OWNER_FD, libc::F_SETFD, libc::FD_CLOEXEC) < 0 {
            eprintln!("talaria {ARG}: no owner socket on fd {OWNER_FD} (started by talaria, not by hand)");
            std::process::exit(2);
        }
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut mask);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut mask, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0);
        libc::signalfd(-1, &mask, libc::SFD_CLOEXEC)
    };
    // Talaria died before the death signal was armed: start nothing.
    if std::os::unix::process::parent_id() as i32 != owner || signals < 0 {
        std::process::exit(1);
    }
    let me = std::process::id() as i32;
    let mut command = Command::new(&program);
    command.args(args);
    // SAFETY: between fork and exec only async-signal-safe calls (sigprocmask, prctl,
    // getppid, _exit).
    unsafe {
        command.pre_exec(move || {
            // The mask is inherited across exec: the server must get its signals.
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            // The guard is single-threaded: this fires exactly when the guard dies.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != me {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    // SAFETY: fd 3 is the socket talaria handed over; only this owner uses it.
    let mut owner_socket = unsafe { std::fs::File::from_raw_fd(OWNER_FD) };
    let server = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(owner_socket, "err cannot start `{}`: {e}", program.to_string_lossy());
            std::process::exit(127);
        }
    };
    let pid = server.id() as i32;
    // Nobody reads the report when talaria is already gone: the loop below notices that.
    let _ = writeln!(owner_socket, "ok {pid}");
    // Start-up is over: give back the code and constants it faulted in (like a job's
    // supervisor; what the loop touches comes back from the page cache).
    crate::memory::drop_read_only_pages();
    watch(pid, signals)
}

/// Wait for the server's exit (exit like it), or for talaria's end (kill the group).
fn watch(pid: i32, signals: RawFd) -> ! {
    // A new parent means a SIGTERM (the death signal; the race before it was armed is
    // checked once at the start), so the loop waits without a timeout.
    loop {
        let mut fds = [
            libc::pollfd { fd: OWNER_FD, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: signals, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfd entries.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            kill_group_and_exit(pid);
        }
        if fds[0].revents != 0 {
            // Talaria never writes: readable means closed (or broken).
            let mut byte = [0u8; 1];
            // SAFETY: reading one byte into a one-byte buffer.
            let got = unsafe { libc::read(OWNER_FD, byte.as_mut_ptr().cast(), 1) };
            if got <= 0 {
                kill_group_and_exit(pid);
            }
        }
        if fds[1].revents != 0 {
            // SAFETY: signalfd reads whole signalfd_siginfo records.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            let got = unsafe { libc::read(signals, (&mut info as *mut libc::signalfd_siginfo).cast(), size) };
            if got == size as isize && info.ssi_signo != libc::SIGCHLD as u32 {
                kill_group_and_exit(pid);
            }
        }
        if let Some(status) = reap(pid) {
            // What the server left running goes with it (talaria would kill the group next,
            // but it may be gone by then).
            end_the_others();
            exit_like(status);
        }
    }
}

/// The server's exit status once it has exited (a stop or continue is not an exit).
fn reap(pid: i32) -> Option<std::process::ExitStatus> {
    let mut status = 0;
    // SAFETY: waitpid on our own child, not blocking.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    (r == pid).then(|| std::process::ExitStatus::from_raw(status))
}

/// End the guard the way the server ended: the same code, or the same signal.
fn exit_like(status: std::process::ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    if let Some(sig) = status.signal() {
        // SAFETY: restore the default action, unblock and raise it on ourselves.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut mask);
            libc::sigaddset(&mut mask, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &mask, std::ptr::null_mut());
            libc::raise(sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(1)
}

/// Talaria is gone or asks for the end: SIGTERM to the group, a grace for it to go,
/// then SIGKILL (which ends the guard too: it is in the group).
fn kill_group_and_exit(pid: i32) -> ! {
    let me = std::process::id() as i32;
    // SAFETY: getpgrp has no preconditions.
    let pgid = unsafe { libc::getpgrp() };
    if pgid != me {
        // Not the leader of a group of our own (not started by talaria): never signal
        // someone else's group, only the server.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        std::process::exit(1);
    }
    // SAFETY: our own group; the guard blocks SIGTERM, so this reaches the others.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        let _ = reap(pid);
        if !others_in_group(pgid, me) {
            std::process::exit(0);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: our own group, ourselves included.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    std::process::exit(0)
}

/// SIGTERM to the rest of the group, a grace, SIGKILL to whoever is left, one by one (a
/// group SIGKILL would end the guard before it can pass on the server's exit status).
fn end_the_others() {
    let me = std::process::id() as i32;
    // SAFETY: getpgrp has no preconditions.
    let pgid = unsafe { libc::getpgrp() };
    if pgid != me || !others_in_group(pgid, me) {
        return;
    }
    // SAFETY: our own group; the guard blocks SIGTERM.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline && others_in_group(pgid, me) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for pid in members(pgid, me) {
        // SAFETY: a member of our own group.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// The live processes other than `me` in group `pgid`.
fn members(pgid: i32, me: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            *pid != me
                && matches!(group::proc_stat(*pid), Some(s) if s.pgrp == pgid && s.state != 'Z' && s.state != 'X')
        })
        .collect()
}

/// Is any live process other than `me` in group `pgid`?
fn others_in_group(pgid: i32, me: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|entry| {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { return false };
        pid != me && matches!(group::proc_stat(pid), Some(s) if s.pgrp == pgid && s.state != 'Z' && s.state != 'X')
    })
}
