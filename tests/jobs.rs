//! The job registry and the `terminal` / `process` tools against real processes.

#[path = "common/jobs_env.rs"]
mod jobs_env;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use talaria::config::Config;
use talaria::engine::jobs::group;
use talaria::engine::tools::process::ProcessTool;
use talaria::engine::tools::terminal::{TerminalTool, YIELD_NOTE};
use talaria::engine::tools::{Tool, ToolResult, ToolSignals};
use talaria::protocol::{Event, JobStatus};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use jobs_env::{JobsEnv as Env, DEADLINE};

/// Controllable signals: the senders stay with the test.
struct Signals {
    interrupt: CancellationToken,
    yield_tx: watch::Sender<u64>,
    release_tx: watch::Sender<u64>,
}

impl Signals {
    fn new() -> Signals {
        Signals { interrupt: CancellationToken::new(), yield_tx: watch::channel(0).0, release_tx: watch::channel(0).0 }
    }

    fn tool_signals(&self) -> ToolSignals {
        ToolSignals {
            interrupt: self.interrupt.clone(),
            yield_gen: self.yield_tx.subscribe(),
            release_gen: self.release_tx.subscribe(),
        }
    }

    fn bump_yield(&self) {
        self.yield_tx.send_modify(|g| *g += 1);
    }

    fn bump_release(&self) {
        self.release_tx.send_modify(|g| *g += 1);
    }
}

fn setup(tweak: impl FnOnce(&mut Config)) -> Env {
    Env::start(true, tweak)
}

impl Env {
    async fn terminal(&self, args: Value) -> ToolResult {
        TerminalTool.call(args, self.ctx(ToolSignals::inert())).await
    }

    async fn wait_finished(&mut self, id: &str) {
        let got = tokio::time::timeout(DEADLINE, async {
            while let Some(done) = self.finished.recv().await {
                if done == id {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(got, Ok(true), "{id} did not finish");
    }
}

fn output(r: &ToolResult) -> &str {
    r.value["output"].as_str().unwrap_or_else(|| panic!("no output in {}", r.value))
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// The group is gone within the deadline (checked in /proc).
async fn assert_group_gone(pgid: i32) {
    let start = Instant::now();
    while group::group_alive(pgid) {
        assert!(start.elapsed() < DEADLINE, "process group {pgid} is still alive");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn pid_line(text: &str) -> i32 {
    text.lines()
        .find_map(|l| l.strip_prefix("pid="))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid= line in {text:?}"))
}

#[tokio::test]
async fn a_command_runs_and_reports_output_and_exit_code() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": "echo a; echo b >&2; echo c; exit 3"})).await;
    assert_eq!(output(&r), "a\nb\nc\n");
    assert_eq!(r.value["exit_code"], json!(3));
    assert_eq!(r.value["error"], Value::Null);
    assert_eq!(r.exit_code, Some(3));
    assert!(!r.ok);
    // A finished foreground command does not linger in the registry.
    assert!(env.jobs.list().await.is_empty());
}

#[tokio::test]
async fn timeout_kills_the_group_and_says_so() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": "echo pid=$$; sleep 100 & sleep 100", "timeout": 1})).await;
    assert_eq!(r.value["exit_code"], json!(124));
    assert_eq!(r.value["status"], json!("timeout"));
    assert!(output(&r).ends_with("[Command timed out after 1s]"), "{}", r.value);
    assert_group_gone(pid_line(output(&r))).await;
}

#[tokio::test]
async fn killing_a_job_kills_its_grandchildren() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": "bash -c 'sleep 100 & sleep 100'", "background": true})).await;
    let id = str_of(&r.value, "session_id").to_string();
    let pgid = r.value["pid"].as_i64().unwrap() as i32;
    let start = Instant::now();
    // Wait until the grandchildren exist, so the kill has something to find.
    while std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| group::proc_stat(*p).is_some_and(|s| s.pgrp == pgid))
        .count()
        < 3
    {
        assert!(start.elapsed() < DEADLINE, "the grandchildren never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let v = env.process(json!({"action": "kill", "session_id": id})).await;
    assert_eq!(v["status"], json!("killed"), "{v}");
    assert!(!group::group_alive(pgid), "something of group {pgid} survived the kill");
    let again = env.process(json!({"action": "kill", "session_id": id})).await;
    assert_eq!(again["status"], json!("already_exited"));
}

#[tokio::test]
async fn process_arguments_that_do_not_fit_get_errors_that_say_why() {
    let env = setup(|_| {});
    let error = |v: Value| v["error"].as_str().unwrap_or_default().to_string();
    assert!(error(env.process(json!({"action": "fly"})).await).starts_with("unknown action \"fly\"; use one of list,"));
    let e = error(env.process(json!({"action": "poll"})).await);
    assert!(e.starts_with("process poll needs a session_id"), "{e}");
    let e = error(env.process(json!({"action": 5})).await);
    assert!(e.starts_with("process: invalid arguments: invalid type: integer `5`, expected a string"), "{e}");
    let e = error(env.process(json!({"action": "log", "session_id": "job_1", "limit": "lots"})).await);
    assert!(e.starts_with("process: invalid arguments: expected a non-negative integer"), "{e}");
    // Case and spaces in the action do not matter; numbers may come as strings.
    let v = env.process(json!({"action": " POLL ", "session_id": "job_999", "timeout": "3"})).await;
    assert_eq!(v["status"], json!("not_found"), "{v}");
    assert_eq!(env.process(json!({"action": "list"})).await, json!({"jobs": []}));
}

#[tokio::test]
async fn long_output_is_capped_with_the_truncation_marker() {
    let env = setup(|c| c.tool_output.max_chars = 1000);
    let r = env.terminal(json!({"command": "seq 1 100000"})).await;
    let out = output(&r);
    assert!(out.starts_with("1\n2\n3\n"), "{out}");
    assert!(out.ends_with("99999\n100000\n"), "{out}");
    assert!(out.contains("... [OUTPUT TRUNCATED - "), "{out}");
    assert!(out.contains(" chars omitted out of 588895 total] ..."), "{out}");
    assert!(out.chars().count() < 1200);
}

#[tokio::test]
async fn invalid_utf8_is_replaced_and_ansi_stripped() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": r"printf 'a\377b\n\033[31mred\033[0m\n'"})).await;
    assert_eq!(output(&r), "a\u{fffd}b\nred\n");
    assert_eq!(r.value["exit_code"], json!(0));
}

#[tokio::test]
async fn the_working_directory_carries_over() {
    let env = setup(|_| {});
    let target = env.home.path().join("sub dir");
    std::fs::create_dir(&target).unwrap();
    let target = target.canonicalize().unwrap();
    let r = env.terminal(json!({"command": "cd 'sub dir'"})).await;
    assert_eq!(r.value["cwd"], json!(target.display().to_string()));
    let r = env.terminal(json!({"command": "pwd"})).await;
    assert_eq!(output(&r), format!("{}\n", target.display()));
    let r = env.terminal(json!({"command": "cd /tmp && exit 4"})).await;
    assert_eq!(r.value["exit_code"], json!(4));
    let tmp = Path::new("/tmp").canonicalize().unwrap();
    let r = env.terminal(json!({"command": "pwd"})).await;
    assert_eq!(output(&r), format!("{}\n", tmp.display()));
    let r = env.terminal(json!({"command": "pwd", "workdir": target.display().to_string()})).await;
    assert_eq!(output(&r), format!("{}\n", target.display()));
    let r = env.terminal(json!({"command": "pwd", "workdir": "/no/such/dir"})).await;
    assert!(r.value["error"].as_str().unwrap().contains("/no/such/dir"));
}

#[tokio::test]
async fn the_api_key_variable_is_not_passed_on() {
    let env = setup(|c| c.model.api_key_env = "HOME".into());
    let r = env.terminal(json!({"command": "echo \"${HOME-unset}\""})).await;
    assert_eq!(output(&r), "unset\n");
}

#[tokio::test]
async fn background_job_wait_log_and_kill() {
    let mut env = setup(|_| {});
    let r = env
        .terminal(json!({"command": "for i in 1 2 3; do echo line$i; done; sleep 0.3; echo done", "background": true}))
        .await;
    let id = str_of(&r.value, "session_id").to_string();
    assert_eq!(r.value["output"], json!("Background process started"));
    assert_eq!(r.value["exit_code"], Value::Null);
    assert!(r.value["pid"].as_u64().unwrap() > 1);
    assert!(matches!(env.wait_event("job started", |e| matches!(e, Event::JobStarted { .. })).await,
        Event::JobStarted { job } if job.id == id && job.background && job.has_stdin));

    let v = env.process(json!({"action": "wait", "session_id": id, "timeout": 60})).await;
    assert_eq!(v["status"], json!("exited"), "{v}");
    assert_eq!(v["exit_code"], json!(0));
    assert_eq!(v["output_tail"], json!("line1\nline2\nline3\ndone\n"));

    let v = env.process(json!({"action": "log", "session_id": id})).await;
    assert_eq!(v["output"], json!("line1\nline2\nline3\ndone"));
    assert_eq!(v["first_line"], json!(1));
    assert_eq!(v["total_lines"], json!(4));
    assert_eq!(v["showing"], json!("lines 1-4 of 4"));
    let v = env.process(json!({"action": "log", "session_id": id, "offset": 2, "limit": 2})).await;
    assert_eq!(v["output"], json!("line2\nline3"));

    let list = env.process(json!({"action": "list"})).await;
    let jobs = list["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["session_id"], json!(id));
    assert_eq!(jobs[0]["status"], json!("exited"));
    assert_eq!(jobs[0]["last_line"], json!("done"));

    let r = env.terminal(json!({"command": "sleep 100", "background": true})).await;
    let id = str_of(&r.value, "session_id").to_string();
    let v = env.process(json!({"action": "wait", "session_id": id, "timeout": 1})).await;
    assert_eq!(v["status"], json!("timeout"));
    assert_eq!(v["process_running"], json!(true));
    let v = env.process(json!({"action": "kill", "session_id": id})).await;
    assert_eq!(v["status"], json!("killed"));
    let v = env.process(json!({"action": "poll", "session_id": id})).await;
    assert_eq!(v["status"], json!("killed"));
    assert!(env.jobs.take_notices("s1").await.is_empty(), "the model saw both exits through process");
}

/// `process list` (and the jobs pane, which shows the same `JobInfo`) gives a job's last line
/// as a terminal shows it: a `\r` progress bar at its final state, a spinner erased at the
/// end gone.
#[tokio::test]
async fn process_list_shows_the_last_line_as_a_terminal_shows_it() {
    let env = setup(|_| {});
    let command = r"printf 'Downloading\n[#   ]  10%%\r[##  ]  55%%\r[####] 100%%\n\342\240\213 unpacking\r\033[K'";
    let r = env.terminal(json!({"command": command, "background": true})).await;
    let id = str_of(&r.value, "session_id").to_string();
    let v = env.process(json!({"action": "wait", "session_id": id, "timeout": 60})).await;
    assert_eq!(v["status"], json!("exited"), "{v}");
    let list = env.process(json!({"action": "list"})).await;
    assert_eq!(list["jobs"][0]["last_line"], json!("[####] 100%"), "{list}");
}

#[tokio::test]
async fn write_and_close_reach_a_job_reading_stdin() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": "cat", "background": true})).await;
    let id = str_of(&r.value, "session_id").to_string();
    let v = env.process(json!({"action": "write", "session_id": id, "data": "hello\n"})).await;
    assert_eq!(v, json!({"status": "ok"}));
    let start = Instant::now();
    loop {
        let v = env.process(json!({"action": "poll", "session_id": id})).await;
        if v["output_tail"] == json!("hello\n") {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "cat never echoed: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(env.process(json!({"action": "close", "session_id": id})).await, json!({"status": "ok"}));
    let v = env.process(json!({"action": "wait", "session_id": id, "timeout": 60})).await;
    assert_eq!(v["status"], json!("exited"));
    assert_eq!(v["exit_code"], json!(0));
    let v = env.process(json!({"action": "write", "session_id": id, "data": "x"})).await;
    assert!(v["error"].as_str().unwrap().contains("exited"), "{v}");
    let v = env.process(json!({"action": "write", "session_id": id})).await;
    assert!(v["error"].as_str().unwrap().contains("needs data"), "{v}");
}

#[tokio::test]
async fn yield_adopts_a_running_command_without_losing_a_byte() {
    let mut env = setup(|_| {});
    let signals = Signals::new();
    let ctx = env.ctx(signals.tool_signals());
    let call = tokio::spawn(async move {
        TerminalTool
            .call(json!({"command": "for i in $(seq 1 400); do echo \"line $i\"; sleep 0.005; done"}), ctx)
            .await
    });
    env.wait_event("first output", |e| matches!(e, Event::ToolOutput { chunk, .. } if chunk.contains("line 1"))).await;
    signals.bump_yield();
    let r = tokio::time::timeout(DEADLINE, call).await.expect("the yield returned").expect("no panic");
    assert_eq!(r.status.map(|s| s.as_str()), Some("yielded"));
    let id = str_of(&r.value, "session_id").to_string();
    assert_eq!(r.value["status"], json!("yielded_to_background"));
    assert_eq!(r.value["note"], json!(YIELD_NOTE));
    assert_eq!(r.value["exit_code"], Value::Null);
    assert!(output(&r).starts_with("line 1\n"), "{}", r.value);
    env.wait_event(
        "adopted job announced",
        |e| matches!(e, Event::JobStarted { job } if job.id == id && !job.has_stdin),
    )
    .await;
    let v = env.process(json!({"action": "write", "session_id": id, "data": "x"})).await;
    assert!(str_of(&v, "error").contains("no stdin"), "{v}");

    let v = env.process(json!({"action": "wait", "session_id": id, "timeout": 120})).await;
    assert_eq!(v["status"], json!("exited"), "{v}");
    assert_eq!(v["exit_code"], json!(0));
    let v = env.process(json!({"action": "log", "session_id": id, "limit": 1000})).await;
    let expected: Vec<String> = (1..=400).map(|i| format!("line {i}")).collect();
    assert_eq!(v["output"], json!(expected.join("\n")));
    assert_eq!(v["total_lines"], json!(400));
}

#[tokio::test]
async fn interrupt_kills_with_130() {
    let mut env = setup(|_| {});
    let signals = Signals::new();
    let ctx = env.ctx(signals.tool_signals());
    let call = tokio::spawn(async move { TerminalTool.call(json!({"command": "echo pid=$$; sleep 100"}), ctx).await });
    env.wait_event("output", |e| matches!(e, Event::ToolOutput { chunk, .. } if chunk.contains("pid="))).await;
    signals.interrupt.cancel();
    let r = tokio::time::timeout(DEADLINE, call).await.expect("returned").expect("no panic");
    assert_eq!(r.value["exit_code"], json!(130));
    assert_eq!(r.status.map(|s| s.as_str()), Some("interrupted"));
    assert!(output(&r).ends_with("[Command interrupted]"), "{}", r.value);
    assert_group_gone(pid_line(output(&r))).await;
}

#[tokio::test]
async fn a_command_exiting_130_by_itself_is_not_interrupted() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": "echo x; exit 130"})).await;
    assert_eq!(r.value["exit_code"], json!(130));
    assert_eq!(output(&r), "x\n");
    assert_eq!(r.status, None);
    assert_eq!(r.value.get("status"), None);
}

#[tokio::test]
async fn interrupt_and_yield_reach_every_running_tool() {
    let mut env = setup(|_| {});
    // Yield: two foreground commands at once both move to the background.
    let signals = Signals::new();
    let calls: Vec<_> = (0..2)
        .map(|i| {
            let mut ctx = env.ctx(signals.tool_signals());
            ctx.call_id = format!("call_{i}");
            tokio::spawn(async move { TerminalTool.call(json!({"command": "echo go; sleep 100"}), ctx).await })
        })
        .collect();
    let mut started = std::collections::BTreeSet::new();
    while started.len() < 2 {
        if let Event::ToolOutput { call_id, .. } =
            env.wait_event("output of both calls", |e| matches!(e, Event::ToolOutput { .. })).await
        {
            started.insert(call_id);
        }
    }
    signals.bump_yield();
    let mut ids = Vec::new();
    for call in calls {
        let r = tokio::time::timeout(DEADLINE, call).await.expect("returned").expect("no panic");
        assert_eq!(r.value["status"], json!("yielded_to_background"), "{}", r.value);
        ids.push(str_of(&r.value, "session_id").to_string());
    }

    // Release, then interrupt: two concurrent waits both return.
    for (bump, expected) in [("release", "released"), ("interrupt", "interrupted")] {
        let signals = Signals::new();
        let waits: Vec<_> = ids
            .iter()
            .map(|id| {
                let ctx = env.ctx(signals.tool_signals());
                let args = json!({"action": "wait", "session_id": id, "timeout": 100});
                tokio::spawn(async move { ProcessTool.call(args, ctx).await.value })
            })
            .collect();
        // Each wait's signals were subscribed when its context was built, so the bump
        // reaches it whether or not the wait has started yet: no need to let them start.
        match bump {
            "release" => signals.bump_release(),
            _ => signals.interrupt.cancel(),
        }
        for wait in waits {
            let v = tokio::time::timeout(DEADLINE, wait).await.expect("returned").expect("no panic");
            assert_eq!(v["status"], json!(expected), "{v}");
            if expected == "released" {
                assert_eq!(v["reason"], json!("user message"));
            }
        }
    }
    for id in &ids {
        assert_eq!(env.process(json!({"action": "kill", "session_id": id})).await["status"], json!("killed"));
    }
}

#[tokio::test]
async fn a_leftover_background_process_becomes_a_job() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": "sleep 100 & echo started"})).await;
    assert_eq!(output(&r), "started\n");
    assert_eq!(r.value["exit_code"], json!(0));
    let id = str_of(&r.value, "session_id").to_string();
    assert!(str_of(&r.value, "note").contains(&id), "{}", r.value);
    let pgid = r.value["pid"].as_i64().unwrap() as i32;
    let listed = env.jobs.list().await;
    assert!(listed.iter().any(|j| j.id == id && j.status == JobStatus::Running && j.background), "{listed:?}");
    let v = env.process(json!({"action": "kill", "session_id": id})).await;
    assert_eq!(v["status"], json!("killed"));
    assert!(!group::group_alive(pgid));
}

#[tokio::test]
async fn exit_notifications_come_exactly_once_unless_seen() {
    let mut env = setup(|_| {});
    let r = env.terminal(json!({"command": "echo bye; exit 3", "background": true})).await;
    let id = str_of(&r.value, "session_id").to_string();
    env.wait_finished(&id).await;
    assert!(env.jobs.take_notices("other session").await.is_empty());
    let notices = env.jobs.take_notices("s1").await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].id, id);
    let text = &notices[0].text;
    assert!(text.starts_with(&format!("[Background job {id} exited with code 3 after ")), "{text}");
    assert!(text.ends_with(". Command: echo bye; exit 3. Output tail: bye]"), "{text}");
    assert!(env.jobs.take_notices("s1").await.is_empty());

    // Seen through process poll: no notification.
    let r = env.terminal(json!({"command": "exit 0", "background": true})).await;
    let id = str_of(&r.value, "session_id").to_string();
    env.wait_finished(&id).await;
    let v = env.process(json!({"action": "poll", "session_id": id})).await;
    assert_eq!(v["status"], json!("exited"));
    assert!(env.jobs.take_notices("s1").await.is_empty());

    // Foreground commands that simply finish never notify.
    env.terminal(json!({"command": "true"})).await;
    assert!(env.jobs.take_notices("s1").await.is_empty());
}

#[tokio::test]
async fn unknown_ids_and_actions() {
    let env = setup(|_| {});
    let v = env.process(json!({"action": "poll", "session_id": "job_999"})).await;
    assert_eq!(v["status"], json!("not_found"));
    assert!(str_of(&v, "error").starts_with("No job with id job_999"));
    let v = env.process(json!({"action": "dance"})).await;
    assert!(str_of(&v, "error").contains("list, poll, log, wait, kill, write, close"));
    let v = env.process(json!({"action": "poll"})).await;
    assert!(str_of(&v, "error").contains("session_id"));
}

#[tokio::test]
async fn a_user_asking_for_a_missing_job_is_told_which_jobs_there_are() {
    use talaria::protocol::{JobAction, NoticeLevel};
    let env = setup(|_| {});
    let notice = |text: &str| Event::Notice { level: NoticeLevel::Error, text: text.to_string() };
    assert_eq!(
        env.jobs.ui_action("job_9", JobAction::Poll).await,
        notice("No job_9 here: this session has no background jobs.")
    );
    let r = env.terminal(json!({"command": "sleep 3002331", "background": true})).await;
    let id = str_of(&r.value, "session_id").to_string();
    assert_eq!(
        env.jobs.ui_action("job_9", JobAction::Kill).await,
        notice(&format!("No job_9 here; the only job is {id} (/jobs lists it)."))
    );
    let r = env.terminal(json!({"command": "sleep 3002332", "background": true})).await;
    let second = str_of(&r.value, "session_id").to_string();
    assert_eq!(
        env.jobs.ui_action("7x", JobAction::Poll).await,
        notice(&format!("No job 7x here; jobs: {id}, {second} (/jobs lists them)."))
    );
    let killed = env.jobs.shutdown().await;
    assert_eq!(killed.len(), 2);
    assert!(killed.iter().all(|k| !k.awaited), "nobody waited for them: {killed:?}");
}

#[tokio::test]
async fn max_jobs_prunes_finished_jobs_first() {
    let mut env = setup(|c| c.jobs.max_jobs = 2);
    let r = env.terminal(json!({"command": "true", "background": true})).await;
    let first = str_of(&r.value, "session_id").to_string();
    env.wait_finished(&first).await;
    let mut running = Vec::new();
    for _ in 0..2 {
        let r = env.terminal(json!({"command": "sleep 100", "background": true})).await;
        running.push(str_of(&r.value, "session_id").to_string());
    }
    let ids: Vec<String> = env.jobs.list().await.into_iter().map(|j| j.id).collect();
    assert_eq!(ids, running);
    let r = env.terminal(json!({"command": "sleep 100", "background": true})).await;
    assert!(r.value["error"].as_str().unwrap().contains("too many jobs"), "{}", r.value);
    for id in &running {
        env.process(json!({"action": "kill", "session_id": id})).await;
    }
}

#[tokio::test]
async fn the_log_rotates_and_marks_what_was_dropped() {
    let env = setup(|c| c.jobs.log_max_bytes = 4096);
    let r = env.terminal(json!({"command": "seq 1 5000", "background": true})).await;
    let id = str_of(&r.value, "session_id").to_string();
    let v = env.process(json!({"action": "wait", "session_id": id, "timeout": 60})).await;
    assert_eq!(v["status"], json!("exited"));
    let v = env.process(json!({"action": "log", "session_id": id})).await;
    assert_eq!(v["total_lines"], json!(5000));
    let first = v["first_line"].as_u64().unwrap();
    assert!(first > 1, "{v}");
    assert!(str_of(&v, "output").ends_with("4999\n5000"));
    let v = env.process(json!({"action": "log", "session_id": id, "offset": 1, "limit": 2})).await;
    let out = str_of(&v, "output");
    assert!(out.starts_with("[... "), "{out}");
    assert!(out.contains("earlier output were dropped"), "{out}");
    assert!(out.ends_with(&format!("\n{first}\n{}", first + 1)), "{out}");
    let logs = std::fs::read_dir(env.paths.jobs_dir.join(&id))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .count();
    assert_eq!(logs, 2);
}

#[tokio::test]
async fn a_flood_of_output_keeps_memory_bounded() {
    let env = setup(|c| c.jobs.log_max_bytes = 8 * 1024 * 1024);
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }
    let before = rss_kib();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(before));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let line = "x".repeat(99);
    let r = env.terminal(json!({"command": format!("yes {line} | head -c 200000000"), "timeout": 300})).await;
    sampler.abort();
    assert_eq!(r.value["exit_code"], json!(0));
    assert!(output(&r).contains("chars omitted out of 200000000 total"));
    let grown = peak.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(before);
    assert!(grown < 48 * 1024, "RSS grew by {grown} KiB while 200 MB went through");
}

#[tokio::test]
async fn dropping_a_running_foreground_call_kills_its_group() {
    let mut env = setup(|_| {});
    let ctx = env.ctx(ToolSignals::inert());
    let call = tokio::spawn(async move { TerminalTool.call(json!({"command": "echo pid=$$; sleep 100"}), ctx).await });
    let Event::ToolOutput { chunk, .. } =
        env.wait_event("output", |e| matches!(e, Event::ToolOutput { chunk, .. } if chunk.contains("pid="))).await
    else {
        unreachable!()
    };
    call.abort();
    assert_group_gone(pid_line(&chunk)).await;
}

#[tokio::test]
async fn shutdown_kills_running_jobs() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": "sleep 100", "background": true})).await;
    let pgid = r.value["pid"].as_i64().unwrap() as i32;
    assert_eq!(env.jobs.shutdown().await.len(), 1);
    assert!(!group::group_alive(pgid));
    let r = env.terminal(json!({"command": "true"})).await;
    assert!(r.value["error"].as_str().unwrap().contains("shutting down"));
}

#[tokio::test]
async fn background_jobs_tell_the_ui_as_they_go() {
    let mut env = setup(|_| {});
    let r = env
        .terminal(json!({"command": "for i in $(seq 1 30); do echo $i; sleep 0.01; done", "background": true}))
        .await;
    let id = str_of(&r.value, "session_id").to_string();
    let mut last_tail = None;
    let finished = tokio::time::timeout(DEADLINE, async {
        while let Some(event) = env.events.recv().await {
            match event {
                Event::JobUpdated { id: i, tail, .. } if i == id => last_tail = Some(tail),
                Event::JobFinished { id: i, status } if i == id => return Some(status),
                _ => {}
            }
        }
        None
    })
    .await
    .expect("the job finished in time");
    assert_eq!(finished, Some(JobStatus::Exited(0)));
    let tail = last_tail.expect("at least one JobUpdated");
    assert!(tail.ends_with("29\n30\n"), "{tail:?}");
}

#[tokio::test]
async fn a_command_that_leaves_a_daemon_holding_the_pipe_still_returns() {
    let env = setup(|_| {});
    // The daemon is in another session (setsid), so it is not part of the job's group; it
    // keeps the output pipe open, and the call must not wait for it.
    let r = env.terminal(json!({"command": "setsid sleep 100 & echo pid=$!; echo done", "timeout": 60})).await;
    assert_eq!(r.value["exit_code"], json!(0), "{}", r.value);
    assert_eq!(r.value.get("session_id"), None, "{}", r.value);
    let daemon = pid_line(output(&r));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon), nix::sys::signal::Signal::SIGKILL).unwrap();
}

/// A process that leaves the job's group with `setsid` escapes a group kill; once its parent
/// dies the supervisor adopts it (it is a child subreaper), so killing the job still ends it.
#[tokio::test]
async fn killing_a_job_also_ends_what_left_its_group_with_setsid() {
    let env = setup(|_| {});
    let r =
        env.terminal(json!({"command": "setsid sleep 1009 & echo pid=$!; exec sleep 1008", "background": true})).await;
    let id = str_of(&r.value, "session_id").to_string();
    let pgid = r.value["pid"].as_i64().unwrap() as i32;
    let start = Instant::now();
    let daemon = loop {
        let v = env.process(json!({"action": "log", "session_id": id})).await;
        if let Some(text) = v["output"].as_str().filter(|t| t.contains("pid=")) {
            break pid_line(text);
        }
        assert!(start.elapsed() < DEADLINE, "no pid line: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Wait until it has left the job's group (setsid has run) and is the sleep itself.
    let escaped = loop {
        let stat = group::proc_stat(daemon).expect("the escaped process is alive");
        let exe = std::fs::read_link(format!("/proc/{daemon}/exe")).unwrap_or_default();
        if stat.pgrp == daemon && exe.file_name().is_some_and(|n| n == "sleep") {
            break stat;
        }
        assert!(start.elapsed() < DEADLINE, "never left the group: {stat:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_ne!(escaped.pgrp, pgid);
    let v = env.process(json!({"action": "kill", "session_id": id})).await;
    assert_eq!(v["status"], json!("killed"), "{v}");
    assert!(!group::group_alive(pgid), "something of group {pgid} survived the kill");
    let alive = group::process_alive(daemon, Some(escaped.start_ticks));
    if alive {
        // Leave nothing behind, whatever the outcome.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon), nix::sys::signal::Signal::SIGKILL);
    }
    assert!(!alive, "the process that left the group with setsid outlived the job's kill");
}

#[tokio::test]
async fn commands_get_default_sigpipe_and_no_stdin() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": "yes | head -1 >/dev/null; echo ${PIPESTATUS[0]}; cat; echo end"})).await;
    assert_eq!(output(&r), "141\nend\n");
}

#[tokio::test]
async fn commands_inherit_no_extra_file_descriptors() {
    // In particular not the reaper's pipe, which would keep it from noticing a crash.
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": "ls /proc/$$/fd"})).await;
    assert_eq!(output(&r), "0\n1\n2\n");
}

/// Bytes of every regular file under `dir` (a job's raw log segments; never its stdin FIFO).
fn raw_bytes_under(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            out.extend(raw_bytes_under(&path));
        } else if kind.is_file() {
            out.extend(std::fs::read(&path).unwrap_or_default());
        }
    }
    out
}

/// A two-line progress display redrawn 300 times with cursor-up and erase-line, as
/// docker and cargo draw them (DESIGN §4c).
const REDRAWN_DISPLAY: &str = r#"echo start-emu-7731; for i in $(seq 0 299); do [ $i -gt 0 ] && printf '\033[2A'; printf '\033[2Klayer a: %d/299\n\033[2Klayer b: %d/299\n' $i $((i/2)); done; echo finished-emu-7731"#;

#[tokio::test]
async fn a_redrawn_progress_display_reaches_the_model_as_its_final_state() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": REDRAWN_DISPLAY})).await;
    assert_eq!(r.value["exit_code"], json!(0), "{}", r.value);
    assert_eq!(output(&r), "start-emu-7731\nlayer a: 299/299\nlayer b: 149/299\nfinished-emu-7731\n");
}

#[tokio::test]
async fn poll_and_log_show_the_emulated_output_and_the_raw_log_keeps_every_byte() {
    let env = setup(|_| {});
    let r = env.terminal(json!({"command": REDRAWN_DISPLAY, "background": true})).await;
    let id = str_of(&r.value, "session_id").to_string();
    let v = env.process(json!({"action": "wait", "session_id": id, "timeout": 60})).await;
    assert_eq!(v["status"], json!("exited"), "{v}");
    let expected = "start-emu-7731\nlayer a: 299/299\nlayer b: 149/299\nfinished-emu-7731";
    // A poll shows the tail: the redraws collapse, the start may be out of its window.
    let tail = v["output_tail"].as_str().unwrap_or_default();
    assert!(tail.ends_with("layer a: 299/299\nlayer b: 149/299\nfinished-emu-7731\n"), "{v}");
    assert!(tail.len() < 200, "{v}");
    // Line numbers count the raw log's lines; what a range shows is emulated.
    let v = env.process(json!({"action": "log", "session_id": id, "offset": 1, "limit": 1000})).await;
    assert_eq!(v["output"].as_str().map(str::trim_end), Some(expected), "{v}");
    assert_eq!(v["total_lines"], json!(602), "{v}");
    assert_eq!(
        v["showing"],
        json!("lines 1-602 of 602 as written to the log, shown as a terminal shows them (4 lines after redraws)"),
        "the numbers say what they count"
    );

    let raw = raw_bytes_under(&env.paths.jobs_dir.join(&id));
    let raw = String::from_utf8_lossy(&raw);
    assert_eq!(raw.matches("\x1b[2Klayer a: ").count(), 300, "the raw log is kept as written");
}

/// A process's nice value (stat(5) field 19) and its autogroup's (None without autogroups).
fn priority_of(pid: i32) -> (i64, Option<i64>) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default().split_whitespace().collect();
    // `fields` starts at field 3 (state): nice is the 17th after it.
    let nice = fields.get(16).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no nice in {stat:?}"));
    let group = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).ok();
    (nice, group.and_then(|g| g.split_whitespace().last()?.parse().ok()))
}

/// What the job's processes (waited for until there are `n`) and its supervisor run at.
async fn job_priorities(pgid: i32, n: usize) -> Vec<(i64, Option<i64>)> {
    let members = || -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|p| group::proc_stat(*p).is_some_and(|s| s.pgrp == pgid && s.state != 'Z'))
            .collect()
    };
    let start = Instant::now();
    while members().len() < n {
        assert!(start.elapsed() < DEADLINE, "the job never had {n} processes");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let supervisor = group::proc_stat(pgid).expect("the leader").ppid;
    let mut found: Vec<_> = members().into_iter().map(priority_of).collect();
    found.push(priority_of(supervisor));
    found
}

/// `(nice, Some(nice))` where the kernel has autogroups, `(nice, None)` where it has none.
fn at(nice: i64) -> (i64, Option<i64>) {
    (nice, std::path::Path::new("/proc/self/autogroup").exists().then_some(nice))
}

#[tokio::test]
async fn background_jobs_run_at_background_nice_with_their_autogroup_and_foreground_ones_at_nice() {
    let env = setup(|c| {
        c.jobs.nice = 2;
        c.jobs.background_nice = 9;
    });
    let r = env.terminal(json!({"command": "sleep 3303311 & exec sleep 3303312", "background": true})).await;
    let pgid = r.value["pid"].as_i64().unwrap() as i32;
    // Both sleeps and the supervisor; the job's session and the supervisor's own.
    assert_eq!(job_priorities(pgid, 2).await, vec![at(9); 3]);
    let v = env.process(json!({"action": "kill", "session_id": str_of(&r.value, "session_id")})).await;
    assert_eq!(v["status"], json!("killed"), "{v}");

    let r =
        env.terminal(json!({"command": "echo pid=$$; nice=$(awk '{print $19}' /proc/$$/stat); echo at $nice"})).await;
    assert!(output(&r).ends_with("at 2\n"), "a foreground command runs at jobs.nice: {}", r.value);
}

#[tokio::test]
async fn a_command_moved_to_the_background_is_lowered_to_background_nice() {
    let mut env = setup(|c| {
        c.jobs.nice = 1;
        c.jobs.background_nice = 8;
    });
    let signals = Signals::new();
    let ctx = env.ctx(signals.tool_signals());
    let call = tokio::spawn(async move {
        TerminalTool.call(json!({"command": "echo pid=$$; sleep 3303321 & exec sleep 3303322"}), ctx).await
    });
    let Event::ToolOutput { chunk, .. } =
        env.wait_event("the pid", |e| matches!(e, Event::ToolOutput { chunk, .. } if chunk.contains("pid="))).await
    else {
        unreachable!()
    };
    let pgid = pid_line(&chunk);
    assert_eq!(job_priorities(pgid, 2).await, vec![at(1); 3], "in the foreground: jobs.nice");
    signals.bump_yield();
    let r = tokio::time::timeout(DEADLINE, call).await.expect("the yield returned").expect("no panic");
    assert_eq!(r.value["status"], json!("yielded_to_background"), "{}", r.value);
    assert_eq!(job_priorities(pgid, 2).await, vec![at(8); 3], "moved: every process, its session and its supervisor");
    let v = env.process(json!({"action": "kill", "session_id": str_of(&r.value, "session_id")})).await;
    assert_eq!(v["status"], json!("killed"), "{v}");
}
