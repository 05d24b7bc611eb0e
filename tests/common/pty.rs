//! Driving the real binary in a pseudo-terminal: portable-pty + vt100, answering the
//! cursor-position query the way a terminal would.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, Child, CommandBuilder, MasterPty, PtySize};

pub struct Pty {
    pub screen: Arc<Mutex<vt100::Parser>>,
    /// Every byte talaria wrote, in order.
    pub raw: Arc<Mutex<Vec<u8>>>,
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    pub child: Box<dyn Child + Send + Sync>,
    _master: Box<dyn MasterPty + Send>,
    /// Set when the reader saw the end of the terminal's output (every writer gone).
    drained: Arc<std::sync::atomic::AtomicBool>,
}

impl Pty {
    /// Start talaria with `args` in a `cols`×`rows` terminal, TALARIA_HOME = `home`.
    pub fn spawn(home: &Path, cwd: &Path, args: &[&str], cols: u16, rows: u16) -> Pty {
        Pty::spawn_with_env(home, cwd, args, cols, rows, &[])
    }

    /// Like [`Pty::spawn`], with these environment variables set too.
    pub fn spawn_with_env(home: &Path, cwd: &Path, args: &[&str], cols: u16, rows: u16, env: &[(&str, &str)]) -> Pty {
        let system = native_pty_system();
        let pair = system.openpty(PtySize { rows, cols, pixel_width: 0, pixel_height: 0 }).expect("openpty");
        // Benches may drive another build of talaria (a release binary from a dev-built bench).
        let exe = std::env::var_os("TALARIA_PTY_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_talaria").into());
        let mut cmd = CommandBuilder::new(exe);
        cmd.args(args);
        cmd.cwd(cwd);
        cmd.env("TALARIA_HOME", home);
        cmd.env("TALARIA_TEST_GUARD", "1");
        cmd.env("TERM", "xterm-256color");
        cmd.env_remove("OPENAI_API_KEY");
        cmd.env_remove("OPENROUTER_API_KEY");
        cmd.env_remove("ANTHROPIC_API_KEY");
        cmd.env_remove("TMUX");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = pair.slave.spawn_command(cmd).expect("spawn talaria");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("reader");
        let writer: Arc<Mutex<Box<dyn Write + Send>>> =
            Arc::new(Mutex::new(pair.master.take_writer().expect("writer")));
        let screen = Arc::new(Mutex::new(vt100::Parser::new(
            std::num::NonZeroU16::new(rows.max(1)).expect("rows > 0"),
            std::num::NonZeroU16::new(cols.max(1)).expect("cols > 0"),
            0,
        )));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let drained = Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let drained = drained.clone();
            let screen = screen.clone();
            let raw = raw.clone();
            let writer = writer.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                loop {
                    let n = match reader.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let bytes = &buf[..n];
                    // Answer "where is the cursor?" like a terminal would.
                    if bytes.windows(4).any(|w| w == b"\x1b[6n") {
                        let (row, col) = screen.lock().unwrap().screen().cursor_position();
                        let _ = writer.lock().unwrap().write_all(format!("\x1b[{};{}R", row + 1, col + 1).as_bytes());
                    }
                    raw.lock().unwrap().extend_from_slice(bytes);
                    screen.lock().unwrap().process(bytes);
                }
                drained.store(true, std::sync::atomic::Ordering::SeqCst);
            });
        }
        Pty { screen, raw, writer, child, _master: pair.master, drained }
    }

    pub fn send(&self, bytes: &[u8]) {
        let mut w = self.writer.lock().unwrap();
        w.write_all(bytes).expect("write to pty");
        w.flush().ok();
    }

    /// Type text one key at a time (a paste would arrive bracketed).
    pub fn type_text(&self, text: &str) {
        for ch in text.chars() {
            let mut b = [0u8; 4];
            self.send(ch.encode_utf8(&mut b).as_bytes());
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn contents(&self) -> String {
        self.screen.lock().unwrap().screen().contents()
    }

    /// Wait until the screen shows `needle` (panics with the screen after `timeout`).
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let text = self.contents();
            if text.contains(needle) {
                return text;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {needle:?}; screen:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn raw_text(&self) -> String {
        String::from_utf8_lossy(&self.raw.lock().unwrap()).into_owned()
    }

    /// Wait for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<u32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                // What it wrote before exiting may still be on its way to the reader: wait
                // for the end of the output (bounded: a process it left may hold the pty).
                let drain_until = Instant::now() + Duration::from_secs(5);
                while !self.drained.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < drain_until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                return Some(status.exit_code());
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}
