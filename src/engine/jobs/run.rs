//! Spawning a job and the two tasks that own it: the reader (pipe → memory, log, events)
//! and the supervisor (exit → drain → leftover group → finish).

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::Child;
use tokio::sync::{oneshot, watch};

use super::log::{LogIndex, LogWriter};
use super::output::{OutputBuf, Utf8Decoder};
use super::records::{self, JobRecord};
use super::{group, lock, now_ms, ExitInfo, Job, JobState, Registry, SpawnSpec, Spawned};
use crate::engine::EventSink;
use crate::protocol::{Event, JobStatus};

/// How long a foreground command's output may still be drained after its leader exits.
const DRAIN: Duration = Duration::from_millis(200);
/// At most one UI update per job per this interval (~20/s).
const EMIT_EVERY: Duration = Duration::from_millis(50);
/// How often a leftover group is checked for life.
const LEFTOVER_POLL: Duration = Duration::from_millis(250);
/// Characters of tail an `Event::JobUpdated` carries.
const UPDATE_TAIL: usize = 2000;
/// Characters a coalesced `Event::ToolOutput` chunk carries at most (the UI shows the
/// last line).
const CHUNK_MAX: usize = 4000;
/// Variables that hold API keys talaria knows about; never passed to commands.
const KEY_VARS: [&str; 2] = ["OPENAI_API_KEY", "OPENROUTER_API_KEY"];

pub(super) fn spawn(reg: &Arc<Registry>, spec: SpawnSpec) -> Result<Spawned, String> {
    if reg.shutting_down.load(Ordering::SeqCst) {
        return Err("talaria is shutting down; no new commands are started".into());
    }
    reg.make_room()?;
    let num = reg.next_num.fetch_add(1, Ordering::SeqCst);
    let id = format!("job_{num}");
    let base = records::file_base(reg.owner_pid, &id);
    let cwd_file = spec.track_cwd.then(|| reg.dir.join(format!("{base}.cwd")));
    if let Some(f) = &cwd_file {
        let _ = std::fs::remove_file(f);
    }

    let terminal = &reg.config.terminal;
    let mut cmd = tokio::process::Command::new(&terminal.shell);
    if terminal.login_shell {
        cmd.arg("-l");
    }
    cmd.arg("-c").arg(wrap_command(&spec.command, cwd_file.as_deref())).current_dir(&spec.cwd);
    for var in KEY_VARS {
        cmd.env_remove(var);
    }
    let key_env = reg.config.model.api_key_env.trim();
    if !key_env.is_empty() {
        cmd.env_remove(key_env);
    }
    // One pipe on fds 1 and 2 keeps stdout and stderr in the order they were written.
    let (read_end, write_end) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("cannot create a pipe for the command: {e}"))?;
    let write_dup: OwnedFd = write_end.try_clone().map_err(|e| format!("cannot duplicate the output pipe: {e}"))?;
    cmd.stdout(Stdio::from(write_end)).stderr(Stdio::from(write_dup));
    cmd.stdin(if spec.background { Stdio::piped() } else { Stdio::null() });
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent. It gives
    // the command its own session and process group (pgid = pid).
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            close_inherited_fds_on_exec();
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    // The command holds the parent's copies of the write end: drop them so the reader
    // sees end of file when the job's processes are done.
    drop(cmd);
    let mut child = spawned.map_err(|e| format!("cannot start {}: {e}", terminal.shell))?;
    let pid = child.id().ok_or_else(|| "the command vanished before it started".to_string())?;
    let receiver =
        pipe::Receiver::from_owned_fd(read_end).map_err(|e| format!("cannot read the command's output: {e}"))?;
    let stdin = child.stdin.take();

    let started_at_ms = now_ms();
    let record = JobRecord {
        owner_pid: reg.owner_pid,
        owner_start: reg.owner_start,
        pgid: pid as i32,
        id: id.clone(),
        command: spec.command.clone(),
        session_id: spec.session_id.clone(),
        cwd: spec.cwd.display().to_string(),
        started_at_ms,
    };
    let record_path = match records::write(&reg.dir, &record) {
        Ok(()) => Some(record.path_in(&reg.dir)),
        Err(e) => {
            tracing::warn!(error = %e, id = %id, "cannot write the job record");
            None
        }
    };
    if let Some(reaper) = &reg.reaper {
        reaper.add(pid as i32);
    }

    let (done, _) = watch::channel(None);
    let (reader_eof, _) = watch::channel(false);
    let job = Arc::new(Job {
        num,
        id: id.clone(),
        command: spec.command.clone(),
        cwd: spec.cwd.clone(),
        session_id: spec.session_id.clone(),
        pid,
        pgid: pid as i32,
        started_at_ms,
        started: Instant::now(),
        state: Mutex::new(JobState {
            status: JobStatus::Running,
            background: spec.background,
            announced: false,
            has_stdin: stdin.is_some(),
            finished_at: None,
            output: OutputBuf::for_model_cap(reg.config.tool_output.max_chars),
            log: LogIndex::default(),
            call_id: if spec.background { None } else { spec.call_id.clone() },
        }),
        stdin: tokio::sync::Mutex::new(stdin),
        done,
        reader_eof,
        forgotten: tokio_util::sync::CancellationToken::new(),
        kill_requested: AtomicBool::new(false),
        exit_seen: AtomicBool::new(false),
        record: record_path,
    });
    lock(&reg.jobs).insert(num, job.clone());
    if spec.background {
        // Announce before the tasks run, so even a job that ends at once is seen starting.
        reg.make_background(&job);
    }

    let writer = LogWriter::new(&reg.dir, &base, reg.config.jobs.log_max_bytes);
    tokio::spawn(read_output(job.clone(), receiver, writer, reg.events.clone()));
    let (exit_tx, exit_rx) = oneshot::channel();
    tokio::spawn(supervise(reg.clone(), job.clone(), child, exit_tx, cwd_file));
    Ok(Spawned { id, pid, exit: exit_rx })
}

/// Mark every fd above 2 close-on-exec in a freshly forked child, so a command never
/// inherits descriptors talaria itself inherited without CLOEXEC (a daemon would hold
/// them open). Marking rather than closing keeps std's exec-error pipe working. Only
/// async-signal-safe calls: this runs between fork and exec. Old kernels without
/// close_range simply skip it.
#[cfg(target_os = "linux")]
pub(super) fn close_inherited_fds_on_exec() {
    // SAFETY: a raw syscall with integer arguments; it touches no memory.
    unsafe {
        libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC);
    }
}

/// Elsewhere there is no close_range; commands may inherit stray descriptors.
#[cfg(not(target_os = "linux"))]
pub(super) fn close_inherited_fds_on_exec() {}

/// `<shell> -c` script: remember the final working directory in `cwd_file` on exit
/// (a trap, not an inherited fd, which daemons would hold open).
pub fn wrap_command(command: &str, cwd_file: Option<&Path>) -> String {
    match cwd_file {
        None => command.to_string(),
        Some(file) => format!(
            "__talaria_cwd_file={}; trap 'pwd -P > \"$__talaria_cwd_file\" 2>/dev/null' EXIT\n{command}",
            sh_quote(&file.to_string_lossy())
        ),
    }
}

/// Single-quote a string for a POSIX shell.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Read the job's output until end of file: decode, keep in memory (bounded), append to
/// the log, and tell the UI at most every `EMIT_EVERY`.
async fn read_output(job: Arc<Job>, mut pipe: pipe::Receiver, mut log: LogWriter, events: EventSink) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut decoder = Utf8Decoder::default();
    let mut chunk = String::new();
    let mut dirty = false;
    let mut last_emit = Instant::now().checked_sub(EMIT_EVERY).unwrap_or_else(Instant::now);
    loop {
        let flush_at = tokio::time::Instant::from_std(last_emit + EMIT_EVERY);
        tokio::select! {
            read = pipe.read(&mut buf) => match read {
                Ok(0) => break,
                Ok(n) => {
                    let text = decoder.decode(&buf[..n]);
                    take_text(&job, &mut log, &mut chunk, &text);
                    dirty = true;
                    if last_emit.elapsed() >= EMIT_EVERY {
                        emit(&job, &events, &mut chunk);
                        last_emit = Instant::now();
                        dirty = false;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(error = %e, id = %job.id, "reading job output failed");
                    break;
                }
            },
            _ = job.forgotten.cancelled() => break,
            _ = tokio::time::sleep_until(flush_at), if dirty => {
                emit(&job, &events, &mut chunk);
                last_emit = Instant::now();
                dirty = false;
            }
        }
    }
    if !job.forgotten.is_cancelled() {
        let rest = decoder.finish();
        take_text(&job, &mut log, &mut chunk, &rest);
        if dirty || !rest.is_empty() {
            emit(&job, &events, &mut chunk);
        }
    }
    job.reader_eof.send_replace(true);
}

fn take_text(job: &Job, log: &mut LogWriter, chunk: &mut String, text: &str) {
    if text.is_empty() {
        return;
    }
    log.write(text);
    let mut st = job.state();
    st.output.push(text);
    if st.log != *log.index() {
        st.log = log.index().clone();
    }
    if st.call_id.is_some() && !st.background {
        chunk.push_str(text);
        if chunk.len() > 2 * CHUNK_MAX {
            let keep = crate::text::tail_chars(chunk, CHUNK_MAX).to_string();
            *chunk = keep;
        }
    }
}

fn emit(job: &Job, events: &EventSink, chunk: &mut String) {
    let event = {
        let st = job.state();
        if st.background {
            chunk.clear();
            if !st.announced {
                return;
            }
            Event::JobUpdated {
                id: job.id.clone(),
                status: st.status.clone(),
                tail: crate::text::tail_chars(st.output.tail(), UPDATE_TAIL).to_string(),
            }
        } else {
            let Some(call_id) = st.call_id.clone() else { return };
            if chunk.is_empty() {
                return;
            }
            let text = std::mem::take(chunk);
            Event::ToolOutput { call_id, chunk: crate::text::tail_chars(&text, CHUNK_MAX).to_string() }
        }
    };
    events.send(event);
}

/// Await the leader's exit, drain, keep a leftover group as a background job, finish.
async fn supervise(
    reg: Arc<Registry>,
    job: Arc<Job>,
    mut child: Child,
    exit_tx: oneshot::Sender<ExitInfo>,
    cwd_file: Option<PathBuf>,
) {
    let (code, signal) = match child.wait().await {
        Ok(status) => (status.code(), status.signal()),
        Err(e) => {
            tracing::warn!(error = %e, id = %job.id, "waiting for the command failed");
            (None, None)
        }
    };
    let mut eof = job.reader_eof.subscribe();
    let _ = tokio::time::timeout(DRAIN, eof.wait_for(|e| *e)).await;
    let cwd = cwd_file.and_then(|f| {
        let text = std::fs::read_to_string(&f).ok();
        let _ = std::fs::remove_file(&f);
        text.map(|t| PathBuf::from(t.trim_end_matches('\n'))).filter(|p| p.is_dir())
    });
    let mut exit = ExitInfo { code, signal, killed: false, leftover: false, cwd };
    let mut exit_tx = Some(exit_tx);
    if group::group_alive(job.pgid) {
        if !job.kill_requested.load(Ordering::SeqCst) {
            // `cmd &`: the leader is done, its children are not. They go on as a background
            // job under the same id; the foreground call returns now.
            exit.leftover = true;
            reg.make_background(&job);
            if let Some(tx) = exit_tx.take() {
                let _ = tx.send(exit.clone());
            }
        }
        loop {
            if *eof.borrow() {
                tokio::time::sleep(LEFTOVER_POLL).await;
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(LEFTOVER_POLL) => {}
                    _ = eof.wait_for(|e| *e) => {}
                }
            }
            if !group::group_alive(job.pgid) {
                break;
            }
        }
        // The last writers are gone; give the reader a moment to take their last bytes.
        let _ = tokio::time::timeout(DRAIN, eof.wait_for(|e| *e)).await;
    }
    exit.killed = job.kill_requested.load(Ordering::SeqCst);
    reg.finish(&job, exit.clone());
    if let Some(tx) = exit_tx {
        let _ = tx.send(exit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        let wrapped = wrap_command("cd /tmp", Some(Path::new("/x/j.cwd")));
        assert!(wrapped.ends_with("\ncd /tmp"));
        assert!(wrapped.starts_with("__talaria_cwd_file='/x/j.cwd'; trap "));
        assert_eq!(wrap_command("ls", None), "ls");
    }
}
