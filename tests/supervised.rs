//! Jobs outlive their UI (DESIGN §4): real `talaria` processes killed with SIGKILL, real
//! supervisors, real process groups checked in /proc. Every test's processes carry a
//! unique marker (a `sleep` length) so tests running side by side never see each other's.

mod common;
#[path = "common/inproc.rs"]
mod inproc;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use talaria::config::Config;
use talaria::engine::jobs::{group, JobsHandle, JobsOptions, SpawnSpec, SupervisorExe};
use talaria::engine::store::jobs::{JobPids, NewJob};
use talaria::engine::store::Store;
use talaria::engine::{EventSink, SessionChoice};
use talaria::paths::Paths;
use talaria::protocol::{Event, HistoryItem, JobAction, JobFate, JobStatus, Op, TurnTrigger};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

use common::{slow_stream, spawn_json, wait_event, wait_until, Home};

const DEADLINE: Duration = Duration::from_secs(30);

/// A number no other test uses: `sleep <marker>` finds this test's processes.
fn marker(n: u32) -> String {
    format!("{}{:05}", 30_000 + n, std::process::id() % 100_000)
}

/// Pids of live (non-zombie) processes whose command line contains `needle`.
fn pids_with(needle: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(needle) && group::process_alive(pid, None) {
            found.push(pid);
        }
    }
    found
}

fn background_call(command: &str) -> ScriptedResponse {
    let args = json!({ "command": command, "background": true }).to_string();
    ScriptedResponse::tool_call("call_bg", "terminal", &args)
}

/// `talaria exec --json --yes` started by the model into a background job; returns the
/// child (still running) once the job has started.
async fn exec_with_job(home: &Home, server: &ScriptedServer, extra: &[&str]) -> (tokio::process::Child, String) {
    let url = server.base_url();
    let mut args = vec!["--yes", "--base-url", url.as_str()];
    args.extend_from_slice(extra);
    args.push("start the job");
    let (child, mut lines) = spawn_json(home, &args);
    let started = wait_event(&mut lines, "JobStarted", |_| true).await;
    let id = started["data"]["job"]["id"].as_str().expect("job id").to_string();
    // Keep reading so the child never blocks on a full stdout pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, id)
}

async fn jobs_list(home: &Home) -> Vec<Value> {
    let out = home.run(&["jobs", "list", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    serde_json::from_str(&common::stdout(&out)).expect("jobs list --json")
}

fn row<'a>(rows: &'a [Value], id: &str) -> &'a Value {
    let num: i64 = id.trim_start_matches("job_").parse().unwrap();
    rows.iter().find(|r| r["num"] == json!(num)).unwrap_or_else(|| panic!("{id} not in {rows:?}"))
}

fn sigkill(child: &tokio::process::Child) {
    let pid = child.id().expect("running") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
}

#[tokio::test]
async fn kill_9_talaria_leaves_the_job_running_and_continue_reattaches_it() {
    let home = Home::new();
    let mark = marker(1);
    let go = home.path().join("go");
    let command = format!(
        "echo before-{mark}; while [ ! -e {go} ]; do sleep 0.05; done; echo while-nobody-watched-{mark}; exec sleep {mark}",
        go = go.display()
    );
    let server = ScriptedServer::start([background_call(&command), slow_stream()]).await.unwrap();
    let (mut exec, id) = exec_with_job(&home, &server, &[]).await;
    sigkill(&exec);
    let _ = exec.wait().await;

    // Nobody watches now; the job goes on and prints.
    std::fs::write(&go, "").unwrap();
    wait_until("the job's sleep", || !pids_with(&format!("sleep {mark}")).is_empty()).await;
    let rows = jobs_list(&home).await;
    assert_eq!(row(&rows, &id)["status"], json!("running"));

    // `talaria -c`: the job is back in the pane, with what it printed meanwhile.
    let server2 = ScriptedServer::start([ScriptedResponse::text("ok")]).await.unwrap();
    let mut running = inproc::start(home.path(), &server2.base_url(), SessionChoice::Continue).await;
    // Re-attaching may be announced before SessionReady (which `start` already consumed).
    running
        .wait_since(
            0,
            "the job re-attached",
            |e| matches!(e, Event::JobStarted { job } if job.id == id && job.status == JobStatus::Running),
        )
        .await;
    let needles = [format!("while-nobody-watched-{mark}"), format!("before-{mark}")];
    let shown = running.log_shows(&id, &needles.each_ref().map(String::as_str), 200).await;
    assert!(shown, "the whole log is shown after re-attaching");
    running.kill_job(&id).await;
    assert!(pids_with(&format!("sleep {mark}")).is_empty(), "the job's processes are gone");
    running.shutdown().await;
}

#[tokio::test]
async fn a_job_that_finished_while_talaria_was_dead_is_noticed_exactly_once() {
    let home = Home::new();
    let mark = marker(2);
    let go = home.path().join("go");
    let command =
        format!("while [ ! -e {go} ]; do sleep 0.05; done; echo finished-{mark}; exit 3 # {mark}", go = go.display());
    let server = ScriptedServer::start([background_call(&command), slow_stream()]).await.unwrap();
    let (mut exec, id) = exec_with_job(&home, &server, &[]).await;
    sigkill(&exec);
    let _ = exec.wait().await;
    std::fs::write(&go, "").unwrap();
    let exit = home.path().join("jobs").join(&id).join("exit.json");
    wait_until("the supervisor's exit record", || exit.exists()).await;
    assert!(pids_with(&format!("# {mark}")).is_empty());

    // Three restarts: the first tells the model, the others do not.
    let server2 = ScriptedServer::start([ScriptedResponse::text("noted")]).await.unwrap();
    for round in 0..3 {
        let mut running = inproc::start(home.path(), &server2.base_url(), SessionChoice::Continue).await;
        if round == 0 {
            running
                .wait_for("the notice turn", |e| {
                    matches!(e, Event::TurnStarted { trigger: TurnTrigger::JobNotification })
                })
                .await;
            running.turn_finished().await;
        } else {
            let events = running.collect_for(Duration::from_millis(1500)).await;
            assert!(
                !events.iter().any(|e| matches!(e, Event::TurnStarted { .. })),
                "round {round}: no second notice: {events:?}"
            );
        }
        let rows = running.store.load_messages(&running.session_id()).await.unwrap();
        let notices: Vec<_> = rows
            .iter()
            .filter(|m| m.display_kind.as_deref() == Some("job_notice"))
            .map(|m| m.content.clone())
            .collect();
        assert_eq!(notices.len(), 1, "round {round}: {notices:?}");
        let text = notices[0].clone().unwrap_or_default();
        assert!(text.contains(&format!("{id} exited with code 3")), "{text}");
        assert!(text.contains(&format!("finished-{mark}")), "{text}");
        running.shutdown().await;
    }
    assert_eq!(server2.chat_requests().len(), 1);
}

#[tokio::test]
async fn after_the_grace_an_orphaned_job_is_killed_as_owner_gone() {
    let home = Home::new();
    home.write_config("[jobs]\norphan_grace_s = 1\n");
    let mark = marker(3);
    let server = ScriptedServer::start([background_call(&format!("sleep {mark}")), slow_stream()]).await.unwrap();
    let (mut exec, id) = exec_with_job(&home, &server, &[]).await;
    wait_until("the job's sleep", || !pids_with(&format!("sleep {mark}")).is_empty()).await;
    sigkill(&exec);
    let _ = exec.wait().await;
    wait_until("the grace to run out", || pids_with(&format!("sleep {mark}")).is_empty()).await;
    let exit = home.path().join("jobs").join(&id).join("exit.json");
    wait_until("the exit record", || exit.exists()).await;
    let rows = jobs_list(&home).await;
    assert_eq!(row(&rows, &id)["status"], json!("killed"));
    assert_eq!(row(&rows, &id)["reason"], json!("owner gone"));
}

#[tokio::test]
async fn exec_kills_its_jobs_unless_keep_jobs_and_jobs_lists_kept_ones() {
    let home = Home::new();
    let mark = marker(4);
    let server = ScriptedServer::start([
        background_call(&format!("sleep {mark}")),
        ScriptedResponse::text("started"),
        background_call(&format!("sleep {mark}1")),
        ScriptedResponse::text("started"),
    ])
    .await
    .unwrap();
    let url = server.base_url();
    let out = home.run(&["exec", "--yes", "--base-url", &url, "start it"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(pids_with(&format!("sleep {mark}")).is_empty(), "a clean exec kills its jobs");

    let out = home.run(&["exec", "--yes", "--keep-jobs", "--base-url", &url, "start another"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let kept = pids_with(&format!("sleep {mark}1"));
    assert_eq!(kept.len(), 1, "the kept job runs on");
    let rows = jobs_list(&home).await;
    let running: Vec<&Value> = rows.iter().filter(|r| r["status"] == json!("running")).collect();
    assert_eq!(running.len(), 1, "{rows:?}");
    let id = format!("job_{}", running[0]["num"]);
    let out = home.run(&["jobs", "log", &id]).await;
    assert_eq!(out.status.code(), Some(0));
    let out = home.run(&["jobs", "kill", &id]).await;
    assert!(common::stdout(&out).contains("killed"), "{}", common::stdout(&out));
    assert!(pids_with(&format!("sleep {mark}1")).is_empty());
    assert_eq!(row(&jobs_list(&home).await, &id)["status"], json!("killed"));
}

fn handle(paths: &Paths, sweep: bool) -> (JobsHandle, tokio::sync::mpsc::UnboundedReceiver<Event>) {
    let (sink, events) = EventSink::channel();
    let options = JobsOptions {
        supervisor: SupervisorExe::Exe(PathBuf::from(env!("CARGO_BIN_EXE_talaria"))),
        sweep,
        attach: None,
    };
    let (jobs, _finished) = JobsHandle::start_with(paths, Arc::new(Config::default()), sink, options);
    (jobs, events)
}

fn spec(command: &str, cwd: &Path) -> SpawnSpec {
    SpawnSpec {
        command: command.into(),
        cwd: cwd.to_path_buf(),
        background: true,
        session_id: "s".into(),
        track_cwd: false,
        call_id: None,
        orphan_grace_s: None,
        sandboxed: true,
    }
}

#[tokio::test]
async fn a_sigkilled_supervisor_takes_the_leader_and_the_record_becomes_lost() {
    let home = Home::new();
    let paths = Paths::under(home.path());
    let mark = marker(5);
    let (jobs, mut events) = handle(&paths, true);
    let spawned = jobs.spawn(spec(&format!("sleep {mark}"), &home.work())).await.unwrap();
    let leader = spawned.pid as i32;
    wait_until("the leader", || group::process_alive(leader, None)).await;
    let store = Store::open(&paths.state_db).unwrap();
    let num: i64 = spawned.id.trim_start_matches("job_").parse().unwrap();
    let row = store.job_get(num).await.unwrap().unwrap();
    let supervisor = row.supervisor_pid.unwrap() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), nix::sys::signal::Signal::SIGKILL).unwrap();
    wait_until("the leader to die with its supervisor", || !group::process_alive(leader, None)).await;
    let lost = tokio::time::timeout(DEADLINE, async {
        while let Some(e) = events.recv().await {
            if matches!(&e, Event::JobFinished { id, status: JobStatus::Lost } if *id == spawned.id) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(lost, Ok(true));
    assert!(pids_with(&format!("sleep {mark}")).is_empty());
    let rows = jobs_list(&home).await;
    assert_eq!(row_status(&rows, num), "lost");
}

fn row_status(rows: &[Value], num: i64) -> String {
    rows.iter()
        .find(|r| r["num"] == json!(num))
        .map(|r| r["status"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn records_whose_pid_is_reused_or_from_another_boot_are_lost_and_nothing_is_touched() {
    let home = Home::new();
    let paths = Paths::under(home.path());
    paths.ensure_dirs().unwrap();
    let mark = marker(6);
    // An unrelated process, its own session and group (pgid = pid).
    let mut stranger = std::process::Command::new("setsid").args(["sleep", &mark]).spawn().unwrap();
    let pid = stranger.id() as i32;
    wait_until("the stranger to lead its group", || group::proc_stat(pid).is_some_and(|s| s.pgrp == pid)).await;
    let start = group::proc_stat(pid).unwrap().start_ticks as i64;
    let store = Store::open(&paths.state_db).unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim().to_string();
    let num = store
        .job_insert(NewJob {
            session_id: "old".into(),
            command: format!("sleep {mark}"),
            cwd: "/".into(),
            background: true,
            has_stdin: false,
            boot_id: boot,
            started_at: 1,
        })
        .await
        .unwrap();
    // The record's job and supervisor were this pid once, started at another time.
    let pids =
        JobPids { pgid: pid.into(), leader_start: start - 1, supervisor_pid: pid.into(), supervisor_start: start - 1 };
    store.job_started(num, pids).await.unwrap();
    // A record from before a reboot: whatever its pids say now, it is lost.
    let rebooted = store
        .job_insert(NewJob {
            session_id: "old".into(),
            command: format!("sleep {mark}"),
            cwd: "/".into(),
            background: true,
            has_stdin: false,
            boot_id: "another-boot".into(),
            started_at: 1,
        })
        .await
        .unwrap();
    let real = JobPids { pgid: pid.into(), leader_start: start, supervisor_pid: pid.into(), supervisor_start: start };
    store.job_started(rebooted, real).await.unwrap();
    drop(store);
    let rows = jobs_list(&home).await;
    assert_eq!(row_status(&rows, num), "lost");
    assert_eq!(row_status(&rows, rebooted), "lost");
    assert!(group::process_alive(pid, Some(start as u64)), "the stranger was not touched");
    let _ = stranger.kill();
    let _ = stranger.wait();
}

#[tokio::test]
async fn a_job_whose_directory_is_deleted_is_killed_at_once() {
    let home = Home::new();
    let paths = Paths::under(home.path());
    let mark = marker(7);
    let (jobs, _events) = handle(&paths, false);
    let spawned = jobs.spawn(spec(&format!("sleep {mark}"), &home.work())).await.unwrap();
    wait_until("the job's sleep", || !pids_with(&format!("sleep {mark}")).is_empty()).await;
    // What a deleted TALARIA_HOME does: no record can point to the job any more.
    std::fs::remove_dir_all(paths.jobs_dir.join(&spawned.id)).unwrap();
    wait_until("the job to be killed without waiting out the grace", || pids_with(&format!("sleep {mark}")).is_empty())
        .await;
    wait_until("its supervisor to exit", || pids_with(&format!("__job {}", paths.jobs_dir.display())).is_empty()).await;
}

#[tokio::test]
async fn job_ids_never_repeat_within_a_talaria_home() {
    let home = Home::new();
    let paths = Paths::under(home.path());
    let mark = marker(8);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (jobs, _events) = handle(&paths, true);
        let mut fg = spec(&format!("echo {mark}"), &home.work());
        fg.background = false;
        let spawned = jobs.spawn(fg).await.unwrap();
        let _ = tokio::time::timeout(DEADLINE, spawned.exit).await.expect("the job ends");
        // Its record and directory are deleted, as after every foreground command.
        jobs.forget(&spawned.id).await;
        jobs.shutdown().await;
        ids.push(spawned.id);
    }
    assert_eq!(ids, vec!["job_1".to_string(), "job_2".to_string()]);
}

/// What the resumed transcript says of each job a tool call started, in order.
fn fates_in(ready: &Event) -> Vec<Option<JobFate>> {
    let Event::SessionReady { history, .. } = ready else { panic!("not SessionReady: {ready:?}") };
    history
        .iter()
        .filter_map(|item| match item {
            HistoryItem::Tool { name, job, .. } if name == "terminal" => Some(*job),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_resumed_transcript_marks_jobs_that_no_longer_run() {
    let home = Home::new();
    let mark = marker(21);
    let go = home.path().join(format!("go-{mark}"));
    let waiter = format!("while [ ! -e {go} ]; do sleep 0.05; done; exit 0 # {mark}", go = go.display());
    // 1. A job kept running at quit, which then finishes while no talaria runs.
    let server = ScriptedServer::start([background_call(&waiter), ScriptedResponse::text("started")]).await.unwrap();
    let mut first = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    first.send(Op::Submit { text: "start the waiter".into(), mode: None });
    let Event::JobStarted { job: waiter_job } =
        first.wait_for("the waiter", |e| matches!(e, Event::JobStarted { .. })).await
    else {
        unreachable!()
    };
    first.turn_finished().await;
    let session = first.session_id();
    first.send(Op::LeaveJobs { detach: true });
    first.shutdown().await;
    std::fs::write(&go, "").unwrap();
    let exit = home.path().join("jobs").join(&waiter_job.id).join("exit.json");
    wait_until("the waiter's exit record", || exit.exists()).await;

    // 2. Resumed: the waiter finished while away. Then a sleeper is started and killed at quit.
    let server = ScriptedServer::start([
        ScriptedResponse::text("noted"),
        background_call(&format!("sleep {mark}")),
        ScriptedResponse::text("started"),
    ])
    .await
    .unwrap();
    let mut second = inproc::start(home.path(), &server.base_url(), SessionChoice::Resume(session.clone())).await;
    let ready = second.seen.last().cloned().unwrap();
    assert_eq!(fates_in(&ready), vec![Some(JobFate::Finished { code: 0, while_away: true })]);
    second
        .wait_for("the notice turn", |e| matches!(e, Event::TurnStarted { trigger: TurnTrigger::JobNotification }))
        .await;
    second.turn_finished().await;
    second.send(Op::Submit { text: "start the sleeper".into(), mode: None });
    second.wait_for("the sleeper", |e| matches!(e, Event::JobStarted { .. })).await;
    second.turn_finished().await;
    wait_until("the sleeper's process", || !pids_with(&format!("sleep {mark}")).is_empty()).await;
    second.shutdown().await;
    assert!(pids_with(&format!("sleep {mark}")).is_empty(), "quitting killed the sleeper");

    // 3. Resumed again: the sleeper is marked killed at quit, not running.
    let server = ScriptedServer::start([ScriptedResponse::text("unused")]).await.unwrap();
    let third = inproc::start(home.path(), &server.base_url(), SessionChoice::Resume(session)).await;
    let ready = third.seen.last().cloned().unwrap();
    let fates = fates_in(&ready);
    assert_eq!(fates.len(), 2, "{fates:?}");
    assert!(matches!(fates[0], Some(JobFate::Finished { code: 0, .. })), "{fates:?}");
    assert_eq!(fates[1], Some(JobFate::KilledAtQuit));
    assert_eq!(JobFate::KilledAtQuit.describe(), "killed when Talaria quit");
    third.shutdown().await;
}

#[tokio::test]
async fn exec_exits_non_zero_when_it_killed_a_job_the_answer_waited_for() {
    let home = Home::new();
    let mark = marker(22);
    let wait = json!({ "action": "wait", "session_id": "job_1", "timeout": 1 }).to_string();
    let server = ScriptedServer::start([
        background_call(&format!("sleep {mark}")),
        ScriptedResponse::tool_call("call_wait", "process", &wait),
        ScriptedResponse::text("it is still going"),
        // Second run: started and never looked at (a server the answer does not need).
        background_call(&format!("sleep {mark}1")),
        ScriptedResponse::text("started it"),
    ])
    .await
    .unwrap();
    let url = server.base_url();
    let out = home.run(&["exec", "--yes", "--base-url", &url, "build it and tell me"]).await;
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("talaria: killed job_1 at exit: sleep"), "{err}");
    assert!(err.contains("the answer depended on it"), "{err}");
    assert!(err.contains("--keep-jobs"), "{err}");
    assert!(common::stdout(&out).contains("it is still going"));
    assert!(pids_with(&format!("sleep {mark}")).is_empty());

    let out = home.run(&["exec", "--yes", "--base-url", &url, "start a server"]).await;
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("at exit: sleep"), "{err}");
    assert!(!err.contains("depended"), "{err}");
}

fn integrity(home: &Home) -> String {
    let db = rusqlite::Connection::open(home.path().join("state.db")).unwrap();
    db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn a_panic_in_talaria_leaves_no_orphan_and_the_database_intact() {
    let home = Home::new();
    home.write_config("[jobs]\norphan_grace_s = 1\n");
    let mark = marker(20);
    let server = ScriptedServer::start([
        background_call(&format!("echo started-{mark}; exec sleep {mark}")),
        ScriptedResponse::text("It runs in the background."),
    ])
    .await
    .unwrap();
    // The engine panics when exec asks it to shut down, with the job still running: the
    // clean kill at quit never happens.
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        home.command()
            .env("TALARIA_TEST_PANIC", "shutdown")
            .args(["exec", "--yes", "--base-url", &server.base_url(), "start the job"])
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .expect("talaria ends")
    .unwrap();
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(101), "{err}");
    assert!(err.contains("the engine crashed"), "{err}");

    // The database is intact and holds the whole exchange.
    assert_eq!(integrity(&home), "ok");
    let db = rusqlite::Connection::open(home.path().join("state.db")).unwrap();
    let roles: Vec<String> = db
        .prepare("SELECT role FROM messages ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);

    // The job was left to its supervisor (recorded, so not an orphan), which kills it once
    // the grace runs out: nothing of it is left, and its record says why.
    let rows = jobs_list(&home).await;
    let id = format!("job_{}", rows[0]["num"]);
    wait_until("the grace to run out", || pids_with(&format!("sleep {mark}")).is_empty()).await;
    let exit = home.path().join("jobs").join(&id).join("exit.json");
    wait_until("the exit record", || exit.exists()).await;
    let rows = jobs_list(&home).await;
    assert_eq!(row(&rows, &id)["status"], json!("killed"), "{rows:?}");
    assert_eq!(row(&rows, &id)["reason"], json!("owner gone"));
    // The supervisor writes the record, then exits.
    wait_until("no supervisor of this home to be left", || pids_with(&home.path().display().to_string()).is_empty())
        .await;
    assert_eq!(integrity(&home), "ok");
}

#[tokio::test]
async fn resume_inside_a_running_talaria_reattaches_the_other_sessions_jobs() {
    let home = Home::new();
    let mark = marker(23);
    let command = format!("echo from-the-other-session-{mark}; exec sleep {mark}");
    let server = ScriptedServer::start([background_call(&command), slow_stream()]).await.unwrap();
    let (mut exec, id) = exec_with_job(&home, &server, &[]).await;
    wait_until("the job's sleep", || !pids_with(&format!("sleep {mark}")).is_empty()).await;
    sigkill(&exec);
    let _ = exec.wait().await;
    let rows = jobs_list(&home).await;
    let other = row(&rows, &id)["session_id"].as_str().expect("session id").to_string();

    // A talaria running on a new session; `/resume <the other>` takes the job over.
    let server2 = ScriptedServer::start([ScriptedResponse::text("ok")]).await.unwrap();
    let mut running = inproc::start(home.path(), &server2.base_url(), SessionChoice::New).await;
    assert_ne!(running.session_id(), other);
    let before = running.collect_for(Duration::from_millis(500)).await;
    assert!(!before.iter().any(|e| matches!(e, Event::JobStarted { .. })), "not attached before /resume");
    running.send(Op::Command(talaria::protocol::SlashCommand::Resume(Some(other.clone()))));
    running
        .wait_for(
            "the job re-attached",
            |e| matches!(e, Event::JobStarted { job } if job.id == id && job.status == JobStatus::Running),
        )
        .await;
    let owner: Value =
        serde_json::from_slice(&std::fs::read(home.path().join("jobs").join(&id).join("owner.json")).unwrap()).unwrap();
    assert_eq!(owner["Process"]["pid"], json!(std::process::id()), "this talaria holds the lease now: {owner}");
    running.send(Op::Job { id: id.clone(), action: JobAction::Log { offset: None, limit: None } });
    let log = running.wait_for("the log", |e| matches!(e, Event::JobLog { .. })).await;
    assert!(matches!(&log, Event::JobLog { text, .. } if text.contains(&format!("from-the-other-session-{mark}"))));
    running.kill_job(&id).await;
    assert!(pids_with(&format!("sleep {mark}")).is_empty(), "the job's processes are gone");
    running.shutdown().await;
}

#[tokio::test]
async fn keep_running_at_quit_kills_a_running_goal_gate_but_keeps_the_jobs() {
    use talaria::protocol::commands::{GateCmd, GoalCmd};
    use talaria::protocol::SlashCommand;
    let home = Home::new();
    let mark = marker(24);
    let server = ScriptedServer::start([
        background_call(&format!("sleep {mark}")),
        ScriptedResponse::text("Started; done."),
        ScriptedResponse::text(r#"{"verdict":"done","reason":"ok"}"#),
    ])
    .await
    .unwrap();
    let mut running = inproc::start(home.path(), &server.base_url(), SessionChoice::New).await;
    let gate = format!("while :; do sleep 0.05; done # gate-{mark}");
    // The gate first (it waits for the goal), so the goal turn cannot end before it exists.
    running.send(Op::Command(SlashCommand::Goal(GoalCmd::Gate(GateCmd::Add(gate)))));
    running
        .wait_for("the gate added", |e| matches!(e, Event::Notice { text, .. } if text.contains("gate 1 added")))
        .await;
    running.send(Op::Command(SlashCommand::Goal(GoalCmd::Set("start the job".into()))));
    wait_until("the gate running", || !pids_with(&format!("gate-{mark}")).is_empty()).await;
    assert!(!pids_with(&format!("sleep {mark}")).is_empty(), "the model's job runs too");

    // "keep running" at quit: LeaveJobs { detach } then Shutdown, as the quit dialog sends.
    running.send(Op::LeaveJobs { detach: true });
    running.shutdown().await;
    let left = pids_with(&format!("gate-{mark}"));
    let about: Vec<String> = left
        .iter()
        .map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            format!("{stat} :: {}", String::from_utf8_lossy(&cmd).replace('\0', " "))
        })
        .collect();
    let rows = jobs_list(&home).await;
    assert!(left.is_empty(), "the gate went with its owner: {about:#?}\n{rows:#?}");
    let kept = pids_with(&format!("sleep {mark}"));
    assert!(!kept.is_empty(), "the job is kept");
    let rows = jobs_list(&home).await;
    assert!(rows.iter().any(|r| r["status"] == json!("running") && r["command"] == json!(format!("sleep {mark}"))));
    assert!(
        !rows.iter().any(|r| r["status"] == json!("running") && r["command"].as_str().unwrap_or("").contains("gate-")),
        "no gate record left running: {rows:?}"
    );
    for row in rows.iter().filter(|r| r["status"] == json!("running")) {
        let out = home.run(&["jobs", "kill", &format!("job_{}", row["num"])]).await;
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    }
    wait_until("the kept job killed", || pids_with(&format!("sleep {mark}")).is_empty()).await;
}

/// The next line a child prints (None at the end of its output), within the deadline.
async fn next_line(lines: &mut common::JsonLines) -> Option<String> {
    tokio::time::timeout(DEADLINE, lines.next_line()).await.expect("a line within the deadline").expect("read stdout")
}

/// Pids of live processes whose command line is exactly `args`.
fn pids_exact(args: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = args.iter().flat_map(|a| a.bytes().chain(std::iter::once(0))).collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want) && group::process_alive(pid, None) {
            found.push(pid);
        }
    }
    found
}

/// `talaria jobs log` from another shell: the tail (all of it, `--lines`, `--json`), then
/// `--follow` prints what comes next (the unfinished last line goes on where it stopped)
/// and ends when the job does; `jobs kill --json`.
#[tokio::test]
async fn jobs_log_shows_the_tail_follows_to_the_end_and_log_and_kill_speak_json() {
    let home = Home::new();
    let paths = Paths::under(home.path());
    let mark = marker(25);
    let go = home.path().join(format!("go-{mark}"));
    let command = format!(
        "for i in 1 2 3 4 5; do echo line-$i-{mark}; done; printf half-{mark}; \
         while [ ! -e {go} ]; do sleep 0.05; done; echo -after-{mark}; exit 4",
        go = go.display()
    );
    let (jobs, _events) = handle(&paths, false);
    let spawned = jobs.spawn(spec(&command, &home.work())).await.unwrap();
    let id = spawned.id.clone();
    let mut lines: Vec<String> = (1..=5).map(|i| format!("line-{i}-{mark}")).collect();
    let half = format!("half-{mark}");

    // The whole log so far, as plain text (the supervisor writes it as the job prints).
    let mut text = String::new();
    for _ in 0..1500 {
        let out = home.run(&["jobs", "log", &id]).await;
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
        text = common::stdout(&out);
        if text.contains(&half) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(text, format!("{}\n{half}\n", lines.join("\n")), "the log, line by line");
    let out = home.run(&["jobs", "log", &id, "--lines", "2"]).await;
    assert_eq!(common::stdout(&out), format!("{}\n{half}\n", lines[4]));

    let out = home.run(&["jobs", "log", &id, "--lines", "2", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let log: Value = serde_json::from_str(&common::stdout(&out)).expect("jobs log --json");
    assert_eq!(
        log,
        json!({
            "session_id": id, "status": "running", "output": format!("{}\n{half}", lines[4]),
            "first_line": 1, "from": 5, "to": 6,
        })
    );

    // --follow: the tail, then what the job writes, until it ends.
    let mut follow = home
        .command()
        .args(["jobs", "log", &id, "--follow"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("jobs log --follow");
    let mut followed = {
        use tokio::io::AsyncBufReadExt;
        tokio::io::BufReader::new(follow.stdout.take().expect("stdout")).lines()
    };
    for want in &lines {
        assert_eq!(next_line(&mut followed).await.as_deref(), Some(want.as_str()));
    }
    std::fs::write(&go, "").unwrap();
    let finished = format!("{half}-after-{mark}");
    assert_eq!(next_line(&mut followed).await, Some(finished.clone()), "the half line, finished");
    assert_eq!(next_line(&mut followed).await, None, "--follow ends with the job");
    let status = tokio::time::timeout(DEADLINE, follow.wait()).await.expect("--follow exits").unwrap();
    assert_eq!(status.code(), Some(0));
    let _ = tokio::time::timeout(DEADLINE, spawned.exit).await.expect("the job ends");

    // A finished job: --follow prints the log and returns at once; --json says how it ended.
    let out = home.run(&["jobs", "log", &id, "--follow"]).await;
    lines.push(finished.clone());
    assert_eq!(common::stdout(&out), format!("{}\n", lines.join("\n")));
    let out = home.run(&["jobs", "log", &id, "--json", "--lines", "1"]).await;
    let log: Value = serde_json::from_str(&common::stdout(&out)).expect("jobs log --json");
    assert_eq!(log["status"], json!("exited"), "{log}");
    assert_eq!(log["output"], json!(finished), "{log}");
    assert_eq!((log["from"].clone(), log["to"].clone()), (json!(6), json!(6)), "{log}");

    // jobs kill --json: a running job, then the same one again, then one that never was.
    let sleeper = jobs.spawn(spec(&format!("sleep {mark}"), &home.work())).await.unwrap();
    wait_until("the sleeper", || !pids_with(&format!("sleep {mark}")).is_empty()).await;
    let out = home.run(&["jobs", "kill", &sleeper.id, "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let killed: Value = serde_json::from_str(&common::stdout(&out)).expect("jobs kill --json");
    assert_eq!(killed, json!({ "session_id": sleeper.id, "killed": true, "status": "killed" }));
    assert!(pids_with(&format!("sleep {mark}")).is_empty(), "the sleeper is gone");
    let out = home.run(&["jobs", "kill", &sleeper.id, "--json"]).await;
    let again: Value = serde_json::from_str(&common::stdout(&out)).expect("jobs kill --json");
    assert_eq!(again, json!({ "session_id": sleeper.id, "killed": false, "status": "killed" }));
    let out = home.run(&["jobs", "kill", "job_99", "--json"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(common::stderr(&out).contains("no job with id job_99"), "{}", common::stderr(&out));
    jobs.shutdown().await;
}

/// `jobs log --follow` on a job whose supervisor is SIGKILLed: no exit record will ever
/// come, so it ends (non-zero, saying why) instead of waiting forever.
#[tokio::test]
async fn jobs_log_follow_ends_when_the_supervisor_is_gone() {
    let home = Home::new();
    let paths = Paths::under(home.path());
    let mark = marker(28);
    let (jobs, _events) = handle(&paths, false);
    let spawned = jobs.spawn(spec(&format!("echo started-{mark}; exec sleep {mark}"), &home.work())).await.unwrap();
    let mut follow = home
        .command()
        .args(["jobs", "log", &spawned.id, "--follow"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("jobs log --follow");
    let mut followed = {
        use tokio::io::AsyncBufReadExt;
        tokio::io::BufReader::new(follow.stdout.take().expect("stdout")).lines()
    };
    assert_eq!(next_line(&mut followed).await, Some(format!("started-{mark}")));
    let store = Store::open(&paths.state_db).unwrap();
    let num: i64 = spawned.id.trim_start_matches("job_").parse().unwrap();
    let supervisor = store.job_get(num).await.unwrap().unwrap().supervisor_pid.unwrap() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert_eq!(next_line(&mut followed).await, None, "--follow ends");
    let out = tokio::time::timeout(DEADLINE, follow.wait_with_output()).await.expect("--follow exits").unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = common::stderr(&out);
    assert!(err.contains(&format!("{}'s supervisor is gone", spawned.id)) && err.contains("lost"), "{err}");
    wait_until("the job's leader gone with its supervisor", || pids_with(&format!("sleep {mark}")).is_empty()).await;
    jobs.shutdown().await;
}

/// A job leaves a member of its group behind (`sleep A &`) when its supervisor is
/// SIGKILLed with no talaria alive: the leader dies with the supervisor, the member
/// lives on. The next start-up sweep kills what is left of the group and marks it lost.
#[tokio::test]
async fn the_start_up_sweep_kills_a_leftover_group_member_and_marks_the_record_lost() {
    let home = Home::new();
    let mark = marker(26);
    let (left, last) = (format!("{mark}.1"), format!("{mark}.2"));
    let server =
        ScriptedServer::start([background_call(&format!("sleep {left} & sleep {last}")), slow_stream()]).await.unwrap();
    let (mut exec, id) = exec_with_job(&home, &server, &[]).await;
    let both = || pids_exact(&["sleep", &left]).len() == 1 && pids_exact(&["sleep", &last]).len() == 1;
    wait_until("both sleeps", both).await;
    sigkill(&exec);
    let _ = exec.wait().await;
    let rows = jobs_list(&home).await;
    let job = row(&rows, &id).clone();
    assert_eq!(job["status"], json!("running"), "{job}");
    let (pgid, supervisor) = (job["pgid"].as_i64().unwrap() as i32, job["supervisor_pid"].as_i64().unwrap() as i32);
    let member = pids_exact(&["sleep", &left])[0];
    assert_eq!(group::proc_stat(member).map(|s| s.pgrp), Some(pgid), "the member is in the job's group");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), nix::sys::signal::Signal::SIGKILL).unwrap();
    wait_until("the leader to die with its supervisor", || !group::process_alive(pgid, None)).await;
    assert_eq!(pids_exact(&["sleep", &left]), vec![member], "the member outlived the leader");

    // Start-up: the registry's sweep (not `jobs list`, which would clean up as well).
    let paths = Paths::under(home.path());
    let (jobs, _events) = handle(&paths, true);
    let store = Store::open(&paths.state_db).unwrap();
    let num: i64 = id.trim_start_matches("job_").parse().unwrap();
    let mut record = Value::Null;
    for _ in 0..1500 {
        record = serde_json::to_value(store.job_get(num).await.unwrap().expect("the record")).unwrap();
        if record["status"] != json!("running") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!((&record["status"], &record["reason"]), (&json!("lost"), &json!("supervisor gone")), "{record}");
    wait_until("the leftover member killed", || pids_with(&format!("sleep {mark}")).is_empty()).await;
    assert!(!group::group_alive(pgid), "nothing is left of the group");
    jobs.shutdown().await;
}

/// Two jobs end while no talaria runs (one folded into its record by `talaria jobs list`
/// meanwhile, one only in its exit record): `talaria -c` tells the model of both in one
/// turn, and never again after more restarts.
#[tokio::test]
async fn two_jobs_that_ended_while_talaria_was_dead_are_told_in_one_turn_exactly_once() {
    let home = Home::new();
    let mark = marker(27);
    let go = |n: u32| home.path().join(format!("go{n}-{mark}"));
    let job = |n: u32| {
        let command = format!(
            "while [ ! -e {go} ]; do sleep 0.05; done; echo ended-{n}-{mark}; exit {n} # {mark}",
            go = go(n).display()
        );
        ScriptedResponse::tool_call(
            &format!("call_bg{n}"),
            "terminal",
            &json!({ "command": command, "background": true }).to_string(),
        )
    };
    let server = ScriptedServer::start([job(1), job(2), slow_stream()]).await.unwrap();
    let url = server.base_url();
    let (mut exec, mut lines) = spawn_json(&home, &["--yes", "--base-url", &url, "start two jobs"]);
    let first = wait_event(&mut lines, "JobStarted", |_| true).await["data"]["job"]["id"].as_str().unwrap().to_string();
    let second = wait_event(&mut lines, "JobStarted", |e| e["data"]["job"]["id"] != json!(first)).await["data"]["job"]
        ["id"]
        .as_str()
        .unwrap()
        .to_string();
    sigkill(&exec);
    let _ = exec.wait().await;

    let exit = |id: &str| home.path().join("jobs").join(id).join("exit.json");
    std::fs::write(go(1), "").unwrap();
    wait_until("the first exit record", || exit(&first).exists()).await;
    // `jobs list` from a shell folds the first exit into its record (notice not yet told).
    assert_eq!(row(&jobs_list(&home).await, &first)["status"], json!("exited"));
    std::fs::write(go(2), "").unwrap();
    wait_until("the second exit record", || exit(&second).exists()).await;
    assert!(pids_with(&format!("# {mark}")).is_empty());

    let server2 = ScriptedServer::start([ScriptedResponse::text("noted both")]).await.unwrap();
    for round in 0..3 {
        // The two notices are queued by two followers, one after a SQLite write; a wide
        // window keeps a loaded machine from splitting them (the default 0.3 s is for people).
        let config = Config::from_toml("[jobs]\nnotice_window_s = 5\n", Path::new("test")).unwrap();
        let mut running = inproc::start_with(home.path(), &server2.base_url(), SessionChoice::Continue, config).await;
        if round == 0 {
            running
                .wait_for("the notice turn", |e| {
                    matches!(e, Event::TurnStarted { trigger: TurnTrigger::JobNotification })
                })
                .await;
            running.turn_finished().await;
        }
        let events = running.collect_for(Duration::from_millis(1500)).await;
        assert!(
            !events.iter().any(|e| matches!(e, Event::TurnStarted { .. })),
            "round {round}: no other turn: {events:?}"
        );
        let rows = running.store.load_messages(&running.session_id()).await.unwrap();
        let notices: Vec<String> = rows
            .iter()
            .filter(|m| m.display_kind.as_deref() == Some("job_notice"))
            .map(|m| m.content.clone().unwrap_or_default())
            .collect();
        assert_eq!(notices.len(), 2, "round {round}: {notices:?}");
        for (id, n) in [(&first, 1), (&second, 2)] {
            assert_eq!(
                notices.iter().filter(|t| t.contains(&format!("{id} exited with code {n}"))).count(),
                1,
                "round {round}: {notices:?}"
            );
        }
        running.shutdown().await;
    }
    let requests = server2.chat_requests();
    assert_eq!(requests.len(), 1, "one turn in all");
    for (id, n) in [(&first, 1), (&second, 2)] {
        assert!(requests[0].raw_body.contains(&format!("{id} exited with code {n}")), "{}", requests[0].raw_body);
        assert!(requests[0].raw_body.contains(&format!("ended-{n}-{mark}")), "{}", requests[0].raw_body);
    }
    let rows = jobs_list(&home).await;
    for id in [&first, &second] {
        assert_eq!(row(&rows, id)["notified"], json!(true), "{rows:?}");
    }
}

/// A re-attach (`/resume`, or the start-up sweep) that reads the records while this process
/// is still starting a job leaves that job to its spawn. It used to adopt it: a second
/// follower, the foreground command announced as a background job and its end told to the
/// model twice (seen under load in tests/hostile.rs).
#[tokio::test(flavor = "multi_thread")]
async fn a_reattach_while_a_job_is_starting_leaves_that_job_to_its_spawn() {
    let home = Home::new();
    let paths = Paths::under(home.path());
    let (waiting, go) = (home.path().join("supervisor-waiting"), home.path().join("go"));
    // The supervisor starts only once the test says so: the record is written by then.
    let wrapper = home.path().join("slow-supervisor");
    std::fs::write(
        &wrapper,
        format!(
            // Gone with the test's home if the test fails before it says go.
            "#!/bin/sh\ntouch '{}'\nwhile [ ! -e '{}' ]; do [ -d '{}' ] || exit 1; sleep 0.01; done\nexec '{}' \"$@\"\n",
            waiting.display(),
            go.display(),
            home.path().display(),
            env!("CARGO_BIN_EXE_talaria")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (sink, mut events) = EventSink::channel();
    let options = JobsOptions { supervisor: SupervisorExe::Exe(wrapper), sweep: false, attach: None };
    let (jobs, _finished) = JobsHandle::start_with(&paths, Arc::new(Config::default()), sink, options);

    let mut foreground = spec("echo started-once", &home.work());
    foreground.background = false;
    let spawn = tokio::spawn({
        let jobs = jobs.clone();
        async move { jobs.spawn(foreground).await }
    });
    wait_until("the job's record and its waiting supervisor", || waiting.exists()).await;
    let store = Store::open(&paths.state_db).unwrap();
    let row = store.job_get(1).await.unwrap();
    assert!(row.is_some(), "the record is there before the job is registered");

    jobs.attach_session("s");
    let attach_done = {
        let jobs = jobs.clone();
        async move {
            while jobs.list().await.is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    // Before the fix the re-attach registered the job at once; now it waits for the spawn.
    let adopted = tokio::time::timeout(Duration::from_secs(1), attach_done).await.is_ok();
    assert!(!adopted, "the re-attach took a job that was still starting: {:?}", jobs.list().await);

    std::fs::write(&go, "").unwrap();
    let spawned = tokio::time::timeout(DEADLINE, spawn).await.unwrap().unwrap().unwrap();
    let exit = tokio::time::timeout(DEADLINE, spawned.exit).await.unwrap().unwrap();
    assert_eq!(exit.code, Some(0));
    let listed = jobs.list().await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(!listed[0].background, "the foreground command stays foreground: {listed:?}");
    // Nothing announced it as a background job, and the re-attach added no follower.
    let mut announced = 0;
    while let Ok(e) = events.try_recv() {
        if matches!(&e, Event::JobStarted { job } if job.id == spawned.id) {
            announced += 1;
        }
    }
    assert_eq!(announced, 0, "a foreground command is not announced as a background job");
}
