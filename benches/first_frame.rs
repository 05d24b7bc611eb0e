//! Time from spawning the real `talaria` in a pseudo-terminal to its first frame (the
//! " message " input box on screen), for a new session and for `--resume` of a
//! 10,000-message session (also until that session's last message is on screen, and the
//! talaria process's VmRSS then). Prints min / median / p99 / max over 10 runs; asserts
//! nothing about speed. `TALARIA_BENCH_MESSAGES=100000` resumes a longer session,
//! `TALARIA_BENCH_RUNS` changes the number of runs.
//!
//! `TALARIA_BENCH_KEYS=N` then measures keystroke-to-screen latency in that resumed session
//! while the model streams an answer and `TALARIA_BENCH_JOBS` (default 32) background jobs
//! print `TALARIA_BENCH_LINES` (default 400) lines every 50 ms each: N keystrokes of a
//! character that appears nowhere else (each removed again with Backspace), latency = write
//! to the first output chunk carrying it. It also reports what the typing cost talaria: its
//! CPU time, context switches and frames drawn per second while the keys were typed.
//!
//! Per thread of talaria and of this driver it prints the CPU time and the time spent
//! runnable but waiting for a CPU (`/proc/<pid>/task/<tid>/schedstat`) while typing, and
//! the nice values of the jobs' processes and autogroups. `TALARIA_BENCH_NICE=N` writes
//! `jobs.background_nice = N` into the session's config.toml first (the jobs are started
//! in the background), so the same binary runs with and without the lower priority;
//! `TALARIA_BENCH_JOBS_NICE=N` writes `jobs.nice = N` (every command). With
//! `TALARIA_LOG=info,talaria::tui=debug` it also prints the part of each keystroke spent
//! inside talaria's UI loop (taken -> frame written), from talaria's log.
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
    // Each job prints a burst of `lines` lines every 50 ms, as a build log does: `seq`
    // writes them through stdio's buffer (4 KiB writes), not one write(2) a line.
    let lines = env_usize("TALARIA_BENCH_LINES", 400);
    responses.extend((0..jobs).map(|j| {
        let command = if lines <= 1 {
            format!("while :; do echo bench-job-{j} line; sleep 0.05; done")
        } else {
            format!("while :; do seq -f 'bench-job-{j} line %g' {lines}; sleep 0.05; done")
        };
        let args = serde_json::json!({ "command": command, "background": true }).to_string();
        ScriptedResponse::tool_call(&format!("call_{j}"), "terminal", &args)
    }));
    let mut payloads = text_chunks(&"streaming words ".repeat(2000), 6);
    payloads.push(DONE.to_string());
    responses.push(ScriptedResponse::sse(payloads).delay(Duration::from_millis(20)));
    let server = rt.block_on(ScriptedServer::start(responses)).expect("scripted server");
    let url = server.base_url();
    let knob = |var: &str, key: &str| {
        let value = std::env::var(var).ok().and_then(|v| v.parse::<i32>().ok());
        value.map(|v| format!("{key} = {v}\n")).unwrap_or_default()
    };
    let jobs_config = [knob("TALARIA_BENCH_NICE", "background_nice"), knob("TALARIA_BENCH_JOBS_NICE", "nice")].concat();
    if !jobs_config.is_empty() {
        std::fs::write(Paths::under(home).config_file, format!("[jobs]\n{jobs_config}")).expect("config.toml");
    }
    let args = ["--base-url", url.as_str(), "--model", "m", "--resume", id];
    let logs = Paths::under(home).logs_dir;
    let logged_before = input_drawn_us(&logs).len();
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
    let pid = p.child.process_id();
    let typing_load = loadavg();
    let (cpu_before, switches_before) = (pid.map(cpu_ticks).unwrap_or(0), pid.map(switches).unwrap_or((0, 0)));
    let frames_before = frames_drawn(&p);
    let driver = std::process::id();
    let (sched_before, driver_before) = (pid.map(thread_sched).unwrap_or_default(), thread_sched(driver));
    let typing = Instant::now();
    let times = keystroke::keystroke_latencies(&p, keys);
    let typed_for = typing.elapsed().as_secs_f64();
    let (sched_after, driver_after) = (pid.map(thread_sched).unwrap_or_default(), thread_sched(driver));
    let job_nices = pid.map(job_priorities).unwrap_or_default();
    let frames = frames_drawn(&p) - frames_before;
    let cpu = pid.map(cpu_ticks).unwrap_or(0).saturating_sub(cpu_before);
    let (voluntary, involuntary) = pid.map(switches).unwrap_or((0, 0));
    let rss = pid.map(vm_rss_mib).unwrap_or(0.0);
    let anon = pid.map(|pid| status_mib(pid, "RssAnon:")).unwrap_or(0.0);
    p.send(b"\x04");
    time_until(&p, "Kill the jobs", Instant::now());
    p.send(b"y");
    if p.wait_exit(Duration::from_secs(20)).is_none() {
        eprintln!("talaria did not exit; killing it");
    }
    summary(&format!("keystroke -> screen, {messages} messages, streaming, {jobs} jobs x {lines} lines/50 ms"), times);
    let per_s = |n: f64| n / typed_for.max(1e-9);
    let tck = 100.0; // USER_HZ: /proc counts CPU time in 1/100 s on Linux
    println!(
        "  while typing ({typed_for:.1} s, load average {typing_load}): talaria CPU {:.0} % of a core, {:.0} frames/s, \
         {:.0} voluntary + {:.0} involuntary context switches/s",
        100.0 * per_s(cpu as f64 / tck),
        per_s(frames as f64),
        per_s(voluntary.saturating_sub(switches_before.0) as f64),
        per_s(involuntary.saturating_sub(switches_before.1) as f64),
    );
    println!("  (the answer streams for ~107 s, longer than the typing; talaria VmRSS then {rss:.1} MiB, RssAnon {anon:.1} MiB)");
    if std::env::var_os("TALARIA_LOG").is_some() {
        // Each key and each Backspace: taken by the UI loop -> its frame written.
        let inside = input_drawn_us(&logs).split_off(logged_before);
        let typed = &inside[inside.len().saturating_sub(2 * keys)..];
        if !typed.is_empty() {
            let us = |v: Vec<u64>| v.into_iter().map(Duration::from_micros).collect::<Vec<_>>();
            summary(
                "  inside talaria: input taken by the UI loop -> frame written",
                us(typed.iter().map(|t| t.0).collect()),
            );
            summary("  of which the frame: drawn and written to the terminal", us(typed.iter().map(|t| t.1).collect()));
        }
    }
    print_sched("talaria", &sched_before, &sched_after, typed_for);
    print_sched("driver", &driver_before, &driver_after, typed_for);
    println!("  jobs' processes (nice, autogroup nice -> processes): {job_nices}");
}

/// The `read_to_drawn_us` and `draw_us` of every "input drawn" line in talaria's logs
/// (written at debug level: `TALARIA_LOG=info,talaria::tui=debug`), oldest first.
fn input_drawn_us(logs: &Path) -> Vec<(u64, u64)> {
    let mut files: Vec<_> =
        std::fs::read_dir(logs).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    files.sort();
    let text: String = files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect();
    text.lines()
        .filter(|l| l.contains("input drawn"))
        .filter_map(|l| {
            let field = |name: &str| l.split(name).nth(1)?.split_whitespace().next()?.parse().ok();
            Some((field("read_to_drawn_us=")?, field("draw_us=")?))
        })
        .collect()
}

/// Per thread (tid -> name, CPU ns, run-queue wait ns, timeslices) from schedstat.
fn thread_sched(pid: u32) -> std::collections::BTreeMap<u32, (String, u64, u64, u64)> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else { continue };
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        let v: Vec<u64> = stat.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default().trim().to_string();
        if v.len() >= 3 {
            out.insert(tid, (name, v[0], v[1], v[2]));
        }
    }
    out
}

/// What each thread did while the keys were typed: CPU and waiting for a CPU (ms/s of
/// typing), and the mean wait per time it was scheduled (µs), threads of one name summed.
fn print_sched(
    who: &str,
    before: &std::collections::BTreeMap<u32, (String, u64, u64, u64)>,
    after: &std::collections::BTreeMap<u32, (String, u64, u64, u64)>,
    secs: f64,
) {
    let mut by_name: std::collections::BTreeMap<String, (u64, u64, u64, usize)> = Default::default();
    for (tid, (name, run, wait, slices)) in after {
        let (r0, w0, s0) = before.get(tid).map_or((0, 0, 0), |b| (b.1, b.2, b.3));
        let e = by_name.entry(name.clone()).or_default();
        e.0 += run.saturating_sub(r0);
        e.1 += wait.saturating_sub(w0);
        e.2 += slices.saturating_sub(s0);
        e.3 += 1;
    }
    for (name, (run, wait, slices, n)) in by_name {
        if slices == 0 {
            continue;
        }
        println!(
            "  {who} {name:<16} x{n:<2} CPU {:>6.1} ms/s   waiting for a CPU {:>6.1} ms/s   {:>6} times scheduled, mean wait {:>6.0} us",
            run as f64 / 1e6 / secs,
            wait as f64 / 1e6 / secs,
            slices,
            wait as f64 / 1e3 / slices as f64,
        );
    }
}

/// The nice values of talaria's descendants outside its own session (the jobs and their
/// supervisors) and of their autogroups, counted: "10/10 x 96".
fn job_priorities(pid: u32) -> String {
    let Ok(entries) = std::fs::read_dir("/proc") else { return String::new() };
    let mine = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).unwrap_or_default();
    let mut counts: std::collections::BTreeMap<(i64, String), usize> = Default::default();
    for e in entries.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if p == pid || !descends_from(p, pid) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default().split_whitespace().collect();
        // nice is field 19 of stat(5); `fields` starts at field 3.
        let nice = fields.get(16).and_then(|v| v.parse().ok()).unwrap_or(0);
        let group = std::fs::read_to_string(format!("/proc/{p}/autogroup")).unwrap_or_default();
        if group == mine {
            continue;
        }
        let group_nice = group.split_whitespace().last().unwrap_or("-").to_string();
        *counts.entry((nice, group_nice)).or_default() += 1;
    }
    counts.iter().map(|((n, g), c)| format!("{n}/{g} x {c}")).collect::<Vec<_>>().join(", ")
}

fn descends_from(mut p: u32, ancestor: u32) -> bool {
    for _ in 0..64 {
        let Some(stat) = talaria::engine::jobs::group::proc_stat(p as i32) else { return false };
        if stat.ppid as u32 == ancestor {
            return true;
        }
        if stat.ppid <= 1 {
            return false;
        }
        p = stat.ppid as u32;
    }
    false
}

/// utime + stime of the whole process (every thread), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
    field(11) + field(12)
}

/// Voluntary and involuntary context switches of every thread of the process.
fn switches(pid: u32) -> (u64, u64) {
    let mut total = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return total };
    for task in tasks.flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let field = |name: &str| {
            status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0)
        };
        total.0 += field("voluntary_ctxt_switches:");
        total.1 += field("nonvoluntary_ctxt_switches:");
    }
    total
}

/// Frames talaria has drawn so far: each is wrapped in synchronized output.
fn frames_drawn(p: &Pty) -> usize {
    const BEGIN: &[u8] = b"\x1b[?2026h";
    p.raw.lock().expect("raw").windows(BEGIN.len()).filter(|w| *w == BEGIN).count()
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
