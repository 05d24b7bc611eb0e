//! What the sandbox costs per command: spawn to exit of `true`, without and with it
//! (prepare in the parent + apply between fork and exec), as BENCHMARKS.md reports.
//! `cargo run --example sandbox_cost [runs]` (from a git repository, the git guard's mount
//! namespace is part of the sandboxed runs).

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use talaria::config::SandboxConfig;
use talaria::engine::sandbox::{self, Policy};

fn run(runs: usize, policy: Option<&Policy>) -> Vec<Duration> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let mut cmd = std::process::Command::new("true");
        if let Some(policy) = policy {
            let mut prepared = sandbox::prepare(policy).expect("prepare");
            // SAFETY: apply_in_child makes only async-signal-safe syscalls.
            unsafe {
                cmd.pre_exec(move || sandbox::apply_in_child(&mut prepared));
            }
        }
        let status = cmd.status().expect("spawn true");
        assert!(status.success());
        times.push(start.elapsed());
    }
    times.sort();
    times
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
        &SandboxConfig { network: false, ..SandboxConfig::default() },
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
    let start = Instant::now();
    for _ in 0..runs {
        drop(sandbox::prepare(&policy).expect("prepare"));
    }
    println!("prepare() alone: {:.2} ms per call", start.elapsed().as_secs_f64() * 1000.0 / runs as f64);
}
