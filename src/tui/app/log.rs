//! The log view of a job or a running tool: which lines are on screen, scrolling, and
//! search. Pure: the view draws what `window` says, the keys move `top` and the match.

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::{App, LogMessage, LogSource, LogView};
use crate::protocol::{JobId, NoticeLevel};
use crate::tui::wrap::{wrap_line, RLine};

/// Lines of context kept above a search match.
const MATCH_CONTEXT: usize = 2;

/// Rows `line` takes when wrapped to `width`.
pub(crate) fn line_rows(line: &Line<'static>, width: u16) -> usize {
    wrap_line(&RLine::new(line.spans.clone()), width).len().max(1)
}

/// Index `i` of a chunk starting at log line `old_first`, in one starting at `new_first`.
fn shift_index(i: usize, old_first: u64, new_first: u64) -> usize {
    usize::try_from((i as u64 + old_first).saturating_sub(new_first)).unwrap_or(0)
}

/// A line's text, lower-cased, for searching.
fn lower_text(line: &Line<'_>) -> String {
    line.spans.iter().map(|s| s.content.as_ref()).collect::<String>().to_lowercase()
}

impl LogView {
    pub(crate) fn new(source: LogSource, lines: Vec<Line<'static>>, inflight: bool) -> LogView {
        let total_lines = lines.len() as u64;
        LogView {
            source,
            lines,
            first_line: 1,
            total_lines,
            follow: true,
            top: 0,
            inflight,
            search: None,
            current_match: None,
            message: None,
            requested_at: None,
            redrawn: None,
        }
    }

    /// Say `text` in the footer (until the next key, or `LOG_MESSAGE_FOR`).
    pub(crate) fn say(&mut self, level: NoticeLevel, text: String, at: std::time::Instant) {
        self.message = Some(LogMessage { level, text, at });
    }

    /// The first line of the window that ends with the last line: its index and how many
    /// of its wrapped rows are above the view.
    fn bottom_window(&self, width: u16, rows: usize) -> (usize, usize) {
        let mut acc = 0;
        for i in (0..self.lines.len()).rev() {
            acc += line_rows(&self.lines[i], width);
            if acc >= rows {
                return (i, acc - rows);
            }
        }
        (0, 0)
    }

    /// What a view of `width`×`rows` shows: the first line's index and the wrapped rows
    /// of it to skip. Following shows the end; otherwise `top` is the first line, unless
    /// that would leave the view part empty below the last line.
    pub(crate) fn window(&self, width: u16, rows: usize) -> (usize, usize) {
        if self.lines.is_empty() || width == 0 || rows == 0 {
            return (0, 0);
        }
        let bottom = self.bottom_window(width, rows);
        if self.follow {
            return bottom;
        }
        let top = self.top.min(self.lines.len() - 1);
        if (top, 0) > bottom {
            bottom
        } else {
            (top, 0)
        }
    }

    /// The index of the last line shown (even in part) by `window`.
    pub(crate) fn last_shown(&self, width: u16, rows: usize) -> usize {
        let (first, skip) = self.window(width, rows);
        let mut left = rows + skip;
        let mut i = first;
        while i < self.lines.len() {
            let h = line_rows(&self.lines[i], width);
            if h >= left {
                return i;
            }
            left -= h;
            i += 1;
        }
        self.lines.len().saturating_sub(1)
    }

    /// Lines of the loaded chunk that contain the search, in order.
    pub(crate) fn matches(&self) -> Vec<usize> {
        let Some(query) = self.search.as_deref().filter(|q| !q.is_empty()) else { return Vec::new() };
        let query = query.to_lowercase();
        (0..self.lines.len()).filter(|&i| lower_text(&self.lines[i]).contains(&query)).collect()
    }

    /// "match 3/17" for the footer, when a search is active.
    pub(crate) fn match_label(&self) -> Option<String> {
        let query = self.search.as_deref().filter(|q| !q.is_empty())?;
        let matches = self.matches();
        Some(match self.current_match.and_then(|m| matches.iter().position(|&i| i == m)) {
            Some(at) => format!("/{query} · match {}/{}", at + 1, matches.len()),
            None if matches.is_empty() => format!("/{query} · no match"),
            None => format!("/{query} · {} matches", matches.len()),
        })
    }

    /// The chunk of the log changed (a refresh): keep the same log lines in view. `from`
    /// and `to` are the log lines it covers (`to` 0: as many as `lines`).
    pub(crate) fn replace_lines(&mut self, lines: Vec<Line<'static>>, from: u64, to: u64, total_lines: u64) {
        let first_line = from;
        let covered = if to == 0 { lines.len() as u64 } else { to.saturating_sub(from.max(1)) + 1 };
        self.redrawn = (to > 0 && covered != lines.len() as u64).then_some((from.max(1), to));
        let (old_first, new_first) = (self.first_line.max(1), first_line.max(1));
        self.top = shift_index(self.top, old_first, new_first);
        self.current_match = self.current_match.map(|i| shift_index(i, old_first, new_first));
        self.lines = lines;
        self.first_line = first_line.max(1);
        self.total_lines = total_lines.max(self.lines.len() as u64);
        self.top = self.top.min(self.lines.len().saturating_sub(1));
        if self.current_match.is_some_and(|m| m >= self.lines.len()) {
            self.current_match = None;
        }
    }

    /// Lines of context before a search match.
    fn show_match(&mut self, i: usize) {
        self.follow = false;
        self.current_match = Some(i);
        self.top = i.saturating_sub(MATCH_CONTEXT);
    }

    /// Go to the next match below the current one (or below the top of the view), or the
    /// previous one above it; both wrap around, as in vim. False when nothing matches.
    pub(crate) fn find(&mut self, next: bool, width: u16, rows: usize) -> bool {
        let matches = self.matches();
        if matches.is_empty() {
            self.current_match = None;
            return false;
        }
        let found = match (self.current_match, next) {
            (Some(at), true) => matches.iter().copied().find(|&i| i > at).unwrap_or(matches[0]),
            (Some(at), false) => matches.iter().rev().copied().find(|&i| i < at).unwrap_or(matches[matches.len() - 1]),
            (None, _) => {
                // A new search starts from what is on screen.
                let (first, _) = self.window(width, rows);
                matches.iter().copied().find(|&i| i >= first).unwrap_or(matches[0])
            }
        };
        self.show_match(found);
        true
    }

    pub(crate) fn scroll_up(&mut self, n: usize, width: u16, rows: usize) {
        let (first, _) = self.window(width, rows);
        self.follow = false;
        self.top = first.saturating_sub(n);
    }

    pub(crate) fn scroll_down(&mut self, n: usize, width: u16, rows: usize) {
        if self.follow {
            return;
        }
        let (first, _) = self.window(width, rows);
        self.top = first + n;
        if self.window(width, rows) == self.bottom_window(width, rows) {
            self.follow = true;
        }
    }

    pub(crate) fn go_top(&mut self) {
        self.follow = false;
        self.top = 0;
    }

    pub(crate) fn go_bottom(&mut self) {
        self.follow = true;
    }
}

/// `line` with every case-insensitive occurrence of `query` (lower-case) in `style`.
pub(crate) fn highlight(line: &Line<'static>, query: &str, style: Style) -> Line<'static> {
    let query: Vec<char> = query.chars().collect();
    if query.is_empty() {
        return line.clone();
    }
    let chars: Vec<(char, Style)> =
        line.spans.iter().flat_map(|s| s.content.chars().map(move |c| (c, line.style.patch(s.style)))).collect();
    let fold = |c: char| c.to_lowercase().next().unwrap_or(c);
    let mut hit = vec![false; chars.len()];
    let mut i = 0;
    while i + query.len() <= chars.len() {
        if (0..query.len()).all(|k| fold(chars[i + k].0) == query[k]) {
            hit[i..i + query.len()].iter_mut().for_each(|h| *h = true);
            i += query.len();
        } else {
            i += 1;
        }
    }
    if !hit.contains(&true) {
        return line.clone();
    }
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut text = String::new();
    let mut current: Option<Style> = None;
    for ((c, base), h) in chars.into_iter().zip(hit) {
        let s = if h { base.patch(style) } else { base };
        if current.is_some_and(|cur| cur != s) {
            spans.push(Span::styled(std::mem::take(&mut text), current.unwrap_or_default()));
        }
        current = Some(s);
        text.push(c);
    }
    if !text.is_empty() {
        spans.push(Span::styled(text, current.unwrap_or_default()));
    }
    Line::from(spans)
}

/// The style of search hits; the current match's line is also marked.
pub(crate) fn hit_style() -> Style {
    Style::default().add_modifier(Modifier::REVERSED)
}

impl App {
    /// The log view's inner size in the last frame (width, rows).
    fn log_inner(&self) -> (u16, usize) {
        (self.log_area.width.saturating_sub(2).max(1), usize::from(self.log_area.height.saturating_sub(2)).max(1))
    }

    pub(super) fn log_scroll_up(&mut self, n: usize) {
        let (w, rows) = self.log_inner();
        if let Some(view) = &mut self.log_view {
            view.scroll_up(n, w, rows);
        }
    }

    pub(super) fn log_scroll_down(&mut self, n: usize) {
        let (w, rows) = self.log_inner();
        if let Some(view) = &mut self.log_view {
            view.scroll_down(n, w, rows);
        }
    }

    /// `n` (next) / `N` (previous) or a new search. False when nothing matches.
    pub(crate) fn log_find(&mut self, next: bool) -> bool {
        let (w, rows) = self.log_inner();
        let Some(view) = &mut self.log_view else { return false };
        view.find(next, w, rows)
    }

    /// Say something in the open log view (and in the transcript, where it stays).
    pub(super) fn log_say(&mut self, level: NoticeLevel, text: String) {
        let now = self.now;
        if let Some(view) = &mut self.log_view {
            view.say(level, text.clone(), now);
        }
        self.transcript.push(crate::tui::transcript::CellBody::Notice { level, text });
    }

    /// The job the open log view shows, if it shows one.
    pub(super) fn log_job(&self) -> Option<JobId> {
        match self.log_view.as_ref().map(|v| &v.source) {
            Some(LogSource::Job(id)) => Some(id.clone()),
            Some(LogSource::Tool(_) | LogSource::Diff(_)) | None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn view(n: usize) -> LogView {
        let lines = (1..=n).map(|i| Line::raw(format!("line {i}"))).collect();
        LogView::new(LogSource::Job("job_1".into()), lines, false)
    }

    #[test]
    fn following_shows_the_end_and_the_top_fills_the_view() {
        let mut v = view(50);
        assert_eq!(v.window(40, 10), (40, 0));
        assert_eq!(v.last_shown(40, 10), 49);
        v.go_top();
        assert_eq!(v.window(40, 10), (0, 0), "the top line is the first row, not the last");
        assert_eq!(v.last_shown(40, 10), 9);
        v.top = 45;
        assert_eq!(v.window(40, 10), (40, 0), "never leaves blank rows below the end");
    }

    #[test]
    fn scrolling_moves_the_top_and_reaching_the_end_follows_again() {
        let mut v = view(50);
        v.scroll_up(5, 40, 10);
        assert!(!v.follow);
        assert_eq!(v.window(40, 10), (35, 0));
        v.scroll_down(3, 40, 10);
        assert_eq!(v.window(40, 10), (38, 0));
        assert!(!v.follow);
        v.scroll_down(3, 40, 10);
        assert!(v.follow);
    }

    #[test]
    fn search_goes_next_and_previous_with_wrap_and_counts() {
        let lines = (1..=50)
            .map(|i| Line::raw(if i % 10 == 0 { format!("line {i} ERROR") } else { format!("line {i}") }))
            .collect();
        let mut v = LogView::new(LogSource::Job("job_1".into()), lines, false);
        v.search = Some("error".into());
        assert_eq!(v.match_label().as_deref(), Some("/error · 5 matches"));
        v.go_top();
        assert!(v.find(true, 40, 10));
        assert_eq!(v.current_match, Some(9));
        assert_eq!(v.window(40, 10), (7, 0), "the match with two lines above it");
        assert_eq!(v.match_label().as_deref(), Some("/error · match 1/5"));
        v.find(true, 40, 10);
        assert_eq!(v.current_match, Some(19));
        v.find(false, 40, 10);
        v.find(false, 40, 10);
        assert_eq!(v.current_match, Some(49), "previous wraps to the last match");
        assert_eq!(v.match_label().as_deref(), Some("/error · match 5/5"));
        v.search = Some("nothing".into());
        v.current_match = None;
        assert!(!v.find(true, 40, 10));
        assert_eq!(v.match_label().as_deref(), Some("/nothing · no match"));
    }

    #[test]
    fn a_refreshed_chunk_keeps_the_same_lines_in_view() {
        let mut v = view(50);
        v.top = 20;
        v.follow = false;
        v.current_match = Some(22);
        let lines = (11..=60).map(|i| Line::raw(format!("line {i}"))).collect();
        v.replace_lines(lines, 11, 60, 60);
        assert_eq!(v.top, 10);
        assert_eq!(v.current_match, Some(12));
        assert_eq!(v.lines[v.top].to_string(), "line 21");
    }

    #[test]
    fn hits_are_highlighted_case_insensitively() {
        let line = Line::from(vec![Span::raw("an Error and "), Span::styled("error", Style::default())]);
        let out = highlight(&line, "error", hit_style());
        let marked: Vec<String> = out
            .spans
            .iter()
            .filter(|s| s.style.add_modifier.contains(Modifier::REVERSED))
            .map(|s| s.content.to_string())
            .collect();
        assert_eq!(marked, vec!["Error".to_string(), "error".to_string()]);
        assert_eq!(out.to_string(), "an Error and error");
    }
}
