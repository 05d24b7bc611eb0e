//! MCP client (DESIGN §12): the servers in `[mcp.servers]`, started in the background, and
//! their tools offered to the model as `<server>__<tool>`. `McpHandle` is the actor's
//! handle: the engine starts it once the front end has drawn, the tool registry reads its
//! current tool table, `/mcp` reads its state. Nothing here blocks a turn: a call has a
//! deadline, an interrupt or a redirect cancels it (`notifications/cancelled`).

pub mod guard;
pub(crate) mod names;
pub(crate) mod process;
pub(crate) mod result;
mod server;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
use rmcp::service::PeerRequestOptions;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, McpServerConfig};
use crate::engine::approval::Verdict;
use crate::engine::tools::{Concurrency, Tool, ToolCtx, ToolResult, ToolSource};
use crate::engine::EventSink;
use crate::protocol::{Event, McpServerInfo, McpToolInfo, NoticeLevel, ToolStatus};
use crate::util::lock;

pub(crate) use crate::protocol::McpState as ServerState;

/// One tool as a server described it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolDef {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) schema: Value,
    pub(crate) read_only: bool,
}

impl ToolDef {
    /// From the JSON of an MCP `Tool`.
    pub(crate) fn from_json(v: &Value) -> Option<ToolDef> {
        let name = v.get("name")?.as_str()?.to_string();
        let description = v.get("description").and_then(Value::as_str).unwrap_or("").to_string();
        let mut schema = v.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"}));
        if schema.get("type").is_none() {
            schema["type"] = json!("object");
        }
        let read_only = v.pointer("/annotations/readOnlyHint").and_then(Value::as_bool).unwrap_or(false);
        Some(ToolDef { name, description, schema, read_only })
    }
}

struct Slot {
    cfg: McpServerConfig,
    state: ServerState,
    tools: Vec<ToolDef>,
    last_error: Option<String>,
    peer: Option<rmcp::Peer<rmcp::RoleClient>>,
    /// Cancels the task that runs this server (restart, shutdown).
    stop: CancellationToken,
    /// Bumped by each (re)start; a task of an older generation changes nothing.
    generation: u64,
    /// A ping task watches this server (after a call timed out).
    pinging: bool,
}

/// One exposed tool: which server, which of its tools.
#[derive(Debug, Clone)]
struct Entry {
    server: String,
    tool: ToolDef,
}

struct Inner {
    config: Arc<Config>,
    events: EventSink,
    dir: PathBuf,
    cwd: PathBuf,
    servers: Mutex<BTreeMap<String, Slot>>,
    table: RwLock<Arc<BTreeMap<String, Entry>>>,
    started: AtomicBool,
    /// Bumped whenever any server's state changes (waiters poll the states).
    changed: watch::Sender<u64>,
    /// Headless runs (`exec`) wait for the servers before the first model request.
    wait_at_first_request: bool,
    shut_down: AtomicBool,
}

/// The MCP actor's handle. Cheap to clone.
#[derive(Clone)]
pub struct McpHandle {
    inner: Arc<Inner>,
}

impl McpHandle {
    /// Servers from `config`, not started yet (`begin` starts them).
    pub fn new(
        config: Arc<Config>,
        logs_dir: &std::path::Path,
        cwd: PathBuf,
        events: EventSink,
        wait_at_first_request: bool,
    ) -> McpHandle {
        let servers = config
            .mcp
            .servers
            .iter()
            .map(|(name, cfg)| {
                let slot = Slot {
                    cfg: cfg.clone(),
                    state: if cfg.enabled { ServerState::Waiting } else { ServerState::Disabled },
                    tools: Vec::new(),
                    last_error: None,
                    peer: None,
                    stop: CancellationToken::new(),
                    generation: 0,
                    pinging: false,
                };
                (name.clone(), slot)
            })
            .collect();
        McpHandle {
            inner: Arc::new(Inner {
                config,
                events,
                dir: process::dir(logs_dir),
                cwd,
                servers: Mutex::new(servers),
                table: RwLock::new(Arc::new(BTreeMap::new())),
                started: AtomicBool::new(false),
                changed: watch::channel(0).0,
                wait_at_first_request,
                shut_down: AtomicBool::new(false),
            }),
        }
    }

    /// Start every enabled server in the background (once; later calls do nothing). First
    /// kills what a crashed talaria left behind.
    pub fn begin(&self) {
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            // Also with no server configured now: one may have been removed since the crash.
            let dir = me.inner.dir.clone();
            let _ = tokio::task::spawn_blocking(move || process::sweep(&dir)).await;
            let names: Vec<String> = lock(&me.inner.servers)
                .iter()
                .filter(|(_, s)| s.state == ServerState::Waiting)
                .map(|(n, _)| n.clone())
                .collect();
            for name in names {
                me.start_server(&name);
            }
        });
    }

    /// (Re)start one server: stops the running one first. Err names what is wrong.
    pub(crate) fn restart(&self, name: &str) -> Result<(), String> {
        if self.inner.shut_down.load(Ordering::SeqCst) {
            return Err("talaria is shutting down".into());
        }
        {
            let servers = lock(&self.inner.servers);
            let Some(slot) = servers.get(name) else {
                return Err(format!("no MCP server named '{name}'; /mcp lists them"));
            };
            if slot.state == ServerState::Disabled {
                return Err(format!("MCP server '{name}' is disabled (enabled = false in config.toml)"));
            }
        }
        self.inner.started.store(true, Ordering::SeqCst);
        self.start_server(name);
        Ok(())
    }

    fn start_server(&self, name: &str) {
        let (generation, stop, cfg) = {
            let mut servers = lock(&self.inner.servers);
            let Some(slot) = servers.get_mut(name) else { return };
            slot.stop.cancel();
            slot.stop = CancellationToken::new();
            slot.generation += 1;
            slot.state = ServerState::Starting;
            slot.peer = None;
            slot.pinging = false;
            (slot.generation, slot.stop.clone(), slot.cfg.clone())
        };
        self.bump();
        let me = self.clone();
        let name = name.to_string();
        tokio::spawn(async move { server::run(me, name, generation, cfg, stop).await });
    }

    /// Stop every server and kill their process groups (talaria is quitting).
    pub async fn shutdown(&self) {
        self.inner.shut_down.store(true, Ordering::SeqCst);
        let stops: Vec<CancellationToken> = lock(&self.inner.servers).values().map(|s| s.stop.clone()).collect();
        for stop in &stops {
            stop.cancel();
        }
        // Each server task kills its group once cancelled; wait (bounded) until none runs.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut changed = self.inner.changed.subscribe();
        loop {
            let running = lock(&self.inner.servers)
                .values()
                .any(|s| matches!(s.state, ServerState::Starting | ServerState::Ready | ServerState::Unresponsive));
            if !running {
                return;
            }
            if tokio::time::timeout_at(deadline, changed.changed()).await.is_err() {
                return;
            }
        }
    }

    /// Headless runs: wait until no server is still starting (each has its own deadline).
    pub async fn wait_for_startup(&self, interrupt: &CancellationToken) {
        if !self.inner.wait_at_first_request {
            return;
        }
        let mut changed = self.inner.changed.subscribe();
        loop {
            let starting = lock(&self.inner.servers)
                .values()
                .any(|s| matches!(s.state, ServerState::Starting | ServerState::Waiting));
            if !starting {
                return;
            }
            tokio::select! {
                r = changed.changed() => if r.is_err() { return },
                _ = interrupt.cancelled() => return,
            }
        }
    }

    /// Every server, in name order.
    pub fn status(&self) -> Vec<McpServerInfo> {
        let table = self.table();
        lock(&self.inner.servers)
            .iter()
            .map(|(name, slot)| McpServerInfo {
                name: name.clone(),
                transport: transport_label(&slot.cfg),
                state: slot.state,
                tools: table
                    .iter()
                    .filter(|(_, e)| &e.server == name)
                    .map(|(n, e)| McpToolInfo { exposed: n.clone(), description: e.tool.description.clone() })
                    .collect(),
                last_error: slot.last_error.clone(),
            })
            .collect()
    }

    fn table(&self) -> Arc<BTreeMap<String, Entry>> {
        self.inner.table.read().map(|t| t.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// The tool definitions for the next model request.
    pub(crate) fn definitions(&self) -> Vec<Value> {
        self.table()
            .iter()
            .map(|(name, e)| {
                json!({"type": "function", "function": {
                    "name": name,
                    "description": e.tool.description,
                    "parameters": e.tool.schema,
                }})
            })
            .collect()
    }

    /// The tool the model calls by `name`, if it is an MCP tool.
    pub(crate) fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let entry = self.table().get(name)?.clone();
        Some(Arc::new(McpTool { handle: self.clone(), exposed: name.to_string(), entry }))
    }

    fn bump(&self) {
        self.inner.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Rebuild the exposed-name table from every server's tools (servers whose tools are
    /// known keep them while down, so their calls answer with an error naming the server).
    fn rebuild_table(&self) {
        let servers = lock(&self.inner.servers);
        let mut pairs = Vec::new();
        let mut defs = Vec::new();
        for (name, slot) in servers.iter() {
            for tool in &slot.tools {
                pairs.push((name.clone(), tool.name.clone()));
                defs.push(Entry { server: name.clone(), tool: tool.clone() });
            }
        }
        drop(servers);
        let names = names::exposed_names(&pairs);
        let table: BTreeMap<String, Entry> = names.into_iter().zip(defs).collect();
        match self.inner.table.write() {
            Ok(mut t) => *t = Arc::new(table),
            Err(p) => *p.into_inner() = Arc::new(table),
        }
    }

    /// Apply `f` to the slot of `name` if `generation` is still current, then rebuild the
    /// tool table and wake the waiters; true if applied.
    fn update(&self, name: &str, generation: u64, f: impl FnOnce(&mut Slot)) -> bool {
        let applied = {
            let mut servers = lock(&self.inner.servers);
            match servers.get_mut(name) {
                Some(slot) if slot.generation == generation => {
                    f(slot);
                    true
                }
                _ => false,
            }
        };
        if applied {
            // The table first: whoever wakes on the bump sees tools and state agree.
            self.rebuild_table();
            self.bump();
        }
        applied
    }

    fn notice(&self, level: NoticeLevel, text: String) {
        if !self.inner.shut_down.load(Ordering::SeqCst) {
            self.inner.events.send(Event::notice(level, text));
        }
    }

    /// Call `tool` on `server`: bounded by its `tool_timeout_s`, cancelled by an interrupt
    /// or a redirect.
    async fn call(&self, server: &str, tool: &str, args: Value, ctx: &ToolCtx) -> ToolResult {
        let (peer, timeout) = {
            let servers = lock(&self.inner.servers);
            let Some(slot) = servers.get(server) else {
                return ToolResult::error(format!("MCP server '{server}' is no longer configured"));
            };
            match (&slot.peer, slot.state) {
                // An unresponsive server still gets the call: an answer is how it comes back.
                (Some(peer), ServerState::Ready | ServerState::Unresponsive) => {
                    (peer.clone(), Duration::from_secs_f64(slot.cfg.tool_timeout_s))
                }
                _ => return ToolResult::error(unavailable(server, slot)),
            }
        };
        let arguments = match args {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(tool.to_string()).with_arguments(arguments),
        ));
        let mut yield_gen = ctx.signals.yield_gen.clone();
        yield_gen.mark_unchanged();
        let deadline = tokio::time::Instant::now() + timeout;
        let sent =
            tokio::time::timeout_at(deadline, peer.send_cancellable_request(request, PeerRequestOptions::no_options()));
        let mut handle = tokio::select! {
            sent = sent => match sent {
                Ok(Ok(handle)) => handle,
                Ok(Err(e)) => return ToolResult::error(format!("MCP server '{server}' could not take the call: {e}")),
                Err(_) => return self.timed_out(server, tool, timeout),
            },
            _ = ctx.signals.interrupt.cancelled() => return interrupted(server, tool),
        };
        let outcome = tokio::select! {
            answer = &mut handle.rx => Some(answer),
            _ = ctx.signals.interrupt.cancelled() => None,
            _ = yield_gen.changed() => None,
            _ = tokio::time::sleep_until(deadline) => {
                cancel_in_background(handle, "timed out (tool_timeout_s)");
                return self.timed_out(server, tool, timeout);
            }
        };
        match outcome {
            None => {
                let by_interrupt = ctx.signals.interrupt.is_cancelled();
                cancel_in_background(handle, if by_interrupt { "interrupted by the user" } else { "the user sent a new message" });
                if by_interrupt {
                    interrupted(server, tool)
                } else {
                    ToolResult::error(format!(
                        "cancelled: the user sent a message while MCP server '{server}' ran '{tool}'; read it, then call the tool again if it is still needed"
                    ))
                    .with_status(ToolStatus::Interrupted)
                }
            }
            Some(Ok(Ok(answer))) => {
                self.answered(server);
                let value = serde_json::to_value(&answer).unwrap_or(Value::Null);
                let (value, ok) = result::to_model(server, tool, &value, self.inner.config.tool_output.max_chars);
                ToolResult { value, ok, exit_code: None, status: None }
            }
            Some(Ok(Err(e))) => {
                if matches!(e, rmcp::ServiceError::McpError(_)) {
                    // An error it sent is an answer too.
                    self.answered(server);
                }
                ToolResult::error(format!("MCP server '{server}', tool '{tool}': {e}"))
            }
            Some(Err(_)) => ToolResult::error(format!(
                "MCP server '{server}' closed the connection during the call to '{tool}' (it may have crashed; /mcp shows its state)"
            )),
        }
    }

    fn timed_out(&self, server: &str, tool: &str, timeout: Duration) -> ToolResult {
        let text = format!(
            "MCP server '{server}' did not answer '{tool}' within {} s (tool_timeout_s); the call was cancelled",
            fmt_secs(timeout)
        );
        {
            let mut servers = lock(&self.inner.servers);
            if let Some(slot) = servers.get_mut(server) {
                slot.last_error = Some(text.clone());
            }
        }
        self.notice(NoticeLevel::Warn, text.clone());
        self.probe(server, timeout);
        ToolResult::error(text)
    }

    /// A call timed out: is the server still there? Ping it (bounded by `PING_TIMEOUT` and
    /// the call's own timeout); no answer makes it unresponsive, and it is pinged again
    /// every `REPING` until it answers (ready again), is restarted or goes.
    fn probe(&self, server: &str, call_timeout: Duration) {
        let (peer, generation) = {
            let mut servers = lock(&self.inner.servers);
            let Some(slot) = servers.get_mut(server) else { return };
            let Some(peer) = slot.peer.clone() else { return };
            if slot.pinging || !matches!(slot.state, ServerState::Ready | ServerState::Unresponsive) {
                return;
            }
            slot.pinging = true;
            (peer, slot.generation)
        };
        let within = call_timeout.min(PING_TIMEOUT);
        let me = self.clone();
        let server = server.to_string();
        tokio::spawn(async move {
            loop {
                let answered = ping(&peer, within).await;
                let mut became = None;
                let keep_on = me.update(&server, generation, |slot| match (answered, slot.state) {
                    (false, ServerState::Ready) => {
                        slot.state = ServerState::Unresponsive;
                        became = Some(ServerState::Unresponsive);
                    }
                    (true, ServerState::Unresponsive) => {
                        slot.state = ServerState::Ready;
                        became = Some(ServerState::Ready);
                    }
                    (_, ServerState::Disabled | ServerState::Waiting | ServerState::Starting)
                    | (_, ServerState::Ready | ServerState::Unresponsive | ServerState::Failed) => {}
                });
                let still = keep_on
                    && !answered
                    && !me.inner.shut_down.load(Ordering::SeqCst)
                    && lock(&me.inner.servers).get(&server).is_some_and(|s| s.state == ServerState::Unresponsive);
                match became {
                    Some(ServerState::Unresponsive) => me.notice(
                        NoticeLevel::Warn,
                        format!(
                            "MCP server '{server}' is unresponsive: no answer to a ping within {} s after a call timed out; its calls will likely time out too (/mcp restart {server} starts it again)",
                            fmt_secs(within)
                        ),
                    ),
                    Some(ServerState::Ready) => {
                        me.notice(NoticeLevel::Info, format!("MCP server '{server}' answers again"))
                    }
                    Some(
                        ServerState::Disabled
                        | ServerState::Waiting
                        | ServerState::Starting
                        | ServerState::Failed,
                    )
                    | None => {}
                }
                if !still {
                    break;
                }
                tokio::time::sleep(REPING).await;
            }
            me.update(&server, generation, |slot| slot.pinging = false);
        });
    }

    /// The server answered a call: an unresponsive one is ready again.
    fn answered(&self, server: &str) {
        let generation = lock(&self.inner.servers).get(server).map(|s| s.generation);
        let Some(generation) = generation else { return };
        let mut revived = false;
        self.update(server, generation, |slot| {
            if slot.state == ServerState::Unresponsive {
                slot.state = ServerState::Ready;
                revived = true;
            }
        });
        if revived {
            self.notice(NoticeLevel::Info, format!("MCP server '{server}' answers again"));
        }
    }

    /// May this call run? Asks once per server and tool unless the server is trusted.
    async fn approve(&self, server: &str, tool: &str, summary: &str, ctx: &ToolCtx) -> Verdict {
        let trusted = lock(&self.inner.servers).get(server).is_some_and(|s| s.cfg.trust);
        if trusted {
            return Verdict::Allowed { note: None, by: crate::engine::approval::Provenance::Rule };
        }
        ctx.approvals.check_mcp(server, tool, summary, &ctx.signals.interrupt).await
    }
}

fn interrupted(server: &str, tool: &str) -> ToolResult {
    ToolResult {
        value: json!({"error": format!("[interrupted] the user interrupted the call to '{tool}' on MCP server '{server}'; it was cancelled")}),
        ok: false,
        exit_code: None,
        status: Some(ToolStatus::Interrupted),
    }
}

/// How long a ping after a timed-out call may take at most.
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an unresponsive server is pinged again.
const REPING: Duration = Duration::from_secs(5);

/// Does the server answer a ping within `within`? Any answer counts, an error too (a
/// 2026-07-28 server has no `ping` and says so: it is there).
async fn ping(peer: &rmcp::Peer<rmcp::RoleClient>, within: Duration) -> bool {
    let request = ClientRequest::PingRequest(rmcp::model::PingRequest {
        method: Default::default(),
        extensions: Default::default(),
    });
    matches!(
        tokio::time::timeout(within, peer.send_request(request)).await,
        Ok(Ok(_) | Err(rmcp::ServiceError::McpError(_) | rmcp::ServiceError::UnexpectedResponse))
    )
}

/// Send `notifications/cancelled` without holding up the turn (bounded, in the background).
fn cancel_in_background(handle: rmcp::service::RequestHandle<rmcp::RoleClient>, reason: &'static str) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(5), handle.cancel(Some(reason.to_string()))).await;
    });
}

fn unavailable(server: &str, slot: &Slot) -> String {
    let why = slot.last_error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
    let state = match slot.state {
        ServerState::Starting | ServerState::Waiting => "is still starting".to_string(),
        ServerState::Disabled => "is disabled".to_string(),
        ServerState::Ready | ServerState::Unresponsive | ServerState::Failed => format!("is not running{why}"),
    };
    format!("MCP server '{server}' {state}; its tools answer with this error until it is back (/mcp restart {server})")
}

pub(crate) fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s:.1}")
    }
}

fn transport_label(cfg: &McpServerConfig) -> String {
    if cfg.url.is_empty() {
        let mut line = cfg.command.clone();
        for a in &cfg.args {
            line.push(' ');
            line.push_str(a);
        }
        format!("stdio: {line}")
    } else {
        format!("http: {}", cfg.url)
    }
}

/// An MCP tool as the turn loop sees it.
struct McpTool {
    handle: McpHandle,
    exposed: String,
    entry: Entry,
}

/// The servers' tools, as the tool registry asks for them.
impl ToolSource for McpHandle {
    fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        McpHandle::tool(self, name)
    }

    fn definitions(&self) -> Vec<Value> {
        McpHandle::definitions(self)
    }
}

/// Arguments in one short line: `key=value, …`, long values cut.
pub(crate) fn summarise_args(args: &Value) -> String {
    let Some(map) = args.as_object() else { return String::new() };
    let parts: Vec<String> = map
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let v: String = if v.chars().count() > 40 { v.chars().take(39).chain(['…']).collect() } else { v };
            format!("{k}={}", v.replace('\n', " "))
        })
        .collect();
    let line = parts.join(", ");
    if line.chars().count() > 120 {
        line.chars().take(119).chain(['…']).collect()
    } else {
        line
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.exposed
    }

    fn description(&self) -> &str {
        &self.entry.tool.description
    }

    fn parameters(&self) -> Value {
        self.entry.tool.schema.clone()
    }

    fn concurrency(&self) -> Concurrency {
        if self.entry.tool.read_only {
            Concurrency::Parallel
        } else {
            Concurrency::Sequential
        }
    }

    fn summary(&self, args: &Value) -> String {
        summarise_args(args)
    }

    fn label(&self) -> String {
        format!("{} › {}", self.entry.server, self.entry.tool.name)
    }

    async fn call(&self, args: Value, ctx: ToolCtx) -> ToolResult {
        let server = &self.entry.server;
        let tool = &self.entry.tool.name;
        let shown = format!("{}  {}", self.label(), self.summary(&args)).trim_end().to_string();
        match self.handle.approve(server, tool, &shown, &ctx).await {
            Verdict::Allowed { .. } => {}
            Verdict::Denied { reason } => return ToolResult::error(format!("not run: {reason}")),
        }
        self.handle.call(server, tool, args, &ctx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_summarised_on_one_short_line() {
        assert_eq!(summarise_args(&json!({"a": 1, "b": "x\ny"})), "a=1, b=x y");
        let long = summarise_args(&json!({"text": "z".repeat(100)}));
        assert!(long.chars().count() <= 46, "{long}");
    }

    #[test]
    fn tool_definitions_are_read_from_the_server_json() {
        let t = ToolDef::from_json(&json!({"name": "echo", "description": "Echo", "inputSchema": {"properties": {}}, "annotations": {"readOnlyHint": true}})).unwrap();
        assert_eq!(t.name, "echo");
        assert_eq!(t.schema["type"], "object");
        assert!(t.read_only);
        assert!(ToolDef::from_json(&json!({"description": "nameless"})).is_none());
    }
}
