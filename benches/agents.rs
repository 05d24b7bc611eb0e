//! Sub-agents (DESIGN §14, issue #34), the real binary in a pseudo-terminal against the
//! scripted model server on 127.0.0.1:
//! - the parent's keystroke-to-screen latency while its own answer streams, first alone and
//!   then, in the same run, while four sub-agents stream answers of their own;
//! - VmRSS of one idle sub-agent (its command runs, its model is silent) and of one working
//!   sub-agent (its answer streams).
//!
//! `cargo bench --profile dev --bench agents` (`TALARIA_PTY_BIN=target/release/talaria`
//! drives a release build; `TALARIA_BENCH_KEYS` keystrokes per phase, default 100;
//! `TALARIA_BENCH_RUNS` runs of both phases, default 1). Prints the figures and the load
//! average; asserts nothing about speed.

#[path = "../tests/common/pty.rs"]
mod pty;

#[path = "common/keys.rs"]
mod keystroke;

mod common;

use std::time::{Duration, Instant};

use pty::Pty;
use serde_json::json;
use talaria::testkit::scripted::{
    finish_chunk, text_chunks, tool_call_chunks, usage_chunk, RecordedRequest, ScriptedResponse, ScriptedServer, DONE,
};

const DEADLINE: Duration = Duration::from_secs(120);
/// Sub-agents streaming beside the parent.
const AGENTS: usize = 4;
/// What streams: ~32 s at 6 characters every 20 ms, longer than the typing.
const STREAM_WORD: &str = "streaming words ";
const STREAM_REPEAT: usize = 600;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn first_user(req: &RecordedRequest) -> String {
    let messages = req.body["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("").to_string()
}

fn last_role(req: &RecordedRequest) -> String {
    let messages = req.body["messages"].as_array().cloned().unwrap_or_default();
    messages.last().and_then(|m| m["role"].as_str()).unwrap_or("").to_string()
}

fn stream(word: &str) -> ScriptedResponse {
    let mut payloads = text_chunks(&word.repeat(STREAM_REPEAT), 6);
    payloads.push(finish_chunk("stop"));
    payloads.push(usage_chunk(10, 10));
    payloads.push(DONE.to_string());
    ScriptedResponse::sse(payloads).delay(Duration::from_millis(20))
}

fn agent_calls(tasks: &[String]) -> ScriptedResponse {
    let mut payloads = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        let args = json!({ "task": task }).to_string();
        payloads.extend(tool_call_chunks(i, &format!("call_{i}"), "agent", &args, 32));
    }
    payloads.push(finish_chunk("tool_calls"));
    payloads.push(usage_chunk(10, 5));
    payloads.push(DONE.to_string());
    ScriptedResponse::sse(payloads)
}

/// The model: the parent's prompt `STREAM…` streams at once; `AGENTS…` first starts the
/// sub-agents (each of whom streams), then streams; `IDLE…` starts one sub-agent that runs
/// `sleep` and says nothing meanwhile.
async fn server() -> ScriptedServer {
    ScriptedServer::with_responder(|req| {
        let first = first_user(req);
        if first.starts_with("SUB-STREAM") {
            return stream("agent words ");
        }
        if first.starts_with("SUB-IDLE") {
            if last_role(req) == "tool" {
                return ScriptedResponse::text("slept");
            }
            let args = json!({ "command": "sleep 600", "timeout": 900 }).to_string();
            return ScriptedResponse::tool_call("call_sleep", "terminal", &args);
        }
        if first.starts_with("AGENTS") && last_role(req) != "tool" {
            let tasks: Vec<String> = (0..AGENTS).map(|i| format!("SUB-STREAM {i}: tell a story")).collect();
            return agent_calls(&tasks);
        }
        if first.starts_with("IDLE") && last_role(req) != "tool" {
            let args = json!({ "task": "SUB-IDLE: wait" }).to_string();
            return ScriptedResponse::tool_call("call_idle", "agent", &args);
        }
        if first.starts_with("IDLE") {
            return ScriptedResponse::text("it waits");
        }
        stream(STREAM_WORD)
    })
    .await
    .expect("scripted server")
}

fn wait_screen(p: &Pty, needle: &str) {
    let start = Instant::now();
    while !p.contents().contains(needle) {
        assert!(start.elapsed() < DEADLINE, "no {needle:?} within {DEADLINE:?}; screen:\n{}", p.contents());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Live sub-agent talarias (their command line names the hidden subcommand).
fn agent_pids() -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.get(1).is_some_and(|a| *a == b"__agent") {
            pids.push(pid);
        }
    }
    pids
}

fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// VmRSS once it has not changed for a second (at most 20 s).
fn settled(pid: u32) -> (f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut last, mut since) = (status_mib(pid, "VmRSS:"), Instant::now());
    while Instant::now() < deadline && since.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(50));
        let now = status_mib(pid, "VmRSS:");
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    (last, status_mib(pid, "RssAnon:"))
}

/// Quit, killing what runs (the sub-agents and their commands with it).
fn quit(mut p: Pty) {
    p.send(b"\x03");
    std::thread::sleep(Duration::from_millis(200));
    p.send(b"\x04");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        let screen = p.contents();
        if screen.contains("Kill the jobs") || screen.contains("kill them") {
            p.send(b"y");
            break;
        }
        if p.wait_exit(Duration::from_millis(100)).is_some() {
            return;
        }
    }
    if p.wait_exit(Duration::from_secs(20)).is_none() {
        eprintln!("talaria did not exit; killing it");
        let _ = p.child.kill();
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One phase: the parent streams (with `AGENTS` sub-agents streaming when `agents`), `keys`
/// keystrokes are measured meanwhile. Returns the latencies and the working sub-agents' RSS.
fn phase(rt: &tokio::runtime::Runtime, agents: bool, keys: usize) -> (Vec<f64>, Vec<(f64, f64)>) {
    let server = rt.block_on(server());
    let home = tempfile::tempdir().expect("home");
    let work = tempfile::tempdir().expect("work");
    let url = server.base_url();
    let p = Pty::spawn(home.path(), work.path(), &["--base-url", url.as_str(), "--model", "m"], 120, 36);
    wait_screen(&p, " message ");
    p.type_text(if agents { "AGENTS: four of you, then me" } else { "STREAM: tell me a story" });
    p.send(b"\r");
    let start = Instant::now();
    if agents {
        // Every sub-agent streams (its request is at the server) before the typing starts.
        loop {
            let streaming = server.chat_requests().iter().filter(|r| first_user(r).starts_with("SUB-STREAM")).count();
            if streaming >= AGENTS {
                break;
            }
            assert!(start.elapsed() < DEADLINE, "only {streaming} sub-agents asked the model");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    wait_screen(&p, "streaming words");
    let times: Vec<f64> = keystroke::keystroke_latencies(&p, keys).into_iter().map(ms).collect();
    let rss = if agents { agent_pids().into_iter().map(settled).collect() } else { Vec::new() };
    if agents {
        let working = server
            .chat_requests()
            .iter()
            .filter(|r| first_user(r).starts_with("SUB-STREAM") && last_role(r) == "user")
            .count();
        println!("  ({working} sub-agent requests streamed during the phase)");
    }
    quit(p);
    (times, rss)
}

/// RSS of one sub-agent whose command runs while its model is silent.
fn idle_agent(rt: &tokio::runtime::Runtime) -> (f64, f64) {
    let server = rt.block_on(server());
    let home = tempfile::tempdir().expect("home");
    let work = tempfile::tempdir().expect("work");
    let url = server.base_url();
    let p = Pty::spawn(home.path(), work.path(), &["--base-url", url.as_str(), "--model", "m"], 120, 36);
    wait_screen(&p, " message ");
    p.type_text("IDLE: one that waits");
    p.send(b"\r");
    wait_screen(&p, "it waits");
    let start = Instant::now();
    let pid = loop {
        let asked = server.chat_requests().iter().any(|r| first_user(r).starts_with("SUB-IDLE"));
        if let (true, Some(pid)) = (asked, agent_pids().first().copied()) {
            break pid;
        }
        assert!(start.elapsed() < DEADLINE, "the idle sub-agent never asked the model");
        std::thread::sleep(Duration::from_millis(10));
    };
    // Its `sleep` runs: it waits on its command now.
    wait_screen(&p, "terminal: sleep 600");
    let rss = settled(pid);
    quit(p);
    rss
}

fn row(label: &str, values: &mut [f64]) {
    values.sort_by(|a, b| a.total_cmp(b));
    println!(
        "| {label} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
        values.len(),
        values[0],
        common::percentile(values, 0.5),
        common::percentile(values, 0.99),
        values[values.len() - 1]
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let keys = env_usize("TALARIA_BENCH_KEYS", 100);
    let runs = env_usize("TALARIA_BENCH_RUNS", 1).max(1);
    println!("{}", common::machine_line());
    println!("talaria: {}", std::env::var("TALARIA_PTY_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_talaria").into()));
    let (mut alone, mut beside, mut working) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        println!("run {}: main session alone (load {})", run + 1, common::loadavg());
        alone.extend(phase(&rt, false, keys).0);
        println!("run {}: with {AGENTS} sub-agents streaming (load {})", run + 1, common::loadavg());
        let (times, rss) = phase(&rt, true, keys);
        beside.extend(times);
        working.extend(rss);
    }
    println!("idle sub-agent (load {})", common::loadavg());
    let idle = idle_agent(&rt);
    println!("load average at the end: {}", common::loadavg());
    println!();
    println!("| keystroke → screen (ms), parent streaming | keys | min | median | p99 | max |");
    println!("|---|---|---|---|---|---|");
    row("main session alone", &mut alone);
    row(&format!("while {AGENTS} sub-agents stream"), &mut beside);
    println!();
    println!("| sub-agent | VmRSS (MiB) | RssAnon (MiB) |");
    println!("|---|---|---|");
    println!("| idle (its `sleep 600` runs, its model silent) | {:.1} | {:.1} |", idle.0, idle.1);
    for (i, (rss, anon)) in working.iter().enumerate() {
        println!("| working #{} (its answer streams) | {rss:.1} | {anon:.1} |", i + 1);
    }
}
