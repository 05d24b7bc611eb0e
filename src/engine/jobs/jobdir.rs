//! `jobs/<id>/`: what a supervisor and the talaria following it share on disk. The
//! supervisor writes the log segments, `index.json` (where the kept log starts),
//! `leader.json` (the leader exited but its group goes on) and `exit.json` (written last,
//! atomically). Talaria writes `spec.json` (what to run), `owner.json` (the lease) and
//! `kill` (a kill it asked for, so the exit record says `killed`); `stdin` is a FIFO.

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
}

pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Write `value` as JSON: a temporary file renamed over the target, so a reader sees
/// the old file or the new one, never half of one.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)?;
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
}
