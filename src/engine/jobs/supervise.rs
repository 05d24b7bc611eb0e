//! What every supervisor process does with its one child: a job's (`talaria __job`,
//! supervisor.rs) and a stdio MCP server's (`talaria __mcp-guard`, mcp/guard.rs). Both are
//! single-threaded `poll` loops without tokio; they block the signals they care about and
//! read them from a signalfd, arm the child's death signal before it execs, reap only their
//! own child (never `waitpid(-1)`), and tell a group's live members from /proc. Through nix:
//! the only raw calls left are the ones nix has no safe form of (see `reset_dispositions`).

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigHandler, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::group;

/// Signals blocked and read from a descriptor, so the poll loop sees them with its other
/// descriptors and no handler code runs at all.
pub(crate) struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// Block `signals` in this thread (threads started later inherit the mask) and open
    /// the descriptor they are read from. Call before any other thread exists.
    pub(crate) fn block(signals: &[Signal]) -> nix::Result<Signals> {
        let mut mask = SigSet::empty();
        for &s in signals {
            mask.add(s);
        }
        mask.thread_block()?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
        Ok(Signals { fd })
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Every signal that came since the last call, in order (none when nothing came).
    pub(crate) fn drain(&self) -> Vec<Signal> {
        let mut got = Vec::new();
        while let Ok(Some(info)) = self.fd.read_signal() {
            if let Ok(s) = Signal::try_from(info.ssi_signo as i32) {
                got.push(s);
            }
        }
        got
    }
}

/// Back to the default action for `signals` (what a job or server expects to start with,
/// whatever this process inherited; SIGCHLD ignored would also reap children behind
/// our back). nix's `signal` is unsafe for handlers; for `SIG_DFL` nothing of ours runs.
pub(crate) fn reset_dispositions(signals: &[Signal]) {
    for &s in signals {
        // SAFETY: installs the default action, no handler code.
        let _ = unsafe { nix::sys::signal::signal(s, SigHandler::SigDfl) };
    }
}

/// In the child, between fork and exec (only async-signal-safe calls: these are single
/// system calls): no signal blocked, killed when `parent` dies, and not started at all if
/// `parent` is already gone (the death signal would never come).
pub(crate) fn child_prelude(parent: Pid) -> std::io::Result<()> {
    SigSet::empty().thread_set_mask()?;
    set_parent_death_signal(Signal::SIGKILL)?;
    if nix::unistd::getppid() != parent {
        return Err(std::io::Error::other("the supervisor is gone"));
    }
    Ok(())
}

#[cfg(target_os = "linux")]
pub(crate) fn set_parent_death_signal(signal: Signal) -> nix::Result<()> {
    nix::sys::prctl::set_pdeathsig(signal)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_parent_death_signal(_signal: Signal) -> nix::Result<()> {
    Ok(())
}

/// How a child ended: its code, or the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Code(i32),
    Signal(Signal),
    /// Not ours to wait for any more (ECHILD): it is gone, how is unknown.
    Unknown,
}

impl Ended {
    /// (code, signal) as the exit record writes them.
    pub(crate) fn parts(self) -> (Option<i32>, Option<i32>) {
        match self {
            Ended::Code(c) => (Some(c), None),
            Ended::Signal(s) => (None, Some(s as i32)),
            Ended::Unknown => (None, None),
        }
    }
}

/// `waitpid` on our one child `pid`, never blocking; None while it runs (a stop or a
/// continue is not an end).
pub(crate) fn reap(pid: i32) -> Option<Ended> {
    match nix::sys::wait::waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, code)) => Some(Ended::Code(code)),
        Ok(WaitStatus::Signaled(_, signal, _)) => Some(Ended::Signal(signal)),
        Err(Errno::ECHILD) => Some(Ended::Unknown),
        _ => None,
    }
}

/// Wait until one of `fds` is readable, or `timeout` (None: no timeout). Returns what each
/// descriptor reported, in order (empty flags: nothing). An interrupted wait reports nothing.
pub(crate) fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> Vec<PollFlags> {
    let mut polled: Vec<PollFd<'_>> = fds.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLIN)).collect();
    let timeout = match timeout {
        None => PollTimeout::NONE,
        Some(t) => PollTimeout::try_from(t).unwrap_or(PollTimeout::MAX),
    };
    if nix::poll::poll(&mut polled, timeout).is_err() {
        return vec![PollFlags::empty(); fds.len()];
    }
    polled.iter().map(|p| p.revents().unwrap_or(PollFlags::empty())).collect()
}

/// The live (not zombie) processes of group `pgid` other than `me`.
pub(crate) fn group_members(pgid: i32, me: i32) -> Vec<i32> {
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

/// Set or clear `O_NONBLOCK` on a descriptor.
pub(crate) fn set_nonblocking(fd: impl AsFd, on: bool) -> nix::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let fd = fd.as_fd();
    let mut flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
    flags.set(OFlag::O_NONBLOCK, on);
    fcntl(fd, FcntlArg::F_SETFL(flags)).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn a_child_is_reaped_with_its_code_or_its_signal_and_only_once() {
        let wait = |pid: i32| loop {
            if let Some(end) = reap(pid) {
                return end;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut code = std::process::Command::new("sh").args(["-c", "exit 7"]).spawn().unwrap();
        let pid = code.id() as i32;
        assert_eq!(wait(pid), Ended::Code(7));
        assert_eq!(reap(pid), Some(Ended::Unknown), "reaped already: ECHILD");
        assert!(code.wait().is_err(), "std's handle finds nothing left to wait for");
        let mut killed = std::process::Command::new("sh").args(["-c", "kill -TERM $$"]).spawn().unwrap();
        assert_eq!(wait(killed.id() as i32), Ended::Signal(Signal::SIGTERM));
        assert!(killed.wait().is_err());
        assert_eq!(Ended::Signal(Signal::SIGTERM).parts(), (None, Some(15)));
    }

    #[test]
    fn the_prelude_refuses_a_child_whose_supervisor_is_not_its_parent() {
        let not_the_parent = Pid::from_raw(1);
        let mut cmd = std::process::Command::new("true");
        // SAFETY: child_prelude makes only async-signal-safe system calls.
        unsafe {
            cmd.pre_exec(move || child_prelude(not_the_parent));
        }
        // (std passes the child's error on as an errno: the text stays behind.)
        cmd.spawn().expect_err("a child whose parent is not the supervisor must not start");
        let mut cmd = std::process::Command::new("true");
        let me = nix::unistd::getpid();
        // SAFETY: as above.
        unsafe {
            cmd.pre_exec(move || child_prelude(me));
        }
        assert!(cmd.status().unwrap().success());
    }

    #[test]
    fn an_empty_poll_times_out_and_a_readable_pipe_is_reported() {
        let (r, w) = nix::unistd::pipe().unwrap();
        assert_eq!(wait_readable(&[r.as_fd()], Some(Duration::from_millis(1))), vec![PollFlags::empty()]);
        nix::unistd::write(&w, b"x").unwrap();
        let got = wait_readable(&[r.as_fd()], None);
        assert!(got[0].contains(PollFlags::POLLIN), "{got:?}");
        set_nonblocking(&r, true).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(nix::unistd::read(&r, &mut buf), Ok(1));
        assert_eq!(nix::unistd::read(&r, &mut buf), Err(Errno::EAGAIN), "non-blocking now");
    }
}
