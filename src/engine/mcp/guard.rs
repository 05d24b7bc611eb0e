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
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::signal::{kill, killpg, SigSet, Signal};
use nix::unistd::{getpgrp, Pid};

use crate::engine::jobs::supervise::{self, Ended, Signals};

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
    // SAFETY: fd 3 is the socket talaria handed over (checked next); only this owner uses it.
    let owner_socket = unsafe { OwnedFd::from_raw_fd(OWNER_FD) };
    // fd 3 must be there (started by talaria), and must not leak into the server.
    if fcntl(&owner_socket, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).is_err() {
        eprintln!("talaria {ARG}: no owner socket on fd {OWNER_FD} (started by talaria, not by hand)");
        // Not ours to close: there is no such descriptor.
        std::mem::forget(owner_socket);
        std::process::exit(2);
    }
    // Before any other thread exists (there never is one).
    let signals = Signals::block(&[Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGCHLD]);
    let armed = supervise::set_parent_death_signal(Signal::SIGTERM);
    // Talaria died before the death signal was armed: start nothing.
    let (Ok(signals), Ok(())) = (signals, armed) else { std::process::exit(1) };
    if std::os::unix::process::parent_id() as i32 != owner {
        std::process::exit(1);
    }
    let me = nix::unistd::getpid();
    let mut command = Command::new(&program);
    command.args(args);
    // SAFETY: between fork and exec only async-signal-safe calls (the shared prelude:
    // sigprocmask, prctl, getppid).
    unsafe {
        command.pre_exec(move || supervise::child_prelude(me));
    }
    let mut owner_socket = std::fs::File::from(owner_socket);
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
    watch(pid, &owner_socket, &signals)
}

/// Wait for the server's exit (exit like it), or for talaria's end (kill the group).
fn watch(pid: i32, owner: &std::fs::File, signals: &Signals) -> ! {
    use std::io::Read;
    // A new parent means a SIGTERM (the death signal; the race before it was armed is
    // checked once at the start), so the loop waits without a timeout.
    loop {
        let ready = supervise::wait_readable(&[owner.as_fd(), signals.as_fd()], None);
        if !ready[0].is_empty() {
            // Talaria never writes: readable means closed (or broken).
            let mut byte = [0u8; 1];
            let mut reader = owner;
            match reader.read(&mut byte) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(0) | Err(_) => kill_group_and_exit(pid),
                Ok(_) => {}
            }
        }
        if !ready[1].is_empty() && signals.drain().iter().any(|s| *s != Signal::SIGCHLD) {
            kill_group_and_exit(pid);
        }
        if let Some(end) = supervise::reap(pid) {
            // What the server left running goes with it (talaria would kill the group next,
            // but it may be gone by then).
            end_the_others();
            exit_like(end);
        }
    }
}

/// End the guard the way the server ended: the same code, or the same signal.
fn exit_like(end: Ended) -> ! {
    match end {
        Ended::Code(code) => std::process::exit(code),
        Ended::Signal(sig) => {
            // The default action, unblocked, raised on ourselves.
            supervise::reset_dispositions(&[sig]);
            let mut mask = SigSet::empty();
            mask.add(sig);
            let _ = mask.thread_unblock();
            let _ = nix::sys::signal::raise(sig);
            std::process::exit(128 + sig as i32)
        }
        Ended::Unknown => std::process::exit(1),
    }
}

/// Talaria is gone or asks for the end: SIGTERM to the group, a grace for it to go,
/// then SIGKILL (which ends the guard too: it is in the group).
fn kill_group_and_exit(pid: i32) -> ! {
    let me = std::process::id() as i32;
    let pgid = getpgrp();
    if pgid.as_raw() != me {
        // Not the leader of a group of our own (not started by talaria): never signal
        // someone else's group, only the server.
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        std::process::exit(1);
    }
    // Our own group; the guard blocks SIGTERM, so this reaches the others.
    let _ = killpg(pgid, Signal::SIGTERM);
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        let _ = supervise::reap(pid);
        if supervise::group_members(me, me).is_empty() {
            std::process::exit(0);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Our own group, ourselves included.
    let _ = killpg(pgid, Signal::SIGKILL);
    std::process::exit(0)
}

/// SIGTERM to the rest of the group, a grace, SIGKILL to whoever is left, one by one (a
/// group SIGKILL would end the guard before it can pass on the server's exit status).
fn end_the_others() {
    let me = std::process::id() as i32;
    let pgid = getpgrp();
    if pgid.as_raw() != me || supervise::group_members(me, me).is_empty() {
        return;
    }
    // Our own group; the guard blocks SIGTERM.
    let _ = killpg(pgid, Signal::SIGTERM);
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline && !supervise::group_members(me, me).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    for pid in supervise::group_members(me, me) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}
