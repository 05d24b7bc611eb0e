//! The status line: state, model, session, busy mode, heartbeat, goal, PAUSED, key hints.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::protocol::{GoalState, Phase, TurnOutcome};
use crate::tui::app::{App, ExitState};
use crate::tui::keymap::{Action, Context};
use crate::tui::transcript::SPINNER;
use crate::tui::wrap::{str_width, truncate_spans};

/// The fewest columns a kept fact is shortened to before it is dropped after all.
const KEPT_MIN: usize = 12;

fn state(app: &App) -> (String, bool) {
    let spin = SPINNER[app.spinner_frame() % SPINNER.len()];
    if !matches!(app.exit, ExitState::Running) {
        return ("stopping…".into(), false);
    }
    if !app.tools.is_empty() {
        let n = app.tools.len();
        return (format!("{spin} running {}", if n == 1 { "tool".to_string() } else { format!("{n} tools") }), true);
    }
    match app.phase {
        Phase::Turn | Phase::Shell => return (format!("{spin} thinking"), true),
        Phase::Compacting => return (format!("{spin} compacting"), true),
        Phase::Gates => return (format!("{spin} running gates"), true),
        Phase::Judging => return (format!("{spin} judging"), true),
        Phase::Idle | Phase::Paused => {}
    }
    match app.last_outcome {
        Some(TurnOutcome::Interrupted) => ("■ interrupted".into(), false),
        Some(TurnOutcome::Completed | TurnOutcome::Failed | TurnOutcome::BudgetExhausted) | None => {
            ("● idle".into(), false)
        }
    }
}

/// The session as a person reads it: its title, else when it started (`11-29 17:30`).
fn session_label(app: &App) -> Option<String> {
    let title = app.status.title.as_ref().or(app.session.title.as_ref());
    if let Some(title) = title.map(|t| t.split_whitespace().collect::<Vec<_>>().join(" ")) {
        return Some(if title.chars().count() > 24 {
            format!("{}…", title.chars().take(23).collect::<String>().trim_end())
        } else {
            title
        });
    }
    let id = &app.status.session_id;
    // Ids are `YYYYMMDD-HHMMSS-xxxx`; anything else is shown as it is, shortened.
    match (id.get(4..6), id.get(6..8), id.get(9..11), id.get(11..13)) {
        (Some(mo), Some(d), Some(h), Some(mi)) if id.len() == 20 && id.as_bytes()[8] == b'-' => {
            Some(format!("{mo}-{d} {h}:{mi}"))
        }
        _ if id.is_empty() => None,
        _ => Some(id.chars().take(12).collect()),
    }
}

pub(crate) fn draw(frame: &mut Frame<'_>, area: Rect, app: &App) {
    let fg = Style::default().fg(app.theme.status_fg);
    let sep = Span::styled(" · ", Style::default().fg(app.theme.dim));
    let (state, active) = state(app);
    let mut left: Vec<Span<'static>> = vec![Span::styled(
        format!(" {state}"),
        Style::default().fg(app.theme.status_state).add_modifier(if active {
            Modifier::BOLD
        } else {
            Modifier::empty()
        }),
    )];
    if app.status.paused {
        left.push(Span::raw(" "));
        left.push(Span::styled(
            " PAUSED ",
            Style::default().fg(app.theme.paused).add_modifier(Modifier::REVERSED | Modifier::BOLD),
        ));
    }
    // (text, kept): a kept fact is dropped last when the line is narrow.
    let mut facts: Vec<(String, bool)> = Vec::new();
    if !app.status.model.is_empty() {
        facts.push((app.status.model.clone(), false));
    }
    if let Some(session) = session_label(app) {
        facts.push((session, false));
    }
    // A paused goal stays in view: it waits for the user, so it is kept before the rest
    // and is the last fact to go when the line is narrow.
    let goal = app.status.goal.as_deref().and_then(crate::present::goal_row);
    let goal_paused = app.status.goal.as_ref().is_some_and(|g| g.state == GoalState::Paused);
    if let Some(goal) = goal.as_ref().filter(|_| goal_paused) {
        facts.push((goal.clone(), true));
    }
    if let Some(sandbox) = &app.status.sandbox {
        facts.push((sandbox.clone(), false));
    }
    if let Some(backend) = &app.status.backend {
        facts.push((backend.clone(), false));
    }
    facts.push((format!("busy:{}", app.busy_mode().as_str()), false));
    // Before the heartbeat and goal: those can be long and are dropped first when narrow.
    if let Some(pct) = app.status.context_pct {
        facts.push((format!("ctx {pct}%"), false));
    }
    if let Some(hb) = &app.status.heartbeat {
        facts.push((crate::present::heartbeat_row(hb), false));
    }
    if let Some(goal) = goal.filter(|_| !goal_paused) {
        facts.push((goal, false));
    }
    let hints = if app.ctrl_c_armed() {
        let key = app.keymap.hint(Context::Global, Action::Cancel);
        format!("press {key} again to quit ")
    } else if app.busy() || !app.tools.is_empty() {
        let stop = app.keymap.hint(Context::Input, Action::Interrupt);
        let bg = app.keymap.hint(Context::Global, Action::Background);
        let help = app.keymap.hint(Context::Input, Action::HelpEmpty);
        format!("{stop} stop · {bg} background · {help} help ")
    } else {
        // Stop and background mean nothing while idle.
        format!("{} help ", app.keymap.hint(Context::Input, Action::HelpEmpty))
    };
    let width = usize::from(area.width);
    let hints_w = str_width(&hints);
    let fixed_w: usize = left.iter().map(|s| str_width(&s.content)).sum();
    // The key hints matter more than the facts: drop facts from the end to make room,
    // a kept one (a paused goal) last of all.
    let facts_w = |facts: &[(String, bool)]| facts.iter().map(|(f, _)| 3 + str_width(f)).sum::<usize>();
    while fixed_w + facts_w(&facts) + 2 + hints_w > width {
        let Some(i) = facts.iter().rposition(|(_, kept)| !kept).or(facts.len().checked_sub(1)) else { break };
        if facts[i].1 {
            // Alone and still too wide: a kept fact is shortened, not dropped.
            let room = width.saturating_sub(fixed_w + 3 + 2 + hints_w);
            if room >= KEPT_MIN {
                let short = truncate_spans(vec![Span::raw(facts[i].0.clone())], room);
                facts[i].0 = short.spans.iter().map(|s| s.content.as_ref()).collect();
                break;
            }
        }
        facts.remove(i);
    }
    for (fact, _) in facts {
        left.push(sep.clone());
        left.push(Span::styled(fact.replace('\n', " "), fg));
    }
    let left_w: usize = left.iter().map(|s| str_width(&s.content)).sum();
    let line = if left_w + 2 + hints_w <= width {
        let mut spans = left;
        spans.push(Span::raw(" ".repeat(width - left_w - hints_w)));
        spans.push(Span::styled(hints, Style::default().fg(app.theme.dim)));
        Line::from(spans)
    } else {
        truncate_spans(left, width)
    };
    frame.render_widget(Paragraph::new(line), area);
}
