//! `/rewind` and `/diff` in the TUI (DESIGN §13): the picker of points (newest first), then
//! what to restore, then the engine's preview as the one confirmation; Esc Esc on an empty,
//! idle input opens it.

use std::time::Duration;

use super::{App, LogSource, LogView, Modal};
use crate::protocol::rewind::{points_text, RewindCmd, RewindMode, RewindPoint, RewindPreview};
use crate::protocol::{NoticeLevel, Op, SlashCommand};
use crate::tui::keymap::Action;

/// How soon a second Esc must follow the first to open `/rewind`.
pub(crate) const ESC_ESC: Duration = Duration::from_millis(800);

/// What the picker offers once a point is chosen, in this order.
pub(crate) const MODES: [RewindMode; 3] = [RewindMode::Both, RewindMode::Code, RewindMode::Conversation];

/// The `/rewind` picker's state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RewindPicker {
    /// Newest first, as the engine sends them.
    pub(crate) points: Vec<RewindPoint>,
    pub(crate) warnings: Vec<String>,
    pub(crate) selected: usize,
    /// A point is chosen: the highlighted row of [`MODES`].
    pub(crate) mode: Option<usize>,
}

impl RewindPicker {
    /// The modes the selected point can take: a rewind entry has no conversation of its own.
    pub(crate) fn modes(&self) -> Vec<RewindMode> {
        match self.points.get(self.selected) {
            Some(p) if !p.conversation => vec![RewindMode::Code],
            _ => MODES.to_vec(),
        }
    }
}

fn step(selected: usize, len: usize, up: bool) -> usize {
    if len == 0 {
        0
    } else if up {
        selected.checked_sub(1).unwrap_or(len - 1)
    } else if selected + 1 >= len {
        0
    } else {
        selected + 1
    }
}

impl App {
    pub(super) fn offer_rewind(&mut self, points: Vec<RewindPoint>, warnings: Vec<String>) {
        if points.is_empty() {
            self.log_say(NoticeLevel::Info, points_text(&points, &warnings));
            return;
        }
        self.modal = Some(Modal::Rewind(RewindPicker { points, warnings, selected: 0, mode: None }));
    }

    pub(super) fn confirm_rewind(&mut self, preview: RewindPreview) {
        self.modal = Some(Modal::RewindConfirm(preview));
    }

    /// `/diff`'s answer: a view over the main area like a job's log, from its first line.
    pub(super) fn show_diff(&mut self, title: String, text: String) {
        let lines = crate::tui::diff::diff_lines(&text, &self.theme);
        let mut view = LogView::new(LogSource::Diff(title), lines, false);
        view.go_top();
        self.log_view = Some(view);
    }

    /// Esc did nothing on an idle input: a second one soon after, on an empty input, opens
    /// `/rewind`. True when it did.
    pub(super) fn esc_esc(&mut self, ops: &mut Vec<Op>) -> bool {
        let now = self.now;
        if !self.input_is_empty() {
            self.last_idle_esc = None;
            return false;
        }
        if self.last_idle_esc.take().is_some_and(|t| now.saturating_duration_since(t) <= ESC_ESC) {
            ops.push(Op::Command(SlashCommand::Rewind(RewindCmd::picker())));
            return true;
        }
        self.last_idle_esc = Some(now);
        false
    }

    /// A key of the rewind picker or its confirmation; `Err` gives back a modal the action
    /// does not apply to.
    pub(super) fn rewind_key(&mut self, modal: Modal, action: Action, ops: &mut Vec<Op>) -> Result<(), Modal> {
        match (modal, action) {
            (Modal::Rewind(mut picker), Action::Up | Action::Down) => {
                let up = action == Action::Up;
                match picker.mode {
                    None => picker.selected = step(picker.selected, picker.points.len(), up),
                    Some(m) => picker.mode = Some(step(m, picker.modes().len(), up)),
                }
                self.modal = Some(Modal::Rewind(picker));
            }
            (Modal::Rewind(mut picker), Action::Open) => match picker.mode {
                None => {
                    picker.mode = Some(0);
                    self.modal = Some(Modal::Rewind(picker));
                }
                Some(m) => {
                    let (Some(point), Some(mode)) =
                        (picker.points.get(picker.selected), picker.modes().get(m).copied())
                    else {
                        return Ok(());
                    };
                    let cmd = RewindCmd { target: Some(point.number), mode, yes: false, include_user: false };
                    ops.push(Op::Command(SlashCommand::Rewind(cmd)));
                    self.input_hint = Some("rewind: working out what it would put back…".to_string());
                }
            },
            // Esc on the modes goes back to the points; on the points it closes.
            (Modal::Rewind(mut picker), Action::Close | Action::Cancel) if picker.mode.is_some() => {
                picker.mode = None;
                self.modal = Some(Modal::Rewind(picker));
            }
            (Modal::Rewind(_), Action::Close | Action::Cancel) => {
                self.input_hint = Some("rewind cancelled".to_string());
            }
            (Modal::RewindConfirm(preview), Action::Yes) => {
                let mode = RewindMode::parse(&preview.mode).unwrap_or(RewindMode::Both);
                let cmd =
                    RewindCmd { target: Some(preview.number), mode, yes: true, include_user: preview.include_user };
                ops.push(Op::Command(SlashCommand::Rewind(cmd)));
            }
            (Modal::RewindConfirm(_), Action::No | Action::Cancel) => {
                self.input_hint = Some("rewind cancelled: nothing changed".to_string());
            }
            (other, _) => return Err(other),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    use super::*;
    use crate::config::Config;
    use crate::protocol::rewind::ChangedPath;
    use crate::protocol::Event;
    use crate::tui::app::AppEvent;
    use crate::tui::keymap::Keymap;
    use crate::tui::theme::Theme;

    fn app() -> App {
        App::new(&Config::default(), Keymap::builtin(), Theme::default(), None)
    }

    fn key(app: &mut App, code: KeyCode) -> Vec<Op> {
        app.update(AppEvent::Key(KeyEvent::new(code, KeyModifiers::NONE)))
    }

    fn point(number: usize, label: &str, conversation: bool) -> RewindPoint {
        let paths =
            vec![ChangedPath { path: "a.txt".into(), kind: "modified".into(), added: Some(1), removed: Some(1) }];
        RewindPoint { number, label: label.into(), paths, conversation }
    }

    fn rewind_op(target: Option<usize>, mode: RewindMode, yes: bool) -> Op {
        Op::Command(SlashCommand::Rewind(RewindCmd { target, mode, yes, include_user: false }))
    }

    #[test]
    fn esc_esc_on_an_empty_idle_input_opens_rewind_and_a_slow_second_does_not() {
        let mut app = app();
        assert_eq!(key(&mut app, KeyCode::Esc), vec![]);
        assert_eq!(key(&mut app, KeyCode::Esc), vec![Op::Command(SlashCommand::Rewind(RewindCmd::picker()))]);
        // A third starts over; a late second does nothing.
        assert_eq!(key(&mut app, KeyCode::Esc), vec![]);
        app.now += ESC_ESC + Duration::from_millis(1);
        assert_eq!(key(&mut app, KeyCode::Esc), vec![]);
        // Not with text in the input.
        app.update(AppEvent::Paste("x".into()));
        assert_eq!(key(&mut app, KeyCode::Esc), vec![]);
        assert_eq!(key(&mut app, KeyCode::Esc), vec![]);
    }

    #[test]
    fn the_picker_chooses_a_point_then_a_mode_and_the_confirmation_sends_it() {
        let mut app = app();
        let points = vec![point(3, "turn three", true), point(2, "turn two", true), point(1, "turn one", true)];
        app.update(AppEvent::Engine(Event::RewindPoints { points, warnings: vec![] }));
        assert!(matches!(app.modal, Some(Modal::Rewind(_))));
        assert_eq!(key(&mut app, KeyCode::Down), vec![]);
        assert_eq!(key(&mut app, KeyCode::Enter), vec![], "the point: now the modes");
        assert_eq!(key(&mut app, KeyCode::Down), vec![]);
        assert_eq!(key(&mut app, KeyCode::Enter), vec![rewind_op(Some(2), RewindMode::Code, false)]);
        let preview = RewindPreview {
            number: 2,
            mode: "code".into(),
            steps: vec!["restore a.txt".into()],
            kept: vec!["f.txt".into()],
            warnings: vec![],
            include_user: false,
        };
        app.update(AppEvent::Engine(Event::RewindPreview(preview.clone())));
        // Enter is the safe answer: nothing happens.
        assert_eq!(key(&mut app, KeyCode::Enter), vec![]);
        assert_eq!(app.modal, None);
        app.update(AppEvent::Engine(Event::RewindPreview(preview)));
        assert_eq!(key(&mut app, KeyCode::Char('y')), vec![rewind_op(Some(2), RewindMode::Code, true)]);
        assert_eq!(app.modal, None);
    }

    #[test]
    fn esc_in_the_modes_goes_back_to_the_points_and_a_rewind_entry_offers_code_only() {
        let mut app = app();
        let points = vec![point(4, "[rewind] to before 2 (code)", false), point(1, "turn one", true)];
        app.update(AppEvent::Engine(Event::RewindPoints { points, warnings: vec!["job_1 still running".into()] }));
        key(&mut app, KeyCode::Enter);
        let Some(Modal::Rewind(picker)) = &app.modal else { panic!("picker open") };
        assert_eq!(picker.modes(), vec![RewindMode::Code]);
        key(&mut app, KeyCode::Esc);
        let Some(Modal::Rewind(picker)) = &app.modal else { panic!("still open") };
        assert_eq!(picker.mode, None);
        key(&mut app, KeyCode::Esc);
        assert_eq!(app.modal, None);
        assert_eq!(app.input_hint.as_deref(), Some("rewind cancelled"));
    }
}
