//! Relaying a proxied connection both ways with `splice(2)`: socket → pipe → socket, so the
//! bytes never enter the proxy's memory (the kernel moves page references), and memory per
//! connection is two pipes whatever the transfer's size. Each direction is one blocking
//! thread (from tokio's blocking pool) looping on two splices: the kernel wakes it when
//! bytes or room arrive, with no readiness events, no task wake-ups and no hop between
//! worker threads per chunk — on loopback those cost more than the copying (BENCHMARKS.md
//! "Network proxy": a user-space copy, then splice driven by tokio, then this).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nix::fcntl::{splice, SpliceFFlags};
use nix::sys::socket::{shutdown, Shutdown};
use tokio::net::TcpStream;

/// A pipe's capacity asked for (the kernel may give less to an unprivileged user).
const PIPE_SIZE: usize = 1 << 20;
/// Socket buffers asked for on both connections (capped by `net.core.[rw]mem_max`): fewer,
/// larger chunks per wake-up.
const SOCKET_BUFFER: usize = 4 << 20;

/// Bytes relayed so far each way (a → b, b → a), readable when the relay is cut.
#[derive(Default)]
pub(super) struct Counts {
    up: AtomicU64,
    down: AtomicU64,
}

impl Counts {
    pub(super) fn get(&self) -> (u64, u64) {
        (self.up.load(Ordering::Relaxed), self.down.load(Ordering::Relaxed))
    }
}

/// Shuts both sockets down when dropped: a relay cut short (the job ended) wakes its
/// threads, which then see end of file or a broken pipe and return.
struct Cut(OwnedFd, OwnedFd);

impl Drop for Cut {
    fn drop(&mut self) {
        let _ = shutdown(self.0.as_raw_fd(), Shutdown::Both);
        let _ = shutdown(self.1.as_raw_fd(), Shutdown::Both);
    }
}

/// Relay until both directions reached end of file (or one failed). The sockets are
/// blocking from here on; tokio does not read or write them again.
pub(super) async fn both_ways(a: &TcpStream, b: &TcpStream, counts: &Arc<Counts>) {
    let dup = |s: &TcpStream| s.as_fd().try_clone_to_owned();
    let (Ok(a1), Ok(a2), Ok(b1), Ok(b2), Ok(ca), Ok(cb)) = (dup(a), dup(a), dup(b), dup(b), dup(a), dup(b)) else {
        return;
    };
    let _cut = Cut(ca, cb);
    for fd in [&a1, &b1] {
        // The descriptors share one open file each: blocking for the dups is blocking for all.
        let _ = set_blocking(fd);
        let _ = nix::sys::socket::setsockopt(fd, nix::sys::socket::sockopt::RcvBuf, &SOCKET_BUFFER);
        let _ = nix::sys::socket::setsockopt(fd, nix::sys::socket::sockopt::SndBuf, &SOCKET_BUFFER);
    }
    let (up, down) = (counts.clone(), counts.clone());
    let up = tokio::task::spawn_blocking(move || one_way(&a1, &b2, &up.up));
    let down = tokio::task::spawn_blocking(move || one_way(&b1, &a2, &down.down));
    let _ = tokio::join!(up, down);
}

fn set_blocking(fd: &OwnedFd) -> nix::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags & !OFlag::O_NONBLOCK)).map(|_| ())
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::OFlag;
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let _ = nix::fcntl::fcntl(&w, nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_SIZE as libc::c_int));
    Ok((r, w))
}

/// From `from` to `to` until end of file, then pass the end on.
fn one_way(from: &OwnedFd, to: &OwnedFd, total: &AtomicU64) -> io::Result<()> {
    let (pipe_r, pipe_w) = pipe()?;
    // No SPLICE_F_MORE: it corks the last bytes of an answer, and small exchanges wait.
    let flags = SpliceFFlags::SPLICE_F_MOVE;
    let result = loop {
        let n = match splice(from.as_fd(), None, pipe_w.as_fd(), None, PIPE_SIZE, flags) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            // The other side reset: what was relayed stands.
            Err(nix::errno::Errno::ECONNRESET) => 0,
            Err(e) => break Err(e.into()),
        };
        if n == 0 {
            break Ok(());
        }
        let mut left = n;
        while left > 0 {
            match splice(pipe_r.as_fd(), None, to.as_fd(), None, left, flags) {
                Ok(m) => {
                    left -= m;
                    total.fetch_add(m as u64, Ordering::Relaxed);
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => break,
            }
        }
        if left > 0 {
            break Err(io::Error::other("the receiving side went away"));
        }
    };
    match result {
        Ok(()) => {
            let _ = shutdown(to.as_raw_fd(), Shutdown::Write);
        }
        // One side failed: the other direction has nothing to wait for either.
        Err(_) => {
            let _ = shutdown(from.as_raw_fd(), Shutdown::Both);
            let _ = shutdown(to.as_raw_fd(), Shutdown::Both);
        }
    }
    result
}
