//! Tools the model can call. Each tool turns JSON arguments into a JSON result the model
//! reads (DESIGN §4a); errors are results (`{"error": ...}`), never a crashed turn.

pub mod agent;
pub mod files;
pub mod fs_helper;
pub mod process;
mod remote_files;
pub mod search;
pub mod terminal;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::config::Config;
use crate::engine::approval::Approver;
use crate::engine::jobs::JobsHandle;
use crate::engine::EventSink;
use crate::protocol::ToolStatus;

pub(crate) use crate::engine::args::{arg_bool, arg_str, arg_u64};
pub use crate::engine::signals::ToolSignals;

/// How a tool may be scheduled within one model response (DESIGN §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// May run alongside other `Parallel` tools from the same response.
    Parallel,
    /// Runs alone, in the order given (a `cd` must carry over).
    Sequential,
}

/// Everything a tool call may use.
#[derive(Clone)]
pub struct ToolCtx {
    pub call_id: String,
    pub session_id: String,
    pub config: Arc<Config>,
    /// The session's working directory; `terminal` updates it after each command.
    pub cwd: Arc<Mutex<PathBuf>>,
    pub jobs: JobsHandle,
    pub approvals: Approver,
    pub signals: ToolSignals,
    pub events: EventSink,
}

impl ToolCtx {
    pub(crate) fn cwd(&self) -> PathBuf {
        crate::util::lock(&self.cwd).clone()
    }

    /// Resolve a path argument against the session's working directory (`~` expanded).
    pub(crate) fn resolve(&self, path: &str) -> PathBuf {
        resolve_path(&self.cwd(), path)
    }
}

pub(crate) fn resolve_path(cwd: &Path, path: &str) -> PathBuf {
    let expanded = if let Some(rest) = path.strip_prefix("~/") {
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest)).unwrap_or_else(|| PathBuf::from(path))
    } else if path == "~" {
        std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(path))
    } else {
        PathBuf::from(path)
    };
    if expanded.is_absolute() {
        expanded
    } else {
        cwd.join(expanded)
    }
}

/// What a tool returns: the JSON the model sees plus display facts.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub value: Value,
    pub ok: bool,
    pub exit_code: Option<i32>,
    pub status: Option<ToolStatus>,
}

impl ToolResult {
    pub fn ok(value: Value) -> ToolResult {
        ToolResult { value, ok: true, exit_code: None, status: None }
    }

    pub(crate) fn error(message: impl Into<String>) -> ToolResult {
        ToolResult { value: json!({ "error": message.into() }), ok: false, exit_code: None, status: None }
    }

    pub(crate) fn with_status(mut self, status: ToolStatus) -> ToolResult {
        self.status = Some(status);
        self
    }
}

#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    fn concurrency(&self) -> Concurrency;
    /// One line for the UI's tool cell.
    fn summary(&self, args: &Value) -> String;
    /// The name the UI shows (an MCP tool shows `server › tool`).
    fn label(&self) -> String {
        self.name().to_string()
    }
    async fn call(&self, args: Value, ctx: ToolCtx) -> ToolResult;
}

/// Decode `args` as the tools do before running (the serde structs of `terminal` and
/// `search_files`, the one-line summary of every tool). For the fuzz target (`fuzz/`): any
/// JSON must give a value or a one-line error, never a panic.
#[doc(hidden)]
pub fn decode_arguments_for_fuzzing(args: &Value) -> Vec<String> {
    let mut out: Vec<String> = Registry::standard().tools.values().map(|t| t.summary(args)).collect();
    out.extend(terminal::decode(args).err());
    out.extend(search::decode(args).err());
    out
}

/// Tools that come and go while a session runs (the MCP servers'): the registry asks a
/// source for a tool by name and lists its tools at each request. `mcp` registers its
/// adapter with [`Registry::with_source`]; the registry knows nothing more of it.
pub(crate) trait ToolSource: Send + Sync {
    fn tool(&self, name: &str) -> Option<Arc<dyn Tool>>;
    /// The `tools` entries of a Chat Completions request, as they are now.
    fn definitions(&self) -> Vec<Value>;
}

/// All tools by name: the built-in ones, and the sources' tools as they are now.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
}

impl Registry {
    /// The standard tool set.
    pub fn standard() -> Registry {
        let mut r = Registry::default();
        r.add(Arc::new(terminal::TerminalTool));
        r.add(Arc::new(process::ProcessTool));
        r.add(Arc::new(files::ReadFile));
        r.add(Arc::new(files::WriteFile));
        r.add(Arc::new(files::EditFile));
        r.add(Arc::new(search::SearchFiles));
        r
    }

    /// Offer the `agent` tool too, unless this talaria is as deep as `agents.max_depth`.
    pub(crate) fn with_agents(mut self, config: &Config) -> Registry {
        if config.agents.depth < config.agents.max_depth {
            self.add(Arc::new(agent::AgentTool));
        }
        self
    }

    pub fn add(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    /// Offer a source's tools too (their list may change between requests).
    pub(crate) fn with_source(mut self, source: Arc<dyn ToolSource>) -> Registry {
        self.sources.push(source);
        self
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned().or_else(|| self.sources.iter().find_map(|s| s.tool(name)))
    }

    /// The `tools` array of a Chat Completions request.
    pub(crate) fn definitions(&self) -> Vec<Value> {
        self.tools
            .values()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name(),
                        "description": t.description(),
                        "parameters": t.parameters(),
                    }
                })
            })
            .chain(self.sources.iter().flat_map(|s| s.definitions()))
            .collect()
    }
}
