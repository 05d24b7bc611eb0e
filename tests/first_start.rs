//! Starting the real `talaria` in a pseudo-terminal, as a user does: the first screen has
//! the demo model's notice and the whole status line (model, sandbox, context use), on a
//! first-ever start and on a later one; an idle session ends on SIGTERM or SIGHUP without
//! running into the shutdown deadline.

mod common;
#[path = "common/pty.rs"]
mod pty;

use std::time::{Duration, Instant};

use common::Home;
use pty::Pty;

/// Deadline for things that take milliseconds; never a timing assertion.
const WAIT: Duration = Duration::from_secs(30);

/// talaria with no key and no server configured: the built-in demo model.
fn spawn_demo(home: &Home) -> Pty {
    Pty::spawn(home.path(), &home.work(), &[], 120, 40)
}

/// The last line of the screen that holds `needle`.
fn line_with(screen: &str, needle: &str) -> Option<String> {
    screen.lines().rev().find(|l| l.contains(needle)).map(str::to_string)
}

/// The status line once the engine has reported in: the model, the sandbox and the context
/// use on one line.
fn wait_for_status(p: &Pty) -> (String, String) {
    let deadline = Instant::now() + WAIT;
    loop {
        let screen = p.contents();
        if let Some(line) = line_with(&screen, "ctx ").filter(|l| l.contains("talaria-demo")) {
            return (screen, line);
        }
        assert!(Instant::now() < deadline, "no status line with the model and ctx; screen:\n{screen}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn log_text(home: &Home) -> String {
    let mut text = String::new();
    if let Ok(entries) = std::fs::read_dir(home.path().join("logs")) {
        for entry in entries.flatten() {
            text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    text
}

#[test]
fn the_first_screen_has_the_demo_notice_and_the_whole_status_line() {
    let home = Home::new();
    for start in ["first-ever start", "later start"] {
        let mut p = spawn_demo(&home);
        let (screen, status) = wait_for_status(&p);
        assert!(screen.contains("built-in demo model"), "{start}: the demo notice; screen:\n{screen}");
        // The sandbox's label is there whatever this kernel offers ("sandbox", or "NO SANDBOX").
        assert!(status.contains("SANDBOX") || status.contains("sandbox"), "{start}: {status:?}");
        assert!(status.contains("busy:"), "{start}: {status:?}");
        p.send(b"\x04");
        assert!(p.wait_exit(WAIT).is_some(), "{start}: Ctrl+D quits; screen:\n{}", p.contents());
    }
    let log = log_text(&home);
    assert_eq!(log.matches("talaria starting").count(), 2, "{log}");
}

/// How long quitting waits for the engine (`SHUTDOWN_WAIT` in src/tui/mod.rs).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

#[test]
fn an_idle_session_ends_on_sigterm_and_sighup_without_the_shutdown_deadline() {
    use nix::sys::signal::{kill, Signal};
    let signals = [Signal::SIGTERM, Signal::SIGHUP];
    let homes: Vec<Home> = signals.iter().map(|_| Home::new()).collect();
    let mut ptys: Vec<Pty> = homes.iter().map(spawn_demo).collect();
    for p in &ptys {
        wait_for_status(p);
    }
    // The condition itself, not an ordering: the screen has been idle (nothing woke its
    // loop) for longer than quitting waits for the engine, as in a terminal left alone.
    std::thread::sleep(SHUTDOWN_WAIT + Duration::from_secs(1));
    for (p, signal) in ptys.iter().zip(signals) {
        let pid = p.child.process_id().expect("child pid") as i32;
        kill(nix::unistd::Pid::from_raw(pid), signal).expect("signal talaria");
    }
    for ((p, signal), home) in ptys.iter_mut().zip(signals).zip(&homes) {
        assert!(p.wait_exit(WAIT).is_some(), "talaria exits on {signal}");
        let log = log_text(home);
        let received = if signal == Signal::SIGHUP { "hang-up" } else { "signal received; shutting down" };
        assert!(log.contains(received), "{signal}: {log}");
        assert!(!log.contains("did not finish shutting down"), "{signal}: the engine was not waited for:\n{log}");
    }
}
