//! Helpers shared by the integration tests: an isolated TALARIA_HOME and the real binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// A temporary TALARIA_HOME (and working directory) for one test.
pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    pub fn new() -> Home {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("work")).expect("work dir");
        Home { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A working directory for the commands the tests run.
    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    pub fn write_config(&self, text: &str) {
        std::fs::write(self.path().join("config.toml"), text).expect("write config");
    }

    /// `talaria` with this home, the test guard, and no provider keys from the environment.
    pub fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_talaria"));
        cmd.env("TALARIA_HOME", self.path())
            .env("TALARIA_TEST_GUARD", "1")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENROUTER_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .current_dir(self.work())
            .kill_on_drop(true);
        cmd
    }

    /// Run talaria with `args` to completion (60 s deadline).
    pub async fn run(&self, args: &[&str]) -> Output {
        let child = self.command().args(args).stdin(std::process::Stdio::null()).output();
        tokio::time::timeout(Duration::from_secs(60), child)
            .await
            .expect("talaria did not finish within 60 s")
            .expect("talaria runs")
    }
}

/// Poll `cond` every 20 ms until it holds (30 s deadline).
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A stream that takes minutes: keeps talaria busy (and alive) until the test kills it.
pub fn slow_stream() -> talaria::testkit::scripted::ScriptedResponse {
    use talaria::testkit::scripted::{text_chunks, ScriptedResponse, DONE};
    let mut payloads = text_chunks(&"slowly ".repeat(400), 4);
    payloads.push(DONE.to_string());
    ScriptedResponse::sse(payloads).delay(Duration::from_millis(100))
}

/// Lines of a child's stdout, read as they come.
pub type JsonLines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// `talaria exec --json …` with stdout piped for reading events as they come.
pub fn spawn_json(home: &Home, args: &[&str]) -> (tokio::process::Child, JsonLines) {
    use tokio::io::AsyncBufReadExt;
    let mut child = home
        .command()
        .arg("exec")
        .arg("--json")
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn talaria");
    let lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    (child, lines)
}

/// Read JSON events until one has this `type` and passes `pred` (30 s deadline).
pub async fn wait_event(
    lines: &mut JsonLines,
    kind: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no {kind} event within 30 s"))
            .expect("read stdout")
            .unwrap_or_else(|| panic!("talaria exited before a {kind} event"));
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
        if event["type"] == kind && pred(&event) {
            return event;
        }
    }
}
