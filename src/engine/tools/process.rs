//! `process {action, session_id?, data?, timeout?, offset?, limit?, pattern?}` (DESIGN §4a,
//! §4c): list, poll, read, wait for, kill, feed and watch background jobs.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{arg_str, Concurrency, Tool, ToolCtx, ToolResult, ToolStatus};
use crate::engine::approval::Verdict;
use crate::engine::jobs::{ProcessAction, ProcessArgs};

pub struct ProcessTool;

#[async_trait]
impl Tool for ProcessTool {
    fn name(&self) -> &'static str {
        "process"
    }

    fn description(&self) -> &'static str {
        "Manage background jobs (started with terminal(background=true), or foreground commands \
         the user moved to the background). Actions: list (all jobs); poll (status and last \
         output); log (output lines; offset = the line number to start at, limit = how many, \
         default the last 200); wait (until the job exits, at most `timeout` seconds, default 30); \
         kill (the job's whole process group); write (send `data` to its stdin); close (close its \
         stdin); watch (with `pattern`, a regex: you get a message [Job <id> matched /<pattern>/: \
         <line>] when a new line of its output matches, instead of polling — e.g. a server's \
         'listening', or 'error:'; rate-limited, extra matches are counted as \"+N more\"; ends with \
         the job; without `pattern` it lists the job's watches); unwatch (remove your watch with \
         `pattern`, or all of yours on the job). Output is shown as a terminal shows it: progress \
         bars and redrawn displays appear in their final state, colours removed. Line numbers \
         (offset, first_line, total_lines) count the lines as written to the log, so a range over \
         a redrawn display can show fewer lines than it spans. session_id is the job id, e.g. \
         job_3. You are told when a background job exits."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {
                    "type": "string",
                    "enum": ["list", "poll", "log", "wait", "kill", "write", "close", "watch", "unwatch"]
                },
                "session_id": { "type": "string", "description": "The job id (job_N)." },
                "data": { "type": "string", "description": "For write: text sent to the job's stdin as is." },
                "timeout": { "type": "integer", "description": "For wait: seconds to wait at most (default 30)." },
                "offset": {
                    "type": "integer",
                    "description": "For log: the line number to start at (lines as written to the log, from 1)."
                },
                "limit": { "type": "integer", "description": "For log: how many lines (default 200)." },
                "pattern": {
                    "type": "string",
                    "description": "For watch/unwatch: a regex (Rust syntax) matched against each output line as a terminal shows it."
                }
            },
            "required": ["action"]
        })
    }

    fn concurrency(&self) -> Concurrency {
        Concurrency::Parallel
    }

    fn summary(&self, args: &Value) -> String {
        let action = arg_str(args, "action").unwrap_or("?");
        let pattern = arg_str(args, "pattern").filter(|p| !p.is_empty()).map(|p| format!(" /{p}/")).unwrap_or_default();
        match arg_str(args, "session_id") {
            Some(id) => format!("{action} {id}{pattern}"),
            None => action.to_string(),
        }
    }

    async fn call(&self, args: Value, ctx: ToolCtx) -> ToolResult {
        let args: ProcessArgs = match crate::engine::args::parse("process", &args) {
            Ok(a) => a,
            Err(e) => return ToolResult::error(e),
        };
        let cap = Duration::from_secs(ctx.config.terminal.timeout_s.max(1));
        if args.action() == Ok(ProcessAction::Write) {
            // A job outside the sandbox gets each line approved like a command (DESIGN §6).
            let id = args.session_id.as_deref().unwrap_or("").trim();
            // A message to a sub-agent is contained by its own sandbox and approvals.
            let sandboxed = (ctx.jobs.is_sandboxed(id).unwrap_or(true) && ctx.jobs.sandbox_policy().active())
                || ctx.jobs.is_agent(id);
            let data = args.data.as_deref().unwrap_or("");
            for line in data.lines().filter(|l| !l.trim().is_empty()) {
                if let Verdict::Denied { reason } =
                    ctx.approvals.check_job_input(line, sandboxed, &ctx.signals.interrupt).await
                {
                    let value = json!({ "error": reason, "status": "denied" });
                    return ToolResult { value, ok: false, exit_code: None, status: Some(ToolStatus::Denied) };
                }
            }
        }
        let value = ctx.jobs.process_action(&args, &ctx.signals, cap).await;
        let failed = value.get("error").is_some_and(|e| !e.is_null());
        let status = value.get("status").and_then(Value::as_str).and_then(ToolStatus::parse);
        let exit_code = value.get("exit_code").and_then(Value::as_i64).map(|c| c as i32);
        ToolResult { value, ok: !failed, exit_code, status }
    }
}
