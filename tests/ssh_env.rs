//! Secrets in talaria's environment do not reach a remote command either (DESIGN §6), even
//! when the ssh config forwards everything (`SendEnv *`) and the server accepts it
//! (`AcceptEnv *`): a plain variable arrives there, the secret ones do not; `/permissions`
//! names what is dropped, never a value. Its own binary, because it sets variables in the
//! test process, which the in-process engine reads.

mod common;
#[path = "common/inproc.rs"]
mod inproc;
#[path = "common/sshd.rs"]
mod sshd;

use std::path::Path;

use serde_json::json;
use talaria::config::Config;
use talaria::engine::SessionChoice;
use talaria::protocol::{Op, SlashCommand};
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

/// `/permissions` lists the names commands do not get (a secret-looking one, an
/// `env_drop` one), not their values, and not a name `env_keep` brought back.
#[tokio::test]
async fn permissions_list_the_dropped_names_and_never_their_values() {
    let mark = format!("{}{:05}", 49_100, std::process::id() % 100_000);
    let (secret, kept, corp) =
        (format!("H27_{mark}_TOKEN"), format!("H27_{mark}_KEPT_SECRET"), format!("CORP{mark}_URL"));
    for name in [&secret, &kept, &corp] {
        std::env::set_var(name, format!("value-of-{name}"));
    }
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::text("unused")]).await.unwrap();
    let toml = format!("[sandbox]\nenv_keep = [{kept:?}]\nenv_drop = [\"CORP{mark}_*\"]\n");
    let config = Config::from_toml(&toml, Path::new("test-config.toml")).expect("config");
    let mut running = inproc::start_with(home.path(), &server.base_url(), SessionChoice::New, config).await;
    running.send(Op::Command(SlashCommand::Permissions));
    let text = running.notice("environment:").await;
    let line = text.lines().find(|l| l.starts_with("environment:")).unwrap_or_default().to_string();
    assert!(line.contains(&secret) && line.contains(&corp), "{line}");
    assert!(!line.contains(&kept), "env_keep brought it back: {line}");
    assert!(!text.contains("value-of-"), "a value was shown: {text}");
    running.shutdown().await;
}
