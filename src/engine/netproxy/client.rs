//! Talaria's side of the session's proxy process ([`super::service`]): start it, or take
//! over the one that still runs for the session (its kept jobs use it), then register
//! jobs, say when they end, answer its questions through the approval modal, and mirror its
//! connections for `/network` and `exec --json`.
//!
//! It also watches the process: the control socket closing while talaria still holds the
//! client means the proxy died (it never leaves an attached talaria). Talaria then starts a
//! new one on the same port, hands it every job's credential and the hosts allowed for the
//! session, and says so in a notice: running jobs keep their proxy URL and their network, the
//! next job registers with the new process. At most [`MAX_RESTARTS`] restarts in
//! [`RESTART_WINDOW`]; after that talaria gives up until it restarts, says so, and answers on
//! the proxy's port itself with a 503 that says why (a clear error for commands, in their
//! output and their tool result).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch};

use super::service::{self, FromProxy, Ready, Remembered, Spec, ToProxy};
use super::{Answer, Connection, Gate, Grant, Question, Report, Settings, MAX_LOG};
use crate::engine::EventSink;
use crate::protocol::{Event, NoticeLevel};
use crate::util::lock;

/// How long the process may take to listen, and to answer the first message.
const START_WAIT: Duration = Duration::from_secs(10);
const REGISTER_WAIT: Duration = Duration::from_secs(10);
/// Restarts of a dead proxy allowed within [`RESTART_WINDOW`]; one more and talaria gives up.
pub(crate) const MAX_RESTARTS: usize = 5;
pub(crate) const RESTART_WINDOW: Duration = Duration::from_secs(60);
/// How long a dead proxy may take to be gone (its port free) before it is killed.
const GONE_WAIT: Duration = Duration::from_secs(2);

/// The session's proxy as talaria drives it; cheap to clone.
#[derive(Clone)]
pub(crate) struct ProxyClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ProxyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyClient").field("port", &self.port()).field("status", &*self.inner.status.borrow()).finish()
    }
}

/// Where the proxy stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Up,
    /// It died; a new one is being started.
    Restarting,
    /// Talaria gave up on it (its port answers with a 503 that says why).
    Down,
}

/// What starting or taking over a proxy process needs.
struct Opener {
    exe: PathBuf,
    socket: PathBuf,
    logs_dir: PathBuf,
    gate: Arc<dyn Gate>,
    events: EventSink,
}

/// The process talaria is attached to now.
struct Link {
    generation: u64,
    pid: u32,
    /// Its start time in clock ticks (tells a reused pid apart).
    start_ticks: Option<u64>,
    tx: mpsc::UnboundedSender<ToProxy>,
    /// Its exit status, when this talaria started it (it is talaria's child then).
    exit: Option<oneshot::Receiver<std::process::ExitStatus>>,
}

struct Inner {
    opener: Opener,
    /// The config's lists (with what "always" added since): a new process starts with them.
    settings: Mutex<Settings>,
    link: Mutex<Option<Link>>,
    status: watch::Sender<Status>,
    port: AtomicU16,
    generations: AtomicU64,
    seq: AtomicU64,
    registering: Mutex<HashMap<u64, oneshot::Sender<String>>>,
    /// Connections by number; a restarted process numbers from 0 again, so its numbers are
    /// offset past the last one seen.
    log: Mutex<BTreeMap<u64, Connection>>,
    /// The jobs that may use the proxy, by id: handed to a new process if this one dies.
    grants: Mutex<BTreeMap<String, Grant>>,
    /// Hosts answered "this session" or "always" (`local`: to reach this machine).
    remembered: Mutex<(HashSet<String>, HashSet<String>)>,
    restarts: Mutex<Budget>,
}

/// The restarts in the last [`RESTART_WINDOW`].
#[derive(Debug, Default)]
pub(crate) struct Budget {
    times: VecDeque<Instant>,
}

impl Budget {
    /// Count a restart at `now`: which one it is in the window (1-based), or None when
    /// [`MAX_RESTARTS`] were made already (then nothing is counted).
    pub(crate) fn take(&mut self, now: Instant) -> Option<usize> {
        while self.times.front().is_some_and(|t| now.saturating_duration_since(*t) >= RESTART_WINDOW) {
            self.times.pop_front();
        }
        if self.times.len() >= MAX_RESTARTS {
            return None;
        }
        self.times.push_back(now);
        Some(self.times.len())
    }
}

/// A process talaria has just said hello to.
struct Attached {
    port: u16,
    pid: u32,
    tx: mpsc::UnboundedSender<ToProxy>,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>,
    connections: Vec<(u64, Connection)>,
    jobs: Vec<Grant>,
    exit: Option<oneshot::Receiver<std::process::ExitStatus>>,
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
        let opener = Opener {
            exe: exe.to_path_buf(),
            socket: service::socket_path(dir, &name),
            logs_dir: logs_dir.to_path_buf(),
            gate,
            events,
        };
        let hello =
            ToProxy::Hello { settings: settings.clone(), remembered: Remembered::default(), grants: Vec::new() };
        let attached = connect_or_start(&opener, None, &settings, hello).await?;
        let inner = Arc::new(Inner {
            opener,
            settings: Mutex::new(settings),
            link: Mutex::new(None),
            status: watch::Sender::new(Status::Up),
            port: AtomicU16::new(attached.port),
            generations: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            registering: Default::default(),
            log: Default::default(),
            grants: Default::default(),
            remembered: Default::default(),
            restarts: Default::default(),
        });
        install(&inner, attached);
        Ok(ProxyClient { inner })
    }

    /// The proxy's port (the last one's, once talaria gave up on it).
    pub(crate) fn port(&self) -> u16 {
        self.inner.port.load(Ordering::SeqCst)
    }

    /// Let job `id` use the proxy; its proxy URL (with its credential), None if the proxy
    /// is gone. While a dead proxy is being replaced, it waits for the new one; once talaria
    /// has given up, the URL leads to talaria's 503 that says why.
    pub(crate) async fn register_job(
        &self,
        id: &str,
        command: &str,
        denials: Option<std::path::PathBuf>,
    ) -> Option<String> {
        // A proxy that dies before it answers is replaced: ask the next one.
        for _ in 0..=MAX_RESTARTS {
            let mut watch = self.inner.status.subscribe();
            let status = match tokio::time::timeout(REGISTER_WAIT, watch.wait_for(|s| *s != Status::Restarting)).await {
                Ok(Ok(s)) => s.clone(),
                _ => return None,
            };
            if status == Status::Down {
                return Some(self.inner.down_grant(id, command, denials));
            }
            let seq = self.inner.seq.fetch_add(1, Ordering::SeqCst);
            let (tx, rx) = oneshot::channel();
            lock(&self.inner.registering).insert(seq, tx);
            let msg =
                ToProxy::Register { seq, id: id.to_string(), command: command.to_string(), denials: denials.clone() };
            if !self.inner.send(msg) {
                // Its writer is gone: the proxy has died, and talaria is about to notice.
                lock(&self.inner.registering).remove(&seq);
                let _ = tokio::time::timeout(REGISTER_WAIT, watch.wait_for(|s| *s != Status::Up)).await;
                continue;
            }
            let answered = tokio::time::timeout(REGISTER_WAIT, rx).await;
            lock(&self.inner.registering).remove(&seq);
            match answered {
                Ok(Ok(url)) => {
                    if let Some(secret) = url_secret(&url) {
                        let grant = Grant { id: id.into(), secret, command: command.into(), denials, supervisor: None };
                        lock(&self.inner.grants).insert(id.to_string(), grant);
                    }
                    return Some(url);
                }
                // Dropped: the proxy died before it answered.
                Ok(Err(_)) => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// The job's supervisor runs (the job lives as long as it does).
    pub(crate) fn job_started(&self, id: &str, supervisor: i32, supervisor_start: u64) {
        if let Some(grant) = lock(&self.inner.grants).get_mut(id) {
            grant.supervisor = Some((supervisor, supervisor_start));
        }
        self.inner.send(ToProxy::Started { id: id.to_string(), supervisor, supervisor_start });
    }

    /// The job has ended (or never started): its credential stops working now.
    pub(crate) fn job_ended(&self, id: &str) {
        lock(&self.inner.grants).remove(id);
        self.inner.send(ToProxy::Ended { id: id.to_string() });
    }

    /// The session's connections, oldest first (those of kept jobs while talaria was away too).
    pub(crate) fn connections(&self) -> Vec<Connection> {
        lock(&self.inner.log).values().cloned().collect()
    }
}

impl Inner {
    /// Send to the process attached now; false when there is none.
    fn send(&self, msg: ToProxy) -> bool {
        lock(&self.link).as_ref().is_some_and(|link| link.tx.send(msg).is_ok())
    }

    /// What a new process is told first: the lists, the session's answers, the jobs.
    fn hello(&self) -> ToProxy {
        let (hosts, local) = {
            let remembered = lock(&self.remembered);
            (remembered.0.iter().cloned().collect(), remembered.1.iter().cloned().collect())
        };
        ToProxy::Hello {
            settings: lock(&self.settings).clone(),
            remembered: Remembered { hosts, local },
            grants: lock(&self.grants).values().cloned().collect(),
        }
    }

    /// An answer that lasts beyond its question is kept for a process that replaces this one.
    fn remember(&self, question: &Question, answer: &Answer) {
        if !matches!(answer, Answer::Session | Answer::Always) {
            return;
        }
        let mut remembered = lock(&self.remembered);
        let set = if question.note.is_some() { &mut remembered.1 } else { &mut remembered.0 };
        set.insert(question.host.clone());
        if *answer == Answer::Always {
            let mut settings = lock(&self.settings);
            if !settings.allow.contains(&question.host) {
                settings.allow.push(question.host.clone());
            }
        }
    }

    /// Talaria gave up on the proxy: a job still gets a URL, which leads to talaria's 503.
    fn down_grant(&self, id: &str, command: &str, denials: Option<PathBuf>) -> String {
        let grant =
            Grant { id: id.into(), secret: super::random_hex(16), command: command.into(), denials, supervisor: None };
        let url = grant.url(self.port.load(Ordering::SeqCst));
        lock(&self.grants).insert(id.to_string(), grant);
        url
    }

    fn notice(&self, level: NoticeLevel, text: String) {
        self.opener.events.send(Event::notice(level, text));
    }

    fn on_message(self: &Arc<Self>, generation: u64, base: u64, msg: FromProxy) {
        match msg {
            FromProxy::Welcome { .. } => {}
            FromProxy::Registered { seq, url } => {
                if let Some(tx) = lock(&self.registering).remove(&seq) {
                    let _ = tx.send(url);
                }
            }
            FromProxy::Question { id, question } => {
                let (gate, weak) = (self.opener.gate.clone(), Arc::downgrade(self));
                tokio::spawn(async move {
                    let answer = gate.ask(question.clone()).await;
                    let Some(inner) = weak.upgrade() else { return };
                    inner.remember(&question, &answer);
                    // To the process that asked (a replacement never asked it).
                    let link = lock(&inner.link);
                    if let Some(link) = link.as_ref().filter(|l| l.generation == generation) {
                        let _ = link.tx.send(ToProxy::Answer { question: id, answer });
                    }
                });
            }
            FromProxy::Report { report: Report::Connection { entry, connection } } => {
                if connection.done {
                    self.opener.events.send(Event::NetworkConnection(connection.clone()));
                }
                let mut log = lock(&self.log);
                log.insert(base + entry, connection);
                while log.len() > MAX_LOG {
                    log.pop_first();
                }
            }
            FromProxy::Report { report: Report::Warning(text) } => self.notice(NoticeLevel::Warn, text),
        }
    }

    /// The process of `generation` closed its socket: it died. Wait until it is gone (its
    /// port free), then start another, within the budget; else give up.
    async fn died(self: Arc<Self>, generation: u64) {
        let link = {
            let mut link = lock(&self.link);
            if link.as_ref().is_none_or(|l| l.generation != generation) {
                return;
            }
            // Under the lock: whoever finds no link finds the status saying why.
            self.status.send_replace(Status::Restarting);
            link.take()
        };
        let Some(link) = link else { return };
        // Registrations the dead process never answered are asked again of the next one.
        lock(&self.registering).clear();
        let (port, pid) = (self.port.load(Ordering::SeqCst), link.pid);
        let mut how = gone(link).await;
        tracing::warn!(pid, %how, "the session's network proxy died");
        loop {
            let Some(nth) = lock(&self.restarts).take(Instant::now()) else {
                self.give_up(port, &how);
                return;
            };
            let grants: Vec<String> = lock(&self.grants).keys().cloned().collect();
            let settings = lock(&self.settings).clone();
            match connect_or_start(&self.opener, Some(port), &settings, self.hello()).await {
                Ok(attached) => {
                    let (pid, new_port) = (attached.pid, attached.port);
                    install(&self, attached);
                    // Jobs that ended while it started: their credentials go now.
                    let left: Vec<String> =
                        grants.into_iter().filter(|id| !lock(&self.grants).contains_key(id)).collect();
                    for id in left {
                        self.send(ToProxy::Ended { id });
                    }
                    let running = if new_port == port {
                        "running commands keep their network".to_string()
                    } else {
                        format!("its port {port} was taken, so commands already running have lost the network")
                    };
                    let text = format!(
                        "the session's network proxy died ({how}); talaria restarted it (pid {pid}, port \
                         {new_port}; restart {nth} of {MAX_RESTARTS} allowed in {}s): {running}",
                        RESTART_WINDOW.as_secs()
                    );
                    tracing::warn!(pid, port = new_port, nth, "restarted the session's network proxy");
                    self.notice(NoticeLevel::Warn, text);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the session's network proxy did not start again");
                    how = format!("{how}, then it could not start again: {e}");
                }
            }
        }
    }

    /// Too many restarts: no proxy until talaria restarts. Its port answers every request
    /// with a 503 saying so, recorded for the job's tool result.
    fn give_up(self: &Arc<Self>, port: u16, how: &str) {
        let what = format!(
            "{how}; it was restarted {MAX_RESTARTS} times in {}s already, and talaria gives up: sandboxed commands \
             have no network until talaria restarts",
            RESTART_WINDOW.as_secs()
        );
        let why = format!("talaria's network proxy keeps dying ({what})");
        tracing::error!(%what, "gave up on the session's network proxy");
        // Its socket, unless a process answers there (one another talaria started).
        if std::os::unix::net::UnixStream::connect(&self.opener.socket).is_err() {
            let _ = std::fs::remove_file(&self.opener.socket);
        }
        // Listening before anyone is told: a job started after the notice finds the 503.
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(tokio::net::TcpListener::from_std);
        match listener {
            Ok(listener) => {
                tokio::spawn(answer_down(Arc::downgrade(self), listener, why));
            }
            Err(e) => tracing::warn!(port, error = %e, "cannot answer on the dead network proxy's port"),
        }
        self.status.send_replace(Status::Down);
        self.notice(NoticeLevel::Error, format!("network proxy keeps dying: {what}"));
    }
}

/// Start following `attached`: it is the session's proxy from now on.
fn install(inner: &Arc<Inner>, attached: Attached) {
    let generation = inner.generations.fetch_add(1, Ordering::SeqCst) + 1;
    let Attached { port, pid, tx, lines, connections, jobs, exit } = attached;
    let base = {
        let mut log = lock(&inner.log);
        let base = log.keys().next_back().map_or(0, |last| last + 1);
        log.extend(connections.into_iter().map(|(n, c)| (base + n, c)));
        base
    };
    {
        let mut grants = lock(&inner.grants);
        for grant in jobs {
            grants.entry(grant.id.clone()).or_insert(grant);
        }
    }
    let start_ticks = crate::engine::process::proc_stat(pid as i32).map(|s| s.start_ticks);
    inner.port.store(port, Ordering::SeqCst);
    *lock(&inner.link) = Some(Link { generation, pid, start_ticks, tx, exit });
    inner.status.send_replace(Status::Up);
    tokio::spawn(follow(Arc::downgrade(inner), generation, base, lines));
}

/// Read what the process says until its socket closes. Weak: when talaria drops its client,
/// the writer ends, the process sees it leave and closes its side — that is no death.
async fn follow(
    weak: Weak<Inner>,
    generation: u64,
    base: u64,
    mut lines: tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>,
) {
    while let Ok(Some(line)) = lines.next_line().await {
        let Some(inner) = weak.upgrade() else { return };
        if let Ok(msg) = serde_json::from_str::<FromProxy>(&line) {
            inner.on_message(generation, base, msg);
        }
    }
    if let Some(inner) = weak.upgrade() {
        inner.died(generation).await;
    }
}

/// Wait until the dead process is gone (its port free again); how it ended, for the notice.
async fn gone(link: Link) -> String {
    let pid = link.pid;
    if let Some(exit) = link.exit {
        // Talaria's child: reaped by its waiting task, which sends the status.
        if let Ok(Ok(status)) = tokio::time::timeout(GONE_WAIT, exit).await {
            return describe_exit(pid, status);
        }
    }
    let deadline = Instant::now() + GONE_WAIT;
    while crate::engine::process::process_alive(pid as i32, link.start_ticks) {
        if Instant::now() >= deadline {
            // It left talaria but hangs on: it is of no use, and it holds the port.
            tracing::warn!(pid, "the network proxy closed its socket but did not end: killing it");
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            return format!("pid {pid} stopped answering and was killed");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    format!("pid {pid} ended")
}

fn describe_exit(pid: u32, status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("pid {pid} exited with code {code}"),
        (None, Some(signal)) => match nix::sys::signal::Signal::try_from(signal) {
            Ok(name) => format!("pid {pid} was killed by {}", name.as_str()),
            Err(_) => format!("pid {pid} was killed by signal {signal}"),
        },
        (None, None) => format!("pid {pid} ended"),
    }
}

/// The password in a job's proxy URL (`http://job_4:<secret>@127.0.0.1:<port>`).
fn url_secret(url: &str) -> Option<String> {
    let (creds, _) = url.strip_prefix("http://")?.rsplit_once('@')?;
    Some(creds.split_once(':')?.1.to_string())
}

/// The running proxy of the session if one answers on its socket, else a new process (on
/// `port` if it is free); then hello.
async fn connect_or_start(
    opener: &Opener,
    port: Option<u16>,
    settings: &Settings,
    hello: ToProxy,
) -> std::io::Result<Attached> {
    let hello = serde_json::to_vec(&hello)?;
    if let Ok(stream) = UnixStream::connect(&opener.socket).await {
        match attach(stream, &hello).await {
            Ok(attached) => {
                tracing::info!(pid = attached.pid, port = attached.port, "took over the session's network proxy");
                return Ok(attached);
            }
            Err(e) => tracing::info!(error = %e, "the session's earlier network proxy did not answer"),
        }
    }
    let exit = start(&opener.exe, &opener.socket, &opener.logs_dir, settings, port).await?;
    let stream = UnixStream::connect(&opener.socket).await?;
    let mut attached = attach(stream, &hello).await?;
    attached.exit = Some(exit);
    Ok(attached)
}

/// Start the process and wait until it listens; its exit status comes on the receiver.
async fn start(
    exe: &Path,
    socket: &Path,
    logs_dir: &Path,
    settings: &Settings,
    port: Option<u16>,
) -> std::io::Result<oneshot::Receiver<std::process::ExitStatus>> {
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
        Spec { socket: socket.to_path_buf(), settings: settings.clone(), logs_dir: Some(logs_dir.to_path_buf()), port };
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
    // Reaped while talaria lives (its status tells how it died); after, whoever adopts it.
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        if let Ok(status) = child.wait().await {
            let _ = tx.send(status);
        }
    });
    Ok(rx)
}

/// Say hello (`hello`, a JSON line) on `stream` and read the welcome.
async fn attach(stream: UnixStream, hello: &[u8]) -> std::io::Result<Attached> {
    let (read, mut write) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<ToProxy>();
    let mut first = hello.to_vec();
    first.push(b'\n');
    tokio::spawn(async move {
        if write.write_all(&first).await.is_err() {
            return;
        }
        while let Some(msg) = rx.recv().await {
            let Ok(mut line) = serde_json::to_vec(&msg) else { continue };
            line.push(b'\n');
            if write.write_all(&line).await.is_err() {
                return;
            }
        }
    });
    let mut lines = tokio::io::BufReader::new(read).lines();
    let first = match tokio::time::timeout(START_WAIT, lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        Ok(Err(e)) => return Err(e),
        _ => return Err(std::io::Error::other("no answer from the network proxy")),
    };
    let Ok(FromProxy::Welcome { port, pid, connections, jobs }) = serde_json::from_str(&first) else {
        return Err(std::io::Error::other("the network proxy answered something else"));
    };
    Ok(Attached { port, pid, tx, lines, connections, jobs, exit: None })
}

/// After talaria gave up on the proxy: answer on its port with a 503 that says why, and
/// record it for the job's tool result, until talaria drops its client.
async fn answer_down(weak: Weak<Inner>, listener: tokio::net::TcpListener, why: String) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        let Some(inner) = weak.upgrade() else { return };
        let denials: HashMap<String, Option<PathBuf>> =
            lock(&inner.grants).values().map(|g| (g.header(), g.denials.clone())).collect();
        drop(inner);
        let why = why.clone();
        tokio::spawn(async move {
            let Ok(Some((head, _))) = super::read_head(&mut stream).await else { return };
            if let Some(request) = super::parse_head(&head) {
                let target = match &request.kind {
                    super::Kind::Connect { host, port } | super::Kind::Forward { host, port, .. } => {
                        super::host_port(host, *port)
                    }
                };
                let path = request.auth.as_ref().and_then(|a| denials.get(a).cloned().flatten());
                if let Some(path) = path {
                    let denial = crate::engine::sandbox::notify::Denial {
                        call: "network proxy".into(),
                        address: target,
                        reason: why.clone(),
                    };
                    crate::engine::sandbox::notify::record(&path, &denial);
                }
            }
            let _ = super::respond(&mut stream, 503, "Service Unavailable", &format!("{why}\n")).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_budget_allows_five_restarts_a_minute_and_forgets_old_ones() {
        let mut budget = Budget::default();
        let t0 = Instant::now();
        for n in 1..=MAX_RESTARTS {
            assert_eq!(budget.take(t0 + Duration::from_secs(n as u64)), Some(n));
        }
        assert_eq!(budget.take(t0 + Duration::from_secs(30)), None, "a sixth restart within the minute");
        assert_eq!(budget.take(t0 + Duration::from_secs(59)), None);
        // A minute after the first, one slot is free again.
        assert_eq!(budget.take(t0 + Duration::from_secs(61)), Some(MAX_RESTARTS));
        assert_eq!(budget.take(t0 + Duration::from_secs(61)), None);
    }

    #[test]
    fn the_secret_is_read_from_a_job_url() {
        let url = "http://job_4:abc123@127.0.0.1:4242";
        assert_eq!(url_secret(url).as_deref(), Some("abc123"));
        let grant =
            Grant { id: "job_4".into(), secret: "abc123".into(), command: "x".into(), denials: None, supervisor: None };
        assert_eq!(grant.url(4242), url);
        assert_eq!(Some(grant.header()), super::super::proxy_authorization(url));
        assert_eq!(url_secret("https://x"), None);
    }
}
