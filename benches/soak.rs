//! A long day, accelerated: the real `talaria` in a pseudo-terminal against the scripted
//! model server for `SOAK_TURNS` (2,000) typed turns, each with a tool call; one turn in ten
//! starts a background job that ends a moment later (200 jobs, each ending in a job notice
//! the model is told), `/compact` at evenly spaced turns (5), a heartbeat every minute (its
//! floor: the day's half-hourly heartbeat on a 30× shorter clock) firing whenever the session
//! goes idle, and a keystroke typed (and erased) into the input box during every turn.
//!
//! Every `SOAK_EVERY` (100) turns it records talaria's VmRSS, open descriptors (/proc/<pid>/fd),
//! alive tokio tasks (`kill -USR1` makes talaria log its runtime counters), the database's
//! size (state.db + its WAL) with the messages stored, and the keystrokes' p50/p99 in those
//! turns; prints one Markdown table and the verdict against the targets. Asserts nothing.
//!
//! ```sh
//! cargo build --release --bin talaria && cargo bench --profile dev --bench soak --no-run
//! TALARIA_PTY_BIN=$PWD/target/release/talaria target/debug/deps/soak-<hash> --bench
//! SOAK_TURNS=500 …   # a shorter day (the compactions are spread over it)
//! ```

mod common;

use common::*;

#[path = "../tests/common/pty.rs"]
mod pty;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pty::Pty;
use serde_json::{json, Value};
use talaria::testkit::scripted::{finish_chunk, text_chunks, ScriptedResponse, ScriptedServer, DONE};

const DEADLINE: Duration = Duration::from_secs(120);
/// Typed into the input box while a turn runs, and nowhere else on screen.
const KEY: char = 'ʬ';

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Where the latest `soak turn N` is in the conversation, and N (typed turns are plain, or
/// wrapped as out-of-band messages when they arrive during a notice's or heartbeat's turn).
fn latest_turn(messages: &[Value]) -> Option<(usize, usize)> {
    messages.iter().enumerate().rev().filter(|(_, m)| m["role"] == "user").find_map(|(i, m)| {
        let text = m["content"].as_str()?;
        let at = text.rfind("soak turn ")?;
        Some((i, text[at + 10..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?))
    })
}

/// What the scripted model answers: a summary to a compaction, a line to a heartbeat, else
/// for the latest `soak turn N` a command (a background job when N is a multiple of
/// `job_every`), after its result the answer `done N.` streamed in pieces, and after that
/// a line to whatever comes (a job's end notice).
fn respond(request: &Value, job_every: usize, heartbeats: &AtomicUsize, summaries: &AtomicUsize) -> ScriptedResponse {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    if request.get("tools").is_none() {
        summaries.fetch_add(1, Ordering::SeqCst);
        return ScriptedResponse::text("Summary: a long soak session of numbered turns, each running a command.");
    }
    let last = messages.last().cloned().unwrap_or(Value::Null);
    if last["role"] == "user" && last["content"].as_str().is_some_and(|t| t.starts_with("[Heartbeat")) {
        heartbeats.fetch_add(1, Ordering::SeqCst);
        return ScriptedResponse::text("Nothing has changed since the last heartbeat.");
    }
    let Some((at, n)) = latest_turn(&messages) else {
        return ScriptedResponse::text("Noted.");
    };
    let after = &messages[at + 1..];
    let done = format!("done {n}.");
    if after.iter().any(|m| m["role"] == "assistant" && m["content"].as_str().is_some_and(|t| t.contains(&done))) {
        return ScriptedResponse::text("Noted.");
    }
    if after.iter().any(|m| m["role"] == "tool") {
        let mut pieces = text_chunks(&format!("The command ran as expected; that step is done. {done}"), 8);
        pieces.push(finish_chunk("stop"));
        pieces.push(DONE.to_string());
        return ScriptedResponse::sse(pieces).delay(Duration::from_millis(3));
    }
    let (command, background) = if n % job_every == 0 {
        (format!("sleep 0.3; echo soak job {n} finished"), true)
    } else {
        (format!("echo soak {n}; seq 1 20"), false)
    };
    let args = json!({"command": command, "background": background}).to_string();
    ScriptedResponse::tool_call(&format!("call_{n}_{}", messages.len()), "terminal", &args)
}

/// Messages stored and the bytes of their text (the conversation the database holds).
fn conversation(db: &std::path::Path) -> (i64, i64) {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let Ok(conn) = rusqlite::Connection::open_with_flags(db, flags) else { return (-1, -1) };
    let _ = conn.busy_timeout(Duration::from_secs(5));
    conn.query_row("SELECT count(*), coalesce(sum(length(content)), 0) FROM messages", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .unwrap_or((-1, -1))
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Talaria's log file (one a day) and the count of `runtime counters` lines in it.
fn counters(home: &std::path::Path) -> Vec<usize> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(home.join("logs")).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("runtime counters")) {
            if let Some(n) = line.split("alive_tasks=").nth(1).and_then(|r| r.split_whitespace().next()?.parse().ok()) {
                out.push(n);
            }
        }
    }
    out
}

/// Alive tokio tasks: signal talaria and read the line it logs.
fn alive_tasks(pid: u32, home: &std::path::Path) -> Option<usize> {
    let before = counters(home).len();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGUSR1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let now = counters(home);
        if now.len() > before {
            return now.last().copied();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn wait_screen(p: &Pty, what: &str, ok: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let text = p.contents();
        if ok(&text) {
            return;
        }
        assert!(Instant::now() < deadline, "no {what} within {DEADLINE:?}; screen:\n{text}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Type the probe key into the input box, time it to the screen, and erase it again.
fn keystroke(p: &Pty) -> Duration {
    let mut buf = [0u8; 4];
    let key = KEY.encode_utf8(&mut buf).as_bytes().to_vec();
    let offset = p.raw.lock().expect("raw").len();
    let sent = Instant::now();
    p.send(&key);
    let took = loop {
        if p.raw.lock().expect("raw")[offset..].windows(key.len()).any(|w| w == key.as_slice()) {
            break sent.elapsed();
        }
        assert!(sent.elapsed() < DEADLINE, "the keystroke never reached the screen:\n{}", p.contents());
        std::thread::sleep(Duration::from_micros(100));
    };
    p.send(b"\x7f");
    wait_screen(p, "the erased key", |t| !t.contains(KEY));
    took
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Row {
    turns: usize,
    elapsed_s: f64,
    rss_kib: u64,
    anon_kib: u64,
    fds: usize,
    tasks: Option<usize>,
    db_kib: u64,
    messages: i64,
    text_kib: i64,
    key_p50: f64,
    key_p99: f64,
    jobs: usize,
    compactions: usize,
    heartbeats: usize,
}

fn main() {
    if std::env::args().skip(1).any(|a| !a.starts_with('-') && !"soak".contains(a.as_str())) {
        return;
    }
    let turns = env_usize("SOAK_TURNS", 2000).max(1);
    let every = env_usize("SOAK_EVERY", 100).max(1);
    let jobs_total = env_usize("SOAK_JOBS", 200).min(turns);
    let compactions = env_usize("SOAK_COMPACTIONS", 5);
    let job_every = (turns / jobs_total.max(1)).max(1);
    let compact_every = (turns / (compactions + 1)).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let heartbeats = Arc::new(AtomicUsize::new(0));
    let summaries = Arc::new(AtomicUsize::new(0));
    let (fired, summarised) = (heartbeats.clone(), summaries.clone());
    let server = rt
        .block_on(ScriptedServer::with_responder(move |r| respond(&r.body, job_every, &fired, &summarised)))
        .expect("scripted server");
    server.set_recording(false);
    let home = tempfile::tempdir().expect("temp home");
    let cwd = home.path().join("work");
    std::fs::create_dir_all(&cwd).expect("work dir");
    let url = server.base_url();
    let args = ["--base-url", url.as_str(), "--model", "soak"];
    let p = Pty::spawn(home.path(), &cwd, &args, 120, 40);
    let pid = p.child.process_id().expect("talaria's pid");
    wait_screen(&p, "the input box", |t| t.contains(" message "));
    let send_line = |text: &str| {
        // Pasted (bracketed), then Enter: a typed line without 2 ms a key.
        p.send(format!("\x1b[200~{text}\x1b[201~").as_bytes());
        p.send(b"\r");
    };
    send_line("/heartbeat every 1m Check the soak and report anything new.");
    wait_screen(&p, "the heartbeat", |t| t.contains("heartbeat set"));
    let db = home.path().join("state.db");
    let wal = home.path().join("state.db-wal");
    let started = Instant::now();
    let (mut keys, mut rows, mut done_compactions) = (Vec::new(), Vec::new(), 0usize);
    let sample = |turn: usize, keys: &mut Vec<Duration>, compactions: usize| -> Row {
        keys.sort();
        let pick = |q: usize| keys.get((keys.len() * q).div_ceil(100).saturating_sub(1)).copied().map_or(0.0, ms);
        let (messages, text_bytes) = conversation(&db);
        let row = Row {
            turns: turn,
            elapsed_s: started.elapsed().as_secs_f64(),
            rss_kib: status_kib(pid, "VmRSS:"),
            anon_kib: status_kib(pid, "RssAnon:"),
            fds: open_fds(pid),
            tasks: alive_tasks(pid, home.path()),
            db_kib: (file_len(&db) + file_len(&wal)) / 1024,
            messages,
            text_kib: text_bytes / 1024,
            key_p50: pick(50),
            key_p99: pick(99),
            jobs: turn / job_every,
            compactions,
            heartbeats: heartbeats.load(Ordering::SeqCst),
        };
        eprintln!(
            "turn {:>5}  {:>6.0} s  RSS {:>6.1} MiB  fds {:>3}  tasks {:>4}  db {:>6} KiB  keys p99 {:>5.1} ms  heartbeats {}",
            row.turns,
            row.elapsed_s,
            row.rss_kib as f64 / 1024.0,
            row.fds,
            row.tasks.map_or("?".into(), |t| t.to_string()),
            row.db_kib,
            row.key_p99,
            row.heartbeats
        );
        keys.clear();
        row
    };
    rows.push(sample(0, &mut keys, 0));
    for n in 1..=turns {
        send_line(&format!("soak turn {n}: run the next check."));
        keys.push(keystroke(&p));
        let needle = format!("done {n}.");
        wait_screen(&p, &needle, |t| t.contains(&needle) && t.contains("● idle"));
        if compactions > 0 && n % compact_every == 0 && done_compactions < compactions {
            send_line("/compact");
            done_compactions += 1;
            let deadline = Instant::now() + DEADLINE;
            while summaries.load(Ordering::SeqCst) < done_compactions {
                assert!(Instant::now() < deadline, "no summary request for /compact:\n{}", p.contents());
                std::thread::sleep(Duration::from_millis(5));
            }
            wait_screen(&p, "the compaction", |t| t.contains("context compacted") && t.contains("● idle"));
        }
        if n % every == 0 {
            rows.push(sample(n, &mut keys, done_compactions));
        }
    }
    let settled = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(100));
    }
    let last = sample(turns, &mut keys, done_compactions);
    let mut p = p;
    p.send(b"\x04");
    let _ = p.wait_exit(Duration::from_secs(20));

    println!("Soak: {turns} turns, every {job_every}th starts a job, /compact every {compact_every} turns, heartbeat every 1 min; load average at the end {}", loadavg());
    println!();
    println!("| turns | elapsed (s) | VmRSS (MiB) | RssAnon (MiB) | open fds | tokio tasks | state.db + WAL (KiB) | messages (text KiB) | keystroke p50 / p99 (ms) | jobs | compactions | heartbeats |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows.iter().chain(std::iter::once(&last)) {
        println!(
            "| {} | {:.0} | {:.1} | {:.1} | {} | {} | {} | {} ({}) | {:.2} / {:.2} | {} | {} | {} |",
            r.turns,
            r.elapsed_s,
            r.rss_kib as f64 / 1024.0,
            r.anon_kib as f64 / 1024.0,
            r.fds,
            r.tasks.map_or("?".into(), |t| t.to_string()),
            r.db_kib,
            r.messages,
            r.text_kib,
            r.key_p50,
            r.key_p99,
            r.jobs,
            r.compactions,
            r.heartbeats
        );
    }
    if let Some(base) = rows.iter().find(|r| r.turns >= every.min(turns)) {
        let max_rss = rows.iter().map(|r| r.rss_kib).max().unwrap_or(0);
        println!();
        println!(
            "RSS after {} turns {:.1} MiB, highest after {:.1} MiB (+{:.1}; target within 5 MiB); fds {} → {}; tasks {:?} → {:?}",
            base.turns,
            base.rss_kib as f64 / 1024.0,
            max_rss as f64 / 1024.0,
            max_rss.saturating_sub(base.rss_kib) as f64 / 1024.0,
            base.fds,
            last.fds,
            base.tasks,
            last.tasks
        );
    }
}
