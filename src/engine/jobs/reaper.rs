//! No orphans, even after `kill -9` (DESIGN §4): `talaria __reaper` is a tiny process
//! holding a pipe from talaria. Talaria writes `add <pgid>` / `del <pgid>` lines (and
//! optionally `grace <seconds>`), and `bye` on a clean shutdown. When the pipe closes
//! without `bye`, talaria died: the reaper kills every registered group and exits.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::{signal, SigHandler, Signal};

use super::group;

/// What the reaper does with one line from talaria.
#[derive(Debug, Clone, PartialEq)]
pub enum ReaperLine {
    Add(i32),
    Del(i32),
    Grace(Duration),
    Bye,
    Unknown,
}

pub fn parse_line(line: &str) -> ReaperLine {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("add"), Some(n), None) => n.parse().map(ReaperLine::Add).unwrap_or(ReaperLine::Unknown),
        (Some("del"), Some(n), None) => n.parse().map(ReaperLine::Del).unwrap_or(ReaperLine::Unknown),
        (Some("grace"), Some(s), None) => s
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| ReaperLine::Grace(Duration::from_secs_f64(s.min(60.0))))
            .unwrap_or(ReaperLine::Unknown),
        (Some("bye"), None, None) => ReaperLine::Bye,
        _ => ReaperLine::Unknown,
    }
}

/// The body of `talaria __reaper`. Never returns.
pub fn run() -> ! {
    // Own session and group: a signal to talaria's group (terminal hang-up, Ctrl+C in a
    // cooked terminal) must not take the reaper down before it has done its work. When the
    // parent already made us a session leader this fails harmlessly.
    let _ = nix::unistd::setsid();
    // SAFETY: setting dispositions to SIG_IGN installs no handler code.
    unsafe {
        let _ = signal(Signal::SIGHUP, SigHandler::SigIgn);
        let _ = signal(Signal::SIGINT, SigHandler::SigIgn);
        let _ = signal(Signal::SIGPIPE, SigHandler::SigIgn);
    }
    let mut groups = BTreeSet::new();
    let mut grace = Duration::from_secs(1);
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        match parse_line(&line) {
            ReaperLine::Add(pgid) => {
                groups.insert(pgid);
            }
            ReaperLine::Del(pgid) => {
                groups.remove(&pgid);
            }
            ReaperLine::Grace(g) => grace = g,
            ReaperLine::Bye => std::process::exit(0),
            ReaperLine::Unknown => {}
        }
    }
    let pgids: Vec<i32> = groups.into_iter().collect();
    let survivors = group::kill_groups_blocking(&pgids, grace);
    std::process::exit(if survivors.is_empty() { 0 } else { 1 })
}

/// Talaria's end of the pipe to its reaper.
#[derive(Debug)]
pub struct ReaperLink {
    stdin: Mutex<Option<std::process::ChildStdin>>,
    pid: u32,
}

impl ReaperLink {
    /// Start `<exe> __reaper` in its own session with a pipe on its stdin.
    pub fn spawn(exe: &Path, grace: Duration) -> std::io::Result<ReaperLink> {
        let mut cmd = Command::new(exe);
        cmd.arg("__reaper").stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
        // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                super::run::close_inherited_fds_on_exec();
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let pid = child.id();
        let stdin = child.stdin.take();
        // Reap it when it exits (it exits on `bye` or when we die, so this thread is short
        // lived in practice); waiting on its own pid never steals other children's statuses.
        std::thread::Builder::new().name("reaper-wait".into()).spawn(move || {
            let _ = child.wait();
        })?;
        let link = ReaperLink { stdin: Mutex::new(stdin), pid };
        link.send(&format!("grace {}", grace.as_secs_f64()));
        Ok(link)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn add(&self, pgid: i32) {
        self.send(&format!("add {pgid}"));
    }

    pub fn del(&self, pgid: i32) {
        self.send(&format!("del {pgid}"));
    }

    /// A clean shutdown: the reaper exits without killing anything.
    pub fn bye(&self) {
        self.send("bye");
        self.lock().take();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<std::process::ChildStdin>> {
        self.stdin.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, line: &str) {
        let mut guard = self.lock();
        let Some(stdin) = guard.as_mut() else { return };
        if let Err(e) = writeln!(stdin, "{line}").and_then(|_| stdin.flush()) {
            tracing::warn!(error = %e, "the job reaper is gone; jobs may outlive a crash of talaria");
            guard.take();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        assert_eq!(parse_line("add 42"), ReaperLine::Add(42));
        assert_eq!(parse_line("del 42\n"), ReaperLine::Del(42));
        assert_eq!(parse_line("grace 2.5"), ReaperLine::Grace(Duration::from_millis(2500)));
        assert_eq!(parse_line("bye"), ReaperLine::Bye);
        assert_eq!(parse_line("add x"), ReaperLine::Unknown);
        assert_eq!(parse_line("grace -1"), ReaperLine::Unknown);
        assert_eq!(parse_line("bye now"), ReaperLine::Unknown);
    }
}
