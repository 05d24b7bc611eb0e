//! The side column: Running tools and Background jobs.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

use crate::protocol::agent::{AgentInfo, AgentState};
use crate::protocol::JobStatus;
use crate::tui::app::{App, Focus, Layer};
use crate::tui::keymap::{Action, Context};
use crate::tui::transcript::{format_duration_ms, SPINNER};
use crate::tui::wrap::{str_width, truncate_spans};

fn pane_block(app: &App, title: String, focused: bool) -> Block<'static> {
    let color = if focused { app.theme.border_focus } else { app.theme.border };
    let title_style = if focused { Style::default().fg(color).add_modifier(Modifier::BOLD) } else { Style::default() };
    Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(color))
        .title(Span::styled(title, title_style))
}

/// Rows of `items` (each `per` rows high) that keep `selected` in view.
fn window(len: usize, per: usize, rows: usize, selected: usize) -> std::ops::Range<usize> {
    let fit = (rows / per.max(1)).max(1);
    let start = if selected >= fit { selected + 1 - fit } else { 0 };
    start..(start + fit).min(len)
}

fn selected_style(app: &App, on: bool) -> Style {
    if on {
        Style::default().fg(app.theme.selection).add_modifier(Modifier::BOLD)
    } else {
        Style::default()
    }
}

/// The keys of a focused pane, on its bottom border (the ones that fit).
fn pane_keys(app: &App, actions: &[(Action, &str)], width: u16) -> Line<'static> {
    let mut keys: Vec<String> = vec!["↑↓".to_string()];
    keys.extend(actions.iter().map(|(a, what)| format!("{} {what}", app.keymap.hint(Context::Panes, *a))));
    let room = usize::from(width.saturating_sub(4));
    // Back to the input stays; the others go from the end when the border is short.
    while keys.len() > 2 && str_width(&keys.join(" · ")) + 2 > room {
        keys.remove(keys.len() - 2);
    }
    Line::from(Span::styled(format!(" {} ", keys.join(" · ")), Style::default().fg(app.theme.dim)))
}

pub(crate) fn draw_tools(frame: &mut Frame<'_>, area: Rect, app: &App) {
    let focused = app.focus == Focus::Tools && app.top_layer() == Layer::Pane;
    let mut block = pane_block(app, format!(" Running tools ({}) ", app.tools.len()), focused);
    if focused {
        block = block.title_bottom(pane_keys(app, &[(Action::Open, "output"), (Action::Back, "back")], area.width));
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let width = usize::from(inner.width);
    let dim = Style::default().fg(app.theme.dim);
    if app.tools.is_empty() {
        frame.render_widget(Paragraph::new(Span::styled("none", dim)), inner);
        return;
    }
    let mut lines = Vec::new();
    for i in window(app.tools.len(), 2, usize::from(inner.height), app.tool_sel) {
        let tool = &app.tools[i];
        let elapsed = app.now.saturating_duration_since(tool.started);
        let frame_i = (elapsed.as_millis() / 100) as usize % SPINNER.len();
        let sel = focused && i == app.tool_sel;
        let marker = if sel { "▶" } else { SPINNER[frame_i] };
        lines.push(truncate_spans(
            vec![
                Span::styled(format!("{marker} "), Style::default().fg(app.theme.tool_running)),
                Span::styled(tool.name.clone(), selected_style(app, sel).add_modifier(Modifier::BOLD)),
                Span::styled(format!(" {}", tool.summary), selected_style(app, sel)),
            ],
            width,
        ));
        let last = if tool.last_line.is_empty() { String::new() } else { format!(" · {}", tool.last_line) };
        let time = if tool.awaiting { "awaiting approval".to_string() } else { format!("{}s", elapsed.as_secs()) };
        lines.push(truncate_spans(vec![Span::styled(format!("  {time}{last}"), dim)], width));
    }
    frame.render_widget(Paragraph::new(lines), inner);
}

fn status_mark(app: &App, status: &JobStatus) -> (String, Color) {
    match status {
        JobStatus::Running => ("●".into(), app.theme.tool_running),
        JobStatus::Reconnecting => ("↻".into(), app.theme.notice_warn),
        JobStatus::Exited(0) => ("✓".into(), app.theme.tool_ok),
        JobStatus::Exited(_) | JobStatus::Killed => ("✗".into(), app.theme.tool_failed),
        JobStatus::Lost => ("?".into(), app.theme.notice_warn),
    }
}

pub(crate) fn draw_jobs(frame: &mut Frame<'_>, area: Rect, app: &App) {
    let focused = app.focus == Focus::Jobs && app.top_layer() == Layer::Pane;
    let running = app.running_jobs();
    let title = if running > 0 {
        format!(" Background jobs ({running} running) ")
    } else {
        format!(" Background jobs ({}) ", app.jobs.len())
    };
    let mut block = pane_block(app, title, focused);
    if focused {
        let mut keys = vec![(Action::Open, "log")];
        if app.jobs.get(app.job_sel).is_some_and(|j| j.info.status.is_running()) {
            keys.extend([(Action::Kill, "kill"), (Action::Poll, "poll"), (Action::Watch, "watch")]);
            if app.jobs.get(app.job_sel).is_some_and(|j| j.info.has_stdin) {
                keys.push((Action::Write, "stdin"));
            }
        }
        keys.push((Action::Back, "back"));
        block = block.title_bottom(pane_keys(app, &keys, area.width));
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let width = usize::from(inner.width);
    let dim = Style::default().fg(app.theme.dim);
    if app.jobs.is_empty() {
        frame.render_widget(Paragraph::new(Span::styled("none", dim)), inner);
        return;
    }
    let mut lines = Vec::new();
    let rows = usize::from(inner.height);
    // When not every job fits, the last row says how many are above and below.
    let fits = app.jobs.len() * 3 <= rows;
    let shown = window(app.jobs.len(), 3, if fits { rows } else { rows.saturating_sub(1) }, app.job_sel);
    let (above, below) = (shown.start, app.jobs.len() - shown.end);
    for i in shown {
        let job = &app.jobs[i];
        let sel = focused && i == app.job_sel;
        if let Some(agent) = &job.info.agent {
            lines.extend(agent_rows(app, job, agent, sel, width));
            continue;
        }
        let (mark, color) = status_mark(app, &job.info.status);
        let runtime = format_duration_ms(job.shown_runtime_ms(app.wall_ms));
        lines.push(truncate_spans(
            vec![
                Span::styled(if sel { "▶ " } else { "  " }, selected_style(app, sel)),
                Span::styled(job.info.id.clone(), selected_style(app, sel).add_modifier(Modifier::BOLD)),
                Span::styled(format!(" {mark} {}", job.info.status.label()), Style::default().fg(color)),
                Span::styled(format!(" · {runtime}"), dim),
            ],
            width,
        ));
        lines.push(truncate_spans(vec![Span::raw("  $ "), Span::raw(job.info.command.replace('\n', " "))], width));
        lines.push(truncate_spans(vec![Span::styled(format!("  {}", job.info.last_line), dim)], width));
    }
    if !fits {
        let mut parts = Vec::new();
        if above > 0 {
            parts.push(format!("↑ {above} more above"));
        }
        if below > 0 {
            parts.push(format!("↓ {below} more below"));
        }
        lines.truncate(rows.saturating_sub(1));
        lines.push(truncate_spans(vec![Span::styled(format!("  {}", parts.join(" · ")), dim)], width));
    }
    frame.render_widget(Paragraph::new(lines), inner);
}

/// A sub-agent's three rows: `agent_3 ● working · "add tests for …"`, its runtime and
/// tokens, its last activity.
fn agent_rows(
    app: &App,
    job: &crate::tui::app::JobRow,
    agent: &AgentInfo,
    sel: bool,
    width: usize,
) -> Vec<Line<'static>> {
    let dim = Style::default().fg(app.theme.dim);
    let name = match job.info.id.strip_prefix("job_") {
        Some(num) => format!("agent_{num}"),
        None => job.info.id.clone(),
    };
    let (mark, color, label) = match (agent.state, &job.info.status) {
        (AgentState::Done, JobStatus::Exited(0)) => ("✓".to_string(), app.theme.tool_ok, "done".to_string()),
        (AgentState::Done, status) | (_, status @ (JobStatus::Exited(_) | JobStatus::Killed | JobStatus::Lost)) => {
            let (mark, color) = status_mark(app, status);
            (mark, color, format!("done ({})", status.label()))
        }
        (AgentState::Working, _) => ("●".to_string(), app.theme.tool_running, "working".to_string()),
        (AgentState::Waiting, _) => ("◐".to_string(), app.theme.notice_warn, "waiting".to_string()),
        (AgentState::Queued, _) => ("○".to_string(), app.theme.dim, "queued".to_string()),
    };
    let head = format!("  {name} {mark} {label} · ");
    let room = width.saturating_sub(str_width(&head)).max(8);
    let runtime = format_duration_ms(job.shown_runtime_ms(app.wall_ms));
    let tokens = if agent.usage.is_empty() { String::new() } else { format!(" · {}", agent.spend().describe()) };
    vec![
        truncate_spans(
            vec![
                Span::styled(if sel { "▶ " } else { "  " }, selected_style(app, sel)),
                Span::styled(name, selected_style(app, sel).add_modifier(Modifier::BOLD)),
                Span::styled(format!(" {mark} {label}"), Style::default().fg(color)),
                Span::styled(" · ", dim),
                Span::raw(agent.short_task(room)),
            ],
            width,
        ),
        truncate_spans(vec![Span::styled(format!("  sub-agent · {runtime}{tokens}"), dim)], width),
        truncate_spans(vec![Span::styled(format!("  {}", agent.activity), dim)], width),
    ]
}

#[cfg(test)]
mod tests {
    use super::window;

    #[test]
    fn the_selection_stays_in_view() {
        assert_eq!(window(10, 3, 9, 0), 0..3);
        assert_eq!(window(10, 3, 9, 5), 3..6);
        assert_eq!(window(2, 3, 9, 1), 0..2);
        assert_eq!(window(5, 2, 1, 4), 4..5);
    }
}
