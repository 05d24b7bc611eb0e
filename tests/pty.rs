//! The real `talaria` binary in a pseudo-terminal: streaming and interrupting, typing while
//! a foreground command runs, killing a background job from its pane, quitting cleanly
//! (terminal modes restored, resume hint, no process left behind), Ctrl+Z / SIGCONT.
//! The model is the scripted loopback server; the screen is a vt100 parser.

mod common;
#[path = "common/pty.rs"]
mod pty;

use std::time::{Duration, Instant};

use common::Home;
use pty::Pty;
use talaria::testkit::scripted::{text_chunks, ScriptedResponse, ScriptedServer};

/// Deadline for things that take milliseconds; never a timing assertion.
const WAIT: Duration = Duration::from_secs(30);
const COLS: u16 = 120;
const ROWS: u16 = 36;

/// The scripted server lives on its own runtime; the test body stays synchronous.
struct Model {
    rt: tokio::runtime::Runtime,
    server: ScriptedServer,
}

impl Model {
    fn start(responses: Vec<ScriptedResponse>) -> Model {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        let server = rt.block_on(ScriptedServer::start(responses)).expect("scripted server");
        Model { rt, server }
    }

    fn chat_requests(&self, n: usize) -> Vec<talaria::testkit::scripted::RecordedRequest> {
        self.rt.block_on(self.server.wait_for_chat_requests(n, WAIT))
    }
}

fn spawn(home: &Home, model: &Model, extra: &[&str]) -> Pty {
    let url = model.server.base_url();
    let mut args = vec!["--base-url", url.as_str(), "--model", "m"];
    args.extend_from_slice(extra);
    Pty::spawn(home.path(), &home.work(), &args, COLS, ROWS)
}

/// A `sleep` argument no other test (or program) uses: `300.<our pid><n>` (sleep takes
/// fractions), so a process search finds only this test's command.
fn unique_secs(base: u32) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!("{base}.{}{:03}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
}

/// Talaria busy with a long foreground command (`sleep <secs>`, the model's first call).
fn start_a_long_command(home: &Home, model: &Model, secs: &str) -> Pty {
    let p = spawn(home, model, &[]);
    p.wait_for(" message ", WAIT);
    p.type_text("run the long thing");
    p.send(b"\r");
    wait_until("sleep to start", || !pids_with_cmdline(&["sleep", secs]).is_empty());
    p.wait_for(" busy ", WAIT);
    p
}

/// Wait until `cond` holds (panics with `what` after the deadline).
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Esc alone; the next key waits until the screen shows `then` (what Esc does), so it is
/// not read as Alt+key.
fn send_esc(p: &Pty, then: &str) {
    p.send(b"\x1b");
    p.wait_for(then, WAIT);
}

/// Quit with Ctrl+D on an empty input, confirming if talaria asks; returns the exit code.
fn quit(p: &mut Pty) -> u32 {
    p.send(b"\x04");
    let deadline = Instant::now() + WAIT;
    let mut confirmed = false;
    loop {
        if let Ok(Some(status)) = p.child.try_wait() {
            return status.exit_code();
        }
        let screen = p.contents();
        if !confirmed && screen.contains(" Quit? ") {
            p.send(b"y");
            confirmed = true;
        }
        assert!(Instant::now() < deadline, "talaria did not exit; screen:\n{screen}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Processes whose command line is exactly `args` (NUL-separated in /proc).
fn pids_with_cmdline(args: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = args.iter().flat_map(|a| a.bytes().chain(std::iter::once(0))).collect();
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if cmdline == want && !is_zombie(pid) {
                out.push(pid);
            }
        }
    }
    out
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// The process group of `pid` (field 5 of /proc/<pid>/stat).
fn pgid_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Live (non-zombie) processes in process group `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|&pid| pgid_of(pid) == Some(pgid) && !is_zombie(pid))
        .collect()
}

/// Live processes started with TALARIA_HOME = `home` (talaria itself, its reaper, its jobs).
fn processes_of_home(home: &std::path::Path) -> Vec<i32> {
    let want = format!("TALARIA_HOME={}", home.display()).into_bytes();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|&b| b == 0).any(|var| var == want.as_slice()))
                .unwrap_or(false)
                && !is_zombie(pid)
        })
        .collect()
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid)
}

/// The text after the last alternate-screen leave.
fn after_alt_screen(raw: &str) -> &str {
    raw.rfind("\x1b[?1049l").map(|i| &raw[i + "\x1b[?1049l".len()..]).unwrap_or("")
}

#[test]
fn streams_interrupts_and_restores_the_terminal() {
    let home = Home::new();
    let slow = text_chunks(&"slowly streaming words ".repeat(60), 6);
    let model = Model::start(vec![
        ScriptedResponse::sse(text_chunks("The answer is forty-two, streamed in pieces.", 5)),
        ScriptedResponse::sse(slow).delay(Duration::from_millis(100)),
    ]);
    let mut p = spawn(&home, &model, &[]);
    p.wait_for(" message ", WAIT);

    p.type_text("what is the answer?");
    p.send(b"\r");
    p.wait_for("forty-two, streamed in pieces.", WAIT);
    p.wait_for(" message ", WAIT);

    p.type_text("tell me slowly");
    p.send(b"\r");
    p.wait_for("slowly streaming", WAIT);
    send_esc(&p, "interrupted");
    p.wait_for(" message ", WAIT);
    assert_eq!(model.chat_requests(2).len(), 2);

    let code = quit(&mut p);
    assert_eq!(code, 0, "screen:\n{}", p.contents());
    // Give the reader thread a moment to take the last bytes.
    wait_until("the resume hint", || p.raw_text().contains("Resume this session with"));
    let raw = p.raw_text();
    let leave = raw.rfind("\x1b[?1049l").expect("the alternate screen is left");
    assert!(raw.rfind("\x1b[?1049h").expect("the alternate screen was entered") < leave);
    let tail = &raw[raw.rfind("\x1b[?2004h").expect("bracketed paste was enabled")..];
    assert!(tail.contains("\x1b[?2004l"), "bracketed paste is turned off: {tail:?}");
    assert!(tail.contains("\x1b[?25h"), "the cursor is shown again: {tail:?}");
    let after_mouse_on = &raw[raw.rfind("\x1b[?1000h").expect("mouse reporting was enabled")..];
    assert!(after_mouse_on.contains("\x1b[?1000l"), "mouse reporting is turned off");
    // Nothing but the resume hint follows the alternate-screen leave.
    let after = after_alt_screen(&raw);
    assert!(!after.contains("\x1b[?1049h") && !after.contains("\x1b[?1000h") && !after.contains("\x1b[?2004h"));
}

#[test]
fn without_a_terminal_talaria_points_to_exec() {
    let home = Home::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
        .env("TALARIA_HOME", home.path())
        .env("TALARIA_TEST_GUARD", "1")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .current_dir(home.work())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run talaria");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("not a terminal; use `talaria exec`"), "stderr: {stderr}");
}

#[test]
fn typing_while_a_foreground_command_runs_yields_it_and_the_pane_kills_it() {
    let home = Home::new();
    let secs = unique_secs(300);
    let model = Model::start(vec![
        ScriptedResponse::tool_call("c1", "terminal", &format!(r#"{{"command":"sleep {secs}"}}"#)),
        ScriptedResponse::text("It is in the background now; I read your message."),
    ]);
    let mut p = start_a_long_command(&home, &model, &secs);

    p.type_text("while that runs: what is 2+2?");
    p.send(b"\r");
    let requests = model.chat_requests(2);
    let body = serde_json::to_string(&requests[1].messages()).expect("messages serialize");
    assert!(body.contains("yielded_to_background"), "request: {body}");
    assert!(body.contains("OUT-OF-BAND USER MESSAGE"), "request: {body}");
    assert!(body.contains("while that runs: what is 2+2?"), "request: {body}");
    p.wait_for("I read your message.", WAIT);

    let pids = pids_with_cmdline(&["sleep", &secs]);
    assert_eq!(pids.len(), 1, "exactly one sleep {secs}: {pids:?}");
    let pid = pids[0];
    assert!(alive(pid));
    let pgid = pgid_of(pid).expect("sleep's process group");
    let me = pgid_of(std::process::id() as i32).expect("our process group");
    assert_ne!(pgid, me, "the job runs in its own process group");
    p.wait_for("job_1", WAIT);

    // Focus the panes (Tab on an empty input), kill the selected job, confirm.
    p.wait_for(" message ", WAIT);
    let before = p.contents();
    p.send(b"\t");
    wait_until("the focus to move to the panes", || p.contents() != before);
    p.send(b"k");
    p.wait_for(" Kill job_1? ", WAIT);
    p.wait_for(&format!("$ sleep {secs}"), WAIT);
    p.send(b"y");
    wait_until("the job's process group to end", || group_members(pgid).is_empty());
    assert!(!alive(pid));
    // Esc gives the focus back to the input: the focused pane's key hints go. (" message "
    // is on screen either way, so waiting for it would let Ctrl+D follow Esc at once and be
    // read as Alt+Ctrl+D.) First the pane as it is with the kill dialog gone.
    p.wait_for("Esc back", WAIT);
    p.send(b"\x1b");
    wait_until("the focus to leave the panes", || !p.contents().contains("Esc back"));

    let code = quit(&mut p);
    assert_eq!(code, 0);
    wait_until("no sleep left", || pids_with_cmdline(&["sleep", &secs]).is_empty());
    wait_until("no process of this talaria left", || processes_of_home(home.path()).is_empty());
}

#[test]
fn quitting_with_a_running_job_asks_and_leaves_no_process_behind() {
    let home = Home::new();
    let secs = unique_secs(301);
    let model = Model::start(vec![
        ScriptedResponse::tool_call("c1", "terminal", &format!(r#"{{"command":"sleep {secs}","background":true}}"#)),
        ScriptedResponse::text("Started it in the background."),
    ]);
    let mut p = spawn(&home, &model, &[]);
    p.wait_for(" message ", WAIT);
    p.type_text("start the long thing in the background");
    p.send(b"\r");
    p.wait_for("Started it in the background.", WAIT);
    p.wait_for("job_1", WAIT);
    // The job's shell may not have exec'd the sleep yet when its row shows.
    wait_until("the sleep to start", || !pids_with_cmdline(&["sleep", &secs]).is_empty());
    let pids = pids_with_cmdline(&["sleep", &secs]);
    assert_eq!(pids.len(), 1, "exactly one sleep {secs}: {pids:?}");
    assert!(!processes_of_home(home.path()).is_empty(), "the environ scan sees talaria");

    p.wait_for(" message ", WAIT);
    p.send(b"\x04");
    p.wait_for("1 background job is running. Kill the jobs and quit?", WAIT);
    p.send(b"y");
    assert_eq!(p.wait_exit(WAIT), Some(0));
    wait_until("sleep 301 to be killed", || !alive(pids[0]));
    wait_until("no process of this talaria left", || processes_of_home(home.path()).is_empty());
}

#[test]
fn w_in_a_job_log_watches_its_output_and_tells_the_user_not_the_model() {
    let home = Home::new();
    let secs = unique_secs(302);
    let command = format!(
        "echo booting; until [ -e go_pty_watch ]; do sleep 0.02; done; \
         printf 'server \\033[32mREADY\\033[0m on :8080\\n'; sleep {secs}"
    );
    let call = serde_json::json!({"command": command, "background": true}).to_string();
    let model = Model::start(vec![
        ScriptedResponse::tool_call("c1", "terminal", &call),
        ScriptedResponse::text("Started the server."),
    ]);
    let mut p = spawn(&home, &model, &[]);
    p.wait_for(" message ", WAIT);
    p.type_text("start the server");
    p.send(b"\r");
    p.wait_for("Started the server.", WAIT);
    p.wait_for("job_1", WAIT);
    // Tab on the empty input focuses the jobs pane; Enter opens the job's log.
    p.send(b"\t");
    p.send(b"\r");
    p.wait_for("booting", WAIT);
    p.send(b"w");
    p.wait_for(" Watch job_1 ", WAIT);
    p.type_text("READY on");
    p.send(b"\r");
    p.wait_for("watching /READY on/", WAIT);
    let bells = p.raw_text().matches('\x07').count();
    std::fs::write(home.work().join("go_pty_watch"), "").expect("go file");
    p.wait_for("job_1 matched your watch /READY on/: server READY on :8080", WAIT);
    wait_until("the bell (ui.notify = bell)", || p.raw_text().matches('\x07').count() > bells);
    // The user was told; the model was not: no request after the first turn's two.
    assert_eq!(model.server.chat_requests().len(), 2);
    // q closes the log view (a lone Esc followed at once by Ctrl+D would read as Alt+Ctrl+D).
    p.send(b"q");
    wait_until("the log view to close", || !p.contents().contains("job_1 · running · "));
    // Esc takes the focus from the jobs pane back to the input, where Ctrl+D quits.
    p.send(b"\x1b");
    wait_until("the focus back in the input", || !p.contents().contains("▶ job_1"));
    p.send(b"\x04");
    p.wait_for("Kill the jobs and quit?", WAIT);
    p.send(b"y");
    assert_eq!(p.wait_exit(WAIT), Some(0));
    wait_until("no process of this talaria left", || processes_of_home(home.path()).is_empty());
}

/// `talaria <args>` with this home, run to completion; its stdout.
fn run_talaria(home: &Home, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(args)
        .env("TALARIA_HOME", home.path())
        .env("TALARIA_TEST_GUARD", "1")
        .current_dir(home.work())
        .output()
        .expect("run talaria");
    assert!(out.status.success(), "talaria {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn quitting_with_keep_leaves_the_job_and_talaria_c_takes_it_back() {
    let home = Home::new();
    let secs = unique_secs(303);
    let model = Model::start(vec![
        ScriptedResponse::tool_call("c1", "terminal", &format!(r#"{{"command":"sleep {secs}","background":true}}"#)),
        ScriptedResponse::text("Started it in the background."),
    ]);
    let mut p = spawn(&home, &model, &[]);
    p.wait_for(" message ", WAIT);
    p.type_text("start the long thing in the background");
    p.send(b"\r");
    p.wait_for("Started it in the background.", WAIT);
    p.wait_for("job_1", WAIT);
    // The job's shell may not have exec'd the sleep yet when its row shows.
    wait_until("the sleep to start", || !pids_with_cmdline(&["sleep", &secs]).is_empty());
    let pids = pids_with_cmdline(&["sleep", &secs]);
    assert_eq!(pids.len(), 1, "exactly one sleep {secs}: {pids:?}");
    p.wait_for(" message ", WAIT);
    p.send(b"\x04");
    p.wait_for("keep them running", WAIT);
    p.send(b"k");
    assert_eq!(p.wait_exit(WAIT), Some(0));
    assert!(alive(pids[0]), "the kept job runs on after talaria quit");
    let listed = run_talaria(&home, &["jobs", "list"]);
    assert!(listed.contains("job_1") && listed.contains("running") && listed.contains(&secs), "{listed}");

    // `talaria -c` shows it again, and quitting with "kill" leaves nothing behind.
    let mut p = spawn(&home, &model, &["-c"]);
    p.wait_for("Background jobs (1 running)", WAIT);
    p.wait_for(" message ", WAIT);
    p.send(b"\x04");
    p.wait_for("Kill the jobs and quit?", WAIT);
    p.send(b"y");
    assert_eq!(p.wait_exit(WAIT), Some(0));
    wait_until("the kept job to be killed", || !alive(pids[0]));
    wait_until("no process of this talaria left", || processes_of_home(home.path()).is_empty());
    // A clean quit that killed its jobs keeps their record (how they ended, for the resumed
    // transcript); nothing is left running.
    let listed = run_talaria(&home, &["jobs", "list"]);
    assert!(listed.contains("job_1") && listed.contains("killed (talaria quit)"), "{listed}");
    assert!(!listed.contains("running"), "{listed}");
}

/// Start `sleep <secs>` as a background job and wait until talaria is idle again;
/// returns the job's pid.
fn start_a_background_sleep(p: &Pty, secs: &str) -> i32 {
    p.wait_for(" message ", WAIT);
    p.type_text("start the long thing in the background");
    p.send(b"\r");
    p.wait_for("Started it in the background.", WAIT);
    p.wait_for("job_1", WAIT);
    // The job is started once its supervisor runs; its shell may exec `sleep` a moment later
    // (at jobs.background_nice on a busy machine): wait for the process, not the screen.
    wait_until("the background sleep to run", || !pids_with_cmdline(&["sleep", secs]).is_empty());
    let pids = pids_with_cmdline(&["sleep", secs]);
    assert_eq!(pids.len(), 1, "exactly one sleep {secs}: {pids:?}");
    p.wait_for(" message ", WAIT);
    pids[0]
}

fn background_sleep_model(secs: &str) -> Model {
    Model::start(vec![
        ScriptedResponse::tool_call("c1", "terminal", &format!(r#"{{"command":"sleep {secs}","background":true}}"#)),
        ScriptedResponse::text("Started it in the background."),
    ])
}

/// Ctrl+D alone: nothing answers a dialog, so exiting means none was shown.
fn quits_without_a_dialog(p: &mut Pty) {
    p.send(b"\x04");
    assert_eq!(p.wait_exit(WAIT), Some(0), "talaria quit without asking; screen:\n{}", p.contents());
    assert!(!p.raw_text().contains("keep them running"), "no quit dialog");
}

#[test]
fn on_quit_kill_quits_without_asking_and_kills_the_job() {
    let home = Home::new();
    home.write_config("[jobs]\non_quit = \"kill\"\n");
    let secs = unique_secs(305);
    let model = background_sleep_model(&secs);
    let mut p = spawn(&home, &model, &[]);
    let job = start_a_background_sleep(&p, &secs);
    quits_without_a_dialog(&mut p);
    wait_until("the job to be killed", || !alive(job));
    wait_until("no process of this talaria left", || processes_of_home(home.path()).is_empty());
    let listed = run_talaria(&home, &["jobs", "list"]);
    assert!(listed.contains("job_1") && listed.contains("killed (talaria quit)"), "{listed}");
}

#[test]
fn on_quit_keep_quits_without_asking_and_keeps_the_job() {
    let home = Home::new();
    // A short grace, which a kept job does not wait out.
    home.write_config("[jobs]\non_quit = \"keep\"\norphan_grace_s = 1\n");
    let secs = unique_secs(306);
    let model = background_sleep_model(&secs);
    let mut p = spawn(&home, &model, &[]);
    let job = start_a_background_sleep(&p, &secs);
    quits_without_a_dialog(&mut p);
    assert!(alive(job), "the kept job runs on after talaria quit");
    // Twice the grace: a kept job has no deadline.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(2) {
        assert!(alive(job), "the kept job was killed after the orphan grace");
        std::thread::sleep(Duration::from_millis(100));
    }
    let owner = std::fs::read_to_string(home.path().join("jobs/job_1/owner.json")).expect("owner.json");
    assert_eq!(owner.trim(), r#""Detached""#, "kept on purpose, not waiting for a new owner");
    let listed = run_talaria(&home, &["jobs", "list"]);
    assert!(listed.contains("job_1") && listed.contains("running") && listed.contains(&secs), "{listed}");
    let killed = run_talaria(&home, &["jobs", "kill", "job_1"]);
    assert!(killed.contains("job_1: killed"), "{killed}");
    wait_until("the kept job to be killed", || !alive(job));
    wait_until("no process of this talaria left", || processes_of_home(home.path()).is_empty());
}

#[test]
fn quitting_prints_the_resume_hint_and_the_run_summary() {
    let home = Home::new();
    let model = Model::start(vec![ScriptedResponse::text("Noted.")]);
    let mut p = spawn(&home, &model, &[]);
    p.wait_for(" message ", WAIT);
    p.type_text("remember the number seven");
    p.send(b"\r");
    p.wait_for("Noted.", WAIT);

    // Ctrl+Z (hand-over and re-entry of the terminal) is tests/tui_essentials.rs's.
    let code = quit(&mut p);
    assert_eq!(code, 0);
    // The hint and the summary after it (one read may end between the two lines).
    wait_until("the resume hint and the run summary", || {
        let raw = p.raw_text();
        let after = after_alt_screen(&raw);
        after.contains("Resume this session with: talaria --resume ")
            && after.split("This run: ").nth(1).is_some_and(|line| line.contains('\n'))
    });
    let raw = p.raw_text();
    let after = after_alt_screen(&raw);
    let id = after
        .split("talaria --resume ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a session id after --resume");
    assert!(!id.is_empty());
    // The exit summary: what the run's model calls used (this model has no price: tokens only).
    assert!(after.contains("This run: 10 in / 2 out\r\n"), "{after:?}");
}

#[test]
fn sigterm_kills_the_jobs_restores_the_terminal_and_exits() {
    // SIGTERM kills the jobs at once; after SIGHUP (the terminal closed) they wait
    // `jobs.orphan_grace_s` for a `talaria -c`, then their supervisors kill them.
    for signal in [nix::sys::signal::Signal::SIGTERM, nix::sys::signal::Signal::SIGHUP] {
        let home = Home::new();
        let secs = unique_secs(302);
        home.write_config("[jobs]\norphan_grace_s = 1\n");
        let model = Model::start(vec![
            ScriptedResponse::tool_call(
                "c1",
                "terminal",
                &format!(r#"{{"command":"sleep {secs}","background":true}}"#),
            ),
            ScriptedResponse::text("Started it in the background."),
        ]);
        let mut p = spawn(&home, &model, &[]);
        p.wait_for(" message ", WAIT);
        p.type_text("start it");
        p.send(b"\r");
        p.wait_for("Started it in the background.", WAIT);
        wait_until("the background sleep to run", || !pids_with_cmdline(&["sleep", &secs]).is_empty());
        let pids = pids_with_cmdline(&["sleep", &secs]);
        assert_eq!(pids.len(), 1, "exactly one sleep {secs}: {pids:?}");
        let pid = p.child.process_id().expect("child pid") as i32;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
        assert!(p.wait_exit(WAIT).is_some(), "talaria exits on {signal}");
        wait_until("the job to be killed", || !alive(pids[0]));
        wait_until("no process of this talaria left", || processes_of_home(home.path()).is_empty());
        // The reader thread may still be taking talaria's last bytes from the terminal.
        wait_until("the alternate screen left", || p.raw_text().contains("\x1b[?1049l"));
        let raw = p.raw_text();
        let left = raw.rfind("\x1b[?1049l").expect("the alternate screen was left");
        assert!(raw.rfind("\x1b[?1049h").unwrap() < left, "{signal}: the terminal was restored last");
    }
}

/// Start a goal whose gate is `sleep <secs>`; returns once the gate's process runs.
fn start_a_hanging_gate(home: &Home, secs: &str) -> (Model, Pty, i32) {
    let model =
        Model::start(vec![ScriptedResponse::text("Working on the goal."), ScriptedResponse::text("Still working.")]);
    let p = spawn(home, &model, &[]);
    p.wait_for(" message ", WAIT);
    // Paused, the goal waits while its gate is added; unpausing starts it.
    for (command, shown) in [
        ("/pause".to_string(), "PAUSED"),
        ("/goal make the gate pass".to_string(), "the goal starts when you unpause"),
        (format!("/goal gate add sleep {secs}"), "gate 1 added"),
        ("/unpause".to_string(), "unpaused"),
    ] {
        p.type_text(&command);
        p.send(b"\r");
        p.wait_for(shown, WAIT);
    }
    wait_until("the gate's sleep to start", || !pids_with_cmdline(&["sleep", secs]).is_empty());
    let pids = pids_with_cmdline(&["sleep", secs]);
    assert_eq!(pids.len(), 1, "exactly one gate process: {pids:?}");
    let me = pgid_of(std::process::id() as i32).expect("our process group");
    assert_ne!(pgid_of(pids[0]), Some(me), "the gate runs in its own process group");
    (model, p, pids[0])
}

#[test]
fn quitting_while_a_goal_gate_runs_leaves_nothing_behind() {
    let home = Home::new();
    let secs = unique_secs(303);
    let (_model, mut p, gate) = start_a_hanging_gate(&home, &secs);
    assert_eq!(quit(&mut p), 0);
    wait_until("the gate to be killed", || !alive(gate));
    wait_until("no gate process left", || pids_with_cmdline(&["sleep", &secs]).is_empty());
    wait_until("no process of this talaria left", || processes_of_home(home.path()).is_empty());
}

#[test]
fn kill_9_of_talaria_while_a_goal_gate_runs_leaves_nothing_behind() {
    let home = Home::new();
    let secs = unique_secs(304);
    let (_model, mut p, gate) = start_a_hanging_gate(&home, &secs);
    let pid = p.child.process_id().expect("child pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(p.wait_exit(WAIT).is_some(), "talaria died");
    wait_until("the gate to be killed", || !alive(gate));
    wait_until("no gate process left", || pids_with_cmdline(&["sleep", &secs]).is_empty());
}

/// Issue #32, point 14: a bad keymap is reported as a bad config is — file, line, key and
/// what to write — and exits 2, before the terminal is taken.
#[test]
fn a_bad_keymap_is_reported_like_a_bad_config_and_exits_2() {
    let home = Home::new();
    std::fs::write(home.path().join("keymap.toml"), "[input]\nquit = \"ctrl+x\"\n").expect("keymap");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
        .env("TALARIA_HOME", home.path())
        .env("TALARIA_TEST_GUARD", "1")
        .current_dir(home.work())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run talaria");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    let file = home.path().join("keymap.toml");
    assert_eq!(
        stderr.trim(),
        format!("talaria: {}:2: input.quit: expected a list of keys: write quit = [\"ctrl+x\"]", file.display())
    );
}

/// Point 27: `talaria -c` with nothing to continue here says so.
#[test]
fn continue_with_no_earlier_session_says_it_starts_a_new_one() {
    let home = Home::new();
    let model = Model::start(vec![]);
    let mut p = spawn(&home, &model, &["-c"]);
    p.wait_for("no earlier session in", WAIT);
    p.wait_for("to continue: this is a new one", WAIT);
    assert_eq!(quit(&mut p), 0);
}

/// Point 4: `/usage` counts the whole session from the database, and labels this run's.
#[test]
fn usage_counts_the_session_over_runs_and_labels_this_run() {
    let home = Home::new();
    let model = Model::start(vec![ScriptedResponse::text("Noted."), ScriptedResponse::text("Again.")]);
    let mut p = spawn(&home, &model, &[]);
    p.wait_for(" message ", WAIT);
    p.type_text("remember seven");
    p.send(b"\r");
    p.wait_for("Noted.", WAIT);
    // The answer shows before its call has ended (the usage comes last): wait for the turn's end.
    p.wait_for("● idle", WAIT);
    assert_eq!(quit(&mut p), 0);
    let mut p = spawn(&home, &model, &["-c"]);
    p.wait_for("remember seven", WAIT);
    p.type_text("and eight");
    p.send(b"\r");
    p.wait_for("Again.", WAIT);
    // The answer is on screen before the turn has ended and been counted: wait for the
    // phase the engine reports after it (CI once typed /usage in between).
    p.wait_for("● idle", WAIT);
    p.type_text("/usage");
    p.send(b"\r");
    // The scripted model bills 10 in / 2 out per request (see the run summary test).
    p.wait_for("this session (all runs): 20 in / 4 out · this run: 10 in / 2 out", WAIT);
    assert_eq!(quit(&mut p), 0);
}

/// Point 30: `exec` on a terminal prints a progress line every few seconds while a long
/// foreground command runs (its elapsed time and last line); a pipe gets none.
#[test]
fn exec_shows_progress_of_a_long_command_on_a_terminal_only() {
    let home = Home::new();
    let marker = unique_secs(307);
    let go = format!("go_progress_{}", std::process::id());
    let command = format!("echo 'marker {marker}'; until [ -e {go} ]; do sleep 0.05; done; echo finished");
    let call = serde_json::json!({ "command": command }).to_string();
    let model =
        Model::start(vec![ScriptedResponse::tool_call("c1", "terminal", &call), ScriptedResponse::text("Done.")]);
    let url = model.server.base_url();
    let p = Pty::spawn(home.path(), &home.work(), &["exec", "--base-url", &url, "--model", "m", "go"], COLS, ROWS);
    p.wait_for(&format!("s · marker {marker}"), WAIT);
    std::fs::write(home.work().join(&go), "").expect("go file");
    p.wait_for("Done.", WAIT);
    std::fs::remove_file(home.work().join(&go)).expect("remove go file");
    // The same run with stderr on a pipe: no progress lines, however long it takes.
    let model =
        Model::start(vec![ScriptedResponse::tool_call("c1", "terminal", &call), ScriptedResponse::text("Done.")]);
    let url = model.server.base_url();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
        .args(["exec", "--base-url", &url, "--model", "m", "go"])
        .env("TALARIA_HOME", home.path())
        .env("TALARIA_TEST_GUARD", "1")
        .current_dir(home.work())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run talaria exec");
    // Well past one progress interval before the command may end.
    wait_until("the command to start", || !model.server.chat_requests().is_empty());
    std::thread::sleep(Duration::from_secs(7));
    std::fs::write(home.work().join(&go), "").expect("go file");
    let out = child.wait_with_output().expect("exec output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains(" … "), "no progress line on a pipe: {stderr}");
}

/// The #35 finding: Esc while a goal's gate ran said "nothing to stop: Talaria is idle" (the
/// TUI knew only turns); the phase now says gates, and Esc stops them.
#[test]
fn esc_while_a_goal_gate_runs_stops_it() {
    let home = Home::new();
    let secs = unique_secs(305);
    let (_model, mut p, gate) = start_a_hanging_gate(&home, &secs);
    p.wait_for("running gates", WAIT);
    send_esc(&p, "goal paused: you interrupted it");
    wait_until("the gate to be killed", || !alive(gate));
    assert!(!p.contents().contains("nothing to stop"), "{}", p.contents());
    assert_eq!(quit(&mut p), 0);
    wait_until("no gate process left", || pids_with_cmdline(&["sleep", &secs]).is_empty());
}

/// What `pending:<session>` in state.db holds now (the crash copy of what waits).
fn saved_pending(home: &Home) -> Option<String> {
    let db = rusqlite::Connection::open(home.path().join("state.db")).ok()?;
    db.query_row("SELECT value FROM state_meta WHERE key LIKE 'pending:%'", [], |r| r.get(0)).ok()
}

/// The #35 finding end to end: LONG command, Tab-queue a message, type a redirect; once
/// the redirect is delivered, kill -9. `talaria -c` gives the queued message back.
#[test]
fn kill_9_after_a_redirect_is_delivered_keeps_the_queued_message_for_talaria_c() {
    let home = Home::new();
    let secs = unique_secs(306);
    let model = Model::start(vec![
        ScriptedResponse::tool_call("c1", "terminal", &format!(r#"{{"command":"sleep {secs}"}}"#)),
        ScriptedResponse::hang(),
        ScriptedResponse::text("Doing it next."),
    ]);
    let mut p = start_a_long_command(&home, &model, &secs);
    p.type_text("do this next");
    p.send(b"\t");
    p.wait_for("queued for the next turn: do this next", WAIT);
    p.type_text("stop and look");
    p.send(b"\r");
    // Delivered: the model has it (the command moved to the background meanwhile).
    let requests = model.chat_requests(2);
    let body = serde_json::to_string(&requests[1].messages()).expect("messages serialize");
    assert!(body.contains("stop and look") && !body.contains("do this next"), "request: {body}");
    p.wait_for("delivered mid-turn", WAIT);
    wait_until("the crash copy to hold only the queued message", || {
        saved_pending(&home).as_deref() == Some(r#"["do this next"]"#)
    });
    assert!(p.contents().contains("queued for the next turn: do this next"), "still shown:\n{}", p.contents());

    let pid = p.child.process_id().expect("child pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(p.wait_exit(WAIT).is_some(), "talaria died");
    drop(p);

    let mut p = spawn(&home, &model, &["-c"]);
    p.wait_for("messages you typed before talaria stopped are back in the input", WAIT);
    p.wait_for("do this next", WAIT);
    // It is in the input: Enter sends it.
    p.send(b"\r");
    let requests = model.chat_requests(3);
    let last = requests[2].messages().last().map(|m| m.text().to_string()).unwrap_or_default();
    assert_eq!(last, "do this next");
    p.wait_for("Doing it next.", WAIT);
    assert_eq!(quit(&mut p), 0);
    wait_until("no sleep left", || pids_with_cmdline(&["sleep", &secs]).is_empty());
}

/// `talaria jobs log` on a terminal: a job that printed an OSC 52 clipboard write, a window
/// title, a C1 CSI and an RLO emits none of them; piped, the bytes come out as they were.
/// (The job is kept running past a quit, so its record stays to be read from a shell.)
#[test]
fn jobs_log_on_a_terminal_emits_no_control_sequences_of_the_job() {
    let home = Home::new();
    let secs = unique_secs(328);
    // \033]52 (clipboard), \033]0; (title), \302\233 (C1 CSI, UTF-8), \342\200\256 (RLO).
    let printf = format!(
        "printf 'start {secs}\\033]52;c;cHduZWQ=\\007\\033]0;evil title\\007 \\302\\23331mC1 \\342\\200\\256txet end\\n'; \
         sleep {secs}"
    );
    let args = serde_json::json!({ "command": printf, "background": true }).to_string();
    let model =
        Model::start(vec![ScriptedResponse::tool_call("c1", "terminal", &args), ScriptedResponse::text("Started.")]);
    let mut p = spawn(&home, &model, &[]);
    p.wait_for(" message ", WAIT);
    p.type_text("print things");
    p.send(b"\r");
    p.wait_for("Started.", WAIT);
    let piped = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_talaria"))
            .args(["jobs", "log", "job_1"])
            .env("TALARIA_HOME", home.path())
            .env("TALARIA_TEST_GUARD", "1")
            .output()
            .expect("run talaria jobs log")
            .stdout
    };
    let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    wait_until("the job's output in its log", || has(&piped(), b" end"));
    p.wait_for(" message ", WAIT);
    p.send(b"\x04");
    p.wait_for("keep them running", WAIT);
    p.send(b"k");
    assert_eq!(p.wait_exit(WAIT), Some(0));
    // Piped: raw, so the job really printed them (the test bites).
    let raw = piped();
    assert!(has(&raw, b"\x1b]52;") && has(&raw, "\u{202e}".as_bytes()), "{:?}", String::from_utf8_lossy(&raw));
    for args in [&["jobs", "log", "job_1"][..], &["jobs", "list"][..]] {
        let mut p = Pty::spawn(home.path(), &home.work(), args, COLS, ROWS);
        assert_eq!(p.wait_exit(WAIT), Some(0), "{args:?}");
        let raw = p.raw.lock().unwrap().clone();
        for bad in [&b"\x1b]"[..], b"\x07", "\u{9b}".as_bytes(), "\u{202e}".as_bytes()] {
            assert!(!has(&raw, bad), "{args:?} emitted {bad:?}: {:?}", String::from_utf8_lossy(&raw));
        }
        let text = String::from_utf8_lossy(&raw);
        assert!(text.contains(&secs), "{args:?}: {text}");
    }
    // --raw on a terminal: the bytes as they are.
    let mut p = Pty::spawn(home.path(), &home.work(), &["jobs", "log", "job_1", "--raw"], COLS, ROWS);
    assert_eq!(p.wait_exit(WAIT), Some(0));
    assert!(has(&p.raw.lock().unwrap(), b"\x1b]52;"));
    let killed = run_talaria(&home, &["jobs", "kill", "job_1"]);
    assert!(killed.contains("killed"), "{killed}");
}

/// Answer the approval showing `shown` with `key`. Keys are ignored until the prompt is
/// armed (a moment after it shows), so the key is sent again until the prompt is gone.
fn answer(p: &Pty, key: &[u8], shown: &str) {
    let deadline = Instant::now() + WAIT;
    p.wait_for(shown, WAIT);
    while p.contents().contains(shown) {
        assert!(Instant::now() < deadline, "the prompt for {shown} stayed: {}", p.contents());
        p.send(key);
        let sent = Instant::now();
        while p.contents().contains(shown) && sent.elapsed() < Duration::from_millis(100) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A session approval of a write next to the workspace covers that directory only: a later
/// write to talaria's own config.toml asks again (a protected path: every time).
#[test]
fn a_session_approval_of_a_sibling_write_does_not_cover_talarias_config() {
    let home = Home::new();
    let outside = tempfile::tempdir().unwrap();
    let (fake_home, tmp) = (outside.path().join("home"), outside.path().join("tmp"));
    std::fs::create_dir_all(&fake_home).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    home.write_config("# the user's settings\n");
    let config = home.path().join("config.toml").display().to_string();
    let call = |id: &str, path: &str, content: &str| {
        let args = serde_json::json!({ "path": path, "content": content }).to_string();
        ScriptedResponse::tool_call(id, "write_file", &args)
    };
    let model = Model::start(vec![
        call("c1", "../sibling/notes.md", "first\n"),
        call("c2", "../sibling/more.md", "second\n"),
        call("c3", &config, "[approvals]\nmode = \"off\"\n"),
        ScriptedResponse::text("All written."),
    ]);
    let url = model.server.base_url();
    let env = [("HOME", fake_home.to_str().unwrap()), ("TMPDIR", tmp.to_str().unwrap())];
    let p = Pty::spawn_with_env(home.path(), &home.work(), &["--base-url", &url, "--model", "m"], COLS, ROWS, &env);
    p.wait_for(" message ", WAIT);
    p.type_text("write the notes");
    p.send(b"\r");
    let sibling = home.path().join("sibling");
    answer(&p, b"s", &format!("$ write {}", sibling.join("notes.md").display()));
    // The second write, in the same directory, needs no question; the config's does.
    let screen = p.wait_for(&format!("$ write {config}"), WAIT);
    assert!(screen.contains("each write there asks"), "{screen}");
    assert!(std::fs::read_to_string(sibling.join("more.md")).is_ok_and(|t| t == "second\n"));
    answer(&p, b"s", &format!("$ write {config}"));
    p.wait_for("All written.", WAIT);
    assert_eq!(std::fs::read_to_string(sibling.join("notes.md")).unwrap(), "first\n");
    // Answered "session" for a protected path: written this once, and no rule made of it.
    let requests = model.chat_requests(4);
    let last =
        requests[3].body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_string();
    assert!(last.contains("this write only"), "{last}");
}
