//! One server's life: connect (spawn a stdio process or open a streamable-HTTP session)
//! within `startup_timeout_s`, list its tools, then follow it — a `tools/list_changed`
//! re-reads the list, an exit or a closed connection marks it failed — until it is
//! stopped (restart, shutdown), which kills its process group.

use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion, SubscriptionFilter};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::process::{self, ServerProcess};
use super::{fmt_secs, McpHandle, ServerState, ToolDef};
use crate::config::McpServerConfig;
use crate::protocol::NoticeLevel;

/// Tells the server task that the tool list changed.
#[derive(Clone)]
pub(super) struct Handler {
    changed: mpsc::UnboundedSender<()>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        let _ = self.changed.send(());
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("talaria", env!("CARGO_PKG_VERSION")))
    }
}

type Client = RunningService<RoleClient, Handler>;

/// Grace between SIGTERM and SIGKILL for a server's group.
const KILL_GRACE: Duration = Duration::from_millis(500);

pub(super) async fn run(mcp: McpHandle, name: String, generation: u64, cfg: McpServerConfig, stop: CancellationToken) {
    let (changed_tx, mut changed_rx) = mpsc::unbounded_channel();
    let changed_tx_for_listen = changed_tx.clone();
    let handler = Handler { changed: changed_tx };
    let startup = Duration::from_secs_f64(cfg.startup_timeout_s);
    let mut proc: Option<ServerProcess> = None;
    let connected = tokio::select! {
        r = tokio::time::timeout(startup, connect(&mcp, &name, &cfg, handler, &mut proc)) => match r {
            Ok(r) => r,
            Err(_) => Err(format!("did not start within {} s (startup_timeout_s)", fmt_secs(startup))),
        },
        _ = stop.cancelled() => Err("stopped".into()),
    };
    let (client, tools) = match connected {
        Ok(ok) => ok,
        Err(why) => {
            let why = with_stderr_tail(&mcp, &name, proc.as_ref().map(|p| p.log_start), why);
            if let Some(p) = proc.take() {
                p.stop(KILL_GRACE).await;
            }
            let cancelled = stop.is_cancelled();
            let applied = mcp.update(&name, generation, |s| {
                s.state = ServerState::Failed;
                s.peer = None;
                if !cancelled {
                    s.last_error = Some(why.clone());
                }
            });
            if applied && !cancelled {
                mcp.notice(
                    NoticeLevel::Warn,
                    format!(
                        "MCP server '{name}' failed to start: {why} (/mcp shows it; /mcp restart {name} tries again)"
                    ),
                );
            }
            return;
        }
    };
    let count = tools.len();
    let peer = client.peer().clone();
    if !mcp.update(&name, generation, |s| {
        s.state = ServerState::Ready;
        s.tools = tools;
        s.peer = Some(peer.clone());
        s.last_error = None;
    }) {
        // Restarted meanwhile: this connection is stale.
        let _ = tokio::time::timeout(Duration::from_secs(2), client.cancel()).await;
        if let Some(p) = proc.take() {
            p.stop(KILL_GRACE).await;
        }
        return;
    }
    tracing::info!(server = %name, tools = count, "MCP server ready");
    // On a 2026-07-28 connection list changes come on a listen stream that asked for them;
    // older servers send them unscoped (the handler's callback).
    let new_protocol = peer.peer_info().is_some_and(|i| i.protocol_version == ProtocolVersion::V_2026_07_28);
    let mut subscription = if new_protocol {
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        tokio::time::timeout(Duration::from_secs(5), peer.listen(filter)).await.ok().and_then(Result::ok)
    } else {
        None
    };
    let cancel = client.cancellation_token();
    let mut waiting = Box::pin(client.waiting());
    let tool_timeout = Duration::from_secs_f64(cfg.tool_timeout_s);
    let ended = loop {
        tokio::select! {
            _ = stop.cancelled() => {
                cancel.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(2), &mut waiting).await;
                break None;
            }
            _ = &mut waiting => break Some("the connection closed".to_string()),
            note = next_notification(&mut subscription) => match note {
                Some(_) => { let _ = changed_tx_for_listen.send(()); }
                None => subscription = None,
            },
            Some(()) = changed_rx.recv() => {
                match tokio::time::timeout(tool_timeout, peer.list_all_tools()).await {
                    Ok(Ok(list)) => {
                        let tools = to_defs(&list);
                        tracing::info!(server = %name, tools = tools.len(), "MCP tool list changed");
                        mcp.update(&name, generation, |s| s.tools = tools);
                    }
                    Ok(Err(e)) => tracing::warn!(server = %name, error = %e, "cannot re-read the MCP tool list"),
                    Err(_) => tracing::warn!(server = %name, "re-reading the MCP tool list timed out"),
                }
            }
        }
    };
    let why = match (ended, proc.as_mut()) {
        (None, _) => None,
        (Some(w), None) => Some(w),
        (Some(w), Some(p)) => {
            let w = match p.exit_within(Duration::from_secs(1)).await {
                Some(status) => format!("the server exited ({status})"),
                None => w,
            };
            Some(with_stderr_tail(&mcp, &name, Some(p.log_start), w))
        }
    };
    if let Some(p) = proc.take() {
        p.stop(KILL_GRACE).await;
    }
    let applied = mcp.update(&name, generation, |s| {
        s.state = ServerState::Failed;
        s.peer = None;
        if let Some(w) = &why {
            s.last_error = Some(w.clone());
        }
    });
    if let (true, Some(why)) = (applied, why) {
        mcp.notice(
            NoticeLevel::Warn,
            format!("MCP server '{name}' stopped: {why}; its tools answer with an error until /mcp restart {name}"),
        );
    }
}

async fn connect(
    mcp: &McpHandle,
    name: &str,
    cfg: &McpServerConfig,
    handler: Handler,
    proc: &mut Option<ServerProcess>,
) -> Result<(Client, Vec<ToolDef>), String> {
    let client = if cfg.url.is_empty() {
        let (p, stdout, stdin) = process::spawn(name, cfg, &mcp.inner.cwd, &mcp.inner.dir)?;
        let p = proc.insert(p);
        let pid = p.started().await?;
        tracing::debug!(server = %name, pid, guard = p.pgid, "MCP server started under its guard");
        handler.serve((stdout, stdin)).await.map_err(|e| format!("the MCP handshake failed: {e}"))?
    } else {
        let http = crate::engine::llm::client::http_client(Duration::from_secs(10)).map_err(|e| e.to_string())?;
        let mut config = StreamableHttpClientTransportConfig::with_uri(cfg.url.clone());
        // A server that went away is noticed in seconds, not retried forever.
        let mut backoff = rmcp::transport::common::client_side_sse::ExponentialBackoff::default();
        backoff.max_times = Some(3);
        backoff.base_duration = Duration::from_millis(250);
        backoff.max_delay = Some(Duration::from_secs(2));
        config.retry_config = std::sync::Arc::new(backoff);
        if !cfg.bearer_token_env.is_empty() {
            let token = crate::secrets::get(&cfg.bearer_token_env)
                .or_else(|| std::env::var(&cfg.bearer_token_env).ok())
                .filter(|t| !t.is_empty())
                .ok_or_else(|| format!("bearer_token_env names {} but it is not set", cfg.bearer_token_env))?;
            config = config.auth_header(token);
        }
        let mut headers = std::collections::HashMap::new();
        for (k, v) in &cfg.headers {
            let k = reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k}: {e}"))?;
            let v = reqwest::header::HeaderValue::from_str(v).map_err(|e| format!("header {k}: {e}"))?;
            headers.insert(k, v);
        }
        config = config.custom_headers(headers);
        let transport = StreamableHttpClientTransport::with_client(http, config);
        handler.serve(transport).await.map_err(|e| format!("cannot connect to {}: {e}", cfg.url))?
    };
    let list = client.peer().list_all_tools().await.map_err(|e| format!("tools/list failed: {e}"))?;
    Ok((client, to_defs(&list)))
}

/// The next notification of the listen stream; never, when there is none.
async fn next_notification(sub: &mut Option<rmcp::service::Subscription>) -> Option<()> {
    match sub {
        Some(s) => s.next().await.ok().flatten().map(|_| ()),
        None => std::future::pending().await,
    }
}

fn to_defs(list: &[rmcp::model::Tool]) -> Vec<ToolDef> {
    list.iter().filter_map(|t| serde_json::to_value(t).ok()).filter_map(|v| ToolDef::from_json(&v)).collect()
}

/// `why`, with the last line the server wrote to its stderr log, when there is one.
fn with_stderr_tail(mcp: &McpHandle, name: &str, log_start: Option<u64>, why: String) -> String {
    let Some(start) = log_start else { return why };
    let path = process::log_path(&mcp.inner.dir, name);
    let last = std::fs::read(&path).ok().and_then(|bytes| {
        let ours = &bytes[(start as usize).min(bytes.len())..];
        let tail = &ours[ours.len().saturating_sub(4096)..];
        String::from_utf8_lossy(tail).lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string())
    });
    match last {
        Some(line) => {
            let line: String = line.chars().take(200).collect();
            format!("{why}; stderr: {line}")
        }
        None => why,
    }
}
