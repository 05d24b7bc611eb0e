//! `talaria exec` on a real terminal (a PTY) prints no escape sequence, C1 control or bidi
//! control that came from a command or a provider: an `ESC ]52` in a command once wrote
//! the user's clipboard through exec's stderr.

mod common;
#[path = "common/pty.rs"]
mod pty;

use std::time::Duration;

use common::Home;
use pty::Pty;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

/// OSC 52 (clipboard), a C1 CSI, a title change, a right-to-left override.
const HOSTILE: &str = "\u{1b}]52;c;aGk=\u{7}\u{9b}2J\u{1b}]0;owned\u{7}\u{202e}fdp.exe";

/// No ESC byte, no C1 control, no bidi control in what talaria wrote to the terminal.
fn assert_clean(raw: &[u8], what: &str) {
    let text = String::from_utf8_lossy(raw);
    assert!(!raw.contains(&0x1b), "{what}: an ESC reached the terminal: {text:?}");
    assert!(!raw.contains(&0x9b), "{what}: a raw C1 byte reached the terminal: {text:?}");
    let bad: Vec<char> = text
        .chars()
        .filter(|c| matches!(c, '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
        .collect();
    assert!(bad.is_empty(), "{what}: control characters {bad:?} reached the terminal: {text:?}");
}

fn run_in_pty(home: &Home, server: &ScriptedServer) -> (Vec<u8>, String) {
    let mut pty = Pty::spawn(home.path(), &home.work(), &["exec", "--base-url", &server.base_url(), "go"], 120, 40);
    assert!(pty.wait_exit(Duration::from_secs(60)).is_some(), "talaria exec did not finish: {}", pty.raw_text());
    // The reader thread may still be taking the last bytes: wait for end of file.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = 0;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let len = pty.raw.lock().unwrap().len();
        if len == last || std::time::Instant::now() > deadline {
            break;
        }
        last = len;
    }
    let raw = pty.raw.lock().unwrap().clone();
    (raw, pty.contents())
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_on_a_terminal_prints_nothing_a_command_or_model_could_use_to_drive_it() {
    let home = Home::new();
    let command = format!("printf 'out{HOSTILE}\\n'; echo '{HOSTILE}' >&2");
    let foreground = serde_json::json!({ "command": command }).to_string();
    let background = serde_json::json!({ "command": format!("sleep 0.1 # {HOSTILE}"), "background": true }).to_string();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("c1", "terminal", &foreground),
        ScriptedResponse::tool_call("c2", "terminal", &background),
        ScriptedResponse::text(&format!("answer {HOSTILE} end")),
    ])
    .await
    .unwrap();
    let (raw, screen) = tokio::task::spawn_blocking(move || run_in_pty(&home, &server)).await.unwrap();
    assert_clean(&raw, "tool summaries, job lines and the answer");
    assert!(screen.contains("answer") && screen.contains("<U+202E>fdp.exe"), "{screen}");
    assert!(screen.contains("▸ terminal printf"), "{screen}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_error_reaches_the_terminal_without_its_escape_sequences() {
    let home = Home::new();
    let server =
        ScriptedServer::start([ScriptedResponse::error(400, &format!("bad request {HOSTILE} details"))]).await.unwrap();
    let (raw, screen) = tokio::task::spawn_blocking(move || run_in_pty(&home, &server)).await.unwrap();
    assert_clean(&raw, "the provider error");
    assert!(screen.contains("bad request"), "{screen}");
}
