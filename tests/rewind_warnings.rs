//! What `/rewind` says before it does anything (issue #29): a background job of the session
//! still running (what it writes from then on is not undone), and, plainly, that commands the
//! session ran on another host (a real `sshd` on loopback) are not covered — also after the
//! backend is back to local and after a restart.

mod common;
#[path = "common/inproc.rs"]
mod inproc;
#[path = "common/sshd.rs"]
mod sshd;

use std::path::Path;

use serde_json::json;
use talaria::config::Config;
use talaria::engine::SessionChoice;
use talaria::protocol::rewind::{RewindCmd, RewindMode};
use talaria::protocol::{Event, Op, SlashCommand};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

use common::Home;
use sshd::Sshd;

fn config(text: &str) -> Config {
    Config::from_toml(text, Path::new("test-config.toml")).expect("config")
}

fn terminal(id: &str, args: serde_json::Value) -> ScriptedResponse {
    ScriptedResponse::tool_call(id, "terminal", &args.to_string())
}

/// `/rewind` (the picker) and, for point 1, the confirmation's preview: both warnings lists.
async fn warnings(running: &mut inproc::Running) -> (Vec<String>, Vec<String>) {
    running.send(Op::Command(SlashCommand::Rewind(RewindCmd::picker())));
    let Event::RewindPoints { warnings: picker, .. } =
        running.wait_for("the rewind points", |e| matches!(e, Event::RewindPoints { .. })).await
    else {
        unreachable!()
    };
    let cmd = RewindCmd { target: Some(1), mode: RewindMode::Code, yes: false, include_user: false };
    running.send(Op::Command(SlashCommand::Rewind(cmd)));
    let Event::RewindPreview(preview) =
        running.wait_for("the rewind preview", |e| matches!(e, Event::RewindPreview(_))).await
    else {
        unreachable!()
    };
    (picker, preview.warnings)
}

#[tokio::test(flavor = "multi_thread")]
async fn rewind_warns_while_a_job_of_the_session_still_runs_and_not_once_it_ended() {
    let home = Home::new();
    // A sleep no other test runs: this test's pid in its fraction.
    let secs = format!("300.{}29", std::process::id());
    let server = ScriptedServer::start([
        terminal("c1", json!({ "command": format!("echo x > a.txt; sleep {secs}"), "background": true })),
        ScriptedResponse::text("started it"),
    ])
    .await
    .unwrap();
    let cfg = config("[approvals]\nmode = \"off\"\n");
    let mut running = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, cfg).await;
    running.send(Op::Submit { text: "start a job".into(), mode: None });
    let (started, _) = running.tool_result("c1").await;
    let job = started["session_id"].as_str().expect("a job id").to_string();
    running.turn_finished().await;

    let (picker, preview) = warnings(&mut running).await;
    for said in [&picker, &preview] {
        assert!(
            said.iter().any(|w| w.contains(&job) && w.contains("still running") && w.contains("not undone")),
            "{said:?}"
        );
        assert!(!said.iter().any(|w| w.contains("remote")), "a local session has no remote warning: {said:?}");
    }
    running.kill_job(&job).await;
    let (picker, preview) = warnings(&mut running).await;
    assert_eq!((picker, preview), (vec![], vec![]), "nothing to warn about once the job ended");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rewind_says_plainly_that_commands_run_on_a_host_are_not_covered() {
    let sshd = Sshd::start();
    let home = Home::new();
    let server = ScriptedServer::start([
        terminal("c1", json!({ "command": "echo remote" })),
        ScriptedResponse::text("ran it there"),
    ])
    .await
    .unwrap();
    let remote = format!("ssh:{}", sshd::HOST);
    let mut running =
        inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config(&sshd.talaria_config(10))).await;
    running.send(Op::Submit { text: "run it remotely".into(), mode: None });
    let (result, _) = running.tool_result("c1").await;
    assert_eq!(result["backend"], json!(remote), "{result}");
    running.turn_finished().await;
    let plain = |said: &[String]| {
        said.iter().any(|w| w.contains(&format!("ran commands on {remote}")) && w.contains("does not cover remote"))
    };
    let (picker, preview) = warnings(&mut running).await;
    assert!(plain(&picker) && plain(&preview), "{picker:?} {preview:?}");

    // Back on this machine: the commands that ran there are still not covered.
    running.send(Op::Command(SlashCommand::Backend(Some(talaria::protocol::Backend::Local))));
    running.notice("backend: local").await;
    let (picker, _) = warnings(&mut running).await;
    assert!(plain(&picker), "after /backend local: {picker:?}");
    running.shutdown().await;

    // A resumed session knows it from its tool results.
    let mut running = inproc::start_with(home.path(), &server.base_url(), SessionChoice::Continue, config("")).await;
    let (picker, _) = warnings(&mut running).await;
    assert!(plain(&picker), "after a restart: {picker:?}");
    running.shutdown().await;
}
