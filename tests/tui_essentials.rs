//! The TUI's terminal hand-offs in a real pseudo-terminal: Ctrl+G runs `$VISUAL` on the
//! input, Ctrl+Z gives the terminal back and takes it again, `/copy` writes OSC 52.

mod common;

use std::io::{Read, Write};
use std::num::NonZeroU16;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Home;
use portable_pty::{native_pty_system, Child, CommandBuilder, MasterPty, PtySize};

/// talaria in a pseudo-terminal, with a screen model and every byte it wrote.
struct Pty {
    screen: Arc<Mutex<vt100::Parser>>,
    raw: Arc<Mutex<Vec<u8>>>,
    writer: Box<dyn Write + Send>,
    child: Box<dyn Child + Send + Sync>,
    _master: Box<dyn MasterPty + Send>,
}

impl Pty {
    fn spawn(home: &Home, env: &[(&str, &str)]) -> Pty {
        let pair = native_pty_system()
            .openpty(PtySize { rows: 30, cols: 100, pixel_width: 0, pixel_height: 0 })
            .expect("openpty");
        let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_talaria"));
        cmd.cwd(home.work());
        cmd.env("TALARIA_HOME", home.path());
        cmd.env("TALARIA_TEST_GUARD", "1");
        cmd.env("TERM", "xterm-256color");
        cmd.env_remove("OPENAI_API_KEY");
        cmd.env_remove("OPENROUTER_API_KEY");
        cmd.env_remove("ANTHROPIC_API_KEY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = pair.slave.spawn_command(cmd).expect("spawn talaria");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("reader");
        let rows = NonZeroU16::new(30).expect("rows");
        let cols = NonZeroU16::new(100).expect("cols");
        let screen = Arc::new(Mutex::new(vt100::Parser::new(rows, cols, 0)));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let (s, r) = (screen.clone(), raw.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 16384];
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                r.lock().expect("raw").extend_from_slice(&buf[..n]);
                s.lock().expect("screen").process(&buf[..n]);
            }
        });
        let writer = pair.master.take_writer().expect("writer");
        Pty { screen, raw, writer, child, _master: pair.master }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("write to pty");
        self.writer.flush().expect("flush pty");
    }

    fn type_text(&mut self, text: &str) {
        for ch in text.chars() {
            let mut b = [0u8; 4];
            self.send(ch.encode_utf8(&mut b).as_bytes());
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn contents(&self) -> String {
        self.screen.lock().expect("screen").screen().contents()
    }

    fn raw_text(&self) -> String {
        String::from_utf8_lossy(&self.raw.lock().expect("raw")).into_owned()
    }

    fn wait_for(&self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.contents().contains(needle) {
            assert!(Instant::now() < deadline, "timed out waiting for {needle:?}; screen:\n{}", self.contents());
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        false
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn editor_suspend_and_copy_hand_the_terminal_over_and_back() {
    let home = Home::new();
    let editor = home.path().join("fake-editor.sh");
    std::fs::write(&editor, "#!/bin/sh\nprintf 'from the editor' > \"$1\"\n").expect("write editor script");
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).expect("chmod editor");
    let mut pty = Pty::spawn(&home, &[("VISUAL", editor.to_str().expect("utf-8 temp path"))]);
    pty.wait_for("message", WAIT);

    pty.type_text("draft");
    pty.wait_for("draft", WAIT);
    pty.send(b"\x07"); // Ctrl+G
    pty.wait_for("from the editor", WAIT);
    assert!(!pty.contents().contains("draft"), "the editor's text replaces the input");

    // In a pty session with no job control SIGTSTP is discarded, so Ctrl+Z comes straight
    // back: the main screen is restored, then the alternate screen is entered and redrawn.
    let before = pty.raw.lock().expect("raw").len();
    pty.send(b"\x1a"); // Ctrl+Z
    let deadline = Instant::now() + WAIT;
    loop {
        let raw = pty.raw.lock().expect("raw")[before..].to_vec();
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
        if pty.wait_exit(Duration::from_millis(25)) {
            return;
        }
        assert!(Instant::now() < deadline, "no quit and no question; screen:\n{}", pty.contents());
    }
    pty.send(b"y");
    assert!(pty.wait_exit(WAIT), "talaria did not quit; screen:\n{}", pty.contents());
}
