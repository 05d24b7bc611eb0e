//! Who serves a loopback port (DESIGN §6b): a job reaches a server a process of its own
//! sandbox started (a dev server and `curl localhost:3000`), never the user's own
//! services. Read from /proc: the listening TCP sockets on the port, then whether a
//! process below one of the given supervisors holds one of them.

use std::collections::HashSet;

/// Inodes of TCP sockets in LISTEN on `port`, bound to a loopback or wildcard address.
fn listening_inodes(port: u16) -> HashSet<u64> {
    let mut out = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else { continue };
            let Some((addr, p)) = local.split_once(':') else { continue };
            if *state != "0A" || u16::from_str_radix(p, 16).ok() != Some(port) || !loopback_or_any(addr) {
                continue;
            }
            if let Ok(inode) = inode.parse() {
                out.insert(inode);
            }
        }
    }
    out
}

/// A /proc/net address (hex, 32-bit words in host order): 0.0.0.0, 127/8, ::, ::1 or
/// ::ffff:127.x.
fn loopback_or_any(hex: &str) -> bool {
    let word = |i: usize| hex.get(i * 8..i * 8 + 8).and_then(|w| u32::from_str_radix(w, 16).ok());
    match hex.len() {
        8 => word(0).is_some_and(|w| {
            let ip = std::net::Ipv4Addr::from(u32::from_be(w));
            ip.is_unspecified() || ip.is_loopback()
        }),
        32 => {
            let Some(words) = (0..4).map(word).collect::<Option<Vec<u32>>>() else { return false };
            let mut bytes = [0u8; 16];
            for (i, w) in words.iter().enumerate() {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            let ip = std::net::Ipv6Addr::from(bytes);
            ip.is_unspecified() || ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        _ => false,
    }
}

/// Does a process below one of `supervisors` listen on loopback `port`?
pub(crate) fn served_inside(port: u16, supervisors: &[i32]) -> bool {
    if supervisors.is_empty() {
        return false;
    }
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return false;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if !supervisors.iter().any(|&s| super::notify::descends_from(pid, s)) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else { continue };
            let target = target.to_string_lossy();
            let inode = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')).and_then(|t| t.parse().ok());
            if inode.is_some_and(|i: u64| inodes.contains(&i)) {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_served_inside_only_by_a_descendant() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // Held by this test process: not below a child of ours.
        let me = std::process::id() as i32;
        assert!(!served_inside(port, &[me]));
        let mut child = std::process::Command::new("python3")
            .args(["-c", "import socket,sys,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen()\nprint(s.getsockname()[1],flush=True)\ntime.sleep(3004512)"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        let child_port: u16 = line.trim().parse().unwrap();
        assert!(served_inside(child_port, &[me]));
        assert!(!served_inside(child_port, &[]));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(loopback_or_any("0100007F") && loopback_or_any("00000000") && !loopback_or_any("0101A8C0"));
    }
}
