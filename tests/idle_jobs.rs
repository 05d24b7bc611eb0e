//! Following quiet jobs is (nearly) free (#14): talaria is woken by inotify when a job's
//! directory changes instead of polling every job's log every 2–20 ms. 20 idle background
//! jobs are followed for 5 s and the CPU time of this process (the follower side; the jobs
//! and their supervisors are other processes) is measured. Its own test binary, so no other
//! test's work is counted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use talaria::config::Config;
use talaria::engine::jobs::{JobsHandle, JobsOptions, SpawnSpec, SupervisorExe};
use talaria::engine::EventSink;
use talaria::paths::Paths;

const JOBS: usize = 20;
const WINDOW: Duration = Duration::from_secs(5);

/// User + system CPU time of this process.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the struct we pass and nothing else.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_idle_jobs_cost_almost_no_cpu_to_follow() {
    let home = tempfile::tempdir().unwrap();
    let paths = Paths::under(home.path());
    paths.ensure_dirs().unwrap();
    let (sink, _events) = EventSink::channel();
    let options = JobsOptions {
        supervisor: SupervisorExe::Exe(PathBuf::from(env!("CARGO_BIN_EXE_talaria"))),
        sweep: false,
        attach: None,
    };
    let (jobs, _finished) = JobsHandle::start_with(&paths, Arc::new(Config::default()), sink, options);
    let mark = format!("{}{:05}", 31_000, std::process::id() % 100_000);
    for n in 0..JOBS {
        let spec = SpawnSpec {
            command: format!("echo started {n}; exec sleep {mark}{n}"),
            cwd: home.path().to_path_buf(),
            background: true,
            session_id: "s".into(),
            track_cwd: false,
            call_id: None,
            orphan_grace_s: None,
            sandboxed: false,
        };
        jobs.spawn(spec).await.expect("the job starts");
    }
    // Every job has printed its line and gone quiet.
    let start = Instant::now();
    loop {
        let infos = jobs.list().await;
        if infos.len() == JOBS && infos.iter().all(|j| j.last_line.starts_with("started")) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "jobs did not start: {infos:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let before = cpu_time();
    let wall = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let used = cpu_time() - before;
    let per_second = used.as_secs_f64() * 1000.0 / wall.elapsed().as_secs_f64();
    eprintln!("following {JOBS} idle jobs: {per_second:.2} ms CPU per second ({used:?} in {:?})", wall.elapsed());
    jobs.shutdown().await;
    // Debug build, loaded 2-core machine: polling every 2-20 ms cost 27-39 ms/s; woken by
    // inotify and a pidfd it is ~1.2 ms/s.
    assert!(per_second < 5.0, "{per_second:.2} ms CPU per second for {JOBS} idle jobs");
}
