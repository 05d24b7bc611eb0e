//! The job's view of the file system (DESIGN §6a): in its own mount namespace every mount is
//! read-only but the writable roots (and `/dev/shm`, and the job's own `cwd` file), so
//! metadata changes Landlock has no right for — `chmod`, `chown`, `utime`, xattrs, `chattr`
//! — fail outside the roots as writes do. `/dev/pts` is a private devpts instance: no job
//! sees a terminal of talaria or of the user, yet `openpty` works inside.
//!
//! Built in the parent; applied between fork and exec with syscalls only: `unshare` (and the
//! uid/gid maps of a user namespace), one recursive `mount_setattr` (Linux 5.12) for the
//! read-only view, a bind and a non-recursive `mount_setattr` per writable path, one devpts
//! mount. Then the git guard's binds (mounts.rs) go on top, and Landlock after them forbids
//! any further mount change.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::mounts::{self, GuardSupport, Namespace};

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_int = 0x8000;

/// `struct mount_attr` (linux/mount.h).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Everything the child needs, built in the parent: no allocation after fork.
#[derive(Debug)]
pub(crate) struct View {
    /// Enters the namespace (no binds of its own).
    enter: mounts::Plan,
    /// Bound onto themselves and made writable again, in this order.
    writable: Vec<CString>,
    /// Mount a private devpts instance on `/dev/pts`.
    devpts: bool,
}

impl View {
    /// The view for a job whose writable paths are `roots` (directories) and `files`.
    pub(crate) fn new(ns: Namespace, roots: &[PathBuf], files: &[PathBuf]) -> std::io::Result<View> {
        let mut writable: Vec<CString> = Vec::new();
        let shm = Path::new("/dev/shm");
        let candidates =
            roots.iter().map(PathBuf::as_path).chain(std::iter::once(shm)).chain(files.iter().map(PathBuf::as_path));
        for path in candidates {
            // Only what exists and is not read-only on its own: a bind of a read-only file
            // system cannot be made writable, and the job would not start.
            let writable_fs = nix::sys::statvfs::statvfs(path)
                .is_ok_and(|s| !s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
            if writable_fs {
                let c = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
                if !writable.contains(&c) {
                    writable.push(c);
                }
            }
        }
        Ok(View { enter: mounts::Plan::empty(ns)?, writable, devpts: Path::new("/dev/pts").is_dir() })
    }

    /// Enter the namespace, make the view, then put the git guard's binds on top.
    /// Between fork and exec: syscalls only.
    pub(crate) fn apply(&self, git_guard: Option<&mounts::Plan>) -> std::io::Result<()> {
        let last = std::io::Error::last_os_error;
        self.enter.enter()?;
        // SAFETY: mount_setattr and mount with prepared C strings and a stack struct: all
        // plain syscalls, no allocation.
        unsafe {
            let read_only = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
            if setattr(c"/", AT_RECURSIVE, &read_only) != 0 {
                return Err(last());
            }
            let none = std::ptr::null::<libc::c_char>();
            let writable = MountAttr { attr_set: 0, attr_clr: MOUNT_ATTR_RDONLY, propagation: 0, userns_fd: 0 };
            for path in &self.writable {
                let p = path.as_ptr();
                if libc::mount(p, p, none, libc::MS_BIND | libc::MS_REC, std::ptr::null()) != 0 {
                    return Err(last());
                }
                // Only the bind itself: a read-only file system mounted below stays so.
                if setattr(path, 0, &writable) != 0 {
                    return Err(last());
                }
            }
            if self.devpts {
                let flags = libc::MS_NOSUID | libc::MS_NOEXEC;
                let data = c"newinstance,ptmxmode=0666,mode=0620";
                if libc::mount(
                    c"devpts".as_ptr(),
                    c"/dev/pts".as_ptr(),
                    c"devpts".as_ptr(),
                    flags,
                    data.as_ptr().cast(),
                ) != 0
                {
                    return Err(last());
                }
            }
        }
        if let Some(plan) = git_guard {
            plan.mount_binds()?;
        }
        // The working directory was entered before the mounts (std changes it before
        // pre_exec): enter it again by name, or the job's relative paths stay on the
        // read-only mount below the writable bind.
        let mut cwd = [0u8; 4096];
        // SAFETY: getcwd and chdir with a stack buffer: syscalls, no allocation.
        unsafe {
            if !libc::getcwd(cwd.as_mut_ptr().cast(), cwd.len()).is_null() {
                libc::chdir(cwd.as_ptr().cast());
            }
        }
        Ok(())
    }
}

impl View {
    /// Grant the job its private `/dev/pts` (mounted by [`View::apply`]; the parent could
    /// not name it: Landlock rules hold inodes, and a mount stacked on the old instance is
    /// not beneath it). Between fork and exec: open, fstat, landlock_add_rule, close.
    pub(crate) fn grant_devpts(
        &self,
        ruleset: landlock::RulesetCreated,
        access: landlock::BitFlags<landlock::AccessFs>,
    ) -> std::io::Result<landlock::RulesetCreated> {
        use landlock::RulesetCreatedAttr;
        use std::os::fd::{FromRawFd, OwnedFd};
        if !self.devpts {
            return Ok(ruleset);
        }
        // SAFETY: open(2) of a constant path; the descriptor is owned from here on.
        let fd = unsafe { libc::open(c"/dev/pts".as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        ruleset
            .add_rule(landlock::PathBeneath::new(&fd, access))
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))
    }
}

/// `mount_setattr(AT_FDCWD, path, flags, attr)`.
unsafe fn setattr(path: &std::ffi::CStr, flags: libc::c_int, attr: &MountAttr) -> libc::c_long {
    libc::syscall(
        libc::SYS_mount_setattr,
        libc::AT_FDCWD,
        path.as_ptr(),
        flags as libc::c_uint,
        attr as *const MountAttr,
        std::mem::size_of::<MountAttr>(),
    )
}

/// Can jobs get the view here? Probed once per process: a forked child makes it for real.
pub(crate) fn support() -> &'static GuardSupport {
    static SUPPORT: OnceLock<GuardSupport> = OnceLock::new();
    SUPPORT.get_or_init(|| match mounts::support() {
        GuardSupport::Available(ns) => {
            let tmp = super::canonical(&std::env::temp_dir());
            match View::new(*ns, &[tmp], &[]).and_then(|view| mounts::try_in_child(|| view.apply(None))) {
                Ok(()) => GuardSupport::Available(*ns),
                Err(e) => GuardSupport::Unavailable { reason: format!("cannot make a read-only view ({e})") },
            }
        }
        GuardSupport::Unavailable { reason } => GuardSupport::Unavailable { reason: reason.clone() },
    })
}
