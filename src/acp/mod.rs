//! `talaria acp`: an Agent Client Protocol agent over stdio (DESIGN §15), the third front end
//! on the same engine as the TUI and `talaria exec`. Editors (Zed, Neovim's CodeCompanion,
//! JetBrains, acpx) start it and speak JSON-RPC on its stdin/stdout; stdout carries nothing
//! else (logs go to the log file).
//!
//! The SDK's handlers only hand requests to [`server::Server`], which runs outside the SDK's
//! dispatch loop: a long turn never holds up a `session/cancel` or a second prompt.

mod server;
mod session;
mod settings;
mod updates;

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    AuthenticateRequest, AuthenticateResponse, CancelNotification, CloseSessionRequest, InitializeRequest,
    InitializeResponse, ListSessionsRequest, LoadSessionRequest, NewSessionRequest, PromptRequest,
    SetSessionConfigOptionRequest, SetSessionModeRequest,
};
use agent_client_protocol::{Agent, Error, JsonRpcRequest, JsonRpcResponse, Stdio};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::engine::api::{SessionChoice, Store};
use crate::protocol::EngineHandle;
use server::Incoming;

/// How `talaria acp` starts the engine of a session: the binary resolves the provider once
/// and starts each engine the way the TUI does (approvals asked of the front end).
#[async_trait::async_trait]
pub trait EngineStarter: Send + Sync {
    async fn start(&self, session: SessionChoice, cwd: PathBuf) -> anyhow::Result<EngineHandle>;
    /// The models the provider lists (empty when it lists none).
    async fn models(&self) -> Vec<String>;
}

pub struct AcpOptions {
    pub config: Arc<Config>,
    /// Read for `session/list` (as `talaria sessions list` reads it); engines own their writes.
    pub store: Store,
    pub starter: Arc<dyn EngineStarter>,
}

/// `session/set_model`, which clients built before session config options still send.
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "session/set_model", response = SetModelResponse)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SetModelRequest {
    session_id: String,
    model_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcResponse)]
pub(crate) struct SetModelResponse {}

/// What Talaria can do, for `initialize`. No authentication: the provider's key comes from
/// the environment variable the config names, as in the terminal.
pub(crate) fn initialize_response(protocol_version: u16) -> Value {
    json!({
        "protocolVersion": protocol_version.min(1),
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": { "image": false, "audio": false, "embeddedContext": true },
            "mcpCapabilities": { "http": false, "sse": false },
            "sessionCapabilities": { "list": {}, "close": {} },
        },
        "authMethods": [],
        "agentInfo": { "name": "talaria", "title": "Talaria", "version": env!("CARGO_PKG_VERSION") },
    })
}

fn hand_over(tx: &mpsc::UnboundedSender<Incoming>, request: Incoming) -> Result<(), Error> {
    tx.send(request).map_err(|_| Error::internal_error().data(json!("talaria is shutting down")))
}

/// Serve ACP on stdin/stdout until the client closes stdin (or a signal); returns the exit code.
pub async fn run(options: AcpOptions) -> anyhow::Result<i32> {
    let (tx, rx) = mpsc::unbounded_channel::<Incoming>();
    let (t1, t2, t3, t4, t5, t6, t7, t8, t9) =
        (tx.clone(), tx.clone(), tx.clone(), tx.clone(), tx.clone(), tx.clone(), tx.clone(), tx.clone(), tx);
    let served = Agent
        .v1()
        .name("talaria")
        .on_receive_request(
            async move |req: InitializeRequest, responder, _cx| {
                let version = serde_json::to_value(req.protocol_version).ok().and_then(|v| v.as_u64()).unwrap_or(1);
                let response: InitializeResponse = serde_json::from_value(initialize_response(version as u16))
                    .map_err(|e| Error::internal_error().data(json!(e.to_string())))?;
                responder.respond(response)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: AuthenticateRequest, responder, _cx| responder.respond(AuthenticateResponse::default()),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder, _cx| hand_over(&t1, Incoming::NewSession(req, responder)),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest, responder, _cx| hand_over(&t2, Incoming::LoadSession(req, responder)),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ListSessionsRequest, responder, _cx| {
                hand_over(&t3, Incoming::ListSessions(req, responder))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, _cx| hand_over(&t4, Incoming::Prompt(req, responder)),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |note: CancelNotification, _cx| hand_over(&t5, Incoming::Cancel(note)),
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: SetSessionModeRequest, responder, _cx| hand_over(&t6, Incoming::SetMode(req, responder)),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: SetSessionConfigOptionRequest, responder, _cx| {
                hand_over(&t7, Incoming::SetConfigOption(req, responder))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: SetModelRequest, responder, _cx| hand_over(&t8, Incoming::SetModel(req, responder)),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CloseSessionRequest, responder, _cx| hand_over(&t9, Incoming::Close(req, responder)),
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(Stdio::new(), async move |cx| {
            server::Server::new(cx, options)
                .run(rx)
                .await
                .map_err(|e| Error::internal_error().data(json!(format!("{e:#}"))))
        })
        .await;
    served.map_err(|e| anyhow::anyhow!("the ACP connection failed: {e}"))
}
