//! Where a sandboxed socket may reach (DESIGN §6a): the pure decision the job's supervisor
//! asks for every mediated `connect` and addressed `sendto`. No I/O here: the supervisor
//! brings the facts (the address read once from the job, the kind of the job's socket, who
//! listens at the address) and carries out the answer ([`super::notify`]).
//!
//! Two steps, because who listens can only be learnt by connecting: [`first_step`] says
//! whether the call may pass as asked (an IP socket with the network on), must be probed
//! (a unix address: the supervisor connects a fresh socket of its own and reads the
//! listener's credentials), or is refused outright; [`judge`] decides on what the probe
//! found. A proxy rule (#31, `network = "ask"`) is one more [`Step`].

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The syscall being mediated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Connect,
    /// `sendto` with an address (a datagram reaches a socket without `connect`).
    SendTo,
}

/// The job's socket, as the supervisor found it (`SO_DOMAIN`, `SO_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Socket {
    Unix(UnixType),
    Ip,
    /// Any other family (netlink, vsock, packet, ...): only exists with the network on.
    Other(i32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnixType {
    Stream,
    Seqpacket,
    Dgram,
}

/// The address the job named, decoded from the bytes read from its memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Address {
    /// A pathname socket, the path as the job wrote it (relative to its cwd or absolute).
    UnixPath(Vec<u8>),
    /// An abstract socket's name (without the leading NUL).
    UnixAbstract(Vec<u8>),
    /// `sizeof(sa_family_t)` alone: names no socket.
    UnixUnnamed,
    Ip(SocketAddr),
    /// AF_UNSPEC: dissolves a datagram socket's association.
    Unspec,
    Other(u16),
}

impl Address {
    /// Decode a `struct sockaddr` of `bytes.len()` bytes; None when it is too short to hold
    /// what its family says (the kernel answers EINVAL).
    pub(crate) fn parse(bytes: &[u8]) -> Option<Address> {
        let family = u16::from_ne_bytes([*bytes.first()?, *bytes.get(1)?]);
        let rest = &bytes[2..];
        match i32::from(family) {
            libc::AF_UNIX => Some(match rest.first() {
                None => Address::UnixUnnamed,
                Some(0) => Address::UnixAbstract(rest[1..].to_vec()),
                Some(_) => {
                    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    Address::UnixPath(rest[..end].to_vec())
                }
            }),
            libc::AF_INET if rest.len() >= 6 => {
                let port = u16::from_be_bytes([rest[0], rest[1]]);
                let ip = Ipv4Addr::new(rest[2], rest[3], rest[4], rest[5]);
                Some(Address::Ip(SocketAddr::V4(SocketAddrV4::new(ip, port))))
            }
            libc::AF_INET6 if rest.len() >= 26 => {
                let port = u16::from_be_bytes([rest[0], rest[1]]);
                let mut ip = [0u8; 16];
                ip.copy_from_slice(&rest[6..22]);
                let scope = u32::from_ne_bytes([rest[22], rest[23], rest[24], rest[25]]);
                Some(Address::Ip(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, scope))))
            }
            libc::AF_INET | libc::AF_INET6 => None,
            libc::AF_UNSPEC => Some(Address::Unspec),
            _ => Some(Address::Other(family)),
        }
    }

    /// How a denial names the address (control characters escaped: this is data).
    pub(crate) fn describe(&self) -> String {
        let text = |b: &[u8]| String::from_utf8_lossy(b).escape_debug().to_string();
        match self {
            Address::UnixPath(p) => format!("unix socket {}", text(p)),
            Address::UnixAbstract(n) => format!("abstract unix socket @{}", text(n)),
            Address::UnixUnnamed => "an unnamed unix socket".into(),
            Address::Ip(a) => a.to_string(),
            Address::Unspec => "AF_UNSPEC".into(),
            Address::Other(f) => format!("an address of family {f}"),
        }
    }
}

/// What the policy is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rules {
    pub(crate) network: bool,
    /// `sandbox.network = "ask"`: IP connections only to the proxy (DESIGN §6b).
    pub(crate) proxy_only: bool,
    /// The session's proxy on 127.0.0.1, when one runs.
    pub(crate) proxy_port: Option<u16>,
}

/// Why an IP connection is refused in `ask` mode (the tool result carries it).
pub(crate) const PROXY_ONLY: &str = "commands reach the network only through talaria's proxy (HTTP_PROXY, \
     HTTPS_PROXY and ALL_PROXY in their environment), which asks for each new host";

/// What the supervisor does first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Perform the call on (a duplicate of) the job's own socket, exactly as asked: an IP
    /// socket with the network on, or an address that names no socket (the kernel's own
    /// answer, EINVAL or a disconnect, is the result).
    Pass,
    /// A unix address: learn who listens there with a socket of the supervisor's own.
    Probe,
    /// An IP connection to loopback in `ask` mode: allowed when a process of this job
    /// listens on the port ([`super::listeners`]).
    ProbeLoopback {
        port: u16,
    },
    Deny(String),
}

fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

pub(crate) fn first_step(call: Call, socket: Socket, address: &Address, rules: Rules) -> Step {
    match (socket, address) {
        (Socket::Ip | Socket::Other(_), _) if !rules.network => Step::Deny("the network is off for commands".into()),
        (Socket::Ip, Address::Ip(a)) if rules.proxy_only => {
            if is_loopback(a.ip()) && rules.proxy_port == Some(a.port()) {
                Step::Pass
            } else if is_loopback(a.ip()) {
                Step::ProbeLoopback { port: a.port() }
            } else {
                Step::Deny(PROXY_ONLY.into())
            }
        }
        (Socket::Other(_), _) if rules.proxy_only => Step::Deny(PROXY_ONLY.into()),
        // An IP socket can only reach IP addresses (the kernel checks the family).
        (Socket::Ip | Socket::Other(_), _) => Step::Pass,
        // A connected stream ignores nothing: the kernel refuses an address on send
        // (EISCONN / EOPNOTSUPP), and a seqpacket socket sends to its (mediated) peer.
        (Socket::Unix(UnixType::Stream | UnixType::Seqpacket), _) if call == Call::SendTo => Step::Pass,
        (Socket::Unix(_), Address::UnixPath(_) | Address::UnixAbstract(_)) => Step::Probe,
        // Names no socket, or a family a unix socket cannot use: the kernel refuses it.
        (Socket::Unix(_), _) => Step::Pass,
    }
}

/// Where an IP socket of a job may listen in `ask` mode: on loopback only, or anyone who
/// can reach the machine could connect in and take the workspace away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bind {
    /// Bind as asked.
    Keep,
    /// A wildcard address becomes loopback of the same family (a dev server on `0.0.0.0`
    /// still answers `localhost`).
    Loopback(SocketAddr),
    Deny(String),
}

/// Where a job's `bind` of an IP socket goes (`network = "ask"`). The proxy's own port is
/// never the job's: while talaria restarts a dead proxy on it, a job that took it would
/// receive the other jobs' requests and their proxy credentials.
pub(crate) fn bind_step(address: &Address, proxy_port: Option<u16>) -> Bind {
    if let (Address::Ip(a), Some(port)) = (address, proxy_port) {
        if a.port() == port {
            return Bind::Deny(format!("port {port} is talaria's network proxy"));
        }
    }
    match address {
        Address::Ip(a) if is_loopback(a.ip()) => Bind::Keep,
        Address::Ip(SocketAddr::V4(a)) if a.ip().is_unspecified() => {
            Bind::Loopback(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, a.port())))
        }
        Address::Ip(SocketAddr::V6(a)) if a.ip().is_unspecified() => {
            Bind::Loopback(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, a.port(), 0, 0)))
        }
        Address::Ip(a) => Bind::Deny(format!(
            "commands listen only on loopback while the network goes through talaria's proxy, not on {}",
            a.ip()
        )),
        // The kernel answers the rest (EINVAL, EAFNOSUPPORT).
        _ => Bind::Keep,
    }
}

/// Who listens at a unix address, as the probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listener {
    /// A process of this job (a descendant of its supervisor).
    Job,
    /// Anyone else; the pid when the kernel told it (not for datagram sockets).
    Outside { pid: Option<i32> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allow,
    Deny(String),
}

/// The second step: a socket made inside the job's own sandbox, or one the user listed in
/// `sandbox.allow_unix_sockets`, may be reached; nothing else.
pub(crate) fn judge(listener: Listener, allow_listed: bool) -> Verdict {
    match (listener, allow_listed) {
        (Listener::Job, _) | (_, true) => Verdict::Allow,
        (Listener::Outside { pid: Some(pid) }, false) => Verdict::Deny(format!(
            "its listener (pid {pid}) is not a process of this command, and it is not in sandbox.allow_unix_sockets"
        )),
        (Listener::Outside { pid: None }, false) => Verdict::Deny(
            "it was not made by a process of this command, and it is not in sandbox.allow_unix_sockets".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn unix_path(p: &str) -> Vec<u8> {
        let mut b = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        b.extend_from_slice(p.as_bytes());
        b.push(0);
        b
    }

    #[test]
    fn addresses_decode_as_the_kernel_reads_them() {
        let mut abstract_ = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        abstract_.extend_from_slice(b"\0x11-display\0tail");
        let mut inet = (libc::AF_INET as u16).to_ne_bytes().to_vec();
        inet.extend_from_slice(&[0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        let mut inet6 = (libc::AF_INET6 as u16).to_ne_bytes().to_vec();
        inet6.extend_from_slice(&[0, 53, 0, 0, 0, 0]);
        inet6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        inet6.extend_from_slice(&[0, 0, 0, 0]);
        let rows: Vec<(Vec<u8>, Option<Address>)> = vec![
            (unix_path("/tmp/tmux-0/default"), Some(Address::UnixPath(b"/tmp/tmux-0/default".to_vec()))),
            (unix_path("rel.sock"), Some(Address::UnixPath(b"rel.sock".to_vec()))),
            // The abstract name is every byte the length covers, NULs included.
            (abstract_, Some(Address::UnixAbstract(b"x11-display\0tail".to_vec()))),
            ((libc::AF_UNIX as u16).to_ne_bytes().to_vec(), Some(Address::UnixUnnamed)),
            (inet, Some(Address::Ip("127.0.0.1:8080".parse().unwrap()))),
            (inet6, Some(Address::Ip("[::1]:53".parse().unwrap()))),
            ((libc::AF_INET as u16).to_ne_bytes().to_vec(), None),
            ((libc::AF_UNSPEC as u16).to_ne_bytes().to_vec(), Some(Address::Unspec)),
            ((libc::AF_VSOCK as u16).to_ne_bytes().to_vec(), Some(Address::Other(libc::AF_VSOCK as u16))),
            (vec![1], None),
        ];
        for (bytes, want) in rows {
            assert_eq!(Address::parse(&bytes), want, "{bytes:?}");
        }
        assert_eq!(Address::UnixPath(b"/tmp/a\nb".to_vec()).describe(), "unix socket /tmp/a\\nb");
    }

    #[test]
    fn the_first_step_probes_unix_addresses_and_passes_ip_only_with_the_network() {
        use Call::*;
        use Socket::*;
        use UnixType::*;
        let on = Rules { network: true, proxy_only: false, proxy_port: None };
        let off = Rules { network: false, proxy_only: false, proxy_port: None };
        let path = Address::UnixPath(b"/tmp/x".to_vec());
        let abs = Address::UnixAbstract(b"x".to_vec());
        let ip = Address::Ip("10.0.0.1:22".parse().unwrap());
        let off_msg = Step::Deny("the network is off for commands".into());
        #[rustfmt::skip]
        let rows = [
            (Connect, Unix(Stream), &path, on, Step::Probe),
            (Connect, Unix(Stream), &path, off, Step::Probe),
            (Connect, Unix(Seqpacket), &abs, off, Step::Probe),
            (Connect, Unix(Dgram), &path, on, Step::Probe),
            (SendTo, Unix(Dgram), &path, on, Step::Probe),
            (SendTo, Unix(Dgram), &abs, off, Step::Probe),
            (SendTo, Unix(Stream), &path, on, Step::Pass),
            (SendTo, Unix(Seqpacket), &path, on, Step::Pass),
            (Connect, Unix(Dgram), &Address::Unspec, on, Step::Pass),
            (Connect, Unix(Stream), &Address::UnixUnnamed, on, Step::Pass),
            (Connect, Unix(Stream), &ip, on, Step::Pass),
            (Connect, Ip, &ip, on, Step::Pass),
            (SendTo, Ip, &ip, on, Step::Pass),
            (Connect, Ip, &path, on, Step::Pass),
            (Connect, Other(libc::AF_NETLINK), &Address::Other(16), on, Step::Pass),
            (Connect, Ip, &ip, off, off_msg.clone()),
            (SendTo, Ip, &ip, off, off_msg.clone()),
            (Connect, Other(libc::AF_VSOCK), &Address::Other(40), off, off_msg.clone()),
        ];
        for (call, socket, address, rules, want) in rows {
            assert_eq!(first_step(call, socket, address, rules), want, "{call:?} {socket:?} {address:?} {rules:?}");
        }
    }

    #[test]
    fn in_ask_mode_a_listener_is_kept_on_loopback() {
        let ip = |s: &str| Address::Ip(s.parse().unwrap());
        assert_eq!(bind_step(&ip("127.0.0.1:3000"), None), Bind::Keep);
        assert_eq!(bind_step(&ip("[::1]:3000"), None), Bind::Keep);
        assert_eq!(bind_step(&ip("0.0.0.0:8000"), None), Bind::Loopback("127.0.0.1:8000".parse().unwrap()));
        assert_eq!(bind_step(&ip("[::]:0"), None), Bind::Loopback("[::1]:0".parse().unwrap()));
        assert!(matches!(bind_step(&ip("192.168.1.5:22"), None), Bind::Deny(_)));
        assert_eq!(bind_step(&Address::Unspec, None), Bind::Keep);
        // The proxy's port is not the job's, on any address; other ports are.
        assert!(matches!(bind_step(&ip("127.0.0.1:8899"), Some(8899)), Bind::Deny(r) if r.contains("proxy")));
        assert!(matches!(bind_step(&ip("0.0.0.0:8899"), Some(8899)), Bind::Deny(_)));
        assert_eq!(bind_step(&ip("127.0.0.1:3000"), Some(8899)), Bind::Keep);
    }

    #[test]
    fn in_ask_mode_ip_reaches_only_the_proxy_and_loopback_is_probed() {
        use Call::*;
        use Socket::*;
        let ask = Rules { network: true, proxy_only: true, proxy_port: Some(4321) };
        let none = Rules { proxy_port: None, ..ask };
        let ip = |s: &str| Address::Ip(s.parse().unwrap());
        let deny = Step::Deny(PROXY_ONLY.into());
        #[rustfmt::skip]
        let rows = [
            (Connect, Ip, ip("127.0.0.1:4321"), ask, Step::Pass),
            (Connect, Ip, ip("[::ffff:127.0.0.1]:4321"), ask, Step::Pass),
            (SendTo, Ip, ip("127.0.0.1:4321"), ask, Step::Pass),
            (Connect, Ip, ip("127.0.0.1:4321"), none, Step::ProbeLoopback { port: 4321 }),
            (Connect, Ip, ip("127.0.0.1:3000"), ask, Step::ProbeLoopback { port: 3000 }),
            (Connect, Ip, ip("[::1]:3000"), ask, Step::ProbeLoopback { port: 3000 }),
            (Connect, Ip, ip("10.0.0.1:4321"), ask, deny.clone()),
            (Connect, Ip, ip("8.8.8.8:53"), ask, deny.clone()),
            (SendTo, Ip, ip("1.1.1.1:53"), ask, deny.clone()),
            (Connect, Ip, Address::Unspec, ask, Step::Pass),
            (Connect, Other(libc::AF_NETLINK), Address::Other(16), ask, deny.clone()),
            (Connect, Unix(UnixType::Stream), Address::UnixPath(b"/x".to_vec()), ask, Step::Probe),
        ];
        for (call, socket, address, rules, want) in rows {
            assert_eq!(first_step(call, socket, &address, rules), want, "{call:?} {socket:?} {address:?} {rules:?}");
        }
    }

    #[test]
    fn only_the_jobs_own_listeners_and_listed_sockets_are_reached() {
        let rows = [
            (Listener::Job, false, true),
            (Listener::Job, true, true),
            (Listener::Outside { pid: Some(1) }, true, true),
            (Listener::Outside { pid: None }, true, true),
            (Listener::Outside { pid: Some(4242) }, false, false),
            (Listener::Outside { pid: None }, false, false),
        ];
        for (listener, listed, allowed) in rows {
            let verdict = judge(listener, listed);
            assert_eq!(verdict == Verdict::Allow, allowed, "{listener:?} listed={listed}: {verdict:?}");
        }
        assert_eq!(
            judge(Listener::Outside { pid: Some(4242) }, false),
            Verdict::Deny(
                "its listener (pid 4242) is not a process of this command, and it is not in sandbox.allow_unix_sockets"
                    .into()
            )
        );
    }
}
