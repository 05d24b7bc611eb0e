//! The `/rewind` picker and its confirmation (DESIGN §13).

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};
use ratatui::Frame;

use super::{centered, draw_question, keys_of, modal_block};
use crate::protocol::rewind::{ChangedPath, RewindPreview};
use crate::tui::app::rewind::RewindPicker;
use crate::tui::app::App;
use crate::tui::keymap::{Action, Context};
use crate::tui::wrap::{truncate_spans, wrap_line, RLine};

/// `+3 −1` over a turn's files (binary files count as none).
fn totals(paths: &[ChangedPath]) -> String {
    let added: u64 = paths.iter().filter_map(|p| p.added).sum();
    let removed: u64 = paths.iter().filter_map(|p| p.removed).sum();
    format!("+{added} −{removed}")
}

/// The points newest first, or (once one is chosen) what to restore.
pub(super) fn draw_picker(frame: &mut Frame<'_>, area: Rect, app: &App, picker: &RewindPicker) {
    let width = area.width.saturating_sub(4).min(110);
    let inner = usize::from(width.saturating_sub(4));
    let dim = Style::default().fg(app.theme.dim);
    let chosen = Style::default().add_modifier(Modifier::REVERSED);
    let mut lines: Vec<Line<'static>> = Vec::new();
    for w in &picker.warnings {
        lines.extend(wrap_line(
            &RLine::plain(format!("warning: {w}"), Style::default().fg(app.theme.notice_warn)),
            width - 4,
        ));
    }
    let keys = |verb: &str| {
        format!(
            "[{}/{}] choose   [{}] {verb}   [{}] {}",
            keys_of(app, Context::Picker, Action::Up),
            keys_of(app, Context::Picker, Action::Down),
            keys_of(app, Context::Picker, Action::Open),
            keys_of(app, Context::Picker, Action::Close),
            if picker.mode.is_some() { "back" } else { "cancel" },
        )
    };
    let footer = match picker.mode {
        None => {
            lines.push(Line::raw("Go back to before which message? (newest first)"));
            lines.push(Line::default());
            let room = usize::from(area.height.saturating_sub(10 + u16::try_from(lines.len()).unwrap_or(0))).max(1);
            let first = picker.selected.saturating_sub(room.saturating_sub(1));
            for (i, p) in picker.points.iter().enumerate().skip(first).take(room) {
                let mark = if i == picker.selected { "▸ " } else { "  " };
                let files = match p.paths.len() {
                    0 => "no files changed".to_string(),
                    1 => format!("{} {}", p.paths[0].path, totals(&p.paths)),
                    n => format!("{n} files {}", totals(&p.paths)),
                };
                let style = if i == picker.selected { chosen } else { Style::default() };
                let spans = vec![
                    Span::styled(format!("{mark}{:>3}  {}", p.number, p.label), style),
                    Span::styled(format!("  · {files}"), dim),
                ];
                lines.push(truncate_spans(spans, inner));
            }
            if first + room < picker.points.len() {
                lines.push(Line::styled(format!("  ↓ {} more", picker.points.len() - first - room), dim));
            }
            keys("next")
        }
        Some(m) => {
            let point = &picker.points[picker.selected.min(picker.points.len().saturating_sub(1))];
            lines.push(truncate_spans(vec![Span::raw(format!("Before {}  {}", point.number, point.label))], inner));
            for c in point.paths.iter().take(8) {
                lines.push(truncate_spans(vec![Span::styled(format!("  {}", c.line()), dim)], inner));
            }
            if point.paths.len() > 8 {
                lines.push(Line::styled(format!("  … {} more", point.paths.len() - 8), dim));
            }
            lines.push(Line::default());
            lines.push(Line::raw("Restore:"));
            for (i, mode) in picker.modes().iter().enumerate() {
                let text = match mode {
                    crate::protocol::rewind::RewindMode::Both => "code and conversation",
                    crate::protocol::rewind::RewindMode::Code => "code only",
                    crate::protocol::rewind::RewindMode::Conversation => "conversation only",
                };
                let (mark, style) = if i == m { ("▸ ", chosen) } else { ("  ", Style::default()) };
                lines.push(Line::styled(format!("{mark}{text}"), style));
            }
            keys("next: what it would put back")
        }
    };
    lines.push(Line::default());
    lines.extend(wrap_line(&RLine::plain(footer, Style::default()), width.saturating_sub(4)));
    let rect = centered(area, width, u16::try_from(lines.len()).unwrap_or(10) + 2);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines)
            .block(modal_block(app, " Rewind ".into()).padding(ratatui::widgets::Padding::horizontal(1))),
        rect,
    );
}

/// The one confirmation: every path it puts back, the user's paths it keeps.
pub(super) fn draw_confirm(frame: &mut Frame<'_>, area: Rect, app: &App, p: &RewindPreview) {
    let mut lines: Vec<String> = p.warnings.iter().map(|w| format!("warning: {w}")).collect();
    let what = match p.mode.as_str() {
        "code" => "the files",
        "conversation" => "the conversation",
        _ => "the files and the conversation",
    };
    lines.push(format!("Put {what} back as before {}?", p.number));
    // Room for the lists: what the frame leaves after the rest of the box.
    let room = usize::from(area.height.saturating_sub(12)).max(2);
    let (steps, kept) = if p.steps.len() + p.kept.len() <= room {
        (p.steps.len(), p.kept.len())
    } else {
        let kept = p.kept.len().min(room / 3).max(usize::from(!p.kept.is_empty()));
        (room.saturating_sub(kept).max(1), kept)
    };
    if p.mode != "conversation" {
        if p.steps.is_empty() {
            lines.push("  no file to put back".into());
        }
        lines.extend(p.steps.iter().take(steps).map(|s| format!("  {s}")));
        if p.steps.len() > steps {
            lines.push(format!("  … and {} more (talaria rewind {} lists them all)", p.steps.len() - steps, p.number));
        }
    }
    if !p.kept.is_empty() {
        lines.push(if p.include_user {
            "Yours, changed since — put back too (--all):".to_string()
        } else {
            "Yours, changed since — kept as they are (/rewind n --all puts them back):".to_string()
        });
        lines.extend(p.kept.iter().take(kept).map(|k| format!("  {k}")));
        if p.kept.len() > kept {
            lines.push(format!("  … and {} more", p.kept.len() - kept));
        }
    }
    lines.push(String::new());
    lines.push(format!(
        "[{}] rewind   [{}] cancel (default)",
        keys_of(app, Context::Confirm, Action::Yes),
        keys_of(app, Context::Confirm, Action::No)
    ));
    draw_question(frame, area, app, " Rewind? ".into(), lines);
}
