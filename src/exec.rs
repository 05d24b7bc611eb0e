//! Headless mode (`talaria exec`): the same engine, printing instead of drawing.
//! The answer streams to stdout, tool activity and notices to stderr; `--json` prints
//! every `Event` as one JSON line. Exit codes: 0 done, 1 failed (or it killed a job the answer
//! depended on at the end), 130 interrupted.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use crate::present;
use crate::protocol::agent::AgentInfo;
use crate::protocol::usage::Spend;
use crate::protocol::EngineHandle;
use crate::protocol::{Event, NoticeLevel, Op, Phase, TurnOutcome, TurnTrigger};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecOptions {
    pub json: bool,
    /// Leave background jobs running (detached) instead of killing them at the end.
    pub keep_jobs: bool,
    /// Paused (the sentinel): the prompt waits for the unpause instead of failing the run
    /// (a sub-agent, whose parent's `/pause` holds it).
    pub wait_when_paused: bool,
}

/// End the run: background jobs are killed unless `--keep-jobs` (then detached).
fn shut_down(engine: &EngineHandle, keep_jobs: bool) {
    if keep_jobs {
        let _ = engine.ops.send(Op::LeaveJobs { detach: true });
    }
    let _ = engine.ops.send(Op::Shutdown);
}

/// Send `prompt`, print until the turn (and any turns it triggers) ends, shut down.
/// Returns the process exit code.
pub async fn run(engine: EngineHandle, prompt: String, options: ExecOptions) -> anyhow::Result<i32> {
    run_with_inbox(engine, prompt, options, None).await
}

/// `run`, also sending the engine what arrives on `inbox` (a sub-agent's messages and
/// approval answers from its parent, `crate::subagent`).
pub async fn run_with_inbox(
    mut engine: EngineHandle,
    prompt: String,
    options: ExecOptions,
    mut inbox: Option<tokio::sync::mpsc::UnboundedReceiver<Op>>,
) -> anyhow::Result<i32> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let _ = engine.ops.send(Op::Submit { text: prompt.clone(), mode: None });
    let mut printer = Printer {
        json: options.json,
        mid_line: false,
        replied: false,
        spend: Spend::default(),
        running: Vec::new(),
        agents: Default::default(),
    };
    // A long foreground command says it is alive, on a terminal only (a log file or a
    // pipe gets no ticking lines).
    let progress = !options.json && std::io::stderr().is_terminal();
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut run =
        Run { prompt, keep_jobs: options.keep_jobs, wait_when_paused: options.wait_when_paused, ..Run::default() };
    loop {
        tokio::select! {
            event = engine.events.recv() => {
                let Some(event) = event else { break };
                run.follow(&event, &engine);
                let done = matches!(event, Event::ShutdownComplete);
                printer.print(&event)?;
                if done {
                    break;
                }
            }
            _ = ticker.tick(), if progress => printer.progress(),
            op = async {
                match inbox.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => match op {
                Some(op) => { let _ = engine.ops.send(op); }
                None => inbox = None,
            },
            _ = sigint.recv() => {
                if run.interrupted {
                    let _ = engine.ops.send(Op::Shutdown);
                } else {
                    run.interrupted = true;
                    eprintln!("talaria: interrupting (Ctrl+C again to quit at once)");
                    let _ = engine.ops.send(Op::Interrupt);
                }
            }
            _ = sigterm.recv() => { run.interrupted = true; let _ = engine.ops.send(Op::Shutdown); }
            _ = sighup.recv() => {
                // The terminal went away: jobs wait `jobs.orphan_grace_s` for a new owner.
                run.interrupted = true;
                let _ = engine.ops.send(Op::LeaveJobs { detach: options.keep_jobs });
                let _ = engine.ops.send(Op::Shutdown);
            }
        }
    }
    printer.end_line();
    // Drain anything printed after shutdown began, without waiting long.
    let _ = tokio::time::timeout(Duration::from_millis(50), async {
        while let Some(event) = engine.events.recv().await {
            let _ = printer.print(&event);
        }
    })
    .await;
    if !printer.json && (!printer.spend.usage.is_empty() || !printer.agents.is_empty()) {
        let agents: Vec<(String, AgentInfo)> = printer.agents.clone().into_iter().collect();
        for (i, line) in crate::protocol::agent::spend_summary(&printer.spend, &agents).lines().enumerate() {
            let head = if i == 0 { "this run: " } else { "" };
            eprintln!("talaria: {head}{}", line.trim_start());
        }
    }
    Ok(run.exit_code())
}

/// What a run has seen of the engine so far: what decides when it ends and its exit code.
#[derive(Default)]
struct Run {
    prompt: String,
    keep_jobs: bool,
    wait_when_paused: bool,
    outcome: Option<TurnOutcome>,
    interrupted: bool,
    /// The prompt started a turn.
    submitted: bool,
    /// The trigger of the turn running now: only the user's own turn decides the exit code.
    trigger: Option<TurnTrigger>,
    /// What the engine is doing (the same truth the TUI reads).
    phase: Phase,
    /// Jobs the answer was waiting on that the end of the run killed.
    killed_awaited: Vec<String>,
}

impl Run {
    fn follow(&mut self, event: &Event, engine: &EngineHandle) {
        match event {
            Event::TurnStarted { trigger } => {
                self.submitted |= is_users_turn(trigger);
                self.trigger = Some(trigger.clone());
            }
            Event::TurnFinished { outcome } => {
                // exec runs one turn; stop before a job notification could start another.
                // A turn that shutdown interrupts afterwards (a job's completion notice)
                // must not change the outcome of the user's turn.
                if self.trigger.as_ref().is_some_and(is_users_turn) {
                    self.end(*outcome, engine);
                }
            }
            Event::Phase { phase } => self.phase = *phase,
            Event::PendingChanged { queued, .. }
                if !self.submitted
                    && !self.wait_when_paused
                    && self.phase == Phase::Paused
                    && queued.contains(&self.prompt) =>
            {
                // Paused: the prompt would wait for `talaria unpause`. A script is not left
                // hanging: it is taken back (Esc does that) and the run fails.
                if self.outcome.is_none() {
                    eprintln!("talaria: paused (talaria unpause resumes): the prompt was not sent");
                    let _ = engine.ops.send(Op::Interrupt);
                }
                self.end(TurnOutcome::Failed, engine);
            }
            // Our prompt came back unsent.
            Event::RestoreInput { text } if !self.submitted && *text == self.prompt => {
                self.end(TurnOutcome::Failed, engine)
            }
            Event::JobsKilled { jobs } => {
                self.killed_awaited.extend(jobs.iter().filter(|j| j.awaited).map(|j| j.id.clone()));
            }
            Event::NetworkConnection(_)
            | Event::RestoreInput { .. }
            | Event::SessionReady { .. }
            | Event::EarlierHistory { .. }
            | Event::UserMessage { .. }
            | Event::PendingChanged { .. }
            | Event::AssistantDelta(_)
            | Event::ReasoningDelta(_)
            | Event::AssistantDone { .. }
            | Event::ToolStarted { .. }
            | Event::ToolOutput { .. }
            | Event::ToolFinished { .. }
            | Event::ApprovalNeeded { .. }
            | Event::JobStarted { .. }
            | Event::JobUpdated { .. }
            | Event::JobFinished { .. }
            | Event::AgentUpdated { .. }
            | Event::JobLog { .. }
            | Event::WatchMatched { .. }
            | Event::JobWatches { .. }
            | Event::Notice { .. }
            | Event::JobList { .. }
            | Event::McpStatus { .. }
            | Event::SessionList { .. }
            | Event::HeartbeatStatus { .. }
            | Event::GoalStatus { .. }
            | Event::Status(_)
            | Event::Usage { .. }
            | Event::Context { .. }
            | Event::SessionChoices { .. }
            | Event::TurnChanges { .. }
            | Event::RewindPoints { .. }
            | Event::RewindPreview(_)
            | Event::Diff { .. }
            | Event::ShutdownComplete => {}
        }
    }

    /// The first outcome decides; the run shuts down then.
    fn end(&mut self, outcome: TurnOutcome, engine: &EngineHandle) {
        if self.outcome.is_none() {
            self.outcome = Some(outcome);
            shut_down(engine, self.keep_jobs);
        }
    }

    fn exit_code(&self) -> i32 {
        match self.outcome {
            // The answer is there but it depended on work that was cut short.
            Some(TurnOutcome::Completed) if !self.killed_awaited.is_empty() => 1,
            Some(TurnOutcome::Completed) => 0,
            Some(TurnOutcome::Interrupted) => 130,
            Some(TurnOutcome::Failed) | Some(TurnOutcome::BudgetExhausted) => 1,
            None if self.interrupted => 130,
            None => 1,
        }
    }
}

/// Everything exec writes to stderr from a command, a model or a provider goes through the
/// sanitiser the TUI uses: an `ESC ]52` in a command must not write the user's clipboard.
fn clean(text: &str) -> String {
    crate::text::for_terminal(text)
}

/// Turns that carry (or retry) the prompt exec was given, as opposed to turns the engine
/// starts by itself (a job's completion notice, the heartbeat, a goal continuation).
fn is_users_turn(trigger: &TurnTrigger) -> bool {
    match trigger {
        TurnTrigger::User | TurnTrigger::Queued | TurnTrigger::Retry => true,
        TurnTrigger::JobNotification | TurnTrigger::Heartbeat | TurnTrigger::Goal => false,
    }
}

/// How often a running foreground command's progress line is printed on a terminal.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Characters of the last output line a progress line shows.
const PROGRESS_LINE_CHARS: usize = 100;

/// `  … 12s · tick 12`: how long the command has run and the last line it printed.
pub(crate) fn progress_line(elapsed: Duration, last_line: &str) -> String {
    let time = crate::util::format_duration_ms(elapsed.as_secs() * 1000);
    let line = clean(last_line);
    let line = line.trim();
    if line.is_empty() {
        return format!("  … {time} · no output yet");
    }
    let cut: String = line.chars().take(PROGRESS_LINE_CHARS).collect();
    let more = if line.chars().count() > PROGRESS_LINE_CHARS { "…" } else { "" };
    format!("  … {time} · {cut}{more}")
}

/// A tool running now, for its progress line.
struct Running {
    call_id: String,
    started: std::time::Instant,
    last_line: String,
}

struct Printer {
    /// The tools running now (oldest first).
    running: Vec<Running>,
    json: bool,
    /// The last thing written to stdout did not end with a newline.
    mid_line: bool,
    /// A reply was printed: the next one is set apart by a blank line.
    replied: bool,
    /// Every model call added up, for the closing line on stderr.
    spend: Spend,
    /// Sub-agents of this run, by job id (their spend goes into the summary).
    agents: std::collections::BTreeMap<String, AgentInfo>,
}

/// An event as `--json` prints it: without what only an interactive front end uses (the
/// input history), and with a tool result that is JSON as an object, not a string.
pub(crate) fn json_line(event: &Event) -> serde_json::Result<serde_json::Value> {
    let mut value = match event {
        Event::SessionReady { .. } => {
            let mut value = serde_json::to_value(event)?;
            if let Some(data) = value.get_mut("data").and_then(serde_json::Value::as_object_mut) {
                data.remove("input_history");
            }
            value
        }
        Event::TurnStarted { .. }
        | Event::EarlierHistory { .. }
        | Event::UserMessage { .. }
        | Event::PendingChanged { .. }
        | Event::Phase { .. }
        | Event::RestoreInput { .. }
        | Event::AssistantDelta(_)
        | Event::ReasoningDelta(_)
        | Event::AssistantDone { .. }
        | Event::ToolStarted { .. }
        | Event::ToolOutput { .. }
        | Event::ToolFinished { .. }
        | Event::ApprovalNeeded { .. }
        | Event::JobStarted { .. }
        | Event::JobUpdated { .. }
        | Event::JobFinished { .. }
        | Event::AgentUpdated { .. }
        | Event::JobLog { .. }
        | Event::WatchMatched { .. }
        | Event::JobWatches { .. }
        | Event::TurnFinished { .. }
        | Event::Notice { .. }
        | Event::JobList { .. }
        | Event::McpStatus { .. }
        | Event::SessionList { .. }
        | Event::HeartbeatStatus { .. }
        | Event::GoalStatus { .. }
        | Event::Status(_)
        | Event::Usage { .. }
        | Event::Context { .. }
        | Event::SessionChoices { .. }
        | Event::JobsKilled { .. }
        | Event::NetworkConnection(_)
        | Event::TurnChanges { .. }
        | Event::RewindPoints { .. }
        | Event::RewindPreview(_)
        | Event::Diff { .. }
        | Event::ShutdownComplete => serde_json::to_value(event)?,
    };
    if let Some(result) = value.pointer_mut("/data/outcome/result") {
        let parsed = result.as_str().and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok());
        if let Some(parsed) = parsed.filter(|v| v.is_object() || v.is_array()) {
            *result = parsed;
        }
    }
    Ok(value)
}

impl Printer {
    fn print(&mut self, event: &Event) -> anyhow::Result<()> {
        self.track(event);
        self.count_usage(event);
        if let Event::AgentUpdated { id, agent } = event {
            self.agents.insert(id.clone(), (**agent).clone());
        }
        if self.json {
            let mut out = std::io::stdout().lock();
            serde_json::to_writer(&mut out, &json_line(event)?)?;
            out.write_all(b"\n")?;
            out.flush()?;
            return Ok(());
        }
        match event {
            Event::AssistantDelta(text) => self.assistant_delta(text)?,
            Event::AssistantDone { text, .. } => {
                self.end_line();
                self.replied |= !text.trim().is_empty();
            }
            Event::ToolStarted { name, summary, .. } => {
                self.end_line();
                eprintln!("▸ {} {}", clean(name), clean(summary));
            }
            Event::ToolFinished { outcome, .. } => {
                let mark = if outcome.ok { "✓" } else { "✗" };
                let code = outcome.exit_code.map(|c| format!(" exit {c}")).unwrap_or_default();
                let status = outcome.status.map(|s| format!(" {}", s.as_str())).unwrap_or_default();
                eprintln!("  {mark}{code}{status} ({:.1}s)", outcome.duration_ms as f64 / 1000.0);
            }
            Event::ApprovalNeeded { command, reason, from, .. } => {
                let who = from.as_ref().map(|a| format!(" ({})", clean(a))).unwrap_or_default();
                eprintln!("talaria: approval needed for `{}`{who}: {}", clean(command), clean(reason))
            }
            Event::JobStarted { job } => {
                eprintln!("  ↳ {} running in the background: {}", clean(&job.id), clean(&job.command))
            }
            Event::JobFinished { id, status } => eprintln!("  ↳ {} {}", clean(id), clean(&status.label())),
            // Counted for the summary (track); its conversation is in its own session.
            Event::AgentUpdated { .. } => {}
            Event::JobsKilled { jobs } => self.jobs_killed(jobs),
            Event::Notice { level, text } => self.notice(*level, text),
            Event::NetworkConnection(c) => {
                self.end_line();
                eprintln!("  ↳ {}", clean(&present::network_line(c)));
            }
            Event::JobList { jobs } => self.notice(NoticeLevel::Info, &present::job_list(jobs)),
            Event::McpStatus { servers, tools } => {
                self.notice(NoticeLevel::Info, &present::mcp_status(servers, *tools))
            }
            Event::SessionList { sessions, matching } => {
                let level =
                    if sessions.is_empty() && matching.is_some() { NoticeLevel::Error } else { NoticeLevel::Info };
                self.notice(level, &present::session_list(sessions, matching.as_deref()))
            }
            Event::HeartbeatStatus { heartbeat } => {
                let offset = crate::util::local_utc_offset_s(crate::util::now_ms());
                self.notice(NoticeLevel::Info, &present::heartbeat_status(heartbeat.as_ref(), offset))
            }
            Event::GoalStatus { goal, gates_only } => {
                let text = if *gates_only {
                    present::gate_list_alone(goal.as_deref())
                } else {
                    present::goal_status(goal.as_deref())
                };
                self.notice(NoticeLevel::Info, &text)
            }
            Event::TurnChanges { turn, paths } => {
                if !paths.is_empty() {
                    self.end_line();
                    eprintln!("  {}", clean(&crate::protocol::rewind::changes_text(*turn, paths)));
                }
            }
            Event::RewindPoints { points, warnings } => {
                self.notice(NoticeLevel::Info, &crate::protocol::rewind::points_text(points, warnings))
            }
            Event::RewindPreview(preview) => {
                self.notice(NoticeLevel::Info, &crate::protocol::rewind::preview_text(preview))
            }
            Event::Diff { title, text } => self.notice(NoticeLevel::Info, &format!("{title}\n{text}")),
            Event::TurnFinished { .. }
            | Event::SessionReady { .. }
            | Event::EarlierHistory { .. }
            | Event::TurnStarted { .. }
            | Event::UserMessage { .. }
            | Event::PendingChanged { .. }
            | Event::Phase { .. }
            | Event::RestoreInput { .. }
            | Event::ReasoningDelta(_)
            | Event::ToolOutput { .. }
            | Event::JobUpdated { .. }
            | Event::JobLog { .. }
            | Event::WatchMatched { .. }
            | Event::JobWatches { .. }
            | Event::Status(_)
            | Event::Usage { .. }
            | Event::Context { .. }
            | Event::SessionChoices { .. }
            | Event::ShutdownComplete => {}
        }
        Ok(())
    }

    /// Add up what the model calls cost, for the summary at the end.
    fn count_usage(&mut self, event: &Event) {
        if let Some((tokens, cost_usd)) = event.spent() {
            self.spend.add(&tokens, cost_usd);
        }
    }

    fn assistant_delta(&mut self, text: &str) -> anyhow::Result<()> {
        if self.replied && !text.is_empty() {
            println!();
            self.replied = false;
        }
        let mut out = std::io::stdout().lock();
        // Escape sequences, C1 and bidi controls from the model never reach the terminal.
        out.write_all(crate::text::neutralise_controls(&crate::text::strip_ansi(text)).as_bytes())?;
        out.flush()?;
        self.mid_line = !text.ends_with('\n');
        Ok(())
    }

    fn jobs_killed(&mut self, jobs: &[crate::protocol::KilledJob]) {
        self.end_line();
        for job in jobs {
            let why = if job.awaited {
                "; the answer depended on it (the model was waiting for its result), so exec exits 1"
            } else {
                ""
            };
            eprintln!("talaria: killed {} at exit: {}{why}", clean(&job.id), clean(&job.command));
        }
        eprintln!("talaria: `talaria exec --keep-jobs` leaves background jobs running instead");
    }

    /// Keep what the progress line needs: which tools run, and the last line each printed.
    fn track(&mut self, event: &Event) {
        if let Event::ToolStarted { call_id, .. } = event {
            let tool =
                Running { call_id: call_id.clone(), started: std::time::Instant::now(), last_line: String::new() };
            self.running.push(tool);
        } else if let Event::ToolOutput { call_id, chunk } = event {
            let text = crate::text::sanitize_for_display(chunk);
            if let Some(line) = text.lines().rev().find(|l| !l.trim().is_empty()) {
                if let Some(tool) = self.running.iter_mut().find(|t| &t.call_id == call_id) {
                    tool.last_line = line.trim_end().to_string();
                }
            }
        } else if let Event::ToolFinished { call_id, .. } = event {
            self.running.retain(|t| &t.call_id != call_id);
        } else if let Event::TurnFinished { .. } = event {
            self.running.clear();
        }
    }

    /// Every few seconds on a terminal: the oldest running tool's elapsed time and last line.
    fn progress(&mut self) {
        let Some(tool) = self.running.first() else { return };
        if tool.started.elapsed() < PROGRESS_EVERY {
            return;
        }
        let line = progress_line(tool.started.elapsed(), &tool.last_line);
        self.end_line();
        eprintln!("{line}");
    }

    fn notice(&mut self, level: NoticeLevel, text: &str) {
        self.end_line();
        let prefix = match level {
            NoticeLevel::Info => "talaria",
            NoticeLevel::Warn => "talaria: warning",
            NoticeLevel::Error => "talaria: error",
        };
        eprintln!("{prefix}: {}", clean(text));
    }

    fn end_line(&mut self) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{json_line, progress_line};
    use std::time::Duration;

    #[test]
    fn a_progress_line_has_the_elapsed_time_and_the_last_line_made_safe() {
        assert_eq!(progress_line(Duration::from_millis(12_400), "tick 12"), "  … 12.0s · tick 12");
        assert_eq!(progress_line(Duration::from_secs(75), ""), "  … 1m15s · no output yet");
        let hostile = progress_line(Duration::from_secs(5), "\x1b]52;c;aGk=\x07done");
        assert!(!hostile.contains('\x1b') && hostile.ends_with("done"), "{hostile:?}");
        let long = progress_line(Duration::from_secs(5), &"x".repeat(300));
        assert!(long.ends_with("x…") && long.chars().count() < 120, "{long}");
    }
    use crate::protocol::{BusyMode, Event, ToolOutcome};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn json_lines_leave_out_the_input_history_and_give_json_results_as_objects() {
        let ready = Event::SessionReady {
            session_id: "s1".into(),
            title: None,
            model: "demo".into(),
            provider: "demo".into(),
            demo: true,
            cwd: "/w".into(),
            busy_mode: BusyMode::Redirect,
            history: Vec::new(),
            input_history: vec!["an earlier paste".into()],
            earlier: None,
        };
        let line = json_line(&ready).unwrap();
        assert_eq!(line["type"], "SessionReady");
        assert!(line["data"].get("input_history").is_none(), "{line}");
        assert_eq!(line["data"]["session_id"], "s1");
        let finished = |result: &str| Event::ToolFinished {
            call_id: "c1".into(),
            outcome: ToolOutcome { ok: true, exit_code: Some(0), status: None, duration_ms: 5, result: result.into() },
        };
        let line = json_line(&finished(r#"{"output":"hi","exit_code":0}"#)).unwrap();
        assert_eq!(line["data"]["outcome"]["result"], json!({"output": "hi", "exit_code": 0}));
        let line = json_line(&finished("plain text")).unwrap();
        assert_eq!(line["data"]["outcome"]["result"], "plain text", "a result that is not JSON stays a string");
    }
}
