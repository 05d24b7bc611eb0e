//! Jobs keep no capability (DESIGN §6a): the bounding set and the ambient set are emptied,
//! the securebits make uid 0 an ordinary uid for exec (NOROOT, NO_SETUID_FIXUP, locked),
//! and the effective, permitted and inheritable sets are cleared last. As root a job's
//! `CapEff`, `CapPrm` and `CapBnd` are then 0 after exec. Run after the mounts (which need
//! CAP_SYS_ADMIN in the job's namespace) and before Landlock and seccomp.

use std::io;

// linux/securebits.h
const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_SETPCAP: u32 = 8;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Built before fork: the highest capability number this kernel knows.
#[derive(Debug, Clone, Copy)]
pub(super) struct DropAll {
    last_cap: libc::c_ulong,
}

impl DropAll {
    pub(super) fn new() -> DropAll {
        let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(63);
        DropAll { last_cap }
    }

    /// Between fork and exec: `prctl` and `capset` only. Without CAP_SETPCAP (an
    /// unprivileged user outside a user namespace) the securebits and the bounding set
    /// cannot change, and need not: such a process has no capability to lose, and
    /// no_new_privs (set before seccomp) keeps exec from granting any.
    pub(super) fn apply(&self) -> io::Result<()> {
        let last = || io::Error::last_os_error();
        // SAFETY: prctl and capset with integer arguments and our own structs.
        unsafe {
            let has_setpcap = libc::prctl(libc::PR_CAPBSET_READ, CAP_SETPCAP as libc::c_ulong, 0, 0, 0) == 1
                && effective_has(CAP_SETPCAP);
            if has_setpcap {
                let bits = SECBIT_NOROOT
                    | SECBIT_NOROOT_LOCKED
                    | SECBIT_NO_SETUID_FIXUP
                    | SECBIT_NO_SETUID_FIXUP_LOCKED
                    | SECBIT_KEEP_CAPS_LOCKED
                    | SECBIT_NO_CAP_AMBIENT_RAISE
                    | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
                if libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) != 0 {
                    return Err(last());
                }
                for cap in 0..=self.last_cap {
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                        && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
                    {
                        return Err(last());
                    }
                }
            }
            // Ambient capabilities may exist without CAP_SETPCAP; clearing needs none.
            if libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) != 0
                && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
            {
                return Err(last());
            }
            let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
            let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
            if libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) != 0 {
                return Err(last());
            }
        }
        Ok(())
    }
}

/// Is `cap` in the calling thread's effective set? (capget; async-signal-safe.)
unsafe fn effective_has(cap: u32) -> bool {
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
    if libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) != 0 {
        return false;
    }
    data[(cap / 32) as usize].effective & (1 << (cap % 32)) != 0
}
