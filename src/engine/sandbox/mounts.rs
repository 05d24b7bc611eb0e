//! A writable root's `.git` is read-only for jobs but what git writes to commit (DESIGN §6;
//! which paths: [`super::git_guard`]). Landlock cannot carve a read-only hole in a writable
//! tree without taking `MAKE_REG` from its parent, and git needs `.git/index.lock`. So the
//! job gets a mount namespace of its own in which those paths are read-only bind mounts,
//! set up between fork and exec, before Landlock (a Landlocked process may not mount or
//! unmount anything afterwards). `.git` itself is bound onto itself (still writable): a
//! mount point cannot be renamed or removed, so a job cannot swap in a copy of `.git` whose
//! hooks it wrote.
//!
//! The namespace: a plain mount namespace when talaria may create one (CAP_SYS_ADMIN), else a
//! user namespace mapping only the caller's own uid and gid (what `unshare -Urm` does). Where
//! neither works, jobs run without it; `/permissions` says so and the file tools ask anyway.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// Set (to anything) only by tests: behave as where no mount namespace can be created.
pub const NO_MOUNT_NS_ENV: &str = "TALARIA_TEST_NO_MOUNT_NS";
/// Set (to anything) only by tests: use a user namespace even where a plain one would do.
pub(crate) const USER_NS_ENV: &str = "TALARIA_TEST_USER_NS";

/// How a job gets its own mount table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Namespace {
    /// `unshare(CLONE_NEWNS)`: talaria may (CAP_SYS_ADMIN).
    Mount,
    /// `unshare(CLONE_NEWUSER | CLONE_NEWNS)` with the caller's own uid and gid mapped.
    User,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GuardSupport {
    Available(Namespace),
    Unavailable { reason: String },
}

/// Probed once per process (a forked child tries the real thing on the temp dir).
pub(crate) fn support() -> &'static GuardSupport {
    static SUPPORT: OnceLock<GuardSupport> = OnceLock::new();
    SUPPORT.get_or_init(probe)
}

fn probe() -> GuardSupport {
    if std::env::var_os(NO_MOUNT_NS_ENV).is_some() {
        return GuardSupport::Unavailable { reason: format!("turned off by {NO_MOUNT_NS_ENV}") };
    }
    let target = super::canonical(&std::env::temp_dir());
    let mut last = String::from("no namespace was tried");
    for ns in [Namespace::Mount, Namespace::User] {
        if ns == Namespace::Mount && std::env::var_os(USER_NS_ENV).is_some() {
            continue;
        }
        let plan = match Plan::new(ns, vec![Bind::read_only(&target)]) {
            Ok(plan) => plan,
            Err(e) => return GuardSupport::Unavailable { reason: e.to_string() },
        };
        match plan.try_in_child() {
            Ok(()) => return GuardSupport::Available(ns),
            Err(e) => last = e.to_string(),
        }
    }
    GuardSupport::Unavailable { reason: format!("cannot create a mount namespace ({last})") }
}

/// One bind mount of a path onto itself.
#[derive(Debug)]
struct Bind {
    path: CString,
    read_only: bool,
    /// A writable bind inside a read-only one: remounted writable (a bind copies the flags).
    remount_writable: bool,
    /// MS_* flags the existing mount has and a remount must keep (locked in a user namespace).
    keep: libc::c_ulong,
}

impl Bind {
    fn read_only(path: &Path) -> Bind {
        Bind { path: c_path(path), read_only: true, remount_writable: false, keep: mount_flags(path) }
    }

    fn writable(path: &Path, under_read_only: bool) -> Bind {
        let keep = if under_read_only { mount_flags(path) } else { 0 };
        Bind { path: c_path(path), read_only: false, remount_writable: under_read_only, keep }
    }
}

fn c_path(path: &Path) -> CString {
    // A path with a NUL byte cannot exist; an empty string makes the mount fail (closed).
    CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

/// The flags of the mount `path` is on that a read-only remount has to repeat.
fn mount_flags(path: &Path) -> libc::c_ulong {
    let Ok(stat) = nix::sys::statvfs::statvfs(path) else { return 0 };
    use nix::sys::statvfs::FsFlags;
    let flags = stat.flags();
    let mut out = 0;
    for (st, ms) in [
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
        (FsFlags::ST_NOATIME, libc::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if flags.contains(st) {
            out |= ms;
        }
    }
    out
}

/// Everything the child needs, built in the parent: no allocation after fork.
#[derive(Debug)]
pub(crate) struct Plan {
    ns: Namespace,
    binds: Vec<Bind>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl Plan {
    fn new(ns: Namespace, binds: Vec<Bind>) -> std::io::Result<Plan> {
        let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
        Ok(Plan {
            ns,
            binds,
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
        })
    }

    /// The binds that protect the git directories of `roots` (see [`super::git_guard`]).
    pub(crate) fn for_roots(
        ns: Namespace,
        roots: &[PathBuf],
        start: &super::git_guard::Start,
    ) -> Result<Option<Plan>, super::SandboxError> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let guards = super::git_guard::plan(roots, start, home.as_deref())?;
        let binds: Vec<Bind> = guards
            .iter()
            .map(|g| match g {
                super::git_guard::Guard::ReadOnly(p) => Bind::read_only(p),
                super::git_guard::Guard::Writable { path, under_read_only } => Bind::writable(path, *under_read_only),
            })
            .collect();
        if binds.is_empty() {
            return Ok(None);
        }
        Ok(Some(Plan::new(ns, binds)?))
    }

    /// A plan that only enters the namespace (the read-only view, view.rs, mounts the rest).
    pub(crate) fn empty(ns: Namespace) -> std::io::Result<Plan> {
        Plan::new(ns, Vec::new())
    }

    /// Enter the namespace and mount. Between fork and exec: syscalls only.
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        self.enter()?;
        self.mount_binds()
    }

    /// Enter the namespace; nothing done after it reaches the parent's mount table.
    pub(crate) fn enter(&self) -> std::io::Result<()> {
        let last = || std::io::Error::last_os_error();
        // SAFETY: unshare, open/write/close on /proc files and mount with prepared C
        // strings: all async-signal-safe, no allocation.
        unsafe {
            match self.ns {
                Namespace::Mount => {
                    if libc::unshare(libc::CLONE_NEWNS) != 0 {
                        return Err(last());
                    }
                }
                Namespace::User => {
                    if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                        return Err(last());
                    }
                    write_proc(c"/proc/self/setgroups", b"deny")?;
                    write_proc(c"/proc/self/uid_map", &self.uid_map)?;
                    write_proc(c"/proc/self/gid_map", &self.gid_map)?;
                }
            }
            // Nothing done here may reach the parent's mount table.
            let none = std::ptr::null::<libc::c_char>();
            if libc::mount(none, c"/".as_ptr(), none, libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
                return Err(last());
            }
        }
        Ok(())
    }

    /// The binds, in the namespace [`Plan::enter`] made. Between fork and exec: syscalls only.
    pub(crate) fn mount_binds(&self) -> std::io::Result<()> {
        let last = || std::io::Error::last_os_error();
        let none = std::ptr::null::<libc::c_char>();
        // SAFETY: mount with prepared C strings: async-signal-safe, no allocation.
        unsafe {
            for bind in &self.binds {
                let p = bind.path.as_ptr();
                if libc::mount(p, p, none, libc::MS_BIND | libc::MS_REC, std::ptr::null()) != 0 {
                    return Err(last());
                }
                if bind.read_only || bind.remount_writable {
                    let ro = if bind.read_only { libc::MS_RDONLY } else { 0 };
                    let flags = libc::MS_REMOUNT | libc::MS_BIND | ro | bind.keep;
                    if libc::mount(none, p, none, flags, std::ptr::null()) != 0 {
                        return Err(last());
                    }
                }
            }
        }
        Ok(())
    }

    /// Apply the plan in a forked child that exits at once: does it work here?
    fn try_in_child(&self) -> std::io::Result<()> {
        try_in_child(|| self.apply())
    }
}

/// Run `apply` in a forked child that exits at once: does it work here? `apply` must make
/// only async-signal-safe calls.
///
/// The child says how it went over a pipe before it exits, and is reaped on a thread of its
/// own: a child that made namespaces is gone only once the kernel has torn them down, after
/// an RCU grace period (5-15 ms here), and the first screen waits for this answer.
pub(crate) fn try_in_child(apply: impl Fn() -> std::io::Result<()>) -> std::io::Result<()> {
    use nix::unistd::{fork, ForkResult};
    let (answer, tell) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // SAFETY: the child makes only async-signal-safe calls (apply, write, _exit).
    let child = match unsafe { fork() }? {
        ForkResult::Child => {
            let code: i32 = match apply() {
                Ok(()) => 0,
                Err(e) => e.raw_os_error().unwrap_or(255).clamp(1, 255),
            };
            let _ = nix::unistd::write(&tell, &code.to_ne_bytes());
            // SAFETY: ends the forked child without running the parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => child,
    };
    drop(tell);
    let mut code = [0u8; 4];
    let mut got = 0;
    while got < code.len() {
        match nix::unistd::read(&answer, &mut code[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                reap_later(child);
                return Err(e.into());
            }
        }
    }
    reap_later(child);
    match (got == code.len()).then(|| i32::from_ne_bytes(code)) {
        Some(0) => Ok(()),
        Some(code) => Err(std::io::Error::from_raw_os_error(code)),
        None => Err(std::io::Error::other("the probe ended without an answer")),
    }
}

/// Reap a probe's child without waiting for it here.
fn reap_later(child: nix::unistd::Pid) {
    let reap = move || {
        while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(child, None) {}
    };
    if std::thread::Builder::new().name("talaria-reap".into()).spawn(reap).is_err() {
        reap();
    }
}

/// Write `data` to a /proc file (async-signal-safe).
unsafe fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n = libc::write(fd, data.as_ptr().cast(), data.len());
    libc::close(fd);
    if n != data.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe's answer comes over its pipe (the first screen waits for it, not for the
    /// child's exit), an error keeps its errno, and the child is reaped all the same.
    #[test]
    fn a_probe_answers_over_its_pipe_keeps_the_errno_and_its_child_is_reaped() {
        use std::os::fd::AsRawFd;
        assert!(try_in_child(|| Ok(())).is_ok());
        let (pids, tell) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let fd = tell.as_raw_fd();
        let failed = try_in_child(|| {
            // SAFETY: getpid and write are async-signal-safe.
            let pid = unsafe { libc::getpid() };
            unsafe { libc::write(fd, (&pid as *const i32).cast(), 4) };
            Err(std::io::Error::from_raw_os_error(libc::EACCES))
        })
        .unwrap_err();
        assert_eq!(failed.raw_os_error(), Some(libc::EACCES), "{failed}");
        drop(tell);
        let mut pid = [0u8; 4];
        assert_eq!(nix::unistd::read(&pids, &mut pid).unwrap(), 4);
        let proc_dir = PathBuf::from(format!("/proc/{}", i32::from_ne_bytes(pid)));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while proc_dir.exists() {
            assert!(std::time::Instant::now() < deadline, "the probe's child was never reaped");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Two jobs started at once in the same root both find `.git/hooks` missing; the one
    /// that loses the race to create it must still start (a gate once failed with EEXIST).
    #[test]
    fn concurrent_plans_for_one_root_all_succeed() {
        const THREADS: usize = 8;
        for _ in 0..40 {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join(".git")).unwrap();
            let roots = vec![dir.path().to_path_buf()];
            let barrier = std::sync::Barrier::new(THREADS);
            let results: Vec<_> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            Plan::for_roots(Namespace::Mount, &roots, &Default::default())
                                .map(|p| p.map(|p| p.binds.len()))
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for r in results {
                // `.git` writable, `hooks` read-only; no config here.
                assert_eq!(r.unwrap(), Some(2));
            }
        }
    }
}
