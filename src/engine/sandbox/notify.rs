//! Socket mediation by seccomp user notification, served by the job's supervisor (DESIGN
//! §6a). Landlock (ABI 7 here) has no right for connecting to a pathname unix socket, so
//! the job's filter sends `connect` and addressed `sendto` to the supervisor, which:
//! 1. reads the address once from the job's memory, then checks the notification is still
//!    valid (the thread it read from is the one that asked);
//! 2. asks the pure policy ([`super::sockets`]);
//! 3. for an IP socket with the network on, performs the call on a duplicate of the job's
//!    own socket (`pidfd_getfd`) with the address it read and returns the result as is;
//!    for a unix address, connects a *fresh* socket of its own and reads who listens
//!    (`SO_PEERPIDFD`): a process of this job, or a socket in `sandbox.allow_unix_sockets`,
//!    and the fresh socket is installed in place of the job's (`SECCOMP_IOCTL_NOTIF_ADDFD`
//!    onto the job's fd number); otherwise it is closed and the job gets EACCES, and the
//!    denial is recorded for the tool result.
//!
//! It never answers `SECCOMP_USER_NOTIF_FLAG_CONTINUE` (the job could rewrite the address
//! between the check and the kernel's second read), and never connects the job's own
//! stream socket before deciding (another thread of the job could write through it).
//!
//! Not mediated: `sendmsg`/`sendmmsg` (their address sits in a struct the filter cannot
//! read, so every call would need doing on the job's behalf). A datagram sent with
//! `sendmsg` and a `msg_name` still reaches an outside datagram socket (syslog, journald);
//! no stream socket (tmux, ssh, docker, dbus, X11) is reachable that way.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};

use super::sockets::{self, Address, Call, Listener, Rules, Socket, Step, UnixType, Verdict};

/// The longest `struct sockaddr` the kernel accepts.
const MAX_ADDR: usize = std::mem::size_of::<libc::sockaddr_storage>();
/// The most of a datagram read from the job for one `sendto` done on its behalf.
const MAX_DATAGRAM: usize = 1 << 20;
/// Denials recorded per job at most (one line each).
const MAX_DENIALS: usize = 50;
/// IP connects on blocking sockets waiting to complete at most.
const MAX_PENDING: usize = 256;
/// `pidfd_open(PIDFD_THREAD)` (Linux 6.9): a pidfd of the thread that asked.
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;

// ---------------------------------------------------------------------------------------
// Handing the listener over.
//
// The filter is installed in the child, between fork and exec, so the listener is born
// there and must never survive exec (a job holding it could answer its own syscalls).
// std's `spawn` blocks the parent until exec, so the supervisor runs a short-lived thread
// during the spawn: the child writes its pid and the listener's fd number into a pipe and
// waits; the thread takes the descriptor with `pidfd_getfd` and answers one byte; only
// then does the child close its copy and exec. Pipes, not SCM_RIGHTS: a `sendmsg` in the
// child would need an exemption in the job's own filter, and a job could reuse that fd.
// ---------------------------------------------------------------------------------------

/// Both pipes, made before fork. The child keeps the "child" ends; the supervisor takes
/// the others with [`Handoff::take_parent`] before it spawns.
#[derive(Debug)]
pub(crate) struct Handoff {
    report_w: OwnedFd,
    ack_r: OwnedFd,
    parent: Option<ParentEnds>,
    /// The parent ends' numbers: the child closes its inherited copies, so that a parent
    /// that died leaves it reading end of file rather than waiting forever.
    parent_raw: [RawFd; 2],
}

/// The supervisor's side of the handoff.
#[derive(Debug)]
pub struct ParentEnds {
    report_r: OwnedFd,
    ack_w: OwnedFd,
}

impl Handoff {
    pub(crate) fn new() -> io::Result<Handoff> {
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        let (report_r, report_w) = nix::unistd::pipe2(cloexec)?;
        let (ack_r, ack_w) = nix::unistd::pipe2(cloexec)?;
        let parent_raw = [report_r.as_raw_fd(), ack_w.as_raw_fd()];
        Ok(Handoff { report_w, ack_r, parent: Some(ParentEnds { report_r, ack_w }), parent_raw })
    }

    pub(crate) fn take_parent(&mut self) -> Option<ParentEnds> {
        self.parent.take()
    }

    /// In the child: hand `listener` over and wait until the supervisor has it.
    /// Async-signal-safe (close, getpid, write, read).
    pub(crate) fn hand_over(&self, listener: OwnedFd) -> io::Result<()> {
        if self.parent.is_some() {
            // Nobody serves this filter: the job's connects would hang. Do not start.
            return Err(io::Error::other("the socket mediation has no supervisor to serve it"));
        }
        // SAFETY: closing our inherited copies of descriptors only the parent uses.
        unsafe {
            for fd in self.parent_raw {
                libc::close(fd);
            }
        }
        let mut msg = [0u8; 8];
        msg[..4].copy_from_slice(&std::process::id().to_ne_bytes());
        msg[4..].copy_from_slice(&listener.as_raw_fd().to_ne_bytes());
        nix::unistd::write(&self.report_w, &msg)?;
        let mut ack = [0u8; 1];
        let n = nix::unistd::read(self.ack_r.as_fd(), &mut ack)?;
        drop(listener);
        if n == 1 && ack[0] == 1 {
            Ok(())
        } else {
            Err(io::Error::other("the supervisor could not take the socket mediation's listener"))
        }
    }
}

impl ParentEnds {
    /// In a thread of the supervisor while `spawn` runs: take the child's listener. Ends
    /// with an error when the child exits (or fails) before it reports.
    pub fn receive(self) -> io::Result<OwnedFd> {
        let taken = (|| {
            let mut msg = [0u8; 8];
            let mut got = 0;
            while got < msg.len() {
                let n = nix::unistd::read(self.report_r.as_fd(), &mut msg[got..])?;
                if n == 0 {
                    return Err(io::Error::other("the command never reached its sandbox"));
                }
                got += n;
            }
            let pid = i32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]);
            let fd = i32::from_ne_bytes([msg[4], msg[5], msg[6], msg[7]]);
            let pidfd = pidfd_open(pid, 0)?;
            pidfd_getfd(&pidfd, fd)
        })();
        let ack = [u8::from(taken.is_ok())];
        let _ = nix::unistd::write(&self.ack_w, &ack);
        taken
    }
}

fn pidfd_open(pid: i32, flags: libc::c_uint) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) with integer arguments (nix has no wrapper); the fd is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn pidfd_getfd(pidfd: &OwnedFd, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd(2) with integer arguments (nix has no wrapper); the fd is ours.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor (close-on-exec) nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

// ---------------------------------------------------------------------------------------
// Serving notifications.
// ---------------------------------------------------------------------------------------

/// What the supervisor needs to serve one job's notifications.
#[derive(Debug, Clone)]
pub struct Settings {
    pub network: bool,
    /// `sandbox.network = "ask"`: IP connections only to the proxy at `proxy_port`.
    pub proxy_only: bool,
    pub proxy_port: Option<u16>,
    /// `sandbox.allow_unix_sockets`: paths (and `@name` for abstract sockets).
    pub allow_unix_sockets: Vec<PathBuf>,
    /// Where denials are recorded, one JSON line each (`<job dir>/denials.jsonl`).
    pub denials: PathBuf,
}

/// One recorded denial (a line of `denials.jsonl`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Denial {
    pub call: String,
    pub address: String,
    pub reason: String,
}

/// A blocking IP `connect` done on the job's behalf, waiting to complete.
struct Pending {
    id: u64,
    socket: OwnedFd,
}

pub struct Server {
    listener: OwnedFd,
    supervisor: i32,
    settings: Settings,
    denied: usize,
    pending: Vec<Pending>,
    /// Every task of the filter is gone: nothing more will come.
    done: bool,
}

enum Answer {
    Value(i64),
    Errno(i32),
    /// Put `socket` at the job's descriptor `target` (with close-on-exec or not), answer 0.
    Install {
        socket: OwnedFd,
        target: i32,
        cloexec: bool,
    },
    Later(Pending),
    /// Let the kernel carry out the call as asked (only where no decision depends on an
    /// address the job could rewrite meanwhile: `bind`/`listen` of a non-IP socket).
    Continue,
    /// The asking thread is gone (signalled, exited): nothing to answer.
    Gone,
}

impl Server {
    pub fn new(listener: OwnedFd, settings: Settings) -> Server {
        Server {
            listener,
            supervisor: std::process::id() as i32,
            settings,
            denied: 0,
            pending: Vec::new(),
            done: false,
        }
    }

    /// The descriptors to poll: the listener (POLLIN) and pending connects (POLLOUT).
    pub fn poll_fds<'a>(&'a self, out: &mut Vec<PollFd<'a>>) {
        if !self.done {
            out.push(PollFd::new(self.listener.as_fd(), PollFlags::POLLIN));
        }
        for p in &self.pending {
            out.push(PollFd::new(p.socket.as_fd(), PollFlags::POLLOUT));
        }
    }

    /// How long the poll may sleep while connects are pending (a thread that gave up is
    /// only noticed by asking the kernel).
    pub fn poll_timeout(&self) -> Option<Duration> {
        (!self.pending.is_empty()).then_some(Duration::from_millis(100))
    }

    /// After poll: serve what is ready. `revents` is what the descriptors
    /// [`Server::poll_fds`] added reported, in order.
    pub fn serve(&mut self, revents: &[PollFlags]) {
        let mut rest = revents;
        if !self.done {
            if let Some((first, tail)) = revents.split_first() {
                if first.contains(PollFlags::POLLIN) {
                    self.receive_one();
                } else if first.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) {
                    self.done = true;
                }
                rest = tail;
            }
        }
        // The first `rest.len()` pending connects were polled (new ones come after them).
        let listener = self.listener.as_fd();
        let mut keep = Vec::with_capacity(self.pending.len());
        for (k, p) in std::mem::take(&mut self.pending).into_iter().enumerate() {
            if rest.get(k).is_some_and(|flags| !flags.is_empty()) {
                let err = nix::sys::socket::getsockopt(&p.socket, nix::sys::socket::sockopt::SocketError).unwrap_or(0);
                respond(listener, p.id, 0, -err);
            } else if id_valid(listener, p.id) {
                keep.push(p);
            }
        }
        self.pending = keep;
    }

    fn receive_one(&mut self) {
        // SAFETY: the kernel requires a zeroed struct; RECV fills it.
        let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: ioctl on our listener with a pointer to our own struct.
        if unsafe { libc::ioctl(self.listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) } != 0 {
            return;
        }
        let answer = self.decide(&req);
        self.answer(req.id, answer);
    }

    fn answer(&mut self, id: u64, answer: Answer) {
        match answer {
            Answer::Value(v) => respond(self.listener.as_fd(), id, v, 0),
            Answer::Errno(e) => respond(self.listener.as_fd(), id, 0, -e),
            Answer::Install { socket, target, cloexec } => {
                let addfd = libc::seccomp_notif_addfd {
                    id,
                    flags: libc::SECCOMP_ADDFD_FLAG_SETFD as u32,
                    srcfd: socket.as_raw_fd() as u32,
                    newfd: target as u32,
                    newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
                };
                // SAFETY: ioctl on our listener with a pointer to our own struct.
                let r = unsafe { libc::ioctl(self.listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ADDFD, &addfd) };
                if r >= 0 {
                    respond(self.listener.as_fd(), id, 0, 0);
                } else {
                    let e = io::Error::last_os_error().raw_os_error().unwrap_or(libc::EBADF);
                    respond(self.listener.as_fd(), id, 0, -e);
                }
            }
            Answer::Later(p) if self.pending.len() < MAX_PENDING => self.pending.push(p),
            Answer::Later(p) => respond(self.listener.as_fd(), p.id, 0, -libc::EAGAIN),
            Answer::Continue => {
                let resp = libc::seccomp_notif_resp {
                    id,
                    val: 0,
                    error: 0,
                    flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
                };
                // SAFETY: ioctl on our listener with a pointer to our own struct.
                unsafe {
                    libc::ioctl(self.listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &resp);
                }
            }
            Answer::Gone => {}
        }
    }

    fn decide(&mut self, req: &libc::seccomp_notif) -> Answer {
        let tid = req.pid as i32;
        let args = req.data.args;
        if matches!(req.data.nr as libc::c_long, libc::SYS_bind | libc::SYS_listen) {
            return self.decide_listen(req);
        }
        let (call, fd, addr_ptr, addr_len) = match req.data.nr as libc::c_long {
            libc::SYS_connect => (Call::Connect, args[0] as i32, args[1], args[2] as usize),
            libc::SYS_sendto => (Call::SendTo, args[0] as i32, args[4], args[5] as usize),
            // The filter sends nothing else; refuse what we do not know.
            _ => return Answer::Errno(libc::ENOSYS),
        };
        if addr_len > MAX_ADDR || (addr_len as u32) > i32::MAX as u32 {
            return Answer::Errno(libc::EINVAL);
        }
        let Ok(bytes) = read_memory(tid, addr_ptr, addr_len) else { return Answer::Errno(libc::EFAULT) };
        let data = match call {
            Call::SendTo => {
                let len = (args[2] as usize).min(MAX_DATAGRAM);
                match read_memory(tid, args[1], len) {
                    Ok(d) => Some(d),
                    Err(_) => return Answer::Errno(libc::EFAULT),
                }
            }
            Call::Connect => None,
        };
        let pidfd = match pidfd_open(tid, PIDFD_THREAD).or_else(|_| pidfd_open(tid, 0)) {
            Ok(p) => p,
            Err(_) => return Answer::Gone,
        };
        // What was read came from the thread that asked, and it still waits.
        if !id_valid(self.listener.as_fd(), req.id) {
            return Answer::Gone;
        }
        let socket = match pidfd_getfd(&pidfd, fd) {
            Ok(s) => s,
            Err(e) => return Answer::Errno(e.raw_os_error().unwrap_or(libc::EBADF)),
        };
        let kind = match socket_kind(&socket) {
            Ok(k) => k,
            Err(e) => return Answer::Errno(e.raw_os_error().unwrap_or(libc::ENOTSOCK)),
        };
        let Some(address) = sockets::Address::parse(&bytes) else { return Answer::Errno(libc::EINVAL) };
        let rules = Rules {
            network: self.settings.network,
            proxy_only: self.settings.proxy_only,
            proxy_port: self.settings.proxy_port,
        };
        match sockets::first_step(call, kind, &address, rules) {
            Step::Pass => pass(call, req.id, socket, &bytes, data.as_deref(), args[3] as i32),
            Step::Deny(reason) => self.deny(call, &address, reason),
            Step::ProbeLoopback { port } => {
                if super::listeners::served_inside(port, &[self.supervisor]) {
                    pass(call, req.id, socket, &bytes, data.as_deref(), args[3] as i32)
                } else {
                    let reason = format!(
                        "no process of this command listens on loopback port {port}, and {}",
                        sockets::PROXY_ONLY
                    );
                    self.deny(call, &address, reason)
                }
            }
            Step::Probe => {
                let UnixKind(ty) = match kind {
                    Socket::Unix(ty) => UnixKind(ty),
                    _ => return Answer::Errno(libc::EINVAL),
                };
                self.probe(call, tid, fd, socket, ty, &address, data.as_deref(), args[3] as i32)
            }
        }
    }

    /// `bind`/`listen` in `ask` mode (the filter sends them only then): an IP socket listens
    /// on loopback only; a wildcard bind is made a loopback one, a `listen` on an unbound
    /// socket binds it to loopback first (the kernel would pick the wildcard).
    fn decide_listen(&mut self, req: &libc::seccomp_notif) -> Answer {
        let tid = req.pid as i32;
        let args = req.data.args;
        let bind = req.data.nr as libc::c_long == libc::SYS_bind;
        let (addr_ptr, addr_len) = (args[1], args[2] as usize);
        if bind && addr_len > MAX_ADDR {
            return Answer::Errno(libc::EINVAL);
        }
        let bytes = if bind {
            match read_memory(tid, addr_ptr, addr_len) {
                Ok(b) => b,
                Err(_) => return Answer::Errno(libc::EFAULT),
            }
        } else {
            Vec::new()
        };
        let Ok(pidfd) = pidfd_open(tid, PIDFD_THREAD).or_else(|_| pidfd_open(tid, 0)) else { return Answer::Gone };
        if !id_valid(self.listener.as_fd(), req.id) {
            return Answer::Gone;
        }
        let socket = match pidfd_getfd(&pidfd, args[0] as i32) {
            Ok(s) => s,
            Err(e) => return Answer::Errno(e.raw_os_error().unwrap_or(libc::EBADF)),
        };
        if !matches!(socket_kind(&socket), Ok(Socket::Ip)) {
            // A unix socket's path resolves in the job's own view: the kernel binds it.
            return Answer::Continue;
        }
        if !bind {
            // Unbound (port 0): the kernel would bind the wildcard; bind loopback first.
            if let Some(Address::Ip(local)) = local_address(&socket) {
                if local.port() == 0 {
                    let loopback = match local {
                        std::net::SocketAddr::V4(_) => std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0)),
                        std::net::SocketAddr::V6(_) => std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0)),
                    };
                    if let Err(e) = raw_bind(&socket, &sockaddr_bytes(loopback)) {
                        return Answer::Errno(e);
                    }
                }
            }
            // SAFETY: listen(2) on our duplicate of the job's socket.
            let r = unsafe { libc::listen(socket.as_raw_fd(), args[1] as i32) };
            return if r == 0 {
                Answer::Value(0)
            } else {
                Answer::Errno(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL))
            };
        }
        let Some(address) = sockets::Address::parse(&bytes) else { return Answer::Errno(libc::EINVAL) };
        let target = match sockets::bind_step(&address, self.settings.proxy_port) {
            sockets::Bind::Keep => bytes,
            sockets::Bind::Loopback(a) => sockaddr_bytes(a),
            sockets::Bind::Deny(reason) => {
                self.deny_named("bind", &address, reason);
                return Answer::Errno(libc::EACCES);
            }
        };
        match raw_bind(&socket, &target) {
            Ok(()) => Answer::Value(0),
            Err(e) => Answer::Errno(e),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn probe(
        &mut self,
        call: Call,
        tid: i32,
        fd: i32,
        socket: OwnedFd,
        ty: UnixType,
        address: &Address,
        data: Option<&[u8]>,
        flags: i32,
    ) -> Answer {
        if call == Call::Connect && ty != UnixType::Dgram {
            // The kernel's own answers for a socket that cannot connect again.
            if nix::sys::socket::getsockopt(&socket, nix::sys::socket::sockopt::AcceptConn).unwrap_or(false) {
                return Answer::Errno(libc::EINVAL);
            }
            if nix::sys::socket::getpeername::<nix::sys::socket::UnixAddr>(socket.as_raw_fd()).is_ok() {
                return Answer::Errno(libc::EISCONN);
            }
        }
        // The target, named so it cannot be swapped: a pathname socket is pinned with an
        // O_PATH descriptor (resolved in the job's view) and reached through
        // /proc/self/fd/<pin>; an abstract name is what it is.
        let (target, pin) = match address {
            Address::UnixPath(path) => match pin_in_job_view(tid, path) {
                Ok(pin) => (proc_fd_address(pin.as_raw_fd()), Some(pin)),
                Err(e) => return Answer::Errno(e.raw_os_error().unwrap_or(libc::ENOENT)),
            },
            Address::UnixAbstract(name) => (abstract_address(name), None),
            _ => return Answer::Errno(libc::EINVAL),
        };
        let fresh = match fresh_unix_socket(ty) {
            Ok(s) => s,
            Err(e) => return Answer::Errno(e.raw_os_error().unwrap_or(libc::ENOMEM)),
        };
        if let Err(e) = nix::sys::socket::connect(fresh.as_raw_fd(), &target) {
            // ENOENT, ECONNREFUSED, EAGAIN (a full backlog): as the kernel would answer.
            return Answer::Errno(e as i32);
        }
        let listener = match ty {
            UnixType::Stream | UnixType::Seqpacket => self.listener_of(&fresh),
            // A datagram socket has no listener credentials to read.
            UnixType::Dgram => Listener::Outside { pid: None },
        };
        let listed = self.allow_listed(address, pin.as_ref());
        match sockets::judge(listener, listed) {
            Verdict::Deny(reason) => {
                drop(fresh);
                self.deny(call, address, reason)
            }
            Verdict::Allow => match (call, ty) {
                (Call::Connect, UnixType::Stream | UnixType::Seqpacket) => {
                    copy_options(&socket, &fresh);
                    let (cloexec, nonblocking) = fd_flags(tid, fd);
                    if !nonblocking {
                        set_nonblocking(&fresh, false);
                    }
                    Answer::Install { socket: fresh, target: fd, cloexec }
                }
                // A datagram socket keeps its own name and options: connect it (or send
                // from it) to the very inode checked.
                (Call::Connect, UnixType::Dgram) => match nix::sys::socket::connect(socket.as_raw_fd(), &target) {
                    Ok(()) => Answer::Value(0),
                    Err(e) => Answer::Errno(e as i32),
                },
                (Call::SendTo, _) => send_to(&socket, data.unwrap_or_default(), flags, &target),
            },
        }
    }

    /// Who listens on the other end of our fresh connected socket.
    fn listener_of(&self, fresh: &OwnedFd) -> Listener {
        use nix::sys::socket::{getsockopt, sockopt};
        // A pidfd holds the very process that listened: a pid reused since cannot pass.
        if let Ok(pidfd) = getsockopt(fresh, sockopt::PeerPidfd) {
            let Some(pid) = pidfd_pid(&pidfd) else { return Listener::Outside { pid: None } };
            let inside = descends_from(pid, self.supervisor);
            // Still the same process after the check: the pid named it throughout.
            return if inside && !exited(&pidfd) { Listener::Job } else { Listener::Outside { pid: Some(pid) } };
        }
        match getsockopt(fresh, sockopt::PeerCredentials) {
            Ok(cred) if descends_from(cred.pid(), self.supervisor) => Listener::Job,
            Ok(cred) => Listener::Outside { pid: Some(cred.pid()) },
            Err(_) => Listener::Outside { pid: None },
        }
    }

    /// Is the target one of `sandbox.allow_unix_sockets`? A path matches by inode (a
    /// hard link or another name of the same socket matches too), `@name` an abstract name.
    fn allow_listed(&self, address: &Address, pin: Option<&OwnedFd>) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (address, pin) {
            (Address::UnixPath(_), Some(pin)) => {
                let Ok(st) = nix::sys::stat::fstat(pin) else { return false };
                self.settings
                    .allow_unix_sockets
                    .iter()
                    .any(|p| std::fs::metadata(p).is_ok_and(|m| m.dev() == st.st_dev && m.ino() == st.st_ino))
            }
            (Address::UnixAbstract(name), _) => self
                .settings
                .allow_unix_sockets
                .iter()
                .any(|p| p.as_os_str().as_bytes().strip_prefix(b"@").is_some_and(|n| n == name.as_slice())),
            _ => false,
        }
    }

    fn deny(&mut self, call: Call, address: &Address, reason: String) -> Answer {
        let name = match call {
            Call::Connect => "connect",
            Call::SendTo => "sendto",
        };
        self.deny_named(name, address, reason);
        Answer::Errno(libc::EACCES)
    }

    fn deny_named(&mut self, call: &str, address: &Address, reason: String) {
        if self.denied < MAX_DENIALS {
            self.denied += 1;
            record(&self.settings.denials, &Denial { call: call.into(), address: address.describe(), reason });
        }
    }
}

struct UnixKind(UnixType);

/// The file of a job directory where its supervisor records denials.
pub const DENIALS_FILE: &str = "denials.jsonl";

/// For tests and benchmarks that spawn a sandboxed command themselves: take the listener
/// while the spawn runs and serve it in a thread until the command's last task is gone.
/// The calling process counts as the supervisor (the command's listeners are its
/// descendants).
pub fn serve_in_thread(ends: ParentEnds, settings: Settings) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let Ok(listener) = ends.receive() else { return };
        let mut server = Server::new(listener, settings);
        while !server.done {
            let mut fds = Vec::new();
            server.poll_fds(&mut fds);
            let timeout = server
                .poll_timeout()
                .map_or(PollTimeout::NONE, |t| PollTimeout::try_from(t).unwrap_or(PollTimeout::MAX));
            let _ = nix::poll::poll(&mut fds, timeout);
            let ready: Vec<PollFlags> = fds.iter().map(|f| f.revents().unwrap_or(PollFlags::empty())).collect();
            drop(fds);
            server.serve(&ready);
        }
    })
}

/// Append one line to the denials file; created by us, never through a symlink.
pub(crate) fn record(path: &Path, denial: &Denial) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(mut line) = serde_json::to_string(denial) else { return };
    line.push('\n');
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    if let Ok(mut file) = file {
        let _ = file.write_all(line.as_bytes());
    }
}

/// The denials a job's supervisor recorded (at most [`MAX_DENIALS`]).
pub fn read_denials(path: &Path) -> Vec<Denial> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).take(MAX_DENIALS).collect()
}

fn respond(listener: BorrowedFd<'_>, id: u64, val: i64, error: i32) {
    let resp = libc::seccomp_notif_resp { id, val, error, flags: 0 };
    // SAFETY: ioctl on our listener with a pointer to our own struct. ENOENT (the thread
    // gave up meanwhile) needs nothing.
    unsafe {
        libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
}

fn id_valid(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: ioctl on our listener with a pointer to our own u64.
    unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0 }
}

fn read_memory(tid: i32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    use nix::sys::uio::{process_vm_readv, RemoteIoVec};
    let mut buf = vec![0u8; len];
    if len == 0 {
        return Ok(buf);
    }
    let remote = [RemoteIoVec { base: addr as usize, len }];
    let n = process_vm_readv(nix::unistd::Pid::from_raw(tid), &mut [io::IoSliceMut::new(&mut buf)], &remote)?;
    if n != len {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(buf)
}

fn getsockopt_int(fd: &OwnedFd, name: libc::c_int) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into our own int (nix has no SO_DOMAIN option).
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, name, (&mut v as *mut i32).cast(), &mut len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

fn socket_kind(socket: &OwnedFd) -> io::Result<Socket> {
    let domain = getsockopt_int(socket, libc::SO_DOMAIN)?;
    let ty = getsockopt_int(socket, libc::SO_TYPE)?;
    Ok(match domain {
        libc::AF_UNIX => Socket::Unix(match ty {
            libc::SOCK_DGRAM => UnixType::Dgram,
            libc::SOCK_SEQPACKET => UnixType::Seqpacket,
            _ => UnixType::Stream,
        }),
        libc::AF_INET | libc::AF_INET6 => Socket::Ip,
        other => Socket::Other(other),
    })
}

/// The call as the job asked it, on its own socket (a duplicate of the descriptor).
fn pass(call: Call, id: u64, socket: OwnedFd, addr: &[u8], data: Option<&[u8]>, flags: i32) -> Answer {
    let flags_before = nix::fcntl::fcntl(&socket, nix::fcntl::FcntlArg::F_GETFL).unwrap_or(0);
    let blocking = flags_before & libc::O_NONBLOCK == 0;
    match call {
        Call::Connect => {
            // Never block the supervisor: a blocking connect is done non-blocking and
            // answered once it completes (the job's thread waits as it would have).
            if blocking {
                set_nonblocking(&socket, true);
            }
            // SAFETY: connect(2) with the address bytes read from the job.
            let r = unsafe { libc::connect(socket.as_raw_fd(), addr.as_ptr().cast(), addr.len() as libc::socklen_t) };
            let err = io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if blocking {
                set_nonblocking(&socket, false);
            }
            match (r, err) {
                (0, _) => Answer::Value(0),
                (_, libc::EINPROGRESS | libc::EALREADY) if blocking => Answer::Later(Pending { id, socket }),
                (_, e) => Answer::Errno(e),
            }
        }
        Call::SendTo => {
            let data = data.unwrap_or_default();
            // SAFETY: sendto(2) with our own buffers.
            let n = unsafe {
                libc::sendto(
                    socket.as_raw_fd(),
                    data.as_ptr().cast(),
                    data.len(),
                    flags | libc::MSG_DONTWAIT,
                    addr.as_ptr().cast(),
                    addr.len() as libc::socklen_t,
                )
            };
            if n < 0 {
                Answer::Errno(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
            } else {
                Answer::Value(n as i64)
            }
        }
    }
}

fn send_to(socket: &OwnedFd, data: &[u8], flags: i32, target: &nix::sys::socket::UnixAddr) -> Answer {
    use nix::sys::socket::SockaddrLike;
    // SAFETY: sendto(2) with our own buffer and address.
    let n = unsafe {
        libc::sendto(
            socket.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            flags | libc::MSG_DONTWAIT,
            target.as_ptr().cast(),
            target.len(),
        )
    };
    if n < 0 {
        Answer::Errno(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    } else {
        Answer::Value(n as i64)
    }
}

/// `bind(2)` of our duplicate of the job's socket to raw address bytes; the errno on failure.
fn raw_bind(socket: &OwnedFd, addr: &[u8]) -> Result<(), i32> {
    // SAFETY: bind(2) with a buffer we own of the length given.
    let r = unsafe { libc::bind(socket.as_raw_fd(), addr.as_ptr().cast(), addr.len() as libc::socklen_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL))
    }
}

/// The socket's own address (`getsockname`), decoded.
fn local_address(socket: &OwnedFd) -> Option<Address> {
    let mut buf = [0u8; MAX_ADDR];
    let mut len = MAX_ADDR as libc::socklen_t;
    // SAFETY: getsockname(2) into our own buffer of `len` bytes.
    let r = unsafe { libc::getsockname(socket.as_raw_fd(), buf.as_mut_ptr().cast(), &mut len) };
    (r == 0).then(|| Address::parse(&buf[..(len as usize).min(MAX_ADDR)])).flatten()
}

/// A `struct sockaddr_in`/`sockaddr_in6` as the kernel reads it ([`Address::parse`] backwards).
fn sockaddr_bytes(a: std::net::SocketAddr) -> Vec<u8> {
    match a {
        std::net::SocketAddr::V4(v4) => {
            let mut b = (libc::AF_INET as u16).to_ne_bytes().to_vec();
            b.extend_from_slice(&v4.port().to_be_bytes());
            b.extend_from_slice(&v4.ip().octets());
            b.extend_from_slice(&[0u8; 8]);
            b
        }
        std::net::SocketAddr::V6(v6) => {
            let mut b = (libc::AF_INET6 as u16).to_ne_bytes().to_vec();
            b.extend_from_slice(&v6.port().to_be_bytes());
            b.extend_from_slice(&v6.flowinfo().to_be_bytes());
            b.extend_from_slice(&v6.ip().octets());
            b.extend_from_slice(&v6.scope_id().to_ne_bytes());
            b
        }
    }
}

fn set_nonblocking(fd: &OwnedFd, on: bool) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let Ok(flags) = fcntl(fd, FcntlArg::F_GETFL) else { return };
    let mut flags = OFlag::from_bits_truncate(flags);
    flags.set(OFlag::O_NONBLOCK, on);
    let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
}

/// Resolve `path` as the job sees it: an absolute path beneath the job's root, a relative
/// one from its working directory. Returns an O_PATH descriptor of the socket file.
fn pin_in_job_view(tid: i32, path: &[u8]) -> io::Result<OwnedFd> {
    use nix::fcntl::{open, openat2, OFlag, OpenHow, ResolveFlag};
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let absolute = path.first() == Some(&b'/');
    let base = format!("/proc/{tid}/{}", if absolute { "root" } else { "cwd" });
    let dir = open(base.as_str(), dir_flags, nix::sys::stat::Mode::empty())?;
    let resolve = if absolute { ResolveFlag::RESOLVE_IN_ROOT } else { ResolveFlag::RESOLVE_NO_MAGICLINKS };
    let how = OpenHow::new().flags(OFlag::O_PATH | OFlag::O_CLOEXEC).resolve(resolve);
    let rel = if absolute { &path[1..] } else { path };
    let rel = if rel.is_empty() { b".".as_slice() } else { rel };
    let pin = openat2(&dir, std::ffi::OsStr::from_bytes(rel), how)?;
    Ok(pin)
}

fn proc_fd_address(fd: RawFd) -> nix::sys::socket::UnixAddr {
    // A short path: it fits sun_path whatever the socket's own path length.
    nix::sys::socket::UnixAddr::new(format!("/proc/self/fd/{fd}").as_str())
        .unwrap_or_else(|_| nix::sys::socket::UnixAddr::new_unnamed())
}

fn abstract_address(name: &[u8]) -> nix::sys::socket::UnixAddr {
    nix::sys::socket::UnixAddr::new_abstract(name).unwrap_or_else(|_| nix::sys::socket::UnixAddr::new_unnamed())
}

fn fresh_unix_socket(ty: UnixType) -> io::Result<OwnedFd> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    let ty = match ty {
        UnixType::Stream => SockType::Stream,
        UnixType::Seqpacket => SockType::SeqPacket,
        UnixType::Dgram => SockType::Datagram,
    };
    Ok(socket(AddressFamily::Unix, ty, SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK, None)?)
}

/// The options a client may have set before connecting that our socket must keep.
fn copy_options(from: &OwnedFd, to: &OwnedFd) {
    for name in [libc::SO_PASSCRED, libc::SO_SNDBUF, libc::SO_RCVBUF] {
        if let Ok(v) = getsockopt_int(from, name) {
            // SO_SNDBUF/SO_RCVBUF read back doubled; setting half of it restores them.
            let v = if name == libc::SO_PASSCRED { v } else { v / 2 };
            // SAFETY: setsockopt from our own int.
            unsafe {
                libc::setsockopt(
                    to.as_raw_fd(),
                    libc::SOL_SOCKET,
                    name,
                    (&v as *const i32).cast(),
                    std::mem::size_of::<i32>() as libc::socklen_t,
                );
            }
        }
    }
}

/// (close-on-exec, non-blocking) of the job's descriptor, from /proc/<tid>/fdinfo.
fn fd_flags(tid: i32, fd: i32) -> (bool, bool) {
    let text = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")).unwrap_or_default();
    let flags = text
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| i64::from_str_radix(v.trim(), 8).ok())
        .unwrap_or(0);
    (flags & i64::from(libc::O_CLOEXEC) != 0, flags & i64::from(libc::O_NONBLOCK) != 0)
}

/// The pid (in our namespace) of a pidfd's process; None once it has exited.
fn pidfd_pid(pidfd: &OwnedFd) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    let pid: i32 = text.lines().find_map(|l| l.strip_prefix("Pid:"))?.trim().parse().ok()?;
    (pid > 0).then_some(pid)
}

fn exited(pidfd: &OwnedFd) -> bool {
    let mut fd = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: poll(2) on one descriptor we own, without waiting.
    unsafe { libc::poll(&mut fd, 1, 0) != 0 }
}

/// Is `ancestor` a proper ancestor of `pid`? (The supervisor is a child subreaper: every
/// process of the job, orphans included, stays below it.)
pub(crate) fn descends_from(pid: i32, ancestor: i32) -> bool {
    let mut pid = pid;
    for _ in 0..256 {
        if pid <= 1 || pid == ancestor {
            return false;
        }
        let Some(ppid) = parent_of(pid) else { return false };
        if ppid == ancestor {
            return true;
        }
        pid = ppid;
    }
    false
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_are_written_as_they_are_read() {
        for a in ["127.0.0.1:3000", "[::1]:8080", "0.0.0.0:0", "[fe80::1%2]:22"] {
            let a: std::net::SocketAddr = a.parse().unwrap();
            assert_eq!(Address::parse(&sockaddr_bytes(a)), Some(Address::Ip(a)));
        }
    }

    #[test]
    fn a_process_descends_from_its_ancestors_only() {
        let mut child = std::process::Command::new("sleep").arg("3004511").spawn().unwrap();
        let me = std::process::id() as i32;
        let pid = child.id() as i32;
        assert!(descends_from(pid, me));
        assert!(!descends_from(me, pid));
        assert!(!descends_from(me, me));
        assert!(!descends_from(1, me));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
