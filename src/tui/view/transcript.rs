//! The conversation: only the rows in view are drawn.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use crate::text::sanitize_for_display as display_text;
use crate::tui::app::App;

pub(crate) fn draw(frame: &mut Frame<'_>, area: Rect, app: &App) {
    if area.width == 0 || area.height == 0 {
        return;
    }
    if app.transcript.is_empty() {
        draw_banner(frame, area, app);
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

fn draw_banner(frame: &mut Frame<'_>, area: Rect, app: &App) {
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
    let hint =
        "Type a message and press Enter. While it works, keep typing: Enter redirects, Tab queues. ? shows every key.";
    lines.push(Line::from(Span::styled(hint, Style::default().fg(app.theme.dim))));
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), area);
}
