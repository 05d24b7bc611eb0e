//! Secrets in talaria's environment do not reach a remote command either (DESIGN §6), even
//! when the ssh config forwards everything (`SendEnv *`) and the server accepts it
//! (`AcceptEnv *`): a plain variable arrives there, the secret ones do not. Its own binary,
//! because it sets variables in the test process, which the in-process engine reads.

mod common;
#[path = "common/inproc.rs"]
mod inproc;
#[path = "common/sshd.rs"]
mod sshd;

use std::path::Path;

use serde_json::json;
use talaria::config::Config;
use talaria::engine::SessionChoice;
use talaria::protocol::Op;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

use common::Home;
use sshd::Sshd;

#[tokio::test]
async fn secrets_are_not_forwarded_to_a_remote_command_even_with_send_env() {
    let mark = format!("{}{:05}", 49_000, std::process::id() % 100_000);
    #[rustfmt::skip]
    let secrets = [
        ("GITHUB_TOKEN", format!("ghp_{mark}")), ("AWS_SECRET_ACCESS_KEY", format!("aws_{mark}")),
        ("PGPASSWORD", format!("pg_{mark}")), ("MY_SERVICE_API_KEY", format!("svc_{mark}")),
    ];
    for (name, value) in &secrets {
        std::env::set_var(name, value);
    }
    std::env::set_var("TALARIA_PLAIN_VAR", format!("plain_{mark}"));
    let sshd = Sshd::start_with("AcceptEnv *");
    let home = Home::new();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("c1", "terminal", &json!({ "command": "env" }).to_string()),
        ScriptedResponse::text("done"),
    ])
    .await
    .unwrap();
    let cfg = sshd.talaria_config(10).replace("[approvals]", "options = [\"SendEnv=*\"]\n\n[approvals]");
    let config = Config::from_toml(&cfg, Path::new("test-config.toml")).expect("config");
    let mut running = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config).await;
    running.send(Op::Submit { text: "env over there".into(), mode: None });
    let (result, _) = running.tool_result("c1").await;
    assert_eq!(result["exit_code"], json!(0), "{result}");
    let output = result["output"].as_str().unwrap_or_default();
    assert!(output.contains("SSH_CONNECTION="), "it ran remotely: {result}");
    assert!(output.contains(&format!("TALARIA_PLAIN_VAR=plain_{mark}")), "SendEnv forwards a plain name: {result}");
    for (name, value) in &secrets {
        assert!(!output.contains(value.as_str()), "{name} reached the remote command: {output}");
    }
    running.turn_finished().await;
    running.shutdown().await;
}
