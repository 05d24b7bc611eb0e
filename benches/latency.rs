//! Busy-input latency figures for BENCHMARKS.md (a plain program, not a criterion bench),
//! with the real engine in process and a `ScriptedServer` as the model:
//!
//! (a) `Op::Submit` (redirect, the default busy mode) while a foreground `terminal`
//!     `sleep 300` runs, until the next chat request reaches the server (target p99 < 150 ms);
//! (b) `Op::Interrupt` while a foreground `sleep 300` runs, until its process group is gone
//!     (target p99 < 100 ms);
//! (c) one `Store::append_message`, awaited (target p99 < 1 ms).
//!
//! Run with `cargo bench --bench latency`; it prints a Markdown table.

mod common;

use common::*;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use talaria::config::Config;
use talaria::engine::approval::PromptPolicy;
use talaria::engine::jobs::group::group_alive;
use talaria::engine::llm::client::{ClientSettings, OpenAiClient};
use talaria::engine::store::Store;
use talaria::engine::{EngineOptions, SessionChoice};
use talaria::paths::Paths;
use talaria::protocol::{Event, Op, TurnOutcome};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};
use tokio::sync::mpsc;

const REDIRECT_RUNS: usize = 30;
const INTERRUPT_RUNS: usize = 30;
const APPENDS: usize = 2000;
const APPEND_WARMUP: usize = 50;
/// Longest any single step may take before the benchmark gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
const REDIRECT_TEXT: &str = "never mind the sleep, list the files instead";

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot build the tokio runtime")?;
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir().context("cannot create a temp dir")?;
    println!("# latency benchmark");
    println!();
    println!("{}", machine_line());
    println!();

    let server = ScriptedServer::with_responder(|_| ScriptedResponse::text("ok")).await?;
    // Bodies are kept (the redirect check reads the last one); 1000 at most, fine.
    let store = Store::open(&tmp.path().join("state.db"))?;

    let mut redirect = Runs::default();
    if wanted("redirect") {
        for run in 0..REDIRECT_RUNS {
            let (to_request, to_yield) = redirect_once(tmp.path(), &server, &store, run).await?;
            eprintln!("redirect run {run}: next request after {to_request:?} (tool yielded after {to_yield:?})");
            redirect.main.push(to_request);
            redirect.extra.push(to_yield);
        }
    }
    let mut interrupt = Runs::default();
    if wanted("interrupt") {
        for run in 0..INTERRUPT_RUNS {
            let (to_gone, to_finished) = interrupt_once(tmp.path(), &server, &store, run).await?;
            eprintln!("interrupt run {run}: group gone after {to_gone:?} (turn finished after {to_finished:?})");
            interrupt.main.push(to_gone);
            interrupt.extra.push(to_finished);
        }
    }
    let appends = if wanted("append") { appends(&tmp.path().join("append.db")).await? } else { Vec::new() };

    println!("| Figure | Target | Runs | min | p50 | p99 | max |");
    println!("|---|---|---|---|---|---|---|");
    row(
        "(a) Submit (redirect) during foreground `sleep 300` → next chat request at the server (ms)",
        "p99 < 150",
        &redirect.main,
    );
    row("    same runs, → `ToolFinished` (the command yielded to the background) (ms)", "", &redirect.extra);
    row("(b) Interrupt during foreground `sleep 300` → its process group gone (ms)", "p99 < 100", &interrupt.main);
    row("    same runs, → `TurnFinished { Interrupted }` (ms)", "", &interrupt.extra);
    row("(c) `Store::append_message`, awaited (ms)", "p99 < 1", &appends);
    println!();
    println!("load average at end: {}", loadavg());
    Ok(())
}

#[derive(Default)]
struct Runs {
    main: Vec<Duration>,
    extra: Vec<Duration>,
}

/// The sections named on the command line (`cargo bench --bench latency -- append`), or
/// all of them. Cargo's own `--bench` flag is ignored.
fn wanted(section: &str) -> bool {
    let named: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    named.is_empty() || named.iter().any(|a| a == section)
}

/// A running engine with a forwarder that stamps each event as it arrives.
struct Engine {
    ops: mpsc::UnboundedSender<Op>,
    events: mpsc::UnboundedReceiver<(Instant, Event)>,
    join: tokio::task::JoinHandle<()>,
}

impl Engine {
    async fn start(home: &Path, server: &ScriptedServer, store: &Store) -> anyhow::Result<Engine> {
        let paths = Paths::under(home);
        let cwd = home.join("work");
        std::fs::create_dir_all(&cwd).with_context(|| format!("cannot create {}", cwd.display()))?;
        let settings = ClientSettings::new(server.base_url()).max_retries(0);
        let provider = Arc::new(OpenAiClient::new(settings)?);
        let options = EngineOptions {
            config: Arc::new(Config::default()),
            paths,
            provider,
            model: "scripted-model".into(),
            provider_label: "scripted".into(),
            demo: false,
            store: store.clone(),
            session: SessionChoice::New,
            cwd,
            approval_policy: PromptPolicy::AllowUnattended,
            reaper: false,
            inherited_sandbox: None,
        };
        let (handle, join) = talaria::engine::start(options).await?;
        let (tx, events) = mpsc::unbounded_channel();
        let mut raw = handle.events;
        tokio::spawn(async move {
            while let Some(event) = raw.recv().await {
                if tx.send((Instant::now(), event)).is_err() {
                    break;
                }
            }
        });
        let mut engine = Engine { ops: handle.ops, events, join };
        engine.wait_event("SessionReady", |e| matches!(e, Event::SessionReady { .. })).await?;
        Ok(engine)
    }

    fn send(&self, op: Op) -> anyhow::Result<()> {
        self.ops.send(op).map_err(|_| anyhow::anyhow!("the engine stopped"))
    }

    /// The arrival time of the first event (from now on) that matches.
    async fn wait_event(&mut self, what: &str, pred: impl Fn(&Event) -> bool) -> anyhow::Result<Instant> {
        let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some((at, event))) if pred(&event) => return Ok(at),
                Ok(Some(_)) => {}
                Ok(None) => bail!("the engine stopped while waiting for {what}"),
                Err(_) => bail!("no {what} within {STEP_TIMEOUT:?}"),
            }
        }
    }

    async fn shutdown(mut self) -> anyhow::Result<()> {
        self.send(Op::Shutdown)?;
        self.wait_event("ShutdownComplete", |e| matches!(e, Event::ShutdownComplete)).await?;
        tokio::time::timeout(STEP_TIMEOUT, self.join).await.context("the engine did not stop")??;
        Ok(())
    }
}

/// Start an engine, have the model run a foreground `sleep 300`, and return once the
/// `sleep` runs, with its process group and that group's members.
async fn engine_with_sleep(
    home: &Path,
    server: &ScriptedServer,
    store: &Store,
    run: usize,
) -> anyhow::Result<(Engine, i32, Vec<i32>)> {
    let mut engine = Engine::start(home, server, store).await?;
    server.push(ScriptedResponse::tool_call(&format!("call_{run}"), "terminal", r#"{"command":"sleep 300"}"#));
    let before = server.request_count();
    engine.send(Op::Submit { text: "run sleep 300 in the foreground".into(), mode: None })?;
    let requests = server.wait_for_requests(before + 1, STEP_TIMEOUT).await;
    if server.request_count() < before + 1 {
        bail!("the model was never asked (got {} requests)", requests.len());
    }
    engine.wait_event("ToolStarted", |e| matches!(e, Event::ToolStarted { name, .. } if name == "terminal")).await?;
    let (pgid, members) = wait_for_sleep_child().await?;
    Ok((engine, pgid, members))
}

async fn redirect_once(
    tmp: &Path,
    server: &ScriptedServer,
    store: &Store,
    run: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let (mut engine, pgid, _) = engine_with_sleep(&tmp.join(format!("redirect-{run}")), server, store, run).await?;
    let before = server.request_count();
    let started = Instant::now();
    engine.send(Op::Submit { text: REDIRECT_TEXT.into(), mode: None })?;
    server.wait_for_requests(before + 1, STEP_TIMEOUT).await;
    let to_request = started.elapsed();
    if server.request_count() < before + 1 {
        bail!("no chat request followed the redirect within {STEP_TIMEOUT:?}");
    }
    let last = server.requests().pop().context("no request recorded")?;
    let delivered = last.messages().iter().any(|m| m.content.as_deref().is_some_and(|c| c.contains(REDIRECT_TEXT)));
    if !delivered {
        bail!("the request after the redirect does not carry the typed message");
    }
    let yielded = engine.wait_event("ToolFinished", |e| matches!(e, Event::ToolFinished { .. })).await?;
    engine.wait_event("TurnFinished", |e| matches!(e, Event::TurnFinished { .. })).await?;
    engine.shutdown().await?;
    wait_group_gone(pgid).await?;
    Ok((to_request, yielded.saturating_duration_since(started)))
}

async fn interrupt_once(
    tmp: &Path,
    server: &ScriptedServer,
    store: &Store,
    run: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let (mut engine, pgid, members) =
        engine_with_sleep(&tmp.join(format!("interrupt-{run}")), server, store, run).await?;
    let watcher = GroupWatcher::start(pgid, members, STEP_TIMEOUT);
    let started = Instant::now();
    engine.send(Op::Interrupt)?;
    let finished = engine
        .wait_event("TurnFinished", |e| matches!(e, Event::TurnFinished { outcome: TurnOutcome::Interrupted }))
        .await?;
    let gone = watcher.join()?;
    if group_alive(pgid) {
        bail!("process group {pgid} survived the interrupt");
    }
    engine.shutdown().await?;
    Ok((gone.saturating_duration_since(started), finished.saturating_duration_since(started)))
}

async fn appends(db: &Path) -> anyhow::Result<Vec<Duration>> {
    let store = Store::open(db)?;
    let sid = store.create_session("bench", "/bench", None).await?;
    let mut times = Vec::with_capacity(APPENDS);
    for i in 0..APPENDS + APPEND_WARMUP {
        let msg = message(i);
        let started = Instant::now();
        store.append_message(&sid, msg).await?;
        if i >= APPEND_WARMUP {
            times.push(started.elapsed());
        }
    }
    // Where the slow ones fall (a regular spacing points at WAL checkpoints).
    let slow: Vec<String> = times
        .iter()
        .enumerate()
        .filter(|(_, d)| **d > Duration::from_millis(1))
        .map(|(i, d)| format!("#{i} {:.1} ms", d.as_secs_f64() * 1000.0))
        .collect();
    eprintln!("appends over 1 ms: {} of {}: {}", slow.len(), times.len(), slow.join(", "));
    Ok(times)
}

// ---- processes -------------------------------------------------------------------------

/// The foreground command is a child of this process (`bash -c …` in its own group):
/// wait until its `sleep` runs; return the group and its members.
async fn wait_for_sleep_child() -> anyhow::Result<(i32, Vec<i32>)> {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        for pgid in children_of(me) {
            let members = group_members(pgid);
            if members.iter().any(|pid| read_comm(*pid).as_deref() == Some("sleep")) {
                return Ok((pgid, members));
            }
        }
        if Instant::now() > deadline {
            bail!("the foreground `sleep 300` never started");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Live children of `parent` (state, ppid, pgrp follow the last `)` of /proc/<pid>/stat).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            let Some(close) = text.rfind(')') else { return false };
            let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
            fields.first().is_some_and(|s| *s != "Z")
                && fields.get(1).and_then(|p| p.parse::<i32>().ok()) == Some(parent)
        })
        .collect()
}

async fn wait_group_gone(pgid: i32) -> anyhow::Result<()> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    while group_alive(pgid) {
        if Instant::now() > deadline {
            bail!("process group {pgid} is still alive after the engine shut down");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

// ---- reporting -------------------------------------------------------------------------

fn row(label: &str, target: &str, values: &[Duration]) {
    if values.is_empty() {
        return;
    }
    let mut v: Vec<f64> = values.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    v.sort_by(f64::total_cmp);
    let fmt = |x: f64| if x < 1.0 { format!("{x:.3}") } else { format!("{x:.1}") };
    println!(
        "| {label} | {target} | {} | {} | {} | {} | {} |",
        v.len(),
        fmt(percentile(&v, 0.0)),
        fmt(percentile(&v, 0.5)),
        fmt(percentile(&v, 0.99)),
        fmt(percentile(&v, 1.0))
    );
}
