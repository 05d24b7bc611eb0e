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

/// The vt100 cell at the start of the first row that contains `needle`: its text's row and
/// column, with the screen's colours there.
fn cell_colours(p: &Pty, needle: &str) -> Option<(vt100::Color, vt100::Color)> {
    let parser = p.screen.lock().unwrap();
    let screen = parser.screen();
    let (rows, cols) = screen.size();
    let (rows, cols) = (rows.get(), cols.get());
    for row in 0..rows {
        let text: String =
            (0..cols).map(|c| screen.cell(row, c).map_or(" ".to_string(), |x| x.contents().to_string())).collect();
        if let Some(at) = text.find(needle) {
            let col = text[..at].chars().count() as u16;
            let cell = screen.cell(row, col)?;
            return Some((cell.fgcolor(), cell.bgcolor()));
        }
    }
    None
}

#[test]
fn slash_diff_shows_a_turn_as_a_coloured_diff_to_scroll_and_esc_closes_it() {
    let home = Home::new();
    let old: String = (1..=60).map(|i| format!("fn f{i}() -> u32 {{ {i} }}\n")).collect();
    std::fs::write(home.work().join("lib.rs"), &old).unwrap();
    let new = old.replace("-> u32", "-> u64");
    let write = serde_json::json!({"path": "lib.rs", "content": new}).to_string();
    let m = model(vec![
        ScriptedResponse::tool_call("c1", "write_file", &write),
        ScriptedResponse::text("changed lib.rs"),
        ScriptedResponse::tool_call("c2", "write_file", r#"{"path":"notes.txt","content":"second turn\n"}"#),
        ScriptedResponse::text("wrote notes"),
    ]);
    let mut p = spawn(&home, &m, &[]);
    p.wait_for(" message ", WAIT);
    send_message(&p, "turn one");
    p.wait_for("changed lib.rs", WAIT);
    send_message(&p, "turn two");
    p.wait_for("wrote notes", WAIT);
    p.wait_for("● idle", WAIT);
    // The last turn by default.
    send_message(&p, "/diff");
    let screen = p.wait_for("/diff · turn 2 · turn two", WAIT);
    assert!(screen.contains("+second turn") && !screen.contains("lib.rs"), "turn 2 only:\n{screen}");
    let (fg, bg) = cell_colours(&p, "+second turn").expect("the added line");
    assert_eq!(bg, vt100::Color::Rgb(0x12, 0x36, 0x1c), "an added line on its green ground");
    assert_ne!(fg, vt100::Color::Default, "its marker coloured");
    p.send(b"\x1b");
    p.wait_for(" message ", WAIT);
    wait_until("the view closed", || !p.contents().contains("/diff ·"));
    // Turn 1: 120 lines, more than a screen, highlighted as Rust.
    send_message(&p, "/diff 1");
    let top = p.wait_for("/diff · turn 1 · turn one", WAIT);
    assert!(top.contains("diff --git a/lib.rs b/lib.rs") && top.contains("-fn f1() -> u32 { 1 }"), "{top}");
    assert!(!top.contains("f60()"), "its end is below:\n{top}");
    let (_, bg) = cell_colours(&p, "-fn f1()").expect("the removed line");
    assert_eq!(bg, vt100::Color::Rgb(0x3d, 0x15, 0x17), "a removed line on its red ground");
    let (keyword, _) = cell_colours(&p, "fn f2() -> u32").expect("a removed line");
    let (name, _) = cell_colours(&p, "f2() -> u32").expect("a removed line");
    assert_ne!(keyword, name, "Rust highlighted: `fn` and the name in colours of their own");
    p.send(b"\x1b[F");
    let end = p.wait_for("+fn f60() -> u64 { 60 }", WAIT);
    assert!(!end.contains("diff --git"), "End shows the end:\n{end}");
    p.send(b"\x1b[H");
    p.wait_for("diff --git a/lib.rs", WAIT);
    p.send(b"\x1b[6~");
    wait_until("a page down", || !p.contents().contains("diff --git a/lib.rs"));
    p.send(b"q");
    wait_until("the view closed", || !p.contents().contains("/diff ·"));
    // The whole session: both files.
    send_message(&p, "/diff all");
    let all = p.wait_for("/diff · the whole session", WAIT);
    assert!(all.contains("diff --git a/lib.rs"), "{all}");
    p.send(b"\x1b[F");
    p.wait_for("+second turn", WAIT);
    p.send(b"\x1b");
    wait_until("the view closed", || !p.contents().contains("/diff ·"));
    p.send(b"\x04");
    assert!(p.wait_exit(WAIT).is_some(), "talaria quits");
}

/// The records of the one session journal under `home` (`{"record":"start"|"end"|…}`).
fn journal_records(home: &Home) -> Vec<serde_json::Value> {
    let Ok(stores) = std::fs::read_dir(home.path().join("rewind")) else { return Vec::new() };
    let mut records = Vec::new();
    for store in stores.flatten() {
        let Ok(sessions) = std::fs::read_dir(store.path().join("sessions")) else { continue };
        for journal in sessions.flatten() {
            let text = std::fs::read_to_string(journal.path()).unwrap_or_default();
            records.extend(text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()));
        }
    }
    records
}

/// `start 1, end 1, …`: the kinds of the records with the turn (by order of first sight).
fn record_order(records: &[serde_json::Value]) -> Vec<String> {
    let mut ids: Vec<u64> = Vec::new();
    records
        .iter()
        .map(|r| {
            let id = r["id"].as_u64().expect("an id");
            if !ids.contains(&id) {
                ids.push(id);
            }
            let n = ids.iter().position(|i| *i == id).unwrap() + 1;
            format!("{} {n}", r["record"].as_str().unwrap())
        })
        .collect()
}

/// [`spawn`], with every snapshot after a turn held until `release` exists.
fn spawn_holding(home: &Home, m: &Model, release: &std::path::Path) -> Pty {
    spawn_holding_at(home, m, "end_snapshot", release)
}

fn spawn_holding_at(home: &Home, m: &Model, point: &str, release: &std::path::Path) -> Pty {
    home.write_config("[approvals]\nmode = \"off\"\n");
    let url = m.server.base_url();
    let hold = format!("{point}:{}", release.display());
    let args = ["--base-url", url.as_str(), "--model", "m"];
    Pty::spawn_with_env(home.path(), &home.work(), &args, 120, 36, &[("TALARIA_TEST_HOLD", hold.as_str())])
}

/// Issue #33: the turn is over for the engine when the model's work is; the snapshot after
/// it runs on, in order. The test holds that snapshot (`TALARIA_TEST_HOLD`): the turn still
/// ends, the next message's request reaches the server meanwhile, and the next turn's
/// snapshot (and its tools) come after the held one's End record.
#[test]
fn the_next_message_goes_out_while_the_end_snapshot_still_runs_and_the_journal_keeps_their_order() {
    let home = Home::new();
    std::fs::write(home.work().join("b.txt"), "one\ntwo\n").unwrap();
    let release = home.path().join(format!("release-{}", std::process::id()));
    let held = home.path().join(format!("release-{}.held", std::process::id()));
    let m = model(vec![
        ScriptedResponse::tool_call("c1", "write_file", r#"{"path":"a.txt","content":"one\n"}"#),
        ScriptedResponse::text("wrote a.txt"),
        ScriptedResponse::tool_call("c2", "terminal", r#"{"command":"sed -i s/two/TWO/ b.txt"}"#),
        ScriptedResponse::text("edited b.txt"),
    ]);
    let mut p = spawn_holding(&home, &m, &release);
    p.wait_for(" message ", WAIT);
    send_message(&p, "turn one");
    p.wait_for("wrote a.txt", WAIT);
    wait_until("turn 1's end snapshot to be held", || held.exists());
    // The turn is over while its end snapshot is held (before, idle came only after it).
    p.wait_for("● idle", WAIT);
    send_message(&p, "turn two");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let requests = rt.block_on(m.server.wait_for_chat_requests(3, WAIT));
    assert_eq!(requests.len(), 3, "turn 2's request reached the server");
    assert!(!release.exists(), "turn 1's end snapshot is still held");
    assert_eq!(record_order(&journal_records(&home)), ["start 1"], "no End record yet, nor turn 2's start");
    assert_eq!(read(&home, "b.txt"), "one\ntwo\n", "turn 2's tools wait for its snapshot");

    std::fs::write(&release, b"").unwrap();
    p.wait_for("edited b.txt", WAIT);
    p.wait_for("● idle", WAIT);
    wait_until("turn 2's End record", || journal_records(&home).len() == 4);
    assert_eq!(record_order(&journal_records(&home)), ["start 1", "end 1", "start 2", "end 2"]);
    // Rewind right after the turn sees it, with what it changed.
    let screen = open_picker(&p);
    let picker = &screen[screen.find("Go back to before which message?").unwrap()..];
    assert!(picker.contains("turn two") && picker.contains("turn one"), "both turns:\n{screen}");
    assert!(screen.contains("b.txt +1 −1"), "turn 2's file with its lines:\n{screen}");
    p.send(b"\x1b");
    p.wait_for("rewind cancelled", WAIT);
    p.send(b"\x04");
    assert!(p.wait_exit(WAIT).is_some(), "talaria quits");
}

/// A turn whose snapshot before it is still running (the first of a big workspace takes
/// seconds) ends when its answer is in: the next message's request goes out meanwhile, and
/// the records keep their order once the snapshot is done.
#[test]
fn a_turn_ends_and_the_next_request_goes_out_while_its_snapshot_before_still_runs() {
    let home = Home::new();
    let release = home.path().join(format!("release-before-{}", std::process::id()));
    let held = home.path().join(format!("release-before-{}.held", std::process::id()));
    let m = model(vec![ScriptedResponse::text("answer one"), ScriptedResponse::text("answer two")]);
    let mut p = spawn_holding_at(&home, &m, "before_snapshot", &release);
    p.wait_for(" message ", WAIT);
    send_message(&p, "turn one");
    p.wait_for("answer one", WAIT);
    wait_until("turn 1's snapshot before to be held", || held.exists());
    p.wait_for("● idle", WAIT);
    send_message(&p, "turn two");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let requests = rt.block_on(m.server.wait_for_chat_requests(2, WAIT));
    assert_eq!(requests.len(), 2, "turn 2's request reached the server");
    assert!(journal_records(&home).is_empty(), "the held snapshot has written nothing yet");

    std::fs::write(&release, b"").unwrap();
    p.wait_for("answer two", WAIT);
    wait_until("turn 2's End record", || journal_records(&home).len() == 4);
    assert_eq!(record_order(&journal_records(&home)), ["start 1", "end 1", "start 2", "end 2"]);
    p.send(b"\x04");
    assert!(p.wait_exit(WAIT).is_some(), "talaria quits");
}

/// The same for the user's `!command`: it is over while the snapshot after it is held, the
/// next message's request goes out, and the journal keeps the order.
#[test]
fn after_a_bang_command_the_next_message_goes_out_while_its_end_snapshot_still_runs() {
    let home = Home::new();
    std::fs::write(home.work().join("b.txt"), "one\ntwo\n").unwrap();
    let release = home.path().join(format!("release-{}", std::process::id()));
    let held = home.path().join(format!("release-{}.held", std::process::id()));
    let m = model(vec![
        ScriptedResponse::tool_call("c2", "terminal", r#"{"command":"sed -i s/two/TWO/ b.txt"}"#),
        ScriptedResponse::text("edited b.txt"),
    ]);
    let mut p = spawn_holding(&home, &m, &release);
    p.wait_for(" message ", WAIT);
    send_message(&p, "!echo bang-33 > c.txt");
    wait_until("the command's end snapshot to be held", || held.exists());
    assert_eq!(read(&home, "c.txt"), "bang-33\n");
    p.wait_for("● idle", WAIT);
    send_message(&p, "turn two");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let requests = rt.block_on(m.server.wait_for_chat_requests(1, WAIT));
    assert_eq!(requests.len(), 1, "the turn's request reached the server");
    assert_eq!(record_order(&journal_records(&home)), ["start 1"], "the command's End is not written yet");

    std::fs::write(&release, b"").unwrap();
    p.wait_for("edited b.txt", WAIT);
    p.wait_for("● idle", WAIT);
    wait_until("the turn's End record", || journal_records(&home).len() == 4);
    assert_eq!(record_order(&journal_records(&home)), ["start 1", "end 1", "start 2", "end 2"]);
    let screen = open_picker(&p);
    assert!(screen.contains("c.txt"), "the command's file:\n{screen}");
    p.send(b"\x1b");
    p.wait_for("rewind cancelled", WAIT);
    p.send(b"\x04");
    assert!(p.wait_exit(WAIT).is_some(), "talaria quits");
}
