//! The front end of a sub-agent (`talaria __agent --session S --depth N`, DESIGN §14): `exec
//! --json` on the session its parent made, fed from stdin. The first stdin line is the
//! parent's [`Hello`] (task, keys, limits, sandbox policy); later lines are messages (typed
//! while busy, in the configured busy mode) and answers to the approvals it printed. It never
//! asks anyone itself: its approvals go out on stdout as `ApprovalNeeded` and the parent
//! answers them.

use std::io::{BufRead, Write};
use std::sync::OnceLock;

use crate::config::{Config, SandboxMode};
use crate::engine::api::{Hello, Inbound, APPROVAL_ANSWERED};
use crate::exec::ExecOptions;
use crate::protocol::{EngineHandle, Op};

static HELLO: OnceLock<Hello> = OnceLock::new();

/// Read the parent's hello line, first thing in `main` (one thread, before the environment
/// is touched): keep its keys, drop `key_names` from the environment. Exits 2 without one.
pub fn take_hello(key_names: &[String]) {
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    let hello = match read
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_str::<Hello>(line.trim()).map_err(|e| format!("not a hello line: {e}")))
    {
        Ok(hello) => hello,
        Err(e) => {
            eprintln!("talaria: {} is started by the agent tool only ({e})", crate::engine::api::AGENT_ARG);
            std::process::exit(2);
        }
    };
    crate::secrets::install(hello.keys.clone().into_iter().collect(), key_names);
    if let Some(home) = &hello.home {
        // Still one thread: the same config, database and jobs as the parent.
        std::env::set_var("TALARIA_HOME", home);
    }
    let _ = HELLO.set(hello);
}

/// What the parent handed over (after [`take_hello`]).
pub fn hello() -> Option<&'static Hello> {
    HELLO.get()
}

/// Narrow `config` to what the parent allows: its sandbox policy and approval mode, the
/// turn budget, this depth; its commands die with it.
pub fn apply(config: &mut Config, hello: &Hello, depth: u32) -> anyhow::Result<()> {
    config.agents.depth = depth;
    config.agent.max_iterations = hello.max_turns.max(1);
    config.jobs.orphan_grace_s = 0.0;
    config.approvals.mode = hello.approvals;
    if hello.read_only {
        config.sandbox.mode = SandboxMode::ReadOnly;
    }
    if let Some(backend) = &hello.backend {
        let parsed = crate::protocol::Backend::parse(backend).map_err(|e| anyhow::anyhow!("backend {backend}: {e}"))?;
        config.terminal.backend = parsed;
        config.terminal.backend_from_flag = true;
    }
    Ok(())
}

/// The parent's sandbox policy the sub-agent's jobs run under (narrowed to read-only when
/// the parent asked for a read-only sub-agent).
pub fn inherited_sandbox(hello: &Hello) -> Option<crate::engine::api::Policy> {
    let mut policy = hello.sandbox.clone()?;
    if hello.read_only && policy.mode != SandboxMode::Off {
        policy.mode = SandboxMode::ReadOnly;
    }
    Some(policy)
}

/// Work on the task until the turn ends, printing every event as a JSON line.
pub async fn run(engine: EngineHandle, hello: &Hello) -> anyhow::Result<i32> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    // A plain thread: a blocked read of stdin must not hold a runtime worker.
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let op = match serde_json::from_str::<Inbound>(line.trim()) {
                Ok(Inbound::Message { text }) => Op::Submit { text, mode: None },
                Ok(Inbound::Approve { id, decision }) => {
                    let marker = serde_json::json!({ "type": APPROVAL_ANSWERED, "data": { "id": id } });
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{marker}");
                    let _ = out.flush();
                    Op::Approve { id, decision }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "sub-agent: ignoring a line from the parent");
                    continue;
                }
            };
            if tx.send(op).is_err() {
                break;
            }
        }
    });
    // Paused by the parent: its task waits for `/unpause` instead of failing.
    let options = ExecOptions { json: true, keep_jobs: false, wait_when_paused: true };
    crate::exec::run_with_inbox(engine, hello.task.clone(), options, Some(rx)).await
}
