//! Keys into state changes and ops. The keymap names the action; the rules of when an
//! action applies (busy, empty input, focus) live here.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui_textarea::CursorMove;

use super::{App, ExitState, Focus, LogSource, Modal, Op, APPROVAL_ARM, LOG_LIMIT};
use crate::engine::commands::{self, JobsCmd, SlashCommand};
use crate::protocol::{Approval, BusyMode, JobAction, NoticeLevel};
use crate::tui::keymap::{Action, Context};
use crate::tui::transcript::CellBody;

impl App {
    pub(super) fn on_key(&mut self, key: KeyEvent, ops: &mut Vec<Op>) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        if !matches!(self.exit, ExitState::Running) {
            return;
        }
        if !self.approvals.is_empty() {
            self.approval_key(&key, ops);
        } else if self.modal.is_some() {
            self.modal_key(&key, ops);
        } else if self.log_view.is_some() {
            self.log_key(&key, ops);
        } else if self.focus != Focus::Input {
            self.pane_key(&key, ops);
        } else {
            self.input_key(key, ops);
        }
    }

    /// Global actions, available wherever the context does not bind the key.
    fn global_action(&mut self, action: Action, ops: &mut Vec<Op>) -> bool {
        match action {
            Action::Cancel => self.ctrl_c(ops),
            Action::Background => {
                if self.busy || !self.tools.is_empty() {
                    ops.push(Op::YieldForeground);
                }
            }
            Action::Help => self.modal = Some(Modal::Help { scroll: 0 }),
            Action::ToggleReasoning => self.transcript.toggle_reasoning(),
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
        } else if self.busy {
            ops.push(Op::Interrupt);
        } else {
            self.reset_input(String::new());
        }
    }

    /// Quit, asking first when jobs or a turn are running.
    pub(super) fn request_quit(&mut self, ops: &mut Vec<Op>) {
        if self.busy || self.running_jobs() > 0 {
            self.modal = Some(Modal::QuitConfirm);
        } else {
            self.begin_quit(ops);
        }
    }

    /// Stop the turn, kill running jobs, and ask the engine to shut down.
    pub(super) fn begin_quit(&mut self, ops: &mut Vec<Op>) {
        if self.busy {
            ops.push(Op::Interrupt);
        }
        for job in self.jobs.iter().filter(|j| j.info.status.is_running()) {
            ops.push(Op::Job { id: job.info.id.clone(), action: JobAction::Kill });
        }
        ops.push(Op::Shutdown);
        self.modal = None;
        self.exit = ExitState::Quitting { since: self.now };
    }

    fn approval_key(&mut self, key: &KeyEvent, ops: &mut Vec<Op>) {
        let Some(front) = self.approvals.front() else { return };
        let armed = self.now.saturating_duration_since(front.shown_at) >= APPROVAL_ARM;
        let id = front.id;
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
            return;
        }
    }

    fn modal_key(&mut self, key: &KeyEvent, ops: &mut Vec<Op>) {
        if let Some(Modal::WritePrompt { id, text }) = &mut self.modal {
            let plain = !key.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
            match key.code {
                KeyCode::Enter => {
                    let data = format!("{text}\n");
                    ops.push(Op::Job { id: id.clone(), action: JobAction::Write { data } });
                    self.modal = None;
                }
                KeyCode::Esc => self.modal = None,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => self.modal = None,
                KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => text.clear(),
                KeyCode::Char(c) if plain => text.push(c),
                _ => {}
            }
            return;
        }
        let context = match &self.modal {
            Some(Modal::Help { .. }) => Context::Help,
            Some(Modal::QuitConfirm | Modal::KillConfirm { .. }) => Context::Confirm,
            Some(Modal::WritePrompt { .. }) | None => return,
        };
        let page = self.page_rows();
        for action in self.keymap.actions(context, key) {
            let modal = self.modal.take();
            match (modal, action) {
                (Some(Modal::Help { .. }), Action::Close | Action::Help) => {}
                (Some(Modal::Help { scroll }), Action::LineUp) => {
                    self.modal = Some(Modal::Help { scroll: scroll.saturating_sub(1) })
                }
                (Some(Modal::Help { scroll }), Action::LineDown) => {
                    self.modal = Some(Modal::Help { scroll: scroll + 1 })
                }
                (Some(Modal::Help { scroll }), Action::PageUp) => {
                    self.modal = Some(Modal::Help { scroll: scroll.saturating_sub(page) })
                }
                (Some(Modal::Help { scroll }), Action::PageDown) => {
                    self.modal = Some(Modal::Help { scroll: scroll + page })
                }
                (Some(Modal::QuitConfirm), Action::Yes | Action::Cancel) => self.begin_quit(ops),
                (Some(Modal::KillConfirm { id }), Action::Yes) => {
                    ops.push(Op::Job { id, action: JobAction::Kill });
                }
                (Some(Modal::QuitConfirm | Modal::KillConfirm { .. }), Action::No | Action::Cancel) => {}
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
        let job_id = match self.log_view.as_ref().map(|v| &v.source) {
            Some(LogSource::Job(id)) => Some(id.clone()),
            Some(LogSource::Tool(_)) | None => None,
        };
        for action in self.keymap.actions(Context::Log, key) {
            match action {
                Action::LineUp => self.log_scroll_up(1),
                Action::LineDown => self.log_scroll_down(1),
                Action::PageUp => self.log_scroll_up(page),
                Action::PageDown => self.log_scroll_down(page),
                Action::Top => self.log_scroll_up(usize::MAX / 2),
                Action::Follow => {
                    if let Some(view) = &mut self.log_view {
                        view.scroll = 0;
                        view.follow = true;
                    }
                    if let Some(id) = &job_id {
                        self.request_log(id, ops);
                    }
                }
                Action::Kill => {
                    if let Some(id) = job_id.clone() {
                        self.ask_kill(id);
                    }
                }
                Action::Poll => {
                    if let Some(id) = &job_id {
                        ops.push(Op::Job { id: id.clone(), action: JobAction::Poll });
                        self.request_log(id, ops);
                    }
                }
                Action::Write => {
                    if let Some(id) = job_id.clone() {
                        self.ask_write(id);
                    }
                }
                Action::Close => self.log_view = None,
                other => {
                    if self.global_action(other, ops) {
                        return;
                    }
                    continue;
                }
            }
            return;
        }
    }

    fn request_log(&mut self, id: &str, ops: &mut Vec<Op>) {
        if let Some(view) = &mut self.log_view {
            view.inflight = true;
        }
        ops.push(Op::Job { id: id.to_string(), action: JobAction::Log { offset: None, limit: Some(LOG_LIMIT) } });
    }

    fn ask_kill(&mut self, id: String) {
        let running = self.jobs.iter().any(|j| j.info.id == id && j.info.status.is_running());
        if running {
            self.modal = Some(Modal::KillConfirm { id });
        } else {
            self.transcript.push(CellBody::Notice { level: NoticeLevel::Info, text: format!("{id} is not running") });
        }
    }

    fn ask_write(&mut self, id: String) {
        let writable = self.jobs.iter().any(|j| j.info.id == id && j.info.status.is_running() && j.info.has_stdin);
        if writable {
            self.modal = Some(Modal::WritePrompt { id, text: String::new() });
        } else {
            let text = format!("{id} has no stdin to write to (only running background jobs started with one do)");
            self.transcript.push(CellBody::Notice { level: NoticeLevel::Warn, text });
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

    fn browsing_history(&self) -> bool {
        self.history_pos.is_some_and(|i| self.history.get(i).is_some_and(|h| *h == self.input_text()))
    }

    fn input_key(&mut self, key: KeyEvent, ops: &mut Vec<Op>) {
        let empty = self.input_is_empty();
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        for action in self.keymap.actions(Context::Input, &key) {
            match action {
                Action::Submit => self.submit(None, ops),
                Action::Queue if self.busy && !empty => self.submit(Some(BusyMode::Queue), ops),
                Action::FocusPanes if !self.jobs.is_empty() || !self.tools.is_empty() => {
                    self.focus = self.next_focus();
                }
                Action::Newline => self.input.insert_newline(),
                Action::Interrupt => {
                    if self.busy {
                        ops.push(Op::Interrupt);
                    } else {
                        self.transcript.follow();
                    }
                }
                Action::Quit if empty => self.request_quit(ops),
                Action::HelpEmpty if empty => self.modal = Some(Modal::Help { scroll: 0 }),
                Action::HistoryPrev if empty || self.browsing_history() => self.history_prev(),
                Action::HistoryNext if self.browsing_history() => self.history_next(),
                Action::ScrollUp => self.scroll_transcript_up(self.page_rows()),
                Action::ScrollDown => self.scroll_transcript_down(self.page_rows()),
                Action::ScrollTop if empty || ctrl => self.transcript.scroll_top(),
                Action::ScrollBottom if empty || ctrl => self.transcript.follow(),
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
            KeyCode::Tab | KeyCode::BackTab | KeyCode::Esc | KeyCode::Enter => {}
            _ => {
                self.input.input(key);
            }
        }
    }

    fn history_prev(&mut self) {
        if self.history.is_empty() {
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
        let text = self.input_text();
        if text.trim().is_empty() {
            return;
        }
        if commands::is_command(&text) {
            match commands::parse(&text) {
                Ok(command) => {
                    self.push_history(text.trim());
                    self.reset_input(String::new());
                    self.run_command(command, ops);
                }
                Err(message) => self.transcript.push(CellBody::Notice { level: NoticeLevel::Error, text: message }),
            }
            return;
        }
        self.push_history(&text);
        self.reset_input(String::new());
        self.transcript.follow();
        ops.push(Op::Submit { text, mode });
    }

    fn run_command(&mut self, command: SlashCommand, ops: &mut Vec<Op>) {
        match command {
            SlashCommand::Quit => self.request_quit(ops),
            SlashCommand::Stop => ops.push(Op::Interrupt),
            SlashCommand::Help => self.modal = Some(Modal::Help { scroll: 0 }),
            SlashCommand::Jobs(JobsCmd::Log(id)) => self.open_job_log(id, ops),
            other => ops.push(Op::Command(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::config::Config;
    use crate::protocol::{Event, JobInfo, JobStatus, TurnTrigger};
    use crate::tui::app::AppEvent;
    use crate::tui::app::DOUBLE_CTRL_C;
    use crate::tui::keymap::Keymap;
    use crate::tui::theme::Theme;

    fn app() -> App {
        App::new(&Config::default(), Keymap::builtin(), Theme::default(), None)
    }

    fn key(app: &mut App, code: KeyCode, mods: KeyModifiers) -> Vec<Op> {
        app.update(AppEvent::Key(KeyEvent::new(code, mods)))
    }

    fn type_text(app: &mut App, text: &str) {
        for c in text.chars() {
            key(app, KeyCode::Char(c), KeyModifiers::NONE);
        }
    }

    fn busy(app: &mut App) {
        app.update(AppEvent::Engine(Event::TurnStarted { trigger: TurnTrigger::User }));
    }

    fn running_job(id: &str) -> JobInfo {
        JobInfo {
            id: id.into(),
            command: "sleep 100".into(),
            pid: 42,
            cwd: "/tmp".into(),
            started_at_ms: 0,
            status: JobStatus::Running,
            background: true,
            has_stdin: true,
            last_line: String::new(),
        }
    }

    #[test]
    fn enter_sends_with_the_configured_mode_even_while_busy() {
        let mut app = app();
        type_text(&mut app, "hello");
        assert_eq!(
            key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
            vec![Op::Submit { text: "hello".into(), mode: None }]
        );
        assert!(app.input_is_empty());
        busy(&mut app);
        type_text(&mut app, "more");
        assert_eq!(
            key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
            vec![Op::Submit { text: "more".into(), mode: None }]
        );
    }

    #[test]
    fn tab_while_busy_queues() {
        let mut app = app();
        busy(&mut app);
        type_text(&mut app, "later");
        assert_eq!(
            key(&mut app, KeyCode::Tab, KeyModifiers::NONE),
            vec![Op::Submit { text: "later".into(), mode: Some(BusyMode::Queue) }]
        );
    }

    #[test]
    fn esc_interrupts_only_when_busy() {
        let mut app = app();
        assert_eq!(key(&mut app, KeyCode::Esc, KeyModifiers::NONE), vec![]);
        busy(&mut app);
        assert_eq!(key(&mut app, KeyCode::Esc, KeyModifiers::NONE), vec![Op::Interrupt]);
    }

    #[test]
    fn ctrl_c_twice_quits() {
        let mut app = app();
        type_text(&mut app, "draft");
        assert_eq!(key(&mut app, KeyCode::Char('c'), KeyModifiers::CONTROL), vec![]);
        assert!(app.input_is_empty(), "the first Ctrl+C clears the input");
        app.now += Duration::from_millis(500);
        assert_eq!(key(&mut app, KeyCode::Char('c'), KeyModifiers::CONTROL), vec![Op::Shutdown]);
        assert!(matches!(app.exit, ExitState::Quitting { .. }));
    }

    #[test]
    fn ctrl_c_interrupts_when_busy_and_a_slow_second_does_not_quit() {
        let mut app = app();
        busy(&mut app);
        assert_eq!(key(&mut app, KeyCode::Char('c'), KeyModifiers::CONTROL), vec![Op::Interrupt]);
        app.now += DOUBLE_CTRL_C + Duration::from_millis(1);
        assert_eq!(key(&mut app, KeyCode::Char('c'), KeyModifiers::CONTROL), vec![Op::Interrupt]);
        assert_eq!(app.exit, ExitState::Running);
    }

    #[test]
    fn quitting_with_running_jobs_asks_and_kills_by_default() {
        let mut app = app();
        app.update(AppEvent::Engine(Event::JobStarted { job: running_job("job_1") }));
        assert_eq!(key(&mut app, KeyCode::Char('d'), KeyModifiers::CONTROL), vec![]);
        assert_eq!(app.modal, Some(Modal::QuitConfirm));
        assert_eq!(key(&mut app, KeyCode::Esc, KeyModifiers::NONE), vec![]);
        assert_eq!(app.modal, None);
        key(&mut app, KeyCode::Char('d'), KeyModifiers::CONTROL);
        assert_eq!(
            key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
            vec![Op::Job { id: "job_1".into(), action: JobAction::Kill }, Op::Shutdown]
        );
    }

    #[test]
    fn slash_commands_are_parsed_or_rejected_locally() {
        let mut app = app();
        type_text(&mut app, "/busy steer");
        assert_eq!(
            key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
            vec![Op::Command(SlashCommand::Busy(Some(BusyMode::Steer)))]
        );
        type_text(&mut app, "/frobnicate");
        assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![]);
        assert_eq!(app.input_text(), "/frobnicate", "a bad command stays in the input to fix");
        let last = app.transcript.cells().last().map(|c| c.body.clone());
        assert!(
            matches!(last, Some(CellBody::Notice { level: NoticeLevel::Error, text }) if text.contains("unknown command"))
        );
        app.reset_input(String::new());
        type_text(&mut app, "/help");
        key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
        assert_eq!(app.modal, Some(Modal::Help { scroll: 0 }));
        key(&mut app, KeyCode::Esc, KeyModifiers::NONE);
        type_text(&mut app, "/stop");
        assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![Op::Interrupt]);
        type_text(&mut app, "/quit");
        assert_eq!(key(&mut app, KeyCode::Enter, KeyModifiers::NONE), vec![Op::Shutdown]);
    }

    #[test]
    fn newline_keys_and_paste_do_not_send() {
        let mut app = app();
        type_text(&mut app, "a");
        key(&mut app, KeyCode::Enter, KeyModifiers::ALT);
        type_text(&mut app, "b");
        key(&mut app, KeyCode::Char('j'), KeyModifiers::CONTROL);
        app.update(AppEvent::Paste("c\r\nd".into()));
        assert_eq!(app.input_text(), "a\nb\nc\nd");
        assert_eq!(
            key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
            vec![Op::Submit { text: "a\nb\nc\nd".into(), mode: None }]
        );
    }

    #[test]
    fn readline_keys_edit_the_input() {
        let mut app = app();
        type_text(&mut app, "one two three");
        key(&mut app, KeyCode::Char('w'), KeyModifiers::CONTROL);
        assert_eq!(app.input_text(), "one two ");
        key(&mut app, KeyCode::Char('a'), KeyModifiers::CONTROL);
        type_text(&mut app, ">");
        key(&mut app, KeyCode::Char('e'), KeyModifiers::CONTROL);
        type_text(&mut app, "!");
        assert_eq!(app.input_text(), ">one two !");
        key(&mut app, KeyCode::Char('b'), KeyModifiers::ALT);
        key(&mut app, KeyCode::Char('k'), KeyModifiers::CONTROL);
        assert_eq!(app.input_text(), ">one two ");
        key(&mut app, KeyCode::Char('u'), KeyModifiers::CONTROL);
        assert_eq!(app.input_text(), "");
    }

    #[test]
    fn up_and_down_recall_earlier_messages_on_an_empty_input() {
        let mut app = app();
        for text in ["first", "second"] {
            type_text(&mut app, text);
            key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
        }
        key(&mut app, KeyCode::Up, KeyModifiers::NONE);
        assert_eq!(app.input_text(), "second");
        key(&mut app, KeyCode::Up, KeyModifiers::NONE);
        assert_eq!(app.input_text(), "first");
        key(&mut app, KeyCode::Down, KeyModifiers::NONE);
        assert_eq!(app.input_text(), "second");
        key(&mut app, KeyCode::Down, KeyModifiers::NONE);
        assert_eq!(app.input_text(), "");
    }

    #[test]
    fn approvals_queue_and_answer_in_order() {
        let mut app = app();
        for id in [7, 8] {
            app.update(AppEvent::Engine(Event::ApprovalNeeded {
                id,
                command: "rm -rf build".into(),
                reason: "recursive delete".into(),
            }));
        }
        assert_eq!(key(&mut app, KeyCode::Char('o'), KeyModifiers::NONE), vec![], "not armed yet");
        app.now += APPROVAL_ARM;
        assert_eq!(
            key(&mut app, KeyCode::Char('s'), KeyModifiers::NONE),
            vec![Op::Approve { id: 7, decision: Approval::Session }]
        );
        assert_eq!(
            key(&mut app, KeyCode::Esc, KeyModifiers::NONE),
            vec![Op::Approve { id: 8, decision: Approval::Deny }, Op::Interrupt]
        );
        assert!(app.approvals.is_empty());
    }

    #[test]
    fn jobs_pane_opens_logs_kills_with_confirmation_and_writes() {
        let mut app = app();
        app.update(AppEvent::Engine(Event::JobStarted { job: running_job("job_3") }));
        key(&mut app, KeyCode::Tab, KeyModifiers::NONE);
        assert_eq!(app.focus, Focus::Jobs);
        assert_eq!(
            key(&mut app, KeyCode::Char('p'), KeyModifiers::NONE),
            vec![Op::Job { id: "job_3".into(), action: JobAction::Poll }]
        );
        assert_eq!(key(&mut app, KeyCode::Char('k'), KeyModifiers::NONE), vec![]);
        assert_eq!(app.modal, Some(Modal::KillConfirm { id: "job_3".into() }));
        assert_eq!(
            key(&mut app, KeyCode::Char('y'), KeyModifiers::NONE),
            vec![Op::Job { id: "job_3".into(), action: JobAction::Kill }]
        );
        key(&mut app, KeyCode::Char('w'), KeyModifiers::NONE);
        type_text(&mut app, "yes");
        assert_eq!(
            key(&mut app, KeyCode::Enter, KeyModifiers::NONE),
            vec![Op::Job { id: "job_3".into(), action: JobAction::Write { data: "yes\n".into() } }]
        );
        let ops = key(&mut app, KeyCode::Enter, KeyModifiers::NONE);
        assert_eq!(
            ops,
            vec![Op::Job { id: "job_3".into(), action: JobAction::Log { offset: None, limit: Some(LOG_LIMIT) } }]
        );
        app.update(AppEvent::Engine(Event::JobLog {
            id: "job_3".into(),
            text: "\x1b[32mok\x1b[0m\n\x1b]52;c;eA==\x07done".into(),
            first_line: 1,
            total_lines: 2,
        }));
        let view = app.log_view.as_ref().expect("log view open");
        assert_eq!(view.lines.iter().map(|l| l.to_string()).collect::<Vec<_>>(), vec!["ok", "done"]);
        // Following: an update asks for the newest lines once until they arrive.
        let update = Event::JobUpdated { id: "job_3".into(), status: JobStatus::Running, tail: "x".into() };
        assert_eq!(app.update(AppEvent::Engine(update.clone())).len(), 1);
        assert_eq!(app.update(AppEvent::Engine(update)).len(), 0);
        key(&mut app, KeyCode::Esc, KeyModifiers::NONE);
        assert!(app.log_view.is_none());
        key(&mut app, KeyCode::Esc, KeyModifiers::NONE);
        assert_eq!(app.focus, Focus::Input);
    }

    #[test]
    fn ctrl_b_yields_only_while_something_runs() {
        let mut app = app();
        assert_eq!(key(&mut app, KeyCode::Char('b'), KeyModifiers::CONTROL), vec![]);
        busy(&mut app);
        assert_eq!(key(&mut app, KeyCode::Char('b'), KeyModifiers::CONTROL), vec![Op::YieldForeground]);
    }

    #[test]
    fn restored_input_and_mid_turn_messages() {
        let mut app = app();
        app.update(AppEvent::Engine(Event::RestoreInput { text: "put back".into() }));
        assert_eq!(app.input_text(), "put back");
        busy(&mut app);
        app.update(AppEvent::Engine(Event::UserMessage { text: "go".into(), trigger: TurnTrigger::User }));
        app.update(AppEvent::Engine(Event::AssistantDelta("working".into())));
        app.update(AppEvent::Engine(Event::UserMessage { text: "also this".into(), trigger: TurnTrigger::User }));
        let origins: Vec<_> = app
            .transcript
            .cells()
            .iter()
            .filter_map(|c| match &c.body {
                CellBody::User { origin, .. } => Some(*origin),
                _ => None,
            })
            .collect();
        use crate::tui::transcript::UserOrigin;
        assert_eq!(origins, vec![UserOrigin::Typed, UserOrigin::MidTurn]);
    }
}
