//! The job's seccomp filter: a small classic-BPF program built before fork and installed
//! after it (DESIGN §6, §6a). What it does, syscall by syscall:
//! - every syscall of a foreign ABI (i386 `socketcall`, x32) fails, as does `io_uring_setup`
//!   (io_uring opens and connects sockets without passing through seccomp);
//! - `sandbox.network = false`: `socket`/`socketpair` of any family but AF_UNIX fail (TCP,
//!   UDP, raw, packet, netlink, vsock alike);
//! - `sandbox.network = "ask"`: only TCP among the IP sockets, no MSG_FASTOPEN `sendmsg`, and
//!   `bind`/`listen` go to the supervisor too (listeners stay on loopback);
//! - `connect`, and `sendto` with an address, go to the job's supervisor by user
//!   notification ([`super::notify`]), which decides where a socket may reach;
//! - limits and priorities change only for the caller itself: `prlimit64` with a new limit,
//!   `setpriority`, `ioprio_set` and the `sched_set*` calls fail with EPERM when they name
//!   another pid (or a user).

use std::os::fd::{FromRawFd, OwnedFd};

/// What the filter enforces (plain data, decided by the policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rules {
    /// `sandbox.network`: IP and every other family but AF_UNIX may be opened.
    pub(super) network: bool,
    /// `sandbox.network = "ask"`: of the IP sockets only TCP streams may be opened (no UDP,
    /// so no DNS of the job's own; a datagram sent with `sendmsg` would escape the
    /// mediation), and no `sendmsg`/`sendmmsg` with MSG_FASTOPEN (a connect the filter
    /// cannot see).
    pub(super) proxy_only: bool,
    /// `connect` and addressed `sendto` go to the supervisor.
    pub(super) mediate_sockets: bool,
}

#[derive(Debug, Clone)]
pub(super) struct Filter {
    program: Vec<libc::sock_filter>,
    notify: bool,
}

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS (0x20)
const JEQ_K: u16 = 0x15; // BPF_JMP (5) | BPF_JEQ (0x10) | BPF_K (0)
const JGE_K: u16 = 0x35; // BPF_JMP (5) | BPF_JGE (0x30) | BPF_K (0)
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
const AND_K: u16 = 0x54; // BPF_ALU (4) | BPF_AND (0x50) | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP (5) | BPF_JSET (0x40) | BPF_K

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
// Offsets in struct seccomp_data (little-endian: the low half of an argument first).
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const fn arg_low(n: u32) -> u32 {
    16 + 8 * n
}
const fn arg_high(n: u32) -> u32 {
    16 + 8 * n + 4
}
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

const PRIO_USER: u32 = 2;
const IOPRIO_WHO_USER: u32 = 3;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

const fn errno(e: i32) -> u32 {
    SECCOMP_RET_ERRNO | (e as u32 & 0xffff)
}

/// The instructions of one syscall's rule: they run with the syscall number loaded and
/// always end in a return, so a block is skipped whole when the number does not match.
fn block(nr: libc::c_long, body: Vec<libc::sock_filter>) -> Vec<libc::sock_filter> {
    let len = u8::try_from(body.len()).unwrap_or(u8::MAX);
    let mut out = vec![jump(JEQ_K, nr as u32, 0, len)];
    out.extend(body);
    out
}

/// Allowed when the (int) argument `n` is 0 — the caller itself —, else EPERM.
fn only_self(n: u32) -> Vec<libc::sock_filter> {
    vec![
        stmt(LD_W_ABS, arg_low(n)),
        jump(JEQ_K, 0, 0, 1),
        stmt(RET_K, SECCOMP_RET_ALLOW),
        stmt(RET_K, errno(libc::EPERM)),
    ]
}

/// `setpriority(which, who)` / `ioprio_set(which, who)`: a user never, else only `who` 0
/// (the caller, or its own process group, which lies inside the job).
fn only_self_never_user(user: u32) -> Vec<libc::sock_filter> {
    vec![
        stmt(LD_W_ABS, arg_low(0)),
        jump(JEQ_K, user, 3, 0),
        stmt(LD_W_ABS, arg_low(1)),
        jump(JEQ_K, 0, 0, 1),
        stmt(RET_K, SECCOMP_RET_ALLOW),
        stmt(RET_K, errno(libc::EPERM)),
    ]
}

/// `socket(family)` / `socketpair(family)`: AF_UNIX only.
fn unix_only() -> Vec<libc::sock_filter> {
    vec![
        stmt(LD_W_ABS, arg_low(0)),
        jump(JEQ_K, libc::AF_UNIX as u32, 0, 1),
        stmt(RET_K, SECCOMP_RET_ALLOW),
        stmt(RET_K, errno(libc::EACCES)),
    ]
}

/// `socket(family, type, protocol)` with `proxy_only`: AF_UNIX, or a TCP stream of
/// AF_INET/AF_INET6 (protocol 0 or IPPROTO_TCP); everything else EACCES.
fn unix_or_tcp() -> Vec<libc::sock_filter> {
    vec![
        stmt(LD_W_ABS, arg_low(0)),
        jump(JEQ_K, libc::AF_UNIX as u32, 8, 0),
        jump(JEQ_K, libc::AF_INET as u32, 1, 0),
        jump(JEQ_K, libc::AF_INET6 as u32, 0, 7),
        stmt(LD_W_ABS, arg_low(1)),
        stmt(AND_K, 0xf),
        jump(JEQ_K, libc::SOCK_STREAM as u32, 0, 4),
        stmt(LD_W_ABS, arg_low(2)),
        jump(JEQ_K, 0, 1, 0),
        jump(JEQ_K, libc::IPPROTO_TCP as u32, 0, 1),
        stmt(RET_K, SECCOMP_RET_ALLOW),
        stmt(RET_K, errno(libc::EACCES)),
    ]
}

/// `sendmsg`/`sendmmsg` whose flags (argument `n`) ask for TCP Fast Open: EACCES.
fn no_fast_open(n: u32) -> Vec<libc::sock_filter> {
    vec![
        stmt(LD_W_ABS, arg_low(n)),
        jump(JSET_K, libc::MSG_FASTOPEN as u32, 1, 0),
        stmt(RET_K, SECCOMP_RET_ALLOW),
        stmt(RET_K, errno(libc::EACCES)),
    ]
}

impl Filter {
    pub(super) fn new(rules: Rules) -> Filter {
        let deny = errno(libc::EACCES);
        let mut p = vec![
            stmt(LD_W_ABS, OFF_ARCH),
            jump(JEQ_K, AUDIT_ARCH, 1, 0),
            stmt(RET_K, deny),
            stmt(LD_W_ABS, OFF_NR),
            jump(JGE_K, X32_SYSCALL_BIT, 0, 1),
            stmt(RET_K, deny),
        ];
        p.extend(block(libc::SYS_io_uring_setup, vec![stmt(RET_K, deny)]));
        if !rules.network {
            p.extend(block(libc::SYS_socket, unix_only()));
            p.extend(block(libc::SYS_socketpair, unix_only()));
        } else if rules.proxy_only {
            p.extend(block(libc::SYS_socket, unix_or_tcp()));
            p.extend(block(libc::SYS_socketpair, unix_only()));
            p.extend(block(libc::SYS_sendmsg, no_fast_open(2)));
            p.extend(block(libc::SYS_sendmmsg, no_fast_open(3)));
            if rules.mediate_sockets {
                // Listeners stay on loopback (the supervisor binds on the job's behalf).
                p.extend(block(libc::SYS_bind, vec![stmt(RET_K, SECCOMP_RET_USER_NOTIF)]));
                p.extend(block(libc::SYS_listen, vec![stmt(RET_K, SECCOMP_RET_USER_NOTIF)]));
            }
        }
        if rules.mediate_sockets {
            p.extend(block(libc::SYS_connect, vec![stmt(RET_K, SECCOMP_RET_USER_NOTIF)]));
            // sendto(fd, buf, len, flags, addr, addrlen): only with an address.
            p.extend(block(
                libc::SYS_sendto,
                vec![
                    stmt(LD_W_ABS, arg_low(4)),
                    jump(JEQ_K, 0, 0, 3),
                    stmt(LD_W_ABS, arg_high(4)),
                    jump(JEQ_K, 0, 0, 1),
                    stmt(RET_K, SECCOMP_RET_ALLOW),
                    stmt(RET_K, SECCOMP_RET_USER_NOTIF),
                ],
            ));
        }
        // prlimit64(pid, resource, new, old): reading anyone's limits is fine.
        p.extend(block(
            libc::SYS_prlimit64,
            vec![
                stmt(LD_W_ABS, arg_low(0)),
                jump(JEQ_K, 0, 4, 0),
                stmt(LD_W_ABS, arg_low(2)),
                jump(JEQ_K, 0, 0, 3),
                stmt(LD_W_ABS, arg_high(2)),
                jump(JEQ_K, 0, 0, 1),
                stmt(RET_K, SECCOMP_RET_ALLOW),
                stmt(RET_K, errno(libc::EPERM)),
            ],
        ));
        p.extend(block(libc::SYS_setpriority, only_self_never_user(PRIO_USER)));
        p.extend(block(libc::SYS_ioprio_set, only_self_never_user(IOPRIO_WHO_USER)));
        for nr in [libc::SYS_sched_setaffinity, libc::SYS_sched_setscheduler, libc::SYS_sched_setparam] {
            p.extend(block(nr, only_self(0)));
        }
        p.extend(block(libc::SYS_sched_setattr, only_self(0)));
        p.push(stmt(RET_K, SECCOMP_RET_ALLOW));
        Filter { program: p, notify: rules.mediate_sockets }
    }

    /// Install on the calling thread (between fork and exec: only `prctl` and `seccomp` on
    /// memory prepared before fork). Returns the notification listener when the filter
    /// sends syscalls to the supervisor; the caller must hand it over before exec.
    pub(super) fn install(&self) -> std::io::Result<Option<OwnedFd>> {
        let prog = libc::sock_fprog { len: self.program.len() as u16, filter: self.program.as_ptr() as *mut _ };
        nix::sys::prctl::set_no_new_privs()?;
        let flags = if self.notify { libc::SECCOMP_FILTER_FLAG_NEW_LISTENER } else { 0 };
        // SAFETY: seccomp(2) reads `prog`, which outlives the call.
        let fd = unsafe {
            libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, flags, &prog as *const libc::sock_fprog)
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: with NEW_LISTENER the return value is a fresh descriptor (close-on-exec).
        Ok(self.notify.then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every jump lands inside the program and every path ends in a return.
    #[test]
    fn every_jump_of_every_variant_stays_inside_the_program() {
        for (network, proxy_only) in [(false, false), (true, false), (true, true)] {
            for mediate_sockets in [false, true] {
                let f = Filter::new(Rules { network, proxy_only, mediate_sockets });
                let n = f.program.len();
                assert!(n < 4096);
                for (i, ins) in f.program.iter().enumerate() {
                    if ins.code & 0x07 == 0x05 {
                        assert!(i + 1 + (ins.jt.max(ins.jf) as usize) < n, "{network} {mediate_sockets}: jump at {i}");
                    }
                }
                assert_eq!(f.program[n - 1].code, RET_K);
            }
        }
    }
}
