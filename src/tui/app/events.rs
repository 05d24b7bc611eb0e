//! Engine events into state.

use ansi_to_tui::IntoText;
use ratatui::text::Line;

use super::{
    App, ExitState, JobRow, LogSource, LogView, Op, PendingApproval, RunningTool, JOB_ROWS_MAX, LOG_LIMIT,
    TOOL_OUTPUT_MAX,
};
use crate::protocol::{Event, HistoryItem, JobAction, MessageOrigin, StatusInfo, TurnOutcome, TurnTrigger};
use crate::text::{sanitize_for_display as display_text, sgr_only};
use crate::tui::transcript::{CellBody, UserOrigin};

/// The last non-empty line of some output, sanitised.
pub(super) fn last_line(text: &str) -> String {
    display_text(text).lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim_end().to_string()
}

/// Output with colour kept as styled lines; other escape sequences removed.
pub(crate) fn log_lines(text: &str) -> Vec<Line<'static>> {
    let cleaned = sgr_only(text);
    match cleaned.as_bytes().into_text() {
        Ok(parsed) => parsed.lines,
        Err(_) => display_text(text).lines().map(|l| Line::raw(l.to_string())).collect(),
    }
}

impl App {
    pub(super) fn on_engine(&mut self, event: Event, ops: &mut Vec<Op>) {
        match event {
            Event::SessionReady {
                session_id,
                title,
                model,
                provider,
                demo,
                cwd,
                busy_mode,
                history,
                input_history,
            } => {
                let switched = self.session.session_id.as_deref() != Some(session_id.as_str());
                for text in &input_history {
                    self.push_history(text.trim());
                }
                if switched || !history.is_empty() {
                    self.transcript.clear();
                }
                for item in history {
                    self.restore_item(item);
                }
                self.transcript.follow();
                self.status.model = model;
                self.status.session_id = session_id.clone();
                self.status.busy_mode = Some(busy_mode);
                self.session.session_id = Some(session_id);
                self.session.title = title;
                self.session.provider = provider;
                self.session.demo = demo;
                self.session.cwd = cwd;
                self.session.busy_mode = busy_mode;
                self.busy = false;
                self.last_outcome = None;
            }
            Event::TurnStarted { trigger: _ } => {
                self.busy = true;
                self.turn_started = Some(self.now);
                self.last_outcome = None;
            }
            Event::UserMessage { text, trigger, origin } => {
                let origin = match (origin, trigger) {
                    (MessageOrigin::MidTurn, _) => UserOrigin::MidTurn,
                    (MessageOrigin::TurnInput, trigger) => match trigger {
                        TurnTrigger::User => UserOrigin::Typed,
                        TurnTrigger::Queued => UserOrigin::Queued,
                        TurnTrigger::JobNotification => UserOrigin::JobNotification,
                        TurnTrigger::Heartbeat => UserOrigin::Heartbeat,
                        TurnTrigger::Goal => UserOrigin::Goal,
                        TurnTrigger::Retry => UserOrigin::Retry,
                    },
                };
                self.transcript.close_assistant();
                if matches!(origin, UserOrigin::Typed | UserOrigin::MidTurn | UserOrigin::Queued) {
                    self.transcript.follow();
                }
                self.transcript.push(CellBody::User { text, origin });
            }
            Event::PendingChanged { pending } => self.pending = pending,
            Event::RestoreInput { text } => {
                let current = self.input_text();
                let joined = if current.trim().is_empty() { text } else { format!("{text}\n{current}") };
                self.reset_input(joined);
            }
            Event::AssistantDelta(delta) => {
                self.transcript.append_assistant(&delta);
            }
            Event::ReasoningDelta(delta) => {
                self.transcript.append_reasoning(&delta);
            }
            Event::AssistantDone { text, reasoning } => {
                self.transcript.finish_assistant(&text, reasoning.as_deref());
            }
            Event::ToolStarted { call_id, name, summary } => {
                self.transcript.tool_started(&call_id, &name, &summary, self.now);
                self.tools.push(RunningTool {
                    call_id,
                    name: display_text(&name),
                    summary: display_text(&summary).replace('\n', " "),
                    started: self.now,
                    last_line: String::new(),
                    output: String::new(),
                });
            }
            Event::ToolOutput { call_id, chunk } => {
                let Some(tool) = self.tools.iter_mut().find(|t| t.call_id == call_id) else { return };
                tool.output.push_str(&chunk);
                if tool.output.len() > TOOL_OUTPUT_MAX {
                    let keep = crate::text::tail_chars(&tool.output, TOOL_OUTPUT_MAX / 2).to_string();
                    tool.output = keep;
                }
                let line = last_line(&chunk);
                if !line.is_empty() {
                    tool.last_line = line;
                }
                if let Some(view) = &mut self.log_view {
                    if view.source == LogSource::Tool(call_id) {
                        view.lines = log_lines(&tool.output);
                        view.total_lines = view.lines.len() as u64;
                    }
                }
            }
            Event::ToolFinished { call_id, outcome } => {
                self.transcript.tool_finished(&call_id, outcome);
                self.tools.retain(|t| t.call_id != call_id);
            }
            Event::ApprovalNeeded { id, command, reason } => {
                self.notify(&format!("approval needed: {command}"));
                self.approvals.push_back(PendingApproval {
                    id,
                    command: display_text(&command),
                    reason: display_text(&reason),
                    shown_at: self.now,
                });
            }
            Event::JobStarted { job } => {
                let mut job = job;
                job.last_line = last_line(&job.last_line);
                job.command = display_text(&job.command);
                let finished_at_ms = (!job.status.is_running()).then_some(self.wall_ms);
                let row = JobRow { info: job, finished_at_ms };
                match self.jobs.iter_mut().find(|j| j.info.id == row.info.id) {
                    Some(existing) => *existing = row,
                    None => self.jobs.push(row),
                }
                self.prune_jobs();
            }
            Event::JobUpdated { id, status, tail } => {
                if let Some(row) = self.jobs.iter_mut().find(|j| j.info.id == id) {
                    let line = last_line(&tail);
                    if !line.is_empty() {
                        row.info.last_line = line;
                    }
                    if !status.is_running() && row.finished_at_ms.is_none() {
                        row.finished_at_ms = Some(self.wall_ms);
                    }
                    row.info.status = status;
                }
                self.refresh_log(&id, ops);
            }
            Event::JobFinished { id, status } => {
                if let Some(row) = self.jobs.iter_mut().find(|j| j.info.id == id) {
                    row.info.status = status;
                    row.finished_at_ms.get_or_insert(self.wall_ms);
                }
                self.refresh_log(&id, ops);
            }
            Event::JobLog { id, text, first_line, total_lines } => {
                if let Some(view) = &mut self.log_view {
                    if view.source == LogSource::Job(id) {
                        view.lines = log_lines(&text);
                        view.first_line = first_line;
                        view.total_lines = total_lines;
                        view.inflight = false;
                        view.scroll = view.scroll.min(view.lines.len().saturating_sub(1));
                    }
                }
            }
            Event::TurnFinished { outcome } => {
                self.busy = false;
                self.transcript.close_assistant();
                self.transcript.end_running_tools();
                self.tools.clear();
                self.last_outcome = Some(outcome);
                if outcome != TurnOutcome::Completed {
                    self.transcript.push(CellBody::TurnEnd { outcome });
                }
                let long =
                    self.turn_started.is_some_and(|t| self.now.saturating_duration_since(t) >= self.notify_after);
                if long {
                    self.notify(&format!("turn {}", outcome.as_str()));
                }
                self.turn_started = None;
            }
            Event::Notice { level, text } => self.transcript.push(CellBody::Notice { level, text }),
            Event::Status(info) => {
                if let Some(mode) = info.busy_mode {
                    self.session.busy_mode = mode;
                }
                // `Event::Context` may be the only source of the context use: a status
                // without it keeps the last one known.
                let context_pct = info.context_pct.or(self.status.context_pct);
                self.status = StatusInfo { context_pct, ..info };
            }
            Event::Usage { prompt_tokens, completion_tokens, cache_read_tokens, cache_write_tokens, cost_usd } => {
                self.usage = Some((prompt_tokens, completion_tokens));
                let usage = crate::engine::llm::Usage {
                    prompt_tokens,
                    completion_tokens,
                    cache_read_tokens,
                    cache_write_tokens,
                };
                self.spend.add(&usage, cost_usd);
            }
            Event::Context { percent, .. } => self.status.context_pct = percent,
            Event::ShutdownComplete => self.exit = ExitState::Done,
        }
    }

    fn restore_item(&mut self, item: HistoryItem) {
        match item {
            HistoryItem::User { text, origin } => {
                let origin = match origin {
                    MessageOrigin::MidTurn => UserOrigin::MidTurn,
                    MessageOrigin::TurnInput => UserOrigin::Typed,
                };
                self.push_history(text.trim());
                self.transcript.push(CellBody::User { text, origin });
            }
            HistoryItem::Assistant { text, reasoning } => {
                self.transcript.push(CellBody::Assistant {
                    text,
                    reasoning: reasoning.unwrap_or_default(),
                    streaming: false,
                });
            }
            HistoryItem::Tool { call_id, name, summary, outcome } => {
                self.transcript.tool_started(&call_id, &name, &summary, self.now);
                self.transcript.tool_finished(&call_id, outcome);
            }
            HistoryItem::Notice { level, text } => self.transcript.push(CellBody::Notice { level, text }),
        }
    }

    /// Drop the oldest finished jobs beyond the cap.
    fn prune_jobs(&mut self) {
        while self.jobs.len() > JOB_ROWS_MAX {
            match self.jobs.iter().position(|j| !j.info.status.is_running()) {
                Some(i) => {
                    self.jobs.remove(i);
                }
                None => break,
            }
        }
    }

    /// A followed job log asks for its newest lines when the job changes.
    fn refresh_log(&mut self, id: &str, ops: &mut Vec<Op>) {
        let Some(view) = &mut self.log_view else { return };
        if view.source != LogSource::Job(id.to_string()) || !view.follow || view.inflight {
            return;
        }
        view.inflight = true;
        ops.push(Op::Job { id: id.to_string(), action: JobAction::Log { offset: None, limit: Some(LOG_LIMIT) } });
    }

    /// Open the log view of a job and ask the engine for its log.
    pub(super) fn open_job_log(&mut self, id: String, ops: &mut Vec<Op>) {
        ops.push(Op::Job { id: id.clone(), action: JobAction::Log { offset: None, limit: Some(LOG_LIMIT) } });
        self.log_view = Some(LogView {
            source: LogSource::Job(id),
            lines: Vec::new(),
            first_line: 0,
            total_lines: 0,
            follow: true,
            scroll: 0,
            inflight: true,
            search: None,
        });
    }

    pub(super) fn open_tool_log(&mut self, call_id: String) {
        let lines = self.tools.iter().find(|t| t.call_id == call_id).map(|t| log_lines(&t.output)).unwrap_or_default();
        let total = lines.len() as u64;
        self.log_view = Some(LogView {
            source: LogSource::Tool(call_id),
            lines,
            first_line: 0,
            total_lines: total,
            follow: true,
            scroll: 0,
            inflight: false,
            search: None,
        });
    }
}
