//! `talaria acp` end to end: the real binary driven by ACP clients no one here wrote — a
//! small script on the official TypeScript SDK's client side (tests/acp/client.mjs) and
//! `acpx` — and by raw JSON-RPC lines, against the scripted model server.
//!
//! The clients come from npm (`.ci/run` installs them into a temp prefix):
//! TALARIA_ACP_SDK is the `@agentclientprotocol/sdk` package directory, TALARIA_ACPX the
//! `acpx` command.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{wait_until, Home};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const INSTALL: &str = "npm install --prefix /tmp/acp-clients acpx@0.19.1 @agentclientprotocol/sdk@2.4.0, then \
     TALARIA_ACP_SDK=/tmp/acp-clients/node_modules/@agentclientprotocol/sdk \
     TALARIA_ACPX=/tmp/acp-clients/node_modules/.bin/acpx";

fn sdk_dir() -> PathBuf {
    let dir = std::env::var_os("TALARIA_ACP_SDK")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("TALARIA_ACP_SDK is not set; install the ACP clients: {INSTALL}"));
    assert!(dir.join("package.json").is_file(), "no @agentclientprotocol/sdk at {}; {INSTALL}", dir.display());
    dir
}

fn acpx() -> PathBuf {
    let path = std::env::var_os("TALARIA_ACPX")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("TALARIA_ACPX is not set; install the ACP clients: {INSTALL}"));
    assert!(path.exists(), "no acpx at {}; {INSTALL}", path.display());
    path
}

fn talaria() -> &'static str {
    env!("CARGO_BIN_EXE_talaria")
}

/// The test's own config: approvals as given, the sandbox off (these tests are about the
/// protocol; tests/hostile.rs is about containment).
fn config(home: &Home, approvals: &str) {
    home.write_config(&format!("[approvals]\nmode = \"{approvals}\"\n\n[sandbox]\nmode = \"off\"\n"));
}

/// The SDK client script, driving `talaria acp --base-url <server>`.
struct SdkClient {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    seen: Arc<Mutex<Vec<Value>>>,
    next_tag: u64,
}

impl SdkClient {
    async fn start(home: &Home, base_url: &str) -> SdkClient {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp/client.mjs");
        let mut child = tokio::process::Command::new("node")
            .arg(script)
            .args([talaria(), "acp", "--base-url", base_url, "--model", "m1"])
            .env("TALARIA_ACP_SDK", sdk_dir())
            .env("TALARIA_HOME", home.path())
            .env("TALARIA_TEST_GUARD", "1")
            .env("HOME", home.path())
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENROUTER_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .current_dir(home.work())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs (apt-get install nodejs npm)");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("client printed {line}: {e}"));
                sink.lock().unwrap().push(value);
            }
        });
        let client = SdkClient { child, stdin, seen, next_tag: 0 };
        client.wait_for("initialized", |v| v["kind"] == "initialized").await;
        client
    }

    async fn send(&mut self, command: Value) {
        self.stdin.write_all(format!("{command}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Send a request; returns its tag (the answer comes as `response` or `error`).
    async fn request(&mut self, method: &str, params: Value) -> String {
        self.next_tag += 1;
        let tag = format!("t{}", self.next_tag);
        self.send(json!({ "op": "request", "tag": tag, "method": method, "params": params })).await;
        tag
    }

    async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "op": "notify", "method": method, "params": params })).await;
    }

    fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }

    async fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        wait_until(what, || self.seen.lock().unwrap().iter().any(&pred)).await;
        self.seen().into_iter().find(|v| pred(v)).unwrap()
    }

    /// The answer to request `tag` (a result or an error).
    async fn answer(&self, tag: &str) -> Value {
        self.wait_for(&format!("the answer to {tag}"), |v| v["tag"] == tag).await
    }

    async fn result(&self, tag: &str) -> Value {
        let answer = self.answer(tag).await;
        assert_eq!(answer["kind"], "response", "{answer}");
        answer["result"].clone()
    }

    async fn new_session(&mut self, home: &Home) -> String {
        let tag = self.request("session/new", json!({ "cwd": home.work(), "mcpServers": [] })).await;
        let result = self.result(&tag).await;
        result["sessionId"].as_str().unwrap().to_string()
    }

    async fn prompt(&mut self, session: &str, text: &str) -> String {
        let params = json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }] });
        self.request("session/prompt", params).await
    }

    /// Updates of one kind (`sessionUpdate`), in order.
    fn updates(&self, kind: &str) -> Vec<Value> {
        self.seen()
            .into_iter()
            .filter(|v| v["kind"] == "update" && v["params"]["update"]["sessionUpdate"] == kind)
            .map(|v| v["params"]["update"].clone())
            .collect()
    }

    fn agent_text(&self) -> String {
        self.updates("agent_message_chunk").iter().map(|u| u["content"]["text"].as_str().unwrap_or("")).collect()
    }

    /// Close the agent's stdin (a quit) and wait for it to exit; returns its exit code.
    async fn close(mut self) -> Value {
        self.send(json!({ "op": "close" })).await;
        let exit = self.wait_for("talaria to exit", |v| v["kind"] == "agent_exit").await;
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        exit["code"].clone()
    }
}

/// The process group of `pid` (field 5 of /proc/<pid>/stat).
fn pgid_of(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.split_whitespace().nth(2)?.parse().ok()
}

/// Live (not zombie) processes in group `pgid`.
fn group_members(pgid: i32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(rest) = stat.rsplit(')').next() else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() != Some(&"Z") && fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) {
            pids.push(pid);
        }
    }
    pids
}

/// Pids whose command line contains `marker` (the test's own unique sleep).
fn pids_running(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')));
        if cmdline.starts_with("sleep") && cmdline.contains(marker) && !zombie {
            pids.push(pid);
        }
    }
    pids
}

fn terminal(command: &str) -> String {
    json!({ "command": command }).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_is_answered_with_streamed_chunks() {
    let home = Home::new();
    config(&home, "auto");
    let answer = "Hello from the scripted model, in many small pieces.";
    let server = ScriptedServer::start([ScriptedResponse::text(answer)]).await.unwrap();
    let mut client = SdkClient::start(&home, &server.base_url()).await;
    let init = client.seen().into_iter().find(|v| v["kind"] == "initialized").unwrap();
    assert_eq!(init["response"]["agentCapabilities"]["loadSession"], true);
    assert_eq!(init["response"]["agentInfo"]["name"], "talaria");

    let session = client.new_session(&home).await;
    let tag = client.prompt(&session, "say hi").await;
    assert_eq!(client.result(&tag).await, json!({ "stopReason": "end_turn" }));
    assert_eq!(client.agent_text(), answer);
    assert!(client.updates("agent_message_chunk").len() > 3, "the answer streams in pieces");
    let commands = client.updates("available_commands_update");
    let names: Vec<&str> =
        commands[0]["availableCommands"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"busy") && names.contains(&"jobs") && names.contains(&"goal"), "{names:?}");

    let requests = server.chat_requests();
    let messages = requests[0].body["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap(), &json!({ "role": "user", "content": "say hi" }));
    assert_eq!(requests[0].body["model"], "m1");
    assert_eq!(client.close().await, json!(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_goes_to_request_permission_allowed_once_then_denied() {
    let home = Home::new();
    config(&home, "prompt");
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_a", "terminal", &terminal("touch allowed_3004411")),
        ScriptedResponse::text("made the first file"),
        ScriptedResponse::tool_call("call_b", "terminal", &terminal("touch denied_3004411")),
        ScriptedResponse::text("could not make the second"),
        ScriptedResponse::tool_call("call_c", "terminal", &terminal("touch session_a_3004411")),
        ScriptedResponse::tool_call("call_d", "terminal", &terminal("touch session_b_3004411")),
        ScriptedResponse::text("made both"),
    ])
    .await
    .unwrap();
    let mut client = SdkClient::start(&home, &server.base_url()).await;
    client.send(json!({ "op": "answers", "list": ["once", "deny", "session"] })).await;
    let session = client.new_session(&home).await;

    let first = client.prompt(&session, "make the first file").await;
    assert_eq!(client.result(&first).await["stopReason"], "end_turn");
    let second = client.prompt(&session, "make the second file").await;
    assert_eq!(client.result(&second).await["stopReason"], "end_turn");

    // "For this session": the next `touch` runs without asking.
    let third = client.prompt(&session, "make two more").await;
    assert_eq!(client.result(&third).await["stopReason"], "end_turn");

    assert!(home.work().join("allowed_3004411").exists(), "allowed once: the command ran");
    assert!(!home.work().join("denied_3004411").exists(), "denied: the command did not run");
    assert!(home.work().join("session_a_3004411").exists() && home.work().join("session_b_3004411").exists());
    let asks: Vec<Value> = client.seen().into_iter().filter(|v| v["kind"] == "permission").collect();
    assert_eq!(asks.len(), 3, "the command after \"for this session\" did not ask");
    assert_eq!(asks[2]["params"]["toolCall"]["toolCallId"], "call_c");
    assert_eq!(asks[0]["params"]["toolCall"]["toolCallId"], "call_a");
    assert_eq!(asks[0]["params"]["toolCall"]["title"], "touch allowed_3004411");
    let options: Vec<(&str, &str)> = asks[0]["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["optionId"].as_str().unwrap(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        options,
        [("once", "allow_once"), ("session", "allow_always"), ("always", "allow_always"), ("deny", "reject_once")]
    );
    // The model read the denial as the second command's result.
    let requests = server.chat_requests();
    let last = requests[3].body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "tool");
    assert!(last["content"].as_str().unwrap().contains("denied"), "{last}");
    let finished: Vec<Value> = client
        .updates("tool_call_update")
        .into_iter()
        .filter(|u| u["toolCallId"] == "call_b" && u["status"].is_string())
        .collect();
    assert_eq!(finished.last().unwrap()["status"], "failed");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_during_a_long_command_kills_its_process_group() {
    let home = Home::new();
    config(&home, "off");
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_s", "terminal", &terminal("echo started; sleep 3004412; echo never")),
        ScriptedResponse::text("unused"),
    ])
    .await
    .unwrap();
    let mut client = SdkClient::start(&home, &server.base_url()).await;
    let session = client.new_session(&home).await;
    let tag = client.prompt(&session, "run the long command").await;
    wait_until("the long command to run", || !pids_running("3004412").is_empty()).await;
    let pgid = pgid_of(pids_running("3004412")[0]).expect("the sleep's process group");
    assert!(group_members(pgid).len() >= 2, "the shell and its sleep share the command's group");
    client
        .wait_for("its output to stream", |v| {
            v["params"]["update"]["sessionUpdate"] == "tool_call_update"
                && v["params"]["update"]["content"][0]["content"]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("started"))
        })
        .await;

    client.notify("session/cancel", json!({ "sessionId": session })).await;
    assert_eq!(client.result(&tag).await, json!({ "stopReason": "cancelled" }));
    wait_until("the command's process group to be gone", || group_members(pgid).is_empty()).await;
    assert_eq!(server.chat_requests().len(), 1, "a cancelled turn asks the model nothing more");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_during_a_long_command_reaches_the_model_mid_turn_and_the_command_runs_on_as_a_job() {
    let home = Home::new();
    config(&home, "off");
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_l", "terminal", &terminal("sleep 3004413")),
        ScriptedResponse::text("fine, the sleep goes on in the background"),
    ])
    .await
    .unwrap();
    let mut client = SdkClient::start(&home, &server.base_url()).await;
    let session = client.new_session(&home).await;
    let first = client.prompt(&session, "sleep for a long time").await;
    wait_until("the long command to run", || !pids_running("3004413").is_empty()).await;

    let second = client.prompt(&session, "meanwhile, what is 2+2?").await;
    let requests = server.wait_for_chat_requests(2, Duration::from_secs(30)).await;
    let messages = requests[1].body["messages"].as_array().unwrap();
    let tool = &messages[messages.len() - 2];
    assert_eq!(tool["role"], "tool");
    let result: Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["status"], "yielded_to_background");
    let typed = messages.last().unwrap()["content"].as_str().unwrap();
    assert!(typed.contains("OUT-OF-BAND USER MESSAGE") && typed.contains("meanwhile, what is 2+2?"), "{typed}");

    assert_eq!(client.result(&first).await["stopReason"], "end_turn");
    assert_eq!(client.result(&second).await["stopReason"], "end_turn");
    assert!(!pids_running("3004413").is_empty(), "the command runs on as a job");
    let job = result["session_id"].as_str().unwrap();
    let yielded = client
        .updates("tool_call_update")
        .into_iter()
        .find(|u| u["toolCallId"] == "call_l" && u["status"] == "completed")
        .expect("the tool call completes when it moves to the background");
    assert_eq!(yielded["_meta"]["talaria"]["job"], job);
    let started = client
        .updates("agent_message_chunk")
        .into_iter()
        .find(|u| u["_meta"]["talaria"]["event"] == "job_started")
        .expect("the job is announced");
    assert_eq!(started["_meta"]["talaria"]["job"]["id"], job);
    assert!(started["content"]["text"].as_str().unwrap().contains("running in the background"));

    // Closing stdin is a quit: with `jobs.on_quit` at its default, the job is killed.
    assert_eq!(client.close().await, json!(0));
    wait_until("the job to be killed at quit", || pids_running("3004413").is_empty()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn session_load_replays_a_session_made_by_exec_and_list_finds_it() {
    let home = Home::new();
    config(&home, "auto");
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_e", "terminal", &terminal("echo zebra-3004414")),
        ScriptedResponse::text("Noted: zebra."),
        ScriptedResponse::text("You said zebra."),
    ])
    .await
    .unwrap();
    // The sandbox is off in these tests, so in `auto` every command asks; --yes answers for exec.
    let out = home.run(&["exec", "--json", "--yes", "--base-url", &server.base_url(), "remember the word zebra"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let ready = common::stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "SessionReady")
        .unwrap();
    let id = ready["data"]["session_id"].as_str().unwrap().to_string();

    let mut client = SdkClient::start(&home, &server.base_url()).await;
    let tag = client.request("session/list", json!({ "cwd": home.work().canonicalize().unwrap() })).await;
    let listed = client.result(&tag).await;
    let sessions = listed["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{listed}");
    assert_eq!(sessions[0]["sessionId"], id.as_str());
    assert!(sessions[0]["updatedAt"].is_string());

    let tag = client.request("session/load", json!({ "sessionId": id, "cwd": home.work(), "mcpServers": [] })).await;
    let loaded = client.result(&tag).await;
    assert_eq!(loaded["modes"]["currentModeId"], "auto");
    // The replay came before the answer, in the order the session has it.
    let seen = client.seen();
    let answered_at = seen.iter().position(|v| v["tag"] == tag.as_str()).unwrap();
    let replay: Vec<(String, String)> = seen[..answered_at]
        .iter()
        .filter(|v| v["kind"] == "update")
        .map(|v| &v["params"]["update"])
        .filter(|u| u["sessionUpdate"] != "available_commands_update")
        .map(|u| {
            let kind = u["sessionUpdate"].as_str().unwrap().to_string();
            let text = u["content"]["text"].as_str().or(u["title"].as_str()).or(u["status"].as_str()).unwrap_or("");
            (kind, text.to_string())
        })
        .collect();
    assert_eq!(
        replay,
        [
            ("user_message_chunk".to_string(), "remember the word zebra".to_string()),
            ("tool_call".to_string(), "echo zebra-3004414".to_string()),
            ("tool_call_update".to_string(), "completed".to_string()),
            ("agent_message_chunk".to_string(), "Noted: zebra.".to_string()),
        ]
    );
    // The loaded session goes on where it was.
    let tag = client.prompt(&id, "what did I say?").await;
    assert_eq!(client.result(&tag).await["stopReason"], "end_turn");
    let messages = server.chat_requests()[2].body["messages"].clone();
    assert!(messages.to_string().contains("remember the word zebra"), "the model reads the earlier exchange");
    client.close().await;
}

/// Raw JSON-RPC on talaria's stdin/stdout, no client library: what a broken client sends.
#[tokio::test(flavor = "multi_thread")]
async fn a_garbage_line_and_an_unknown_method_get_errors_and_the_session_goes_on() {
    let home = Home::new();
    config(&home, "auto");
    let server = ScriptedServer::start([ScriptedResponse::text("still here")]).await.unwrap();
    let mut child = home
        .command()
        .args(["acp", "--base-url", &server.base_url()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("an answer within 30 s")
            .unwrap()
            .expect("talaria still running");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout carries only JSON-RPC, got {line:?}: {e}"))
    };
    let mut send = async |line: &str| {
        stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    };

    send("this is not json {").await;
    let error = next().await;
    assert_eq!(error["error"]["code"], -32700, "{error}");
    send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}"#)
        .await;
    assert_eq!(next().await["result"]["protocolVersion"], 1);
    send(r#"{"jsonrpc":"2.0","id":2,"method":"talaria/no_such_method","params":{}}"#).await;
    let error = next().await;
    assert_eq!((error["id"].clone(), error["error"]["code"].clone()), (json!(2), json!(-32601)), "{error}");
    let cwd = home.work().display().to_string();
    send(&json!({"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd": cwd, "mcpServers": []}}).to_string())
        .await;
    let created = next().await;
    let session = created["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{created}")).to_string();
    let prompt = json!({"jsonrpc":"2.0","id":4,"method":"session/prompt",
        "params":{"sessionId": session, "prompt":[{"type":"text","text":"are you there?"}]}});
    send(&prompt.to_string()).await;
    let mut text = String::new();
    let answer = loop {
        let message = next().await;
        if message["id"] == 4 {
            break message;
        }
        if message["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            text.push_str(message["params"]["update"]["content"]["text"].as_str().unwrap());
        }
    };
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(text, "still here");
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0), "closing stdin ends talaria acp cleanly");
}

/// `acpx`, a headless ACP client from npm, runs talaria as its agent.
async fn run_acpx(home: &Home, agent: &str, args: &[&str]) -> std::process::Output {
    let child = tokio::process::Command::new(acpx())
        .arg("--agent")
        .arg(agent)
        .args(args)
        .env("HOME", home.path())
        .env("TALARIA_HOME", home.path())
        .env("TALARIA_TEST_GUARD", "1")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .current_dir(home.work())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), child).await.expect("acpx within 60 s").expect("acpx runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn acpx_exec_prints_the_answer() {
    let home = Home::new();
    config(&home, "auto");
    let server = ScriptedServer::start([ScriptedResponse::text("Answer for acpx.")]).await.unwrap();
    let agent = format!("{} acp --base-url {}", talaria(), server.base_url());
    let out = run_acpx(&home, &agent, &["--format", "text", "exec", "say hi to acpx"]).await;
    let stdout = common::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {}", common::stderr(&out));
    assert!(stdout.contains("Answer for acpx."), "{stdout}");
    let sent = server.chat_requests()[0].body["messages"].to_string();
    assert!(sent.contains("say hi to acpx"), "{sent}");
}

#[tokio::test(flavor = "multi_thread")]
async fn acpx_sessions_list_shows_talarias_sessions() {
    let home = Home::new();
    config(&home, "auto");
    let server = ScriptedServer::start([ScriptedResponse::text("first")]).await.unwrap();
    let agent = format!("{} acp --base-url {}", talaria(), server.base_url());
    let out = home.run(&["exec", "--json", "--base-url", &server.base_url(), "a session to list"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let out = run_acpx(&home, &agent, &["--format", "json", "sessions", "list"]).await;
    let stdout = common::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {}", common::stderr(&out));
    assert!(stdout.contains("a session to list"), "acpx lists the session by its first line: {stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn acpx_cancel_stops_a_long_command_of_acpx_prompt() {
    let home = Home::new();
    config(&home, "off");
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_x", "terminal", &terminal("sleep 3004415")),
        ScriptedResponse::text("unused"),
    ])
    .await
    .unwrap();
    let agent = format!("{} acp --base-url {}", talaria(), server.base_url());
    let out = run_acpx(&home, &agent, &["--ttl", "2", "sessions", "new"]).await;
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", common::stdout(&out), common::stderr(&out));
    let prompt = tokio::process::Command::new(acpx())
        .args(["--agent", &agent, "--ttl", "2", "--format", "json", "prompt", "run the long command"])
        .env("HOME", home.path())
        .env("TALARIA_HOME", home.path())
        .env("TALARIA_TEST_GUARD", "1")
        .current_dir(home.work())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_until("the long command to run", || !pids_running("3004415").is_empty()).await;
    let out = run_acpx(&home, &agent, &["cancel"]).await;
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", common::stdout(&out), common::stderr(&out));
    let prompted = tokio::time::timeout(Duration::from_secs(60), prompt.wait_with_output()).await.unwrap().unwrap();
    let stdout = common::stdout(&prompted);
    assert!(stdout.contains("cancelled"), "the prompt ends cancelled: {stdout}\nstderr: {}", common::stderr(&prompted));
    wait_until("the command's process group to be gone", || pids_running("3004415").is_empty()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_model_the_busy_mode_and_the_approval_mode_are_session_settings() {
    let home = Home::new();
    config(&home, "auto");
    let server = ScriptedServer::start([
        ScriptedResponse::text("from m2"),
        ScriptedResponse::text("from m3"),
        ScriptedResponse::tool_call("call_p", "terminal", &terminal("touch prompted_3004418")),
        ScriptedResponse::text("made it"),
    ])
    .await
    .unwrap();
    server.set_models(["m1", "m2"]);
    let mut client = SdkClient::start(&home, &server.base_url()).await;
    let tag = client.request("session/new", json!({ "cwd": home.work(), "mcpServers": [] })).await;
    let created = client.result(&tag).await;
    let session = created["sessionId"].as_str().unwrap().to_string();
    assert_eq!(created["modes"]["currentModeId"], "auto");
    let model = &created["configOptions"][0];
    assert_eq!((model["id"].clone(), model["currentValue"].clone()), (json!("model"), json!("m1")));
    let listed: Vec<&str> = model["options"].as_array().unwrap().iter().map(|o| o["value"].as_str().unwrap()).collect();
    assert_eq!(listed, ["m1", "m2"], "the models the provider lists");

    let params = json!({ "sessionId": session, "configId": "model", "value": "m2" });
    let tag = client.request("session/set_config_option", params).await;
    assert_eq!(client.result(&tag).await["configOptions"][0]["currentValue"], "m2");
    let params = json!({ "sessionId": session, "configId": "busy_mode", "value": "queue" });
    let tag = client.request("session/set_config_option", params).await;
    assert_eq!(client.result(&tag).await["configOptions"][1]["currentValue"], "queue");
    let tag = client.prompt(&session, "which model?").await;
    client.result(&tag).await;
    // The older method some clients still send.
    let tag = client.request("session/set_model", json!({ "sessionId": session, "modelId": "m3" })).await;
    client.result(&tag).await;
    let tag = client.prompt(&session, "and now?").await;
    client.result(&tag).await;
    let models: Vec<Value> = server.chat_requests().iter().map(|r| r.body["model"].clone()).collect();
    assert_eq!(models, [json!("m2"), json!("m3")]);

    // The approval mode: in auto a sandboxed `touch` runs unasked; switched to prompt, it asks.
    let tag = client.request("session/set_mode", json!({ "sessionId": session, "modeId": "never" })).await;
    assert_eq!(client.answer(&tag).await["kind"], "error", "no such mode");
    let tag = client.request("session/set_mode", json!({ "sessionId": session, "modeId": "prompt" })).await;
    client.result(&tag).await;
    let switched =
        client.wait_for("the mode update", |v| v["params"]["update"]["sessionUpdate"] == "current_mode_update").await;
    assert_eq!(switched["params"]["update"]["currentModeId"], "prompt");
    client.send(json!({ "op": "answers", "list": ["once"] })).await;
    let tag = client.prompt(&session, "make a file").await;
    assert_eq!(client.result(&tag).await["stopReason"], "end_turn");
    let asks: Vec<Value> = client.seen().into_iter().filter(|v| v["kind"] == "permission").collect();
    assert_eq!(asks.len(), 1, "in prompt mode the sandboxed touch asked");
    assert_eq!(asks[0]["params"]["toolCall"]["toolCallId"], "call_p");
    assert!(home.work().join("prompted_3004418").exists(), "allowed once: it ran");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_background_jobs_exit_reaches_the_editor_as_a_line_with_talaria_fields() {
    let home = Home::new();
    config(&home, "off");
    // The job ends only once the first turn has: its notice then starts a turn of its own
    // (a job ending mid-turn is told to that turn instead).
    let go = home.work().join("go-3004416");
    let background = json!({
        "command": format!("while [ ! -e {} ]; do sleep 0.02; done; echo done-3004416", go.display()),
        "background": true
    })
    .to_string();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_bg", "terminal", &background),
        ScriptedResponse::text("started it"),
        ScriptedResponse::text("the job is done"),
    ])
    .await
    .unwrap();
    let mut client = SdkClient::start(&home, &server.base_url()).await;
    let session = client.new_session(&home).await;
    let tag = client.prompt(&session, "start a background job").await;
    client.result(&tag).await;
    std::fs::write(&go, "").unwrap();
    let finished = client
        .wait_for("the job's exit", |v| v["params"]["update"]["_meta"]["talaria"]["event"] == "job_finished")
        .await;
    let update = &finished["params"]["update"];
    assert_eq!(update["sessionUpdate"], "agent_message_chunk");
    let job = update["_meta"]["talaria"]["job"]["id"].as_str().unwrap();
    assert_eq!(update["content"]["text"], format!("\n↳ {job} exited 0\n"));
    assert_eq!(update["_meta"]["talaria"]["job"]["status"], "exited 0");
    // The engine tells the model in a turn of its own; the editor sees that message too.
    let notice = client
        .wait_for("the exit notice the model got", |v| {
            v["params"]["update"]["sessionUpdate"] == "user_message_chunk"
                && v["params"]["update"]["_meta"]["talaria"]["trigger"] == "job_notification"
        })
        .await;
    assert!(notice["params"]["update"]["content"]["text"].as_str().unwrap().contains(job), "{notice}");
    wait_until("the answer to the notice", || client.agent_text().contains("the job is done")).await;
    client.close().await;
}
