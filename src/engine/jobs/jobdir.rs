//! `jobs/<id>/`: what a supervisor and the talaria following it share on disk. The
//! supervisor writes the log segments, `index.json` (where the kept log starts),
//! `leader.json` (the leader exited but its group goes on) and `exit.json` (written last,
//! atomically). Talaria writes `spec.json` (what ran, for a later talaria: the supervisor
//! gets its spec over a pipe), `owner.json` (the lease) and `kill` (a kill it asked for, so
//! the exit record says `killed`); `stdin` is a FIFO.
//!
//! No job can write here (DESIGN §6a: the jobs directory is a hole in every writable root),
//! but one file: its own `cwd`, which is read as data. Even so every file is opened without
//! following a symlink, created with `O_EXCL`, and read with a size cap.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::group;

/// What the supervisor runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Spec {
    pub(crate) shell: String,
    pub(crate) login_shell: bool,
    /// The `-c` script (already wrapped for cwd tracking).
    pub(crate) script: String,
    pub(crate) cwd: PathBuf,
    /// A FIFO for `process write/close` instead of /dev/null.
    pub(crate) stdin: bool,
    pub(crate) log_max_bytes: u64,
    /// `jobs.orphan_grace_s`: how long a job whose owner is gone waits for a new one.
    pub(crate) orphan_grace_s: f64,
    /// `terminal.kill_grace_s`: SIGTERM to SIGKILL.
    pub(crate) kill_grace_s: f64,
    /// The sandbox the command runs in (DESIGN §6); None only for what the user approved to
    /// run outside it.
    #[serde(default)]
    pub(crate) sandbox: Option<crate::engine::sandbox::Policy>,
    /// A shell command the supervisor runs before it kills the job itself (lease expiry,
    /// deleted job directory): a remote job's remote group is killed over its backend.
    #[serde(default)]
    pub(crate) on_kill: Option<String>,
    /// The script writes its final directory to `cwd` (the one file of the job directory a
    /// sandboxed job may write).
    #[serde(default)]
    pub(crate) track_cwd: bool,
    /// `jobs.nice`, or `jobs.background_nice` for a background job: the supervisor lowers
    /// its own priority and its session's autogroup to it before it starts the command,
    /// which inherits the one and gets the other for its own session (`priority.rs`).
    #[serde(default)]
    pub(crate) nice: i32,
}

/// The supervisor's first line on its stdout: the job has started under `setsid`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Handshake {
    Started { supervisor_pid: u32, supervisor_start: u64, pgid: i32, leader_start: u64 },
    Failed { error: String },
}

/// How the job ended (`exit.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExitRecord {
    pub(crate) code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) killed: bool,
    /// Why it was killed (`owner gone`, or what talaria wrote in `kill`).
    pub(crate) reason: Option<String>,
    pub(crate) ended_at_ms: u64,
    /// What the job printed in all (a follower that fell behind rotation learns the
    /// true totals here).
    #[serde(default)]
    pub(crate) output: OutputTotals,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutputTotals {
    pub(crate) chars: u64,
    pub(crate) bytes: u64,
    pub(crate) lines: u64,
}

/// The leader exited while other processes of its group still ran (`leader.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LeaderExit {
    pub(crate) code: Option<i32>,
    pub(crate) signal: Option<i32>,
}

/// Who holds the lease on a job (`owner.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Owner {
    /// A talaria process; the lease lapses when it is gone (pid and start time checked).
    Process { pid: u32, start: Option<u64> },
    /// Kept running on purpose (`jobs.on_quit = keep`): no deadline.
    Detached,
}

impl Owner {
    pub(crate) fn me() -> Owner {
        let pid = std::process::id();
        Owner::Process { pid, start: group::proc_stat(pid as i32).map(|s| s.start_ticks) }
    }

    /// The lease holds: detached, or the owner process is alive.
    pub(crate) fn holds(&self) -> bool {
        match self {
            Owner::Detached => true,
            Owner::Process { pid, start } => group::process_alive(*pid as i32, *start),
        }
    }
}

/// One kept log segment as `index.json` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IndexSegment {
    pub(crate) n: u64,
    pub(crate) start_line: u64,
    pub(crate) mid_line: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IndexFile {
    pub(crate) segments: Vec<IndexSegment>,
    pub(crate) dropped_bytes: u64,
}

/// The files of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDir {
    pub path: PathBuf,
}

impl JobDir {
    pub fn new(jobs_dir: &Path, id: &str) -> JobDir {
        JobDir { path: jobs_dir.join(id) }
    }

    pub(crate) fn spec(&self) -> PathBuf {
        self.path.join("spec.json")
    }
    pub(crate) fn exit(&self) -> PathBuf {
        self.path.join("exit.json")
    }
    pub(crate) fn leader(&self) -> PathBuf {
        self.path.join("leader.json")
    }
    pub(crate) fn owner(&self) -> PathBuf {
        self.path.join("owner.json")
    }
    pub(crate) fn index(&self) -> PathBuf {
        self.path.join("index.json")
    }
    pub(crate) fn kill(&self) -> PathBuf {
        self.path.join("kill")
    }
    pub(crate) fn stdin(&self) -> PathBuf {
        self.path.join("stdin")
    }
    /// Its presence asks the supervisor to close the job's stdin.
    pub(crate) fn stdin_eof(&self) -> PathBuf {
        self.path.join("stdin.eof")
    }
    pub(crate) fn cwd_file(&self) -> PathBuf {
        self.path.join("cwd")
    }
    pub(crate) fn segment(&self, n: u64) -> PathBuf {
        self.path.join(format!("out.{n}.log"))
    }

    pub(crate) fn read_exit(&self) -> Option<ExitRecord> {
        read_json(&self.exit())
    }

    pub(crate) fn read_owner(&self) -> Option<Owner> {
        read_json(&self.owner())
    }

    pub(crate) fn write_owner(&self, owner: &Owner) -> std::io::Result<()> {
        write_json(&self.owner(), owner)
    }

    pub(crate) fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }

    /// Ask the supervisor to record the job as killed, with `reason` (may be empty).
    pub(crate) fn write_kill(&self, reason: &str) -> std::io::Result<()> {
        use std::io::Write;
        let mut file = open_write(&self.kill(), false)?;
        file.write_all(reason.as_bytes())
    }

    /// The reason talaria gave in `kill`, as data: None when no kill was asked.
    pub(crate) fn read_kill(&self) -> Option<String> {
        let bytes = read_capped(&self.kill(), 4096).ok()?;
        Some(reason_as_data(&String::from_utf8_lossy(&bytes)))
    }

    /// Ask the supervisor to close the job's stdin.
    pub(crate) fn mark_stdin_eof(&self) -> std::io::Result<()> {
        open_write(&self.stdin_eof(), false).map(drop)
    }

    /// The `cwd` file, made empty before the job starts (so the sandbox can grant it alone).
    pub(crate) fn create_cwd_file(&self) -> std::io::Result<()> {
        create_new(&self.cwd_file()).map(drop)
    }

    /// The job's final directory as its shell wrote it: an existing absolute directory.
    pub(crate) fn read_cwd(&self) -> Option<PathBuf> {
        let bytes = read_capped(&self.cwd_file(), 8192).ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let path = PathBuf::from(text.strip_suffix('\n').unwrap_or(&text));
        (path.is_absolute() && !text.contains('\0') && path.is_dir()).then_some(path)
    }
}

/// The most a control file (JSON record, kill reason) may hold.
const CONTROL_MAX: u64 = 64 << 20;
/// The longest kill reason an exit record keeps.
const REASON_MAX_CHARS: usize = 200;

/// A kill reason as plain text: trimmed, at most [`REASON_MAX_CHARS`], control and bidi
/// characters escaped (it ends up in the model's notices and on the terminal).
pub(crate) fn reason_as_data(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.trim().chars().take(REASON_MAX_CHARS) {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// Open a file of a job directory for reading: never through a symlink, never a FIFO or
/// device (which could block or read something else), only a regular file.
pub(crate) fn open_read(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(format!("{} is not a regular file", path.display())));
    }
    Ok(file)
}

/// Create a new file (mode 0600): fails if anything, a symlink included, is there.
pub(crate) fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Open a file for writing, created if missing, never through a symlink.
fn open_write(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .append(append)
        .truncate(!append)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

/// At most `max` bytes of a regular file (see [`open_read`]).
fn read_capped(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_read(path)?.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = read_capped(path, CONTROL_MAX).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Write `value` as JSON: a temporary file (new, never through a link; one per writing
/// process) renamed over the target, so a reader sees the old file or the new one, never
/// half of one.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    use std::io::Write;
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    // A leftover of a crashed writer with our pid; unlink never follows a link.
    let _ = std::fs::remove_file(&tmp);
    let written = create_new(&tmp).and_then(|mut f| f.write_all(&bytes));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)
}

/// This boot's id (Linux); after a reboot every unfinished record is lost.
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_files_round_trip_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let jd = JobDir::new(dir.path(), "job_1");
        std::fs::create_dir_all(&jd.path).unwrap();
        let exit = ExitRecord {
            code: Some(3),
            signal: None,
            killed: false,
            reason: None,
            ended_at_ms: 5,
            output: OutputTotals::default(),
        };
        write_json(&jd.exit(), &exit).unwrap();
        assert_eq!(jd.read_exit(), Some(exit));
        jd.write_owner(&Owner::Detached).unwrap();
        assert_eq!(jd.read_owner(), Some(Owner::Detached));
        assert!(Owner::me().holds());
        assert!(!Owner::Process { pid: 1 << 30, start: None }.holds());
        let names: Vec<String> =
            std::fs::read_dir(&jd.path).unwrap().flatten().map(|e| e.file_name().into_string().unwrap()).collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    #[test]
    fn control_files_are_never_followed_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let jd = JobDir::new(dir.path(), "job_1");
        std::fs::create_dir_all(&jd.path).unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "{\"Process\":{\"pid\":1,\"start\":null}}").unwrap();
        // A link where a record is read: nothing comes back.
        std::os::unix::fs::symlink(&outside, jd.owner()).unwrap();
        assert_eq!(jd.read_owner(), None);
        assert!(open_read(&jd.owner()).is_err());
        // A FIFO where a record is read: refused at once, not waited on.
        nix::unistd::mkfifo(&jd.index(), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(read_json::<IndexFile>(&jd.index()), None);
        // A link planted as the temporary file of a record: the record is written, the
        // target untouched.
        let mut tmp = jd.exit().into_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&outside, &tmp).unwrap();
        let exit = ExitRecord {
            code: Some(0),
            signal: None,
            killed: false,
            reason: None,
            ended_at_ms: 1,
            output: OutputTotals::default(),
        };
        write_json(&jd.exit(), &exit).unwrap();
        assert_eq!(jd.read_exit(), Some(exit));
        assert!(std::fs::read_to_string(&outside).unwrap().contains("Process"));
        // A link as the next log segment or the cwd file: not created through, not read.
        std::os::unix::fs::symlink(&outside, jd.segment(1)).unwrap();
        assert!(create_new(&jd.segment(1)).is_err());
        std::os::unix::fs::symlink(dir.path(), jd.cwd_file()).unwrap();
        assert_eq!(jd.read_cwd(), None);
        // A link as the kill file: no reason read through it, none written through it.
        std::os::unix::fs::symlink(&outside, jd.kill()).unwrap();
        assert_eq!(jd.read_kill(), None);
        assert!(jd.write_kill("x").is_err());
        assert!(std::fs::read_to_string(&outside).unwrap().contains("Process"));
    }

    #[test]
    fn a_kill_reason_is_data() {
        let dir = tempfile::tempdir().unwrap();
        let jd = JobDir::new(dir.path(), "job_1");
        std::fs::create_dir_all(&jd.path).unwrap();
        jd.write_kill(&format!("  timeout\u{1b}]52;c;cm0gLXJmIH4=\u{7}\u{202e}\n{}", "x".repeat(500))).unwrap();
        let reason = jd.read_kill().unwrap();
        assert!(reason.starts_with("timeout\\u{1b}]52;c;cm0gLXJmIH4=\\u{7}\\u{202e}\\u{a}xxx"), "{reason}");
        assert!(!reason.chars().any(|c| c.is_control()), "{reason}");
        assert!(reason.chars().count() <= 200 * 10, "{reason}");
        // 29 characters before the x's, 200 kept in all.
        assert_eq!(reason.matches('x').count(), 171);
        jd.write_kill("").unwrap();
        assert_eq!(jd.read_kill().as_deref(), Some(""));
        // A relative path, or one that is no directory, is no cwd.
        std::fs::write(jd.cwd_file(), "relative/dir\n").unwrap();
        assert_eq!(jd.read_cwd(), None);
        std::fs::write(jd.cwd_file(), format!("{}\n", dir.path().display())).unwrap();
        assert_eq!(jd.read_cwd(), Some(dir.path().to_path_buf()));
    }
}
