//! Pure render functions: each takes `&App` and a `Rect` and draws, nothing else.

mod overlay;
mod side;
mod status;
mod transcript;

#[cfg(test)]
pub(crate) use overlay::help_lines;
pub(crate) use transcript::welcome_height;

use ratatui::layout::{Alignment, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

use super::app::{App, Layer};
use super::wrap::truncate_spans;

use super::layout::PENDING_MAX_LINES;
pub(crate) use super::layout::{MIN_HEIGHT, MIN_WIDTH};

/// Draw a whole frame from `app` (call `App::prepare` with the same area first).
pub(crate) fn draw(frame: &mut Frame<'_>, app: &App) {
    let area = frame.area();
    let areas = super::layout::layout(area, &app.layout_facts());
    if areas.too_small {
        draw_too_small(frame, area, app);
        return;
    }
    // Bottom-up: the layout, then each layer over it, so the one with the keys is on top.
    let layers = app.layers();
    let log_open = layers.contains(&Layer::LogView);
    // Below 80 columns a focused pane is drawn where the transcript goes.
    let pane_over_transcript = !areas.side && (areas.jobs.is_some() || areas.tools.is_some());
    if !log_open {
        if !pane_over_transcript {
            transcript::draw(frame, areas.transcript, app);
        }
        if let Some(tools) = areas.tools {
            side::draw_tools(frame, tools, app);
        }
        if let Some(jobs) = areas.jobs {
            side::draw_jobs(frame, jobs, app);
        }
    }
    draw_pending(frame, areas.pending, app);
    draw_input(frame, areas.input, app);
    status::draw(frame, areas.status, app);
    if !log_open {
        draw_completions(frame, areas.main, areas.transcript, areas.input, app);
    }
    for layer in layers.iter().rev() {
        match layer {
            Layer::LogView => {
                if let Some(view) = &app.log_view {
                    overlay::draw_log(frame, areas.main, app, view);
                }
            }
            Layer::Modal => overlay::draw_modal(frame, area, app),
            Layer::Approval => overlay::draw_approval(frame, area, app),
            Layer::Pane | Layer::Input => {}
        }
    }
}

fn draw_too_small(frame: &mut Frame<'_>, area: Rect, app: &App) {
    // Short lines, so that it fits even a 20×6 terminal.
    let dim = Style::default().fg(app.theme.dim);
    let text = vec![
        Line::from(Span::styled("terminal too small", Style::default().add_modifier(Modifier::BOLD))),
        Line::from(Span::styled(format!("need {MIN_WIDTH}×{MIN_HEIGHT}"), dim)),
        Line::from(Span::styled(format!("now {}×{}", area.width, area.height), dim)),
    ];
    let y = area.y + area.height.saturating_sub(3) / 2;
    let rect = Rect::new(area.x, y, area.width, area.height.min(3));
    frame.render_widget(Paragraph::new(text).alignment(Alignment::Center), rect);
}

fn draw_pending(frame: &mut Frame<'_>, area: Rect, app: &App) {
    if area.height == 0 {
        return;
    }
    let dim = Style::default().fg(app.theme.dim).add_modifier(Modifier::ITALIC);
    let width = usize::from(area.width);
    let waiting = app.waiting();
    let mut lines: Vec<Line<'static>> = waiting
        .iter()
        .take(PENDING_MAX_LINES)
        .map(|(label, p)| {
            let first = crate::text::sanitize_for_display(p).lines().next().unwrap_or("").to_string();
            // How it was sent says when it goes: a queued message waits for the next turn,
            // a steered one for the running tools' results.
            let steered = app.sent_modes.iter().rev().find(|(text, _)| text == p).map(|(_, mode)| *mode)
                == Some(crate::protocol::BusyMode::Steer);
            let marker = match *label {
                "pending" if steered => "  ↳ after the running tools: ".to_string(),
                "queued" => "  ⏭ queued for the next turn: ".to_string(),
                _ => format!("  ◌ {label}: "),
            };
            truncate_spans(vec![Span::styled(marker, dim), Span::styled(first, dim)], width)
        })
        .collect();
    if waiting.len() > PENDING_MAX_LINES {
        lines.push(Line::from(Span::styled(format!("     +{} more", waiting.len() - PENDING_MAX_LINES), dim)));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// The slash commands matching the input, in a box just above it, within the transcript's
/// columns (it never covers the side column's border).
fn draw_completions(frame: &mut Frame<'_>, main: Rect, transcript: Rect, input: Rect, app: &App) {
    let matches = app.completions();
    if matches.is_empty() || main.height < 3 {
        return;
    }
    let rows = matches.len().min(super::app::POPUP_MAX_ROWS).min(usize::from(main.height - 2));
    let selected = app.completion_selected();
    let first = (selected + 1).saturating_sub(rows);
    let usage_w = matches.iter().map(|c| super::wrap::str_width(c.usage)).max().unwrap_or(0);
    let help_w = matches.iter().map(|c| super::wrap::str_width(c.help)).max().unwrap_or(0);
    let room = if main.right() > transcript.right() + 1 { transcript.right() + 1 - input.x } else { input.width };
    let width = u16::try_from(usage_w + help_w + 6).unwrap_or(u16::MAX).min(input.width).min(room.max(20));
    let height = u16::try_from(rows).unwrap_or(1) + 2;
    let rect = Rect::new(input.x, input.y.saturating_sub(height).max(main.y), width, height);
    let inner_w = usize::from(width.saturating_sub(2));
    let dim = Style::default().fg(app.theme.dim);
    let lines: Vec<Line<'static>> = matches
        .iter()
        .enumerate()
        .skip(first)
        .take(rows)
        .map(|(i, c)| {
            let pad = " ".repeat(usage_w - super::wrap::str_width(c.usage));
            let spans = vec![
                Span::styled(format!(" {}{pad}  ", c.usage), Style::default().add_modifier(Modifier::BOLD)),
                Span::styled(c.help.to_string(), dim),
            ];
            let mut line = truncate_spans(spans, inner_w);
            if i == selected {
                line = line.style(Style::default().add_modifier(Modifier::REVERSED));
            }
            line
        })
        .collect();
    let tab = app.keymap.hint(super::keymap::Context::Input, super::keymap::Action::Complete);
    let esc = app.keymap.hint(super::keymap::Context::Input, super::keymap::Action::Interrupt);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(app.theme.border_focus))
        .title(Span::styled(format!(" {tab} complete · ↑↓ choose · {esc} close "), dim));
    frame.render_widget(ratatui::widgets::Clear, rect);
    frame.render_widget(Paragraph::new(lines).block(block), rect);
}

fn draw_input(frame: &mut Frame<'_>, area: Rect, app: &App) {
    let typing = app.top_layer() == Layer::Input;
    let border = if typing { app.theme.border_focus } else { app.theme.border };
    let title = if app.busy() {
        let enter = app.keymap.hint(super::keymap::Context::Input, super::keymap::Action::Submit);
        let queue = app.keymap.hint(super::keymap::Context::Input, super::keymap::Action::Queue);
        format!(" busy · {enter} {} · {queue} queue ", app.busy_mode().as_str())
    } else {
        " message ".to_string()
    };
    // A column of padding keeps typed text off the border.
    let mut block = Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(border))
        .padding(ratatui::widgets::Padding::horizontal(1))
        .title(Span::styled(title, Style::default().fg(app.theme.dim)));
    if let Some(hint) = &app.input_hint {
        block = block.title_bottom(Span::styled(format!(" {hint} "), Style::default().fg(app.theme.notice_warn)));
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);
    frame.render_widget(&app.input, inner);
}
