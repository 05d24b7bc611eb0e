//! The SSH backend against a real `sshd` on loopback (DESIGN §4b): commands run remotely
//! with their output, exit code and working directory; a long remote command yields and is
//! killed from the jobs pane with its remote group gone; a remote background job survives
//! `kill -9` of talaria and is re-attached by `talaria -c`; a stopped server gives
//! `degraded` and a restarted one works again with no user action; a wrong port or a host
//! that never answers gives `degraded` within the connect timeout. Every test's remote
//! processes carry a unique marker.

mod common;
#[path = "common/inproc.rs"]
mod inproc;
#[path = "common/sshd.rs"]
mod sshd;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use talaria::config::Config;
use talaria::engine::SessionChoice;
use talaria::protocol::{Event, JobAction, JobStatus, Op, ToolStatus};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

use common::{slow_stream, spawn_json, wait_event, Home};
use sshd::Sshd;

const DEADLINE: Duration = Duration::from_secs(30);

fn marker(n: u32) -> String {
    format!("{}{:05}", 40_000 + n, std::process::id() % 100_000)
}

fn call(id: &str, command: &str) -> ScriptedResponse {
    ScriptedResponse::tool_call(id, "terminal", &json!({ "command": command }).to_string())
}

fn config(text: &str) -> Config {
    Config::from_toml(text, Path::new("test-config.toml")).expect("config")
}

async fn start(home: &Path, server: &ScriptedServer, cfg: &str, session: SessionChoice) -> inproc::Running {
    inproc::start_with(home, &server.base_url(), session, config(cfg)).await
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_remote_command_returns_its_output_exit_code_and_carries_the_cwd_over() {
    let sshd = Sshd::start();
    let home = Home::new();
    let mark = marker(1);
    let there = sshd.dir.path().join(format!("there-{mark}"));
    std::fs::create_dir_all(&there).unwrap();
    let server = ScriptedServer::start([
        call(
            "c1",
            &format!(
                "cd {}; echo out-{mark}; echo err-{mark} >&2; test -n \"$SSH_CONNECTION\" && exit 3",
                there.display()
            ),
        ),
        call("c2", "pwd; false"),
        call("c3", &format!("no-such-command-{mark}")),
        ScriptedResponse::text("done"),
    ])
    .await
    .unwrap();
    let mut running = start(home.path(), &server, &sshd.talaria_config(10), SessionChoice::New).await;
    running.send(Op::Submit { text: "run it remotely".into(), mode: None });

    let (first, _) = running.tool_result("c1").await;
    assert_eq!(first["exit_code"], json!(3), "the remote exit code (SSH_CONNECTION is set): {first}");
    let out = first["output"].as_str().unwrap();
    assert!(out.contains(&format!("out-{mark}")) && out.contains(&format!("err-{mark}")), "{first}");
    assert!(!out.contains("__talaria"), "no transport markers in the output: {first}");
    assert_eq!(first["backend"], json!(format!("ssh:{}", sshd::HOST)));

    let (second, _) = running.tool_result("c2").await;
    assert_eq!(second["exit_code"], json!(1), "{second}");
    let canon = there.canonicalize().unwrap();
    assert_eq!(
        second["output"].as_str().unwrap().trim(),
        canon.display().to_string(),
        "the cwd carried over: {second}"
    );

    let (third, _) = running.tool_result("c3").await;
    assert_eq!(third["exit_code"], json!(127), "command not found is the command's own failure: {third}");
    assert!(third.get("status").is_none_or(|s| s != "degraded"), "{third}");
    running.turn_finished().await;
    running.shutdown().await;
}

#[tokio::test]
async fn a_long_remote_command_yields_on_a_typed_message_and_is_killed_from_the_jobs_pane() {
    let sshd = Sshd::start();
    let home = Home::new();
    let mark = marker(2);
    let server = ScriptedServer::start([
        call("c1", &format!("echo started-{mark}; sleep {mark}")),
        ScriptedResponse::text("moved it"),
        ScriptedResponse::text("ok"),
    ])
    .await
    .unwrap();
    let mut running = start(home.path(), &server, &sshd.talaria_config(10), SessionChoice::New).await;
    running.send(Op::Submit { text: "start the long one".into(), mode: None });
    running
        .wait_for("the remote output", |e| matches!(e, Event::ToolOutput { chunk, .. } if chunk.contains("started-")))
        .await;
    let pattern = format!("^sleep {mark}$");
    assert_eq!(sshd.pgrep(&pattern).len(), 1, "the command runs on the server");

    running.send(Op::Submit { text: "meanwhile, something else".into(), mode: None });
    let (result, status) = running.tool_result("c1").await;
    assert_eq!(status, Some(ToolStatus::Yielded), "{result}");
    assert_eq!(result["status"], json!("yielded_to_background"));
    let id = result["session_id"].as_str().unwrap().to_string();
    assert_eq!(sshd.pgrep(&pattern).len(), 1, "yielding does not kill it");

    running.send(Op::Job { id: id.clone(), action: JobAction::Kill });
    running
        .wait_for("killed", |e| matches!(e, Event::JobFinished { id: i, status: JobStatus::Killed } if *i == id))
        .await;
    assert!(sshd.pgrep(&pattern).is_empty(), "the remote group is gone (checked with ssh … pgrep)");
    running.shutdown().await;
}

#[tokio::test]
async fn a_remote_background_job_survives_kill_9_of_talaria_and_continue_reattaches_it() {
    let sshd = Sshd::start();
    let home = Home::new();
    home.write_config(&sshd.talaria_config(10));
    let mark = marker(3);
    let go = sshd.dir.path().join(format!("go-{mark}"));
    let command = format!(
        "echo before-{mark}; while [ ! -e {go} ]; do sleep 0.05; done; echo while-nobody-watched-{mark}; exec sleep {mark}",
        go = go.display()
    );
    let args = json!({ "command": command, "background": true }).to_string();
    let server =
        ScriptedServer::start([ScriptedResponse::tool_call("bg", "terminal", &args), slow_stream()]).await.unwrap();
    let url = server.base_url();
    let (mut exec, mut lines) = spawn_json(&home, &["--yes", "--base-url", url.as_str(), "start the job"]);
    let started = wait_event(&mut lines, "JobStarted", |_| true).await;
    let id = started["data"]["job"]["id"].as_str().expect("job id").to_string();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let waiting = format!("[w]hile \\[ ! -e {}", go.display());
    wait_until("the remote job", || !sshd.pgrep(&waiting).is_empty()).await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(exec.id().unwrap() as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    let _ = exec.wait().await;

    // Nobody watches: the remote job goes on.
    std::fs::write(&go, "").unwrap();
    let pattern = format!("^sleep {mark}$");
    wait_until("the remote sleep", || !sshd.pgrep(&pattern).is_empty()).await;

    let server2 = ScriptedServer::start([ScriptedResponse::text("ok")]).await.unwrap();
    let cfg = sshd.talaria_config(10);
    let mut running = start(home.path(), &server2, &cfg, SessionChoice::Continue).await;
    running
        .wait_since(
            0,
            "the job re-attached",
            |e| matches!(e, Event::JobStarted { job } if job.id == id && job.status == JobStatus::Running),
        )
        .await;
    let needle = format!("while-nobody-watched-{mark}");
    let mut shown = false;
    for _ in 0..300 {
        running.send(Op::Job { id: id.clone(), action: JobAction::Log { offset: None, limit: None } });
        let ev = running.wait_for("the log", |e| matches!(e, Event::JobLog { .. })).await;
        if let Event::JobLog { text, .. } = ev {
            if text.contains(&needle) && text.contains(&format!("before-{mark}")) {
                shown = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(shown, "the whole remote log is shown after re-attaching");
    running.send(Op::Job { id: id.clone(), action: JobAction::Kill });
    running
        .wait_for("killed", |e| matches!(e, Event::JobFinished { id: i, status: JobStatus::Killed } if *i == id))
        .await;
    assert!(sshd.pgrep(&pattern).is_empty(), "the remote group is gone");
    running.shutdown().await;
}

#[tokio::test]
async fn a_stopped_sshd_gives_degraded_and_a_restarted_one_works_with_no_user_action() {
    let mut sshd = Sshd::start();
    let home = Home::new();
    let mark = marker(4);
    let server = ScriptedServer::start([
        call("c1", &format!("echo first-{mark}")),
        ScriptedResponse::text("one"),
        call("c2", &format!("echo second-{mark}")),
        ScriptedResponse::text("two"),
        call("c3", &format!("echo third-{mark}")),
        ScriptedResponse::text("three"),
    ])
    .await
    .unwrap();
    let mut running = start(home.path(), &server, &sshd.talaria_config(5), SessionChoice::New).await;
    running.send(Op::Submit { text: "one".into(), mode: None });
    let (first, _) = running.tool_result("c1").await;
    assert_eq!(first["exit_code"], json!(0), "{first}");
    running.turn_finished().await;
    running
        .wait_since(
            0,
            "connected in the status line",
            |e| matches!(e, Event::Status(s) if s.backend.as_deref().is_some_and(|b| b.ends_with("connected"))),
        )
        .await;

    sshd.stop();
    running.send(Op::Submit { text: "two".into(), mode: None });
    let asked = Instant::now();
    let (second, _) = running.tool_result("c2").await;
    assert_eq!(second["status"], json!("degraded"), "{second}");
    assert_eq!(second["exit_code"], json!(-1), "{second}");
    assert!(second["reason"].as_str().is_some_and(|r| !r.is_empty()), "{second}");
    assert!(second["retry_hint"].as_str().is_some_and(|r| r.contains("next call")), "{second}");
    assert!(asked.elapsed() < Duration::from_secs(25), "degraded, not a hang: {:?}", asked.elapsed());
    running.turn_finished().await;
    running
        .wait_since(
            0,
            "degraded in the status line",
            |e| matches!(e, Event::Status(s) if s.backend.as_deref().is_some_and(|b| b.ends_with("degraded"))),
        )
        .await;

    sshd.restart();
    running.send(Op::Submit { text: "three".into(), mode: None });
    let (third, _) = running.tool_result("c3").await;
    assert_eq!(third["exit_code"], json!(0), "recovered with no user action: {third}");
    assert!(third["output"].as_str().unwrap().contains(&format!("third-{mark}")), "{third}");
    running.turn_finished().await;
    running.shutdown().await;
}

#[tokio::test]
async fn a_wrong_port_or_a_silent_host_gives_degraded_within_the_connect_timeout() {
    let sshd = Sshd::start();
    let home = Home::new();
    // Nothing listens on this port.
    let closed = sshd::free_port();
    // This one accepts and never speaks SSH.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s);
        }
    });
    let connect_timeout = 3;
    for (n, port) in [(1, closed), (2, silent_port)] {
        let server = ScriptedServer::start([call("c1", &format!("echo never-{n}")), ScriptedResponse::text("ok")])
            .await
            .unwrap();
        let cfg = sshd
            .talaria_config(connect_timeout)
            .replace("[approvals]", &format!("options = [\"Port={port}\"]\n\n[approvals]"));
        let mut running = start(&home.path().join(format!("h{n}")), &server, &cfg, SessionChoice::New).await;
        let asked = Instant::now();
        running.send(Op::Submit { text: "try".into(), mode: None });
        let (result, _) = running.tool_result("c1").await;
        let took = asked.elapsed();
        assert_eq!(result["status"], json!("degraded"), "port {port}: {result}");
        if n == 2 {
            assert!(result["reason"].as_str().unwrap().contains("timed out"), "{result}");
        } else {
            assert!(result["reason"].as_str().unwrap().contains("refused"), "{result}");
        }
        assert!(took < Duration::from_secs(connect_timeout + 10), "within the connect timeout: {took:?}");
        running.turn_finished().await;
        running.shutdown().await;
    }
}

fn tool(id: &str, name: &str, args: Value) -> ScriptedResponse {
    ScriptedResponse::tool_call(id, name, &args.to_string())
}

#[tokio::test]
async fn the_file_tools_act_on_the_remote_host_in_its_working_directory() {
    let sshd = Sshd::start();
    let home = Home::new();
    let mark = marker(6);
    let there = sshd.dir.path().join(format!("files-{mark}"));
    std::fs::create_dir_all(&there).unwrap();
    let name = format!("f-{mark}.txt");
    let server = ScriptedServer::start([
        call("c1", &format!("cd {}", there.display())),
        tool("c2", "write_file", json!({ "path": name, "content": "alpha\nbeta\n" })),
        tool("c3", "edit_file", json!({ "path": name, "old_string": "beta", "new_string": "gamma" })),
        tool("c4", "read_file", json!({ "path": name })),
        tool("c5", "search_files", json!({ "pattern": "gam+a" })),
        tool("c6", "read_file", json!({ "path": format!("missing-{mark}") })),
        ScriptedResponse::text("done"),
    ])
    .await
    .unwrap();
    let mut running = start(home.path(), &server, &sshd.talaria_config(10), SessionChoice::New).await;
    running.send(Op::Submit { text: "files over there".into(), mode: None });
    let (cd, _) = running.tool_result("c1").await;
    assert_eq!(cd["exit_code"], json!(0), "{cd}");
    let (write, _) = running.tool_result("c2").await;
    assert_eq!(write["status"], json!("ok"), "{write}");
    assert_eq!(write["created"], json!(true), "{write}");
    let (edit, _) = running.tool_result("c3").await;
    assert_eq!(edit["replacements"], json!(1), "{edit}");
    let (read, _) = running.tool_result("c4").await;
    assert!(read["content"].as_str().unwrap().contains("│gamma"), "{read}");
    assert_eq!(read["total_lines"], json!(2), "{read}");
    let (search, _) = running.tool_result("c5").await;
    assert!(search["matches"].as_str().unwrap().contains(&format!("{name}:2:gamma")), "{search}");
    let (missing, _) = running.tool_result("c6").await;
    assert!(missing["error"].as_str().unwrap().contains("does not exist"), "{missing}");
    running.turn_finished().await;
    // The file is in the remote working directory, not in talaria's own.
    assert_eq!(std::fs::read_to_string(there.join(&name)).unwrap(), "alpha\ngamma\n");
    assert!(!home.work().join(&name).exists());
    running.shutdown().await;
}

/// The job notice the model was sent that contains `needle` (it reaches the model as a user
/// message of the turn it starts).
async fn model_notice(server: &ScriptedServer, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let found = server.chat_requests().iter().find_map(|r| {
            r.body["messages"].as_array()?.iter().find_map(|m| {
                let text = m["content"].as_str()?;
                text.contains(needle).then(|| text.to_string())
            })
        });
        if let Some(text) = found {
            return text;
        }
        assert!(start.elapsed() < DEADLINE, "no notice containing {needle:?} reached the model");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The job's record in the events seen so far: did any say it finished?
fn finished(running: &inproc::Running, id: &str) -> bool {
    running.seen.iter().any(|e| matches!(e, Event::JobFinished { id: i, .. } if i == id))
}

/// Files of the remote job `id` in the server's job directory (`<tag>.<kind>`).
fn remote_files(sshd: &Sshd, id: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(sshd.remote_dir())
        .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{id}-"))))
        .collect()
}

/// A background remote job whose connection drops (sshd stopped: the master connection and
/// the job's own session die) is shown reconnecting, not "exited 255"; the command runs on
/// over there and finishes while nobody is connected; once sshd is back the job re-attaches,
/// its output resumes exactly where it stopped and its real exit code is reported.
#[tokio::test]
async fn a_background_remote_job_reattaches_after_the_connection_drops_and_reports_its_real_exit() {
    let mut sshd = Sshd::start();
    let home = Home::new();
    let mark = marker(7);
    let go = sshd.dir.path().join(format!("go-{mark}"));
    let command = format!(
        "echo before-{mark}; while [ ! -e {go} ]; do sleep 0.05; done; echo after-{mark}; exit 7",
        go = go.display()
    );
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("bg", "terminal", &json!({ "command": command, "background": true }).to_string()),
        ScriptedResponse::text("started it"),
        ScriptedResponse::text("noted"),
        ScriptedResponse::text("noted"),
    ])
    .await
    .unwrap();
    let cfg = sshd.talaria_config(5).replace("[approvals]", "reconnect_timeout_s = 300\n\n[approvals]");
    let mut running = start(home.path(), &server, &cfg, SessionChoice::New).await;
    running.send(Op::Submit { text: "start it in the background".into(), mode: None });
    let (result, _) = running.tool_result("bg").await;
    let id = result["session_id"].as_str().expect("a job id").to_string();
    running.turn_finished().await;
    let before = format!("before-{mark}");
    running
        .wait_since(0, "its first output", |e| matches!(e, Event::JobUpdated { tail, .. } if tail.contains(&before)))
        .await;

    sshd.stop();
    let seen = running.seen.len();
    running
        .wait_since(
            seen,
            "the job reconnecting",
            |e| matches!(e, Event::JobUpdated { id: i, status: JobStatus::Reconnecting, .. } if *i == id),
        )
        .await;
    running
        .wait_since(
            0,
            "reconnecting in the status line",
            |e| matches!(e, Event::Status(s) if s.backend.as_deref().is_some_and(|b| b.ends_with("reconnecting"))),
        )
        .await;
    // The command runs on with nobody connected, and ends there.
    std::fs::write(&go, "").unwrap();
    let exit_file = || remote_files(&sshd, &id).into_iter().any(|p| p.extension().is_some_and(|x| x == "exit"));
    wait_until("the remote exit record", exit_file).await;
    let quiet = running.collect_for(Duration::from_millis(1500)).await;
    assert!(!finished(&running, &id), "not reported finished while the host is unreachable: {quiet:?}");

    sshd.restart();
    let ev = running
        .wait_for(&format!("{id} finished"), |e| matches!(e, Event::JobFinished { id: i, .. } if *i == id))
        .await;
    assert!(
        matches!(&ev, Event::JobFinished { status: JobStatus::Exited(7), .. }),
        "re-attached and got the real exit code: {ev:?}"
    );
    running.send(Op::Job { id: id.clone(), action: JobAction::Log { offset: None, limit: None } });
    let Event::JobLog { text, .. } = running.wait_for("the log", |e| matches!(e, Event::JobLog { .. })).await else {
        unreachable!()
    };
    assert_eq!(text.matches(&before).count(), 1, "the output resumed where it stopped (no repeat): {text:?}");
    assert_eq!(text.matches(&format!("after-{mark}")).count(), 1, "the output printed while away: {text:?}");
    let notice = model_notice(&server, &format!("Background job {id} exited with code 7")).await;
    assert!(notice.contains(&format!("after-{mark}")), "{notice}");
    wait_until("the remote files removed", || remote_files(&sshd, &id).is_empty()).await;
    running.shutdown().await;
}

/// A background remote job whose host stays unreachable past `reconnect_timeout_s` is
/// marked lost with the reason (never a fake exit code); so is one whose remote files are
/// gone when the host answers again.
#[tokio::test]
async fn a_remote_job_whose_host_stays_away_or_whose_files_are_gone_is_lost_with_a_reason() {
    let mut sshd = Sshd::start();
    let home = Home::new();
    let mark = marker(8);
    let bg = |n: u32| {
        let command = format!("echo up-{mark}-{n}; exec sleep {mark}{n}");
        ScriptedResponse::tool_call(
            &format!("bg{n}"),
            "terminal",
            &json!({ "command": command, "background": true }).to_string(),
        )
    };
    let server = ScriptedServer::start([
        bg(1),
        ScriptedResponse::text("one"),
        ScriptedResponse::text("noted"),
        bg(2),
        ScriptedResponse::text("two"),
        ScriptedResponse::text("noted"),
    ])
    .await
    .unwrap();
    let cfg = sshd.talaria_config(2).replace("[approvals]", "reconnect_timeout_s = 3\n\n[approvals]");
    let mut running = start(home.path(), &server, &cfg, SessionChoice::New).await;

    // 1. The host does not come back within the bound.
    running.send(Op::Submit { text: "one".into(), mode: None });
    let (first, _) = running.tool_result("bg1").await;
    let id1 = first["session_id"].as_str().unwrap().to_string();
    running.turn_finished().await;
    let up = format!("up-{mark}-1");
    running.wait_since(0, "its output", |e| matches!(e, Event::JobUpdated { tail, .. } if tail.contains(&up))).await;
    sshd.stop();
    let ev = running
        .wait_for(&format!("{id1} finished"), |e| matches!(e, Event::JobFinished { id: i, .. } if *i == id1))
        .await;
    assert!(matches!(&ev, Event::JobFinished { status: JobStatus::Lost, .. }), "{ev:?}");
    let notice = model_notice(&server, &format!("Background job {id1} was lost")).await;
    assert!(notice.contains("did not answer for 3s") && notice.contains("may still be running"), "{notice}");
    assert!(!notice.contains("exited with code"), "{notice}");
    running.turn_finished().await;

    // 2. The host answers again, but the job's files are gone.
    sshd.restart();
    assert_eq!(sshd.pgrep(&format!("^sleep {mark}1$")).len(), 1, "the lost job still runs over there");
    drop(sshd.ssh(&format!("pkill -f '^sleep {mark}1$'")));
    running.send(Op::Submit { text: "two".into(), mode: None });
    let (second, _) = running.tool_result("bg2").await;
    let id2 = second["session_id"].as_str().unwrap().to_string();
    running.turn_finished().await;
    let up = format!("up-{mark}-2");
    running.wait_since(0, "its output", |e| matches!(e, Event::JobUpdated { tail, .. } if tail.contains(&up))).await;
    sshd.stop();
    running
        .wait_for(
            "reconnecting",
            |e| matches!(e, Event::JobUpdated { id: i, status: JobStatus::Reconnecting, .. } if *i == id2),
        )
        .await;
    for f in remote_files(&sshd, &id2) {
        std::fs::remove_file(f).unwrap();
    }
    sshd.restart();
    let ev = running
        .wait_for(&format!("{id2} finished"), |e| matches!(e, Event::JobFinished { id: i, .. } if *i == id2))
        .await;
    assert!(matches!(&ev, Event::JobFinished { status: JobStatus::Lost, .. }), "{ev:?}");
    let notice = model_notice(&server, &format!("Background job {id2} was lost")).await;
    assert!(notice.contains("files are gone"), "{notice}");
    drop(sshd.ssh(&format!("pkill -f '^sleep {mark}2$'")));
    running.turn_finished().await;
    running.shutdown().await;
}

/// Processes on this machine (the test's sshd serves it) whose command line matches.
fn local_pgrep(pattern: &str) -> usize {
    let out = std::process::Command::new("pgrep").args(["-f", pattern]).output().expect("pgrep");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Leases reach the host: while talaria renews a remote job's lease the job outlives it many
/// times over; once talaria is gone (kill -9) and the host unreachable — so its supervisor's
/// kill over ssh cannot get there when the grace expires — the job's remote watchdog kills it
/// when the lease runs out.
#[tokio::test]
async fn a_remote_job_dies_by_its_remote_lease_when_talaria_is_gone_and_the_host_unreachable() {
    let mut sshd = Sshd::start();
    let home = Home::new();
    home.write_config(&format!("{}\n[jobs]\norphan_grace_s = 3\n", sshd.talaria_config(3)));
    let mark = marker(9);
    let args = json!({ "command": format!("exec sleep {mark}"), "background": true }).to_string();
    let server =
        ScriptedServer::start([ScriptedResponse::tool_call("bg", "terminal", &args), slow_stream()]).await.unwrap();
    let url = server.base_url();
    let (mut exec, mut lines) = spawn_json(&home, &["--yes", "--base-url", url.as_str(), "start the job"]);
    wait_event(&mut lines, "JobStarted", |_| true).await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let pattern = format!("^sleep {mark}$");
    wait_until("the remote job", || sshd.pgrep(&pattern).len() == 1).await;
    // Three leases long: talaria renews it (every second), so it lives on.
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(sshd.pgrep(&pattern).len(), 1, "a renewed lease keeps the remote job alive");

    sshd.stop();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(exec.id().unwrap() as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    let _ = exec.wait().await;
    wait_until("the remote watchdog's kill", || local_pgrep(&pattern) == 0).await;
}

/// A foreground remote command moved to the background re-attaches after a dropped
/// connection too, resuming at what its log holds (its output was not counted on the way in).
#[tokio::test]
async fn a_yielded_remote_command_reattaches_after_the_connection_drops() {
    let mut sshd = Sshd::start();
    let home = Home::new();
    let mark = marker(10);
    let go = sshd.dir.path().join(format!("go-{mark}"));
    let command = format!(
        "echo before-{mark}; while [ ! -e {go} ]; do sleep 0.05; done; echo after-{mark}; exit 5",
        go = go.display()
    );
    let server = ScriptedServer::start([
        call("c1", &command),
        ScriptedResponse::text("moved it"),
        ScriptedResponse::text("ok"),
        ScriptedResponse::text("noted"),
        ScriptedResponse::text("noted"),
    ])
    .await
    .unwrap();
    let cfg = sshd.talaria_config(5).replace("[approvals]", "reconnect_timeout_s = 300\n\n[approvals]");
    let mut running = start(home.path(), &server, &cfg, SessionChoice::New).await;
    running.send(Op::Submit { text: "run it".into(), mode: None });
    let before = format!("before-{mark}");
    running.wait_for("its output", |e| matches!(e, Event::ToolOutput { chunk, .. } if chunk.contains(&before))).await;
    running.send(Op::Submit { text: "meanwhile, something else".into(), mode: None });
    let (result, status) = running.tool_result("c1").await;
    assert_eq!(status, Some(ToolStatus::Yielded), "{result}");
    let id = result["session_id"].as_str().unwrap().to_string();
    running.turn_finished().await;

    sshd.stop();
    running
        .wait_for(
            "the job reconnecting",
            |e| matches!(e, Event::JobUpdated { id: i, status: JobStatus::Reconnecting, .. } if *i == id),
        )
        .await;
    std::fs::write(&go, "").unwrap();
    let exit_file = || remote_files(&sshd, &id).into_iter().any(|p| p.extension().is_some_and(|x| x == "exit"));
    wait_until("the remote exit record", exit_file).await;
    assert!(!finished(&running, &id), "not finished while the host is unreachable");
    sshd.restart();
    let ev = running
        .wait_for(&format!("{id} finished"), |e| matches!(e, Event::JobFinished { id: i, .. } if *i == id))
        .await;
    assert!(matches!(&ev, Event::JobFinished { status: JobStatus::Exited(5), .. }), "{ev:?}");
    running.send(Op::Job { id: id.clone(), action: JobAction::Log { offset: None, limit: None } });
    let Event::JobLog { text, .. } = running.wait_for("the log", |e| matches!(e, Event::JobLog { .. })).await else {
        unreachable!()
    };
    assert_eq!(text.matches(&before).count(), 1, "resumed where its log stopped: {text:?}");
    assert_eq!(text.matches(&format!("after-{mark}")).count(), 1, "{text:?}");
    running.shutdown().await;
}
