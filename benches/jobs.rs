//! Job registry figures for BENCHMARKS.md (a plain program, not a criterion bench):
//!
//! 1. output ingest: a background job printing 200 MB (`yes | head -c 200000000`), timed
//!    from spawn to exit + drain, with this process's memory before, during and after;
//! 2. kill: `JobsHandle::kill` of a `sleep 300` job until its process group is gone;
//! 3. the same for a job that ignores SIGTERM (`trap '' TERM; sleep 300`), which shows
//!    the kill grace period (`terminal.kill_grace_s`).
//!
//! Run with `cargo bench --bench jobs`; it prints Markdown tables.

mod common;

use common::*;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use talaria::config::Config;
use talaria::engine::jobs::{JobsHandle, JobsOptions, SpawnSpec, SupervisorExe};
use talaria::engine::EventSink;
use talaria::paths::Paths;

const FLOOD_BYTES: u64 = 200_000_000;
const FLOOD_RUNS: usize = 10;
const KILL_RUNS: usize = 40;
const TRAP_KILL_RUNS: usize = 20;
/// Longest any single step may take before the benchmark gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

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
    let config = Arc::new(Config::default());
    println!("# jobs benchmark");
    println!();
    println!("{}", machine_line());
    println!("kill grace (terminal.kill_grace_s): {} s", config.terminal.kill_grace_s);
    println!();

    let flood = if wanted("flood") { Some(flood(tmp.path(), config.clone()).await?) } else { None };
    let sup = if wanted("supervised") { Some(supervised(tmp.path(), config.clone()).await?) } else { None };
    let (kill_plain, kill_trap) =
        if wanted("kill") { kills(tmp.path(), config.clone()).await? } else { Default::default() };

    println!("| Figure | Runs | min | p50 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    if let Some(flood) = &flood {
        let mbps: Vec<f64> = flood.secs.iter().map(|s| FLOOD_BYTES as f64 / 1e6 / s).collect();
        row_f64("Output ingest, 200 MB background job (MB/s, spawn to exit + drain)", &mbps);
        row_f64("  same runs, wall time (s)", &flood.secs);
        row_f64("  same runs, CPU time of this process (s)", &flood.cpu_secs);
        row_f64("  peak VmRSS during each flood (MiB)", &flood.peak_rss_mib);
        row_ms("  then `JobsHandle::log(id, None, Some(200))` on its 64 MB log (ms)", &flood.log_view);
    }
    if let Some(sup) = &sup {
        row_f64("Supervisor VmRSS per job, idle `sleep` job after 3 s (MiB)", &sup.rss_mib);
        row_f64("  same supervisors, RssAnon (private memory, MiB)", &sup.anon_mib);
        row_f64("  same supervisors, RssFile (mapped file pages, MiB)", &sup.file_mib);
        row_f64("  same supervisors, Pss (shared pages split among them, MiB)", &sup.pss_mib);
        row_ms("First output, direct `bash -c 'echo first'` through a pipe (ms, the old path)", &sup.first_direct);
        row_ms("First output, `JobsHandle::spawn` to its `ToolOutput` event (ms)", &sup.first_job);
        row_ms("Output latency, job writes a line to the event carrying it (ms)", &sup.line_latency);
        row_ms("Re-attach 20 running jobs: start to 20 `JobStarted` (ms)", &sup.reattach);
    }
    row_ms("Kill `sleep 300`: `JobsHandle::kill` to group gone (ms)", &kill_plain.gone);
    row_ms("  same runs, until `kill` returned (ms)", &kill_plain.returned);
    row_ms("Kill `trap '' TERM; sleep 300`: to group gone (ms)", &kill_trap.gone);
    row_ms("  same runs, until `kill` returned (ms)", &kill_trap.returned);
    let Some(flood) = flood else { return Ok(()) };
    println!();
    println!("| Memory (this process, /proc/self/status) | MiB |");
    println!("|---|---|");
    println!("| VmRSS before the first flood | {:.1} |", flood.rss_before);
    println!("| VmRSS during the floods (highest sample, every 5 ms) | {:.1} |", flood.rss_during_max);
    println!("| VmRSS after the floods (jobs finished and dropped) | {:.1} |", flood.rss_after);
    println!("| VmHWM after the floods (peak RSS of the whole run) | {:.1} |", flood.hwm_after);
    println!("| VmHWM before the first flood | {:.1} |", flood.hwm_before);
    Ok(())
}

struct Flood {
    secs: Vec<f64>,
    cpu_secs: Vec<f64>,
    /// The default `process log` view (last 200 lines) of the finished flood job.
    log_view: Vec<Duration>,
    peak_rss_mib: Vec<f64>,
    rss_before: f64,
    hwm_before: f64,
    rss_during_max: f64,
    rss_after: f64,
    hwm_after: f64,
}

/// Each run gets its own registry (so `shutdown` deletes its 64 MB of logs afterwards);
/// events are drained as a front end would.
async fn flood(tmp: &Path, config: Arc<Config>) -> anyhow::Result<Flood> {
    let command = format!("yes | head -c {FLOOD_BYTES}");
    let rss_before = status_mib("VmRSS")?;
    let hwm_before = status_mib("VmHWM")?;
    let mut secs = Vec::new();
    let mut cpu_secs = Vec::new();
    let mut log_view = Vec::new();
    let mut peak_rss_mib = Vec::new();
    for run in 0..FLOOD_RUNS {
        let paths = Paths::under(&tmp.join(format!("flood-{run}")));
        let (events, mut event_rx) = EventSink::channel();
        let drained = tokio::spawn(async move {
            let mut n = 0u64;
            while event_rx.recv().await.is_some() {
                n += 1;
            }
            n
        });
        let (jobs, _finished) = JobsHandle::start_with(&paths, config.clone(), events, options());

        let sampler = RssSampler::start();
        let cpu_before = cpu_time()?;
        let started = Instant::now();
        let spawned = jobs.spawn(spec(&command)).await?;
        let exit = tokio::time::timeout(STEP_TIMEOUT, spawned.exit)
            .await
            .context("the flood job did not finish within 60 s")?
            .context("the flood job's exit was lost")?;
        let elapsed = started.elapsed();
        let cpu = cpu_time()? - cpu_before;
        let peak = sampler.stop();
        if exit.code != Some(0) {
            bail!("the flood job failed: {exit:?}");
        }
        let viewed = Instant::now();
        let log = jobs.log(&spawned.id, None, Some(200)).await.context("the flood job vanished")?;
        log_view.push(viewed.elapsed());
        // `y\n` repeated: every byte arrived when every line was counted.
        if log.total_lines != FLOOD_BYTES / 2 {
            bail!("the flood job's output was cut: {} lines counted, {} expected", log.total_lines, FLOOD_BYTES / 2);
        }
        jobs.shutdown().await;
        drop(jobs);
        let n_events = tokio::time::timeout(STEP_TIMEOUT, drained).await.ok().and_then(Result::ok).unwrap_or(0);
        eprintln!(
            "flood run {run}: {:.2} s, {:.0} MB/s, {cpu:.2} s CPU, peak VmRSS {:.1} MiB, {n_events} events, log view {:?}",
            elapsed.as_secs_f64(),
            FLOOD_BYTES as f64 / 1e6 / elapsed.as_secs_f64(),
            peak,
            log_view.last().copied().unwrap_or_default()
        );
        secs.push(elapsed.as_secs_f64());
        cpu_secs.push(cpu);
        peak_rss_mib.push(peak);
    }
    // Let freed memory go back before reading "after".
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(Flood {
        cpu_secs,
        log_view,
        rss_during_max: peak_rss_mib.iter().copied().fold(0.0, f64::max),
        secs,
        peak_rss_mib,
        rss_before,
        hwm_before,
        rss_after: status_mib("VmRSS")?,
        hwm_after: status_mib("VmHWM")?,
    })
}

#[derive(Default)]
struct KillTimes {
    /// From the call to the group being gone (seen by a watcher thread).
    gone: Vec<Duration>,
    /// From the call to `kill` returning (the registry's own view: job finished).
    returned: Vec<Duration>,
}

async fn kills(tmp: &Path, config: Arc<Config>) -> anyhow::Result<(KillTimes, KillTimes)> {
    let paths = Paths::under(&tmp.join("kills"));
    let (events, mut event_rx) = EventSink::channel();
    tokio::spawn(async move { while event_rx.recv().await.is_some() {} });
    let (jobs, _finished) = JobsHandle::start_with(&paths, config, events, options());
    let mut plain = KillTimes::default();
    for run in 0..KILL_RUNS {
        let (gone, returned) = kill_once(&jobs, "sleep 300").await?;
        eprintln!("kill sleep run {run}: gone {gone:?}, kill returned {returned:?}");
        plain.gone.push(gone);
        plain.returned.push(returned);
    }
    let mut trap = KillTimes::default();
    for run in 0..TRAP_KILL_RUNS {
        let (gone, returned) = kill_once(&jobs, "trap '' TERM; sleep 300").await?;
        eprintln!("kill trap run {run}: gone {gone:?}, kill returned {returned:?}");
        trap.gone.push(gone);
        trap.returned.push(returned);
    }
    jobs.shutdown().await;
    Ok((plain, trap))
}

async fn kill_once(jobs: &JobsHandle, command: &str) -> anyhow::Result<(Duration, Duration)> {
    let spawned = jobs.spawn(spec(command)).await?;
    let pgid = spawned.pid as i32;
    // Kill the real `sleep`, not a shell that has not started it yet.
    let members = wait_for_comm_in_group(pgid, "sleep").await?;
    let watcher = GroupWatcher::start(pgid, members, STEP_TIMEOUT);
    let started = Instant::now();
    tokio::time::timeout(STEP_TIMEOUT, jobs.kill(&spawned.id))
        .await
        .context("kill did not return within 60 s")?
        .context("the job vanished before it was killed")?;
    let returned = started.elapsed();
    let gone_at = watcher.join()?;
    Ok((gone_at.saturating_duration_since(started), returned))
}

fn options() -> JobsOptions {
    JobsOptions {
        supervisor: SupervisorExe::Exe(std::path::PathBuf::from(env!("CARGO_BIN_EXE_talaria"))),
        sweep: false,
        attach: None,
    }
}

fn spec(command: &str) -> SpawnSpec {
    SpawnSpec {
        command: command.to_string(),
        cwd: std::env::temp_dir(),
        background: true,
        session_id: "bench".into(),
        track_cwd: false,
        call_id: None,
        orphan_grace_s: None,
        sandboxed: true,
    }
}

// ---- supervised jobs ---------------------------------------------------------------------

#[derive(Default)]
struct Supervised {
    rss_mib: Vec<f64>,
    anon_mib: Vec<f64>,
    file_mib: Vec<f64>,
    pss_mib: Vec<f64>,
    first_direct: Vec<Duration>,
    first_job: Vec<Duration>,
    line_latency: Vec<Duration>,
    reattach: Vec<Duration>,
}

const FIRST_RUNS: usize = 30;
const SUPERVISORS: usize = 10;
const REATTACH_JOBS: usize = 20;
const REATTACH_RUNS: usize = 5;

/// A field of /proc/<pid>/status in MiB.
fn pid_status_mib(pid: i32, field: &str) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 =
        text.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?.split_whitespace().next()?.parse().ok()?;
    Some(kib as f64 / 1024.0)
}

/// Proportional set size from /proc/<pid>/smaps_rollup, in MiB.
fn pss_mib(pid: i32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let kib: u64 = text.lines().find_map(|l| l.strip_prefix("Pss:"))?.split_whitespace().next()?.parse().ok()?;
    Some(kib as f64 / 1024.0)
}

/// The pid of the supervisor of `jobs_dir/<id>` (its command line names the job dir).
fn supervisor_of(jobs_dir: &Path, id: &str) -> Option<i32> {
    let needle = format!("__job\0{}", jobs_dir.join(id).display());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        String::from_utf8_lossy(&cmdline).contains(&needle).then_some(pid)
    })
}

fn now_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

async fn supervised(tmp: &Path, config: Arc<Config>) -> anyhow::Result<Supervised> {
    use talaria::protocol::Event;
    let mut out = Supervised::default();
    let paths = Paths::under(&tmp.join("supervised"));
    let (events, mut event_rx) = EventSink::channel();
    let (jobs, _finished) = JobsHandle::start_with(&paths, config.clone(), events, options());

    // Supervisor memory: ten idle jobs.
    let mut ids = Vec::new();
    for _ in 0..SUPERVISORS {
        ids.push(jobs.spawn(spec("sleep 300")).await?.id);
    }
    // Idle, after a few lease checks: what the supervisor's loop keeps mapped (start-up's
    // pages are given back once the job runs, see jobs/pages.rs).
    tokio::time::sleep(Duration::from_secs(3)).await;
    for id in &ids {
        let pid = supervisor_of(&paths.jobs_dir, id).context("no supervisor found")?;
        out.rss_mib.push(pid_status_mib(pid, "VmRSS").context("no VmRSS")?);
        out.anon_mib.push(pid_status_mib(pid, "RssAnon").context("no RssAnon")?);
        out.file_mib.push(pid_status_mib(pid, "RssFile").context("no RssFile")?);
        out.pss_mib.push(pss_mib(pid).context("no Pss")?);
    }
    for id in &ids {
        jobs.kill(id).await;
    }
    while event_rx.try_recv().is_ok() {}

    // First output: the old path (a direct child with a pipe) and a supervised job.
    for run in 0..FIRST_RUNS {
        let started = Instant::now();
        let mut child = tokio::process::Command::new("bash")
            .args(["-c", "echo first"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .context("bash")?;
        let mut stdout = child.stdout.take().context("stdout")?;
        let mut byte = [0u8; 1];
        tokio::io::AsyncReadExt::read_exact(&mut stdout, &mut byte).await?;
        out.first_direct.push(started.elapsed());
        let _ = child.wait().await;

        let mut fg = spec("echo first");
        fg.background = false;
        fg.call_id = Some(format!("c{run}"));
        let started = Instant::now();
        let spawned = jobs.spawn(fg).await?;
        loop {
            let event = tokio::time::timeout(STEP_TIMEOUT, event_rx.recv()).await?.context("events closed")?;
            if matches!(&event, Event::ToolOutput { chunk, .. } if chunk.contains("first")) {
                break;
            }
        }
        out.first_job.push(started.elapsed());
        let _ = spawned.exit.await;
        jobs.forget(&spawned.id).await;
    }

    // Per-line latency: a job writes its clock every 20 ms; each event says how old its lines are.
    let mut fg = spec("for i in $(seq 1 200); do date +%s%N; sleep 0.02; done");
    fg.background = false;
    fg.call_id = Some("latency".into());
    let spawned = jobs.spawn(fg).await?;
    let mut exit = spawned.exit;
    loop {
        tokio::select! {
            _ = &mut exit => break,
            event = event_rx.recv() => {
                let Some(Event::ToolOutput { chunk, .. }) = event else { continue };
                let now = now_ns();
                for line in chunk.lines() {
                    if let Ok(ts) = line.trim().parse::<u128>() {
                        out.line_latency.push(Duration::from_nanos(now.saturating_sub(ts) as u64));
                    }
                }
            }
        }
    }
    jobs.forget(&spawned.id).await;
    jobs.shutdown().await;

    // Re-attach: a registry leaves 20 running jobs, a new one adopts them.
    for run in 0..REATTACH_RUNS {
        let paths = Paths::under(&tmp.join(format!("reattach-{run}")));
        let (events, _rx) = EventSink::channel();
        let mut opts = options();
        opts.sweep = true;
        let (first, _f) = JobsHandle::start_with(&paths, config.clone(), events, opts.clone());
        for _ in 0..REATTACH_JOBS {
            first.spawn(spec("sleep 300")).await?;
        }
        first.leave_running(false);
        first.shutdown().await;
        drop(first);
        let (events, mut rx) = EventSink::channel();
        opts.attach = Some("bench".into());
        let started = Instant::now();
        let (second, _f) = JobsHandle::start_with(&paths, config.clone(), events, opts);
        let mut seen = 0;
        while seen < REATTACH_JOBS {
            let event = tokio::time::timeout(STEP_TIMEOUT, rx.recv()).await?.context("events closed")?;
            if matches!(event, Event::JobStarted { .. }) {
                seen += 1;
            }
        }
        out.reattach.push(started.elapsed());
        second.shutdown().await;
        eprintln!("re-attach run {run}: {:?}", out.reattach.last());
    }
    Ok(out)
}

// ---- processes -------------------------------------------------------------------------

/// The pids of group `pgid`, once one of them runs `comm`.
async fn wait_for_comm_in_group(pgid: i32, comm: &str) -> anyhow::Result<Vec<i32>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let members = group_members(pgid);
        if members.iter().any(|pid| read_comm(*pid).as_deref() == Some(comm)) {
            return Ok(members);
        }
        if Instant::now() > deadline {
            bail!("no `{comm}` appeared in process group {pgid} within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// User + system CPU time of this process so far (all threads), in seconds.
fn cpu_time() -> anyhow::Result<f64> {
    // SAFETY: rusage is plain data (all zeroes is valid) and getrusage only writes into
    // the struct we own.
    let (usage, rc) = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let rc = libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        (usage, rc)
    };
    if rc != 0 {
        bail!("getrusage failed: {}", std::io::Error::last_os_error());
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(secs(usage.ru_utime) + secs(usage.ru_stime))
}

/// The sections named on the command line (`cargo bench --bench jobs -- kill`), or all
/// of them. Cargo's own `--bench` flag is ignored.
fn wanted(section: &str) -> bool {
    let named: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    named.is_empty() || named.iter().any(|a| a == section)
}

// ---- memory ----------------------------------------------------------------------------

/// A field of /proc/self/status (`VmRSS`, `VmHWM`) in MiB.
fn status_mib(field: &str) -> anyhow::Result<f64> {
    let text = std::fs::read_to_string("/proc/self/status").context("cannot read /proc/self/status")?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .with_context(|| format!("no {field} in /proc/self/status"))?;
    Ok(kib as f64 / 1024.0)
}

/// Samples VmRSS every 5 ms on its own thread; `stop` returns the highest sample (MiB).
struct RssSampler {
    stop: Arc<AtomicBool>,
    peak_kib: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl RssSampler {
    fn start() -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak_kib = Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak_kib.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(mib) = status_mib("VmRSS") {
                    p.fetch_max((mib * 1024.0) as u64, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        RssSampler { stop, peak_kib, thread }
    }

    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

// ---- reporting -------------------------------------------------------------------------

fn row_f64(label: &str, values: &[f64]) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let fmt = |x: f64| if x >= 100.0 { format!("{x:.0}") } else { format!("{x:.2}") };
    println!(
        "| {label} | {} | {} | {} | {} | {} |",
        v.len(),
        fmt(percentile(&v, 0.0)),
        fmt(percentile(&v, 0.5)),
        fmt(percentile(&v, 0.99)),
        fmt(percentile(&v, 1.0))
    );
}

fn row_ms(label: &str, values: &[Duration]) {
    if values.is_empty() {
        return;
    }
    let ms: Vec<f64> = values.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    let mut v = ms;
    v.sort_by(f64::total_cmp);
    println!(
        "| {label} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
        v.len(),
        percentile(&v, 0.0),
        percentile(&v, 0.5),
        percentile(&v, 0.99),
        percentile(&v, 1.0)
    );
}
