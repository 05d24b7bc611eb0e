//! A real OpenSSH server on loopback for one test (DESIGN §4b, §10): its own host key,
//! config, authorized key and a free port, all under a temporary directory; a client config
//! for `ssh -F` with its own key and known_hosts. Nothing touches `~/.ssh` or the machine's
//! ssh setup. A missing `sshd` fails the test loudly with the install command.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The alias the client config defines.
pub const HOST: &str = "talaria-test";

pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Option<Child>,
}

fn sshd_binary() -> PathBuf {
    for p in ["/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd"] {
        if Path::new(p).is_file() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "sshd not found: the SSH backend tests need a real OpenSSH server. Install it with \
         `apt-get install -y openssh-server` (Debian/Ubuntu; `scripts/test` does this)"
    );
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

impl Sshd {
    pub fn start() -> Sshd {
        Sshd::start_with("")
    }

    /// With extra `sshd_config` lines (e.g. `SetEnv SHLVL=1`, so the remote bash skips the
    /// user's ~/.bashrc that Debian's bash sources for ssh commands).
    pub fn start_with(extra_config: &str) -> Sshd {
        let bin = sshd_binary();
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for key in ["host_key", "client_key"] {
            run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", ""]).arg("-f").arg(d.join(key)));
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).expect("authorized_keys");
        // Privilege separation wants this directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let port = free_port();
        let user = String::from_utf8(Command::new("id").arg("-un").output().expect("id").stdout).expect("utf8");
        let user = user.trim();
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
                 AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nUsePAM no\nPermitRootLogin yes\n\
                 LogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n{extra_config}\n",
                d = d.display()
            ),
        )
        .expect("sshd_config");
        let host_pub = std::fs::read_to_string(d.join("host_key.pub")).expect("host key");
        let host_pub: Vec<&str> = host_pub.split_whitespace().take(2).collect();
        std::fs::write(d.join("known_hosts"), format!("[127.0.0.1]:{port} {}\n", host_pub.join(" ")))
            .expect("known_hosts");
        std::fs::write(
            d.join("client_config"),
            format!(
                "Host {HOST}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {d}/client_key\n\
                 \x20 IdentitiesOnly yes\n  IdentityAgent none\n  UserKnownHostsFile {d}/known_hosts\n\
                 \x20 GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n",
                d = d.display()
            ),
        )
        .expect("client_config");
        std::fs::create_dir_all(d.join("remote-jobs")).expect("remote dir");
        let mut sshd = Sshd { dir, port, child: None };
        sshd.launch(&bin);
        sshd
    }

    fn launch(&mut self, bin: &Path) {
        let d = self.dir.path();
        let log = std::fs::File::create(d.join("sshd.log")).expect("sshd.log");
        let child = Command::new(bin)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sshd");
        self.child = Some(child);
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("sshd exited ({status}): {}", std::fs::read_to_string(d.join("sshd.log")).unwrap_or_default());
            }
            assert!(start.elapsed() < Duration::from_secs(30), "sshd did not listen on {} within 30 s", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop the server and every session it serves (so master connections die too): the
    /// listener and its per-connection `sshd` processes, as when a host's sshd dies or its
    /// network goes. What those sessions started (remote jobs under `setsid`) runs on.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let pid = child.id() as i32;
        for p in descendants(pid).into_iter().filter(|p| is_sshd(*p)) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            assert!(start.elapsed() < Duration::from_secs(30), "sshd still listening");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Start it again on the same port with the same keys.
    pub fn restart(&mut self) {
        self.launch(&sshd_binary());
    }

    pub fn client_config(&self) -> PathBuf {
        self.dir.path().join("client_config")
    }

    pub fn remote_dir(&self) -> PathBuf {
        self.dir.path().join("remote-jobs")
    }

    /// Talaria's config for this server: backend, `-F`, the remote job directory.
    pub fn talaria_config(&self, connect_timeout_s: u64) -> String {
        format!(
            "[terminal]\nbackend = \"ssh:{HOST}\"\n\n[terminal.ssh]\nconfig_file = \"{}\"\nremote_dir = \"{}\"\n\
             connect_timeout_s = {connect_timeout_s}\n\n[approvals]\nmode = \"off\"\n",
            self.client_config().display(),
            self.remote_dir().display()
        )
    }

    /// Run `command` on the server with the test's own ssh client (not talaria's).
    pub fn ssh(&self, command: &str) -> std::process::Output {
        Command::new("ssh")
            .arg("-F")
            .arg(self.client_config())
            .args(["-o", "BatchMode=yes", "-o", "ControlMaster=no", "-o", "ControlPath=none", HOST, command])
            .stdin(Stdio::null())
            .output()
            .expect("run ssh")
    }

    /// Processes on the server whose command line matches `pattern` (`pgrep -f`, run over ssh).
    pub fn pgrep(&self, pattern: &str) -> Vec<String> {
        let out = self.ssh(&format!("pgrep -f '{pattern}' || true"));
        assert!(out.status.success(), "ssh pgrep failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The process is an sshd (the listener's children: per-connection servers).
fn is_sshd(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sshd")
}

/// Every descendant of `pid` (children first found through /proc).
fn descendants(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        let Ok(entries) = std::fs::read_dir("/proc") else { break };
        for entry in entries.flatten() {
            let Some(p) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else { continue };
            let ppid: i32 = after.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
            if ppid == parent {
                found.push(p);
                frontier.push(p);
            }
        }
    }
    found
}
