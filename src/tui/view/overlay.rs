//! What draws over the layout: the log view, help, approval, and yes/no questions.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use crate::protocol::commands::COMMANDS;
use crate::protocol::NoticeLevel;
use crate::tui::app::{highlight, hit_style, App, LogSource, LogView, Modal, LOG_MESSAGE_FOR};
use crate::tui::keymap::{Action, Context};
use crate::tui::transcript::format_duration_ms;
use crate::tui::wrap::{str_width, truncate_spans, wrap_line, RLine};

mod rewind;

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

/// The modal (help, a confirmation, a prompt), if one is open.
pub(crate) fn draw_modal(frame: &mut Frame<'_>, area: Rect, app: &App) {
    match &app.modal {
        Some(Modal::Help { scroll }) => draw_help(frame, area, app, *scroll),
        Some(Modal::QuitConfirm) => {
            let jobs = app.running_jobs();
            let mut what = Vec::new();
            if jobs > 0 {
                what.push(format!("{jobs} background job{} running", if jobs == 1 { " is" } else { "s are" }));
            }
            if app.busy() {
                what.push("a turn is in progress".to_string());
            }
            let question = format!(
                "{}. Kill {} and quit?",
                capitalise(&what.join(" and ")),
                if jobs > 0 { "the jobs" } else { "it" }
            );
            let mut answer = format!("[{}] kill and quit   ", keys_of(app, Context::Confirm, Action::Yes));
            if jobs > 0 {
                answer.push_str(&format!("[{}] keep them running   ", keys_of(app, Context::Confirm, Action::Keep)));
            }
            answer.push_str(&format!("[{}] cancel (default)", keys_of(app, Context::Confirm, Action::No)));
            draw_question(frame, area, app, " Quit? ".into(), vec![question, String::new(), answer]);
        }
        Some(Modal::KillConfirm { id }) => {
            let command =
                app.jobs.iter().find(|j| &j.info.id == id).map(|j| j.info.command.clone()).unwrap_or_default();
            let answer = format!(
                "[{}] kill   [{}] cancel (default)",
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
        Some(Modal::WatchPrompt { id, text }) => {
            let watching = app.jobs.iter().find(|j| &j.info.id == id).map(|j| j.watches.clone()).unwrap_or_default();
            let mut lines = vec![
                format!("A regex: each line of {id}'s output that matches is shown here and rings (ui.notify)."),
                format!("/{text}▏/"),
                String::new(),
            ];
            if !watching.is_empty() {
                let list: Vec<String> = watching.iter().map(|p| format!("/{p}/")).collect();
                lines.push(format!("You watch {}; an empty pattern stops them.", list.join(" ")));
            }
            lines.push("Enter watch · Esc cancel".to_string());
            draw_question(frame, area, app, format!(" Watch {id} "), lines);
        }
        Some(Modal::LogSearch { text }) => {
            let lines = vec![format!("/{text}▏"), String::new(), "Enter search · Esc cancel".to_string()];
            draw_question(frame, area, app, " Search the log ".to_string(), lines);
        }
        Some(Modal::Sessions { query, sessions, selected }) => {
            draw_sessions(frame, area, app, query, sessions, *selected)
        }
        Some(Modal::Rewind(picker)) => rewind::draw_picker(frame, area, app, picker),
        Some(Modal::RewindConfirm(preview)) => rewind::draw_confirm(frame, area, app, preview),
        None => {}
    }
}

/// The oldest approval question, if one waits.
pub(crate) fn draw_approval(frame: &mut Frame<'_>, area: Rect, app: &App) {
    if let Some(approval) = app.approvals.front() {
        draw_approval_box(frame, area, app, approval, app.approvals.len());
    }
}

/// How long ago, in the largest unit that fits (`3h ago`).
fn ago(now_ms: u64, then_ms: i64) -> String {
    let s = now_ms.saturating_sub(u64::try_from(then_ms).unwrap_or(0)) / 1000;
    match s {
        0..=59 => "just now".into(),
        60..=3599 => format!("{}m ago", s / 60),
        3600..=86_399 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// `/resume` with several matches: one row per session, the selected one marked.
fn draw_sessions(
    frame: &mut Frame<'_>,
    area: Rect,
    app: &App,
    query: &str,
    sessions: &[crate::protocol::SessionInfo],
    selected: usize,
) {
    let width = area.width.saturating_sub(4).min(100);
    let inner = usize::from(width.saturating_sub(4));
    let dim = Style::default().fg(app.theme.dim);
    let heading = if query.is_empty() {
        "Recent sessions:".to_string()
    } else {
        format!("{} sessions match '{query}':", sessions.len())
    };
    let mut lines: Vec<Line<'static>> = vec![Line::raw(heading), Line::default()];
    // Rows that fit: the selection always stays in view.
    let room = usize::from(area.height.saturating_sub(10)).max(1);
    let first = selected.saturating_sub(room.saturating_sub(1));
    for (i, s) in sessions.iter().enumerate().skip(first).take(room) {
        let mark = if i == selected { "▸ " } else { "  " };
        let name = s.title.clone().unwrap_or_else(|| {
            if s.first_line.is_empty() {
                "(untitled)".to_string()
            } else {
                format!("“{}”", s.first_line)
            }
        });
        let facts = format!("  {} · {} msgs · {}", s.id, s.message_count, ago(app.wall_ms, s.updated_at_ms));
        let style = if i == selected { Style::default().add_modifier(Modifier::REVERSED) } else { Style::default() };
        let spans = vec![Span::styled(format!("{mark}{name}"), style), Span::styled(facts, dim)];
        lines.push(truncate_spans(spans, inner));
    }
    if first + room < sessions.len() {
        lines.push(Line::styled(format!("  ↓ {} more", sessions.len() - first - room), dim));
    }
    lines.push(Line::default());
    let keys = format!(
        "[{}/{}] choose   [{}] resume   [{}] cancel",
        keys_of(app, Context::Picker, Action::Up),
        keys_of(app, Context::Picker, Action::Down),
        keys_of(app, Context::Picker, Action::Open),
        keys_of(app, Context::Picker, Action::Close)
    );
    lines.extend(wrap_line(&RLine::plain(keys, Style::default()), width.saturating_sub(4)));
    let rect = centered(area, width, u16::try_from(lines.len()).unwrap_or(10) + 2);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).block(
            modal_block(app, " Resume which session? ".into()).padding(ratatui::widgets::Padding::horizontal(1)),
        ),
        rect,
    );
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

fn draw_approval_box(
    frame: &mut Frame<'_>,
    area: Rect,
    app: &App,
    approval: &crate::tui::app::PendingApproval,
    queued: usize,
) {
    use crate::protocol::AskGround;
    let width = area.width.saturating_sub(4).min(100);
    let inner_w = width.saturating_sub(4);
    let warn = Style::default().fg(app.theme.notice_warn);
    let command_style = warn.add_modifier(Modifier::BOLD);
    let dim = Style::default().fg(app.theme.dim);
    let has = |g: AskGround| approval.grounds.contains(&g);
    let network = has(AskGround::Network);
    let who = approval.from.as_deref().unwrap_or("The agent");
    let heading = if network {
        match &approval.from {
            Some(agent) => format!("A command of {agent} wants to reach a host (through talaria's proxy):"),
            None => "A command wants to reach a host (through talaria's proxy):".to_string(),
        }
    } else if has(AskGround::UntrustedTool) {
        format!("{who} wants to call:")
    } else if has(AskGround::OutsideRoots) || has(AskGround::ProtectedPath) {
        format!("{who} wants to:")
    } else {
        format!("{who} wants to run:")
    };
    // What will run, whole and wrapped; a disguise shows as \x1b or <U+202E>.
    let mut command: Vec<Line<'static>> = Vec::new();
    for (i, l) in approval.command.lines().enumerate() {
        // A new line of the command is marked; a wrapped one is only indented.
        let lead = if network {
            "  "
        } else if i == 0 {
            "  $ "
        } else {
            "  ↵ "
        };
        command.extend(wrap_line(&RLine::plain(format!("{lead}{l}"), command_style).with_hang(4), inner_w));
    }
    let mut why: Vec<Line<'static>> = vec![Line::raw("Why it asks:")];
    let bullet =
        |text: String, style: Style| wrap_line(&RLine::plain(format!("  • {text}"), style).with_hang(4), inner_w);
    for g in &approval.grounds {
        let text = match g {
            AskGround::LooksDangerous | AskGround::ProtectedPath | AskGround::UntrustedTool => {
                format!("{}: {}", g.explain(), approval.reason)
            }
            _ => g.explain().to_string(),
        };
        why.extend(bullet(text, Style::default()));
    }
    if approval.grounds.is_empty() {
        why.extend(bullet(approval.reason.clone(), Style::default()));
    }
    if approval.hidden {
        why.extend(bullet(
            "it contains hidden characters (control, bidi or zero-width), shown above as \\x.. or <U+..>".into(),
            warn,
        ));
    }
    let choices = if network {
        [
            (Action::Once, "once", "let this connection (and those waiting with it) through"),
            (Action::Session, "session", "allow this host until Talaria quits"),
            (Action::Always, "always", "always allow this host (saved to sandbox.network_allow)"),
            (Action::Deny, "deny", "refuse it: the command gets a 403 and the model is told"),
            (Action::DenyAndStop, "deny & stop", "refuse it and stop the turn"),
        ]
    } else {
        [
            (Action::Once, "once", "run it this time only"),
            (Action::Session, "session", "allow this kind of command until Talaria quits"),
            (Action::Always, "always", "always allow this exact command (saved to approvals.allowlist)"),
            (Action::Deny, "deny", "do not run it; the model is told"),
            (Action::DenyAndStop, "deny & stop", "deny it and stop the turn"),
        ]
    };
    let labels: Vec<String> =
        choices.iter().map(|(a, name, _)| format!("[{}] {name}", keys_of(app, Context::Approval, *a))).collect();
    let col = labels.iter().map(|l| str_width(l)).max().unwrap_or(10);
    let mut keys: Vec<Line<'static>> = Vec::new();
    for (label, (_, _, what)) in labels.iter().zip(choices) {
        let pad = " ".repeat(col - str_width(label) + 2);
        let line = RLine::new(vec![
            Span::styled(format!("  {label}"), Style::default().add_modifier(Modifier::BOLD)),
            Span::styled(format!("{pad}{what}"), dim),
        ])
        .with_hang(u16::try_from(col + 4).unwrap_or(4));
        keys.extend(wrap_line(&line, inner_w));
    }
    // The command gets what room is left; past that, say how much is not shown.
    let fixed = 1 + 1 + why.len() + 1 + keys.len();
    let room = usize::from(area.height.saturating_sub(2 + 2)).saturating_sub(fixed).max(2);
    if command.len() > room {
        let hidden_lines = command.len() - (room - 1);
        command.truncate(room - 1);
        command.push(Line::styled(
            format!("    … {hidden_lines} more lines not shown: deny unless you know the rest"),
            warn,
        ));
    }
    let mut lines = vec![Line::raw(heading)];
    lines.extend(command);
    lines.push(Line::default());
    lines.extend(why);
    lines.push(Line::default());
    lines.extend(keys);
    let title = if queued > 1 { format!(" Approval needed (1 of {queued}) ") } else { " Approval needed ".to_string() };
    let rect = centered(area, width, u16::try_from(lines.len()).unwrap_or(10) + 2);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).block(modal_block(app, title).padding(ratatui::widgets::Padding::horizontal(1))),
        rect,
    );
}

/// Help text for what is typed into the input rather than bound to a key.
const TYPED_HELP: &[(&str, &str)] = &[
    ("!cmd", "run a shell command yourself; its output shows here and is context for your next message"),
    ("@path", "attach a file to the message (Tab completes the path)"),
    ("Esc Esc", "on an empty input while idle: /rewind, to go back to before a message (files and/or conversation)"),
];

/// One help entry: `key` in a column of `col`, then its description, wrapped to `width`;
/// when the column leaves too little room, the description goes on its own line.
fn help_entry(key: &str, help: &str, col: usize, width: u16, key_style: Style, dim: Style) -> Vec<Line<'static>> {
    let width_us = usize::from(width);
    if width_us >= col + 4 + 20 && str_width(key) <= col {
        let pad = col + 2 - str_width(key);
        let line = RLine::new(vec![
            Span::styled(format!("  {key}{}", " ".repeat(pad)), key_style),
            Span::styled(help.to_string(), dim),
        ])
        .with_hang(u16::try_from(col + 4).unwrap_or(0));
        return wrap_line(&line, width);
    }
    let mut out = wrap_line(&RLine::plain(format!("  {key}"), key_style).with_hang(4), width);
    out.extend(wrap_line(&RLine::plain(format!("    {help}"), dim).with_hang(4), width));
    out
}

/// Every key from the keymap, what can be typed, and every slash command, wrapped to `width`.
pub(crate) fn help_lines(app: &App, width: u16) -> Vec<Line<'static>> {
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
    let widest = app.keymap.bindings().iter().map(|b| str_width(&key_text(&b.keys))).max().unwrap_or(10);
    let col = widest.min(usize::from(width) / 3).max(6);
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
            lines.extend(help_entry(&key_text(&b.keys), b.help, col, width, key_style, dim));
        }
    }
    lines.push(Line::default());
    lines.push(Line::from(Span::styled("Typed into the message", heading)));
    for (key, help) in TYPED_HELP {
        lines.extend(help_entry(key, help, col, width, key_style, dim));
    }
    lines.push(Line::default());
    lines.push(Line::from(Span::styled("Slash commands", heading)));
    let usage_col = COMMANDS.iter().map(|c| str_width(c.usage)).max().unwrap_or(20).min(usize::from(width) / 2);
    for c in COMMANDS {
        lines.extend(help_entry(c.usage, c.help, usage_col, width, key_style, dim));
    }
    lines
}

/// The help's box in a frame of `area`, and the width of its text.
pub(crate) fn help_rect(area: Rect) -> (Rect, u16) {
    let rect = centered(area, 110, area.height.saturating_sub(2));
    (rect, rect.width.saturating_sub(4).max(1))
}

fn draw_help(frame: &mut Frame<'_>, area: Rect, app: &App, scroll: usize) {
    let (rect, width) = help_rect(area);
    frame.render_widget(Clear, rect);
    let lines = help_lines(app, width);
    let rows = usize::from(rect.height.saturating_sub(2));
    let max = lines.len().saturating_sub(rows);
    app.help_max_scroll.set(max);
    let scroll = scroll.min(max);
    let key = |action: Action| app.keymap.hint(Context::Help, action);
    let footer =
        format!(" ↑↓ PgUp PgDn {}/{} scroll · {} close ", key(Action::Top), key(Action::Follow), key(Action::Close));
    let footer = if str_width(&footer) + 2 > usize::from(rect.width) {
        format!(" ↑↓ {}/{} · {} close ", key(Action::Top), key(Action::Follow), key(Action::Close))
    } else {
        footer
    };
    let block = modal_block(app, " Keys and commands ".into())
        .title_bottom(Span::styled(footer, Style::default().fg(app.theme.dim)))
        .padding(ratatui::widgets::Padding::horizontal(1));
    let shown: Vec<Line<'static>> = lines.into_iter().skip(scroll).take(rows).collect();
    frame.render_widget(Paragraph::new(shown).block(block), rect);
}

/// The keys of the log view that apply to what it shows, in the footer.
fn log_keys(app: &App, view: &LogView) -> Vec<String> {
    let key = |action: Action| keys_of(app, Context::Log, action);
    let mut keys = Vec::new();
    let job = match &view.source {
        LogSource::Job(id) => app.jobs.iter().find(|j| &j.info.id == id),
        LogSource::Tool(_) | LogSource::Diff(_) => None,
    };
    let running = match &view.source {
        LogSource::Job(_) => job.is_some_and(|j| j.info.status.is_running()),
        LogSource::Tool(call_id) => app.tools.iter().any(|t| &t.call_id == call_id),
        LogSource::Diff(_) => false,
    };
    if view.search.as_deref().is_some_and(|q| !q.is_empty()) {
        keys.push(format!("{}/{} next/prev", key(Action::NextMatch), key(Action::PrevMatch)));
    } else {
        keys.push(format!("{} search", key(Action::Search)));
    }
    if !view.follow {
        keys.push(format!("{} {}", key(Action::Follow), if running { "follow" } else { "end" }));
    }
    if let Some(job) = job {
        keys.push(format!("{} poll", key(Action::Poll)));
        if job.info.status.is_running() {
            keys.push(format!("{} kill", key(Action::Kill)));
            keys.push(format!("{} watch", key(Action::Watch)));
            if job.info.has_stdin {
                keys.push(format!("{} write", key(Action::Write)));
            }
        }
    }
    keys.push(format!("{} close", key(Action::Close)));
    keys
}

/// The log view's title, and whether what it shows is still running.
fn log_title(app: &App, view: &LogView) -> (String, bool) {
    match &view.source {
        LogSource::Job(id) => match app.jobs.iter().find(|j| &j.info.id == id) {
            // A sub-agent's log is its conversation (`agent_log`), not a command's output.
            Some(job) if job.info.agent.is_some() => {
                let agent = job.info.agent.as_deref().cloned().unwrap_or_default();
                let name = id.strip_prefix("job_").map_or_else(|| id.clone(), |n| format!("agent_{n}"));
                (
                    format!(
                        " {name} · {} · {} · sub-agent {} · session {} ",
                        agent.state.as_str(),
                        format_duration_ms(job.shown_runtime_ms(app.wall_ms)),
                        agent.short_task(40),
                        agent.session
                    ),
                    job.info.status.is_running(),
                )
            }
            Some(job) => (
                format!(
                    " {id} · {} · {} · $ {} ",
                    job.info.status.label(),
                    format_duration_ms(job.shown_runtime_ms(app.wall_ms)),
                    job.info.command.replace('\n', " ")
                ),
                job.info.status.is_running(),
            ),
            None => (format!(" {id} "), false),
        },
        LogSource::Tool(call_id) => match app.tools.iter().find(|t| &t.call_id == call_id) {
            Some(tool) => (format!(" {} · {} · running ", tool.name, tool.summary), true),
            None => (" tool output (finished) ".to_string(), false),
        },
        LogSource::Diff(title) => (format!(" /diff · {} ", title.replace('\n', " ")), false),
    }
}

pub(crate) fn draw_log(frame: &mut Frame<'_>, area: Rect, app: &App, view: &LogView) {
    let dim = Style::default().fg(app.theme.dim);
    let (title, running) = log_title(app, view);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(app.theme.border_focus))
        .title(Span::styled(title, Style::default().add_modifier(Modifier::BOLD)));
    let inner = block.inner(area);
    let rows = usize::from(inner.height);
    // What is on screen, in the log's own line numbers.
    let mut facts = Vec::new();
    if view.lines.is_empty() {
        facts.push((if view.inflight { "loading…" } else { "no output" }).to_string());
    } else {
        let (first, _) = view.window(inner.width, rows);
        let last = view.last_shown(inner.width, rows);
        let base = view.first_line.max(1);
        let total = view.total_lines.max(base + view.lines.len() as u64 - 1);
        match view.redrawn {
            // Redraws collapsed: the numbers are the log's lines as written, not rows here.
            Some((from, to)) => facts.push(format!("log lines {from}–{to} of {total} redrawn as {}", view.lines.len())),
            None => facts.push(format!("lines {}–{} of {total}", base + first as u64, base + last as u64)),
        }
    }
    if let LogSource::Job(id) = &view.source {
        if let Some(job) = app.jobs.iter().find(|j| &j.info.id == id).filter(|j| !j.watches.is_empty()) {
            let list: Vec<String> = job.watches.iter().map(|p| format!("/{p}/")).collect();
            facts.push(format!("watching {}", list.join(" ")));
        }
    }
    if let Some(label) = view.match_label() {
        facts.push(label);
    } else if running {
        facts.push((if view.follow { "following" } else { "not following" }).to_string());
    }
    // The answer to the last key (poll, kill, a search that found nothing) ends the footer
    // for a few seconds, in its own colour: it is not a line of the job's output.
    let message = view.message.as_ref().filter(|m| app.now.saturating_duration_since(m.at) < LOG_MESSAGE_FOR);
    // Keys that do not fit are dropped from the end, but "close" stays. While a message
    // shows, the footer is it and what is watched or searched; the rest is back after it.
    let mut keys = log_keys(app, view);
    if message.is_some() {
        facts.retain(|f| f.starts_with("watching ") || f.starts_with('/'));
        keys.clear();
    }
    let room = usize::from(area.width.saturating_sub(4));
    let width_of = |facts: &[String], keys: &[String]| {
        str_width(&facts.iter().chain(keys).cloned().collect::<Vec<_>>().join(" · ")) + 2
    };
    while keys.len() > 1 && width_of(&facts, &keys) > room {
        keys.remove(keys.len() - 2);
    }
    facts.extend(keys);
    let footer = format!(" {} ", facts.join(" · "));
    let used = if facts.is_empty() { 0 } else { str_width(&footer) + 1 };
    let mut block = block;
    if !facts.is_empty() {
        block = block.title_bottom(Line::from(Span::styled(footer, dim)));
    }
    if let Some(m) = message {
        let color = match m.level {
            NoticeLevel::Info => app.theme.notice_info,
            NoticeLevel::Warn => app.theme.notice_warn,
            NoticeLevel::Error => app.theme.notice_error,
        };
        let text =
            truncate_spans(vec![Span::raw(format!(" {} ", m.text.replace('\n', " ")))], room.saturating_sub(used));
        let style = Style::default().fg(color).add_modifier(Modifier::BOLD);
        block = block.title_bottom(Line::from(text.spans).style(style).right_aligned());
    }
    frame.render_widget(block, area);
    if inner.width == 0 || inner.height == 0 {
        return;
    }
    let query = view.search.as_deref().filter(|q| !q.is_empty()).map(str::to_lowercase);
    let (first, skip) = view.window(inner.width, rows);
    let mut shown: Vec<Line<'static>> = Vec::with_capacity(rows);
    for (i, line) in view.lines.iter().enumerate().skip(first) {
        let line = match &query {
            Some(q) => {
                let mut style = hit_style();
                if view.current_match == Some(i) {
                    style = style.fg(app.theme.notice_warn);
                }
                highlight(line, q, style)
            }
            None => line.clone(),
        };
        let wrapped = wrap_line(&RLine::new(line.spans.clone()), inner.width);
        let skip = if i == first { skip } else { 0 };
        shown.extend(wrapped.into_iter().skip(skip));
        if shown.len() >= rows {
            break;
        }
    }
    shown.truncate(rows);
    frame.render_widget(Paragraph::new(shown), Rect { height: rows as u16, ..inner });
}
