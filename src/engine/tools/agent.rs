//! `agent {task, read_only?, model?, max_turns?, backend?}` (DESIGN §14): start a sub-agent —
//! a child talaria in its own session linked to this one — as a background job. The call
//! returns at once; the sub-agent's final answer arrives later as a message, like a job's
//! exit notice.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{arg_str, Concurrency, Tool, ToolCtx, ToolResult};
use crate::engine::agents::{self, Hello};
use crate::engine::args::lenient;
use crate::engine::jobs::{AgentStart, SpawnSpec};
use crate::protocol::agent::AgentState;

pub struct AgentTool;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentArgs {
    task: String,
    #[serde(default, deserialize_with = "lenient::opt_bool")]
    read_only: Option<bool>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    max_turns: Option<u64>,
    #[serde(default)]
    backend: Option<String>,
}

#[async_trait]
impl Tool for AgentTool {
    fn name(&self) -> &'static str {
        "agent"
    }

    fn description(&self) -> &'static str {
        "Start a sub-agent: another agent with its own context window that works on `task` in the \
         background (it can run commands and edit files like you, inside the same sandbox) while \
         you go on. Give it a complete, self-contained task. It returns at once with the job id \
         (session_id, e.g. job_3); when the sub-agent ends you get its final answer as a message. \
         Meanwhile process(action='poll'|'log'|'wait'|'kill', session_id) follows or stops it and \
         process(action='write', data) sends it a message. read_only: it may not change files. \
         backend: where its commands run (local, ssh:<host>, docker:<container>). Several \
         sub-agents can work in parallel."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "task": { "type": "string", "description": "What the sub-agent should do, with everything it needs to know." },
                "read_only": { "type": "boolean", "description": "Its commands may not write files (default false)." },
                "model": { "type": "string", "description": "Model name for it (default: yours)." },
                "max_turns": { "type": "integer", "description": "Model calls it may make at most." },
                "backend": { "type": "string", "description": "Where its commands run: local, ssh:<host> or docker:<container>." }
            },
            "required": ["task"]
        })
    }

    fn concurrency(&self) -> Concurrency {
        Concurrency::Parallel
    }

    fn summary(&self, args: &Value) -> String {
        let task = arg_str(args, "task").unwrap_or("?");
        format!("\"{}\"", agents::title_of(task))
    }

    async fn call(&self, args: Value, ctx: ToolCtx) -> ToolResult {
        let args: AgentArgs = match crate::engine::args::parse("agent", &args) {
            Ok(a) => a,
            Err(e) => return ToolResult::error(e),
        };
        match start(args, &ctx).await {
            Ok(value) => ToolResult::ok(value),
            Err(e) => ToolResult::error(e),
        }
    }
}

async fn start(args: AgentArgs, ctx: &ToolCtx) -> Result<Value, String> {
    let limits = &ctx.config.agents;
    if args.task.trim().is_empty() {
        return Err("agent needs a task (what the sub-agent should do)".into());
    }
    if limits.depth >= limits.max_depth {
        return Err(format!("a sub-agent cannot start sub-agents here (agents.max_depth = {})", limits.max_depth));
    }
    if let Some(backend) = &args.backend {
        crate::engine::backend::Backend::parse(backend).map_err(|e| format!("agent: backend: {e}"))?;
    }
    let store = ctx.jobs.store().ok_or("cannot start a sub-agent: the session database is not available")?;
    let exe = ctx.jobs.talaria_exe().ok_or("cannot start a sub-agent: the talaria binary was not found")?;
    let cwd = ctx.cwd();
    let model_label = args.model.clone().unwrap_or_else(|| "(parent's model)".to_string());
    let session = store
        .create_session(&model_label, &cwd.display().to_string(), Some(&ctx.session_id))
        .await
        .map_err(|e| format!("cannot create the sub-agent's session: {e}"))?;
    // Best effort: a title and the headless mark only help listing.
    drop(store.set_title(&session, &agents::title_of(&args.task)).await);
    drop(store.mark_headless(&session).await);
    let spec = SpawnSpec {
        command: agents::command_line(&exe, &session, limits.depth + 1),
        cwd,
        background: true,
        session_id: ctx.session_id.clone(),
        track_cwd: false,
        call_id: None,
        orphan_grace_s: None,
        // The child is talaria itself: it needs its database and the model; every command
        // it runs is sandboxed under the policy handed over below.
        sandboxed: false,
    };
    let max_turns = args.max_turns.map(|t| t.clamp(1, u64::from(limits.max_turns.max(1))) as u32);
    let hello = Hello {
        task: args.task.clone(),
        keys: crate::secrets::held().into_iter().collect(),
        max_turns: max_turns.unwrap_or(limits.max_turns.max(1)),
        read_only: args.read_only.unwrap_or(false),
        model: args.model.clone().or_else(|| limits.run_model.clone()),
        backend: args.backend.clone(),
        sandbox: Some(ctx.jobs.sandbox_policy()),
        approvals: ctx.approvals.mode(),
        home: ctx.jobs.talaria_home(),
        base_url: limits.run_base_url.clone(),
    };
    let start = AgentStart {
        session: session.clone(),
        task: agents::title_of(&args.task),
        hello,
        limit: (limits.max_runtime_s > 0).then(|| Duration::from_secs(limits.max_runtime_s)),
    };
    let (spawned, state) = ctx.jobs.spawn_agent(spec, start).await?;
    if state == AgentState::Queued {
        return Ok(json!({
            "status": "queued",
            "session_id": spawned.id,
            "agent_session": session,
            "pid": spawned.pid,
            "note": format!(
                "{} sub-agents are working (agents.max_parallel); this one starts when one of them ends. \
                 Its final answer comes as a message when it ends; process(action='poll'|'wait'|'kill', \
                 session_id=...) follows or stops it meanwhile.",
                limits.max_parallel.max(1)
            ),
        }));
    }
    Ok(json!({
        "status": "started",
        "session_id": spawned.id,
        "agent_session": session,
        "pid": spawned.pid,
        "note": "The sub-agent works in the background; its final answer comes as a message when it ends. \
                 Use process(action='poll'|'wait'|'log'|'write'|'kill', session_id=...) to follow, steer or stop it.",
    }))
}
