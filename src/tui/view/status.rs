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
    if !app.approvals.is_empty() {
        return ("? awaiting approval".into(), true);
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

/// What the status line says besides the state, as (text, kept, priority): when the line
/// is narrow, facts go lowest priority first, and a kept one (a paused goal, the jobs count
/// when no pane shows them) last of all.
fn facts(app: &App) -> Vec<(String, bool, u8)> {
    let mut facts: Vec<(String, bool, u8)> = Vec::new();
    // No pane shows the jobs at this width: say they run, and the key that lists them.
    let running = app.running_jobs();
    if !app.panes_shown && running > 0 {
        let key = app
            .keymap
            .keys(Context::Input, Action::FocusPanes)
            .iter()
            .find(|k| k.code != crossterm::event::KeyCode::Tab)
            .or(app.keymap.keys(Context::Input, Action::FocusPanes).first())
            .map(|k| format!(" ({k})"))
            .unwrap_or_default();
        let noun = if running == 1 { "job" } else { "jobs" };
        facts.push((format!("⚙ {running} {noun}{key}"), true, 9));
    }
    if !app.status.model.is_empty() {
        facts.push((app.status.model.clone(), false, 2));
    }
    if let Some(session) = session_label(app) {
        facts.push((session, false, 1));
    }
    // A paused goal stays in view: it waits for the user, so it is kept before the rest
    // and is the last fact to go when the line is narrow.
    let goal = app.status.goal.as_deref().and_then(crate::present::goal_row);
    let goal_paused = app.status.goal.as_ref().is_some_and(|g| g.state == GoalState::Paused);
    if let Some(goal) = goal.as_ref().filter(|_| goal_paused) {
        facts.push((goal.clone(), true, 8));
    }
    if let Some(sandbox) = &app.status.sandbox {
        facts.push((sandbox.clone(), false, 3));
    }
    if let Some(backend) = &app.status.backend {
        facts.push((backend.clone(), false, 4));
    }
    facts.push((format!("busy:{}", app.busy_mode().as_str()), false, 5));
    if let Some(pct) = app.status.context_pct {
        facts.push((format!("ctx {pct}%"), false, 4));
    }
    // The heartbeat and an active goal are what runs by itself: they outlast the names.
    if let Some(hb) = &app.status.heartbeat {
        facts.push((crate::present::heartbeat_row(&app.heartbeat_now(hb)), false, 6));
    }
    if let Some(goal) = goal.filter(|_| !goal_paused) {
        facts.push((goal, false, 7));
    }
    facts
}

/// The key hints at the right of the status line.
fn hints(app: &App) -> String {
    if app.ctrl_c_armed() {
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
    let mut facts = facts(app);
    let hints = hints(app);
    let width = usize::from(area.width);
    let hints_w = str_width(&hints);
    let fixed_w: usize = left.iter().map(|s| str_width(&s.content)).sum();
    // The key hints matter more than the facts: drop the least important fact to make
    // room, a kept one last of all.
    let facts_w = |facts: &[(String, bool, u8)]| facts.iter().map(|(f, _, _)| 3 + str_width(f)).sum::<usize>();
    while fixed_w + facts_w(&facts) + 2 + hints_w > width {
        let lowest = |kept: bool| {
            facts
                .iter()
                .enumerate()
                .filter(|(_, f)| f.1 == kept)
                .min_by_key(|(i, f)| (f.2, usize::MAX - i))
                .map(|(i, _)| i)
        };
        let Some(i) = lowest(false).or_else(|| lowest(true)) else { break };
        if facts[i].1 && facts.iter().filter(|f| f.1).count() == 1 {
            // Alone and still too wide: a kept fact is shortened, not dropped.
            let others = facts_w(&facts) - 3 - str_width(&facts[i].0);
            let room = width.saturating_sub(fixed_w + others + 3 + 2 + hints_w);
            if room >= KEPT_MIN {
                let short = truncate_spans(vec![Span::raw(facts[i].0.clone())], room);
                facts[i].0 = short.spans.iter().map(|s| s.content.as_ref()).collect();
                break;
            }
        }
        facts.remove(i);
    }
    for (fact, _, _) in facts {
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
