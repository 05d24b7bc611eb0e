//! A cell's logical lines, before wrapping.

use std::time::Instant;

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::{CellBody, UserOrigin, SPINNER};
use crate::protocol::NoticeLevel;
use crate::protocol::{JobFate, ToolOutcome, ToolStatus, TurnOutcome};
use crate::text::sanitize_for_display as display_text;
use crate::tui::markdown::{self, CodeCache};
use crate::tui::theme::Theme;
use crate::tui::wrap::{str_width, truncate_spans, RLine};

/// Lines an injected (heartbeat, goal, job) message shows before it is cut.
const INJECTED_MAX_LINES: usize = 6;
/// Icons a notice may start with; such a notice is shown without the level's own mark.
const NOTICE_ICONS: &str = "✓✗⚠◎♥📎■↪⚙ℹ";
/// Lines of a user message shown before the rest is counted instead.
const USER_MAX_LINES: usize = 24;
/// Output lines a `!cmd` cell shows; a longer output is cut in the middle.
const BANG_MAX_LINES: usize = 12;

pub(crate) use crate::util::format_duration_ms;

pub(super) fn tool_line(body: &CellBody, theme: &Theme, now: Instant, width: usize) -> Line<'static> {
    let CellBody::Tool { name, summary, started, outcome, job: fate, awaiting, .. } = body else {
        return Line::default();
    };
    let dim = Style::default().fg(theme.dim);
    let mut spans = Vec::new();
    match outcome {
        // Not running yet: it waits for the user, and its time starts when it does.
        None if *awaiting => {
            spans.push(Span::styled("? ", Style::default().fg(theme.notice_warn)));
            spans.push(Span::styled(name.clone(), Style::default().add_modifier(Modifier::BOLD)));
            spans.push(Span::raw(format!(" {summary}")));
            spans.push(Span::styled(" · awaiting approval", Style::default().fg(theme.notice_warn)));
        }
        None => {
            let elapsed = now.saturating_duration_since(*started);
            let frame = (elapsed.as_millis() / 100) as usize % SPINNER.len();
            spans.push(Span::styled(format!("{} ", SPINNER[frame]), Style::default().fg(theme.tool_running)));
            spans.push(Span::styled(name.clone(), Style::default().add_modifier(Modifier::BOLD)));
            spans.push(Span::raw(format!(" {summary}")));
            spans.push(Span::styled(format!(" · {}s", elapsed.as_secs()), dim));
        }
        Some(o) if fate.is_some_and(|f| f != JobFate::Running) && started_job(o).is_some() => {
            // The job this call started has ended since: never shown as running.
            let job = started_job(o).unwrap_or_default();
            let what = fate.map(JobFate::describe).unwrap_or_default();
            // The fate before the command: a long command is cut at the width, not the fate.
            spans.push(Span::styled("■ ", dim));
            spans.push(Span::styled(name.clone(), Style::default().add_modifier(Modifier::BOLD)));
            spans.push(Span::styled(format!(" {job} — {what} · "), dim));
            spans.push(Span::raw(summary.clone()));
            return truncate_spans(spans, width);
        }
        Some(o) if o.status == Some(ToolStatus::Yielded) => {
            // Moved, not done: the command goes on as a job.
            let job = result_field(&o.result, "session_id").unwrap_or_else(|| "a job".into());
            spans.push(Span::styled("↪ ", Style::default().fg(theme.tool_running)));
            spans.push(Span::styled(name.clone(), Style::default().add_modifier(Modifier::BOLD)));
            spans.push(Span::raw(format!(" {summary}")));
            spans.push(Span::styled(
                format!(" · {job} · running in the background"),
                Style::default().fg(theme.tool_running),
            ));
        }
        Some(o) => {
            let (mark, color) = if o.ok { ("✓", theme.tool_ok) } else { ("✗", theme.tool_failed) };
            spans.push(Span::styled(format!("{mark} "), Style::default().fg(color)));
            spans.push(Span::styled(name.clone(), Style::default().add_modifier(Modifier::BOLD)));
            spans.push(Span::raw(format!(" {summary}")));
            let mut tail = format!(" · {}", format_duration_ms(o.duration_ms));
            // A remote call names where it ran (DESIGN §4b).
            if let Some(backend) = result_field(&o.result, "backend") {
                tail.push_str(&format!(" · on {backend}"));
            }
            if o.status == Some(ToolStatus::Degraded) {
                // The command never ran there: say why instead of a meaningless exit -1.
                let reason = result_field(&o.result, "reason").unwrap_or_else(|| "unreachable".into());
                tail.push_str(&format!(" · degraded: {reason}"));
            } else {
                if let Some(code) = o.exit_code {
                    tail.push_str(&format!(" · exit {code}"));
                }
                if let Some(status) = o.status {
                    tail.push_str(&format!(" · {}", status.as_str()));
                }
            }
            spans.push(Span::styled(tail, if o.ok { dim } else { Style::default().fg(theme.tool_failed) }));
        }
    }
    fit_summary(spans, 2, width)
}

/// A tool row cut to `width`: the command (span `at`) gives up its end first, so what
/// follows it — the job, the duration, the exit code — stays in view.
fn fit_summary(mut spans: Vec<Span<'static>>, at: usize, width: usize) -> Line<'static> {
    let total: usize = spans.iter().map(|s| str_width(&s.content)).sum();
    if total > width && at < spans.len() {
        let others = total - str_width(&spans[at].content);
        // Keep at least a few characters of the command itself.
        let room = width.saturating_sub(others).max(8);
        let cut = truncate_spans(vec![spans[at].clone()], room);
        spans[at] = Span::styled(cut.spans.iter().map(|s| s.content.as_ref()).collect::<String>(), spans[at].style);
    }
    truncate_spans(spans, width)
}

/// The job a tool call started in the background or moved there, if it did.
pub(super) fn started_job(o: &ToolOutcome) -> Option<String> {
    match o.status {
        Some(ToolStatus::Background | ToolStatus::Yielded) => result_field(&o.result, "session_id"),
        _ => None,
    }
}

/// A string field of a tool's JSON result.
fn result_field(result: &str, field: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(result).ok()?;
    value.get(field)?.as_str().map(str::to_string)
}

/// The output lines shown under a tool cell: a `!cmd` the user ran shows its output; an
/// MCP call (`server › tool`) shows its result when details are shown (Ctrl+T), collapsed
/// otherwise; the model's commands keep one line each. A long output is cut in the middle.
pub(super) fn tool_output_lines(body: &CellBody, theme: &Theme, show_details: bool) -> Vec<RLine> {
    let CellBody::Tool { name, outcome: Some(o), .. } = body else { return Vec::new() };
    let mcp = name.contains(" › ");
    if name != "!" && !(mcp && show_details) {
        return Vec::new();
    }
    let mut text = result_field(&o.result, "output").unwrap_or_default();
    if let Some(error) = result_field(&o.result, "error").filter(|e| !e.trim().is_empty()) {
        text.push_str(&format!("\n{error}"));
    }
    let text = display_text(&text);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let dim = Style::default().fg(theme.dim);
    let row = |l: &str| RLine::plain(format!("  │ {l}"), Style::default()).with_hang(4);
    if lines.len() <= BANG_MAX_LINES {
        return lines.iter().map(|l| row(l)).collect();
    }
    let head = BANG_MAX_LINES / 2;
    let tail = BANG_MAX_LINES - head - 1;
    let mut out: Vec<RLine> = lines[..head].iter().map(|l| row(l)).collect();
    out.push(RLine::plain(format!("  │ … {} more lines …", lines.len() - head - tail), dim));
    out.extend(lines[lines.len() - tail..].iter().map(|l| row(l)));
    out
}

/// The logical lines of a cell, before wrapping.
pub(super) fn body_lines(body: &CellBody, theme: &Theme, show_reasoning: bool, cache: &mut CodeCache) -> Vec<RLine> {
    match body {
        CellBody::User { text, origin, folds } => user_lines(text, *origin, folds, show_reasoning, theme),
        CellBody::Assistant { text, reasoning, streaming } => {
            let mut out = Vec::new();
            let reasoning = display_text(reasoning);
            let reasoning = reasoning.trim();
            if !reasoning.is_empty() {
                let dim = Style::default().fg(theme.reasoning);
                if show_reasoning {
                    out.push(RLine::plain("▾ reasoning", dim));
                    let italic = dim.add_modifier(Modifier::ITALIC);
                    out.extend(reasoning.lines().map(|l| RLine::plain(format!("  {l}"), italic).with_hang(2)));
                } else {
                    let n = reasoning.lines().count();
                    let noun = if n == 1 { "line" } else { "lines" };
                    out.push(RLine::plain(format!("▸ reasoning · {n} {noun} (hidden)"), dim));
                }
                if !text.trim().is_empty() {
                    out.push(RLine::blank());
                }
            }
            let text = display_text(text);
            out.extend(markdown::render(&text, theme, Style::default().fg(theme.assistant), cache));
            if *streaming && out.is_empty() {
                out.push(RLine::plain("…", Style::default().fg(theme.dim)));
            }
            out
        }
        CellBody::Tool { .. } => Vec::new(),
        CellBody::Notice { level, text } => {
            let (mark, color) = match level {
                NoticeLevel::Info => ("ℹ", theme.notice_info),
                NoticeLevel::Warn => ("⚠", theme.notice_warn),
                NoticeLevel::Error => ("✗", theme.notice_error),
            };
            let style = Style::default().fg(color);
            // A notice that brings its own icon (`✓ goal achieved`) does not get a second one.
            let own_icon = text.chars().next().is_some_and(|c| NOTICE_ICONS.contains(c));
            display_text(text)
                .lines()
                .enumerate()
                .map(|(i, l)| {
                    let lead = match (i, own_icon) {
                        (0, false) => format!("{mark} "),
                        (0, true) => String::new(),
                        _ => "  ".into(),
                    };
                    RLine::new(vec![Span::styled(lead, style), Span::styled(l.to_string(), style)]).with_hang(2)
                })
                .collect()
        }
        CellBody::TurnEnd { outcome } => {
            let (text, color) = match outcome {
                TurnOutcome::Completed => ("", theme.dim),
                TurnOutcome::Interrupted => ("■ interrupted", theme.notice_warn),
                TurnOutcome::Failed => {
                    ("✗ the turn failed · your message is kept: /retry sends it again", theme.notice_error)
                }
                TurnOutcome::BudgetExhausted => ("⚠ the turn used its iteration budget", theme.notice_warn),
            };
            vec![RLine::plain(text, Style::default().fg(color))]
        }
    }
}

/// Bytes as a person reads them: `812 B`, `13 KB`, `2.1 MB`.
fn format_size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else if bytes < 1024 * 1024 {
        format!("{} KB", (bytes + 512) / 1024)
    } else {
        format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
    }
}

/// A message with each attached file (`[Attached file: x]` and its fenced content, as the
/// engine adds it for `@x`) replaced by one line: `📎 x · 13 KB`.
pub(crate) fn collapse_attachments(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let Some(name) = line.strip_prefix("[Attached file: ").and_then(|l| l.strip_suffix(']')) else {
            out.push(line.to_string());
            i += 1;
            continue;
        };
        if out.last().is_some_and(|l| l.trim().is_empty()) {
            out.pop();
        }
        let fence = lines.get(i + 1).copied().filter(|f| f.len() >= 3 && f.chars().all(|c| c == '`'));
        match fence {
            Some(fence) => {
                let end = (i + 2..lines.len()).find(|&j| lines[j] == fence).unwrap_or(lines.len());
                let bytes: usize = lines[i + 2..end.min(lines.len())].iter().map(|l| l.len() + 1).sum();
                out.push(format!("📎 {name} · {}", format_size(bytes)));
                i = end + 1;
            }
            None => {
                out.push(format!("📎 {name}"));
                i += 1;
            }
        }
    }
    out.join("\n")
}

/// `text` with each large paste in `folds` as one line, `▸ pasted 50 lines (hidden)`.
fn fold_pastes(text: &str, folds: &[String]) -> String {
    let mut text = text.to_string();
    for paste in folds {
        let lines = paste.lines().count();
        let what = if lines > 1 { format!("{lines} lines") } else { format!("{} chars", paste.chars().count()) };
        text = text.replacen(paste.as_str(), &format!("▸ pasted {what} (hidden)"), 1);
    }
    text
}

fn user_lines(text: &str, origin: UserOrigin, folds: &[String], show_details: bool, theme: &Theme) -> Vec<RLine> {
    // The engine sends what to show (a heartbeat's instruction, not its whole prompt).
    let text = if !show_details && !folds.is_empty() {
        collapse_attachments(&fold_pastes(text, folds))
    } else {
        collapse_attachments(text)
    };
    let text = display_text(&text);
    let label = match origin {
        UserOrigin::Typed | UserOrigin::MidTurn | UserOrigin::Queued | UserOrigin::Retry => None,
        UserOrigin::Heartbeat => Some("♥ heartbeat"),
        UserOrigin::Goal => Some("◎ goal"),
        UserOrigin::JobNotification => Some("⚙ job notification"),
        UserOrigin::SubAgent => Some("⚙ sub-agent"),
    };
    if let Some(label) = label {
        let style = Style::default().fg(theme.injected);
        let dim = Style::default().fg(theme.dim);
        let mut out = vec![RLine::plain(label, style)];
        // A job notice's output tail starts on its own row, so the first row shown under
        // the header is not the job's line 1 glued to it.
        let text = match (origin, text.split_once(" Output tail: ")) {
            (UserOrigin::JobNotification, Some((head, tail))) => format!("{head} Output tail:\n{tail}"),
            _ => text,
        };
        let lines: Vec<&str> = text.lines().collect();
        let row = |l: &&str| RLine::plain(format!("  {l}"), dim).with_hang(2);
        if lines.len() <= INJECTED_MAX_LINES {
            out.extend(lines.iter().map(row));
        } else if origin == UserOrigin::JobNotification {
            // A job's output tail: its first line says what happened, its end is the news.
            let keep = INJECTED_MAX_LINES - 1;
            out.push(row(&lines[0]));
            out.push(RLine::plain(format!("  … {} earlier lines", lines.len() - 1 - keep), dim));
            out.extend(lines[lines.len() - keep..].iter().map(row));
        } else {
            out.extend(lines.iter().take(INJECTED_MAX_LINES).map(row));
            out.push(RLine::plain(format!("  … {} more lines", lines.len() - INJECTED_MAX_LINES), dim));
        }
        return out;
    }
    let color = if origin == UserOrigin::MidTurn { theme.user_mid_turn } else { theme.user };
    let style = Style::default().fg(color);
    let all: Vec<&str> = text.lines().collect();
    // A long message (a large paste) stays collapsed here too: its head and a count; the
    // details (Ctrl+T) show a folded paste whole.
    let unfolded = show_details && !folds.is_empty();
    let shown = if all.len() > USER_MAX_LINES && !unfolded { &all[..USER_MAX_LINES / 2] } else { &all[..] };
    let mut out: Vec<RLine> = shown
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let lead = if i == 0 { "› " } else { "  " };
            RLine::new(vec![Span::styled(lead, style.add_modifier(Modifier::BOLD)), Span::styled(l.to_string(), style)])
                .with_hang(2)
        })
        .collect();
    if out.is_empty() {
        out.push(RLine::plain("› ", style));
    }
    if all.len() > shown.len() {
        let dim = Style::default().fg(theme.dim);
        out.push(RLine::plain(format!("  … {} more lines", all.len() - shown.len()), dim));
    }
    let note = match origin {
        UserOrigin::MidTurn => Some("↳ delivered mid-turn"),
        UserOrigin::Queued => Some("↳ queued"),
        UserOrigin::Retry => Some("↳ retry"),
        UserOrigin::Typed
        | UserOrigin::Heartbeat
        | UserOrigin::Goal
        | UserOrigin::JobNotification
        | UserOrigin::SubAgent => None,
    };
    if let Some(note) = note {
        out.push(RLine::plain(format!("  {note}"), Style::default().fg(theme.dim)));
    }
    out
}
