//! Helpers shared by the benchmark programs: a store message fixture, process-group
//! watching through /proc, machine facts and percentiles for the printed tables.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use talaria::engine::jobs::group::{group_alive, proc_stat};
use talaria::engine::llm::ToolCall;
use talaria::engine::store::StoredMessage;

/// A mix of ordinary messages: user text, an assistant tool call, its result.
pub fn message(i: usize) -> StoredMessage {
    let (role, tool_calls, tool_call_id) = match i % 3 {
        0 => ("user", Vec::new(), None),
        1 => ("assistant", vec![ToolCall::new(format!("c{i}"), "terminal", "{\"command\":\"cargo test\"}")], None),
        _ => ("tool", Vec::new(), Some(format!("c{}", i - 1))),
    };
    StoredMessage {
        role: talaria::engine::llm::Role::parse(role).expect("a role"),
        content: Some(format!("message {i}: {}", "some ordinary words of a conversation ".repeat(8))),
        tool_calls,
        tool_call_id,
        tool_name: (role == "tool").then(|| "terminal".to_string()),
        display_kind: None,
        origin: None,
    }
}

/// Live (non-zombie) processes of group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| member_alive(*pid, pgid))
        .collect()
}

pub fn member_alive(pid: i32, pgid: i32) -> bool {
    matches!(proc_stat(pid), Some(s) if s.pgrp == pgid && s.state != 'Z' && s.state != 'X')
}

pub fn read_comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim_end().to_string())
}

/// A thread that notes when a process group is gone: it polls the group's known members
/// every 200 µs (cheap), then confirms with a full /proc scan (the definition: no
/// non-zombie process with that pgid).
pub struct GroupWatcher {
    thread: std::thread::JoinHandle<Instant>,
}

impl GroupWatcher {
    pub fn start(pgid: i32, members: Vec<i32>, timeout: Duration) -> GroupWatcher {
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + timeout;
            loop {
                if !members.iter().any(|pid| member_alive(*pid, pgid)) {
                    let at = Instant::now();
                    if !group_alive(pgid) {
                        return at;
                    }
                }
                if Instant::now() > deadline {
                    return Instant::now();
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        GroupWatcher { thread }
    }

    pub fn join(self) -> anyhow::Result<Instant> {
        self.thread.join().map_err(|_| anyhow::anyhow!("the group watcher thread panicked"))
    }
}

pub fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

pub fn machine_line() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    format!("machine: {cores} cores, {cpu}; load average at start: {}", loadavg())
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
