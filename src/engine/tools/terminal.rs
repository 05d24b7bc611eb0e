//! `terminal {command, timeout?, workdir?, background?}` (DESIGN §4a): run a shell command
//! as a job and await it, unless it is interrupted (killed, 130), times out (killed, 124)
//! or the user yields it (it goes on as a background job, not killed).

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{arg_bool, arg_str, Concurrency, Tool, ToolCtx, ToolResult};
use crate::engine::approval::{Provenance, Verdict};
use crate::engine::jobs::{bumped, group, ExitInfo, JobsHandle, SpawnSpec};
use crate::protocol::ToolStatus;

pub const YIELD_NOTE: &str = "The user sent a message while this command was running, so it was moved to the background without being killed. Use process(action='poll'|'wait'|'log', session_id=...) to follow it.";

pub struct TerminalTool;

/// Decode `terminal`'s arguments (for the fuzz target).
pub(crate) fn decode(args: &Value) -> Result<(), String> {
    crate::engine::args::parse::<TerminalArgs>("terminal", args).map(drop)
}

/// `terminal`'s arguments (DESIGN §4a).
#[derive(Debug, serde::Deserialize)]
struct TerminalArgs {
    command: String,
    #[serde(default, deserialize_with = "crate::engine::args::lenient::opt_u64")]
    timeout: Option<u64>,
    #[serde(default)]
    workdir: Option<String>,
    #[serde(default, deserialize_with = "crate::engine::args::lenient::opt_bool")]
    background: Option<bool>,
    #[serde(default, deserialize_with = "crate::engine::args::lenient::opt_bool")]
    sandbox: Option<bool>,
}

#[async_trait]
impl Tool for TerminalTool {
    fn name(&self) -> &'static str {
        "terminal"
    }

    fn description(&self) -> &'static str {
        "Run a shell command (bash -c) in the session's working directory and return its output \
         (stdout and stderr together) and exit code. The working directory carries over between \
         calls (`cd` works). Use background=true for servers, watchers and anything long-running: \
         it returns a session_id at once; follow it with the process tool. A foreground command \
         is killed after `timeout` seconds. Commands have no terminal and no stdin; never run \
         interactive programs in the foreground."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": { "type": "string", "description": "The shell command to run." },
                "timeout": {
                    "type": "integer",
                    "description": "Seconds before a foreground command is killed (default 180, at most 600)."
                },
                "workdir": {
                    "type": "string",
                    "description": "Directory to run in, instead of the current working directory."
                },
                "background": {
                    "type": "boolean",
                    "description": "Start as a background job and return its session_id at once."
                },
                "sandbox": {
                    "type": "boolean",
                    "description": "Default true: run inside the sandbox (writes limited to the working directory and temp dir, credential stores unreadable). Set false only when the sandbox stopped a command that truly needs more; the user is asked to approve it."
                }
            },
            "required": ["command"]
        })
    }

    fn concurrency(&self) -> Concurrency {
        Concurrency::Sequential
    }

    fn summary(&self, args: &Value) -> String {
        let command = arg_str(args, "command").unwrap_or("").trim();
        let first = command.lines().next().unwrap_or("");
        let mut s = if command.lines().nth(1).is_some() { format!("{first} …") } else { first.to_string() };
        if arg_bool(args, "background") == Some(true) {
            s.push_str("  (background)");
        }
        s
    }

    async fn call(&self, args: Value, ctx: ToolCtx) -> ToolResult {
        let args: TerminalArgs = match crate::engine::args::parse("terminal", &args) {
            Ok(a) => a,
            Err(e) => return ToolResult::error(e),
        };
        let command = args.command.as_str();
        if command.trim().is_empty() {
            return ToolResult::error("terminal needs a non-empty \"command\" string");
        }
        let background = args.background.unwrap_or(false);
        let terminal = &ctx.config.terminal;
        let timeout_s = args.timeout.unwrap_or(terminal.timeout_s).min(terminal.max_foreground_timeout_s.max(1)).max(1);
        let backend = ctx.jobs.backends().current();
        if backend.is_remote() {
            return remote_call(&args, background, timeout_s, ctx, backend).await;
        }
        let cwd = match args.workdir.as_deref().map(str::trim).filter(|w| !w.is_empty()) {
            Some(w) => ctx.resolve(w),
            None => ctx.cwd(),
        };
        if !cwd.is_dir() {
            return ToolResult::error(format!(
                "working directory {} does not exist or is not a directory",
                cwd.display()
            ));
        }

        let sandboxed = args.sandbox != Some(false) && ctx.jobs.sandbox_policy().active();
        let (approval, by) = match ctx.approvals.check_command(command, sandboxed, &ctx.signals.interrupt).await {
            Verdict::Allowed { note, by } => (note, by),
            Verdict::Denied { reason } => return denied(reason),
        };
        if ctx.signals.interrupt.is_cancelled() {
            return not_started("The turn was interrupted before the command started; it did not run.".into());
        }

        let spec = SpawnSpec {
            command: command.to_string(),
            cwd: cwd.clone(),
            background,
            session_id: ctx.session_id.clone(),
            track_cwd: !background,
            call_id: Some(ctx.call_id.clone()),
            orphan_grace_s: None,
            sandboxed,
        };
        let spawned = match ctx.jobs.spawn(spec).await {
            Ok(s) => s,
            Err(e) => return ToolResult::error(e.to_string()),
        };
        if background {
            return started_in_background(&spawned.id, spawned.pid, approval.as_deref(), None);
        }

        let mut guard =
            ForegroundGuard { jobs: ctx.jobs.clone(), id: spawned.id.clone(), pgid: spawned.pid as i32, armed: true };
        let ending = wait_foreground(&ctx, by, &spawned.id, spawned.exit, timeout_s).await;

        let base = |output: String, exit_code: Option<i32>, cwd: &std::path::Path| {
            let mut v =
                json!({ "output": output, "exit_code": exit_code, "error": null, "cwd": cwd.display().to_string() });
            if let Some(note) = &approval {
                v["approval"] = json!(note);
            }
            v
        };
        match ending {
            Ending::Exited(exit) => {
                exited(&ctx, (&spawned.id, spawned.pid), exit, cwd, sandboxed, &base, &mut guard).await
            }
            Ending::Lost => {
                guard.armed = false;
                let exit = ctx.jobs.kill(&spawned.id).await;
                ctx.jobs.forget(&spawned.id).await;
                let code = exit.map(|e| e.exit_code());
                let mut value = base(String::new(), code, &cwd);
                value["error"] = json!("lost track of the command's exit status");
                ToolResult { value, ok: false, exit_code: code, status: Some(ToolStatus::Failed) }
            }
            Ending::Interrupted => {
                guard.armed = false;
                ctx.jobs.kill(&spawned.id).await;
                let output = ctx.jobs.output_for_model(&spawned.id).await.unwrap_or_default();
                ctx.jobs.forget(&spawned.id).await;
                let marker = interrupted_marker(by);
                let mut value = base(with_marker(output, marker), Some(130), &cwd);
                value["status"] = json!("interrupted");
                ToolResult { value, ok: false, exit_code: Some(130), status: Some(ToolStatus::Interrupted) }
            }
            Ending::TimedOut => {
                guard.armed = false;
                ctx.jobs.kill(&spawned.id).await;
                let output = ctx.jobs.output_for_model(&spawned.id).await.unwrap_or_default();
                ctx.jobs.forget(&spawned.id).await;
                let marker = format!("[Command timed out after {timeout_s}s]");
                let mut value = base(with_marker(output, &marker), Some(124), &cwd);
                value["status"] = json!("timeout");
                ToolResult { value, ok: false, exit_code: Some(124), status: Some(ToolStatus::Timeout) }
            }
            Ending::Yielded => {
                guard.armed = false;
                let output = ctx.jobs.output_for_model(&spawned.id).await.unwrap_or_default();
                yielded(&spawned.id, spawned.pid, output, None)
            }
        }
    }
}

/// `terminal` on a remote backend (DESIGN §4b): connect (off the engine loop: this is the
/// tool's task), run the command as a job whose transport reaches the host, and await it
/// like a local one. The transport's failure is `degraded`, never the command's own.
/// A local foreground command exited: its output, the directory it left, what the sandbox
/// refused, and what it left running (kept as a background job).
async fn exited(
    ctx: &ToolCtx,
    (id, pid): (&str, u32),
    exit: ExitInfo,
    cwd: std::path::PathBuf,
    sandboxed: bool,
    base: &(dyn Fn(String, Option<i32>, &std::path::Path) -> Value + Sync),
    guard: &mut ForegroundGuard,
) -> ToolResult {
    let output = ctx.jobs.output_for_model(id).await.unwrap_or_default();
    let new_cwd = exit.cwd.clone().unwrap_or(cwd);
    if let Ok(mut c) = ctx.cwd.lock() {
        *c = new_cwd.clone();
    }
    let code = exit.exit_code();
    let blocked = sandboxed && code != 0 && looks_blocked(&output);
    let denials = if sandboxed { ctx.jobs.sandbox_denials(id) } else { Vec::new() };
    let mut value = base(output, Some(code), &new_cwd);
    if !denials.is_empty() {
        value["sandbox"] = json!(denied_connections(&denials));
    } else if blocked {
        value["sandbox"] = json!(SANDBOX_NOTE);
    }
    if sandboxed {
        note_git_guard(ctx, &mut value);
    }
    if exit.leftover {
        guard.armed = false;
        value["session_id"] = json!(id);
        value["pid"] = json!(pid);
        value["note"] = json!(format!(
            "The command exited, but processes it started are still running as background job {id}. \
                 Use process(action='poll'|'log'|'kill', session_id='{id}') to follow or stop them.",
            id = id
        ));
    } else {
        guard.armed = false;
        ctx.jobs.forget(id).await;
    }
    ToolResult { value, ok: code == 0, exit_code: Some(code), status: None }
}

/// The result of a command the approval flow refused.
fn denied(reason: String) -> ToolResult {
    let value = json!({ "output": "", "exit_code": null, "error": reason, "status": "denied" });
    ToolResult { value, ok: false, exit_code: None, status: Some(ToolStatus::Denied) }
}

/// The result of a command an interrupt stopped before it started.
fn not_started(note: String) -> ToolResult {
    let value = json!({
        "output": "[Command interrupted]",
        "exit_code": 130,
        "error": null,
        "status": "interrupted",
        "note": note,
    });
    ToolResult { value, ok: false, exit_code: Some(130), status: Some(ToolStatus::Interrupted) }
}

/// Where a remote command runs: `workdir` (absolute, `~…`, or under the remote cwd), else the
/// remote cwd ("" = the remote home).
fn remote_workdir(workdir: Option<&str>, remote_cwd: &str) -> String {
    match workdir.map(str::trim).filter(|w| !w.is_empty()) {
        Some(w) if w.starts_with('/') || w.starts_with('~') || remote_cwd.is_empty() => w.to_string(),
        Some(w) => format!("{}/{w}", remote_cwd.trim_end_matches('/')),
        None => remote_cwd.to_string(),
    }
}

async fn remote_call(
    args: &TerminalArgs,
    background: bool,
    timeout_s: u64,
    ctx: ToolCtx,
    backend: crate::engine::backend::Backend,
) -> ToolResult {
    use crate::engine::backend::remote;
    let command = args.command.as_str();
    let backends = ctx.jobs.backends().clone();
    let cwd = remote_workdir(args.workdir.as_deref(), &backends.remote_cwd(&backend));
    let degraded = |d: crate::engine::backend::Degraded| {
        let value = d.to_value(&ctx.config, &backend);
        let status = d.tool_status(&ctx.config);
        ToolResult { value, ok: false, exit_code: Some(-1), status: Some(status) }
    };
    // Remote commands run with the remote user's rights, outside our sandbox: approvals
    // treat them as unsandboxed (DESIGN §4b).
    let (approval, by) = match ctx.approvals.check_remote_command(command, &ctx.signals.interrupt).await {
        Verdict::Allowed { note, by } => (note, by),
        Verdict::Denied { reason } => return denied(reason),
    };
    let connected = tokio::select! {
        r = backends.ensure(&backend) => r,
        _ = ctx.signals.interrupt.cancelled() => {
            return not_started(format!("The turn was interrupted while connecting to {backend}; the command did not run."));
        }
    };
    if let Err(d) = connected {
        backends.evict(&backend).await;
        return degraded(d);
    }
    let spec = SpawnSpec {
        command: command.to_string(),
        cwd: ctx.cwd(),
        background,
        session_id: ctx.session_id.clone(),
        track_cwd: false,
        call_id: Some(ctx.call_id.clone()),
        orphan_grace_s: None,
        sandboxed: false,
    };
    let target = crate::engine::jobs::RemoteTarget { backend: backend.clone(), cwd: cwd.clone() };
    let spawned = match ctx.jobs.spawn_remote(spec, target).await {
        Ok(s) => s,
        Err(e) => return ToolResult::error(e.to_string()),
    };
    if background {
        return started_in_background(&spawned.id, spawned.pid, approval.as_deref(), Some(&backend.label()));
    }
    let mut guard =
        ForegroundGuard { jobs: ctx.jobs.clone(), id: spawned.id.clone(), pgid: spawned.pid as i32, armed: true };
    let ending = wait_foreground(&ctx, by, &spawned.id, spawned.exit, timeout_s).await;
    let id = spawned.id.clone();
    let shown_cwd = if cwd.is_empty() { "~".to_string() } else { cwd.clone() };
    let base = |output: String, exit_code: Option<i32>, cwd: &str| {
        let mut v =
            json!({ "output": output, "exit_code": exit_code, "error": null, "cwd": cwd, "backend": backend.label() });
        if let Some(note) = &approval {
            v["approval"] = json!(note);
        }
        v
    };
    guard.armed = false;
    match ending {
        Ending::Exited(exit) => {
            let stderr = ctx.jobs.transport_stderr(&id).unwrap_or_default();
            let markers = remote::markers(&stderr);
            let output = ctx.jobs.output_for_model(&id).await.unwrap_or_default();
            ctx.jobs.forget(&id).await;
            let Some(code) = markers.end.filter(|_| markers.started && !exit.killed) else {
                if exit.killed {
                    let code = exit.exit_code();
                    let value = base(with_marker(output, "[Command killed]"), Some(code), &shown_cwd);
                    return ToolResult { value, ok: false, exit_code: Some(code), status: Some(ToolStatus::Killed) };
                }
                let d = backends.classify(&backend, &stderr, exit.code);
                backends.evict(&backend).await;
                let mut result = degraded(d);
                if !output.is_empty() {
                    result.value["output"] = json!(output);
                }
                return result;
            };
            let new_cwd = markers.cwd.unwrap_or(shown_cwd);
            backends.set_remote_cwd(&backend, &new_cwd);
            let value = base(output, Some(code), &new_cwd);
            ToolResult { value, ok: code == 0, exit_code: Some(code), status: None }
        }
        Ending::Lost => {
            let exit = ctx.jobs.kill(&id).await;
            ctx.jobs.forget(&id).await;
            let code = exit.map(|e| e.exit_code());
            let mut value = base(String::new(), code, &shown_cwd);
            value["error"] = json!("lost track of the command's exit status");
            ToolResult { value, ok: false, exit_code: code, status: Some(ToolStatus::Failed) }
        }
        Ending::Interrupted => {
            ctx.jobs.kill(&id).await;
            let output = ctx.jobs.output_for_model(&id).await.unwrap_or_default();
            ctx.jobs.forget(&id).await;
            let mut value = base(with_marker(output, interrupted_marker(by)), Some(130), &shown_cwd);
            value["status"] = json!("interrupted");
            ToolResult { value, ok: false, exit_code: Some(130), status: Some(ToolStatus::Interrupted) }
        }
        Ending::TimedOut => {
            ctx.jobs.kill(&id).await;
            let output = ctx.jobs.output_for_model(&id).await.unwrap_or_default();
            ctx.jobs.forget(&id).await;
            let marker = format!("[Command timed out after {timeout_s}s]");
            let mut value = base(with_marker(output, &marker), Some(124), &shown_cwd);
            value["status"] = json!("timeout");
            ToolResult { value, ok: false, exit_code: Some(124), status: Some(ToolStatus::Timeout) }
        }
        Ending::Yielded => {
            let output = ctx.jobs.output_for_model(&id).await.unwrap_or_default();
            yielded(&id, spawned.pid, output, Some(&backend.label()))
        }
    }
}

enum Ending {
    Exited(ExitInfo),
    Lost,
    Interrupted,
    TimedOut,
    Yielded,
}

/// Waits for a foreground command, local or remote: its exit, an interrupt, a yield (it
/// goes on as a job) or the timeout — whichever comes first.
async fn wait_foreground(
    ctx: &ToolCtx,
    by: Provenance,
    id: &str,
    mut exit_rx: tokio::sync::oneshot::Receiver<ExitInfo>,
    timeout_s: u64,
) -> Ending {
    // A yield asked for since the call started applies (the command yields at once),
    // except one raised while the approval modal was open: the user then said "run it".
    let mut yield_rx = ctx.signals.yield_gen.clone();
    if by == Provenance::User {
        yield_rx.borrow_and_update();
    }
    let ending = tokio::select! {
        // An exit that races an interrupt wins: a command that exits 130 by itself is
        // not labelled interrupted.
        biased;
        exit = &mut exit_rx => exit.map(Ending::Exited).unwrap_or(Ending::Lost),
        _ = ctx.signals.interrupt.cancelled() => Ending::Interrupted,
        _ = bumped(&mut yield_rx) => Ending::Yielded,
        _ = tokio::time::sleep(Duration::from_secs(timeout_s)) => Ending::TimedOut,
    };
    match ending {
        Ending::Yielded if !ctx.jobs.adopt(id).await => {
            // It finished just as the yield came: report the exit.
            exit_rx.await.map(Ending::Exited).unwrap_or(Ending::Lost)
        }
        other => other,
    }
}

/// Told to the model when a sandboxed command failed on a permission error.
pub(crate) const SANDBOX_NOTE: &str = "blocked by the sandbox (probably): a sandboxed command may write (or chmod, touch, chown) only under the writable roots (the working directory, the temp dir, sandbox.writable_roots) and not git's config or hooks, and cannot read credential stores (~/.ssh, ~/.aws, ...). Two ways on: call terminal again with sandbox=false (the user is asked to approve it outside the sandbox), or the user adds the directory to sandbox.writable_roots in config.toml.";

/// What the model is told when the sandbox stopped connections: which, why, and the two
/// ways on. The addresses come from the job (escaped by the supervisor): data, not words.
fn denied_connections(denials: &[crate::engine::sandbox::notify::Denial]) -> String {
    let list: Vec<String> =
        denials.iter().take(5).map(|d| format!("{} to {}: {}", d.call, d.address, d.reason)).collect();
    let more = if denials.len() > 5 { format!(" (and {} more)", denials.len() - 5) } else { String::new() };
    let proxy = denials.iter().any(|d| d.call == "proxy");
    let unix = denials.iter().any(|d| d.address.starts_with("unix") || d.address.starts_with("abstract"));
    let mut ways = Vec::new();
    if proxy {
        ways.push(
            "talaria's network proxy blocked a host: the user can add it to sandbox.network_allow in config.toml, \
             or answer \"this session\" or \"always\" when asked (talaria exec needs --yes or the list)",
        );
    }
    if unix {
        ways.push(
            "commands may reach only sockets their own processes made: to allow one, the user can add its path \
             to sandbox.allow_unix_sockets in config.toml",
        );
    }
    if !proxy && !unix {
        ways.push("commands reach the network only through talaria's proxy (HTTP_PROXY and HTTPS_PROXY are set)");
    }
    format!(
        "the sandbox stopped a connection: {}{more}. {}; or call terminal again with sandbox=false (the user \
         will be asked).",
        list.join("; "),
        ways.join("; ")
    )
}

/// After a sandboxed command: move aside what it planted for the user's own git (a
/// `commondir`, a `.git` file, a new repository's program-naming config) and say so.
fn note_git_guard(ctx: &ToolCtx, value: &mut serde_json::Value) {
    let policy = ctx.jobs.sandbox_policy();
    if policy.mode != crate::config::SandboxMode::WorkspaceWrite {
        return;
    }
    let moved = crate::engine::sandbox::git_guard::sweep(&policy.writable_roots, &policy.git_start);
    if !moved.is_empty() {
        let text: Vec<String> = moved.iter().map(|m| m.to_string()).collect();
        value["git_guard"] = json!(text.join("; "));
    }
}

/// A permission error of the kind Landlock and the network filter cause.
fn looks_blocked(output: &str) -> bool {
    ["Permission denied", "Operation not permitted", "Read-only file system", "EACCES"]
        .iter()
        .any(|m| output.contains(m))
}

/// What an interrupted command's output ends with. A command the user approved and then
/// interrupted says so, so the model does not read the kill as a refusal.
fn interrupted_marker(by: Provenance) -> &'static str {
    if by == Provenance::User {
        "[Command interrupted] (approved by the user, then interrupted)"
    } else {
        "[Command interrupted]"
    }
}

fn with_marker(output: String, marker: &str) -> String {
    if output.is_empty() {
        marker.to_string()
    } else if output.ends_with('\n') {
        format!("{output}{marker}")
    } else {
        format!("{output}\n{marker}")
    }
}

/// Kills the job's group when the tool call is dropped before the command ended or was
/// yielded (the turn was aborted, the task panicked).
struct ForegroundGuard {
    jobs: JobsHandle,
    id: String,
    pgid: i32,
    armed: bool,
}

impl Drop for ForegroundGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let jobs = self.jobs.clone();
                let id = std::mem::take(&mut self.id);
                rt.spawn(async move {
                    jobs.kill(&id).await;
                    jobs.forget(&id).await;
                });
            }
            Err(_) => {
                group::signal_group(self.pgid, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

/// A command started as a background job: its id at once. `backend`: where a remote one runs.
fn started_in_background(id: &str, pid: u32, approval: Option<&str>, backend: Option<&str>) -> ToolResult {
    let mut value = json!({
        "output": "Background process started",
        "session_id": id,
        "pid": pid,
        "exit_code": null,
        "error": null,
    });
    if let Some(backend) = backend {
        value["backend"] = json!(backend);
    }
    if let Some(note) = approval {
        value["approval"] = json!(note);
    }
    ToolResult { value, ok: true, exit_code: None, status: Some(ToolStatus::Background) }
}

/// A foreground command the user moved to the background: it goes on as job `id`.
fn yielded(id: &str, pid: u32, output: String, backend: Option<&str>) -> ToolResult {
    let mut value = json!({
        "status": "yielded_to_background",
        "session_id": id,
        "pid": pid,
        "output": output,
        "exit_code": null,
        "error": null,
        "note": YIELD_NOTE,
    });
    if let Some(backend) = backend {
        value["backend"] = json!(backend);
    }
    ToolResult { value, ok: true, exit_code: None, status: Some(ToolStatus::Yielded) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupted_output_names_a_user_approval() {
        assert_eq!(interrupted_marker(Provenance::Rule), "[Command interrupted]");
        assert_eq!(
            interrupted_marker(Provenance::User),
            "[Command interrupted] (approved by the user, then interrupted)"
        );
        assert_eq!(with_marker("out".into(), "[m]"), "out\n[m]");
        assert_eq!(with_marker("out\n".into(), "[m]"), "out\n[m]");
        assert_eq!(with_marker(String::new(), "[m]"), "[m]");
    }

    #[test]
    fn summaries() {
        assert_eq!(TerminalTool.summary(&json!({"command": "ls -la"})), "ls -la");
        assert_eq!(TerminalTool.summary(&json!({"command": "a\nb", "background": true})), "a …  (background)");
    }
}
