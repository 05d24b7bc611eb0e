//! The CPU priority of jobs (`jobs.nice`, `jobs.background_nice`). Two knobs carry it on
//! Linux, and a job gets both:
//! - the nice value of each of its threads (what `nice(1)` sets);
//! - the nice value of its session's *autogroup* (sched(7)). With autogroups on — the kernel
//!   default, in effect whenever processes are not in a cpu cgroup of their own — the
//!   scheduler weighs each session against the others first, and a thread's nice value only
//!   counts inside its session. Every job runs under `setsid`, so a nice value alone would
//!   weigh the job against its own processes and against talaria not at all (measured with
//!   32 chatty jobs: no change), while the autogroup's value does.
//!
//! Priorities only ever go down here (a higher nice value): that needs no privilege, and a
//! command that lowered its own priority further keeps it.

use std::io::Write;

use super::group;

/// The lowest priority there is.
pub(crate) const NICE_MAX: i32 = 19;

/// The supervisor, before it starts the command: itself (it is single-threaded) and its
/// session's autogroup at `nice`; the command inherits the thread's value.
pub(crate) fn lower_self(nice: i32) {
    if nice <= 0 {
        return;
    }
    lower_thread(0, nice);
    lower_autogroup("/proc/self/autogroup", nice);
}

/// Between fork and exec of the command, right after its `setsid`: the new session's
/// autogroup starts at nice 0, so it gets the job's value. The text is made before the
/// fork; [`ChildAutogroup::apply`] only calls open, write and close (async-signal-safe).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildAutogroup {
    text: [u8; 2],
    len: usize,
}

impl ChildAutogroup {
    /// None when there is nothing to lower (0).
    pub(crate) fn new(nice: i32) -> Option<ChildAutogroup> {
        let nice = nice.clamp(0, NICE_MAX);
        if nice == 0 {
            return None;
        }
        let digits = nice.to_string();
        let mut text = [0u8; 2];
        text[..digits.len()].copy_from_slice(digits.as_bytes());
        Some(ChildAutogroup { text, len: digits.len() })
    }

    /// Write the value into this process's autogroup; without autogroups (no such file, a
    /// kernel without them) nothing happens.
    pub(crate) fn apply(&self) {
        // SAFETY: open/write/close on a NUL-terminated constant path and our own bytes;
        // no allocation, no lock (this runs between fork and exec).
        unsafe {
            let fd = libc::open(c"/proc/self/autogroup".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, self.text.as_ptr().cast(), self.len);
                libc::close(fd);
            }
        }
    }
}

/// A running job moved to the background (a yield, Ctrl+B, a `cmd &` whose leader is done):
/// every thread of its process group, the group's session autogroup and its supervisor go
/// down to `nice`. Nothing is touched when the group's leader is alive but is not the
/// process that started at `leader_start` (its pid was reused), nor a supervisor that is
/// not the one that started at its start time. What forks while this runs keeps its
/// parent's old nice value, but not its autogroup's, which is the one that counts there.
pub(crate) fn lower_job(pgid: i32, leader_start: u64, supervisor: (i32, u64), nice: i32) {
    if nice <= 0 {
        return;
    }
    if pgid > 1 && leader_is(pgid, leader_start) {
        let members = members_of(pgid);
        for pid in &members {
            lower_process(*pid, nice);
        }
        // One session holds the whole group: one autogroup (written through any member).
        let _ = members.iter().any(|pid| lower_autogroup(&format!("/proc/{pid}/autogroup"), nice));
    }
    let (sup_pid, sup_start) = supervisor;
    if sup_pid > 1 && group::process_alive(sup_pid, Some(sup_start)) {
        lower_process(sup_pid, nice);
        lower_autogroup(&format!("/proc/{sup_pid}/autogroup"), nice);
    }
}

/// The group's leader is the process we started, or gone (its group lives on: no new
/// process can take a pid that is still a group id).
fn leader_is(pgid: i32, leader_start: u64) -> bool {
    match group::proc_stat(pgid) {
        Some(stat) if stat.state != 'Z' && stat.state != 'X' => leader_start == 0 || stat.start_ticks == leader_start,
        _ => true,
    }
}

/// The live processes of group `pgid`.
fn members_of(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| matches!(group::proc_stat(*pid), Some(s) if s.pgrp == pgid && s.state != 'Z' && s.state != 'X'))
        .collect()
}

/// Every thread of `pid` (setpriority acts on one thread on Linux).
fn lower_process(pid: i32, nice: i32) {
    match std::fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(tasks) => {
            for tid in tasks.flatten().filter_map(|t| t.file_name().to_str()?.parse::<i32>().ok()) {
                lower_thread(tid, nice);
            }
        }
        Err(_) => {
            lower_thread(pid, nice);
        }
    }
}

/// One thread (0 = the caller) to `nice`, if it is not that low already.
fn lower_thread(tid: i32, nice: i32) -> bool {
    let Some(now) = thread_nice(tid) else { return false };
    if now >= nice {
        return true;
    }
    // SAFETY: setpriority(2) with integer arguments; no memory is involved.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) == 0 }
}

/// A thread's nice value (0 = the caller's thread).
pub(crate) fn thread_nice(tid: i32) -> Option<i32> {
    nix::errno::Errno::clear();
    // SAFETY: getpriority(2) with integer arguments; -1 is a valid answer, errno tells.
    let value = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
    (value != -1 || nix::errno::Errno::last_raw() == 0).then_some(value)
}

/// The nice value of the autogroup `/proc/<pid>/autogroup` names ("/autogroup-42 nice 0").
pub(crate) fn autogroup_nice(path: &str) -> Option<i32> {
    parse_autogroup(&std::fs::read_to_string(path).ok()?)
}

fn parse_autogroup(text: &str) -> Option<i32> {
    text.split_whitespace().skip_while(|w| *w != "nice").nth(1)?.parse().ok()
}

/// Raise the autogroup's nice value to `nice` unless it is there already. False where there
/// are no autogroups or the file cannot be written.
fn lower_autogroup(path: &str, nice: i32) -> bool {
    match autogroup_nice(path) {
        Some(now) if now >= nice => true,
        Some(_) => std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|mut f| f.write_all(nice.to_string().as_bytes()))
            .is_ok(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_autogroup_line_gives_its_nice_value() {
        assert_eq!(parse_autogroup("/autogroup-19465 nice 0\n"), Some(0));
        assert_eq!(parse_autogroup("/autogroup-7 nice 10"), Some(10));
        assert_eq!(parse_autogroup(""), None);
    }

    #[test]
    fn the_child_text_is_the_value_in_decimal_and_nothing_for_zero() {
        let t = ChildAutogroup::new(10).unwrap();
        assert_eq!(&t.text[..t.len], b"10");
        let t = ChildAutogroup::new(7).unwrap();
        assert_eq!(&t.text[..t.len], b"7");
        assert_eq!(ChildAutogroup::new(40).map(|t| t.text[..t.len].to_vec()), Some(b"19".to_vec()));
        assert!(ChildAutogroup::new(0).is_none());
    }

    /// A process group in a session of its own, reniced as a moved job is: every process
    /// of the group (a child and a grandchild) and the session's autogroup end at the value.
    #[test]
    fn a_moved_group_and_its_session_go_down_to_the_value_and_never_back_up() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh");
        child.arg("-c").arg("sleep 3004461 & exec sleep 3004462");
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            child.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
        }
        let mut child = child.spawn().unwrap();
        let pgid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while members_of(pgid).len() < 2 {
            assert!(std::time::Instant::now() < deadline, "the group never had two processes");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let start = group::proc_stat(pgid).unwrap().start_ticks;
        lower_job(pgid, start, (0, 0), 7);
        let members = members_of(pgid);
        let nices: Vec<Option<i32>> = members.iter().map(|p| thread_nice(*p)).collect();
        assert_eq!(nices, vec![Some(7); members.len()]);
        let ours = autogroup_nice("/proc/self/autogroup");
        if ours.is_some() {
            assert_eq!(autogroup_nice(&format!("/proc/{pgid}/autogroup")), Some(7));
            assert_eq!(autogroup_nice("/proc/self/autogroup"), ours, "the caller's own session is left alone");
        }
        // Asked for less than it has: nothing goes back up.
        lower_job(pgid, start, (0, 0), 3);
        assert_eq!(thread_nice(pgid), Some(7));
        // A wrong start time (a reused pid): nothing is touched.
        lower_job(pgid, start + 1, (0, 0), 12);
        assert_eq!(thread_nice(pgid), Some(7));
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
        child.wait().unwrap();
    }
}
