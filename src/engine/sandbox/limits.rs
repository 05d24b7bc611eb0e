//! `sandbox.limits` (DESIGN §6a): what one command may consume. Processes are bounded by a
//! cgroup of the job's own with `pids.max` where one can be made (cgroup v1 `pids`, or a
//! cgroup v2 tree with the pids controller delegated), else by RLIMIT_NPROC — which the
//! kernel never enforces for uid 0 and which counts every process of the user, so it is
//! set to the machine's task count plus the limit. Address space and file size are
//! rlimits. The soft and hard limits are equal: a job cannot raise them again.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::sys::resource::Resource;

pub use crate::config::Limits;

/// Where a job's cgroup can be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CgroupSupport {
    /// The directory under which each job gets one (`<dir>/talaria-<supervisor pid>`).
    Available(PathBuf),
    Unavailable {
        reason: String,
    },
}

/// Probed once per process: make and remove a test cgroup.
pub(crate) fn cgroup_support() -> &'static CgroupSupport {
    static SUPPORT: OnceLock<CgroupSupport> = OnceLock::new();
    SUPPORT.get_or_init(|| match pids_parent() {
        Err(reason) => CgroupSupport::Unavailable { reason },
        Ok(dir) => {
            let probe = dir.join(format!("talaria-probe-{}", std::process::id()));
            let made = std::fs::create_dir(&probe);
            let usable = made.is_ok() && probe.join("pids.max").exists();
            let _ = std::fs::remove_dir(&probe);
            match (made, usable) {
                (Ok(()), true) => CgroupSupport::Available(dir),
                (Ok(()), false) => CgroupSupport::Unavailable {
                    reason: format!("the pids controller is not enabled below {}", dir.display()),
                },
                (Err(e), _) => {
                    CgroupSupport::Unavailable { reason: format!("cannot create a cgroup in {}: {e}", dir.display()) }
                }
            }
        }
    })
}

/// Our own cgroup of the pids controller: v1 `pids` if mounted, else the v2 tree.
fn pids_parent() -> Result<PathBuf, String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("no mountinfo: {e}"))?;
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("no /proc/self/cgroup: {e}"))?;
    let mut v2 = None;
    for line in mounts.lines() {
        // `<id> <parent> <dev> <root> <mount point> <options> ... - <fstype> <source> <super options>`
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let point = left.split(' ').nth(4).unwrap_or("");
        let mut right = right.split(' ');
        let fstype = right.next().unwrap_or("");
        let options = right.nth(1).unwrap_or("");
        if fstype == "cgroup" && options.split(',').any(|o| o == "pids") {
            let path = own.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                controllers.split(',').any(|c| c == "pids").then(|| path.to_string())
            });
            if let Some(path) = path {
                return Ok(Path::new(point).join(path.trim_start_matches('/')));
            }
        }
        if fstype == "cgroup2" && v2.is_none() {
            v2 = Some(PathBuf::from(point));
        }
    }
    let point = v2.ok_or_else(|| "no cgroup file system with the pids controller is mounted".to_string())?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::")).ok_or("this process is in no cgroup v2")?;
    Ok(point.join(path.trim_start_matches('/')))
}

/// One job's cgroup, made by its supervisor before the spawn and removed after the job.
#[derive(Debug)]
pub struct JobCgroup {
    dir: PathBuf,
    /// `cgroup.procs`, open for writing: the child writes "0" (itself) before exec.
    procs: OwnedFd,
}

impl JobCgroup {
    /// None where no cgroup can be made (the rlimit fallback then applies).
    pub fn create(limits: &Limits) -> Option<JobCgroup> {
        if limits.processes == 0 {
            return None;
        }
        let CgroupSupport::Available(parent) = cgroup_support() else { return None };
        let dir = parent.join(format!("talaria-{}", std::process::id()));
        // One left (empty) by an earlier supervisor of this pid that was SIGKILLed.
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).ok()?;
        let ok = std::fs::write(dir.join("pids.max"), limits.processes.to_string()).is_ok();
        let procs = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs"));
        match (ok, procs) {
            (true, Ok(procs)) => Some(JobCgroup { dir, procs: procs.into() }),
            _ => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// Remove it once the job is gone (fails harmlessly while a process is left in it).
    pub fn remove(&self) {
        let _ = std::fs::remove_dir(&self.dir);
    }

    pub(super) fn procs_fd(&self) -> i32 {
        self.procs.as_raw_fd()
    }
}

/// The rlimits a job gets, decided before fork.
#[derive(Debug, Clone, Default)]
pub(super) struct Plan {
    rlimits: Vec<(Resource, u64)>,
    /// `cgroup.procs` of the job's cgroup (owned by the supervisor's [`JobCgroup`]).
    cgroup_procs: Option<i32>,
}

impl Plan {
    pub(super) fn new(limits: &Limits) -> Plan {
        let mb = |v: u64| v.saturating_mul(1024 * 1024);
        let mut rlimits = Vec::new();
        if limits.address_space_mb > 0 {
            rlimits.push((Resource::RLIMIT_AS, mb(limits.address_space_mb)));
        }
        if limits.file_size_mb > 0 {
            rlimits.push((Resource::RLIMIT_FSIZE, mb(limits.file_size_mb)));
        }
        Plan { rlimits, cgroup_procs: None }
    }

    /// Processes by the job's cgroup; without one, RLIMIT_NPROC (not for root).
    pub(super) fn with_processes(mut self, limits: &Limits, cgroup: Option<&JobCgroup>) -> Plan {
        match cgroup {
            Some(cg) => self.cgroup_procs = Some(cg.procs_fd()),
            None if limits.processes > 0 && !nix::unistd::getuid().is_root() => {
                // RLIMIT_NPROC counts all of the user's tasks: allow what runs now (at most
                // every task of the machine) plus the limit.
                let tasks = machine_tasks().unwrap_or(0);
                self.rlimits.push((Resource::RLIMIT_NPROC, tasks + limits.processes));
            }
            None => {}
        }
        self
    }

    /// Between fork and exec: `write` and `setrlimit` only. A limit that cannot be set
    /// aborts the spawn, as every other sandbox step does.
    pub(super) fn apply(&self) -> io::Result<()> {
        if let Some(fd) = self.cgroup_procs {
            // SAFETY: write(2) of a static buffer to a descriptor the supervisor keeps open.
            if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        for &(resource, value) in &self.rlimits {
            // Never above the hard limit the job already had.
            let (_, hard) = nix::sys::resource::getrlimit(resource)?;
            let value = value.min(hard);
            nix::sys::resource::setrlimit(resource, value, value)?;
        }
        Ok(())
    }
}

/// Every task on the machine now (`/proc/loadavg`'s "running/total").
fn machine_tasks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()
}

/// One line for `/permissions`: which limits hold and which could not be set.
pub(crate) fn describe(limits: &Limits, root: bool, support: &CgroupSupport) -> String {
    let processes = match (limits.processes, support, root) {
        (0, ..) => "processes: no limit (sandbox.limits.processes = 0)".to_string(),
        (n, CgroupSupport::Available(dir), _) => {
            format!("processes: {n} tasks per command (cgroup pids.max under {})", dir.display())
        }
        (n, CgroupSupport::Unavailable { reason }, false) => {
            format!("processes: ~{n} more tasks per command (RLIMIT_NPROC; no cgroup: {reason})")
        }
        (_, CgroupSupport::Unavailable { reason }, true) => {
            format!(
                "processes: NOT limited (running as root, where RLIMIT_NPROC does not apply, and no cgroup: {reason})"
            )
        }
    };
    let size = |v: u64, what: &str| if v == 0 { format!("{what}: no limit") } else { format!("{what}: {v} MiB") };
    format!(
        "limits: {processes}; {}; {}",
        size(limits.file_size_mb, "file size"),
        size(limits.address_space_mb, "address space")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn permissions_say_which_limits_hold() {
        let limits = Limits::default();
        let cg = CgroupSupport::Available(PathBuf::from("/sys/fs/cgroup/pids"));
        let none = CgroupSupport::Unavailable { reason: "cannot create a cgroup in /x: EACCES".into() };
        assert_eq!(
            describe(&limits, true, &cg),
            "limits: processes: 2048 tasks per command (cgroup pids.max under /sys/fs/cgroup/pids); \
             file size: 65536 MiB; address space: no limit"
        );
        assert!(describe(&limits, false, &none).contains("RLIMIT_NPROC; no cgroup: cannot create"));
        assert!(describe(&limits, true, &none).contains("processes: NOT limited (running as root"));
        let off = Limits { processes: 0, address_space_mb: 4096, file_size_mb: 0 };
        assert_eq!(
            describe(&off, true, &cg),
            "limits: processes: no limit (sandbox.limits.processes = 0); file size: no limit; address space: 4096 MiB"
        );
    }
}
