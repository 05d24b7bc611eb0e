//! `sandbox.network = false`: a small classic-BPF seccomp filter, built before fork and
//! installed after it, that makes every socket of the Internet and packet families fail
//! with EACCES (TCP, UDP, raw, ICMP alike). Unix sockets keep working. `io_uring_setup`
//! fails too (io_uring can open sockets without the `socket` syscall), and so does every
//! syscall of a foreign ABI (i386 `socketcall`, x32), which a filter keyed on native
//! numbers could not see.

#[derive(Debug, Clone)]
pub(super) struct Filter {
    program: Vec<libc::sock_filter>,
}

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS (0x20)
const JEQ_K: u16 = 0x15; // BPF_JMP (5) | BPF_JEQ (0x10) | BPF_K (0)
const JGE_K: u16 = 0x35; // BPF_JMP (5) | BPF_JGE (0x30) | BPF_K (0)
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
// Offsets in struct seccomp_data.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0_LOW: u32 = 16; // little-endian: the low half of args[0]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

impl Filter {
    pub(super) fn deny_ip_sockets() -> Filter {
        let deny = SECCOMP_RET_ERRNO | libc::EACCES as u32;
        let program = vec![
            /* 0 */ stmt(LD_W_ABS, OFF_ARCH),
            /* 1 */ jump(JEQ_K, AUDIT_ARCH, 1, 0),
            /* 2 */ stmt(RET_K, deny),
            /* 3 */ stmt(LD_W_ABS, OFF_NR),
            /* 4 */ jump(JGE_K, X32_SYSCALL_BIT, 0, 1),
            /* 5 */ stmt(RET_K, deny),
            /* 6 */ jump(JEQ_K, libc::SYS_io_uring_setup as u32, 0, 1),
            /* 7 */ stmt(RET_K, deny),
            /* 8 */ jump(JEQ_K, libc::SYS_socket as u32, 1, 0),
            /* 9 */ stmt(RET_K, SECCOMP_RET_ALLOW),
            /* 10 */ stmt(LD_W_ABS, OFF_ARG0_LOW),
            /* 11 */ jump(JEQ_K, libc::AF_INET as u32, 3, 0),
            /* 12 */ jump(JEQ_K, libc::AF_INET6 as u32, 2, 0),
            /* 13 */ jump(JEQ_K, libc::AF_PACKET as u32, 1, 0),
            /* 14 */ stmt(RET_K, SECCOMP_RET_ALLOW),
            /* 15 */ stmt(RET_K, deny),
        ];
        Filter { program }
    }

    /// Install on the calling thread. Async-signal-safe: two `prctl` calls on memory
    /// prepared before fork.
    pub(super) fn install(&self) -> std::io::Result<()> {
        let prog = libc::sock_fprog { len: self.program.len() as u16, filter: self.program.as_ptr() as *mut _ };
        // SAFETY: prctl with integer arguments; PR_SET_SECCOMP reads `prog`, which outlives
        // the call.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}
