//! Enter → request: the time from writing Enter to the real `talaria` in a pseudo-terminal
//! to the first byte of the chat request reaching the model server on loopback.
//!
//! The scripted server sits behind a byte-for-byte TCP relay on 127.0.0.1 that notes when
//! each chunk of a connection arrives (before it forwards it), so "first byte" is when the
//! request's first chunk was readable on the server's side of the socket. Each of
//! `TALARIA_BENCH_ENTERS` (default 100) prompts is typed, drawn, then Enter is written;
//! the answer is waited for on screen before the next. Prints min / p50 / p99 / max; asserts
//! nothing about speed. `TALARIA_PTY_BIN=target/release/talaria` drives that binary.
//!
//! The turn start with and without the rewind snapshot (issue #29): `TALARIA_BENCH_FILES=10000`
//! generates that many ~20 KB files (200 MB at 10,000) in the session's directory and changes 10
//! of them before each Enter, so every turn's start snapshot has work to do;
//! `TALARIA_BENCH_REWIND=off` turns snapshots off (`[rewind] enabled = false`) for the side by
//! side. A warm-up turn (the first snapshot hashes every file) is not counted. Enter → answer on
//! screen is printed too: the snapshot starts once the first request is on the wire, so it
//! shows there if at all.
//!
//! Where the time goes: `TALARIA_BENCH_LOGS=<dir> TALARIA_LOG=info,enter_request=trace` keeps
//! talaria's log, with a trace line at each step (the TUI's submit, the engine, the turn, the
//! request sent, its body taken by the connection, the snapshot's start), and `enters.txt`
//! with the wall-clock µs of each Enter and its request's arrival, to line the two up.

mod common;

use common::*;

#[path = "../tests/common/pty.rs"]
mod pty;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pty::Pty;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

/// When each chunk the client sent arrived, and its first bytes.
type Arrivals = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;

/// Accept connections on loopback and relay each to `upstream`, noting every chunk from
/// the client as it arrives. The first chunk is read on the accepting thread, before the
/// relay spawns a thread or connects upstream, so the relay's own set-up is not counted.
fn relay(upstream: std::net::SocketAddr, arrivals: Arrivals) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind relay");
    let addr = listener.local_addr().expect("relay address");
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let _ = client.set_nodelay(true);
            let mut first = vec![0u8; 64 * 1024];
            let _ = client.set_read_timeout(Some(Duration::from_secs(5)));
            let n = (&client).read(&mut first).unwrap_or(0);
            let _ = client.set_read_timeout(None);
            if n > 0 {
                arrivals.lock().expect("arrivals").push((Instant::now(), first[..n.min(64)].to_vec()));
            }
            first.truncate(n);
            let arrivals = arrivals.clone();
            std::thread::spawn(move || forward(client, first, upstream, arrivals));
        }
    });
    addr
}

/// Relay one connection whose first chunk (`first`, maybe empty) was already read.
fn forward(client: TcpStream, first: Vec<u8>, upstream: std::net::SocketAddr, arrivals: Arrivals) {
    let Ok(server) = TcpStream::connect(upstream) else { return };
    let _ = server.set_nodelay(true);
    let (mut from_client, mut to_server) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
    let (mut from_server, mut to_client) = (server, client);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from_server.read(&mut buf) {
            if n == 0 || to_client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(std::net::Shutdown::Both);
    });
    if first.is_empty() || to_server.write_all(&first).is_ok() {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from_client.read(&mut buf) {
            if n == 0 {
                break;
            }
            arrivals.lock().expect("arrivals").push((Instant::now(), buf[..n.min(64)].to_vec()));
            if to_server.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    }
    let _ = to_server.shutdown(std::net::Shutdown::Write);
}

fn wait_screen(p: &Pty, needle: &str) {
    let start = Instant::now();
    while !p.contents().contains(needle) {
        assert!(start.elapsed() < Duration::from_secs(60), "no {needle:?} on screen:\n{}", p.contents());
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn main() {
    if std::env::args().skip(1).any(|a| !a.starts_with('-') && !"enter_request".contains(a.as_str())) {
        return;
    }
    let enters: usize = std::env::var("TALARIA_BENCH_ENTERS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let answers = (0..=enters).map(|i| ScriptedResponse::text(&format!("answer-{i}-done")));
    let server = rt.block_on(ScriptedServer::start(answers)).expect("scripted server");
    let url = server.base_url();
    let upstream: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .and_then(|hp| hp.parse().ok())
        .expect("the scripted server's address");
    let arrivals: Arrivals = Arc::default();
    let relayed = relay(upstream, arrivals.clone());
    let base = url.replacen(&upstream.to_string(), &relayed.to_string(), 1);
    let home = tempfile::tempdir().expect("temp home");
    let cwd = home.path().join("work");
    std::fs::create_dir_all(&cwd).expect("work dir");
    let files: u32 = std::env::var("TALARIA_BENCH_FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let rewind = std::env::var("TALARIA_BENCH_REWIND").map_or(true, |v| v != "off");
    generate_workspace(&cwd, files);
    if !rewind {
        std::fs::write(home.path().join("config.toml"), "[rewind]\nenabled = false\n").expect("config");
    }
    println!("{}", machine_line());
    println!("workspace: {files} generated files; rewind snapshots {}", if rewind { "on" } else { "off" });
    let p = Pty::spawn(home.path(), &cwd, &["--base-url", base.as_str(), "--model", "m"], 120, 36);
    wait_screen(&p, " message ");
    let mut times = Vec::with_capacity(enters);
    let mut answered = Vec::with_capacity(enters);
    // Wall-clock times of each Enter and its request's arrival, to line up with the log.
    let mut walls = Vec::with_capacity(enters);
    // Turn 0 is the warm-up (not counted): the first snapshot hashes every file.
    for i in 0..=enters {
        let prompt = format!("question-{i}-asked");
        change_files(&cwd, files, i as u32);
        p.type_text(&prompt);
        wait_screen(&p, &prompt);
        if i == 0 && files > 0 {
            std::thread::sleep(Duration::from_secs(5));
        }
        // Let the typing's frames and the engine settle, so Enter meets an idle program.
        std::thread::sleep(Duration::from_millis(30));
        let seen = arrivals.lock().expect("arrivals").len();
        let sent = Instant::now();
        let sent_wall = std::time::SystemTime::now();
        p.send(b"\r");
        let at = loop {
            let got = arrivals.lock().expect("arrivals")[seen..]
                .iter()
                .find(|(_, head)| head.starts_with(b"POST"))
                .map(|(at, _)| *at);
            if let Some(at) = got {
                break at;
            }
            assert!(sent.elapsed() < Duration::from_secs(60), "no request at the server after Enter {i}");
            std::thread::sleep(Duration::from_micros(50));
        };
        wait_screen(&p, &format!("answer-{i}-done"));
        if i == 0 {
            if files > 0 {
                // Let the warm-up turn's end snapshot (every file again) finish.
                std::thread::sleep(Duration::from_secs(5));
            }
            continue;
        }
        let arrived_wall = sent_wall + at.saturating_duration_since(sent);
        walls.push((sent_wall, arrived_wall));
        times.push(at.saturating_duration_since(sent).as_secs_f64() * 1000.0);
        answered.push(sent.elapsed().as_secs_f64() * 1000.0);
    }
    let mut p = p;
    p.send(b"\x04");
    let _ = p.wait_exit(Duration::from_secs(20));
    times.sort_by(f64::total_cmp);
    println!(
        "Enter -> first byte of the request at the server: min {:.2} ms   p50 {:.2} ms   p99 {:.2} ms   max {:.2} ms   ({} runs)",
        times[0],
        percentile(&times, 0.50),
        percentile(&times, 0.99),
        times[times.len() - 1],
        times.len()
    );
    answered.sort_by(f64::total_cmp);
    println!(
        "Enter -> answer on screen: min {:.2} ms   p50 {:.2} ms   p99 {:.2} ms   max {:.2} ms",
        answered[0],
        percentile(&answered, 0.50),
        percentile(&answered, 0.99),
        answered[answered.len() - 1],
    );
    println!("load average at the end: {}", loadavg());
    // `TALARIA_BENCH_LOGS=<dir>`: keep talaria's log (with `TALARIA_LOG=info,enter_request=trace`
    // it has a line at each step from the engine receiving Enter to the request's body).
    if let Some(dir) = std::env::var_os("TALARIA_BENCH_LOGS") {
        let _ = std::fs::create_dir_all(&dir);
        let us = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
        let lines: String = walls.iter().map(|(s, a)| format!("{} {}\n", us(*s), us(*a))).collect();
        let _ = std::fs::write(std::path::Path::new(&dir).join("enters.txt"), lines);
        for entry in std::fs::read_dir(home.path().join("logs")).into_iter().flatten().flatten() {
            let _ = std::fs::copy(entry.path(), std::path::Path::new(&dir).join(entry.file_name()));
        }
    }
}

/// `files` files of ~20 KB with distinct content in 100 directories, as `rewind_bench` makes.
fn generate_workspace(dir: &std::path::Path, files: u32) {
    for i in 0..files {
        let sub = dir.join(format!("d{}", i % 100));
        std::fs::create_dir_all(&sub).expect("workspace dir");
        let line = format!("file {i} line of text for the benchmark\n");
        std::fs::write(sub.join(format!("f{i}.txt")), line.repeat(20_000 / line.len())).expect("workspace file");
    }
}

/// Change 10 of the generated files before turn `turn`, so its snapshot has work to do.
fn change_files(dir: &std::path::Path, files: u32, turn: u32) {
    for k in 0..files.min(10) {
        let i = (turn * 37 + k * 101) % files;
        std::fs::write(dir.join(format!("d{}/f{i}.txt", i % 100)), format!("turn {turn} changed {k}\n"))
            .expect("change a file");
    }
}
