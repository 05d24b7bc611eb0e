//! Processes at the lowest level, for jobs, backends, sub-agents and MCP servers alike:
//! quote a word for a POSIX shell, signal process groups and tell whether any member is
//! still alive.
//!
//! A group is gone when no non-zombie process with that pgid remains in /proc (a zombie
//! leader waiting to be reaped by tokio does not count). We never `waitpid(-1)`: that would
//! steal exit statuses tokio is waiting for.

use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// How long SIGKILL may take to clear a group before we give up waiting.
const AFTER_KILL: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(50);

/// One process as /proc/<pid>/stat describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    /// Start time in clock ticks since boot (tells a reused pid apart).
    pub start_ticks: u64,
}

/// Parse the text of /proc/<pid>/stat. The command name may contain spaces and
/// parentheses, so the fields are read after the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) pgrp(2) … starttime(19).
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Is a process with this pid (and, when given, this start time) alive and not a zombie?
pub fn process_alive(pid: i32, start_ticks: Option<u64>) -> bool {
    match proc_stat(pid) {
        Some(stat) => stat.state != 'Z' && stat.state != 'X' && start_ticks.is_none_or(|t| t == stat.start_ticks),
        None => false,
    }
}

/// Does any non-zombie process of group `pgid` remain?
pub fn group_alive(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        // No /proc (macOS): probe the group with signal 0. Zombies still count there until
        // they are reaped, so a kill may wait out its grace period.
        return pgid > 1 && nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok();
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            return false;
        };
        matches!(proc_stat(pid), Some(s) if s.pgrp == pgid && s.state != 'Z' && s.state != 'X')
    })
}

/// The live (not zombie) children of `parent`: (pid, pgid) each.
pub(crate) fn live_children(parent: i32) -> Vec<(i32, i32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let s = proc_stat(pid)?;
            (s.ppid == parent && s.state != 'Z' && s.state != 'X').then_some((pid, s.pgrp))
        })
        .collect()
}

/// A pgid we may signal: never init's, never our own group (that would kill talaria).
fn signallable(pgid: i32) -> bool {
    pgid > 1 && pgid != nix::unistd::getpgrp().as_raw()
}

/// Send `signal` to every process of the group. False when the group does not exist.
pub(crate) fn signal_group(pgid: i32, signal: Signal) -> bool {
    if !signallable(pgid) {
        tracing::warn!(pgid, "refusing to signal this process group");
        return false;
    }
    killpg(Pid::from_raw(pgid), signal).is_ok()
}

fn terminate(pgid: i32) {
    signal_group(pgid, Signal::SIGTERM);
    // A stopped process only sees SIGTERM once it runs again.
    signal_group(pgid, Signal::SIGCONT);
}

/// SIGTERM, `grace`, SIGKILL; returns true once the group is gone.
pub(crate) async fn kill_group(pgid: i32, grace: Duration) -> bool {
    if !signallable(pgid) {
        return !group_alive(pgid);
    }
    terminate(pgid);
    if wait_gone(pgid, grace).await {
        return true;
    }
    signal_group(pgid, Signal::SIGKILL);
    wait_gone(pgid, AFTER_KILL).await
}

async fn wait_gone(pgid: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The blocking form for the reaper and for sweeping: every group at once, one grace.
pub(crate) fn kill_groups_blocking(pgids: &[i32], grace: Duration) -> Vec<i32> {
    let pgids: Vec<i32> = pgids.iter().copied().filter(|p| signallable(*p)).collect();
    for &pgid in &pgids {
        terminate(pgid);
    }
    let survivors = wait_gone_blocking(&pgids, grace);
    for &pgid in &survivors {
        signal_group(pgid, Signal::SIGKILL);
    }
    wait_gone_blocking(&survivors, AFTER_KILL)
}

fn wait_gone_blocking(pgids: &[i32], within: Duration) -> Vec<i32> {
    let deadline = Instant::now() + within;
    loop {
        let alive: Vec<i32> = pgids.iter().copied().filter(|p| group_alive(*p)).collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        std::thread::sleep(POLL);
    }
}

/// Single-quote a string for a POSIX shell.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_names() {
        let text = "1234 (a) b (c)) S 1 777 777 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_stat(text), Some(ProcStat { state: 'S', ppid: 1, pgrp: 777, start_ticks: 98765 }));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn our_own_process_is_alive_and_our_group_is_never_signalled() {
        let me = std::process::id() as i32;
        assert!(process_alive(me, None));
        let stat = proc_stat(me).expect("our own stat");
        assert!(process_alive(me, Some(stat.start_ticks)));
        assert!(!process_alive(me, Some(stat.start_ticks + 1)));
        assert!(!signal_group(nix::unistd::getpgrp().as_raw(), Signal::SIGCONT));
        assert!(!signal_group(1, Signal::SIGCONT));
    }
}
