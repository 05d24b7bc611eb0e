//! Talaria's side of the session's proxy process ([`super::service`]): start it, or take
//! over the one that still runs for the session (its kept jobs use it), then register
//! jobs, say when they end, answer its questions through the approval modal, and mirror its
//! connections for `/network` and `exec --json`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::service::{self, FromProxy, Ready, Spec, ToProxy};
use super::{Connection, Gate, Report, Settings, MAX_LOG};
use crate::engine::EventSink;
use crate::protocol::{Event, NoticeLevel};
use crate::util::lock;

/// How long the process may take to listen, and to answer the first message.
const START_WAIT: Duration = Duration::from_secs(10);
const REGISTER_WAIT: Duration = Duration::from_secs(10);

/// The session's proxy as talaria drives it; cheap to clone.
#[derive(Clone)]
pub(crate) struct ProxyClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ProxyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyClient").field("port", &self.inner.port).field("pid", &self.inner.pid).finish()
    }
}

struct Inner {
    port: u16,
    pid: u32,
    tx: mpsc::UnboundedSender<ToProxy>,
    seq: AtomicU64,
    shared: Arc<Shared>,
}

/// What the reading task fills in.
#[derive(Default)]
struct Shared {
    registering: Mutex<HashMap<u64, oneshot::Sender<String>>>,
    log: Mutex<BTreeMap<u64, Connection>>,
}

impl ProxyClient {
    /// The proxy of `session` (socket under `dir`): the running one if it answers, else a
    /// new `<exe> __netproxy` in a session of its own (it outlives talaria for kept jobs).
    pub(crate) async fn open(
        exe: &Path,
        dir: &Path,
        logs_dir: &Path,
        session: &str,
        settings: Settings,
        gate: Arc<dyn Gate>,
        events: EventSink,
    ) -> std::io::Result<ProxyClient> {
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        let name: String =
            session.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
        let socket = service::socket_path(dir, &name);
        if let Ok(stream) = UnixStream::connect(&socket).await {
            match attach(stream, &settings, gate.clone(), events.clone()).await {
                Ok(client) => {
                    tracing::info!(
                        pid = client.inner.pid,
                        port = client.inner.port,
                        "took over the session's network proxy"
                    );
                    return Ok(client);
                }
                Err(e) => tracing::info!(error = %e, "the session's earlier network proxy did not answer"),
            }
        }
        start(exe, &socket, logs_dir, &settings).await?;
        let stream = UnixStream::connect(&socket).await?;
        attach(stream, &settings, gate, events).await
    }

    pub(crate) fn port(&self) -> u16 {
        self.inner.port
    }

    /// Let job `id` use the proxy; its proxy URL (with its credential), None if the proxy
    /// is gone.
    pub(crate) async fn register_job(
        &self,
        id: &str,
        command: &str,
        denials: Option<std::path::PathBuf>,
    ) -> Option<String> {
        let seq = self.inner.seq.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.shared.registering).insert(seq, tx);
        let msg = ToProxy::Register { seq, id: id.to_string(), command: command.to_string(), denials };
        if self.inner.tx.send(msg).is_err() {
            lock(&self.inner.shared.registering).remove(&seq);
            return None;
        }
        let url = tokio::time::timeout(REGISTER_WAIT, rx).await.ok().and_then(Result::ok);
        lock(&self.inner.shared.registering).remove(&seq);
        url
    }

    /// The job's supervisor runs (the job lives as long as it does).
    pub(crate) fn job_started(&self, id: &str, supervisor: i32, supervisor_start: u64) {
        let _ = self.inner.tx.send(ToProxy::Started { id: id.to_string(), supervisor, supervisor_start });
    }

    /// The job has ended (or never started): its credential stops working now.
    pub(crate) fn job_ended(&self, id: &str) {
        let _ = self.inner.tx.send(ToProxy::Ended { id: id.to_string() });
    }

    /// The session's connections, oldest first (those of kept jobs while talaria was away too).
    pub(crate) fn connections(&self) -> Vec<Connection> {
        lock(&self.inner.shared.log).values().cloned().collect()
    }
}

/// Start the process and wait until it listens.
async fn start(exe: &Path, socket: &Path, logs_dir: &Path, settings: &Settings) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg(service::ARG).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).current_dir("/");
    // SAFETY: setsid and close_range are async-signal-safe and touch no memory of the
    // parent. Its own session: talaria's terminal hanging up or its signals never reach it.
    unsafe {
        cmd.as_std_mut().pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            #[cfg(target_os = "linux")]
            libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let spec =
        Spec { socket: socket.to_path_buf(), settings: settings.clone(), logs_dir: Some(logs_dir.to_path_buf()) };
    let spec = serde_json::to_vec(&spec)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&spec).await?;
    }
    let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no pipe from the network proxy"))?;
    let mut line = String::new();
    let mut reader = tokio::io::BufReader::new(stdout);
    let ready = match tokio::time::timeout(START_WAIT, reader.read_line(&mut line)).await {
        Ok(Ok(_)) => serde_json::from_str::<Ready>(line.trim()).ok(),
        _ => None,
    };
    if ready.is_none() {
        let _ = child.start_kill();
        let _ = child.wait().await;
        return Err(std::io::Error::other("the network proxy process did not start"));
    }
    // Reaped while talaria lives; after, whoever adopts it.
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(())
}

/// Say hello on `stream` and start following it.
async fn attach(
    stream: UnixStream,
    settings: &Settings,
    gate: Arc<dyn Gate>,
    events: EventSink,
) -> std::io::Result<ProxyClient> {
    let (read, mut write) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<ToProxy>();
    tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            let Ok(mut line) = serde_json::to_vec(&msg) else { continue };
            line.push(b'\n');
            if write.write_all(&line).await.is_err() {
                return;
            }
        }
    });
    let _ = tx.send(ToProxy::Hello { settings: settings.clone() });
    let mut lines = tokio::io::BufReader::new(read).lines();
    let first = match tokio::time::timeout(START_WAIT, lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        Ok(Err(e)) => return Err(e),
        _ => return Err(std::io::Error::other("no answer from the network proxy")),
    };
    let Ok(FromProxy::Welcome { port, pid, connections }) = serde_json::from_str(&first) else {
        return Err(std::io::Error::other("the network proxy answered something else"));
    };
    let shared =
        Arc::new(Shared { registering: Default::default(), log: Mutex::new(connections.into_iter().collect()) });
    // Weak: when talaria drops its client, the writer ends and the proxy sees it leave.
    let answers = tx.downgrade();
    let follow = shared.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(msg) = serde_json::from_str::<FromProxy>(&line) else { continue };
            match msg {
                FromProxy::Welcome { .. } => {}
                FromProxy::Registered { seq, url } => {
                    if let Some(tx) = lock(&follow.registering).remove(&seq) {
                        let _ = tx.send(url);
                    }
                }
                FromProxy::Question { id, question } => {
                    let (gate, answers) = (gate.clone(), answers.clone());
                    tokio::spawn(async move {
                        let answer = gate.ask(question).await;
                        if let Some(tx) = answers.upgrade() {
                            let _ = tx.send(ToProxy::Answer { question: id, answer });
                        }
                    });
                }
                FromProxy::Report { report: Report::Connection { entry, connection } } => {
                    if connection.done {
                        events.send(Event::NetworkConnection(connection.clone()));
                    }
                    let mut log = lock(&follow.log);
                    log.insert(entry, connection);
                    while log.len() > MAX_LOG {
                        log.pop_first();
                    }
                }
                FromProxy::Report { report: Report::Warning(text) } => {
                    events.send(Event::notice(NoticeLevel::Warn, text))
                }
            }
        }
        lock(&follow.registering).clear();
        if answers.upgrade().is_some() {
            events.send(Event::notice(
                NoticeLevel::Warn,
                "the session's network proxy has ended: sandboxed commands have no network until talaria restarts"
                    .to_string(),
            ));
        }
    });
    Ok(ProxyClient { inner: Arc::new(Inner { port, pid, tx, seq: AtomicU64::new(0), shared }) })
}
