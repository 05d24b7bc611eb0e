//! Keys into state changes and ops. The keymap names the action; the rules of when an
//! action applies (busy, empty input, focus) live here.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui_textarea::CursorMove;

use super::{App, ExitState, Focus, Layer, LogSource, Modal, Op, APPROVAL_ARM, LOG_LIMIT};

/// Messages sent while busy (and pastes sent) remembered to show them as they were sent.
const SENT_KEPT: usize = 32;
use crate::config::OnQuit;
use crate::protocol::commands::{self, Command, JobsCmd, SlashCommand, UiCommand};
use crate::protocol::{Approval, BusyMode, JobAction, NoticeLevel, Phase};
use crate::tui::keymap::{Action, Context, KeyChord};
use crate::tui::transcript::{CellBody, Scroll};

impl App {
    pub(super) fn on_key(&mut self, key: KeyEvent, ops: &mut Vec<Op>) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        if !matches!(self.exit, ExitState::Running) {
            return;
        }
        match self.top_layer() {
            Layer::Approval => self.approval_key(&key, ops),
            Layer::Modal => self.modal_key(&key, ops),
            Layer::LogView => self.log_key(&key, ops),
            Layer::Pane => self.pane_key(&key, ops),
            Layer::Input => self.input_key(key, ops),
        }
    }

    /// Global actions, available wherever the context does not bind the key.
    fn global_action(&mut self, action: Action, ops: &mut Vec<Op>) -> bool {
        match action {
            Action::Cancel => self.ctrl_c(ops),
            // Every key says what it did, even when there was nothing to do.
            Action::Background => {
                if self.phase.runs_commands() || !self.tools.is_empty() {
                    ops.push(Op::YieldForeground);
                } else {
                    self.input_hint = Some("nothing is running to move to the background".to_string());
                }
            }
            Action::Help => self.modal = Some(Modal::Help { scroll: 0 }),
            Action::ToggleReasoning => {
                self.transcript.toggle_reasoning();
                let shown = if self.transcript.show_reasoning { "shown" } else { "hidden" };
                self.input_hint = Some(format!("the model's reasoning is {shown}"));
            }
            Action::ToggleMouse => self.toggle_mouse(),
            Action::Suspend => self.terminal_request = Some(super::TerminalRequest::Suspend),
            _ => return false,
        }
        true
    }

    /// Ctrl+C: interrupt when busy, clear the input otherwise; a second one soon after quits.
    fn ctrl_c(&mut self, ops: &mut Vec<Op>) {
        if self.ctrl_c_armed() {
            self.last_ctrl_c = None;
            self.request_quit(ops);
            return;
        }
        self.last_ctrl_c = Some(self.now);
        if self.modal.is_some() {
            self.modal = None;
        } else if self.log_view.is_some() {
            self.log_view = None;
        } else if self.busy() {
            ops.push(Op::Interrupt);
        } else {
            self.reset_input(String::new());
        }
    }

    /// Quit, asking first when jobs or a turn are running.
    pub(super) fn request_quit(&mut self, ops: &mut Vec<Op>) {
        let jobs = self.running_jobs() > 0;
        match self.on_quit {
            OnQuit::Kill if jobs => self.begin_quit(ops),
            OnQuit::Keep if jobs => self.leave_and_quit(ops, true),
            OnQuit::Ask | OnQuit::Kill | OnQuit::Keep if self.busy() || jobs => self.modal = Some(Modal::QuitConfirm),
            OnQuit::Ask | OnQuit::Kill | OnQuit::Keep => self.begin_quit(ops),
        }
    }

    /// Quit and leave running jobs running: `detach` = kept on purpose (no deadline);
    /// otherwise (the terminal hung up) they wait `jobs.orphan_grace_s` for `talaria -c`.
    pub(super) fn leave_and_quit(&mut self, ops: &mut Vec<Op>, detach: bool) {
        if detach {
            let running = self.jobs.iter().filter(|j| j.info.status.is_running());
            self.kept_jobs = running.map(|j| j.info.id.clone()).collect();
        }
        if self.busy() {
            ops.push(Op::Interrupt);
        }
        ops.push(Op::LeaveJobs { detach });
        ops.push(Op::Shutdown);
        self.modal = None;
        self.exit = ExitState::Quitting { since: self.now };
    }

    /// The terminal hung up (SIGHUP): nobody can answer; jobs wait for a new owner.
    pub(crate) fn quit_hangup(&mut self) -> Vec<Op> {
        let mut ops = Vec::new();
        self.leave_and_quit(&mut ops, false);
        ops
    }

    /// Stop the turn, kill running jobs, and ask the engine to shut down.
    /// Quit without asking (a signal from outside): interrupt, kill jobs, shut down.
    pub(crate) fn quit_now(&mut self) -> Vec<Op> {
        let mut ops = Vec::new();
        self.begin_quit(&mut ops);
        ops
    }

    pub(super) fn begin_quit(&mut self, ops: &mut Vec<Op>) {
        if self.busy() {
            ops.push(Op::Interrupt);
        }
        // No per-job kill first: shutdown kills every running job itself and records why
        // ("talaria quit"). A user kill sent just before raced it, and whichever wrote the
        // job's kill file last decided whether a resumed transcript said "killed when
        // Talaria quit" or showed a kill by the user.
        ops.push(Op::Shutdown);
        self.modal = None;
        self.exit = ExitState::Quitting { since: self.now };
    }

    fn approval_key(&mut self, key: &KeyEvent, ops: &mut Vec<Op>) {
        let Some(front) = self.approvals.front() else { return };
        let armed = self.now.saturating_duration_since(front.shown_at) >= APPROVAL_ARM;
        let id = front.id;
        let command = front.command.clone();
        for action in self.keymap.actions(Context::Approval, key) {
            let decision = match action {
                Action::Once => Approval::Once,
                Action::Session => Approval::Session,
                Action::Always => Approval::Always,
                Action::Deny => Approval::Deny,
                Action::DenyAndStop | Action::Cancel => {
                    ops.push(Op::Approve { id, decision: Approval::Deny });
                    ops.push(Op::Interrupt);
                    self.approvals.pop_front();
                    self.awaiting_approval(&command, false);
                    return;
                }
                Action::Help => {
                    self.modal = Some(Modal::Help { scroll: 0 });
                    return;
                }
                _ => continue,
            };
            if !armed {
                return;
            }
            ops.push(Op::Approve { id, decision });
            self.approvals.pop_front();
            // Answered: the command starts now, and so does its timer.
            self.awaiting_approval(&command, false);
            return;
        }
    }

    fn modal_key(&mut self, key: &KeyEvent, ops: &mut Vec<Op>) {
        let (Some(Modal::LogSearch { text })
        | Some(Modal::WritePrompt { text, .. })
        | Some(Modal::WatchPrompt { text, .. })) = &mut self.modal
        else {
            return self.modal_action_key(key, ops);
        };
        match edit_prompt_line(text, key) {
            PromptKey::Editing => {}
            PromptKey::Cancel => self.modal = None,
            PromptKey::Submit => match self.modal.take() {
                Some(Modal::WritePrompt { id, text }) => {
                    ops.push(Op::Job { id, action: JobAction::Write { data: format!("{text}\n") } });
                }
                // An empty pattern stops the user's watches on the job.
                Some(Modal::WatchPrompt { id, text }) => {
                    let action = match text.trim() {
                        "" => JobAction::Unwatch { pattern: None },
                        _ => JobAction::Watch { pattern: text },
                    };
                    ops.push(Op::Job { id, action });
                }
                Some(Modal::LogSearch { text: query }) => {
                    if let Some(view) = &mut self.log_view {
                        view.search = Some(query);
                        view.current_match = None;
                    }
                    self.log_next_match(true);
                }
                other => self.modal = other,
            },
        }
    }

    fn modal_action_key(&mut self, key: &KeyEvent, ops: &mut Vec<Op>) {
        let context = match &self.modal {
            Some(Modal::Help { .. }) => Context::Help,
            Some(Modal::QuitConfirm | Modal::KillConfirm { .. } | Modal::RewindConfirm(_)) => Context::Confirm,
            Some(Modal::Sessions { .. } | Modal::Rewind(_)) => Context::Picker,
            Some(Modal::WritePrompt { .. } | Modal::WatchPrompt { .. } | Modal::LogSearch { .. }) | None => return,
        };
        let page = self.page_rows();
        for action in self.keymap.actions(context, key) {
            let modal = self.modal.take();
            match (modal, action) {
                (Some(Modal::Help { .. }), Action::Close | Action::Help) => {}
                (
                    Some(Modal::Help { scroll }),
                    Action::LineUp
                    | Action::LineDown
                    | Action::PageUp
                    | Action::PageDown
                    | Action::Top
                    | Action::Follow,
                ) => {
                    let max = self.help_max_scroll.get();
                    let scroll = scroll.min(max);
                    let scroll = match action {
                        Action::LineUp => scroll.saturating_sub(1),
                        Action::LineDown => scroll + 1,
                        Action::PageUp => scroll.saturating_sub(page),
                        Action::PageDown => scroll + page,
                        Action::Top => 0,
                        _ => max,
                    };
                    self.modal = Some(Modal::Help { scroll: scroll.min(max) })
                }
                (Some(Modal::QuitConfirm), Action::Yes | Action::Cancel) => self.begin_quit(ops),
                (Some(Modal::QuitConfirm), Action::Keep) => self.leave_and_quit(ops, true),
                (Some(Modal::KillConfirm { id }), Action::Yes) => {
                    ops.push(Op::Job { id, action: JobAction::Kill });
                }
                (Some(Modal::QuitConfirm | Modal::KillConfirm { .. }), Action::No | Action::Cancel) => {}
                (Some(Modal::Sessions { query, sessions, selected }), Action::Up | Action::Down) => {
                    let selected = match action {
                        Action::Up => selected.checked_sub(1).unwrap_or(sessions.len().saturating_sub(1)),
                        _ if selected + 1 >= sessions.len() => 0,
                        _ => selected + 1,
                    };
                    self.modal = Some(Modal::Sessions { query, sessions, selected });
                }
                (Some(Modal::Sessions { sessions, selected, .. }), Action::Open) => {
                    if let Some(s) = sessions.get(selected) {
                        ops.push(Op::Command(SlashCommand::Resume(Some(s.id.clone()))));
                    }
                }
                (Some(Modal::Sessions { .. }), Action::Close | Action::Cancel) => {
                    self.input_hint = Some("resume cancelled".to_string());
                }
                (Some(m @ (Modal::Rewind(_) | Modal::RewindConfirm(_))), action) => {
                    if let Err(m) = self.rewind_key(m, action, ops) {
                        self.modal = Some(m);
                        continue;
                    }
                }
                (other, _) => {
                    self.modal = other;
                    continue;
                }
            }
            return;
        }
    }

    fn log_key(&mut self, key: &KeyEvent, ops: &mut Vec<Op>) {
        let page = usize::from(self.log_area.height.saturating_sub(3)).max(1);
        let job_id = self.log_job();
        // The footer's answer to the last key goes with the next one.
        if let Some(view) = &mut self.log_view {
            view.message = None;
        }
        for action in self.keymap.actions(Context::Log, key) {
            match (action, &job_id) {
                (Action::LineUp, _) => self.log_scroll_up(1),
                (Action::LineDown, _) => self.log_scroll_down(1),
                (Action::PageUp, _) => self.log_scroll_up(page),
                (Action::PageDown, _) => self.log_scroll_down(page),
                (Action::Top, _) => {
                    if let Some(view) = &mut self.log_view {
                        view.go_top();
                    }
                }
                (Action::Follow, _) => {
                    if let Some(view) = &mut self.log_view {
                        view.go_bottom();
                    }
                    if let Some(id) = &job_id {
                        self.request_log(id, ops);
                    }
                }
                (Action::Kill, Some(id)) => self.ask_kill(id.clone()),
                (Action::Poll, Some(id)) => {
                    ops.push(Op::Job { id: id.clone(), action: JobAction::Poll });
                    self.request_log(id, ops);
                }
                (Action::Write, Some(id)) => self.ask_write(id.clone()),
                (Action::Watch, Some(id)) => self.ask_watch(id.clone()),
                (Action::Kill | Action::Poll | Action::Write | Action::Watch, None) => {
                    let bg = self.keymap.hint(Context::Global, Action::Background);
                    let now = self.now;
                    if let Some(view) = &mut self.log_view {
                        let text = match view.source {
                            LogSource::Diff(_) => {
                                "this is a diff, not a job: nothing runs to kill, poll or write to".into()
                            }
                            _ => format!("this is a running tool, not a job: {bg} moves it to the background"),
                        };
                        view.say(NoticeLevel::Info, text, now);
                    }
                }
                (Action::Search, _) => self.modal = Some(Modal::LogSearch { text: String::new() }),
                (Action::NextMatch, _) => self.log_next_match(true),
                (Action::PrevMatch, _) => self.log_next_match(false),
                (Action::Close, _) => self.log_view = None,
                (other, _) => {
                    if self.global_action(other, ops) {
                        return;
                    }
                    continue;
                }
            }
            return;
        }
    }

    /// `n`/`N`: the next or previous match, or say why there is none.
    fn log_next_match(&mut self, next: bool) {
        let search = self.log_view.as_ref().and_then(|v| v.search.clone()).filter(|q| !q.is_empty());
        let message = match search {
            None => Some("no search yet: / searches the log".to_string()),
            Some(query) if !self.log_find(next) => Some(format!("no line in the log contains \"{query}\"")),
            Some(_) => None,
        };
        let now = self.now;
        if let Some(view) = &mut self.log_view {
            match message {
                Some(m) => view.say(NoticeLevel::Info, m, now),
                None => view.message = None,
            }
        }
    }

    /// Ask for the view's lines now: the newest when it follows, else the same part.
    fn request_log(&mut self, id: &str, ops: &mut Vec<Op>) {
        let mut offset = None;
        if let Some(view) = &mut self.log_view {
            view.inflight = true;
            view.requested_at = Some(self.now);
            offset = (!view.follow).then_some(view.first_line.max(1));
        }
        ops.push(Op::Job { id: id.to_string(), action: JobAction::Log { offset, limit: Some(LOG_LIMIT) } });
    }

    fn ask_kill(&mut self, id: String) {
        let running = self.jobs.iter().any(|j| j.info.id == id && j.info.status.is_running());
        if running {
            self.modal = Some(Modal::KillConfirm { id });
        } else {
            self.log_say(NoticeLevel::Info, format!("{id} is not running: there is nothing to kill"));
        }
    }

    fn ask_write(&mut self, id: String) {
        let writable = self.jobs.iter().any(|j| j.info.id == id && j.info.status.is_running() && j.info.has_stdin);
        if writable {
            self.modal = Some(Modal::WritePrompt { id, text: String::new() });
        } else {
            let text = format!("{id} has no stdin to write to (only running background jobs started with one do)");
            self.log_say(NoticeLevel::Warn, text);
        }
    }

    fn ask_watch(&mut self, id: String) {
        let running = self.jobs.iter().any(|j| j.info.id == id && j.info.status.is_running());
        if running {
            self.modal = Some(Modal::WatchPrompt { id, text: String::new() });
        } else {
            self.log_say(NoticeLevel::Info, format!("{id} is not running: a watch only sees new output"));
        }
    }

    fn next_focus(&self) -> Focus {
        let order = [Focus::Input, Focus::Jobs, Focus::Tools];
        let at = order.iter().position(|f| *f == self.focus).unwrap_or(0);
        for step in 1..=order.len() {
            let candidate = order[(at + step) % order.len()];
            let available = match candidate {
                Focus::Input => true,
                Focus::Jobs => !self.jobs.is_empty(),
                Focus::Tools => !self.tools.is_empty(),
            };
            if available {
                return candidate;
            }
        }
        Focus::Input
    }

    fn pane_key(&mut self, key: &KeyEvent, ops: &mut Vec<Op>) {
        let selected_job = self.jobs.get(self.job_sel).map(|j| j.info.id.clone());
        for action in self.keymap.actions(Context::Panes, key) {
            match (self.focus, action) {
                (Focus::Jobs, Action::Up) => self.job_sel = self.job_sel.saturating_sub(1),
                (Focus::Jobs, Action::Down) => self.job_sel = (self.job_sel + 1).min(self.jobs.len().saturating_sub(1)),
                (Focus::Tools, Action::Up) => self.tool_sel = self.tool_sel.saturating_sub(1),
                (Focus::Tools, Action::Down) => {
                    self.tool_sel = (self.tool_sel + 1).min(self.tools.len().saturating_sub(1))
                }
                (Focus::Jobs, Action::Open) => {
                    if let Some(id) = selected_job.clone() {
                        self.open_job_log(id, ops);
                    }
                }
                (Focus::Tools, Action::Open) => {
                    if let Some(tool) = self.tools.get(self.tool_sel) {
                        let id = tool.call_id.clone();
                        self.open_tool_log(id);
                    }
                }
                (Focus::Jobs, Action::Kill) => {
                    if let Some(id) = selected_job.clone() {
                        self.ask_kill(id);
                    }
                }
                (Focus::Jobs, Action::Poll) => {
                    if let Some(id) = selected_job.clone() {
                        ops.push(Op::Job { id, action: JobAction::Poll });
                    }
                }
                (Focus::Jobs, Action::Write) => {
                    if let Some(id) = selected_job.clone() {
                        self.ask_write(id);
                    }
                }
                (Focus::Jobs, Action::Watch) => {
                    if let Some(id) = selected_job.clone() {
                        self.ask_watch(id);
                    }
                }
                (_, Action::NextPane) => self.focus = self.next_focus(),
                (_, Action::Back) => self.focus = Focus::Input,
                (_, other) => {
                    if self.global_action(other, ops) {
                        return;
                    }
                    continue;
                }
            }
            return;
        }
    }

    /// Esc in the input: stop what runs (the phase says what), take back the messages a
    /// pause holds, or return to the end of the transcript.
    fn esc(&mut self, ops: &mut Vec<Op>) {
        if self.busy() || (self.phase == Phase::Paused && !self.queued.is_empty()) {
            ops.push(Op::Interrupt);
        } else if self.transcript.scroll != Scroll::Follow {
            self.transcript.follow();
        } else if self.phase == Phase::Paused {
            self.input_hint = Some("nothing to stop: Talaria is paused (/unpause resumes)".to_string());
        } else if !self.esc_esc(ops) {
            // Every key answers, even with nothing to do.
            self.input_hint =
                Some("nothing to stop: Talaria is idle (Esc again on an empty input: /rewind)".to_string());
        }
    }

    fn browsing_history(&self) -> bool {
        self.history_pos.is_some_and(|i| self.history.get(i).is_some_and(|h| *h == self.input_text()))
    }

    fn input_key(&mut self, key: KeyEvent, ops: &mut Vec<Op>) {
        let empty = self.input_is_empty();
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        self.input_hint = None;
        // At any width: below 80 columns the focused pane takes the transcript's place.
        let panes = !self.jobs.is_empty() || !self.tools.is_empty();
        for action in self.keymap.actions(Context::Input, &key) {
            match action {
                // Enter with the popup open takes the highlighted command, never a bare `/`.
                Action::Submit if !self.completions().is_empty() => {
                    if self.accept_completion() {
                        self.submit(None, ops);
                    }
                }
                Action::Submit => self.submit(None, ops),
                Action::Complete if !self.busy() && !self.completions().is_empty() => self.complete(),
                Action::Complete if !self.busy() && self.mention_at_cursor().is_some() => {
                    self.path_request = self.mention_at_cursor();
                }
                Action::Queue if self.busy() && !empty => self.submit(Some(BusyMode::Queue), ops),
                // Tab moves to the panes only from an empty input (text there means the user
                // is writing); a dedicated key (Alt+J) works either way.
                Action::FocusPanes if panes && (empty || key.code != KeyCode::Tab) => {
                    self.focus = self.next_focus();
                }
                // A dedicated key with no panes to go to says so (Tab's hint comes below).
                Action::FocusPanes if key.code != KeyCode::Tab => {
                    self.input_hint = Some(self.no_panes_hint(&KeyChord::from_event(&key).to_string()));
                }
                Action::Newline => self.input.insert_newline(),
                Action::Interrupt if !self.busy() && !self.completions().is_empty() => self.dismiss_completions(),
                Action::Interrupt => self.esc(ops),
                Action::Quit if empty => self.request_quit(ops),
                Action::HelpEmpty if empty => self.modal = Some(Modal::Help { scroll: 0 }),
                Action::HistoryPrev if !self.browsing_history() && self.completions().len() > 1 => {
                    self.completion_move(false)
                }
                Action::HistoryNext if !self.browsing_history() && self.completions().len() > 1 => {
                    self.completion_move(true)
                }
                Action::HistoryPrev if empty || self.browsing_history() => self.history_prev(),
                Action::HistoryNext if self.browsing_history() => self.history_next(),
                Action::HistoryNext if empty => self.input_hint = Some("no later message".to_string()),
                Action::ScrollUp => {
                    self.scroll_transcript_up(self.page_rows());
                    self.hint_if_all_shown();
                }
                Action::ScrollDown => self.scroll_to_end_or_say_so(|app| app.scroll_transcript_down(app.page_rows())),
                Action::ScrollTop if empty || ctrl => {
                    self.transcript.scroll_top();
                    self.hint_if_all_shown();
                }
                Action::ScrollBottom if empty || ctrl => self.scroll_to_end_or_say_so(|app| app.transcript.follow()),
                Action::LineStart => self.input.move_cursor(CursorMove::Head),
                Action::LineEnd => self.input.move_cursor(CursorMove::End),
                Action::KillToEnd => {
                    self.input.delete_line_by_end();
                }
                Action::KillToStart => {
                    self.input.delete_line_by_head();
                }
                Action::DeleteWord => {
                    self.input.delete_word();
                }
                Action::WordBack => self.input.move_cursor(CursorMove::WordBack),
                Action::WordForward => self.input.move_cursor(CursorMove::WordForward),
                Action::ExternalEditor => self.open_editor(),
                other => {
                    if self.global_action(other, ops) {
                        return;
                    }
                    continue;
                }
            }
            return;
        }
        // Keys no action took: editing, unless they would do something surprising.
        match key.code {
            KeyCode::Tab => self.input_hint = Some(self.tab_hint(empty)),
            KeyCode::BackTab | KeyCode::Esc | KeyCode::Enter => {}
            _ => {
                if self.input.input(key) {
                    self.completion_sel = 0;
                }
            }
        }
    }

    /// Why Tab did nothing, for the input's hint line.
    fn tab_hint(&self, empty: bool) -> String {
        // Short: the border it is shown in may be 40 columns wide.
        if !empty {
            "Tab: nothing to complete".to_string()
        } else {
            self.no_panes_hint("Tab")
        }
    }

    /// Why `key` did not focus the panes: there is nothing in them.
    fn no_panes_hint(&self, key: &str) -> String {
        format!("{key}: no jobs or tools to focus")
    }

    /// After a scroll up: when the whole transcript fits, nothing moved; say so.
    fn hint_if_all_shown(&mut self) {
        let a = self.transcript_area;
        // With older history still to load the scroll asks for it instead.
        if self.earlier.is_none() && self.transcript.fits(a.width, usize::from(a.height), &self.theme) {
            self.input_hint = Some("all of the transcript is on screen".to_string());
        }
    }

    /// Scroll down with `scroll`, or say that the view already follows the end.
    fn scroll_to_end_or_say_so(&mut self, scroll: impl FnOnce(&mut App)) {
        if self.transcript.scroll == Scroll::Follow {
            self.input_hint = Some("at the end already: new output shows as it comes".to_string());
        } else {
            scroll(self);
        }
    }

    fn history_prev(&mut self) {
        if self.history.is_empty() {
            self.input_hint = Some("no earlier messages to recall".to_string());
            return;
        }
        let i = match self.history_pos {
            Some(i) if self.browsing_history() => i.saturating_sub(1),
            _ => self.history.len() - 1,
        };
        let text = self.history[i].clone();
        self.reset_input(text);
        self.history_pos = Some(i);
    }

    fn history_next(&mut self) {
        let Some(i) = self.history_pos else { return };
        if i + 1 < self.history.len() {
            let text = self.history[i + 1].clone();
            self.reset_input(text);
            self.history_pos = Some(i + 1);
        } else {
            self.reset_input(String::new());
        }
    }

    /// Enter (mode None) or Tab while busy (Queue): a message, or a slash command.
    fn submit(&mut self, mode: Option<BusyMode>, ops: &mut Vec<Op>) {
        let text = self.expanded_input();
        if text.trim().is_empty() {
            self.input_hint = Some("nothing to send: type a message first".to_string());
            return;
        }
        if commands::is_command(&text) {
            match commands::parse(&text) {
                Ok(command) => {
                    self.push_history(text.trim());
                    self.reset_input(String::new());
                    let sent = ops.len();
                    self.run_command(command, ops);
                    // The engine answers it; an error gives the text back (`answer_command`).
                    let to_engine = ops[sent..].iter().any(|op| matches!(op, Op::Command(_)));
                    self.awaiting_command = to_engine.then(|| text.trim().to_string());
                }
                Err(message) => {
                    self.transcript.push(CellBody::Notice { level: NoticeLevel::Error, text: message });
                    self.select_bad_command();
                }
            }
            return;
        }
        self.awaiting_command = None;
        self.push_history(&text);
        // What the pending list and the transcript need to show it as it was sent.
        if self.busy() {
            self.sent_modes.push((text.clone(), mode.unwrap_or(self.busy_mode())));
            let excess = self.sent_modes.len().saturating_sub(SENT_KEPT);
            self.sent_modes.drain(..excess);
        }
        self.sent_pastes.extend(self.pastes.iter().cloned());
        let excess = self.sent_pastes.len().saturating_sub(SENT_KEPT);
        self.sent_pastes.drain(..excess);
        self.reset_input(String::new());
        self.transcript.follow();
        tracing::trace!(target: "enter_request", "tui: submit");
        ops.push(Op::Submit { text, mode });
    }

    /// A command that failed stays in the input to fix, selected: typing replaces it, an
    /// arrow key keeps it to edit.
    pub(super) fn select_bad_command(&mut self) {
        self.input.select_all();
        self.input_hint = Some("typing replaces the command · ← → keep it to edit".to_string());
    }

    fn run_command(&mut self, command: Command, ops: &mut Vec<Op>) {
        match command {
            Command::Ui(UiCommand::Quit) => self.request_quit(ops),
            Command::Ui(UiCommand::Help) => self.modal = Some(Modal::Help { scroll: 0 }),
            Command::Ui(UiCommand::Mouse) => self.toggle_mouse(),
            Command::Ui(UiCommand::Copy) => self.copy_last_answer(),
            Command::Engine(SlashCommand::Stop) => ops.push(Op::Interrupt),
            Command::Engine(SlashCommand::Jobs(JobsCmd::Log(id))) => self.open_job_log(id, ops),
            Command::Engine(other) => ops.push(Op::Command(other)),
        }
    }
}

/// What a key did to a one-line prompt (write to stdin, log search).
enum PromptKey {
    Editing,
    Submit,
    Cancel,
}

fn edit_prompt_line(text: &mut String, key: &KeyEvent) -> PromptKey {
    let plain = !key.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
    match key.code {
        KeyCode::Enter => return PromptKey::Submit,
        KeyCode::Esc => return PromptKey::Cancel,
        KeyCode::Backspace => {
            text.pop();
        }
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return PromptKey::Cancel,
        KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => text.clear(),
        KeyCode::Char(c) if plain => text.push(c),
        _ => {}
    }
    PromptKey::Editing
}
