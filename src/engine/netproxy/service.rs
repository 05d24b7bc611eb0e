//! `talaria __netproxy`: the session's proxy in a process of its own (DESIGN §6b), so that
//! jobs kept running after talaria quits keep their network. Talaria starts it for the
//! session, or takes over the one still running for it (`talaria -c`), and drives it over
//! a unix socket in its state directory, which no sandboxed job can reach: it registers
//! each job's credential, says when a job ends, and answers the questions. While no talaria
//! is attached, what would ask is refused with the labelled 403 (no one to ask); what the
//! config or an answer "this session" allows still passes. The process ends once no
//! talaria is attached and the last job that may use it has ended (its supervisor is gone).
//! A process that dies while talaria is attached is replaced by talaria ([`super::client`]):
//! the new one is told the old one's port, jobs and the session's answers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::{Answer, Connection, Gate, Grant, NetProxy, Question, Report, Settings};
use crate::util::lock;

/// The first argument that makes the binary this process.
pub const ARG: &str = "__netproxy";

/// How often ended jobs are looked for (their credentials revoked) and the end is checked.
const SWEEP: Duration = Duration::from_millis(500);
/// How long a new process waits for the talaria that started it.
const FIRST_ATTACH: Duration = Duration::from_secs(30);

/// Why a question is refused while no talaria is attached.
pub(crate) const NO_ONE_TO_ASK: &str = "no one to ask: talaria is not running (the job was kept running after it \
                                        quit); list the host in sandbox.network_allow, or resume the session \
                                        (talaria -c) so that it can ask";

/// What talaria writes to the new process's stdin.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Spec {
    pub(crate) socket: PathBuf,
    pub(crate) settings: Settings,
    /// Where it logs (talaria's own log files).
    pub(crate) logs_dir: Option<PathBuf>,
    /// The port to listen on if it is free: the port of the session's proxy that died, which
    /// its running jobs' supervisors let them reach (None: any free port).
    #[serde(default)]
    pub(crate) port: Option<u16>,
}

/// The line the process prints once it listens.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Ready {
    pub(crate) port: u16,
    pub(crate) pid: u32,
}

/// Talaria → the proxy, one JSON object a line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum ToProxy {
    /// Sent first: the config's lists (they may have changed since the process started).
    Hello {
        settings: Settings,
        /// What the user allowed for the session through an earlier proxy process.
        #[serde(default)]
        remembered: Remembered,
        /// The jobs the session's earlier proxy process let in: they keep their credentials.
        #[serde(default)]
        grants: Vec<Grant>,
    },
    Register {
        seq: u64,
        id: String,
        command: String,
        denials: Option<PathBuf>,
    },
    Started {
        id: String,
        supervisor: i32,
        supervisor_start: u64,
    },
    Ended {
        id: String,
    },
    Answer {
        question: u64,
        answer: Answer,
    },
}

/// The proxy → talaria.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum FromProxy {
    /// The answer to `Hello`: the port, and the connections so far (kept jobs' too).
    Welcome {
        port: u16,
        pid: u32,
        connections: Vec<(u64, Connection)>,
        /// The jobs that may use it (a talaria that takes it over can hand them to a new
        /// process should this one die).
        #[serde(default)]
        jobs: Vec<Grant>,
    },
    Registered {
        seq: u64,
        url: String,
    },
    Question {
        id: u64,
        question: Question,
    },
    Report {
        report: Report,
    },
}

/// Hosts answered "this session" (or "always"): `hosts` by name, `local` to reach this machine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Remembered {
    pub(crate) hosts: Vec<String>,
    pub(crate) local: Vec<String>,
}

/// The socket of a session's proxy under `dir`.
pub(crate) fn socket_path(dir: &Path, session: &str) -> PathBuf {
    dir.join(format!("{session}.sock"))
}

/// The gate of the process: the attached talaria, or no one.
#[derive(Default)]
struct Controller {
    /// The attached talaria's writer, and which attachment it is.
    current: Mutex<Option<(u64, mpsc::UnboundedSender<FromProxy>)>>,
    attachments: AtomicU64,
    questions: AtomicU64,
    pending: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
}

impl Controller {
    /// A new talaria takes over (an earlier one's open questions are refused).
    fn attach(&self, tx: mpsc::UnboundedSender<FromProxy>) -> u64 {
        let n = self.attachments.fetch_add(1, Ordering::SeqCst) + 1;
        *lock(&self.current) = Some((n, tx));
        lock(&self.pending).clear();
        n
    }

    fn detach(&self, n: u64) {
        let mut current = lock(&self.current);
        if current.as_ref().is_some_and(|(m, _)| *m == n) {
            *current = None;
            // Dropping the senders refuses what waits.
            lock(&self.pending).clear();
        }
    }

    fn attached(&self) -> bool {
        lock(&self.current).is_some()
    }

    fn send(&self, msg: FromProxy) {
        if let Some((_, tx)) = lock(&self.current).as_ref() {
            let _ = tx.send(msg);
        }
    }

    fn answer(&self, id: u64, answer: Answer) {
        if let Some(tx) = lock(&self.pending).remove(&id) {
            let _ = tx.send(answer);
        }
    }
}

#[async_trait::async_trait]
impl Gate for Controller {
    async fn ask(&self, question: Question) -> Answer {
        let id = self.questions.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        let sent = {
            let current = lock(&self.current);
            match current.as_ref() {
                Some((_, writer)) => {
                    lock(&self.pending).insert(id, tx);
                    writer.send(FromProxy::Question { id, question }).is_ok()
                }
                None => false,
            }
        };
        if !sent {
            lock(&self.pending).remove(&id);
            return Answer::Deny(NO_ONE_TO_ASK.into());
        }
        rx.await.unwrap_or_else(|_| Answer::Deny("talaria quit before the question was answered".into()))
    }
}

/// The body of `talaria __netproxy`. Never returns.
pub fn run() -> ! {
    let code = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => {
            let result = rt.block_on(serve());
            // The socket is gone already: exit now, without waiting for blocking lookups.
            rt.shutdown_background();
            match result {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("talaria network proxy: {e}");
                    1
                }
            }
        }
        Err(_) => 1,
    };
    std::process::exit(code)
}

async fn serve() -> std::io::Result<()> {
    use std::io::Read;
    let mut text = String::new();
    std::io::stdin().take(1 << 20).read_to_string(&mut text)?;
    let spec: Spec = serde_json::from_str(&text).map_err(std::io::Error::other)?;
    let _log = spec.logs_dir.as_deref().and_then(|dir| crate::logging::init(dir).ok());
    let _ = std::fs::remove_file(&spec.socket);
    let listener = tokio::net::UnixListener::bind(&spec.socket)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&spec.socket, std::fs::Permissions::from_mode(0o600))?;
    }
    let controller = Arc::new(Controller::default());
    let (reports, mut report_rx) = mpsc::unbounded_channel();
    let proxy = NetProxy::start_on(spec.port, spec.settings, controller.clone(), Some(reports)).await?;
    let ready = serde_json::to_string(&Ready { port: proxy.port(), pid: std::process::id() })?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{ready}")?;
        out.flush()?;
    }
    // Nothing more goes to talaria's pipe: it may be gone long before this process.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 of a descriptor we own onto stdout.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
    let mut sweep = tokio::time::interval_at(tokio::time::Instant::now() + SWEEP, SWEEP);
    let started = std::time::Instant::now();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(control(stream, proxy.clone(), controller.clone()));
                }
            }
            Some(report) = report_rx.recv() => controller.send(FromProxy::Report { report }),
            _ = sweep.tick() => {
                let attached = controller.attached();
                // The talaria that started it has a moment to attach first.
                let waited = controller.attachments.load(Ordering::SeqCst) > 0 || started.elapsed() > FIRST_ATTACH;
                if proxy.sweep(!attached) == 0 && !attached && waited {
                    break;
                }
            }
        }
    }
    // Gone from the socket first: a talaria that looks now starts a proxy of its own.
    let _ = std::fs::remove_file(&spec.socket);
    tracing::info!("no talaria attached and no job left: the network proxy ends");
    Ok(())
}

/// One attached talaria.
async fn control(stream: tokio::net::UnixStream, proxy: NetProxy, controller: Arc<Controller>) {
    let (read, mut write) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<FromProxy>();
    let writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            let Ok(mut line) = serde_json::to_vec(&msg) else { continue };
            line.push(b'\n');
            if write.write_all(&line).await.is_err() {
                return;
            }
        }
    });
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut attachment = None;
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(msg) = serde_json::from_str::<ToProxy>(&line) else { continue };
        match msg {
            ToProxy::Hello { settings, remembered, grants } => {
                proxy.set_settings(settings);
                proxy.remember(&remembered.hosts, &remembered.local);
                for grant in grants {
                    proxy.grant(grant);
                }
                let connections = proxy.numbered_connections();
                let (port, pid, jobs) = (proxy.port(), std::process::id(), proxy.grants());
                let _ = tx.send(FromProxy::Welcome { port, pid, connections, jobs });
                attachment = Some(controller.attach(tx.clone()));
            }
            ToProxy::Register { seq, id, command, denials } => {
                let url = proxy.register_job(&id, &command, denials);
                let _ = tx.send(FromProxy::Registered { seq, url });
            }
            ToProxy::Started { id, supervisor, supervisor_start } => {
                proxy.job_started(&id, supervisor, supervisor_start)
            }
            ToProxy::Ended { id } => proxy.job_ended(&id),
            ToProxy::Answer { question, answer } => controller.answer(question, answer),
        }
    }
    if let Some(n) = attachment {
        controller.detach(n);
    }
    drop(tx);
    let _ = writer.await;
}
