//! Jobs end to end with the real binary: `kill -9` of talaria leaves no job process behind
//! (the reaper), the next start lists the job as `lost`, and a job printing 200 MB keeps
//! talaria's memory flat while its log holds the capped output.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{slow_stream, spawn_json, stderr, wait_event, Home};
use serde_json::Value;
use talaria::engine::jobs::group;
use talaria::engine::llm::scripted::{finish_chunk, tool_call_chunks, ScriptedResponse, ScriptedServer, DONE};

const DEADLINE: Duration = Duration::from_secs(30);

/// A `kB` field of /proc/<pid>/status, in bytes.
fn status_kb(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("talaria is running");
    let line = text.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in status"));
    let kb: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number of kB");
    kb * 1024
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_leaves_no_job_process_and_the_next_start_lists_it_lost() {
    let home = Home::new();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_1", "terminal", r#"{"command":"sleep 300","background":true}"#),
        slow_stream(),
    ])
    .await
    .unwrap();
    let url = server.base_url();
    let (mut child, mut lines) = spawn_json(&home, &["--base-url", &url, "start a sleeper"]);
    let started = wait_event(&mut lines, "JobStarted", |_| true).await;
    let pid = started["data"]["job"]["pid"].as_u64().expect("job pid") as i32;
    assert_eq!(started["data"]["job"]["command"], "sleep 300");
    // The tool call has returned and the next answer is streaming.
    wait_event(&mut lines, "AssistantDelta", |_| true).await;
    assert!(group::group_alive(pid), "the background job runs");

    child.start_kill().unwrap();
    tokio::time::timeout(DEADLINE, child.wait()).await.expect("talaria died").unwrap();
    let start = Instant::now();
    while group::group_alive(pid) {
        assert!(start.elapsed() < Duration::from_secs(10), "job group {pid} outlived talaria by 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The next start: a JobStarted event with status lost, and `process list` says so.
    server.push(ScriptedResponse::tool_call("call_2", "process", r#"{"action":"list"}"#));
    server.push(ScriptedResponse::text("It was lost."));
    let out = home.run(&["exec", "--json", "--base-url", &url, "what jobs are there?"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let lost = common::stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "JobStarted")
        .expect("the lost job is announced");
    assert_eq!(lost["data"]["job"]["status"]["state"], "lost", "{lost}");
    assert_eq!(lost["data"]["job"]["command"], "sleep 300");

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 4);
    let messages = requests[3].body["messages"].as_array().unwrap().clone();
    let result: Value = serde_json::from_str(messages.last().unwrap()["content"].as_str().unwrap()).unwrap();
    let jobs = result["jobs"].as_array().unwrap_or_else(|| panic!("a job list: {result}"));
    assert!(
        jobs.iter().any(|j| j["command"] == "sleep 300" && j["status"] == "lost"),
        "process list shows the lost job: {result}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_printing_200_mb_keeps_talaria_memory_flat_and_its_log_capped() {
    let home = Home::new();
    // The tool call streams slowly, so the idle figure is read before the job starts. A
    // background job, so its log stays after it exits (a finished foreground job's goes).
    let args = r#"{"command":"yes | head -c 200000000; echo; echo finished-printing","background":true}"#;
    let mut call = tool_call_chunks(0, "call_1", "terminal", args, 4);
    call.push(finish_chunk("tool_calls"));
    call.push(DONE.to_string());
    let server = ScriptedServer::start([
        ScriptedResponse::sse(call).delay(Duration::from_millis(100)),
        ScriptedResponse::tool_call("call_2", "process", r#"{"action":"wait","session_id":"job_1","timeout":170}"#),
        slow_stream(),
    ])
    .await
    .unwrap();
    let child = home
        .command()
        .args(["exec", "--base-url", &server.base_url(), "print a lot"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn talaria");
    let pid = child.id().expect("pid");
    server.wait_for_chat_requests(1, DEADLINE).await;
    let idle = status_kb(pid, "VmHWM:");

    // The third request goes out once `process wait` saw the job exit.
    let requests = server.wait_for_chat_requests(3, Duration::from_secs(300)).await;
    assert_eq!(requests.len(), 3, "the job finished and the model was called again");
    let peak = status_kb(pid, "VmHWM:");
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    assert!(
        peak < idle + 32 * 1024 * 1024,
        "peak RSS {:.1} MiB vs idle {:.1} MiB: more than 32 MiB for a 200 MB job",
        mib(peak),
        mib(idle)
    );
    let messages = requests[2].body["messages"].as_array().unwrap().clone();
    let result: Value = serde_json::from_str(messages.last().unwrap()["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(result["output_tail"].as_str().is_some_and(|t| t.contains("finished-printing")), "{result}");

    // The log on disk holds the capped output: at most 64 MiB, the newest output kept.
    let mut total = 0;
    let mut newest = false;
    for entry in std::fs::read_dir(home.path().join("jobs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "log") {
            let text = std::fs::read(&path).unwrap();
            total += text.len() as u64;
            newest |= String::from_utf8_lossy(&text[text.len().saturating_sub(100)..]).contains("finished-printing");
        }
    }
    assert!(total <= 64 * 1024 * 1024 + 4096, "log holds {:.1} MiB", mib(total));
    assert!(total >= 32 * 1024 * 1024, "log keeps the newest output: {:.1} MiB", mib(total));
    assert!(newest, "a log segment ends with the last line");
    drop(child);
}
