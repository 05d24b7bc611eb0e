//! Time from spawning the real `talaria` in a pseudo-terminal to its first frame (the
//! " message " input box on screen), for a new session and for `--resume` of a
//! 10,000-message session (also until that session's last message is on screen, and the
//! talaria process's VmRSS then). Prints min / median / p99 / max over 10 runs; asserts
//! nothing about speed. `TALARIA_BENCH_MESSAGES=100000` resumes a longer session,
//! `TALARIA_BENCH_RUNS` changes the number of runs.
//!
//! `TALARIA_BENCH_KEYS=N` then measures keystroke-to-screen latency in that resumed session
//! while the model streams an answer and `TALARIA_BENCH_JOBS` (default 32) background jobs
//! print a line every 50 ms each: N keystrokes of a character that appears nowhere else
//! (each removed again with Backspace), latency = write to the first output chunk carrying it.
//!
//! `TALARIA_BENCH_SUMMARY=0`: the model does not answer the compaction of that long session.
//! `TALARIA_PTY_BIN=target/release/talaria` drives that binary instead of the one cargo
//! built with the bench (a dev-built bench can time a release build).

mod common;

use common::*;

#[path = "../tests/common/pty.rs"]
mod pty;

#[path = "common/keys.rs"]
mod keystroke;

use std::path::Path;
use std::time::{Duration, Instant};

use pty::Pty;
use talaria::engine::store::{Store, StoredMessage};
use talaria::paths::Paths;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
const LAST_TEXT: &str = "the very last answer of the long session";
const DEADLINE: Duration = Duration::from_secs(60);

/// Wait until the screen shows `needle`; the time from `start`.
fn time_until(p: &Pty, needle: &str, start: Instant) -> Duration {
    let deadline = start + DEADLINE;
    loop {
        if p.contents().contains(needle) {
            return start.elapsed();
        }
        assert!(Instant::now() < deadline, "no {needle:?} within {DEADLINE:?}; screen:\n{}", p.contents());
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn quit(mut p: Pty) {
    p.send(b"\x04");
    if p.wait_exit(Duration::from_secs(20)).is_none() {
        eprintln!("talaria did not exit after Ctrl+D; killing it");
    }
}

fn summary(label: &str, mut times: Vec<Duration>) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    // Nearest rank: with fewer than 100 runs p99 is the slowest.
    let p99 = times[((times.len() * 99).div_ceil(100)).saturating_sub(1)];
    println!(
        "{label:<56} min {:>7.1} ms   median {:>7.1} ms   p99 {:>7.1} ms   max {:>7.1} ms   ({} runs)",
        ms(times[0]),
        ms(times[times.len() / 2]),
        ms(p99),
        ms(times[times.len() - 1]),
        times.len()
    );
}

fn vm_rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS:")
}

/// A size line of /proc/<pid>/status in MiB: VmRSS, or RssAnon (the process's own memory,
/// without the pages of the binary and libraries it has mapped).
fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// VmRSS once it has not changed for a second (the engine reads the whole session for the
/// model after the transcript is on screen); at most 30 s.
fn settled_rss_mib(pid: u32) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut last, mut since) = (vm_rss_mib(pid), Instant::now());
    while Instant::now() < deadline && since.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(50));
        let now = vm_rss_mib(pid);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last
}

/// Keystroke-to-screen latency in the resumed session with a model streaming and `jobs`
/// background jobs printing.
fn keystrokes(
    rt: &tokio::runtime::Runtime,
    home: &Path,
    cwd: &Path,
    id: &str,
    messages: usize,
    keys: usize,
    jobs: usize,
) {
    use talaria::testkit::scripted::{text_chunks, DONE};
    // The session is longer than the model's window (10,000 messages are ~850k tokens): the
    // first request of the turn asks for the summary that compacts it. With
    // TALARIA_BENCH_SUMMARY=0 that answer is the first job's tool call instead, so the
    // compaction fails and every request goes with the session as it is.
    let summarised = env_usize("TALARIA_BENCH_SUMMARY", 1) > 0;
    let mut responses = Vec::new();
    if summarised {
        responses.push(ScriptedResponse::text("Summary: a long benchmark session of ordinary words."));
    }
    responses.extend((0..jobs).map(|j| {
        let command = format!("while :; do echo bench-job-{j} line; sleep 0.05; done");
        let args = serde_json::json!({ "command": command, "background": true }).to_string();
        ScriptedResponse::tool_call(&format!("call_{j}"), "terminal", &args)
    }));
    let mut payloads = text_chunks(&"streaming words ".repeat(2000), 6);
    payloads.push(DONE.to_string());
    responses.push(ScriptedResponse::sse(payloads).delay(Duration::from_millis(20)));
    let server = rt.block_on(ScriptedServer::start(responses)).expect("scripted server");
    let url = server.base_url();
    let args = ["--base-url", url.as_str(), "--model", "m", "--resume", id];
    let mut p = Pty::spawn(home, cwd, &args, 120, 36);
    time_until(&p, LAST_TEXT, Instant::now());
    p.type_text("start the jobs and tell me a long story");
    p.send(b"\r");
    let start = Instant::now();
    // The summary, then every job was started (one request per tool result) and the answer
    // is streaming.
    while server.request_count() < jobs + 2 - usize::from(!summarised) {
        assert!(start.elapsed() < 10 * DEADLINE, "only {} requests at the server", server.request_count());
        std::thread::sleep(Duration::from_millis(5));
    }
    time_until(&p, "streaming words", Instant::now());
    let times = keystroke::keystroke_latencies(&p, keys);
    let pid = p.child.process_id();
    let rss = pid.map(vm_rss_mib).unwrap_or(0.0);
    let anon = pid.map(|pid| status_mib(pid, "RssAnon:")).unwrap_or(0.0);
    p.send(b"\x04");
    time_until(&p, "Kill the jobs", Instant::now());
    p.send(b"y");
    if p.wait_exit(Duration::from_secs(20)).is_none() {
        eprintln!("talaria did not exit; killing it");
    }
    summary(&format!("keystroke -> screen, {messages} messages, streaming, {jobs} jobs printing"), times);
    println!("  (the answer streams for ~107 s, longer than the typing; talaria VmRSS then {rss:.1} MiB, RssAnon {anon:.1} MiB)");
}

fn long_session(rt: &tokio::runtime::Runtime, home: &Path, cwd: &Path, messages: usize) -> String {
    let paths = Paths::under(home);
    paths.ensure_dirs().expect("dirs");
    let store = Store::open(&paths.state_db).expect("open store");
    rt.block_on(async {
        let id = store.create_session("m", &cwd.display().to_string(), None).await.expect("session");
        // In batches (one transaction each): a 100,000-message session in seconds.
        let mut i = 0;
        while i < messages - 1 {
            let end = (i + 1000).min(messages - 1);
            store.append_messages(&id, (i..end).map(message).collect()).await.expect("append");
            i = end;
        }
        let last = StoredMessage {
            role: talaria::engine::llm::Role::Assistant,
            content: Some(LAST_TEXT.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            display_kind: None,
            origin: None,
        };
        store.append_message(&id, last).await.expect("append");
        store.flush().await.expect("flush");
        id
    })
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument other than ours skips the run.
    if std::env::args().skip(1).any(|a| !a.starts_with('-') && !"first_frame".contains(a.as_str())) {
        return;
    }
    let runs = env_usize("TALARIA_BENCH_RUNS", 10).max(1);
    let messages = env_usize("TALARIA_BENCH_MESSAGES", 10_000).max(2);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let server = rt.block_on(ScriptedServer::start([ScriptedResponse::text("unused")])).expect("scripted server");
    let url = server.base_url();
    let home = tempfile::tempdir().expect("temp home");
    let cwd = home.path().join("work");
    std::fs::create_dir_all(&cwd).expect("work dir");
    let base = ["--base-url", url.as_str(), "--model", "m"];

    let (mut fresh, mut fresh_rss, mut fresh_settled, mut fresh_anon) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let start = Instant::now();
        let p = Pty::spawn(home.path(), &cwd, &base, 120, 36);
        fresh.push(time_until(&p, " message ", start));
        if let Some(pid) = p.child.process_id() {
            fresh_rss.push(vm_rss_mib(pid));
            fresh_settled.push(settled_rss_mib(pid));
            fresh_anon.push(status_mib(pid, "RssAnon:"));
        }
        quit(p);
    }

    let made = Instant::now();
    let id = long_session(&rt, home.path(), &cwd, messages);
    println!("(created a {messages}-message session in {:.1} s)", made.elapsed().as_secs_f64());
    let mut args = base.to_vec();
    args.extend_from_slice(&["--resume", id.as_str()]);
    let (mut frame, mut last, mut rss, mut settled, mut settled_anon) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let start = Instant::now();
        let p = Pty::spawn(home.path(), &cwd, &args, 120, 36);
        frame.push(time_until(&p, " message ", start));
        last.push(time_until(&p, LAST_TEXT, start));
        if let Some(pid) = p.child.process_id() {
            rss.push(vm_rss_mib(pid));
            settled.push(settled_rss_mib(pid));
            settled_anon.push(status_mib(pid, "RssAnon:"));
        }
        quit(p);
    }

    println!("talaria first frame in a 120x36 PTY (debug or release as built by cargo bench):");
    summary("new session: spawn -> input box", fresh);
    summary(&format!("--resume {messages} messages: spawn -> input box"), frame);
    summary(&format!("--resume {messages} messages: spawn -> last message shown"), last);
    let resumed = format!("--resume {messages} messages");
    for (case, what, mut values) in [
        ("new session", "at the first frame", fresh_rss),
        ("new session", "once settled", fresh_settled),
        ("new session", "(RssAnon) once settled", fresh_anon),
        (resumed.as_str(), "when the last message is shown", rss),
        (resumed.as_str(), "once settled (the model's part read)", settled),
        (resumed.as_str(), "(RssAnon) once settled", settled_anon),
    ] {
        values.sort_by(f64::total_cmp);
        if let (Some(lo), Some(hi)) = (values.first(), values.last()) {
            println!(
                "{case}: talaria VmRSS {what}: min {lo:.1} MiB   median {:.1} MiB   max {hi:.1} MiB",
                values[values.len() / 2]
            );
        }
    }
    let keys = env_usize("TALARIA_BENCH_KEYS", 0);
    if keys > 0 {
        keystrokes(&rt, home.path(), &cwd, &id, messages, keys, env_usize("TALARIA_BENCH_JOBS", 32));
    }
    println!("load average at the end: {}", loadavg());
}
