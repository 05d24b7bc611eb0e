//! Where commands run (DESIGN §4b): `local`, `ssh:<host>` (the system OpenSSH client, one
//! ControlMaster connection per host under TALARIA_HOME) or `docker:<container>` (`docker
//! exec` into a running container). A remote job is still a local supervised job (`talaria
//! __job`): its command is the *transport* (`ssh … host sh -c <script>` or `docker exec -i
//! <container> sh -c <script>`) running `remote.rs`'s script, which starts the real command
//! under `setsid` in a remote job directory (log, exit record, pid, stdin FIFO) and streams its
//! log back. So yield, the jobs pane, leases, `process` actions and re-attach after a restart
//! are the local ones; the remote side only adds a kill of the remote group.
//!
//! Infrastructure failures (host unreachable, refused, timed out, authentication, the
//! connection lost mid-command, docker missing or its daemon down) are *degraded* results,
//! never the command's own failure; the connection is evicted so the next call starts afresh.

pub mod remote;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::config::Config;
use crate::util::lock;

pub use crate::protocol::Backend;

/// The state of a remote backend as the status line shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// Nothing tried yet this session.
    Idle,
    Connected,
    Reconnecting,
    Degraded,
}

impl ConnState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ConnState::Idle => "not connected yet",
            ConnState::Connected => "connected",
            ConnState::Reconnecting => "reconnecting",
            ConnState::Degraded => "degraded",
        }
    }
}

/// An infrastructure failure of a remote backend: the model gets a `degraded` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Degraded {
    pub reason: String,
    pub(crate) retry_hint: String,
}

impl Degraded {
    /// The tool result (`terminal.degraded_mode = "warn"`): `{"status":"degraded",…}`; with
    /// `fail` an ordinary error result.
    /// The tool cell's status: `degraded`, or a plain failure under `degraded_mode = "fail"`.
    pub(crate) fn tool_status(&self, config: &Config) -> crate::protocol::ToolStatus {
        if config.terminal.degraded_mode == crate::config::DegradedMode::Fail {
            crate::protocol::ToolStatus::Failed
        } else {
            crate::protocol::ToolStatus::Degraded
        }
    }

    pub(crate) fn to_value(&self, config: &Config, backend: &Backend) -> Value {
        if config.terminal.degraded_mode == crate::config::DegradedMode::Fail {
            return json!({
                "output": "",
                "exit_code": null,
                "error": format!("backend {backend} failed: {}", self.reason),
            });
        }
        json!({
            "status": "degraded",
            "backend": backend.label(),
            "reason": self.reason,
            "retry_hint": self.retry_hint,
            "exit_code": -1,
            "output": "",
            "error": null,
        })
    }
}

/// A remote job: what `kill` needs to reach its remote group, kept in the local job
/// directory (`remote.json`) so a re-attaching talaria knows it too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RemoteJob {
    pub(crate) backend: Backend,
    /// `terminal.ssh.remote_dir` when the job started (`~/` = the remote home).
    pub(crate) remote_dir: String,
    /// The job's directory name under it (unique per job and talaria home).
    pub(crate) tag: String,
}

/// The session's backend, the connection states and the remote working directories.
/// Shared by the tools (through `JobsHandle`) and the engine (status line, `/backend`).
#[derive(Clone)]
pub struct Backends {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<Config>,
    /// ControlMaster sockets and connection logs: `<TALARIA_HOME>/ssh/`.
    control_dir: PathBuf,
    current: Mutex<Backend>,
    states: Mutex<HashMap<Backend, ConnState>>,
    /// The remote working directory per backend ("" = the remote default, its home).
    cwds: Mutex<HashMap<Backend, String>>,
    /// Bumped on every change the status line shows.
    changed: watch::Sender<u64>,
    /// One connection attempt per backend at a time.
    connecting: tokio::sync::Mutex<()>,
}

impl Backends {
    pub fn new(config: Arc<Config>, control_dir: PathBuf) -> Backends {
        let current = config.terminal.backend.clone();
        let (changed, _) = watch::channel(0);
        Backends {
            inner: Arc::new(Inner {
                config,
                control_dir,
                current: Mutex::new(current),
                states: Mutex::new(HashMap::new()),
                cwds: Mutex::new(HashMap::new()),
                changed,
                connecting: tokio::sync::Mutex::new(()),
            }),
        }
    }

    pub(crate) fn current(&self) -> Backend {
        lock(&self.inner.current).clone()
    }

    pub(crate) fn set_current(&self, backend: Backend) {
        *lock(&self.inner.current) = backend;
        self.bump();
    }

    /// Wakes up when the status line should change.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    fn bump(&self) {
        self.inner.changed.send_modify(|n| *n += 1);
    }

    pub(crate) fn state(&self, backend: &Backend) -> ConnState {
        lock(&self.inner.states).get(backend).copied().unwrap_or(ConnState::Idle)
    }

    fn set_state(&self, backend: &Backend, state: ConnState) {
        let old = lock(&self.inner.states).insert(backend.clone(), state);
        if old != Some(state) {
            self.bump();
        }
    }

    /// `ssh:box connected` for the status line; None when local.
    pub(crate) fn status_label(&self) -> Option<String> {
        let backend = self.current();
        backend.is_remote().then(|| format!("{backend} {}", self.state(&backend).as_str()))
    }

    /// The remote backends this run connected to (for a command or a file tool), by label.
    pub(crate) fn remotes_used(&self) -> Vec<String> {
        let mut used: Vec<String> =
            lock(&self.inner.states).keys().filter(|b| b.is_remote()).map(Backend::label).collect();
        used.sort();
        used
    }

    /// The remote working directory of `backend` ("" until a command set one).
    pub(crate) fn remote_cwd(&self, backend: &Backend) -> String {
        lock(&self.inner.cwds).get(backend).cloned().unwrap_or_default()
    }

    pub(crate) fn set_remote_cwd(&self, backend: &Backend, cwd: &str) {
        lock(&self.inner.cwds).insert(backend.clone(), cwd.to_string());
    }

    /// The ControlMaster socket of an ssh host (short: unix socket paths are limited).
    pub(crate) fn control_path(&self, host: &str) -> PathBuf {
        control_path(&self.inner.control_dir, host)
    }

    /// Make sure `backend` can take a command: an ssh master connection is up (one is
    /// started, within `connect_timeout_s`, when there is none), a container is running.
    /// Runs in the calling tool's task, never in the engine or UI loop.
    pub async fn ensure(&self, backend: &Backend) -> Result<(), Degraded> {
        let result = match backend {
            Backend::Local => return Ok(()),
            Backend::Ssh(host) => self.ensure_ssh(backend, host).await,
            Backend::Docker(container) => self.ensure_docker(backend, container).await,
        };
        match &result {
            Ok(()) => self.set_state(backend, ConnState::Connected),
            Err(_) => self.set_state(backend, ConnState::Degraded),
        }
        result
    }

    /// A call failed on the infrastructure: forget the connection, so the next call
    /// connects from scratch.
    pub async fn evict(&self, backend: &Backend) {
        if let Backend::Ssh(host) = backend {
            let sock = self.control_path(host);
            if sock.exists() {
                let mut cmd = tokio::process::Command::new("ssh");
                cmd.args(ssh_base_args(&self.inner.config, &sock))
                    .args(["-O", "exit", "--", host])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true);
                if let Ok(mut child) = cmd.spawn() {
                    let _ = tokio::time::timeout(Duration::from_secs(3), child.wait()).await;
                }
                let _ = std::fs::remove_file(&sock);
            }
        }
        self.set_state(backend, ConnState::Degraded);
    }

    /// A remote job lost its connection (`up` false: the backend shows `reconnecting`) or
    /// re-attached (the host answers again: `connected`).
    pub(crate) fn job_link(&self, backend: &Backend, up: bool) {
        let now = self.state(backend);
        match (up, now) {
            (false, ConnState::Idle | ConnState::Connected) => self.set_state(backend, ConnState::Reconnecting),
            (true, ConnState::Reconnecting | ConnState::Degraded) => self.set_state(backend, ConnState::Connected),
            _ => {}
        }
    }

    async fn ensure_ssh(&self, backend: &Backend, host: &str) -> Result<(), Degraded> {
        let _one = self.inner.connecting.lock().await;
        let sock = self.control_path(host);
        if sock.exists() && self.state(backend) == ConnState::Connected {
            return Ok(());
        }
        if sock.exists() && self.master_alive(host, &sock).await {
            return Ok(());
        }
        let _ = std::fs::remove_file(&sock);
        self.set_state(backend, ConnState::Reconnecting);
        if let Err(e) = std::fs::create_dir_all(&self.inner.control_dir) {
            return Err(Degraded {
                reason: format!("cannot create {}: {e}", self.inner.control_dir.display()),
                retry_hint: "fix the permissions of TALARIA_HOME".into(),
            });
        }
        restrict(&self.inner.control_dir);
        let cfg = &self.inner.config.terminal.ssh;
        let err_path = sock.with_extension("err");
        let err_file = std::fs::File::create(&err_path).map_err(|e| Degraded {
            reason: format!("cannot write {}: {e}", err_path.display()),
            retry_hint: "fix the permissions of TALARIA_HOME".into(),
        })?;
        let mut cmd = tokio::process::Command::new("ssh");
        cmd.args(ssh_base_args(&self.inner.config, &sock))
            .args(["-o", "ControlMaster=yes"])
            .arg("-o")
            .arg(format!("ControlPersist={}s", cfg.control_persist_s.max(1)))
            .args(["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", "-N", "-f", "--", host])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file)
            .kill_on_drop(true);
        // The master outlives this talaria (so do the jobs that use it) and never gets
        // our terminal's signals.
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Err(Degraded {
                    reason: format!("cannot run ssh: {e}"),
                    retry_hint: "install the OpenSSH client (Debian: apt-get install openssh-client)".into(),
                })
            }
        };
        let limit = Duration::from_secs(cfg.connect_timeout_s) + Duration::from_secs(5);
        let status = match tokio::time::timeout(limit, child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => {
                return Err(Degraded { reason: format!("ssh failed: {e}"), retry_hint: "the next call retries".into() })
            }
            Err(_) => {
                if let Some(pid) = child.id() {
                    crate::engine::process::signal_group(pid as i32, nix::sys::signal::Signal::SIGKILL);
                }
                let _ = child.wait().await;
                return Err(Degraded {
                    reason: format!("connecting to {host} timed out after {}s", limit.as_secs()),
                    retry_hint: retry_hint(host),
                });
            }
        };
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        if status.success() && sock.exists() {
            return Ok(());
        }
        Err(classify_ssh(host, &stderr))
    }

    /// `ssh -O check`: the master answers on its socket.
    async fn master_alive(&self, host: &str, sock: &Path) -> bool {
        let mut cmd = tokio::process::Command::new("ssh");
        cmd.args(ssh_base_args(&self.inner.config, sock))
            .args(["-O", "check", "--", host])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let Ok(mut child) = cmd.spawn() else { return false };
        matches!(tokio::time::timeout(Duration::from_secs(5), child.wait()).await, Ok(Ok(s)) if s.success())
    }

    async fn ensure_docker(&self, backend: &Backend, container: &str) -> Result<(), Degraded> {
        if self.state(backend) != ConnState::Connected {
            self.set_state(backend, ConnState::Reconnecting);
        }
        let docker = self.inner.config.terminal.docker.command.clone();
        let mut cmd = tokio::process::Command::new(&docker);
        cmd.args(["inspect", "--format", "{{.State.Running}}", "--", container])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return Err(docker_missing(&docker, &e)),
        };
        let limit = Duration::from_secs(self.inner.config.terminal.ssh.connect_timeout_s);
        let out = match tokio::time::timeout(limit, child.wait_with_output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(docker_missing(&docker, &e)),
            Err(_) => {
                return Err(Degraded {
                    reason: format!("{docker} did not answer within {}s (is its daemon hung?)", limit.as_secs()),
                    retry_hint: "check the container engine (`docker info`); the next call retries".into(),
                })
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && stdout.trim() == "true" {
            return Ok(());
        }
        if out.status.success() {
            return Err(Degraded {
                reason: format!("container {container} is not running"),
                retry_hint: format!("start it (`{docker} start {container}`); the next call retries"),
            });
        }
        Err(classify_docker(&docker, container, &String::from_utf8_lossy(&out.stderr)))
    }

    /// argv of the transport that runs `script` (a POSIX sh script) on `backend`.
    pub fn transport_argv(&self, backend: &Backend, script: &str) -> Vec<String> {
        transport_argv(&self.inner.config, &self.inner.control_dir, backend, script)
    }

    /// Run a short script on `backend` over the transport and collect its output
    /// (file tools, kill). Err = degraded (the transport itself failed).
    pub(crate) async fn run_script(
        &self,
        backend: &Backend,
        script: &str,
        stdin: Option<Vec<u8>>,
        limit: Duration,
    ) -> Result<ScriptOutput, Degraded> {
        self.ensure(backend).await?;
        let argv = self.transport_argv(backend, &remote::marked(script));
        // The transport (ssh's SendEnv, a docker client) gets no secret either (DESIGN §6);
        // ssh keeps the agent socket to log in, as a remote job's does.
        let drop: Vec<String> = crate::engine::sandbox::env::EnvFilter::from_config(&self.inner.config)
            .dropped_here()
            .into_iter()
            .filter(|v| v != "SSH_AUTH_SOCK")
            .collect();
        let result = run_argv(&argv, stdin, &drop, limit).await;
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                let degraded = match backend {
                    Backend::Docker(_) => docker_missing(&self.inner.config.terminal.docker.command, &e),
                    _ => Degraded {
                        reason: format!("cannot run ssh: {e}"),
                        retry_hint: "install the OpenSSH client".into(),
                    },
                };
                self.evict(backend).await;
                return Err(degraded);
            }
        };
        let Some(out) = out else {
            self.evict(backend).await;
            return Err(Degraded {
                reason: format!("{backend} did not answer within {}s", limit.as_secs()),
                retry_hint: "the connection was dropped; the next call reconnects".into(),
            });
        };
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        match remote::markers(&stderr) {
            remote::Markers { started: true, end: Some(code), .. } => {
                Ok(ScriptOutput { code, stdout: out.stdout, stderr: remote::strip_markers(&stderr) })
            }
            _ => {
                let degraded = self.classify(backend, &stderr, out.status.code());
                self.evict(backend).await;
                Err(degraded)
            }
        }
    }

    /// Why the transport failed, from its stderr.
    pub(crate) fn classify(&self, backend: &Backend, stderr: &str, code: Option<i32>) -> Degraded {
        match backend {
            Backend::Ssh(host) => {
                let markers = remote::markers(stderr);
                if markers.started {
                    Degraded {
                        reason: format!(
                            "the connection to {host} was lost while the command ran (it may still be running there)"
                        ),
                        retry_hint: format!(
                            "{} Check with process(action='list') or run the command again.",
                            retry_hint(host)
                        ),
                    }
                } else {
                    classify_ssh(host, stderr)
                }
            }
            Backend::Docker(c) => {
                let docker = &self.inner.config.terminal.docker.command;
                if code == Some(127) && stderr.trim().is_empty() {
                    return Degraded {
                        reason: format!("{docker} was not found"),
                        retry_hint: "install docker or podman, or set terminal.docker.command".into(),
                    };
                }
                classify_docker(docker, c, stderr)
            }
            Backend::Local => Degraded { reason: stderr.trim().to_string(), retry_hint: String::new() },
        }
    }
}

/// What a short remote script printed.
#[derive(Debug, Clone)]
pub(crate) struct ScriptOutput {
    pub(crate) code: i32,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: String,
}

/// Run argv with a time limit; Ok(None) = timed out (killed).
async fn run_argv(
    argv: &[String],
    stdin: Option<Vec<u8>>,
    drop_env: &[String],
    limit: Duration,
) -> std::io::Result<Option<std::process::Output>> {
    use tokio::io::AsyncWriteExt;
    let (program, args) = argv.split_first().ok_or_else(|| std::io::Error::other("empty command"))?;
    let mut cmd = tokio::process::Command::new(program);
    for var in drop_env {
        cmd.env_remove(var);
    }
    cmd.args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        tokio::spawn(async move {
            let _ = pipe.write_all(&data).await;
            let _ = pipe.shutdown().await;
        });
    }
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(out) => out.map(Some),
        Err(_) => Ok(None),
    }
}

/// `-F`, BatchMode, the connect timeout, the user's extra options and the control socket.
pub(crate) fn ssh_base_args(config: &Config, sock: &Path) -> Vec<String> {
    let cfg = &config.terminal.ssh;
    let mut args = Vec::new();
    if !cfg.config_file.trim().is_empty() {
        args.push("-F".to_string());
        args.push(cfg.config_file.clone());
    }
    args.extend(["-o".into(), "BatchMode=yes".into()]);
    args.push("-o".into());
    args.push(format!("ConnectTimeout={}", cfg.connect_timeout_s.max(1)));
    for opt in &cfg.options {
        args.push("-o".into());
        args.push(opt.clone());
    }
    args.push("-o".into());
    args.push(format!("ControlPath={}", sock.display()));
    args
}

pub(crate) fn control_path(control_dir: &Path, host: &str) -> PathBuf {
    control_dir.join(format!("{:016x}.sock", fnv1a(host.as_bytes())))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// argv that runs `script` with `sh -c` on `backend` (ssh over the master connection when
/// there is one; docker exec with stdin attached).
pub(crate) fn transport_argv(config: &Config, control_dir: &Path, backend: &Backend, script: &str) -> Vec<String> {
    match backend {
        Backend::Local => vec!["sh".into(), "-c".into(), script.into()],
        Backend::Ssh(host) => {
            let sock = control_path(control_dir, host);
            let mut argv = vec!["ssh".to_string()];
            argv.extend(ssh_base_args(config, &sock));
            argv.extend(["-o".into(), "ControlMaster=no".into(), "-T".into(), "--".into(), host.clone()]);
            // ssh hands the remote login shell one string: quote the script for it.
            argv.push(format!("sh -c {}", crate::engine::process::sh_quote(script)));
            argv
        }
        Backend::Docker(container) => vec![
            config.terminal.docker.command.clone(),
            "exec".into(),
            "-i".into(),
            container.clone(),
            "sh".into(),
            "-c".into(),
            script.into(),
        ],
    }
}

fn restrict(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
}

fn retry_hint(host: &str) -> String {
    format!("The connection to {host} was evicted; the next call reconnects from scratch and works again once the host is reachable.")
}

/// Why ssh could not connect, from its stderr (exit 255).
pub(crate) fn classify_ssh(host: &str, stderr: &str) -> Degraded {
    let text = remote::strip_markers(stderr);
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    let what = if has(&["Connection refused"]) {
        format!("connection to {host} refused (is sshd running there, on that port?)")
    } else if has(&["timed out", "Connection timed out"]) {
        format!("connecting to {host} timed out")
    } else if has(&["Could not resolve hostname", "Name or service not known", "nodename nor servname"]) {
        format!("cannot resolve the host name {host}")
    } else if has(&["No route to host", "Network is unreachable", "Host is unreachable"]) {
        format!("{host} is unreachable")
    } else if has(&["Permission denied", "Too many authentication failures", "Authentication failed"]) {
        format!("authentication to {host} failed (talaria never prompts: BatchMode=yes; check your key and agent)")
    } else if has(&["Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED"]) {
        format!("the host key of {host} could not be verified (add it to known_hosts first)")
    } else if has(&["Connection closed", "Connection reset", "closed by remote host", "Broken pipe", "mux_client"]) {
        format!("the connection to {host} was closed")
    } else {
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        format!("ssh to {host} failed: {}", last.trim())
    };
    Degraded { reason: what, retry_hint: retry_hint(host) }
}

fn docker_missing(docker: &str, e: &std::io::Error) -> Degraded {
    let reason = if e.kind() == std::io::ErrorKind::NotFound {
        format!("{docker} was not found")
    } else if e.kind() == std::io::ErrorKind::PermissionDenied {
        format!("{docker} is not executable")
    } else {
        format!("cannot run {docker}: {e}")
    };
    Degraded {
        reason,
        retry_hint: "install docker or podman, or set terminal.docker.command; the next call retries".into(),
    }
}

/// Why a `docker` command failed, from its stderr.
pub(crate) fn classify_docker(docker: &str, container: &str, stderr: &str) -> Degraded {
    let text = remote::strip_markers(stderr);
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    let (reason, hint) = if has(&[
        "Cannot connect to the Docker daemon",
        "Is the docker daemon running",
        "error during connect",
        "docker.sock",
        "Cannot connect to Podman",
    ]) {
        (
            format!("the {docker} daemon is not reachable"),
            "start the daemon (e.g. `systemctl start docker`); the next call retries".to_string(),
        )
    } else if has(&["No such container", "no such container", "No such object"]) {
        (format!("no container named {container}"), format!("start one (`{docker} run -d --name {container} …`)"))
    } else if has(&["is not running", "is paused"]) {
        (
            format!("container {container} is not running"),
            format!("`{docker} start {container}`; the next call retries"),
        )
    } else {
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        (format!("{docker} exec into {container} failed: {}", last.trim()), "the next call retries".to_string())
    };
    Degraded { reason, retry_hint: hint }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_failures_are_classified() {
        let r = classify_ssh("box", "ssh: connect to host 127.0.0.1 port 1: Connection refused\r\n");
        assert!(r.reason.contains("refused"), "{r:?}");
        let r = classify_ssh("box", "ssh: connect to host 10.255.255.1 port 22: Connection timed out");
        assert!(r.reason.contains("timed out"), "{r:?}");
        let r = classify_ssh("box", "ssh: Could not resolve hostname nope.invalid: Name or service not known");
        assert!(r.reason.contains("resolve"), "{r:?}");
        let r = classify_ssh("box", "root@127.0.0.1: Permission denied (publickey).");
        assert!(r.reason.contains("authentication"), "{r:?}");
        assert!(r.retry_hint.contains("next call"));
    }

    #[test]
    fn docker_failures_are_classified() {
        let r = classify_docker(
            "docker",
            "ci",
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
        );
        assert!(r.reason.contains("daemon"), "{r:?}");
        let r = classify_docker("docker", "ci", "Error: No such container: ci");
        assert!(r.reason.contains("no container"), "{r:?}");
    }

    #[test]
    fn degraded_result_shape() {
        let d = Degraded { reason: "r".into(), retry_hint: "h".into() };
        let mut config = Config::default();
        let v = d.to_value(&config, &Backend::Ssh("box".into()));
        assert_eq!(v["status"], "degraded");
        assert_eq!(v["exit_code"], -1);
        assert_eq!(v["reason"], "r");
        assert_eq!(v["retry_hint"], "h");
        config.terminal.degraded_mode = crate::config::DegradedMode::Fail;
        let v = d.to_value(&config, &Backend::Ssh("box".into()));
        assert!(v.get("status").is_none());
        assert!(v["error"].as_str().unwrap().contains("r"));
    }
}
