//! The TUI's terminal hand-offs in a real pseudo-terminal: Ctrl+G runs `$VISUAL` on the
//! input, Ctrl+Z gives the terminal back and takes it again, `/copy` writes OSC 52.

mod common;
#[path = "common/pty.rs"]
mod pty;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::Home;
use pty::Pty;

/// talaria in a 100×30 pseudo-terminal in `home`'s work directory.
fn spawn(home: &Home, env: &[(&str, &str)]) -> Pty {
    Pty::spawn_with_env(home.path(), &home.work(), &[], 100, 30, env)
}

/// Wait for talaria to exit.
fn exited(pty: &mut Pty, timeout: Duration) -> bool {
    pty.wait_exit(timeout).is_some()
}

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn editor_suspend_and_copy_hand_the_terminal_over_and_back() {
    let home = Home::new();
    let editor = home.path().join("fake-editor.sh");
    std::fs::write(&editor, "#!/bin/sh\nprintf 'from the editor' > \"$1\"\n").expect("write editor script");
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).expect("chmod editor");
    let mut pty = spawn(&home, &[("VISUAL", editor.to_str().expect("utf-8 temp path"))]);
    pty.wait_for("message", WAIT);

    pty.type_text("draft");
    pty.wait_for("draft", WAIT);
    pty.send(b"\x07"); // Ctrl+G
    pty.wait_for("from the editor", WAIT);
    assert!(!pty.contents().contains("draft"), "the editor's text replaces the input");

    // In a pty session with no job control SIGTSTP is discarded, so Ctrl+Z comes straight
    // back: the main screen is restored, then the alternate screen is entered and redrawn.
    let before = pty.raw.lock().unwrap().len();
    pty.send(b"\x1a"); // Ctrl+Z
    let deadline = Instant::now() + WAIT;
    loop {
        let raw = pty.raw.lock().unwrap()[before..].to_vec();
        let text = String::from_utf8_lossy(&raw);
        if let (Some(left), Some(entered)) = (text.find("\x1b[?1049l"), text.rfind("\x1b[?1049h")) {
            if entered > left && pty.contents().contains("from the editor") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "no suspend and redraw; screen:\n{}", pty.contents());
        std::thread::sleep(Duration::from_millis(25));
    }

    pty.send(b"\r");
    // "● idle" is on screen before the turn starts too: wait for the answer, then idle.
    pty.wait_for("Hello! I am Talaria", WAIT);
    pty.wait_for("● idle", WAIT);
    pty.type_text("/copy");
    pty.send(b"\r");
    pty.wait_for("copied the last answer", WAIT);
    assert!(pty.raw_text().contains("\x1b]52;c;"), "OSC 52 was written");

    // Ctrl+D on the empty input quits; if the demo turn still runs it asks first, and `y`
    // answers (once quitting, keys are ignored).
    pty.send(b"\x04");
    let deadline = Instant::now() + WAIT;
    while !pty.contents().contains(" Quit? ") {
        if exited(&mut pty, Duration::from_millis(25)) {
            return;
        }
        assert!(Instant::now() < deadline, "no quit and no question; screen:\n{}", pty.contents());
    }
    pty.send(b"y");
    assert!(exited(&mut pty, WAIT), "talaria did not quit; screen:\n{}", pty.contents());
}
