//! The conversation: only the rows in view are drawn.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::text::sanitize_for_display as display_text;
use crate::tui::app::App;
use crate::tui::keymap::{Action, Context};
use crate::tui::wrap::{wrap_lines, RLine};

pub(crate) fn draw(frame: &mut Frame<'_>, area: Rect, app: &App) {
    if area.width == 0 || area.height == 0 {
        return;
    }
    // Until something is said the welcome tops the transcript (`App::prepare` made room).
    let welcome = app.welcome_rows.min(area.height);
    if welcome > 0 {
        let rect = Rect { height: welcome, ..area };
        frame.render_widget(Paragraph::new(welcome_wrapped(app, area.width)), rect);
    }
    let area = Rect { y: area.y + welcome, height: area.height - welcome, ..area };
    if app.transcript.is_empty() || area.height == 0 {
        return;
    }
    let mut lines: Vec<Line<'static>> = Vec::with_capacity(usize::from(area.height));
    for slice in &app.visible {
        lines.extend(app.transcript.rows(*slice, area.width, &app.theme, app.now));
    }
    lines.truncate(usize::from(area.height));
    frame.render_widget(Paragraph::new(lines), area);
    if app.transcript.new_output {
        let label = " ↓ new output ";
        let w = u16::try_from(label.chars().count()).unwrap_or(14).min(area.width);
        let rect = Rect::new(area.right() - w, area.bottom() - 1, w, 1);
        let style = Style::default().fg(app.theme.new_output).add_modifier(Modifier::REVERSED | Modifier::BOLD);
        frame.render_widget(Paragraph::new(Span::styled(label, style)), rect);
    }
}

/// Rows the welcome takes at `width`, with the blank row under it.
pub(crate) fn welcome_height(app: &App, width: u16) -> usize {
    welcome_wrapped(app, width).len() + 1
}

fn welcome_wrapped(app: &App, width: u16) -> Vec<Line<'static>> {
    let lines: Vec<RLine> = welcome_lines(app).into_iter().map(|l| RLine::new(l.spans)).collect();
    wrap_lines(&lines, width)
}

/// The first screen: what Talaria is, the demo model's explanation, how typing while it
/// works goes, and how the mouse behaves (it scrolls; Shift+drag or F2 selects text).
fn welcome_lines(app: &App) -> Vec<Line<'static>> {
    let mut lines = vec![
        Line::from(Span::styled("Talaria", Style::default().fg(app.theme.banner).add_modifier(Modifier::BOLD))),
        Line::from(Span::styled("a terminal agent you never wait for", Style::default().fg(app.theme.dim))),
        Line::default(),
    ];
    if let Some(banner) = &app.banner {
        let style = Style::default().fg(app.theme.banner);
        lines.extend(display_text(banner).lines().map(|l| Line::from(Span::styled(l.to_string(), style))));
        lines.push(Line::default());
    }
    let dim = Style::default().fg(app.theme.dim);
    let hint =
        "Type a message and press Enter. While it works, keep typing: Enter redirects, Tab queues. ? shows every key.";
    lines.push(Line::from(Span::styled(hint, dim)));
    let f2 = app.keymap.hint(Context::Global, Action::ToggleMouse);
    let mouse = if app.mouse {
        format!("The mouse wheel scrolls. To select text, hold Shift while you drag, or press {f2} to let the terminal have the mouse.")
    } else {
        format!("Mouse capture is off: drag to select text; {f2} turns it on for wheel scrolling.")
    };
    lines.push(Line::from(Span::styled(mouse, dim)));
    lines
}
