//! What one job's supervisor (`talaria __job`) holds in memory, as BENCHMARKS.md reports:
//! `cargo run --example supervisor_rss -- [TALARIA_BINARY] [JOBS]` (default: the dev
//! `target/debug/talaria`, 10 jobs). It starts JOBS idle `sleep` jobs through the real
//! registry (sandboxed, stdin FIFO, the lease held by this process), then reads each
//! supervisor's /proc/<pid>/status and smaps_rollup 0.3 s after the spawn and again after
//! 5 s (five lease checks later: the supervisor's idle working set), and splits the first
//! supervisor's resident memory by mapping (/proc/<pid>/smaps).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use talaria::config::Config;
use talaria::engine::jobs::{JobsHandle, JobsOptions, SpawnSpec, SupervisorExe};
use talaria::engine::EventSink;
use talaria::paths::Paths;

/// A field (kB) of a `Name:   123 kB` file.
fn field_kib(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?.split_whitespace().next()?.parse().ok()
}

const FIELDS: [(&str, &str); 7] = [
    ("status", "VmRSS"),
    ("status", "RssAnon"),
    ("status", "RssFile"),
    ("status", "VmHWM"),
    ("smaps_rollup", "Pss"),
    ("smaps_rollup", "Pss_Anon"),
    ("smaps_rollup", "Pss_File"),
];

fn sample(pid: i32) -> Option<Vec<u64>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    FIELDS.iter().map(|(file, name)| field_kib(if *file == "status" { &status } else { &rollup }, name)).collect()
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

fn table(title: &str, samples: &[Vec<u64>]) {
    println!("\n{title} ({} supervisors, KiB)\n", samples.len());
    println!("| field | min | p50 | max |\n|---|---|---|---|");
    for (i, (file, name)) in FIELDS.iter().enumerate() {
        let mut v: Vec<u64> = samples.iter().map(|s| s[i]).collect();
        v.sort();
        println!("| {name} ({file}) | {} | {} | {} |", v[0], v[v.len() / 2], v[v.len() - 1]);
    }
}

/// Resident and anonymous KiB per mapping kind of one process.
fn by_mapping(pid: i32, exe: &Path) {
    let Ok(smaps) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else { return };
    let exe_name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // One entry per mapping: (who, permissions, Rss, Anonymous).
    let mut vmas: Vec<(String, String, u64, u64)> = Vec::new();
    for line in smaps.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let first = words.first().copied().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let path = words.get(5).copied().unwrap_or("");
            let file = Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let who = if file == exe_name {
                "talaria".to_string()
            } else if path.is_empty() {
                "(anonymous)".to_string()
            } else if path.starts_with('[') {
                path.to_string()
            } else {
                file.split(".so").next().unwrap_or(&file).to_string()
            };
            vmas.push((who, words.get(1).copied().unwrap_or("").to_string(), 0, 0));
        } else if let Some(vma) = vmas.last_mut() {
            if first == "Rss:" {
                vma.2 = field_kib(line, "Rss").unwrap_or(0);
            } else if first == "Anonymous:" {
                vma.3 = field_kib(line, "Anonymous").unwrap_or(0);
            }
        }
    }
    let mut rows: Vec<(String, u64, u64)> = Vec::new();
    for (who, perms, rss, anon) in vmas {
        // A read-only file mapping with written pages is RELRO: relocated by the loader.
        let relro = if !perms.contains('w') && !who.starts_with('(') && anon > 0 { " (RELRO)" } else { "" };
        let name = format!("{who} {perms}{relro}");
        match rows.iter_mut().find(|r| r.0 == name) {
            Some(row) => {
                row.1 += rss;
                row.2 += anon;
            }
            None => rows.push((name, rss, anon)),
        }
    }
    rows.retain(|r| r.1 > 0);
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    println!("\nSupervisor {pid} by mapping (KiB; Anonymous = pages written by this process)\n");
    println!("| mapping | Rss | Anonymous |\n|---|---|---|");
    for (name, rss, anon) in rows {
        println!("| {name} | {rss} | {anon} |");
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let exe = args.next().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("target/debug/talaria"));
    let jobs_n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let exe = std::fs::canonicalize(&exe)?;
    let tmp = tempfile::tempdir()?;
    let paths = Paths::under(tmp.path());
    let (events, mut event_rx) = EventSink::channel();
    tokio::spawn(async move { while event_rx.recv().await.is_some() {} });
    let options = JobsOptions { supervisor: SupervisorExe::Exe(exe.clone()), sweep: false, attach: None };
    let (jobs, _finished) = JobsHandle::start_with(&paths, Arc::new(Config::default()), events, options);
    println!("supervisor binary: {} ({} bytes)", exe.display(), std::fs::metadata(&exe)?.len());
    let marker = std::process::id();
    let mut pids = Vec::new();
    let mut ids = Vec::new();
    for n in 0..jobs_n {
        let spec = SpawnSpec {
            command: format!("sleep 3{marker:07}{n:03}"),
            cwd: std::env::temp_dir(),
            background: true,
            session_id: "supervisor_rss".into(),
            track_cwd: false,
            call_id: None,
            orphan_grace_s: None,
            sandboxed: true,
        };
        let id = jobs.spawn(spec).await?.id;
        pids.push(supervisor_of(&paths.jobs_dir, &id).ok_or_else(|| anyhow::anyhow!("no supervisor for {id}"))?);
        ids.push(id);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let early: Vec<Vec<u64>> = pids.iter().filter_map(|p| sample(*p)).collect();
    tokio::time::sleep(Duration::from_millis(4700)).await;
    let idle: Vec<Vec<u64>> = pids.iter().filter_map(|p| sample(*p)).collect();
    table("0.3 s after the last spawn", &early);
    table("5 s after the last spawn (idle, five lease checks)", &idle);
    by_mapping(pids[0], &exe);
    for id in &ids {
        jobs.kill(id).await;
    }
    jobs.shutdown().await;
    Ok(())
}
