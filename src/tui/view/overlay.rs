//! What draws over the layout: the log view, help, approval, and yes/no questions.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use crate::protocol::commands::COMMANDS;
use crate::tui::app::{App, LogSource, LogView, Modal};
use crate::tui::keymap::{Action, Context};
use crate::tui::transcript::format_duration_ms;
use crate::tui::wrap::{str_width, wrap_line, RLine};

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width.saturating_sub(2)).max(1);
    let h = height.min(area.height.saturating_sub(2)).max(1);
    Rect::new(area.x + (area.width - w) / 2, area.y + (area.height - h) / 2, w, h)
}

fn modal_block(app: &App, title: String) -> Block<'static> {
    Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(app.theme.modal_border))
        .title(Span::styled(title, Style::default().add_modifier(Modifier::BOLD)))
}

fn keys_of(app: &App, context: Context, action: Action) -> String {
    app.keymap.keys(context, action).iter().map(|k| k.to_string()).collect::<Vec<_>>().join("/")
}

pub fn draw_modals(frame: &mut Frame<'_>, area: Rect, app: &App) {
    match &app.modal {
        Some(Modal::Help { scroll }) => draw_help(frame, area, app, *scroll),
        Some(Modal::QuitConfirm) => {
            let jobs = app.running_jobs();
            let mut what = Vec::new();
            if jobs > 0 {
                what.push(format!("{jobs} background job{} running", if jobs == 1 { " is" } else { "s are" }));
            }
            if app.busy {
                what.push("a turn is in progress".to_string());
            }
            let question = format!(
                "{}. Kill {} and quit?",
                capitalise(&what.join(" and ")),
                if jobs > 0 { "the jobs" } else { "it" }
            );
            let answer = format!(
                "[{}] kill and quit (default)   [{}] cancel",
                keys_of(app, Context::Confirm, Action::Yes),
                keys_of(app, Context::Confirm, Action::No)
            );
            draw_question(frame, area, app, " Quit? ".into(), vec![question, String::new(), answer]);
        }
        Some(Modal::KillConfirm { id }) => {
            let command =
                app.jobs.iter().find(|j| &j.info.id == id).map(|j| j.info.command.clone()).unwrap_or_default();
            let answer = format!(
                "[{}] kill   [{}] cancel",
                keys_of(app, Context::Confirm, Action::Yes),
                keys_of(app, Context::Confirm, Action::No)
            );
            draw_question(
                frame,
                area,
                app,
                format!(" Kill {id}? "),
                vec![format!("$ {command}"), String::new(), answer],
            );
        }
        Some(Modal::WritePrompt { id, text }) => {
            let lines = vec![
                format!("A line for {id}'s stdin (a newline is added):"),
                format!("> {text}▏"),
                String::new(),
                "Enter send · Esc cancel".to_string(),
            ];
            draw_question(frame, area, app, format!(" Write to {id} "), lines);
        }
        Some(Modal::LogSearch { text }) => {
            let lines = vec![format!("/{text}▏"), String::new(), "Enter search · Esc cancel".to_string()];
            draw_question(frame, area, app, " Search the log ".to_string(), lines);
        }
        None => {}
    }
    if let Some(approval) = app.approvals.front() {
        draw_approval(frame, area, app, approval, app.approvals.len());
    }
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn draw_question(frame: &mut Frame<'_>, area: Rect, app: &App, title: String, lines: Vec<String>) {
    let inner_w = lines.iter().map(|l| str_width(l)).max().unwrap_or(20).max(str_width(&title)) as u16 + 4;
    let width = inner_w.clamp(30, 90);
    let wrapped: usize =
        lines.iter().map(|l| wrap_line(&RLine::plain(l.clone(), Style::default()), width - 4).len()).sum();
    let rect = centered(area, width, u16::try_from(wrapped).unwrap_or(10) + 2);
    frame.render_widget(Clear, rect);
    let block = modal_block(app, title);
    let text: Vec<Line<'static>> = lines.into_iter().map(Line::raw).collect();
    frame.render_widget(
        Paragraph::new(text).block(block.padding(ratatui::widgets::Padding::horizontal(1))).wrap(Wrap { trim: false }),
        rect,
    );
}

fn draw_approval(
    frame: &mut Frame<'_>,
    area: Rect,
    app: &App,
    approval: &crate::tui::app::PendingApproval,
    queued: usize,
) {
    let width = area.width.saturating_sub(4).min(90);
    let inner_w = width.saturating_sub(4);
    let command_style = Style::default().fg(app.theme.notice_warn).add_modifier(Modifier::BOLD);
    let mut lines: Vec<Line<'static>> = vec![Line::raw("The agent wants to run:")];
    for l in approval.command.lines() {
        lines.extend(wrap_line(&RLine::plain(format!("  {l}"), command_style).with_hang(2), inner_w));
    }
    lines.push(Line::default());
    lines.extend(wrap_line(&RLine::plain(format!("Why it asks: {}", approval.reason), Style::default()), inner_w));
    lines.push(Line::default());
    let choice = |action: Action, label: &str| -> Vec<Span<'static>> {
        vec![
            Span::styled(
                format!("[{}]", keys_of(app, Context::Approval, action)),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!(" {label}  ")),
        ]
    };
    let mut spans = Vec::new();
    spans.extend(choice(Action::Once, "once"));
    spans.extend(choice(Action::Session, "session"));
    spans.extend(choice(Action::Always, "always"));
    spans.extend(choice(Action::Deny, "deny"));
    spans.extend(choice(Action::DenyAndStop, "deny & stop"));
    lines.extend(wrap_line(&RLine::new(spans), inner_w));
    let title = if queued > 1 { format!(" Approval needed (1 of {queued}) ") } else { " Approval needed ".to_string() };
    let rect = centered(area, width, u16::try_from(lines.len()).unwrap_or(10) + 2);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).block(modal_block(app, title).padding(ratatui::widgets::Padding::horizontal(1))),
        rect,
    );
}

/// Every key from the keymap and every slash command.
pub fn help_lines(app: &App) -> Vec<Line<'static>> {
    let heading = Style::default().fg(app.theme.heading).add_modifier(Modifier::BOLD);
    let key_style = Style::default().add_modifier(Modifier::BOLD);
    let dim = Style::default().fg(app.theme.dim);
    let key_text = |keys: &[crate::tui::keymap::KeyChord]| -> String {
        let text = keys.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(" / ");
        if text.is_empty() {
            "(unbound)".to_string()
        } else {
            text
        }
    };
    let col = app.keymap.bindings().iter().map(|b| str_width(&key_text(&b.keys))).max().unwrap_or(10) + 2;
    let mut lines = Vec::new();
    for context in Context::ALL {
        let bindings: Vec<_> = app.keymap.bindings().iter().filter(|b| b.context == context).collect();
        if bindings.is_empty() {
            continue;
        }
        if !lines.is_empty() {
            lines.push(Line::default());
        }
        lines.push(Line::from(Span::styled(context.title().to_string(), heading)));
        for b in bindings {
            let keys = key_text(&b.keys);
            let pad = col.saturating_sub(str_width(&keys));
            lines.push(Line::from(vec![
                Span::styled(format!("  {keys}{}", " ".repeat(pad)), key_style),
                Span::styled(b.help, dim),
            ]));
        }
    }
    lines.push(Line::default());
    lines.push(Line::from(Span::styled("Slash commands", heading)));
    for c in COMMANDS {
        lines.push(Line::from(vec![Span::styled(format!("  {:<44}", c.usage), key_style), Span::styled(c.help, dim)]));
    }
    lines
}

fn draw_help(frame: &mut Frame<'_>, area: Rect, app: &App, scroll: usize) {
    let rect = centered(area, 110, area.height.saturating_sub(2));
    frame.render_widget(Clear, rect);
    let lines = help_lines(app);
    let rows = usize::from(rect.height.saturating_sub(2));
    let scroll = scroll.min(lines.len().saturating_sub(rows));
    let footer = format!(" ↑↓ PgUp PgDn scroll · {} close ", keys_of(app, Context::Help, Action::Close));
    let block = modal_block(app, " Keys and commands ".into())
        .title_bottom(Span::styled(footer, Style::default().fg(app.theme.dim)))
        .padding(ratatui::widgets::Padding::horizontal(1));
    let shown: Vec<Line<'static>> = lines.into_iter().skip(scroll).take(rows).collect();
    frame.render_widget(Paragraph::new(shown).block(block), rect);
}

pub fn draw_log(frame: &mut Frame<'_>, area: Rect, app: &App, view: &LogView) {
    let dim = Style::default().fg(app.theme.dim);
    let title = match &view.source {
        LogSource::Job(id) => match app.jobs.iter().find(|j| &j.info.id == id) {
            Some(job) => format!(
                " {id} · {} · {} · $ {} ",
                job.info.status.label(),
                format_duration_ms(job.runtime_ms(app.wall_ms) / 1000 * 1000),
                job.info.command.replace('\n', " ")
            ),
            None => format!(" {id} "),
        },
        LogSource::Tool(call_id) => match app.tools.iter().find(|t| &t.call_id == call_id) {
            Some(tool) => format!(" {} · {} · running ", tool.name, tool.summary),
            None => " tool output (finished) ".to_string(),
        },
    };
    let shown_lines = view.lines.len() as u64;
    let range = if shown_lines == 0 {
        if view.inflight {
            "loading…".to_string()
        } else {
            "no output".to_string()
        }
    } else {
        let first = view.first_line.max(1);
        format!("lines {}–{} of {}", first, first + shown_lines - 1, view.total_lines.max(shown_lines))
    };
    let follow = match &view.search {
        Some(q) if !q.is_empty() => format!("/{q} (n older · N newer)"),
        _ => (if view.follow { "follow on" } else { "follow off" }).to_string(),
    };
    let footer = format!(
        " {range} · {follow} · {} follow · {} kill · {} poll · {} write · {} close ",
        keys_of(app, Context::Log, Action::Follow),
        keys_of(app, Context::Log, Action::Kill),
        keys_of(app, Context::Log, Action::Poll),
        keys_of(app, Context::Log, Action::Write),
        keys_of(app, Context::Log, Action::Close),
    );
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(app.theme.border_focus))
        .title(Span::styled(title, Style::default().add_modifier(Modifier::BOLD)))
        .title_bottom(Span::styled(footer, dim));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if inner.width == 0 || inner.height == 0 {
        return;
    }
    // Walk up from the bottom line, wrapping only what is shown.
    let rows = usize::from(inner.height);
    let end = view.lines.len().saturating_sub(if view.follow { 0 } else { view.scroll });
    let mut shown: Vec<Line<'static>> = Vec::with_capacity(rows);
    for line in view.lines[..end].iter().rev() {
        let wrapped = wrap_line(&RLine::new(line.spans.clone()), inner.width);
        for row in wrapped.into_iter().rev() {
            shown.push(row);
            if shown.len() == rows {
                break;
            }
        }
        if shown.len() == rows {
            break;
        }
    }
    shown.reverse();
    frame.render_widget(Paragraph::new(shown), inner);
}
