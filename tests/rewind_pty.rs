//! Rewind in the real TUI (issue #29), driven in a pseudo-terminal: Esc Esc opens the
//! picker, a point and "code only" are chosen, the confirmation lists the path, `y` puts it
//! back. And `kill -9` in the middle of turn 2: `talaria -c`, then the snapshot before
//! turn 2 is there and restores.

mod common;
#[path = "common/pty.rs"]
mod pty;

use std::time::{Duration, Instant};

use common::Home;
use pty::Pty;
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

const WAIT: Duration = Duration::from_secs(30);
const DOWN: &[u8] = b"\x1b[B";

struct Model {
    _rt: tokio::runtime::Runtime,
    server: ScriptedServer,
}

fn model(responses: Vec<ScriptedResponse>) -> Model {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let server = rt.block_on(ScriptedServer::start(responses)).unwrap();
    Model { _rt: rt, server }
}

/// Commands run without asking (`approvals.mode = "off"`): the test is about rewind.
fn spawn(home: &Home, model: &Model, extra: &[&str]) -> Pty {
    home.write_config("[approvals]\nmode = \"off\"\n");
    let url = model.server.base_url();
    let mut args = vec!["--base-url", url.as_str(), "--model", "m"];
    args.extend_from_slice(extra);
    Pty::spawn(home.path(), &home.work(), &args, 120, 36)
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn read(home: &Home, path: &str) -> String {
    std::fs::read_to_string(home.work().join(path)).unwrap_or_default()
}

fn send_message(p: &Pty, text: &str) {
    p.type_text(text);
    p.send(b"\r");
}

/// Esc Esc on the empty idle input: the picker (the first Esc's hint is awaited, so the
/// second is not read as Alt+Esc).
fn open_picker(p: &Pty) -> String {
    p.wait_for("● idle", WAIT);
    p.send(b"\x1b");
    p.wait_for("Esc again on an empty input", WAIT);
    p.send(b"\x1b");
    p.wait_for("Go back to before which message?", WAIT)
}

/// From the open picker: the point `downs` rows below the newest, "code only", then the
/// confirmation, which must list `listed`; `y` does it.
fn rewind_code_only(p: &Pty, downs: usize, listed: &str) {
    for _ in 0..downs {
        p.send(DOWN);
    }
    p.send(b"\r");
    p.wait_for("code and conversation", WAIT);
    p.send(DOWN);
    p.wait_for("▸ code only", WAIT);
    p.send(b"\r");
    let screen = p.wait_for(" Rewind? ", WAIT);
    assert!(screen.contains(listed), "the confirmation lists {listed}:\n{screen}");
    p.send(b"y");
    p.wait_for("rewound to before", WAIT);
}

#[test]
fn esc_esc_picker_and_confirmation_put_back_what_turn_2_changed() {
    let home = Home::new();
    std::fs::write(home.work().join("b.txt"), "one\ntwo\n").unwrap();
    let m = model(vec![
        ScriptedResponse::tool_call("c1", "write_file", r#"{"path":"a.txt","content":"one\n"}"#),
        ScriptedResponse::text("wrote a.txt"),
        ScriptedResponse::tool_call("c2", "terminal", r#"{"command":"sed -i s/two/TWO/ b.txt"}"#),
        ScriptedResponse::text("edited b.txt"),
    ]);
    let mut p = spawn(&home, &m, &[]);
    p.wait_for(" message ", WAIT);
    send_message(&p, "turn one");
    p.wait_for("wrote a.txt", WAIT);
    send_message(&p, "turn two");
    p.wait_for("edited b.txt", WAIT);
    assert_eq!(read(&home, "b.txt"), "one\nTWO\n");
    // Esc while the turn still ends would stop it, not count towards Esc Esc.
    p.wait_for("● idle", WAIT);
    let screen = open_picker(&p);
    let picker = &screen[screen.find("Go back to before which message?").unwrap()..];
    let two = picker.find("turn two").expect("turn two listed");
    let one = picker.find("turn one").expect("turn one listed");
    assert!(two < one, "newest first:\n{screen}");
    assert!(screen.contains("b.txt +1 −1"), "turn 2's file with its lines:\n{screen}");
    rewind_code_only(&p, 0, "restore b.txt");
    assert_eq!(read(&home, "b.txt"), "one\ntwo\n", "b.txt as before turn 2");
    assert_eq!(read(&home, "a.txt"), "one\n", "turn 1's file stays");
    // Cancelling changes nothing: Esc on the picker.
    open_picker(&p);
    p.send(b"\x1b");
    p.wait_for("rewind cancelled", WAIT);
    assert_eq!(read(&home, "a.txt"), "one\n");
    p.send(b"\x04");
    assert!(p.wait_exit(WAIT).is_some(), "talaria quits");
}

/// Processes whose command line is exactly `args`.
fn pids_with_cmdline(args: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = args.iter().flat_map(|a| a.bytes().chain(std::iter::once(0))).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| !r.trim_start().starts_with('Z')))
        })
        .collect()
}

#[test]
fn kill_9_in_the_middle_of_turn_2_then_talaria_c_rewinds_to_the_snapshot_before_it() {
    let home = Home::new();
    std::fs::write(home.work().join("b.txt"), "before\n").unwrap();
    // A sleep no other test runs: this test's pid in its fraction.
    let secs = format!("300.{}29", std::process::id());
    let command = format!("echo during > b.txt && echo new > n.txt && sleep {secs}");
    let m = model(vec![
        ScriptedResponse::tool_call("c1", "write_file", r#"{"path":"a.txt","content":"one\n"}"#),
        ScriptedResponse::text("wrote a.txt"),
        ScriptedResponse::tool_call("c2", "terminal", &serde_json::json!({ "command": command }).to_string()),
        ScriptedResponse::hang(),
    ]);
    let mut p = spawn(&home, &m, &[]);
    p.wait_for(" message ", WAIT);
    send_message(&p, "turn one");
    p.wait_for("wrote a.txt", WAIT);
    send_message(&p, "turn two");
    wait_until("turn 2's sleep", || !pids_with_cmdline(&["sleep", &secs]).is_empty());
    assert_eq!(read(&home, "b.txt"), "during\n");
    let pid = p.child.process_id().expect("pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(p.wait_exit(WAIT).is_some(), "talaria died");
    drop(p);

    let mut p = spawn(&home, &m, &["-c"]);
    p.wait_for(" message ", WAIT);
    let screen = open_picker(&p);
    assert!(screen.contains("turn two") && screen.contains("turn one"), "both turns:\n{screen}");
    rewind_code_only(&p, 0, "remove n.txt");
    assert_eq!(read(&home, "b.txt"), "before\n", "b.txt as before turn 2");
    assert!(!home.work().join("n.txt").exists(), "turn 2's new file is gone");
    assert_eq!(read(&home, "a.txt"), "one\n", "turn 1's file stays");
    p.send(b"\x04");
    let deadline = Instant::now() + WAIT;
    while p.child.try_wait().ok().flatten().is_none() {
        if p.contents().contains(" Quit? ") {
            p.send(b"y");
        }
        assert!(Instant::now() < deadline, "talaria did not quit:\n{}", p.contents());
        std::thread::sleep(Duration::from_millis(25));
    }
    // The sleep of the killed run, if it outlived talaria: ours, by its marker.
    for pid in pids_with_cmdline(&["sleep", &secs]) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    wait_until("no sleep of this test left", || pids_with_cmdline(&["sleep", &secs]).is_empty());
}
