//! Editor-protocol latency for BENCHMARKS.md ("Editor protocol"): the real `talaria acp`
//! binary over pipes (raw JSON-RPC lines, no client library in the path) against a
//! `ScriptedServer` on 127.0.0.1, one session, `runs` rounds of:
//!
//! (a) `session/prompt` written → the first `session/update` of the answer read back;
//! (b) a `session/prompt` written while the model's foreground `sleep` runs → the next chat
//!     request parsed at the scripted server (the redirect, through ACP).
//!
//! `cargo build --bin talaria --example acp_latency && target/debug/examples/acp_latency target/debug/talaria 30`

#[path = "../benches/common/mod.rs"]
mod common;

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

const STEP: Duration = Duration::from_secs(30);

struct Agent {
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Agent {
    async fn send(&mut self, method: &str, params: Value) -> anyhow::Result<u64> {
        self.next_id += 1;
        let line = json!({ "jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params });
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(self.next_id)
    }

    async fn next(&mut self) -> anyhow::Result<Value> {
        let line = tokio::time::timeout(STEP, self.lines.next_line()).await.context("no message within 30 s")??;
        let line = line.context("talaria acp exited")?;
        Ok(serde_json::from_str(&line)?)
    }

    /// Read until the answer to request `id`.
    async fn answer(&mut self, id: u64) -> anyhow::Result<Value> {
        loop {
            let message = self.next().await?;
            if message["id"] == id && message.get("method").is_none() {
                return Ok(message);
            }
        }
    }

    /// Read until an update passes `pred`.
    async fn update(&mut self, pred: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        loop {
            let message = self.next().await?;
            if message["method"] == "session/update" && pred(&message["params"]["update"]) {
                return Ok(message);
            }
        }
    }
}

fn sleeping(marker: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == format!("sleep {marker}"))
    })
}

fn row(name: &str, target: &str, mut values: Vec<f64>) {
    values.sort_by(f64::total_cmp);
    let p = |q| common::percentile(&values, q);
    let max = values.last().copied().unwrap_or(f64::NAN);
    println!(
        "| {name} | {target} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
        values.len(),
        values.first().copied().unwrap_or(f64::NAN),
        p(0.5),
        p(0.99),
        max
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let binary = args.next().context("usage: acp_latency <talaria binary> [runs]")?;
    let binary = std::fs::canonicalize(&binary).with_context(|| format!("no {binary}"))?;
    let runs: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(30);
    println!("# acp latency\n\n{}\n", common::machine_line());

    // Each round: a plain answer, then a long command and the answer after the redirect.
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let server = ScriptedServer::with_responder(move |_| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        match n % 3 {
            0 => ScriptedResponse::text("a short answer"),
            1 => ScriptedResponse::tool_call(
                &format!("call_{n}"),
                "terminal",
                &json!({ "command": format!("sleep {}", 3_005_000 + n) }).to_string(),
            ),
            _ => ScriptedResponse::text("the sleep goes on in the background"),
        }
    })
    .await?;
    let home = tempfile::tempdir()?;
    std::fs::write(home.path().join("config.toml"), "[approvals]\nmode = \"off\"\n[jobs]\nmax_jobs = 256\n")?;
    let mut child = tokio::process::Command::new(&binary)
        .args(["acp", "--base-url", &server.base_url(), "--model", "m1"])
        .env("TALARIA_HOME", home.path())
        .env("HOME", home.path())
        .current_dir(home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", binary.display()))?;
    let stdin = child.stdin.take().context("stdin")?;
    let lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut agent = Agent { stdin, lines, next_id: 0 };
    let id = agent.send("initialize", json!({ "protocolVersion": 1, "clientCapabilities": {} })).await?;
    agent.answer(id).await?;
    let id = agent.send("session/new", json!({ "cwd": home.path(), "mcpServers": [] })).await?;
    let session = agent.answer(id).await?["result"]["sessionId"].as_str().context("no session id")?.to_string();
    let prompt = |text: &str| json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }] });

    let (mut first_update, mut redirect) = (Vec::new(), Vec::new());
    for round in 0..runs {
        let start = Instant::now();
        let id = agent.send("session/prompt", prompt("say something short")).await?;
        agent.update(|u| u["sessionUpdate"] == "agent_message_chunk").await?;
        first_update.push(start.elapsed().as_secs_f64() * 1000.0);
        agent.answer(id).await?;

        let before = server.chat_requests().len();
        let long = agent.send("session/prompt", prompt("run the long command")).await?;
        let marker = (3_005_000 + round * 3 + 1).to_string();
        let deadline = Instant::now() + STEP;
        while !sleeping(&marker) {
            if Instant::now() > deadline {
                bail!("sleep {marker} did not start");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let start = Instant::now();
        let second = agent.send("session/prompt", prompt("meanwhile, something else")).await?;
        let requests = server.wait_for_chat_requests(before + 2, STEP).await;
        redirect.push(start.elapsed().as_secs_f64() * 1000.0);
        let last = requests.last().map(|r| r.body["messages"].to_string()).unwrap_or_default();
        if !last.contains("meanwhile, something else") {
            bail!("the request after the redirect does not carry the message");
        }
        agent.answer(long).await?;
        agent.answer(second).await?;
    }
    println!("| Figure | Target | Runs | min | p50 | p99 | max |\n|---|---|---|---|---|---|---|");
    row("(a) `session/prompt` → first `session/update` of the answer (ms)", "", first_update);
    row(
        "(b) `session/prompt` during a foreground `sleep` → next chat request at the server (ms)",
        "p99 < 150",
        redirect,
    );
    println!("\nload average at the end: {}", common::loadavg());
    drop(agent);
    let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
    Ok(())
}
