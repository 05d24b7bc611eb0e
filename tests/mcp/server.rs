//! The MCP test server, written with rmcp's server side. The test binary runs as this
//! server when `TALARIA_MCP_TEST_SERVER` is `stdio` or `http`:
//! - tools with arguments (`add`, `echo`), an erroring tool (`fail`), a slow tool for
//!   cancel and timeout (`slow`; with `freeze: true` the whole server stops, a hung
//!   server with its connection open, until SIGCONT), one that crashes the server mid-call (`crash`), one that
//!   adds a tool and sends `tools/list_changed` (`grow`), one returning an image (`picture`);
//! - `TALARIA_MCP_TEST_DIR`: where it writes what happened (`up`, `slow-started`,
//!   `slow-cancelled`), so tests wait for states instead of sleeping;
//! - `TALARIA_MCP_TEST_DELAY_MS`: a slow start-up (before it answers anything).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};

#[derive(Clone)]
struct TestServer {
    grown: Arc<AtomicBool>,
    dir: PathBuf,
}

impl TestServer {
    fn mark(&self, what: &str) {
        let _ = std::fs::write(self.dir.join(what), b"");
    }
}

fn tools(grown: bool) -> Value {
    let number = json!({"type": "number"});
    let mut list = vec![
        json!({"name": "add", "description": "Add two numbers", "inputSchema": {"type": "object", "properties": {"a": number, "b": number}, "required": ["a", "b"]}}),
        json!({"name": "echo", "description": "Echo the text back", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}, "annotations": {"readOnlyHint": true}}),
        json!({"name": "fail", "description": "Always fails", "inputSchema": {"type": "object"}}),
        json!({"name": "slow", "description": "Takes `seconds` to answer", "inputSchema": {"type": "object", "properties": {"seconds": number}}}),
        json!({"name": "crash", "description": "Crashes the server mid-call", "inputSchema": {"type": "object"}}),
        json!({"name": "grow", "description": "Adds the tool `extra`", "inputSchema": {"type": "object"}}),
        json!({"name": "picture", "description": "Returns an image", "inputSchema": {"type": "object"}}),
    ];
    if grown {
        list.push(json!({"name": "extra", "description": "Appeared later", "inputSchema": {"type": "object"}}));
    }
    json!({ "tools": list })
}

fn result(v: Value) -> Result<CallToolResponse, ErrorData> {
    let r: CallToolResult = serde_json::from_value(v).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    Ok(r.into())
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(Implementation::new("talaria-test-server", "1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        serde_json::from_value(tools(self.grown.load(Ordering::SeqCst)))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        match request.name.as_ref() {
            "add" => {
                let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                result(
                    json!({"content": [{"type": "text", "text": format!("sum={sum}")}], "structuredContent": {"sum": sum}}),
                )
            }
            "echo" => result(
                json!({"content": [{"type": "text", "text": format!("echo: {}", args["text"].as_str().unwrap_or(""))}]}),
            ),
            "fail" => result(json!({"content": [{"type": "text", "text": "it failed on purpose"}], "isError": true})),
            "picture" => result(json!({"content": [
                {"type": "text", "text": "a picture:"},
                {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"}
            ]})),
            "slow" if args["freeze"] == json!(true) => {
                // A hung server: the whole process stops, its connection stays open.
                std::fs::write(self.dir.join("pid"), std::process::id().to_string()).expect("write pid");
                self.mark("frozen");
                // SAFETY: stopping ourselves; the test sends SIGCONT or kills us.
                unsafe { libc::raise(libc::SIGSTOP) };
                result(json!({"content": [{"type": "text", "text": "thawed"}]}))
            }
            "slow" => {
                self.mark("slow-started");
                let secs = args["seconds"].as_f64().unwrap_or(600.0);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs_f64(secs)) => result(json!({"content": [{"type": "text", "text": "slow done"}]})),
                    _ = context.ct.cancelled() => {
                        self.mark("slow-cancelled");
                        Err(ErrorData::internal_error("cancelled", None))
                    }
                }
            }
            "crash" => {
                self.mark("crashing");
                std::process::exit(3);
            }
            "grow" => {
                self.grown.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                result(json!({"content": [{"type": "text", "text": "grown"}]}))
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

/// Run as the server (never returns normally: the process exits when the client goes).
pub fn main(mode: &str) {
    let dir = PathBuf::from(std::env::var("TALARIA_MCP_TEST_DIR").unwrap_or_else(|_| ".".into()));
    let delay = std::env::var("TALARIA_MCP_TEST_DELAY_MS").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = TestServer { grown: Arc::new(AtomicBool::new(false)), dir };
    runtime.block_on(async move {
        tokio::time::sleep(Duration::from_millis(delay)).await;
        match mode {
            "stdio" => {
                let running = server.clone().serve(rmcp::transport::stdio()).await.expect("serve stdio");
                server.mark("up");
                let _ = running.waiting().await;
            }
            "http" => serve_http(server).await,
            other => panic!("unknown TALARIA_MCP_TEST_SERVER mode {other}"),
        }
    });
    std::process::exit(0);
}

async fn serve_http(server: TestServer) {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let factory = server.clone();
    let service = StreamableHttpService::new(
        move || Ok(factory.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::fs::write(server.dir.join("port"), port.to_string()).expect("write port");
    server.mark("up");
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let svc = service.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let svc = hyper_util::service::TowerToHyperService::new(svc);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
        });
    }
}
