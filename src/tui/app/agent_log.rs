//! The log view of a sub-agent job (DESIGN §14): its log is the child's JSON event stream,
//! so instead of raw lines the view shows its conversation — the events fed into a
//! [`Transcript`] of its own and drawn by the transcript's renderer, as the main one is.
//! The feed reads the log incrementally (from the next unread line), so it stays live.

use std::time::Instant;

use ratatui::text::Line;

use super::events::user_origin;
use super::{App, LogSource, Op, LOG_LIMIT};
use crate::protocol::{Event, JobAction, JobId, NoticeLevel, TurnOutcome};
use crate::text::sanitize_for_display as display_text;
use crate::tui::theme::Theme;
use crate::tui::transcript::{CellBody, Slice, Transcript};

/// A sub-agent's conversation as read so far from its job's log.
#[derive(Debug, Default)]
pub(crate) struct AgentFeed {
    pub(crate) id: JobId,
    pub(crate) transcript: Transcript,
    /// The next log line to read (as written, 1-based).
    next_line: u64,
    /// The width the view's lines were laid out at (None: lay out again).
    rendered_at: Option<u16>,
}

impl AgentFeed {
    pub(crate) fn new(id: JobId) -> AgentFeed {
        AgentFeed { id, next_line: 1, ..Default::default() }
    }

    /// Take the window `from..=to` of the log: whole lines (the engine sends no line
    /// still being written), each one event. Returns whether anything changed.
    pub(crate) fn take(&mut self, text: &str, from: u64, to: u64, now: Instant) -> bool {
        if from == 0 || to < from {
            return false;
        }
        if from > self.next_line {
            // The log rotated past what was read: what is gone is gone.
            self.next_line = from;
        }
        let mut changed = false;
        for (i, line) in text.split('\n').take((to - from + 1) as usize).enumerate() {
            let number = from + i as u64;
            if number < self.next_line {
                continue;
            }
            self.next_line = number + 1;
            if let Ok(event) = serde_json::from_str::<Event>(line.trim()) {
                changed |= feed(&mut self.transcript, event, now);
            }
        }
        if changed {
            self.rendered_at = None;
        }
        changed
    }

    /// The conversation as lines of `width`, as the transcript draws them.
    pub(crate) fn lines(&mut self, width: u16, theme: &Theme, now: Instant) -> Vec<Line<'static>> {
        self.rendered_at = Some(width);
        let mut out = Vec::new();
        for cell in 0..self.transcript.cells().len() {
            let take = self.transcript.ensure(cell, width, theme);
            out.extend(self.transcript.rows(Slice { cell, skip: 0, take }, width, theme, now));
        }
        out
    }
}

/// One event of a sub-agent's stream into its transcript, as the main transcript takes
/// it. True when something shows differently.
pub(crate) fn feed(t: &mut Transcript, event: Event, now: Instant) -> bool {
    match event {
        Event::UserMessage { text, trigger, origin, .. } => {
            t.close_assistant();
            t.push(CellBody::User { text, origin: user_origin(origin, Some(&trigger)), folds: Vec::new() });
        }
        Event::AssistantDelta(delta) => t.append_assistant(&delta),
        Event::ReasoningDelta(delta) => t.append_reasoning(&delta),
        Event::AssistantDone { text, reasoning } => t.finish_assistant(&text, reasoning.as_deref()),
        Event::ToolStarted { call_id, name, summary } => {
            t.tool_started(&call_id, &display_text(&name), &display_text(&summary).replace('\n', " "), now)
        }
        Event::ToolFinished { call_id, outcome } => t.tool_finished(&call_id, outcome),
        Event::ApprovalNeeded { command, .. } => t.push(CellBody::Notice {
            level: NoticeLevel::Warn,
            text: format!("asks you to approve: {}", crate::text::reveal_hidden(&command).0),
        }),
        Event::Notice { level, text } => t.push(CellBody::Notice { level, text }),
        Event::TurnFinished { outcome } => {
            t.close_assistant();
            t.end_running_tools();
            if outcome != TurnOutcome::Completed {
                t.push(CellBody::TurnEnd { outcome });
            }
        }
        Event::SessionReady { .. }
        | Event::EarlierHistory { .. }
        | Event::TurnStarted { .. }
        | Event::PendingChanged { .. }
        | Event::Phase { .. }
        | Event::RestoreInput { .. }
        | Event::ToolOutput { .. }
        | Event::JobStarted { .. }
        | Event::JobUpdated { .. }
        | Event::JobFinished { .. }
        | Event::AgentUpdated { .. }
        | Event::JobLog { .. }
        | Event::WatchMatched { .. }
        | Event::JobWatches { .. }
        | Event::McpStatus { .. }
        | Event::SessionList { .. }
        | Event::HeartbeatStatus { .. }
        | Event::GoalStatus { .. }
        | Event::Status(_)
        | Event::Usage { .. }
        | Event::Context { .. }
        | Event::SessionChoices { .. }
        | Event::JobList { .. }
        | Event::JobsKilled { .. }
        | Event::NetworkConnection(_)
        | Event::TurnChanges { .. }
        | Event::RewindPoints { .. }
        | Event::RewindPreview(_)
        | Event::Diff { .. }
        | Event::ShutdownComplete => return false,
    }
    true
}

impl App {
    /// Is job `id` a sub-agent (its row says so)?
    pub(super) fn is_agent_job(&self, id: &str) -> bool {
        self.jobs.iter().any(|j| j.info.id == id && j.info.agent.is_some()) || self.agents.contains_key(id)
    }

    /// Open the log view of sub-agent `id`: its conversation, read from the start.
    pub(super) fn open_agent_log(&mut self, id: JobId, ops: &mut Vec<Op>) {
        self.agent_feed = Some(AgentFeed::new(id.clone()));
        self.log_view = Some(super::LogView::new(LogSource::Job(id.clone()), Vec::new(), true));
        self.request_agent_log(ops);
    }

    /// Ask for the lines of the open sub-agent log not read yet.
    pub(super) fn request_agent_log(&mut self, ops: &mut Vec<Op>) {
        let Some(feed) = &self.agent_feed else { return };
        let offset = Some(feed.next_line);
        let id = feed.id.clone();
        if let Some(view) = &mut self.log_view {
            view.inflight = true;
            view.requested_at = Some(self.now);
        }
        ops.push(Op::Job { id, action: JobAction::Log { offset, limit: Some(LOG_LIMIT) } });
    }

    /// Lines of a sub-agent's log arrived: into its conversation, and more asked for while
    /// the log has more.
    pub(super) fn agent_log_arrived(&mut self, text: &str, from: u64, to: u64, total_lines: u64, ops: &mut Vec<Op>) {
        let now = self.now;
        let Some(feed) = &mut self.agent_feed else { return };
        feed.take(text, from, to, now);
        let more = to > 0 && to < total_lines;
        if let Some(view) = &mut self.log_view {
            view.inflight = false;
        }
        self.render_agent_log();
        if more {
            self.request_agent_log(ops);
        }
    }

    /// Lay the open sub-agent log out again when it changed or the view's width did.
    pub(super) fn render_agent_log(&mut self) {
        let width = self.log_area.width.saturating_sub(2).max(1);
        let Some(feed) = &mut self.agent_feed else { return };
        if feed.rendered_at == Some(width) {
            return;
        }
        let lines = feed.lines(width, &self.theme, self.now);
        if let Some(view) = self.log_view.as_mut().filter(|v| v.source == LogSource::Job(feed.id.clone())) {
            let total = lines.len() as u64;
            view.replace_lines(lines, 1, 0, total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ToolOutcome, TurnTrigger};
    use pretty_assertions::assert_eq;

    fn line(event: &Event) -> String {
        let mut line = serde_json::to_string(event).unwrap();
        line.push('\n');
        line
    }

    #[test]
    fn the_stream_becomes_the_conversation_window_by_window() {
        let now = Instant::now();
        let mut feed = AgentFeed::new("job_3".into());
        let user = Event::UserMessage {
            seq: None,
            text: "TASK: echo hi".into(),
            trigger: TurnTrigger::User,
            origin: crate::protocol::Origin::Typed,
        };
        let started = Event::ToolStarted { call_id: "c1".into(), name: "terminal".into(), summary: "echo hi".into() };
        let done = Event::ToolFinished {
            call_id: "c1".into(),
            outcome: ToolOutcome { ok: true, exit_code: Some(0), status: None, duration_ms: 5, result: "{}".into() },
        };
        let answer = Event::AssistantDone { text: "It said hi.".into(), reasoning: None };
        let text = [line(&user), line(&started), line(&done), "{\"type\":\"ApprovalAnswered\"}".into()].concat();
        assert!(feed.take(&text, 1, 4, now));
        assert_eq!(feed.next_line, 5);
        assert_eq!(feed.transcript.cells().len(), 2);
        // The same window again changes nothing; the next one adds the answer.
        assert!(!feed.take(&text, 1, 4, now));
        assert!(!feed.take("", 0, 0, now), "nothing new");
        assert!(feed.take(line(&answer).trim_end(), 5, 5, now));
        let theme = Theme::default();
        let shown: Vec<String> = feed.lines(60, &theme, now).iter().map(|l| l.to_string()).collect();
        let all = shown.join("\n");
        assert!(all.contains("TASK: echo hi") && all.contains("echo hi") && all.contains("It said hi."), "{all}");
        assert!(!all.contains("\"type\""), "no raw JSON: {all}");
    }
}
