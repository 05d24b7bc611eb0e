//! The network proxy's question in the real TUI (DESIGN §6b, issue #31): two jobs asking
//! for the same host at once produce one question, and one answer lets both through.

mod common;
#[path = "common/pty.rs"]
mod pty;

use std::time::Duration;

use common::Home;
use pty::Pty;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(60);

/// The talaria log lines so far (TALARIA_HOME/logs).
fn log_text(home: &Home) -> String {
    let Ok(dir) = std::fs::read_dir(home.path().join("logs")) else { return String::new() };
    dir.flatten().filter_map(|e| std::fs::read_to_string(e.path()).ok()).collect()
}

/// The screen's words in order, box borders dropped (a wrapped line reads as one).
fn flatten(screen: &str) -> String {
    screen.replace(['│', '┌', '┐', '└', '┘', '─'], " ").split_whitespace().collect::<Vec<_>>().join(" ")
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < WAIT, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_jobs_asking_for_one_host_get_one_question() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    // The host both jobs want: an HTTP server of the test's, outside talaria.
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhello-31").await;
            });
        }
    });
    let home = Home::new();
    let out = home.work().join("background-31.txt");
    let first = format!("curl -s http://127.0.0.1:{port}/one > {}", out.display());
    let second = format!("curl -s http://127.0.0.1:{port}/two; echo ' second-31'");
    let model = rt
        .block_on(ScriptedServer::start([
            ScriptedResponse::tool_call(
                "c1",
                "terminal",
                &serde_json::json!({ "command": first, "background": true }).to_string(),
            ),
            ScriptedResponse::tool_call("c2", "terminal", &serde_json::json!({ "command": second }).to_string()),
            ScriptedResponse::text("Both fetched."),
        ]))
        .unwrap();
    let url = model.base_url();
    let p = Pty::spawn(home.path(), &home.work(), &["--base-url", &url, "--model", "m"], 120, 40);
    p.wait_for(" message ", WAIT);
    p.type_text("fetch twice");
    p.send(b"\r");
    // Whichever job's request comes first asks; the other's waits for that question.
    let wants = format!("wants 127.0.0.1:{port}");
    wait_until("the question", || flatten(&p.contents()).contains(&wants));
    let screen = p.contents();
    let flat = flatten(&screen);
    assert!(flat.contains(&format!("wants 127.0.0.1:{port}")) && flat.contains("sandbox.network_allow"), "{screen}");
    let (asker, other) = if flat.contains("job_1 (`curl") { ("job_1", "job_2") } else { ("job_2", "job_1") };
    assert!(flat.contains(&format!("{asker} (`curl -s http://127.0.0.1:{port}/")), "{screen}");
    let question = format!("{asker} (`curl");
    wait_until("the other job's request to wait for the open question", || {
        log_text(&home).lines().any(|l| l.contains("waits for the open question") && l.contains(other))
    });
    let screen = p.contents();
    assert!(!screen.contains("1 of 2") && !screen.contains(&format!("{other} (`curl")), "a second question: {screen}");
    // "once" (keys are ignored until the prompt is armed: send until it is gone).
    let deadline = std::time::Instant::now() + WAIT;
    while p.contents().contains(&question) {
        assert!(std::time::Instant::now() < deadline, "the question stayed: {}", p.contents());
        p.send(b"o");
        std::thread::sleep(Duration::from_millis(50));
    }
    p.wait_for("Both fetched.", WAIT);
    wait_until("the background job's output", || std::fs::read_to_string(&out).is_ok_and(|t| t == "hello-31"));
    let requests = rt.block_on(model.wait_for_chat_requests(3, WAIT));
    let body = requests[2].body["messages"].to_string();
    assert!(body.contains("hello-31 second-31"), "{body}");
    let raw = p.raw_text();
    assert!(!raw.contains(&format!("{other} (`curl")), "{other} was asked about too");
    assert_eq!(log_text(&home).matches("network proxy asks").count(), 1, "{}", log_text(&home));
}
