//! The session's network proxy (DESIGN §6b). With `sandbox.network = "ask"` a sandboxed
//! command has no route out but this: an HTTP proxy on 127.0.0.1 (CONNECT for TLS and
//! anything else, plain HTTP forwarding), reached through `HTTP(S)_PROXY`/`ALL_PROXY`.
//! Only the session's jobs can use it: each job's proxy URL carries a credential of its
//! own (`http://job_4:<secret>@127.0.0.1:<port>`), checked as `Proxy-Authorization: Basic`
//! (else 407), which also says which job made a request. The host is decided by
//! [`policy::decide`]; what asks goes to a [`Gate`] (the approval modal, or `exec`'s rule),
//! one question per host:port while it is open. Nothing goes around it: the job's seccomp
//! filter opens only TCP sockets and its supervisor connects them only to this port (or to
//! the job's own loopback servers) — the mediation of DESIGN §6a rather than a network
//! namespace, which would need privilege or a user namespace and cut loopback in two. Bytes stream both ways through pipes
//! ([`relay`], `splice`): a 1 GB download never sits in memory. Talaria runs it in a process
//! of its own per session ([`service`], driven through [`client`]), so that jobs kept running
//! after talaria quits keep their network; a job's credential ends with the job. If that
//! process dies, talaria starts another on the same port with the same credentials
//! ([`client`]): running jobs keep their network.

pub(crate) mod client;
pub(crate) mod policy;
mod relay;
pub mod service;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::util::lock;
use policy::{Rule, Why};

/// The longest request head read (request line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// Connections kept for `/network` at most (the oldest go first).
const MAX_LOG: usize = 1000;
const UPSTREAM_CONNECT: Duration = Duration::from_secs(30);
const RESOLVE: Duration = Duration::from_secs(15);

/// A question for the user (or `exec`'s rule): may this job reach this host?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    pub job: String,
    pub command: String,
    pub host: String,
    pub port: u16,
    /// What the user should know besides the name ("it resolves to 127.0.0.1 …").
    pub note: Option<String>,
}

impl Question {
    /// The modal's line: "job_4 (`npm install`) wants registry.npmjs.org:443".
    pub fn shown(&self) -> String {
        let mut command: String = self.command.chars().take(80).collect();
        if command.len() < self.command.len() {
            command.push('…');
        }
        let mut line = format!("{} (`{command}`) wants {}", self.job, host_port(&self.host, self.port));
        if let Some(note) = &self.note {
            line.push_str(" — ");
            line.push_str(note);
        }
        line
    }
}

/// The answer to a [`Question`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// This request (and the others waiting on the same question).
    Once,
    /// The host, for the rest of the session (while its proxy runs: kept jobs too).
    Session,
    /// The host for good: saved to `sandbox.network_allow`.
    Always,
    /// Refused; why (shown in the 403 and the tool result).
    Deny(String),
}

/// Who answers questions.
#[async_trait::async_trait]
pub trait Gate: Send + Sync {
    async fn ask(&self, question: Question) -> Answer;
}

pub use crate::protocol::network::{Connection, Verdict};

/// What the session's config says (and where "always" is saved).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Settings {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// config.toml, for "always".
    pub config_file: Option<PathBuf>,
}

/// One job that may use the proxy.
#[derive(Debug, Clone)]
struct JobEntry {
    id: String,
    /// The password of its proxy URL (kept to hand the job over to a restarted proxy).
    secret: String,
    command: String,
    /// Its supervisor (pid, start time in clock ticks): the job's processes are below it
    /// (loopback servers of the session), and the job has ended when it is gone.
    supervisor: Option<(i32, u64)>,
    /// Where refusals are recorded for the job's tool result.
    denials: Option<PathBuf>,
    /// Cancelled when the job ends: its credential is gone and its tunnels close.
    ended: CancellationToken,
}

/// A job's right to use the proxy, as talaria hands it to a new proxy process when the old
/// one died (client.rs): the running job keeps its URL, credential included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Grant {
    pub(crate) id: String,
    pub(crate) secret: String,
    pub(crate) command: String,
    pub(crate) denials: Option<PathBuf>,
    /// Its supervisor (pid, start time in clock ticks), once it runs.
    pub(crate) supervisor: Option<(i32, u64)>,
}

impl Grant {
    /// The `Proxy-Authorization` value of its URL.
    fn header(&self) -> String {
        format!("Basic {}", base64(format!("{}:{}", self.id, self.secret).as_bytes()))
    }

    /// Its proxy URL on `port`.
    pub(crate) fn url(&self, port: u16) -> String {
        format!("http://{}:{}@127.0.0.1:{port}", self.id, self.secret)
    }
}

/// What the proxy tells whoever runs it (talaria's engine, through `service`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Report {
    /// A connection was asked for (`done: false`) or is over; `entry` numbers it.
    Connection { entry: u64, connection: Connection },
    /// Something the user should see (an "always" that could not be saved).
    Warning(String),
}

type Waiting = watch::Receiver<Option<Answer>>;

struct Inner {
    port: u16,
    gate: Arc<dyn Gate>,
    settings: Mutex<Settings>,
    /// `Proxy-Authorization` value → the job it belongs to.
    jobs: Mutex<HashMap<String, JobEntry>>,
    session_hosts: Mutex<HashSet<String>>,
    /// Names the user let reach this machine for the session, asked knowing where they resolve.
    session_local: Mutex<HashSet<String>>,
    /// Open questions by host:port: later requests wait for the same answer.
    asking: Mutex<HashMap<String, Waiting>>,
    log: Mutex<VecDeque<Connection>>,
    next_entry: Mutex<u64>,
    /// Requests waiting for an answer now.
    waiting: std::sync::atomic::AtomicUsize,
    events: Option<tokio::sync::mpsc::UnboundedSender<Report>>,
}

/// The running proxy; cheap to clone. It stops accepting once every handle is gone.
#[derive(Clone)]
pub struct NetProxy {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NetProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetProxy").field("port", &self.inner.port).finish()
    }
}

/// The environment a job gets: its own proxy URL under every name tools read, and an
/// empty NO_PROXY so that loopback goes through the proxy too (it decides who serves it).
pub fn job_env(url: &str) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((name.to_string(), url.to_string()));
        env.push((name.to_ascii_lowercase(), url.to_string()));
    }
    env.push(("NO_PROXY".into(), String::new()));
    env.push(("no_proxy".into(), String::new()));
    env
}

impl NetProxy {
    /// Listen on 127.0.0.1 (a free port) and serve until the runtime ends.
    pub async fn start(
        settings: Settings,
        gate: Arc<dyn Gate>,
        events: Option<tokio::sync::mpsc::UnboundedSender<Report>>,
    ) -> std::io::Result<NetProxy> {
        Self::start_on(None, settings, gate, events).await
    }

    /// The same on `port` if it is free (a restarted proxy takes its predecessor's port, which
    /// running jobs' supervisors let them reach), else on a free one.
    pub async fn start_on(
        port: Option<u16>,
        settings: Settings,
        gate: Arc<dyn Gate>,
        events: Option<tokio::sync::mpsc::UnboundedSender<Report>>,
    ) -> std::io::Result<NetProxy> {
        let listener = match port {
            Some(port) => match TcpListener::bind(("127.0.0.1", port)).await {
                Ok(listener) => listener,
                Err(e) => {
                    tracing::warn!(port, error = %e, "the network proxy's earlier port is taken: listening on another");
                    TcpListener::bind(("127.0.0.1", 0)).await?
                }
            },
            None => TcpListener::bind(("127.0.0.1", 0)).await?,
        };
        let port = listener.local_addr()?.port();
        let inner = Arc::new(Inner {
            port,
            gate,
            settings: Mutex::new(settings),
            jobs: Mutex::new(HashMap::new()),
            session_hosts: Mutex::new(HashSet::new()),
            session_local: Mutex::new(HashSet::new()),
            asking: Mutex::new(HashMap::new()),
            log: Mutex::new(VecDeque::new()),
            next_entry: Mutex::new(0),
            waiting: Default::default(),
            events,
        });
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let Some(inner) = weak.upgrade() else { return };
                tokio::spawn(async move {
                    let _ = serve(inner, stream).await;
                });
            }
        });
        Ok(NetProxy { inner })
    }

    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// Let job `id` use the proxy; returns its proxy URL (with its credential).
    pub fn register_job(&self, id: &str, command: &str, denials: Option<PathBuf>) -> String {
        let grant = Grant {
            id: id.to_string(),
            secret: random_hex(16),
            command: command.to_string(),
            denials,
            supervisor: None,
        };
        self.grant(grant)
    }

    /// Let a job use the proxy with the credential it already has (it was granted by an
    /// earlier proxy process of the session); its proxy URL on this proxy's port.
    pub(crate) fn grant(&self, grant: Grant) -> String {
        let entry = JobEntry {
            id: grant.id.clone(),
            secret: grant.secret.clone(),
            command: grant.command.clone(),
            supervisor: grant.supervisor,
            denials: grant.denials.clone(),
            ended: CancellationToken::new(),
        };
        lock(&self.inner.jobs).insert(grant.header(), entry);
        grant.url(self.inner.port)
    }

    /// The jobs that may use the proxy now, as [`grant`](Self::grant) takes them.
    pub(crate) fn grants(&self) -> Vec<Grant> {
        let jobs = lock(&self.inner.jobs);
        let mut grants: Vec<Grant> = jobs
            .values()
            .map(|e| Grant {
                id: e.id.clone(),
                secret: e.secret.clone(),
                command: e.command.clone(),
                denials: e.denials.clone(),
                supervisor: e.supervisor,
            })
            .collect();
        grants.sort_by(|a, b| a.id.cmp(&b.id));
        grants
    }

    /// Hosts the user allowed for the session (`local`: to reach this machine) before this
    /// process started: an earlier proxy of the session asked, and the answer still holds.
    pub(crate) fn remember(&self, hosts: &[String], local: &[String]) {
        lock(&self.inner.session_hosts).extend(hosts.iter().cloned());
        lock(&self.inner.session_local).extend(local.iter().cloned());
    }

    /// The job's supervisor is known (after the spawn): its processes' loopback servers
    /// are the session's own, and the job lives as long as it does.
    pub fn job_started(&self, id: &str, supervisor: i32, supervisor_start: u64) {
        for entry in lock(&self.inner.jobs).values_mut() {
            if entry.id == id {
                entry.supervisor = Some((supervisor, supervisor_start));
            }
        }
    }

    /// Job `id` has ended: its credential stops working (407) and its open tunnels close —
    /// a process it left behind cannot go on using the network in its name.
    pub fn job_ended(&self, id: &str) {
        lock(&self.inner.jobs).retain(|_, entry| {
            let keep = entry.id != id;
            if !keep {
                entry.ended.cancel();
            }
            keep
        });
    }

    /// End the jobs whose supervisor is gone (and, with `unstarted`, those never started:
    /// nobody is left to start them); how many jobs may still use the proxy.
    pub fn sweep(&self, unstarted: bool) -> usize {
        let mut jobs = lock(&self.inner.jobs);
        jobs.retain(|_, entry| {
            let keep = match entry.supervisor {
                Some((pid, start)) => crate::engine::process::process_alive(pid, Some(start)),
                None => !unstarted,
            };
            if !keep {
                tracing::info!(job = %entry.id, "the job has ended: its proxy credential is revoked");
                entry.ended.cancel();
            }
            keep
        });
        jobs.len()
    }

    /// The config changed (a new talaria took the session over): its lists from now on.
    pub fn set_settings(&self, settings: Settings) {
        *lock(&self.inner.settings) = settings;
    }

    /// How many requests wait for an answer now (tests wait for a burst to be in).
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The session's connections, oldest first.
    pub fn connections(&self) -> Vec<Connection> {
        lock(&self.inner.log).iter().cloned().collect()
    }

    /// The same, each with the number its reports carry.
    pub(crate) fn numbered_connections(&self) -> Vec<(u64, Connection)> {
        let next = *lock(&self.inner.next_entry);
        let log = lock(&self.inner.log);
        let first = next - log.len() as u64;
        log.iter().cloned().enumerate().map(|(i, c)| (first + i as u64, c)).collect()
    }
}

/// The `Proxy-Authorization` value a client sends for a job's proxy URL (what curl makes
/// of `http://job_4:<secret>@127.0.0.1:<port>`).
pub fn proxy_authorization(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let (creds, _) = rest.rsplit_once('@')?;
    Some(format!("Basic {}", base64(creds.as_bytes())))
}

/// The port of a job's proxy URL.
pub(crate) fn url_port(url: &str) -> Option<u16> {
    url.rsplit_once(':')?.1.trim_end_matches('/').parse().ok()
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// What the client asked for.
enum Target {
    Connect,
    /// Plain HTTP: the head rewritten for the origin server.
    Forward(Vec<u8>),
}

async fn serve(inner: Arc<Inner>, mut client: TcpStream) -> std::io::Result<()> {
    let _ = client.set_nodelay(true);
    let (head, rest) = match read_head(&mut client).await? {
        Some(h) => h,
        None => return Ok(()),
    };
    let Some(request) = parse_head(&head) else {
        return respond(&mut client, 400, "Bad Request", "talaria's proxy could not read this request.\n").await;
    };
    let job = request.auth.as_deref().and_then(|a| lock(&inner.jobs).get(a).cloned());
    let Some(job) = job else {
        let msg = "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"talaria\"\r\n\
                   Content-Length: 0\r\nConnection: close\r\n\r\n";
        client.write_all(msg.as_bytes()).await?;
        return Ok(());
    };
    let (host, port, target) = match request.kind {
        Kind::Connect { host, port } => (host, port, Target::Connect),
        Kind::Forward { host, port, head } => (host, port, Target::Forward(head)),
    };
    let (mut verdict, mut reason) = decide(&inner, &job, &host, port).await;
    // Resolved only once the name may pass (a refused name is never looked up: a name can
    // carry data to whoever runs its DNS), and connected to what was checked.
    let mut addrs = Vec::new();
    if verdict != Verdict::Denied {
        match resolve(&host, port).await {
            Ok(found) => addrs = found,
            Err(e) => {
                let entry = record(&inner, &job, &host, port, verdict, &reason);
                finish(&inner, entry, 0, 0);
                let body = format!("talaria's proxy cannot resolve {host}: {e}\n");
                return respond(&mut client, 502, "Bad Gateway", &body).await;
            }
        }
        if let Some(local) = addrs.iter().map(|a| a.ip()).find(|ip| this_machine(*ip)) {
            (verdict, reason) = check_local(&inner, &job, &host, port, local, (verdict, reason)).await;
        }
    }
    let entry = record(&inner, &job, &host, port, verdict, &reason);
    if verdict == Verdict::Denied {
        finish(&inner, entry, 0, 0);
        refuse(&job, &host, port, &reason);
        let body = blocked_body(&host, port, &reason);
        return respond(&mut client, 403, "Forbidden", &body).await;
    }
    let upstream = match tokio::time::timeout(UPSTREAM_CONNECT, TcpStream::connect(&addrs[..])).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            finish(&inner, entry, 0, 0);
            return respond(
                &mut client,
                502,
                "Bad Gateway",
                &format!("talaria's proxy cannot reach {}: {e}\n", host_port(&host, port)),
            )
            .await;
        }
        Err(_) => {
            finish(&inner, entry, 0, 0);
            return respond(
                &mut client,
                504,
                "Gateway Timeout",
                &format!("talaria's proxy timed out reaching {}\n", host_port(&host, port)),
            )
            .await;
        }
    };
    let _ = upstream.set_nodelay(true);
    let mut upstream = upstream;
    let mut sent = rest.len() as u64;
    match target {
        Target::Connect => client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await?,
        Target::Forward(head) => {
            upstream.write_all(&head).await?;
            sent += head.len() as u64;
        }
    }
    upstream.write_all(&rest).await?;
    let counts = relay::Counts::default();
    tokio::select! {
        _ = relay::both_ways(&client, &upstream, &counts) => {}
        // The job ended: what it left behind loses the connection.
        _ = job.ended.cancelled() => {}
    }
    let (up, down) = counts.get();
    finish(&inner, entry, sent + up, down);
    Ok(())
}

/// Decide one request: the rules, else one question per host:port for every request
/// that comes while it is open.
async fn decide(inner: &Arc<Inner>, job: &JobEntry, host: &str, port: u16) -> (Verdict, String) {
    if policy::is_loopback(host) && port == inner.port {
        return (Verdict::Denied, "that is talaria's proxy itself".into());
    }
    let own_server = policy::is_loopback(host) && own_server(inner, port).await;
    let rule = {
        let settings = lock(&inner.settings);
        let session = lock(&inner.session_hosts);
        policy::decide(&policy::Facts {
            host,
            allow: &settings.allow,
            deny: &settings.deny,
            session: &session,
            own_server,
        })
    };
    match rule {
        Rule::Allow(Why::Listed) => return (Verdict::Allowed, "in sandbox.network_allow".into()),
        Rule::Allow(Why::Session) => return (Verdict::Allowed, "allowed for this session".into()),
        Rule::Allow(Why::OwnServer) => return (Verdict::Allowed, "a server of this session's commands".into()),
        Rule::Deny(pattern) => return (Verdict::Denied, format!("listed in sandbox.network_deny ({pattern})")),
        Rule::Ask => {}
    }
    ask(inner, job, host, port, None).await
}

/// Does a process of the session's jobs listen on loopback `port`?
async fn own_server(inner: &Inner, port: u16) -> bool {
    let supervisors: Vec<i32> = lock(&inner.jobs).values().filter_map(|j| j.supervisor.map(|s| s.0)).collect();
    tokio::task::spawn_blocking(move || crate::engine::sandbox::listeners::served_inside(port, &supervisors))
        .await
        .unwrap_or(false)
}

/// A name that may pass resolved to this machine: the user's own services are there, so
/// unless the name says so itself, or the user listed this exact name, or the port is a
/// server of the session's own jobs, it asks — saying where the name leads.
async fn check_local(
    inner: &Arc<Inner>,
    job: &JobEntry,
    host: &str,
    port: u16,
    local: std::net::IpAddr,
    decided: (Verdict, String),
) -> (Verdict, String) {
    if port == inner.port {
        return (Verdict::Denied, "that is talaria's proxy itself".into());
    }
    let allowed = {
        let settings = lock(&inner.settings);
        policy::local_allowed(host, &settings.allow, &lock(&inner.session_local))
    };
    if allowed {
        return decided;
    }
    if local.is_loopback() && own_server(inner, port).await {
        return (Verdict::Allowed, "a server of this session's commands".into());
    }
    tracing::info!(job = %job.id, host, %local, "a name that may pass resolves to this machine: asking");
    ask(inner, job, host, port, Some(format!("it resolves to {local}, this machine"))).await
}

/// Is `ip` this machine: loopback, the unspecified address (the kernel takes it as local), or
/// one of its own addresses (a socket can be bound to it)?
fn this_machine(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    ip.is_loopback() || ip.is_unspecified() || std::net::TcpListener::bind((ip, 0)).is_ok()
}

/// The addresses of `host`: an address is itself; `localhost` and `*.localhost` are loopback
/// (RFC 6761, never sent to DNS); anything else the system's resolver answers.
async fn resolve(host: &str, port: u16) -> std::io::Result<Vec<std::net::SocketAddr>> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return Ok(vec![(Ipv4Addr::LOCALHOST, port).into(), (Ipv6Addr::LOCALHOST, port).into()]);
    }
    let found = tokio::time::timeout(RESOLVE, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"))??;
    let found: Vec<SocketAddr> = found.collect();
    if found.is_empty() {
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no address"));
    }
    Ok(found)
}

/// Ask about `host:port`: one question for every request that comes while it is open.
/// `note` says the name resolves to this machine: then "this session" and "always" are for
/// reaching it there.
async fn ask(inner: &Arc<Inner>, job: &JobEntry, host: &str, port: u16, note: Option<String>) -> (Verdict, String) {
    let local = note.is_some();
    let key = if local { format!("{} (this machine)", host_port(host, port)) } else { host_port(host, port) };
    let (mut rx, asker) = {
        let mut asking = lock(&inner.asking);
        match asking.get(&key) {
            Some(rx) => (rx.clone(), None),
            None => {
                let (tx, rx) = watch::channel(None);
                asking.insert(key.clone(), rx.clone());
                (rx, Some(tx))
            }
        }
    };
    inner.waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let _waiting = Countdown(&inner.waiting);
    if asker.is_some() {
        tracing::info!(job = %job.id, target = %key, "network proxy asks");
    } else {
        tracing::info!(job = %job.id, target = %key, "network proxy request waits for the open question");
    }
    if let Some(tx) = asker {
        let question =
            Question { job: job.id.clone(), command: job.command.clone(), host: host.to_string(), port, note };
        let answer = inner.gate.ask(question).await;
        let session = if local { &inner.session_local } else { &inner.session_hosts };
        match &answer {
            Answer::Session => {
                lock(session).insert(host.to_string());
            }
            Answer::Always => {
                lock(session).insert(host.to_string());
                save_allowed_host(inner, host);
            }
            Answer::Once | Answer::Deny(_) => {}
        }
        lock(&inner.asking).remove(&key);
        let _ = tx.send(Some(answer));
    }
    let answer = loop {
        if let Some(a) = rx.borrow_and_update().clone() {
            break a;
        }
        if rx.changed().await.is_err() {
            break rx.borrow().clone().unwrap_or(Answer::Deny("the question was dropped".into()));
        }
    };
    match answer {
        Answer::Once => (Verdict::Asked, "allowed once when asked".into()),
        Answer::Session => (Verdict::Asked, "allowed for this session when asked".into()),
        Answer::Always => (Verdict::Asked, "allowed always when asked (saved to sandbox.network_allow)".into()),
        Answer::Deny(why) => (Verdict::Denied, why),
    }
}

/// Counts a waiting request down when it stops waiting (answered or dropped).
struct Countdown<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Countdown<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// "Always": append the host to `sandbox.network_allow` in config.toml, keeping comments.
fn save_allowed_host(inner: &Inner, host: &str) {
    let path = {
        let mut settings = lock(&inner.settings);
        if !settings.allow.iter().any(|a| a == host) {
            settings.allow.push(host.to_string());
        }
        settings.config_file.clone()
    };
    let Some(path) = path else { return };
    if let Err(e) = save_network_allow(&path, host) {
        if let Some(events) = &inner.events {
            let _ = events.send(Report::Warning(format!(
                "could not save {host} to sandbox.network_allow in {}: {e}",
                path.display()
            )));
        }
    }
}

/// Append `host` to `sandbox.network_allow` in the user's config, keeping its comments.
pub(crate) fn save_network_allow(path: &std::path::Path, host: &str) -> anyhow::Result<()> {
    crate::config_edit::edit(path, |doc| {
        let sandbox = doc.entry("sandbox").or_insert(toml_edit::table());
        let table = sandbox.as_table_mut().ok_or_else(|| anyhow::anyhow!("[sandbox] is not a table"))?;
        let list = table.entry("network_allow").or_insert(toml_edit::value(toml_edit::Array::new()));
        let array = list.as_array_mut().ok_or_else(|| anyhow::anyhow!("sandbox.network_allow is not an array"))?;
        if !array.iter().any(|v| v.as_str() == Some(host)) {
            array.push(host);
        }
        Ok(())
    })
}

fn record(inner: &Inner, job: &JobEntry, host: &str, port: u16, verdict: Verdict, reason: &str) -> u64 {
    let conn = Connection {
        at_ms: crate::util::now_ms(),
        job: job.id.clone(),
        host: host.to_string(),
        port,
        sent: 0,
        received: 0,
        verdict,
        reason: reason.to_string(),
        done: false,
    };
    let mut next = lock(&inner.next_entry);
    let id = *next;
    *next += 1;
    let mut log = lock(&inner.log);
    if log.len() >= MAX_LOG {
        log.pop_front();
    }
    if let Some(events) = &inner.events {
        let _ = events.send(Report::Connection { entry: id, connection: conn.clone() });
    }
    log.push_back(conn);
    id
}

/// The relay is over: final byte counts, and the event for `exec --json`.
fn finish(inner: &Inner, entry: u64, sent: u64, received: u64) {
    let next = *lock(&inner.next_entry);
    let mut log = lock(&inner.log);
    // Entries are numbered in order; the log holds the last `log.len()` of them.
    let first = next - log.len() as u64;
    let Some(conn) = entry.checked_sub(first).and_then(|i| log.get_mut(i as usize)) else { return };
    conn.sent = sent;
    conn.received = received;
    conn.done = true;
    if let Some(events) = &inner.events {
        let _ = events.send(Report::Connection { entry, connection: conn.clone() });
    }
}

/// Record a refusal where the job's tool result looks for them.
fn refuse(job: &JobEntry, host: &str, port: u16, reason: &str) {
    if let Some(path) = &job.denials {
        let denial = crate::engine::sandbox::notify::Denial {
            call: "proxy".into(),
            address: host_port(host, port),
            reason: format!("talaria blocked it: {reason}"),
        };
        crate::engine::sandbox::notify::record(path, &denial);
    }
}

/// The 403's body: who blocked what, and the ways on.
pub(crate) fn blocked_body(host: &str, port: u16, reason: &str) -> String {
    format!(
        "talaria blocked {}: {reason}.\nTo allow it, add \"{host}\" to sandbox.network_allow in talaria's \
         config.toml (\"*.{host}\" covers its subdomains), or answer \"this session\" or \"always\" when talaria \
         asks; talaria exec asks nobody and needs --yes or the list.\n",
        host_port(host, port)
    )
}

async fn respond(client: &mut TcpStream, code: u16, status: &str, body: &str) -> std::io::Result<()> {
    let msg = format!(
        "HTTP/1.1 {code} {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\nX-Talaria-Proxy: blocked\r\n\r\n{body}",
        body.len()
    );
    client.write_all(msg.as_bytes()).await?;
    client.shutdown().await
}

/// Read until the end of the head; returns it and whatever came after it.
async fn read_head(client: &mut TcpStream) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + end + 4;
            let rest = buf.split_off(end);
            return Ok(Some((buf, rest)));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

struct Request {
    auth: Option<String>,
    kind: Kind,
}

enum Kind {
    Connect { host: String, port: u16 },
    Forward { host: String, port: u16, head: Vec<u8> },
}

/// Parse a proxy request head. A forwarded request is rewritten for the origin: the path
/// alone on the request line, the proxy's own headers dropped, `Connection: close`.
fn parse_head(head: &[u8]) -> Option<Request> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next()?;
    let mut parts = request_line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") {
        return None;
    }
    let mut auth = None;
    let mut kept = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        let lower = name.trim().to_ascii_lowercase();
        match lower.as_str() {
            "proxy-authorization" => auth = Some(value.trim().to_string()),
            "proxy-connection" | "connection" | "keep-alive" => {}
            _ => kept.push(line),
        }
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = policy::split_authority(target, 443)?;
        return Some(Request { auth, kind: Kind::Connect { host, port } });
    }
    let rest = target.strip_prefix("http://").or_else(|| target.strip_prefix("HTTP://"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = policy::split_authority(authority, 80)?;
    let mut out = format!("{method} {path} {version}\r\n");
    for line in kept {
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    Some(Request { auth, kind: Kind::Forward { host, port, head: out.into_bytes() } })
}

fn random_hex(bytes: usize) -> String {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).is_err() {
        // No urandom: still unguessable enough from outside for one session.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let mix = t.as_nanos() ^ u128::from(std::process::id()) << 64;
        buf.iter_mut().enumerate().for_each(|(i, b)| *b = (mix >> ((i % 16) * 8)) as u8);
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn base64_encodes_as_rfc_4648() {
        for (input, want) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("job_1:ab", "am9iXzE6YWI=")] {
            assert_eq!(base64(input.as_bytes()), want);
        }
    }

    #[test]
    fn a_forwarded_head_loses_the_proxy_headers_and_names_only_the_path() {
        let head = b"GET http://Example.com:8080/a?b HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        let req = parse_head(head).unwrap();
        assert_eq!(req.auth.as_deref(), Some("Basic eA=="));
        let Kind::Forward { host, port, head } = req.kind else { panic!("not forwarded") };
        assert_eq!((host.as_str(), port), ("example.com", 8080));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /a?b HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let connect = parse_head(b"CONNECT [::1]:8443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(matches!(connect.kind, Kind::Connect { ref host, port: 8443 } if host == "::1"));
        assert!(parse_head(b"GET /relative HTTP/1.1\r\n\r\n").is_none());
        assert!(parse_head(b"GET https://x/ HTTP/1.1\r\n\r\n").is_none());
        assert!(parse_head(b"GARBAGE\r\n\r\n").is_none());
    }

    #[test]
    fn the_question_names_the_job_its_command_and_the_host() {
        let q = Question {
            job: "job_4".into(),
            command: "npm install".into(),
            host: "registry.npmjs.org".into(),
            port: 443,
            note: None,
        };
        assert_eq!(q.shown(), "job_4 (`npm install`) wants registry.npmjs.org:443");
        let v6 = Question {
            job: "job_1".into(),
            command: "x".into(),
            host: "::1".into(),
            port: 80,
            note: Some("it resolves to ::1, this machine".into()),
        };
        assert_eq!(v6.shown(), "job_1 (`x`) wants [::1]:80 — it resolves to ::1, this machine");
    }
}
