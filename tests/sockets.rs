//! The sandbox's side doors (DESIGN §6a, issue #27): sockets, other processes, capabilities,
//! limits. Each command is the model's `terminal` call in the real binary (`talaria exec`,
//! default config unless a test says otherwise, no `--yes`) with a fake HOME, TMPDIR and
//! TALARIA_HOME outside every writable root. What a command must not reach is a real server
//! started by the test outside talaria; what it must still do runs inside one job.
//! Run as root and as an unprivileged user (`setpriv`, see README "Safety").

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{stderr, Home};
use serde_json::Value;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

/// A Python every user can run (pyenv's lives under /root, which `nobody` cannot enter).
const PYTHON: &str = "/usr/bin/python3";

/// A fake home (with a file to lose) and temp dir, outside every writable root.
struct Fake {
    _dir: tempfile::TempDir,
    home: PathBuf,
    tmp: PathBuf,
}

impl Fake {
    fn new() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(home.join("important.txt"), "keep me").unwrap();
        Fake { _dir: dir, home, tmp }
    }

    fn intact(&self) -> bool {
        std::fs::read_to_string(self.home.join("important.txt")).is_ok_and(|t| t == "keep me")
    }
}

fn need(tool: &str, install: &str) {
    let found = std::process::Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output();
    assert!(found.is_ok_and(|o| o.status.success()), "this test needs {tool}: {install}");
}

/// Run `command` as the model's one `terminal` call; the tool result the model got.
async fn run(home: &Home, fake: &Fake, command: &str, flags: &[&str], env: &[(&str, &str)]) -> Value {
    let args = serde_json::json!({ "command": command, "timeout": 60 }).to_string();
    let server =
        ScriptedServer::start([ScriptedResponse::tool_call("c1", "terminal", &args), ScriptedResponse::text("done")])
            .await
            .unwrap();
    let mut cmd = home.command();
    cmd.env("HOME", &fake.home).env("TMPDIR", &fake.tmp).arg("exec").args(flags).args([
        "--base-url",
        &server.base_url(),
        "go",
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{command}: {}", stderr(&out));
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 2, "talaria went on after the command: {}", stderr(&out));
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    let content = messages.last().and_then(|m| m["content"].as_str()).unwrap_or_default().to_string();
    serde_json::from_str(&content).unwrap_or_else(|e| panic!("not a tool result ({e}): {content}"))
}

fn output(result: &Value) -> String {
    result["output"].as_str().unwrap_or_default().to_string()
}

/// A listener outside talaria (started by the test) that records every byte it receives.
struct Listener {
    child: std::process::Child,
    log: PathBuf,
}

impl Listener {
    /// `address`: a path, or `@name` for an abstract socket.
    async fn start(address: &str, log: &Path) -> Listener {
        let script = r#"
import socket, sys, threading
addr, log = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + addr[1:] if addr.startswith("@") else addr)
s.listen(16)
open(log + ".ready", "w").close()
def serve(c):
    while True:
        b = c.recv(4096)
        if not b:
            return
        with open(log, "ab") as f:
            f.write(b)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;
        let child = std::process::Command::new(PYTHON).args(["-c", script, address]).arg(log).spawn().unwrap();
        let ready = PathBuf::from(format!("{}.ready", log.display()));
        common::wait_until("the listener is up", || ready.exists()).await;
        Listener { child, log: log.to_path_buf() }
    }

    fn received(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client that connects to `address` and sends a marker; prints what happened.
fn client(address: &str, marker: &str) -> String {
    let target = match address.strip_prefix('@') {
        Some(name) => format!("'\\0{name}'"),
        None => format!("'{address}'"),
    };
    format!(
        "{PYTHON} -c \"import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({target}); s.sendall(b'{marker}'); print('CONNECTED')\nexcept OSError as e:\n    print('refused', e.errno, e.strerror)\""
    )
}

/// tmux runs what any client asks: `run-shell 'rm -rf ~'` through `-S <socket>`, and
/// `send-keys` to the socket `$TMUX` names (talaria started inside tmux). Neither reaches
/// the server; the result says the sandbox stopped it and how to go on. The same command
/// approved outside the sandbox does reach it: the door is real.
#[tokio::test(flavor = "multi_thread")]
async fn a_tmux_server_outside_is_not_reached() {
    need("tmux", "apt-get install tmux");
    let home = Home::new();
    let fake = Fake::new();
    let sock = fake.tmp.join("tmux-3004701.sock");
    let s = sock.display().to_string();
    let started = std::process::Command::new("tmux")
        .args(["-S", &s, "-f", "/dev/null", "new-session", "-d", "-s", "t3004701", "sh"])
        .env("HOME", &fake.home)
        // tmux runs the command with the user's login shell: nobody's is nologin, which
        // exits at once and takes the server with it.
        .env("SHELL", "/bin/sh")
        .status()
        .unwrap();
    assert!(started.success());
    let up = std::process::Command::new("tmux").args(["-S", &s, "has-session", "-t", "t3004701"]).status();
    assert!(
        up.is_ok_and(|st| st.success()),
        "tmux cannot keep a server running as this user here (outside any sandbox)"
    );
    // Stopped whatever the test's outcome.
    struct KillServer(String);
    impl Drop for KillServer {
        fn drop(&mut self) {
            let _ = std::process::Command::new("tmux").args(["-S", &self.0, "kill-server"]).status();
        }
    }
    let _server = KillServer(s.clone());
    let tmux_env = format!("{s},1,0");
    let result = run(&home, &fake, &format!("tmux -S {s} run-shell 'rm -rf ~'"), &[], &[]).await;
    assert_ne!(result["exit_code"], 0, "{result}");
    let note = result["sandbox"].as_str().unwrap_or_default();
    assert!(
        note.contains(&s) && note.contains("sandbox.allow_unix_sockets") && note.contains("sandbox=false"),
        "{result}"
    );
    let keys = run(&home, &fake, "tmux send-keys -t t3004701 'rm -rf ~' Enter", &[], &[("TMUX", &tmux_env)]).await;
    assert_ne!(keys["exit_code"], 0, "{keys}");
    assert!(fake.intact(), "the home was deleted");
    // The control: approved to run outside the sandbox, the same door opens.
    let probe = fake.home.join("reached");
    let outside = serde_json::json!({ "command": format!("tmux -S {s} run-shell 'touch {}'", probe.display()), "sandbox": false });
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("c1", "terminal", &outside.to_string()),
        ScriptedResponse::text("done"),
    ])
    .await
    .unwrap();
    let mut cmd = home.command();
    cmd.env("HOME", &fake.home).env("TMPDIR", &fake.tmp).args([
        "exec",
        "--yes",
        "--base-url",
        &server.base_url(),
        "go",
    ]);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    common::wait_until("the server ran the approved command", || probe.exists()).await;
}

/// Abstract sockets (X11, dbus), talaria's own ssh ControlMaster directory and the temp
/// dir: a listener outside talaria gets no byte from a command.
#[tokio::test(flavor = "multi_thread")]
async fn listeners_outside_the_sandbox_get_no_byte() {
    let home = Home::new();
    let fake = Fake::new();
    let control_dir = home.path().join("ssh");
    std::fs::create_dir_all(&control_dir).unwrap();
    let logs = tempfile::tempdir().unwrap();
    let abstract_name = format!("@talaria-test-{}", std::process::id());
    let addresses = [
        abstract_name.clone(),
        control_dir.join("0123456789abcdef.sock").display().to_string(),
        fake.tmp.join("agent.3004702").display().to_string(),
    ];
    for (i, address) in addresses.iter().enumerate() {
        let listener = Listener::start(address, &logs.path().join(format!("l{i}"))).await;
        let result = run(&home, &fake, &client(address, "MARKER-3004702"), &[], &[]).await;
        let out = output(&result);
        assert!(out.contains("refused 13"), "{address}: {result}");
        assert!(listener.received().is_empty(), "{address} received {:?}", listener.received());
        let note = result["sandbox"].as_str().unwrap_or_default();
        assert!(note.contains("stopped a connection"), "{address}: {result}");
    }
}

/// Inside one job, what the job made itself works: a Python unix-socket server and its
/// client, `multiprocessing.Manager`, a pty, git.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_job_makes_itself_still_works() {
    let home = Home::new();
    let fake = Fake::new();
    let server = r#"
import os, socket, subprocess, sys
path = os.path.abspath("s.sock")
srv = socket.socket(socket.AF_UNIX)
srv.bind(path); srv.listen(1)
client = subprocess.Popen([sys.executable, "-c", "import socket,sys; c=socket.socket(socket.AF_UNIX); c.connect(sys.argv[1]); c.sendall(b'ping'); print(c.recv(4).decode())", "s.sock"])
conn, _ = srv.accept()
assert conn.recv(4) == b"ping"; conn.sendall(b"pong")
client.wait()
a, b = socket.socketpair(); a.sendall(b"pair"); print(b.recv(4).decode())
"#;
    std::fs::write(home.work().join("server.py"), server).unwrap();
    let manager = "import multiprocessing\nif __name__ == '__main__':\n    with multiprocessing.Manager() as m:\n        d = m.dict(); d['k'] = 'managed'; print(d['k'])\n";
    std::fs::write(home.work().join("manager.py"), manager).unwrap();
    let commands = format!(
        "{PYTHON} server.py && {PYTHON} manager.py && {PYTHON} -c 'import pty; pty.spawn([\"echo\", \"in-a-pty\"])' && \
         export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t && \
         git init -q repo && cd repo && echo a > a && git add a && git commit -qm one && echo b >> a && \
         git stash -q && git stash list | wc -l"
    );
    let result = run(&home, &fake, &commands, &[], &[]).await;
    let out = output(&result);
    assert_eq!(result["exit_code"], 0, "{result}");
    for want in ["pong", "pair", "managed", "in-a-pty"] {
        assert!(out.contains(want), "{want}: {result}");
    }
    assert!(out.trim_end().ends_with('1'), "one stash: {result}");
    assert!(result.get("sandbox").is_none(), "nothing was stopped: {result}");
}

/// `cargo build --offline` of a small crate with no dependencies, inside the sandbox.
#[tokio::test(flavor = "multi_thread")]
async fn a_local_cargo_build_works() {
    let sysroot = std::process::Command::new("rustc").args(["--print", "sysroot"]).output();
    let sysroot = match sysroot {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => panic!("this test needs a Rust toolchain this user can run (rustup: https://rustup.rs)"),
    };
    let cargo = format!("{sysroot}/bin/cargo");
    assert!(Path::new(&cargo).exists(), "this test needs cargo readable by this user at {cargo}");
    let home = Home::new();
    let fake = Fake::new();
    let krate = home.work().join("small");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::write(krate.join("Cargo.toml"), "[package]\nname = \"small\"\nversion = \"0.1.0\"\nedition = \"2021\"\n")
        .unwrap();
    std::fs::write(krate.join("src/main.rs"), "fn main() { println!(\"built-3004703\"); }\n").unwrap();
    let command = format!("cd small && CARGO_HOME=$PWD/.cargo-home RUSTC={sysroot}/bin/rustc {cargo} run --offline -q");
    let result = run(&home, &fake, &command, &[], &[]).await;
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(output(&result).contains("built-3004703"), "{result}");
}

/// A job cannot change talaria's limits or priority (`prlimit --fsize=0:0` once killed it),
/// nor trace it, read its memory or take its descriptors; talaria lives on.
#[tokio::test(flavor = "multi_thread")]
async fn other_processes_limits_and_priorities_are_out_of_reach() {
    need("prlimit", "apt-get install util-linux");
    let home = Home::new();
    let fake = Fake::new();
    let probe = r#"
import ctypes, os, sys
t = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
print("ptrace", libc.ptrace(16, t, 0, 0), ctypes.get_errno())
pidfd = libc.syscall(434, t, 0)
print("pidfd_getfd", libc.syscall(438, pidfd, 0, 0), ctypes.get_errno())
try:
    open(f"/proc/{t}/mem", "wb"); print("mem OPEN")
except OSError as e:
    print("mem", e.errno)
print("own-nice", os.nice(1))
"#;
    std::fs::write(home.work().join("probe.py"), probe).unwrap();
    // The job's shell's parent is its supervisor, whose parent is talaria.
    let command = format!(
        "T=$(awk '{{print $4}}' /proc/$PPID/stat); echo talaria=$T; \
         prlimit --pid $T --fsize=0:0; echo prlimit-rc=$?; \
         renice -n 10 -p $T; echo renice-rc=$?; \
         prlimit --pid $T --fsize --noheadings --raw; \
         awk '{{print \"nice=\" $19}}' /proc/$T/stat; \
         {PYTHON} probe.py $T; prlimit --fsize=1000:1000 true; echo own-rc=$?"
    );
    let result = run(&home, &fake, &command, &[], &[]).await;
    let out = output(&result);
    for want in ["prlimit-rc=1", "renice-rc=1", "nice=0", "ptrace -1 1", "pidfd_getfd -1 1", "own-nice 1", "own-rc=0"] {
        assert!(out.contains(want), "{want}: {result}");
    }
    // Refused by Landlock (EACCES), or first by the read-only view (EROFS).
    assert!(out.contains("mem 13") || out.contains("mem 30"), "mem: {result}");
    assert!(out.contains("unlimited"), "talaria's file size limit is untouched: {result}");
}

/// As root a job keeps no capability: CapEff, CapPrm, CapBnd and CapAmb are 0 (as an
/// unprivileged user they are 0 anyway); setuid root binaries give none back.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_has_no_capability() {
    let home = Home::new();
    let fake = Fake::new();
    let result =
        run(&home, &fake, "grep ^Cap /proc/self/status; hostname x3004704; echo hostname-rc=$?", &[], &[]).await;
    let out = output(&result);
    let value = |cap: &str| {
        let line = out.lines().find(|l| l.starts_with(&format!("{cap}:")));
        line.and_then(|l| l.split_whitespace().nth(1)).unwrap_or_default().to_string()
    };
    let mut caps = vec!["CapEff", "CapPrm", "CapAmb"];
    if nix_is_root() {
        caps.push("CapBnd");
    }
    for cap in caps {
        assert_eq!(value(cap), "0000000000000000", "{cap}: {result}");
    }
    assert!(!out.contains("hostname-rc=0"), "{result}");
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .is_some_and(|u| u.split_whitespace().next() == Some("0"))
}

/// `network = false`: no socket of any family but AF_UNIX (VSOCK, NETLINK, UDP, TCP).
#[tokio::test(flavor = "multi_thread")]
async fn with_the_network_off_only_unix_sockets_open() {
    let home = Home::new();
    let fake = Fake::new();
    home.write_config("[sandbox]\nnetwork = false\n");
    let probe = "import socket\nfor name, fam, kind in [('vsock', 40, socket.SOCK_STREAM), ('netlink', socket.AF_NETLINK, socket.SOCK_RAW), ('udp', socket.AF_INET, socket.SOCK_DGRAM), ('tcp', socket.AF_INET6, socket.SOCK_STREAM), ('packet', 17, socket.SOCK_RAW)]:\n    try:\n        socket.socket(fam, kind); print(name, 'OPEN')\n    except OSError as e:\n        print(name, 'refused', e.errno)\nsocket.socketpair(); print('unix ok')\n";
    std::fs::write(home.work().join("net.py"), probe).unwrap();
    let result = run(&home, &fake, &format!("{PYTHON} net.py"), &[], &[]).await;
    let out = output(&result);
    for name in ["vsock", "netlink", "udp", "tcp", "packet"] {
        assert!(out.contains(&format!("{name} refused 13")), "{name}: {result}");
    }
    assert!(out.contains("unix ok") && !out.contains("OPEN"), "{result}");
}

/// A fork bomb no shell word gives away stops at the default `sandbox.limits.processes`;
/// talaria and the machine go on (the next command runs).
#[tokio::test(flavor = "multi_thread")]
async fn a_disguised_fork_bomb_is_stopped() {
    let home = Home::new();
    let fake = Fake::new();
    let bomb = "perl -e '$|=1; $n=0; while (1) { my $p = fork; if (!defined $p) { print \"fork-failed $!\\n\" unless $n++; sleep 1; } } '";
    let args = serde_json::json!({ "command": bomb, "timeout": 8 }).to_string();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("c1", "terminal", &args),
        ScriptedResponse::tool_call("c2", "terminal", r#"{"command":"echo alive-3004705"}"#),
        ScriptedResponse::text("done"),
    ])
    .await
    .unwrap();
    let mut cmd = home.command();
    cmd.env("HOME", &fake.home).env("TMPDIR", &fake.tmp).args(["exec", "--base-url", &server.base_url(), "go"]);
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = server.chat_requests();
    let result = |i: usize| -> String {
        requests[i].body["messages"].as_array().unwrap().last().unwrap()["content"].to_string()
    };
    assert!(result(1).contains("fork-failed"), "the limit held: {}", result(1));
    assert!(result(2).contains("alive-3004705"), "{}", result(2));
}
