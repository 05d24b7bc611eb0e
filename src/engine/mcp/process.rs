//! Stdio MCP servers as processes. Each runs under its guard (`talaria __mcp-guard`,
//! guard.rs) in a session and process group of their own, its stderr appended to
//! `logs/mcp/<server>.log`. The guard kills the whole group when talaria goes, even after
//! a `kill -9` (the server and what it started itself, an `npx` wrapper's `node` say).
//! A record (`logs/mcp/<server>.<pgid>.json`) lets the next start kill whatever is still
//! left (the second line of defence, should the guard itself be killed).

use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::McpServerConfig;
use crate::engine::jobs::jobdir::boot_id;
use crate::engine::process as group;

/// A running stdio server (its guard). `stop` kills it (the manager calls it on every
/// path out); dropping it closes the guard's socket, and the guard kills the group.
pub(crate) struct ServerProcess {
    /// The guard: leader of the group, parent of the server.
    pub(crate) child: tokio::process::Child,
    pub(crate) pgid: i32,
    /// Talaria's end of the guard's socket: closed, the guard kills the group.
    owner: tokio::net::UnixStream,
    record: PathBuf,
    /// Where this run's stderr starts in the (appended) log.
    pub(crate) log_start: u64,
}

/// What the next talaria needs to find a group this one left behind.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    server: String,
    pgid: i32,
    leader_start: u64,
    boot_id: String,
    owner_pid: i32,
    owner_start: u64,
}

/// Where the logs and records of the MCP servers go.
pub(crate) fn dir(logs_dir: &Path) -> PathBuf {
    logs_dir.join("mcp")
}

pub(crate) fn log_path(dir: &Path, server: &str) -> PathBuf {
    dir.join(format!("{}.log", super::names::sanitise(server)))
}

/// Start `cfg.command` with piped stdin/stdout; returns the process and its pipes.
pub(crate) fn spawn(
    server: &str,
    cfg: &McpServerConfig,
    cwd: &Path,
    dir: &Path,
) -> Result<(ServerProcess, tokio::process::ChildStdout, tokio::process::ChildStdin), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let log_file = log_path(dir, server);
    let log_start = std::fs::metadata(&log_file).map_or(0, |m| m.len());
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_file)
        .map_err(|e| format!("cannot open {}: {e}", log_file.display()))?;
    let workdir =
        if cfg.cwd.is_empty() { cwd.to_path_buf() } else { crate::engine::tools::resolve_path(cwd, &cfg.cwd) };
    let exe = crate::engine::jobs::SupervisorExe::CurrentExe
        .resolve()
        .map_err(|e| format!("cannot find the talaria binary for the server's guard: {e}"))?;
    let (owner, guard_end) =
        std::os::unix::net::UnixStream::pair().map_err(|e| format!("cannot make the guard's socket: {e}"))?;
    let parent = std::process::id() as i32;
    let mut command = tokio::process::Command::new(exe);
    command
        .arg(super::guard::ARG)
        .arg(parent.to_string())
        .arg(&cfg.command)
        .args(&cfg.args)
        .envs(&cfg.env)
        .current_dir(&workdir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    let guard_fd = guard_end.as_raw_fd();
    // SAFETY: between fork and exec only async-signal-safe calls (setsid, prctl, getppid,
    // dup2, fcntl); the descriptors borrowed are the socket's, open until spawn returns.
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid()?;
            // The guard re-arms this itself; armed here too, nothing is left unguarded
            // between fork and the guard's first line. (It fires when the spawning thread
            // exits: a tokio worker, which lives as long as talaria.)
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)?;
            // Talaria died before the death signal was armed.
            if nix::unistd::getppid().as_raw() != parent {
                return Err(std::io::Error::other("talaria is gone"));
            }
            // The socket becomes the guard's fd 3 (dup2 clears close-on-exec; on the same
            // fd it does nothing, so clear it by hand).
            let target = super::guard::OWNER_FD;
            let socket = std::os::fd::BorrowedFd::borrow_raw(guard_fd);
            if guard_fd == target {
                nix::fcntl::fcntl(socket, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))?;
            } else {
                // Owned by the exec'd guard from here on, not by this closure.
                std::mem::forget(nix::unistd::dup2_raw(socket, target)?);
            }
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|e| format!("cannot start the guard of `{}`: {e}", cfg.command))?;
    drop(guard_end);
    let pid = child.id().ok_or("the server's guard exited at once")? as i32;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("the server's pipes could not be set up".into());
    };
    // setsid ran before exec, and spawn returns after exec: the pid is the pgid.
    let leader_start = group::proc_stat(pid).map_or(0, |s| s.start_ticks);
    let me = std::process::id() as i32;
    let record = Record {
        server: server.to_string(),
        pgid: pid,
        leader_start,
        boot_id: boot_id(),
        owner_pid: me,
        owner_start: group::proc_stat(me).map_or(0, |s| s.start_ticks),
    };
    let record_path = dir.join(format!("{}.{pid}.json", super::names::sanitise(server)));
    if let Ok(text) = serde_json::to_string(&record) {
        if let Err(e) = std::fs::write(&record_path, text) {
            tracing::warn!(error = %e, server, "cannot record the MCP server's process group");
        }
    }
    owner.set_nonblocking(true).map_err(|e| format!("the guard's socket: {e}"))?;
    let owner = tokio::net::UnixStream::from_std(owner).map_err(|e| format!("the guard's socket: {e}"))?;
    Ok((ServerProcess { child, pgid: pid, owner, record: record_path, log_start }, stdout, stdin))
}

impl ServerProcess {
    /// The guard's report: the server runs (its pid), or why it could not start.
    pub(crate) async fn started(&mut self) -> Result<i32, String> {
        use tokio::io::AsyncReadExt;
        let mut line = Vec::new();
        let mut buf = [0u8; 512];
        while !line.contains(&b'\n') && line.len() < 4096 {
            match self.owner.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => line.extend_from_slice(&buf[..n]),
            }
        }
        let line = String::from_utf8_lossy(&line);
        let line = line.lines().next().unwrap_or("");
        if let Some(pid) = line.strip_prefix("ok ").and_then(|p| p.trim().parse().ok()) {
            return Ok(pid);
        }
        match line.strip_prefix("err ") {
            Some(why) => Err(why.to_string()),
            None => {
                let status = self.exit_within(Duration::from_secs(1)).await;
                Err(format!(
                    "the server's guard ended before starting it{}",
                    status.map(|s| format!(" ({s})")).unwrap_or_default()
                ))
            }
        }
    }

    /// Kill the whole group (SIGTERM, `grace`, SIGKILL), reap the leader, drop the record.
    pub(crate) async fn stop(mut self, grace: Duration) {
        group::kill_group(self.pgid, grace).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        let _ = std::fs::remove_file(&self.record);
    }

    /// Its exit, if it exits within `within` (a closed pipe comes just before the exit).
    pub(crate) async fn exit_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(within, self.child.wait()).await.ok().and_then(Result::ok)
    }
}

/// Kill the groups that a talaria which is gone left behind (and forget records of this
/// boot's dead groups). Blocking: run it off the async threads.
pub(crate) fn sweep(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let boot = boot_id();
    let mut killed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let Some(record) = std::fs::read_to_string(&path).ok().and_then(|t| serde_json::from_str::<Record>(&t).ok())
        else {
            let _ = std::fs::remove_file(&path);
            continue;
        };
        if record.boot_id != boot {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        // Another talaria that is still running owns it.
        if group::process_alive(record.owner_pid, Some(record.owner_start)) {
            continue;
        }
        if ours(&record) {
            let left = group::kill_groups_blocking(&[record.pgid], Duration::from_millis(500));
            tracing::info!(server = %record.server, pgid = record.pgid, survivors = left.len(), "killed an MCP server a previous talaria left");
            killed.push(record.pgid);
        }
        let _ = std::fs::remove_file(&path);
    }
    killed
}

/// Is the group still the one the record describes? Its leader with the same start time,
/// or (the leader gone, e.g. an `npx` wrapper) members that all started after it did.
fn ours(record: &Record) -> bool {
    if group::process_alive(record.pgid, None) {
        return group::process_alive(record.pgid, Some(record.leader_start));
    }
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    let mut any = false;
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if let Some(stat) = group::proc_stat(pid) {
            if stat.pgrp == record.pgid && stat.state != 'Z' {
                if stat.start_ticks < record.leader_start {
                    return false;
                }
                any = true;
            }
        }
    }
    any
}
