//! What the `process` tool and the UI can do with a job, and the JSON the model sees
//! (DESIGN §4a).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use super::log::read_lines;
use super::watches::WatchOwner;
use super::{lock, Job, JobsHandle};
use crate::engine::args::lenient;
use crate::engine::signals::ToolSignals;
use crate::engine::store::jobs::RecordStatus;
use crate::protocol::{Event, JobAction, JobId, JobStatus, NoticeLevel};

/// Lines `process log` shows by default, and at most.
const LOG_DEFAULT_LINES: u64 = 200;
const LOG_MAX_LINES: u64 = 2000;
/// Characters of output `poll` and `wait` show.
const POLL_TAIL: usize = 1000;
/// A write to a job that does not read its stdin gives up after this long.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

const ACTIONS: &str = "list, poll, log, wait, kill, write, close, watch, unwatch";

/// The `process` tool's arguments (DESIGN §4a). Which of them an action needs is checked
/// by [`JobsHandle::process_action`], with an error that says what is missing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct ProcessArgs {
    #[serde(default)]
    pub(crate) action: String,
    #[serde(default)]
    pub(crate) session_id: Option<String>,
    /// For write: text sent to the job's stdin as is.
    #[serde(default)]
    pub(crate) data: Option<String>,
    /// For wait: seconds.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    pub(crate) timeout: Option<u64>,
    /// For log: the absolute line number to start at, and how many lines.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    pub(crate) offset: Option<u64>,
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    pub(crate) limit: Option<u64>,
    /// For watch / unwatch: the pattern.
    #[serde(default)]
    pub(crate) pattern: Option<String>,
}

/// What `process` is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProcessAction {
    List,
    Poll,
    Log,
    Wait,
    Kill,
    Write,
    Close,
    Watch,
    Unwatch,
}

impl ProcessAction {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ProcessAction::List => "list",
            ProcessAction::Poll => "poll",
            ProcessAction::Log => "log",
            ProcessAction::Wait => "wait",
            ProcessAction::Kill => "kill",
            ProcessAction::Write => "write",
            ProcessAction::Close => "close",
            ProcessAction::Watch => "watch",
            ProcessAction::Unwatch => "unwatch",
        }
    }
}

impl ProcessArgs {
    /// The action (case and surrounding spaces ignored), or the error the model sees.
    pub(crate) fn action(&self) -> Result<ProcessAction, String> {
        let action = self.action.trim().to_ascii_lowercase();
        [
            ProcessAction::List,
            ProcessAction::Poll,
            ProcessAction::Log,
            ProcessAction::Wait,
            ProcessAction::Kill,
            ProcessAction::Write,
            ProcessAction::Close,
            ProcessAction::Watch,
            ProcessAction::Unwatch,
        ]
        .into_iter()
        .find(|a| a.as_str() == action)
        .ok_or_else(|| format!("unknown action {action:?}; use one of {ACTIONS}"))
    }
}

/// A window of a job's log for the UI's log view (ANSI kept).
#[derive(Debug, Clone, PartialEq)]
pub struct JobLog {
    pub(crate) id: JobId,
    pub(crate) text: String,
    pub(crate) first_line: u64,
    pub total_lines: u64,
    /// First and last line shown (0, 0 when nothing was shown).
    pub(crate) from: u64,
    pub(crate) to: u64,
}

/// The notification text of DESIGN §4.
pub(crate) fn notice_text(id: &str, status: &JobStatus, runtime: Duration, command: &str, tail: &str) -> String {
    let command = crate::text::truncate_for_model(command, 300).replace('\n', " ");
    let tail = tail.trim();
    let tail = if tail.is_empty() { "(no output)" } else { tail };
    let dur = format_duration(runtime);
    match status {
        JobStatus::Exited(code) => {
            format!(
                "[Background job {id} exited with code {code} after {dur}. Command: {command}. Output tail: {tail}]"
            )
        }
        JobStatus::Killed => {
            format!("[Background job {id} was killed after {dur}. Command: {command}. Output tail: {tail}]")
        }
        JobStatus::Running | JobStatus::Reconnecting | JobStatus::Lost => {
            format!("[Background job {id} was lost after {dur}. Command: {command}. Output tail: {tail}]")
        }
    }
}

/// The notice of a job that is lost for a known reason (a remote job whose host stayed
/// unreachable): no exit code will come.
pub(crate) fn lost_notice_text(id: &str, why: &str, runtime: Duration, command: &str, tail: &str) -> String {
    let command = crate::text::truncate_for_model(command, 300).replace('\n', " ");
    let tail = tail.trim();
    let tail = if tail.is_empty() { "(no output)" } else { tail };
    let dur = format_duration(runtime);
    format!("[Background job {id} was lost after {dur}: {why}. Command: {command}. Output tail: {tail}]")
}

pub(crate) use crate::util::format_duration;

/// Resolve when the counter changed since this receiver last looked — for a tool's
/// signals, since the tool started; never when its sender is gone.
pub(crate) async fn bumped(rx: &mut watch::Receiver<u64>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The status a job's record keeps once it has this live status.
pub(crate) fn record_status(status: &JobStatus) -> RecordStatus {
    match status {
        JobStatus::Running | JobStatus::Reconnecting => RecordStatus::Running,
        JobStatus::Exited(_) => RecordStatus::Exited,
        JobStatus::Killed => RecordStatus::Killed,
        JobStatus::Lost => RecordStatus::Lost,
    }
}

pub(crate) fn status_str(status: &JobStatus) -> &'static str {
    match status {
        JobStatus::Running => "running",
        JobStatus::Reconnecting => "reconnecting",
        JobStatus::Exited(_) => "exited",
        JobStatus::Killed => "killed",
        JobStatus::Lost => "lost",
    }
}

fn exit_code_value(status: &JobStatus) -> Value {
    match status {
        JobStatus::Exited(code) => json!(code),
        JobStatus::Running | JobStatus::Reconnecting | JobStatus::Killed | JobStatus::Lost => Value::Null,
    }
}

fn runtime_s(job: &Job) -> f64 {
    (job.runtime().as_secs_f64() * 10.0).round() / 10.0
}

/// What the model sees of a sub-agent in `poll`, `wait` and `list`.
fn agent_value(agent: &crate::protocol::agent::AgentInfo) -> Value {
    json!({
        "state": agent.state.as_str(),
        "task": agent.task,
        "agent_session": agent.session,
        "last_activity": agent.activity,
        "tokens": { "prompt": agent.usage.prompt_tokens, "completion": agent.usage.completion_tokens },
    })
}

fn not_found(id: &str) -> Value {
    json!({
        "status": "not_found",
        "error": format!("No job with id {id}; process(action='list') shows the jobs there are"),
    })
}

fn error(message: impl Into<String>) -> Value {
    json!({ "error": message.into() })
}

impl JobsHandle {
    /// The `process` tool's actions; returns the JSON shapes of DESIGN §4a. `wait` returns
    /// early on an interrupt, a yield or a release (a user message).
    pub(crate) async fn process_action(
        &self,
        args: &ProcessArgs,
        signals: &ToolSignals,
        timeout_cap: Duration,
    ) -> Value {
        let action = match args.action() {
            Ok(ProcessAction::List) => return self.list_value(),
            Ok(action) => action,
            Err(e) => return error(e),
        };
        let Some(id) = args.session_id.as_deref().map(str::trim).filter(|s| !s.is_empty()) else {
            return error(format!(
                "process {} needs a session_id (a job id such as job_3; process(action='list') lists them)",
                action.as_str()
            ));
        };
        let Some(job) = self.inner.get(id) else { return not_found(id) };
        if job.is_running() && action != ProcessAction::Kill {
            // The model wants something of this job: killing it at exit loses that.
            job.awaited.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        match action {
            ProcessAction::List => self.list_value(),
            ProcessAction::Poll => self.poll_any(&job).await,
            ProcessAction::Log => self.log_value(&job, args.offset, args.limit),
            ProcessAction::Wait => {
                let asked = args.timeout.map(Duration::from_secs).unwrap_or(Duration::from_secs(30));
                self.wait_value(&job, asked.min(timeout_cap).max(Duration::from_secs(1)), signals).await
            }
            ProcessAction::Kill => self.kill_value(&job).await,
            ProcessAction::Write => match &args.data {
                Some(data) => match self.write_job(&job, data).await {
                    Ok(()) => json!({ "status": "ok" }),
                    Err(e) => error(e),
                },
                None => error("process write needs data (the text to send to the job's stdin)"),
            },
            ProcessAction::Close => match self.close_job(&job).await {
                Ok(()) => json!({ "status": "ok" }),
                Err(e) => error(e),
            },
            ProcessAction::Watch => match args.pattern.as_deref().filter(|p| !p.is_empty()) {
                Some(pattern) => self.watch_value(&job, pattern),
                None => self.watches_value(&job),
            },
            ProcessAction::Unwatch => self.unwatch_value(&job, args.pattern.as_deref().filter(|p| !p.is_empty())),
        }
    }

    fn list_value(&self) -> Value {
        let jobs: Vec<Value> = self
            .inner
            .all()
            .iter()
            .filter(|j| j.state().background)
            .map(|job| {
                let (status, last_line) = {
                    let st = job.state();
                    (st.status.clone(), st.output.last_line(200))
                };
                let agent = self.inner.agent_info(job);
                let mut value = json!({
                    "session_id": job.id,
                    "command": job.command,
                    "status": status_str(&status),
                    "pid": job.pid,
                    "exit_code": exit_code_value(&status),
                    "runtime_s": runtime_s(job),
                    "last_line": agent.as_ref().map_or(last_line, |a| a.activity.clone()),
                });
                if let Some(agent) = &agent {
                    value["agent"] = agent_value(agent);
                }
                value
            })
            .collect();
        json!({ "jobs": jobs })
    }

    fn poll_value(&self, job: &Job) -> Value {
        let (status, tail) = {
            let st = job.state();
            (st.status.clone(), st.output.clean_tail(POLL_TAIL))
        };
        if !status.is_running() {
            self.inner.mark_seen(job);
        }
        json!({
            "session_id": job.id,
            "status": status_str(&status),
            "exit_code": exit_code_value(&status),
            "runtime_s": runtime_s(job),
            "output_tail": tail,
        })
    }

    /// `poll` of any job; a sub-agent's says what it does instead of its event stream's
    /// tail and, once it has ended, carries its final answer (capped at
    /// `agents.max_result_chars`).
    async fn poll_any(&self, job: &Job) -> Value {
        let mut value = self.poll_value(job);
        let Some(agent) = self.inner.agent_info(job) else { return value };
        if let Some(fields) = value.as_object_mut() {
            fields.remove("output_tail");
        }
        value["agent"] = agent_value(&agent);
        if !job.is_running() {
            let answer = self.inner.agent_answer(job).await;
            value["answer"] = json!(answer.unwrap_or_else(|| "(no answer)".to_string()));
            value["note"] = json!(format!("The whole conversation is in session {}.", agent.session));
        }
        value
    }

    fn log_value(&self, job: &Job, offset: Option<u64>, limit: Option<u64>) -> Value {
        let log = self.job_log(job, offset, limit);
        let max = self.inner.config.tool_output.max_chars;
        let plain = crate::emulate::plain(&log.text);
        let shown = plain.lines().count() as u64;
        let output = crate::text::truncate_for_model(&plain, max);
        // Line numbers count the log as written; a redrawn display shows as fewer lines.
        let showing = match log.to {
            0 => "no output yet".to_string(),
            to if shown + 1 < to - log.from + 1 => format!(
                "lines {}-{} of {} as written to the log, shown as a terminal shows them ({shown} lines after redraws)",
                log.from, to, log.total_lines
            ),
            to => format!("lines {}-{} of {}", log.from, to, log.total_lines),
        };
        json!({
            "session_id": job.id,
            "output": output,
            "first_line": log.first_line,
            "total_lines": log.total_lines,
            "showing": showing,
        })
    }

    fn job_log(&self, job: &Job, offset: Option<u64>, limit: Option<u64>) -> JobLog {
        let (index, counted) = {
            let st = job.state();
            (st.log.clone(), st.output.total_lines())
        };
        let limit = limit.unwrap_or(LOG_DEFAULT_LINES).clamp(1, LOG_MAX_LINES) as usize;
        let view = read_lines(&index, offset, limit);
        JobLog {
            id: job.id.clone(),
            text: view.text,
            first_line: view.first_line,
            total_lines: counted.max(view.to),
            from: view.from,
            to: view.to,
        }
    }

    fn event_lines(&self, job: &Job, offset: u64, limit: Option<u64>) -> JobLog {
        let (index, counted) = {
            let st = job.state();
            (st.log.clone(), st.output.total_lines())
        };
        let limit = limit.unwrap_or(LOG_DEFAULT_LINES).clamp(1, LOG_MAX_LINES) as usize;
        let view = super::log::read_event_lines(&index, offset, limit);
        JobLog {
            id: job.id.clone(),
            text: view.text,
            first_line: view.first_line,
            total_lines: counted.max(view.to),
            from: view.from,
            to: view.to,
        }
    }

    fn watches_value(&self, job: &Job) -> Value {
        let watches = lock(&job.watches).infos();
        json!({ "session_id": job.id, "status": status_str(&job.state().status.clone()), "watches": watches })
    }

    fn watch_value(&self, job: &Job, pattern: &str) -> Value {
        let replaced = match self.inner.add_watch(job, pattern, WatchOwner::Model) {
            Ok(replaced) => replaced,
            Err(e) => return error(e),
        };
        let limits = self.inner.watch_limits();
        let mut value = json!({
            "status": if replaced { "watching (set again)" } else { "watching" },
            "session_id": job.id,
            "pattern": pattern,
            "note": format!(
                "You get a message [Job {} matched /{pattern}/: <line>] when a line of its output matches \
                 (as a terminal shows it, colours and redraws applied), at most one per {}s (matches in \
                 between are counted: \"+N more\") and {} in all; the watch ends with the job.",
                job.id,
                limits.cooldown_ms as f64 / 1000.0,
                limits.max_notices
            ),
        });
        // Output printed before the watch is not watched, but say if it already matched
        // (a server that was ready before the model asked).
        let earlier = self.earlier_matches(job, pattern);
        if let Some(last) = earlier.last() {
            value["earlier_matches"] = json!(earlier.len());
            value["last_earlier_match"] = json!(last);
        }
        value
    }

    /// Lines of the last part of the log that match, as a terminal shows them.
    fn earlier_matches(&self, job: &Job, pattern: &str) -> Vec<String> {
        let Ok(regex) = super::watches::compile(pattern) else { return Vec::new() };
        let log = self.job_log(job, None, Some(LOG_DEFAULT_LINES));
        let text = crate::emulate::plain(&log.text);
        let mut lines: Vec<String> = text.lines().filter(|l| regex.is_match(l)).map(str::to_string).collect();
        if let Some(last) = lines.last_mut() {
            *last = crate::text::truncate_for_model(last, 500);
        }
        lines
    }

    fn unwatch_value(&self, job: &Job, pattern: Option<&str>) -> Value {
        let removed = lock(&job.watches).remove(WatchOwner::Model, pattern);
        if removed > 0 {
            self.inner.publish_watches(job);
        }
        let watches = lock(&job.watches).infos();
        match (removed, pattern) {
            (0, Some(p)) => json!({
                "error": format!("{} has no watch /{p}/ set by you", job.id),
                "session_id": job.id,
                "watches": watches,
            }),
            _ => json!({ "status": "ok", "session_id": job.id, "removed": removed, "watches": watches }),
        }
    }

    async fn wait_value(&self, job: &Arc<Job>, within: Duration, signals: &ToolSignals) -> Value {
        let mut done = job.done.subscribe();
        // Measured from when the tool started, not from here: a message typed in between
        // still releases the wait.
        let mut release = signals.release_gen.clone();
        let mut yielded = signals.yield_gen.clone();
        let agent = self.inner.agent_info(job);
        let still_running = |status: &str, extra: (&str, Value)| {
            let mut v = json!({
                "status": status,
                "process_running": true,
                "session_id": job.id,
                "runtime_s": runtime_s(job),
            });
            match &agent {
                Some(agent) => v["agent"] = agent_value(agent),
                None => v["output_tail"] = json!(job.state().output.clean_tail(POLL_TAIL)),
            }
            v[extra.0] = extra.1;
            v
        };
        tokio::select! {
            biased;
            _ = async { drop(done.wait_for(Option::is_some).await) } => self.poll_any(job).await,
            _ = signals.interrupt.cancelled() => still_running("interrupted", ("reason", json!("the user interrupted the turn"))),
            _ = bumped(&mut release) => still_running("released", ("reason", json!("user message"))),
            _ = bumped(&mut yielded) => {
                still_running("released", ("reason", json!("the user asked running tools to yield")))
            }
            _ = tokio::time::sleep(within) => still_running(
                "timeout",
                ("note", json!(format!("still running after waiting {}s", within.as_secs()))),
            ),
        }
    }

    async fn kill_value(&self, job: &Arc<Job>) -> Value {
        let was_running = job.is_running();
        // The model asked and reads the answer: no notification for this exit.
        self.inner.mark_seen(job);
        if was_running {
            self.inner.kill_job(job).await;
            self.inner.mark_seen(job);
        }
        let (status, tail) = {
            let st = job.state();
            (st.status.clone(), st.output.clean_tail(POLL_TAIL))
        };
        let label = if was_running && status == JobStatus::Killed { "killed" } else { "already_exited" };
        json!({
            "status": label,
            "session_id": job.id,
            "exit_code": exit_code_value(&status),
            "runtime_s": runtime_s(job),
            "output_tail": tail,
        })
    }

    async fn write_job(&self, job: &Job, data: &str) -> Result<(), String> {
        if !job.is_running() {
            return Err(format!("{} has already exited; nothing reads its stdin", job.id));
        }
        if !job.state().has_stdin {
            return Err(no_stdin(&job.id));
        }
        // A sub-agent reads messages as JSON lines (its stdin also carries approval answers).
        let wrapped = self.inner.agent_info(job).map(|_| {
            crate::engine::agents::inbound_line(&crate::engine::agents::Inbound::Message {
                text: data.trim_end().to_string(),
            })
        });
        let data = wrapped.as_deref().unwrap_or(data);
        let _serial = job.stdin_lock.lock().await;
        let path = job.dir.stdin();
        let write = async {
            // The supervisor holds the FIFO open for reading (the job's end), so opening it
            // for writing never blocks; a full FIFO makes the write wait for the job.
            let mut pipe = open_fifo_writer(&path)?;
            pipe.write_all(data.as_bytes()).await?;
            pipe.flush().await
        };
        match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                job.state().has_stdin = false;
                Err(format!("writing to {} failed: {e} (it closed its stdin)", job.id))
            }
            Err(_) => Err(format!("{} is not reading its stdin (the write did not finish within 10s)", job.id)),
        }
    }

    async fn close_job(&self, job: &Job) -> Result<(), String> {
        let _serial = job.stdin_lock.lock().await;
        let had = std::mem::replace(&mut job.state().has_stdin, false);
        match had {
            true => {
                // The supervisor drops its end of the FIFO: the job sees end of file.
                job.dir.mark_stdin_eof().map_err(|e| format!("cannot close the stdin of {}: {e}", job.id))
            }
            false if job.is_running() => Err(no_stdin(&job.id)),
            false => Err(format!("{} has already exited", job.id)),
        }
    }

    /// A window of a job's log (ANSI kept) for the UI; None for an unknown id.
    pub async fn log(&self, id: &str, offset: Option<u64>, limit: Option<u64>) -> Option<JobLog> {
        let job = self.inner.get(id)?;
        Some(self.job_log(&job, offset, limit))
    }

    /// What the user reads when a job id names nothing: which jobs there are instead.
    fn no_such_job(&self, id: &str) -> String {
        let mut jobs = self.inner.all();
        jobs.sort_by_key(|j| j.num);
        let ids: Vec<String> = jobs.iter().filter(|j| j.state().background).map(|j| j.id.to_string()).collect();
        let id = id.trim();
        // `job_9` reads as a name already; anything else is named as what it was meant to be.
        let what = if id.starts_with("job_") { id.to_string() } else { format!("job {id}") };
        match ids.as_slice() {
            [] => format!("No {what} here: this session has no background jobs."),
            [one] => format!("No {what} here; the only job is {one} (/jobs lists it)."),
            many => format!("No {what} here; jobs: {} (/jobs lists them).", many.join(", ")),
        }
    }

    /// Perform a UI request (`Op::Job`) and answer with the event to show. A kill from
    /// the UI is not seen by the model: it gets the usual notification.
    pub async fn ui_action(&self, id: &str, action: JobAction) -> Event {
        let Some(job) = self.inner.get(id) else {
            // An error: the request failed (the TUI gives a typed command back to fix).
            return Event::notice(NoticeLevel::Error, self.no_such_job(id));
        };
        match action {
            JobAction::Poll => {
                let st = job.state();
                Event::JobUpdated { id: job.id.clone(), status: st.status.clone(), tail: st.output.tail().to_string() }
            }
            JobAction::Kill => {
                self.inner.kill_job(&job).await;
                Event::JobFinished { id: job.id.clone(), status: job.state().status.clone() }
            }
            JobAction::Write { data } => match self.write_job(&job, &data).await {
                Ok(()) => Event::notice(NoticeLevel::Info, format!("sent {} bytes to {}", data.len(), job.id)),
                Err(e) => Event::notice(NoticeLevel::Error, e),
            },
            JobAction::Close => match self.close_job(&job).await {
                Ok(()) => Event::notice(NoticeLevel::Info, format!("closed the stdin of {}", job.id)),
                Err(e) => Event::notice(NoticeLevel::Error, e),
            },
            JobAction::Log { offset, limit } => {
                let log = match offset.filter(|_| self.inner.agent_info(&job).is_some()) {
                    // A sub-agent's log view reads its event stream on from where it was:
                    // whole lines only, none cut short (`tui::app::agent_log`).
                    Some(offset) => self.event_lines(&job, offset, limit),
                    None => self.job_log(&job, offset, limit),
                };
                Event::JobLog {
                    id: log.id,
                    text: log.text,
                    first_line: log.first_line,
                    total_lines: log.total_lines,
                    from: log.from,
                    to: log.to,
                }
            }
            JobAction::Watch { pattern } => match self.inner.add_watch(&job, &pattern, WatchOwner::User) {
                Ok(_) => Event::notice(
                    NoticeLevel::Info,
                    format!("watching {} for /{pattern}/: a matching line is shown here (and rings)", job.id),
                ),
                Err(e) => Event::notice(NoticeLevel::Error, e),
            },
            JobAction::Unwatch { pattern } => {
                let removed = lock(&job.watches).remove(WatchOwner::User, pattern.as_deref());
                self.inner.publish_watches(&job);
                let text = match removed {
                    0 => format!("you had no watch on {}", job.id),
                    1 => format!("stopped watching {}", job.id),
                    n => format!("stopped your {n} watches on {}", job.id),
                };
                Event::notice(NoticeLevel::Info, text)
            }
        }
    }
}

/// The write end of a job's stdin FIFO: never through a symlink, and only a FIFO.
fn open_fifo_writer(path: &std::path::Path) -> std::io::Result<tokio::net::unix::pipe::Sender> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.file_type().is_fifo() {
        return Err(std::io::Error::other(format!("{} is not the job's stdin FIFO", path.display())));
    }
    tokio::net::unix::pipe::Sender::from_file(file)
}

fn no_stdin(id: &str) -> String {
    format!(
        "{id} has no stdin: only jobs started with terminal(background=true) can be written to (a command moved to the background keeps none)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(format_duration(Duration::from_millis(4200)), "4.2s");
        assert_eq!(format_duration(Duration::from_secs(192)), "3m12s");
        assert_eq!(format_duration(Duration::from_secs(7500)), "2h05m");
    }

    #[test]
    fn notice_texts() {
        let t = notice_text("job_3", &JobStatus::Exited(2), Duration::from_secs(5), "make", "oops\n");
        assert_eq!(t, "[Background job job_3 exited with code 2 after 5.0s. Command: make. Output tail: oops]");
        let t = notice_text("job_4", &JobStatus::Killed, Duration::from_secs(1), "sleep 9", "");
        assert_eq!(t, "[Background job job_4 was killed after 1.0s. Command: sleep 9. Output tail: (no output)]");
    }
}
