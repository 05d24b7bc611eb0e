//! Engine events into state.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use super::{
    App, ExitState, JobRow, LogSource, LogView, Modal, Op, PendingApproval, RunningTool, SessionFacts, JOB_ROWS_MAX,
    LOG_LIMIT, LOG_REFRESH_EVERY, TOOL_OUTPUT_MAX,
};
use crate::present;
use crate::protocol::{
    Event, HistoryItem, JobAction, JobFate, JobId, JobStatus, NoticeLevel, Origin, Phase, SessionInfo, StatusInfo,
    TurnOutcome, TurnTrigger,
};
use crate::text::sanitize_for_display as display_text;
use crate::tui::transcript::{CellBody, UserOrigin};

/// The last non-empty line of some output, sanitised. Only the end of the text is
/// sanitised — a line at a time from the last, until one shows something — so a job's
/// 2,000-character tail costs what its last line costs, however often it arrives.
pub(super) fn last_line(text: &str) -> String {
    let mut end = text.len();
    while end > 0 {
        let start = text[..end].trim_end_matches('\n').rfind('\n').map_or(0, |i| i + 1);
        let shown = display_text(&text[start..end]);
        if let Some(line) = shown.lines().rev().find(|l| !l.trim().is_empty()) {
            return line.trim_end().to_string();
        }
        end = start;
    }
    String::new()
}

/// What the end of the run killed, in one line.
fn killed_text(jobs: &[crate::protocol::KilledJob]) -> String {
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    let noun = if ids.len() == 1 { "job" } else { "jobs" };
    format!("killed {} running {noun}: {}", ids.len(), ids.join(", "))
}

/// How a user-role message is labelled: from its stored origin, never from its text.
pub(super) fn user_origin(origin: Origin, trigger: Option<&TurnTrigger>) -> UserOrigin {
    match origin {
        Origin::Typed if trigger == Some(&TurnTrigger::Retry) => UserOrigin::Retry,
        Origin::Typed => UserOrigin::Typed,
        Origin::MidTurn => UserOrigin::MidTurn,
        Origin::Queued => UserOrigin::Queued,
        Origin::Heartbeat => UserOrigin::Heartbeat,
        Origin::Goal => UserOrigin::Goal,
        Origin::JobNotice | Origin::Watch => UserOrigin::JobNotification,
        Origin::SubAgent => UserOrigin::SubAgent,
    }
}

/// Command output as a terminal shows it (rewrites applied, DESIGN §4c), colour kept as
/// styled lines read straight from the emulator's cells; every other escape sequence is
/// gone with the emulation.
pub(crate) fn log_lines(text: &str) -> Vec<Line<'static>> {
    crate::emulate::styled_lines(text)
        .into_iter()
        .map(|runs| {
            Line::from(runs.into_iter().map(|run| Span::styled(shown(&run.text), style(run.look))).collect::<Vec<_>>())
        })
        .collect()
}

/// A cell's text without what could still act on the terminal or reorder what is read: a
/// C1 control the emulator stored as a character, a bidirectional override.
fn shown(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() && !matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
        .collect()
}

/// A cell's look as a ratatui style: the sixteen indexed colours by name, as a terminal
/// names them (SGR 30–37, 90–97), the others by index or value.
fn style(look: crate::emulate::Look) -> Style {
    let color = |c: vt100::Color| match c {
        vt100::Color::Default => None,
        vt100::Color::Idx(i) if i < 16 => Some(
            [
                Color::Black,
                Color::Red,
                Color::Green,
                Color::Yellow,
                Color::Blue,
                Color::Magenta,
                Color::Cyan,
                Color::Gray,
                Color::DarkGray,
                Color::LightRed,
                Color::LightGreen,
                Color::LightYellow,
                Color::LightBlue,
                Color::LightMagenta,
                Color::LightCyan,
                Color::White,
            ][usize::from(i)],
        ),
        vt100::Color::Idx(i) => Some(Color::Indexed(i)),
        vt100::Color::Rgb(r, g, b) => Some(Color::Rgb(r, g, b)),
    };
    let mut style = Style::default();
    if let Some(fg) = color(look.fg) {
        style = style.fg(fg);
    }
    if let Some(bg) = color(look.bg) {
        style = style.bg(bg);
    }
    for (on, modifier) in [
        (look.bold, Modifier::BOLD),
        (look.dim, Modifier::DIM),
        (look.italic, Modifier::ITALIC),
        (look.underline, Modifier::UNDERLINED),
        (look.inverse, Modifier::REVERSED),
    ] {
        if on {
            style = style.add_modifier(modifier);
        }
    }
    style
}

impl App {
    pub(super) fn on_engine(&mut self, event: Event, ops: &mut Vec<Op>) {
        self.answer_command(&event);
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
                earlier,
            } => {
                let switched = self.session.session_id.as_deref() != Some(session_id.as_str());
                self.show_session(switched, history, &input_history, earlier);
                self.status.model = model;
                self.status.session_id = session_id.clone();
                self.status.busy_mode = Some(busy_mode);
                self.session = SessionFacts { session_id: Some(session_id), title, provider, cwd, demo, busy_mode };
                self.last_outcome = None;
            }
            Event::EarlierHistory { items, earlier } => {
                let bodies: Vec<CellBody> = items.into_iter().map(|item| self.history_body(item)).collect();
                self.transcript.prepend(bodies);
                (self.earlier, self.earlier_requested) = (earlier, false);
            }
            Event::TurnStarted { trigger: _ } => {
                self.turn_started = Some(self.now);
                self.last_outcome = None;
            }
            Event::Phase { phase } => self.phase_changed(phase),
            Event::UserMessage { text, trigger, origin, seq } => self.user_message(text, &trigger, origin, seq),
            Event::PendingChanged { pending, queued } => (self.pending, self.queued) = (pending, queued),
            Event::RestoreInput { text } => self.restore_input(text),
            Event::AssistantDelta(delta) => self.transcript.append_assistant(&delta),
            Event::ReasoningDelta(delta) => self.transcript.append_reasoning(&delta),
            Event::AssistantDone { text, reasoning } => self.transcript.finish_assistant(&text, reasoning.as_deref()),
            Event::ToolStarted { call_id, name, summary } => self.tool_started(call_id, &name, &summary),
            Event::ToolOutput { call_id, chunk } => self.tool_output(call_id, &chunk),
            Event::ToolFinished { call_id, outcome } => {
                self.transcript.tool_finished(&call_id, outcome);
                self.tools.retain(|t| t.call_id != call_id);
            }
            Event::ApprovalNeeded { id, command, reason, grounds, from } => {
                self.approval_needed(id, &command, &reason, grounds, from)
            }
            Event::JobStarted { job } => self.job_started(job),
            Event::JobUpdated { id, status, tail } => self.job_updated(id, status, &tail, ops),
            Event::JobFinished { id, status } => self.job_finished(id, status, ops),
            Event::JobLog { id, text, total_lines, from, to, .. }
                if self.agent_feed.as_ref().is_some_and(|f| f.id == id) =>
            {
                self.agent_log_arrived(&text, from, to, total_lines, ops)
            }
            Event::AgentUpdated { id, agent } => self.agent_updated(id, *agent),
            Event::JobLog { id, text, first_line, total_lines, from, to } => {
                self.job_log(id, &text, first_line, total_lines, (from, to))
            }
            Event::WatchMatched { id, pattern, line, more, ended } => {
                self.watch_matched(&id, &pattern, &line, more, ended)
            }
            Event::JobWatches { id, patterns } => {
                if let Some(row) = self.jobs.iter_mut().find(|j| j.info.id == id) {
                    row.watches = patterns;
                }
            }
            Event::TurnFinished { outcome } => self.turn_finished(outcome),
            Event::Status(info) => self.status_changed(info),
            event @ Event::Usage { .. } => {
                if let Some((tokens, cost_usd)) = event.spent() {
                    self.usage = Some((tokens.prompt_tokens, tokens.completion_tokens));
                    self.spend.add(&tokens, cost_usd);
                }
            }
            Event::Context { percent, .. } => self.status.context_pct = percent,
            Event::SessionChoices { query, sessions } => self.offer_sessions(&query, sessions),
            Event::ShutdownComplete => self.exit = ExitState::Done,
            // `/network` lists them; a refusal also reaches the tool result.
            Event::NetworkConnection(_) => {}
            // Listings and notices: the log view covers the transcript, so what is said
            // meanwhile shows in it too.
            Event::Notice { level, text } => self.log_say(level, text),
            Event::JobList { jobs } => self.log_say(NoticeLevel::Info, present::job_list(&jobs)),
            Event::McpStatus { servers, tools } => {
                self.log_say(NoticeLevel::Info, present::mcp_status(&servers, tools))
            }
            Event::SessionList { sessions, matching } => self.session_list(&sessions, matching.as_deref()),
            Event::HeartbeatStatus { heartbeat } => {
                let offset = crate::util::local_utc_offset_s(crate::util::now_ms());
                self.log_say(NoticeLevel::Info, present::heartbeat_status(heartbeat.as_ref(), offset))
            }
            Event::GoalStatus { goal, gates_only } => {
                let goal = goal.as_deref();
                let text = if gates_only { present::gate_list_alone(goal) } else { present::goal_status(goal) };
                self.log_say(NoticeLevel::Info, text)
            }
            Event::JobsKilled { jobs } => self.log_say(NoticeLevel::Info, killed_text(&jobs)),
            Event::TurnChanges { .. } => {}
            Event::RewindPoints { points, warnings } => self.offer_rewind(points, warnings),
            Event::RewindPreview(preview) => self.confirm_rewind(preview),
            Event::Diff { title, text } => self.show_diff(title, text),
        }
    }

    fn restore_input(&mut self, text: String) {
        let current = self.input_text();
        if current.trim().is_empty() {
            // Given back (an /undo, an interrupt): selected, so what is typed next
            // replaces it instead of being appended to it.
            self.reset_input(text);
            self.input.select_all();
            self.input_hint = Some("restored: typing replaces it · ← → keep it to edit".to_string());
        } else {
            self.reset_input(format!("{text}\n{current}"));
        }
    }

    fn job_log(&mut self, id: JobId, text: &str, first_line: u64, total_lines: u64, (from, to): (u64, u64)) {
        if let Some(view) = self.log_view.as_mut().filter(|v| v.source == LogSource::Job(id)) {
            // Old engines sent no range: the text then starts at `first_line`.
            let from = if to == 0 && from == 0 { first_line } else { from };
            view.replace_lines(log_lines(text), from, to, total_lines);
            view.inflight = false;
        }
    }

    fn status_changed(&mut self, info: StatusInfo) {
        if let Some(mode) = info.busy_mode {
            self.session.busy_mode = mode;
        }
        // The heartbeat's countdown runs from here until the next status.
        self.status_at = self.now;
        self.status_known = true;
        // `Event::Context` may be the only source of the context use: a status
        // without it keeps the last one known.
        let context_pct = info.context_pct.or(self.status.context_pct);
        self.status = StatusInfo { context_pct, ..info };
    }

    fn session_list(&mut self, sessions: &[SessionInfo], matching: Option<&str>) {
        let level = if sessions.is_empty() && matching.is_some() { NoticeLevel::Error } else { NoticeLevel::Info };
        self.log_say(level, present::session_list(sessions, matching))
    }

    fn watch_matched(&mut self, id: &str, pattern: &str, line: &str, more: u64, ended: bool) {
        let line = display_text(line);
        let more = if more > 0 { format!(" (+{more} more)") } else { String::new() };
        let end = if ended { " · that was its last notice: the watch has ended" } else { "" };
        let text = format!("{id} matched your watch /{pattern}/: {line}{more}{end}");
        self.notify(&format!("{id} matched /{pattern}/: {line}"));
        self.log_say(NoticeLevel::Info, text);
    }

    /// A session to show: its end, and the input history of its directory.
    fn show_session(
        &mut self,
        switched: bool,
        history: Vec<HistoryItem>,
        input_history: &[String],
        earlier: Option<i64>,
    ) {
        (self.earlier, self.earlier_requested) = (earlier, false);
        for text in input_history {
            self.push_history(text.trim());
        }
        if switched || !history.is_empty() {
            self.transcript.clear();
        }
        for item in history {
            self.restore_item(item);
        }
        self.transcript.follow();
    }

    fn user_message(&mut self, text: String, trigger: &TurnTrigger, origin: Origin, seq: Option<i64>) {
        let origin = user_origin(origin, Some(trigger));
        self.transcript.close_assistant();
        if matches!(origin, UserOrigin::Typed | UserOrigin::MidTurn | UserOrigin::Queued) {
            self.transcript.follow();
        }
        // The pastes the input showed folded stay folded here.
        let mut folds = Vec::new();
        if matches!(origin, UserOrigin::Typed | UserOrigin::MidTurn | UserOrigin::Queued) {
            self.sent_pastes.retain(|p| {
                let inside = text.contains(&p.text);
                if inside {
                    folds.push(p.text.clone());
                }
                !inside
            });
        }
        self.transcript.push_stored(CellBody::User { text, origin, folds }, seq);
        // Not while a page of older history is on its way: it would go above a gap.
        if !self.earlier_requested {
            if let Some(before) = self.transcript.let_go_of_old() {
                self.earlier = Some(before);
            }
        }
    }

    /// The spinner counts from when something started to run.
    fn phase_changed(&mut self, phase: Phase) {
        if phase.busy() && !self.phase.busy() {
            self.turn_started.get_or_insert(self.now);
        }
        self.phase = phase;
    }

    fn tool_started(&mut self, call_id: String, name: &str, summary: &str) {
        self.transcript.tool_started(&call_id, name, summary, self.now);
        self.tools.push(RunningTool {
            call_id,
            name: display_text(name),
            summary: display_text(summary).replace('\n', " "),
            started: self.now,
            last_line: String::new(),
            output: String::new(),
            awaiting: false,
        });
    }

    fn tool_output(&mut self, call_id: String, chunk: &str) {
        let Some(tool) = self.tools.iter_mut().find(|t| t.call_id == call_id) else { return };
        tool.output.push_str(chunk);
        if tool.output.len() > TOOL_OUTPUT_MAX {
            let keep = crate::text::tail_chars(&tool.output, TOOL_OUTPUT_MAX / 2).to_string();
            tool.output = keep;
        }
        let line = last_line(chunk);
        if !line.is_empty() {
            tool.last_line = line;
        }
        if let Some(view) = self.log_view.as_mut().filter(|v| v.source == LogSource::Tool(call_id)) {
            let lines = log_lines(&tool.output);
            let total = lines.len() as u64;
            view.replace_lines(lines, 1, 0, total);
        }
    }

    fn approval_needed(
        &mut self,
        id: u64,
        command: &str,
        reason: &str,
        grounds: Vec<crate::protocol::AskGround>,
        from: Option<String>,
    ) {
        // Exactly what would run: a disguise (escape sequence, bidi override, zero-width
        // space) is shown, not obeyed or dropped.
        let (command, hidden) = crate::text::reveal_hidden(command);
        let first = command.lines().next().unwrap_or_default().chars().take(80).collect::<String>();
        self.notify(&format!("approval needed: {first}"));
        self.awaiting_approval(&command, true);
        self.approvals.push_back(PendingApproval {
            id,
            command,
            hidden,
            reason: display_text(reason),
            grounds,
            from: from.map(|a| display_text(&a)),
            shown_at: self.now,
        });
    }

    fn agent_updated(&mut self, id: JobId, agent: crate::protocol::agent::AgentInfo) {
        if let Some(row) = self.jobs.iter_mut().find(|j| j.info.id == id) {
            row.info.last_line = agent.activity.clone();
            row.info.agent = Some(Box::new(agent.clone()));
        }
        self.agents.insert(id, agent);
    }

    fn job_started(&mut self, mut job: crate::protocol::JobInfo) {
        if job.agent.is_none() {
            job.agent = self.agents.get(&job.id).cloned().map(Box::new);
        }
        match &job.agent {
            Some(agent) => job.last_line = agent.activity.clone(),
            None => job.last_line = last_line(&job.last_line),
        }
        job.command = display_text(&job.command);
        let finished_at_ms = (!job.status.is_running()).then_some(self.wall_ms);
        match self.jobs.iter_mut().find(|j| j.info.id == job.id) {
            Some(existing) => {
                existing.info = job;
                existing.finished_at_ms = finished_at_ms;
            }
            None => self.jobs.push(JobRow { info: job, finished_at_ms, watches: Vec::new() }),
        }
        self.sort_jobs();
    }

    fn job_updated(&mut self, id: String, status: JobStatus, tail: &str, ops: &mut Vec<Op>) {
        if let Some(row) = self.jobs.iter_mut().find(|j| j.info.id == id) {
            // A sub-agent's output is its event stream: its last line is its activity.
            let line = if row.info.agent.is_some() { String::new() } else { last_line(tail) };
            if !line.is_empty() {
                row.info.last_line = line;
            }
            if !status.is_running() && row.finished_at_ms.is_none() {
                row.finished_at_ms = Some(self.wall_ms);
            }
            row.info.status = status;
        }
        self.sort_jobs();
        self.refresh_log(&id, ops);
    }

    fn job_finished(&mut self, id: String, status: JobStatus, ops: &mut Vec<Op>) {
        if let Some(view) = self.log_view.as_mut().filter(|v| v.source == LogSource::Job(id.clone())) {
            view.say(NoticeLevel::Info, format!("{id} {}", status.label()), self.now);
        }
        self.transcript.job_ended(&id, JobFate::of_status(&status));
        if let Some(row) = self.jobs.iter_mut().find(|j| j.info.id == id) {
            row.info.status = status;
            row.finished_at_ms.get_or_insert(self.wall_ms);
        }
        self.sort_jobs();
        self.refresh_log(&id, ops);
    }

    fn turn_finished(&mut self, outcome: TurnOutcome) {
        self.transcript.close_assistant();
        self.transcript.end_running_tools();
        self.tools.clear();
        self.last_outcome = Some(outcome);
        if outcome != TurnOutcome::Completed {
            self.transcript.push(CellBody::TurnEnd { outcome });
        }
        let long = self.turn_started.is_some_and(|t| self.now.saturating_duration_since(t) >= self.notify_after);
        if long {
            self.notify(&format!("turn {}", outcome.as_str()));
        }
        self.turn_started = None;
    }

    fn offer_sessions(&mut self, query: &str, sessions: Vec<SessionInfo>) {
        let sessions = sessions
            .into_iter()
            .map(|s| SessionInfo {
                title: s.title.map(|t| display_text(&t)),
                first_line: display_text(&s.first_line),
                ..s
            })
            .collect();
        self.modal = Some(Modal::Sessions { query: display_text(query), sessions, selected: 0 });
    }

    /// The engine's answer to the slash command last sent: the first event that is not
    /// progress of work already running. When it is an error, the command comes back to
    /// the (still empty) input selected, as a command the TUI itself rejects does.
    fn answer_command(&mut self, event: &Event) {
        let Some(command) = self.awaiting_command.take() else { return };
        let failed = match event {
            Event::Notice { level: NoticeLevel::Error, .. } => true,
            Event::SessionList { sessions, matching: Some(_) } => sessions.is_empty(),
            Event::AssistantDelta(_)
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
            | Event::WatchMatched { .. }
            | Event::PendingChanged { .. }
            | Event::TurnChanges { .. }
            | Event::Phase { .. }
            | Event::Status(_)
            | Event::Usage { .. }
            | Event::Context { .. } => {
                self.awaiting_command = Some(command);
                return;
            }
            Event::Notice { .. }
            | Event::SessionList { .. }
            | Event::SessionReady { .. }
            | Event::EarlierHistory { .. }
            | Event::TurnStarted { .. }
            | Event::UserMessage { .. }
            | Event::RestoreInput { .. }
            | Event::TurnFinished { .. }
            | Event::JobLog { .. }
            | Event::JobWatches { .. }
            | Event::JobList { .. }
            | Event::McpStatus { .. }
            | Event::HeartbeatStatus { .. }
            | Event::GoalStatus { .. }
            | Event::SessionChoices { .. }
            | Event::JobsKilled { .. }
            | Event::NetworkConnection(_)
            | Event::RewindPoints { .. }
            | Event::RewindPreview(_)
            | Event::Diff { .. }
            | Event::ShutdownComplete => false,
        };
        if failed && self.input_is_empty() {
            self.reset_input(command);
            self.select_bad_command();
        }
    }

    fn restore_item(&mut self, item: HistoryItem) {
        let body = self.history_body(item);
        self.transcript.push(body);
    }

    /// The cell of a stored message (a tool's is finished: it gets no live events).
    fn history_body(&self, item: HistoryItem) -> CellBody {
        match item {
            HistoryItem::User { text, origin } => {
                let origin = user_origin(origin, None);
                // ↑ recalls only what the user typed (the engine's per-directory input
                // history); stored user rows also hold goal, heartbeat and summary texts.
                CellBody::User { text, origin, folds: Vec::new() }
            }
            HistoryItem::Assistant { text, reasoning } => {
                CellBody::Assistant { text, reasoning: reasoning.unwrap_or_default(), streaming: false }
            }
            HistoryItem::Tool { call_id, name, summary, outcome, job } => CellBody::Tool {
                call_id,
                name: display_text(&name),
                summary: display_text(&summary).replace('\n', " "),
                started: self.now,
                outcome: Some(outcome),
                job,
                awaiting: false,
            },
            HistoryItem::Notice { level, text } => CellBody::Notice { level, text },
        }
    }

    /// Running jobs first (oldest first), then finished ones (latest to end first); the
    /// selection stays on the same job. Finished jobs beyond the cap are dropped.
    fn sort_jobs(&mut self) {
        let selected = self.jobs.get(self.job_sel).map(|j| j.info.id.clone());
        self.jobs.sort_by_key(|j| match j.finished_at_ms {
            _ if j.info.status.is_running() => (0, j.info.started_at_ms, 0),
            Some(at) => (1, u64::MAX - at, u64::MAX - j.info.started_at_ms),
            None => (1, u64::MAX, u64::MAX - j.info.started_at_ms),
        });
        while self.jobs.len() > JOB_ROWS_MAX && self.jobs.last().is_some_and(|j| !j.info.status.is_running()) {
            self.jobs.pop();
        }
        // Only a focused pane keeps its selection; otherwise the list shows from the top.
        self.job_sel = match selected.filter(|_| self.focus == super::Focus::Jobs) {
            Some(id) => self.jobs.iter().position(|j| j.info.id == id).unwrap_or(0),
            None => 0,
        };
    }

    /// A job log asks for its lines again when the job changes: a followed one for the
    /// newest, one scrolled back for the same part (from its first line on), so its counts
    /// (`of 47`, the matches) keep up and new lines load below without moving the view. The
    /// latter at most once a second: it is a read from that line on, not from the end.
    fn refresh_log(&mut self, id: &str, ops: &mut Vec<Op>) {
        if self.agent_feed.as_ref().is_some_and(|f| f.id == id) {
            if !self.log_view.as_ref().is_some_and(|v| v.inflight) {
                self.request_agent_log(ops);
            }
            return;
        }
        let now = self.now;
        let Some(view) = &mut self.log_view else { return };
        if view.source != LogSource::Job(id.to_string()) || view.inflight {
            return;
        }
        let offset = (!view.follow).then_some(view.first_line.max(1));
        if offset.is_some() && view.requested_at.is_some_and(|at| now.saturating_duration_since(at) < LOG_REFRESH_EVERY)
        {
            return;
        }
        view.inflight = true;
        view.requested_at = Some(now);
        ops.push(Op::Job { id: id.to_string(), action: JobAction::Log { offset, limit: Some(LOG_LIMIT) } });
    }

    /// The running tool an approval is for (the one whose command it is, else the newest)
    /// waits for the user (`true`) or was answered (`false`: it starts now).
    pub(super) fn awaiting_approval(&mut self, command: &str, awaiting: bool) {
        let candidates: Vec<usize> =
            (0..self.tools.len()).rev().filter(|&i| self.tools[i].awaiting != awaiting).collect();
        let Some(&i) = candidates.iter().find(|&&i| self.tools[i].summary == command).or(candidates.first()) else {
            return;
        };
        let tool = &mut self.tools[i];
        if tool.awaiting && !awaiting {
            tool.started = self.now;
        }
        tool.awaiting = awaiting;
        let call_id = tool.call_id.clone();
        self.transcript.set_awaiting(&call_id, awaiting, self.now);
    }

    /// Open the log view of a job and ask the engine for its log.
    pub(super) fn open_job_log(&mut self, id: String, ops: &mut Vec<Op>) {
        // The pane names a sub-agent `agent_3`; its job is `job_3`.
        let id = match id.trim().strip_prefix("agent_") {
            Some(num) => format!("job_{num}"),
            None => id,
        };
        if self.is_agent_job(&id) {
            return self.open_agent_log(id, ops);
        }
        self.agent_feed = None;
        ops.push(Op::Job { id: id.clone(), action: JobAction::Log { offset: None, limit: Some(LOG_LIMIT) } });
        self.log_view = Some(LogView::new(LogSource::Job(id), Vec::new(), true));
    }

    pub(super) fn open_tool_log(&mut self, call_id: String) {
        let lines = self.tools.iter().find(|t| t.call_id == call_id).map(|t| log_lines(&t.output)).unwrap_or_default();
        self.log_view = Some(LogView::new(LogSource::Tool(call_id), lines, false));
    }
}

#[cfg(test)]
mod last_line_tests {
    use super::last_line;

    /// What sanitising the whole text and taking its last non-empty line gives.
    fn whole(text: &str) -> String {
        let shown = super::display_text(text);
        shown.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim_end().to_string()
    }

    #[test]
    fn the_last_line_is_found_from_the_end_as_sanitising_everything_finds_it() {
        let tail = "   Compiling a v0.1.0\n".repeat(100);
        for text in [
            tail.as_str(),
            "one\ntwo\n\n\n",
            "building 10%\rbuilding 20%\rbuilding 30%",
            "ok\n\x1b[32m\x1b[0m\n  \n",
            "\x1b[1mwarning\x1b[0m: unused\ttab\r\n",
            "done\n\x1b]0;title\x07\n",
            "",
            "\n\n",
            "α β γ\n",
        ] {
            assert_eq!(last_line(text), whole(text), "{text:?}");
        }
    }
}
