//! What running on an SSH backend costs per command, and how long a dead host takes to be
//! reported `degraded` (BENCHMARKS.md "Remote backends"). Starts its own sshd on loopback
//! (the tests' harness: temporary keys and config, nothing touches ~/.ssh).
//!
//! `cargo build --bin talaria && cargo run --example ssh_overhead [runs] [quiet]`

#[path = "../tests/common/sshd.rs"]
mod sshd;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use talaria::config::Config;
use talaria::engine::backend::{remote, Backend};
use talaria::engine::jobs::{JobsHandle, JobsOptions, RemoteTarget, SpawnSpec, SupervisorExe};
use talaria::engine::EventSink;
use talaria::paths::Paths;

fn spec(cwd: &std::path::Path) -> SpawnSpec {
    SpawnSpec {
        command: "true".into(),
        cwd: cwd.to_path_buf(),
        background: false,
        session_id: "bench".into(),
        track_cwd: true,
        call_id: None,
        orphan_grace_s: None,
        sandboxed: false,
    }
}

fn describe(name: &str, t: &mut [Duration]) {
    t.sort();
    let pct = |p: f64| t[((t.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0;
    println!("| {name} | {:.1} ms | {:.1} ms | {:.1} ms | {} |", pct(0.5), pct(0.9), pct(0.0), t.len());
}

fn main() {
    let runs: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(50);
    let exe = std::env::current_exe().expect("exe");
    let talaria = exe.parent().and_then(|p| p.parent()).map(|p| p.join("talaria")).expect("target dir");
    assert!(talaria.is_file(), "build the binary first: cargo build --bin talaria ({})", talaria.display());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(run(runs, talaria));
}

async fn run(runs: usize, talaria: PathBuf) {
    // `quiet`: the remote bash does not source root's ~/.bashrc (Debian's bash does for ssh
    // commands; on this machine it runs `pyenv init`, ~300 ms per command).
    let quiet = std::env::args().nth(2).as_deref() == Some("quiet");
    let mut server = if quiet { sshd::Sshd::start_with("SetEnv SHLVL=1") } else { sshd::Sshd::start() };
    println!("remote shell init: {}", if quiet { "skipped (SetEnv SHLVL=1)" } else { "the user's (~/.bashrc)" });
    let home = tempfile::tempdir().expect("tempdir");
    let paths = Paths::under(home.path());
    paths.ensure_dirs().expect("dirs");
    let text = server.talaria_config(2);
    let config = Arc::new(Config::from_toml(&text, std::path::Path::new("bench.toml")).expect("config"));
    let (sink, mut events) = EventSink::channel();
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let options = JobsOptions { supervisor: SupervisorExe::Exe(talaria), sweep: false, attach: None };
    let (jobs, _done) = JobsHandle::start_with(&paths, config.clone(), sink, options);
    let cwd = home.path().to_path_buf();
    let backend = Backend::Ssh(sshd::HOST.into());
    jobs.backends().ensure(&backend).await.expect("connect");

    let mut local = Vec::new();
    let mut remote = Vec::new();
    let mut raw_ssh = Vec::new();
    let mut raw_sh = Vec::new();
    let mut raw_start = Vec::new();
    let argv = jobs.backends().transport_argv(&backend, "true");
    let remote_dir = server.remote_dir().display().to_string();
    for i in 0..runs + 5 {
        let t = Instant::now();
        let s = jobs.spawn(spec(&cwd)).await.expect("spawn");
        let exit = s.exit.await.expect("exit");
        assert_eq!(exit.code, Some(0));
        let took = t.elapsed();
        jobs.forget(&s.id).await;

        let t = Instant::now();
        let target = RemoteTarget { backend: backend.clone(), cwd: String::new() };
        let r = jobs.spawn_remote(spec(&cwd), target).await.expect("spawn remote");
        let exit = r.exit.await.expect("exit");
        assert_eq!(exit.code, Some(0));
        let took_remote = t.elapsed();
        jobs.forget(&r.id).await;

        let t = Instant::now();
        let st = std::process::Command::new(&argv[0]).args(&argv[1..]).status().expect("ssh");
        assert!(st.success());
        let took_ssh = t.elapsed();
        // The remote side alone: the start script over the master, no supervisor.
        let prefix = remote::job_dir_expr(&remote_dir, &format!("bench-{i}"));
        let script = remote::start_script(&prefix, "true", "", false, "bash", 600);
        let start_argv = jobs.backends().transport_argv(&backend, &script);
        let t = Instant::now();
        let out = std::process::Command::new(&start_argv[0]).args(&start_argv[1..]).output().expect("ssh");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let took_start = t.elapsed();
        let t = Instant::now();
        let st = std::process::Command::new("sh").args(["-c", "true"]).status().expect("sh");
        assert!(st.success());
        let took_sh = t.elapsed();
        if i >= 5 {
            local.push(took);
            remote.push(took_remote);
            raw_ssh.push(took_ssh);
            raw_sh.push(took_sh);
            raw_start.push(took_start);
        }
    }
    println!("| command `true`, spawn to exit | p50 | p90 | min | runs |");
    println!("|---|---|---|---|---|");
    describe("local job (supervisor + bash)", &mut local);
    describe("ssh job over the warm master (supervisor + ssh + remote scripts)", &mut remote);
    describe("bare `ssh -o ControlPath=… host 'sh -c true'` over the master", &mut raw_ssh);
    describe("bare ssh running the remote start script of `true` (no supervisor)", &mut raw_start);
    describe("bare `sh -c true`", &mut raw_sh);
    let p50 = |t: &[Duration]| t[t.len() / 2].as_secs_f64() * 1000.0;
    println!("\noverhead p50: ssh job − local job = {:.1} ms", p50(&remote) - p50(&local));

    // Time to degraded.
    println!("\n| host down | time to `degraded` | reason |");
    println!("|---|---|---|");
    server.stop();
    jobs.backends().evict(&backend).await;
    let t = Instant::now();
    let err = jobs.backends().ensure(&backend).await.expect_err("sshd is stopped");
    println!("| sshd stopped (connection refused) | {:.0} ms | {} |", t.elapsed().as_secs_f64() * 1000.0, err.reason);

    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s);
        }
    });
    let text = text.replace("[approvals]", &format!("options = [\"Port={port}\"]\n\n[approvals]"));
    let config = Arc::new(Config::from_toml(&text, std::path::Path::new("bench.toml")).expect("config"));
    let backends = talaria::engine::backend::Backends::new(config, home.path().join("ssh2"));
    let t = Instant::now();
    let err = backends.ensure(&backend).await.expect_err("silent host");
    println!(
        "| host accepts TCP, never answers (connect_timeout_s = 2) | {:.0} ms | {} |",
        t.elapsed().as_secs_f64() * 1000.0,
        err.reason
    );
    jobs.shutdown().await;
}
