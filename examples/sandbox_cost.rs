//! What the sandbox costs per command: spawn to exit of `true`, without and with it
//! (prepare in the parent + apply between fork and exec), as BENCHMARKS.md reports.
//! `cargo run --example sandbox_cost [runs]` (from a git repository, the git guard's mount
//! namespace is part of the sandboxed runs). Then 1,000 connects to a unix socket the job
//! made itself, with and without the supervisor's socket mediation.

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use talaria::config::SandboxConfig;
use talaria::engine::sandbox::{self, Policy};

/// Spawn `argv` (sandboxed under `policy`, its socket mediation served by a thread as the
/// supervisor serves it) and wait for it; its stdout.
fn spawn(argv: &[&str], policy: Option<&Policy>) -> String {
    let mut cmd = std::process::Command::new(argv[0]);
    cmd.args(&argv[1..]).stdout(std::process::Stdio::piped());
    let mut server = None;
    if let Some(policy) = policy {
        let mut prepared = sandbox::prepare(policy).expect("prepare");
        let denials = std::env::temp_dir().join(format!("sandbox-cost-{}.jsonl", std::process::id()));
        server =
            prepared.take_notify().map(|ends| sandbox::notify::serve_in_thread(ends, policy.notify_settings(denials)));
        // SAFETY: apply_in_child makes only async-signal-safe syscalls.
        unsafe {
            cmd.pre_exec(move || sandbox::apply_in_child(&mut prepared));
        }
    }
    let out = cmd.output().expect("spawn");
    drop(cmd);
    assert!(out.status.success(), "{argv:?} failed");
    if let Some(server) = server {
        server.join().expect("server");
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run(runs: usize, policy: Option<&Policy>) -> Vec<Duration> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        spawn(&["true"], policy);
        times.push(start.elapsed());
    }
    times.sort();
    times
}

/// 1,000 connects to a unix socket the job made itself, timed inside the job.
const CONNECTS: &str = r#"
import os, socket, tempfile, time
d = tempfile.mkdtemp()
path = os.path.join(d, "s.sock")
srv = socket.socket(socket.AF_UNIX)
srv.bind(path); srv.listen(64)
t = time.perf_counter()
for _ in range(1000):
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    a, _ = srv.accept()
    a.close(); c.close()
print((time.perf_counter() - t) * 1000)
os.unlink(path); os.rmdir(d)
"#;

fn connects(policy: Option<&Policy>) -> f64 {
    let mut ms: Vec<f64> = (0..5)
        .map(|_| spawn(&["/usr/bin/python3", "-c", CONNECTS], policy).trim().parse().expect("milliseconds"))
        .collect();
    ms.sort_by(f64::total_cmp);
    ms[2]
}

fn describe(name: &str, t: &[Duration]) {
    let pct = |p: f64| t[((t.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1000.0;
    println!("{name:<34} median {:6.2} ms   p90 {:6.2} ms   min {:6.2} ms", pct(0.5), pct(0.9), pct(0.0));
}

fn main() {
    let runs: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(300);
    println!("kernel sandbox: {:?}", sandbox::support());
    let cwd = std::env::current_dir().expect("cwd");
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let paths = talaria::paths::Paths::from_env().unwrap_or_else(|_| talaria::paths::Paths::under(&cwd.join(".th")));
    let policy = Policy::from_config(&SandboxConfig::default(), &cwd, &paths, home.as_deref());
    let offline = Policy::from_config(
        &SandboxConfig { network: talaria::config::NetworkMode::Off, ..SandboxConfig::default() },
        &cwd,
        &paths,
        home.as_deref(),
    );
    run(20, None);
    describe("true, no sandbox", &run(runs, None));
    describe("true, sandbox (workspace-write)", &run(runs, Some(&policy)));
    describe("true, sandbox + network off", &run(runs, Some(&offline)));
    // Run from a git repository to see the mount namespace that guards .git/hooks.
    let unguarded = Policy { git_guard: None, ..policy.clone() };
    describe("true, sandbox without the git guard", &run(runs, Some(&unguarded)));
    println!(
        "1,000 connects to the job's own unix socket, median of 5: no sandbox {:.1} ms, sandbox {:.1} ms",
        connects(None),
        connects(Some(&policy))
    );
    let start = Instant::now();
    for _ in 0..runs {
        drop(sandbox::prepare(&policy).expect("prepare"));
    }
    println!("prepare() alone: {:.2} ms per call", start.elapsed().as_secs_f64() * 1000.0 / runs as f64);
}
