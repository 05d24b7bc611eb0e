//! What the network proxy (#31, DESIGN §6b) costs on loopback, against a direct connection
//! to the same server: the added time per new connection (connect, one small request and
//! its answer) and the throughput of one long download.
//!
//! `cargo run --example netproxy_cost [connections] [MiB]` (defaults 500 and 1024).
//! Through the proxy each connection is a CONNECT with the job's credential (what curl,
//! pip, npm and git do for https) to a host in `sandbox.network_allow`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use talaria::engine::netproxy::{Answer, Gate, NetProxy, Question, Settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Never;

#[async_trait::async_trait]
impl Gate for Never {
    async fn ask(&self, _: Question) -> Answer {
        Answer::Deny("the benchmark lists its host".into())
    }
}

/// `p` (a request byte) → one answer byte; `d` + 8 bytes n → n bytes.
async fn server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut op = [0u8; 1];
                if s.read_exact(&mut op).await.is_err() {
                    return;
                }
                if op[0] == b'p' {
                    let _ = s.write_all(b"k").await;
                } else {
                    let mut n = [0u8; 8];
                    let _ = s.read_exact(&mut n).await;
                    let mut left = u64::from_le_bytes(n);
                    let chunk = vec![7u8; 256 * 1024];
                    while left > 0 {
                        let k = left.min(chunk.len() as u64) as usize;
                        if s.write_all(&chunk[..k]).await.is_err() {
                            return;
                        }
                        left -= k as u64;
                    }
                }
            });
        }
    });
    port
}

/// Connect to the server, directly or through the proxy (CONNECT, credential).
async fn open(port: u16, proxy: Option<(u16, &str)>) -> TcpStream {
    let Some((proxy_port, auth)) = proxy else {
        let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        s.set_nodelay(true).unwrap();
        return s;
    };
    let mut s = TcpStream::connect(("127.0.0.1", proxy_port)).await.unwrap();
    s.set_nodelay(true).unwrap();
    let head =
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {auth}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).await.unwrap();
        got.push(b[0]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
    s
}

async fn one_connection(port: u16, proxy: Option<(u16, &str)>) -> Duration {
    let start = Instant::now();
    let mut s = open(port, proxy).await;
    s.write_all(b"p").await.unwrap();
    let mut k = [0u8; 1];
    s.read_exact(&mut k).await.unwrap();
    start.elapsed()
}

async fn download(port: u16, proxy: Option<(u16, &str)>, bytes: u64) -> f64 {
    let mut s = open(port, proxy).await;
    let start = Instant::now();
    s.write_all(b"d").await.unwrap();
    s.write_all(&bytes.to_le_bytes()).await.unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    while got < bytes {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got += n as u64;
    }
    bytes as f64 / (1 << 20) as f64 / start.elapsed().as_secs_f64()
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(500);
    let mib: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let port = server().await;
    let settings = Settings { allow: vec!["127.0.0.1".into()], deny: vec![], config_file: None };
    let proxy = NetProxy::start(settings, Arc::new(Never), None).await.unwrap();
    let url = proxy.register_job("job_1", "benchmark", None);
    let auth = talaria::engine::netproxy::proxy_authorization(&url).unwrap();
    let via = Some((proxy.port(), auth.as_str()));

    for _ in 0..20 {
        one_connection(port, None).await;
        one_connection(port, via).await;
    }
    let (mut direct, mut proxied) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        direct.push(one_connection(port, None).await);
        proxied.push(one_connection(port, via).await);
    }
    direct.sort();
    proxied.sort();
    println!("new connection + one round trip, {n} each (ms):");
    for (name, v) in [("direct", &direct), ("proxy", &proxied)] {
        println!("  {name:<7} p50 {:.3}  p90 {:.3}  p99 {:.3}", pct(v, 0.5), pct(v, 0.9), pct(v, 0.99));
    }
    println!(
        "  added   p50 {:.3}  p99 {:.3}",
        pct(&proxied, 0.5) - pct(&direct, 0.5),
        pct(&proxied, 0.99) - pct(&direct, 0.99)
    );

    let bytes = mib << 20;
    let mut rows = Vec::new();
    for _ in 0..3 {
        rows.push((download(port, None, bytes).await, download(port, via, bytes).await));
    }
    println!("download of {mib} MiB, 3 runs (MiB/s):");
    for (d, p) in &rows {
        println!("  direct {d:8.0}   proxy {p:8.0}   {:.0} %", p / d * 100.0);
    }
    let (d, p): (f64, f64) = rows.iter().fold((0.0, 0.0), |(a, b), (d, p)| (a + d, b + p));
    println!("  mean   {:8.0}         {:8.0}   {:.0} %", d / 3.0, p / 3.0, p / d * 100.0);

    // The same download by curl, a process of its own (as a job is), plain HTTP.
    let http = http_server().await;
    let target = format!("http://127.0.0.1:{http}/{bytes}");
    let mut rows = Vec::new();
    for _ in 0..3 {
        rows.push((curl(&target, &[]).await, curl(&target, &["-x", &url, "--proxytunnel"]).await));
    }
    println!("curl download of {mib} MiB, 3 runs (MiB/s):");
    for (d, p) in &rows {
        println!("  direct {d:8.0}   proxy {p:8.0}   {:.0} %", p / d * 100.0);
    }
    let (d, p): (f64, f64) = rows.iter().fold((0.0, 0.0), |(a, b), (d, p)| (a + d, b + p));
    println!("  mean   {:8.0}         {:8.0}   {:.0} %", d / 3.0, p / 3.0, p / d * 100.0);
}

/// `GET /<n>` → n bytes.
async fn http_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut b).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&b[..n]);
                }
                let text = String::from_utf8_lossy(&head).to_string();
                let n: u64 = text.split(' ').nth(1).unwrap_or("/0")[1..].parse().unwrap_or(0);
                let _ = s.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").as_bytes()).await;
                let chunk = vec![7u8; 256 * 1024];
                let mut left = n;
                while left > 0 {
                    let k = left.min(chunk.len() as u64) as usize;
                    if s.write_all(&chunk[..k]).await.is_err() {
                        return;
                    }
                    left -= k as u64;
                }
            });
        }
    });
    port
}

async fn curl(url: &str, extra: &[&str]) -> f64 {
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{speed_download}"])
        .args(extra)
        .arg(url)
        .output()
        .await
        .unwrap();
    let bytes_per_s: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    bytes_per_s / (1 << 20) as f64
}
