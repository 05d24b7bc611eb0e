//! The container backend (DESIGN §4b): its degraded paths run everywhere — no `docker`
//! binary, a daemon that is not reachable — and a real round trip through `docker exec`
//! runs where a daemon and a local image are available (the test says plainly when it did
//! not run).

mod common;
#[path = "common/inproc.rs"]
mod inproc;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use talaria::config::Config;
use talaria::engine::SessionChoice;
use talaria::protocol::Op;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

use common::Home;

fn marker(n: u32) -> String {
    format!("{}{:05}", 50_000 + n, std::process::id() % 100_000)
}

fn call(id: &str, command: &str) -> ScriptedResponse {
    ScriptedResponse::tool_call(id, "terminal", &json!({ "command": command }).to_string())
}

#[tokio::test]
async fn no_docker_binary_gives_degraded_and_the_command_does_not_run() {
    let home = Home::new();
    let mark = marker(1);
    let missing = home.path().join(format!("no-docker-{mark}"));
    let text = format!(
        "[terminal]\nbackend = \"docker:ci-{mark}\"\n\n[terminal.docker]\ncommand = \"{}\"\n\n[approvals]\nmode = \"off\"\n",
        missing.display()
    );
    let config = Config::from_toml(&text, Path::new("t.toml")).unwrap();
    let server =
        ScriptedServer::start([call("c1", &format!("echo ran-{mark}")), ScriptedResponse::text("ok")]).await.unwrap();
    let mut running = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config).await;
    running.send(Op::Submit { text: "try".into(), mode: None });
    let result = running.tool_result("c1").await.0;
    assert_eq!(result["status"], json!("degraded"), "{result}");
    assert_eq!(result["exit_code"], json!(-1), "{result}");
    assert!(result["reason"].as_str().unwrap().contains("not found"), "{result}");
    assert!(result["retry_hint"].as_str().is_some_and(|h| !h.is_empty()), "{result}");
    running.turn_finished().await;
    running.shutdown().await;
}

#[tokio::test]
async fn a_docker_daemon_that_is_not_reachable_gives_degraded_quickly() {
    let home = Home::new();
    let mark = marker(2);
    home.write_config(&format!(
        "[terminal]\nbackend = \"docker:ci-{mark}\"\n\n[terminal.ssh]\nconnect_timeout_s = 5\n"
    ));
    let server =
        ScriptedServer::start([call("c1", &format!("echo ran-{mark}")), ScriptedResponse::text("ok")]).await.unwrap();
    let url = server.base_url();
    // A socket nobody serves: the daemon is down here whatever the machine has running.
    let sock = home.path().join("no-daemon.sock");
    let mut cmd = home.command();
    cmd.env("DOCKER_HOST", format!("unix://{}", sock.display()));
    let asked = Instant::now();
    let child = cmd
        .args(["exec", "--json", "--yes", "--base-url", url.as_str(), "try"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn talaria");
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
    let took = asked.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let finished = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "ToolFinished")
        .unwrap_or_else(|| panic!("no ToolFinished in {stdout}"));
    // `exec --json` gives the result as parsed JSON.
    let result = finished["data"]["outcome"]["result"].clone();
    assert_eq!(result["status"], json!("degraded"), "{result}");
    let reason = result["reason"].as_str().unwrap();
    if docker_cli_present() {
        assert!(reason.contains("daemon"), "{result}");
    } else {
        eprintln!("docker: no docker CLI on this machine; the unreachable-daemon path reported: {reason}");
        assert!(reason.contains("not found"), "{result}");
    }
    assert!(took < Duration::from_secs(30), "degraded, not a hang: {took:?}");
}

fn docker_cli_present() -> bool {
    Command::new("docker").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// The container engine to run the round trip with: docker where its daemon answers, else
/// podman where it can run containers (`.ci/run` installs it when it works on the machine).
fn engine() -> Option<&'static str> {
    ["docker", "podman"].into_iter().find(|e| Command::new(e).arg("info").output().is_ok_and(|o| o.status.success()))
}

/// A local image with a POSIX shell, if the engine has one (no pulls: network is loopback only).
fn local_image(engine: &str) -> Option<String> {
    for image in ["busybox", "alpine", "debian", "ubuntu"] {
        let ok = Command::new(engine).args(["image", "inspect", image]).output().is_ok_and(|o| o.status.success());
        if ok {
            return Some(image.to_string());
        }
    }
    None
}

/// Set (by `.ci/run`, only where it could not get podman to run containers) to say this
/// machine has no container engine: the round trip is then skipped, saying so. Anywhere
/// else a missing engine fails the test with what to install.
const NO_CONTAINER_ENGINE: &str = "TALARIA_TEST_NO_CONTAINER_ENGINE";

/// Why the round trip cannot run here: fatal unless the machine declared it.
fn cannot_run(why: &str) {
    if std::env::var_os(NO_CONTAINER_ENGINE).is_some_and(|v| v == "1") {
        eprintln!("container round trip: skipped, {NO_CONTAINER_ENGINE}=1 says so: {why}");
        return;
    }
    panic!(
        "container round trip: {why}. Install one (`apt-get install podman runc busybox-static`, then \
         `.ci/run` builds a local busybox image), or set {NO_CONTAINER_ENGINE}=1 on a machine that cannot run containers"
    );
}

#[tokio::test]
async fn a_real_container_round_trip_unless_the_machine_declares_it_has_no_container_engine() {
    let Some(engine) = engine() else {
        return cannot_run("neither a docker daemon nor podman answers on this machine");
    };
    let Some(image) = local_image(engine) else {
        return cannot_run(&format!(
            "{engine} has none of busybox/alpine/debian/ubuntu locally (tests do not pull images)"
        ));
    };
    let mark = marker(3);
    let name = format!("talaria-test-{mark}");
    let started = Command::new(engine)
        .args(["run", "-d", "--rm", "--init", "--network", "none", "--name", &name, &image, "sleep", "600"])
        .output()
        .unwrap();
    assert!(started.status.success(), "{engine} run {image}: {}", String::from_utf8_lossy(&started.stderr));
    struct Cleanup(&'static str, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            // podman waits 10 s for `sleep` to stop unless told not to; docker has no -t.
            let args: &[&str] = if self.0 == "podman" { &["rm", "-f", "-t", "0"] } else { &["rm", "-f"] };
            let _ = Command::new(self.0).args(args).arg(&self.1).output();
        }
    }
    let _cleanup = Cleanup(engine, name.clone());
    let home = Home::new();
    let text = format!(
        "[terminal]\nbackend = \"docker:{name}\"\n\n[terminal.docker]\ncommand = \"{engine}\"\n\n[approvals]\nmode = \"off\"\n"
    );
    let config = Config::from_toml(&text, Path::new("t.toml")).unwrap();
    let server = ScriptedServer::start([
        call("c1", &format!("cd /tmp; echo in-{mark}; exit 4")),
        call("c2", "pwd"),
        // Runs longer than the follower's 50 ms: streamed, not printed at the end.
        call("c3", &format!("for i in 1 2 3; do echo n$i-{mark}; sleep 0.1; done")),
        ScriptedResponse::text("ok"),
    ])
    .await
    .unwrap();
    let mut running = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config).await;
    running.send(Op::Submit { text: "run in the container".into(), mode: None });
    let first = running.tool_result("c1").await.0;
    assert_eq!(first["exit_code"], json!(4), "{first}");
    assert!(first["output"].as_str().unwrap().contains(&format!("in-{mark}")), "{first}");
    let second = running.tool_result("c2").await.0;
    assert_eq!(second["output"].as_str().unwrap().trim(), "/tmp", "{second}");
    let third = running.tool_result("c3").await.0;
    assert_eq!(third["exit_code"], json!(0), "{third}");
    assert_eq!(third["output"].as_str().unwrap().trim(), format!("n1-{mark}\nn2-{mark}\nn3-{mark}"), "{third}");
    eprintln!("container round trip: RAN with {engine} in {name} ({image})");
    running.turn_finished().await;
    running.shutdown().await;
}
