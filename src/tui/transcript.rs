//! The conversation as cells, with a per-cell cache of wrapped lines keyed by width, so
//! a frame lays out only what it shows and frame cost does not grow with the session.

use std::collections::HashMap;
use std::time::Instant;

use ratatui::text::Line;

mod render;

pub(crate) use render::format_duration_ms;
use render::{body_lines, tool_line, tool_output_lines};

use super::markdown::CodeCache;
use super::theme::Theme;
use super::wrap::wrap_lines;
use crate::protocol::{JobFate, NoticeLevel, ToolOutcome, TurnOutcome};
use crate::text::sanitize_for_display as display_text;

/// Cached wrapped lines kept beyond those near the view (a few screens: scrolling back
/// re-wraps only what it shows); past this, cells far off screen keep only their height.
/// In follow mode every cell passes through the view once, so without the bound the cache
/// would hold the whole session's styled lines (a soak of 2,000 turns: megabytes).
const CACHED_LINES_MAX: usize = 2_000;

/// Past this many cells, a transcript that follows the newest output lets go of its oldest
/// ones at the next stored user message, keeping about [`CELLS_KEPT`]; they are read back
/// from the database (`Op::LoadEarlier`) when the user scrolls up to them, as on resume. A
/// long day's transcript held whole grew the process by megabytes (the soak's 2,000 turns).
const CELLS_MAX: usize = 600;
const CELLS_KEPT: usize = 300;

pub(crate) const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// Where a user-role message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UserOrigin {
    Typed,
    /// Typed while busy and delivered mid-turn.
    MidTurn,
    Queued,
    Retry,
    Heartbeat,
    Goal,
    JobNotification,
    /// A sub-agent's final answer.
    SubAgent,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CellBody {
    User {
        text: String,
        origin: UserOrigin,
        /// Large pastes in `text`: folded to one line as the input showed them, unfolded
        /// with the details (Ctrl+T).
        folds: Vec<String>,
    },
    Assistant {
        text: String,
        reasoning: String,
        streaming: bool,
    },
    Tool {
        call_id: String,
        name: String,
        summary: String,
        started: Instant,
        outcome: Option<ToolOutcome>,
        /// What became of the background job this call started (None: not known to have ended).
        job: Option<JobFate>,
        /// Waiting for the user's approval: not running yet, so no spinner and no timer.
        awaiting: bool,
    },
    Notice {
        level: NoticeLevel,
        text: String,
    },
    TurnEnd {
        outcome: TurnOutcome,
    },
}

impl CellBody {
    fn is_tool(&self) -> bool {
        matches!(self, CellBody::Tool { .. })
    }
}

#[derive(Debug, Clone, PartialEq)]
struct CellLayout {
    width: u16,
    show_reasoning: bool,
    height: usize,
    lines: Option<Vec<Line<'static>>>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cell {
    pub(crate) body: CellBody,
    layout: Option<CellLayout>,
    /// Where its message is stored, for a user message that arrived live: the transcript
    /// can let go of what is above it and read it back from there.
    seq: Option<i64>,
}

/// The top row of the transcript view: a line of a cell (line 0 is the cell's gap row
/// when it has one). `Follow` keeps the newest output in view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scroll {
    Follow,
    Anchor { cell: usize, line: usize },
}

/// One visible piece: `take` rows of cell `cell` starting at its row `skip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    pub(crate) cell: usize,
    pub(crate) skip: usize,
    pub(crate) take: usize,
}

#[derive(Debug)]
pub(crate) struct Transcript {
    cells: Vec<Cell>,
    pub(crate) scroll: Scroll,
    /// Something arrived below while the user was scrolled up.
    pub(crate) new_output: bool,
    pub(crate) show_reasoning: bool,
    open_assistant: Option<usize>,
    tools: HashMap<String, usize>,
    code_cache: CodeCache,
    cached_lines: usize,
    /// What the last eviction left cached (the cells near the view): the next comes
    /// `CACHED_LINES_MAX` lines later, so a view of huge cells does not evict every frame.
    kept_lines: usize,
}

impl Default for Transcript {
    fn default() -> Transcript {
        Transcript {
            cells: Vec::new(),
            scroll: Scroll::Follow,
            new_output: false,
            show_reasoning: false,
            open_assistant: None,
            tools: HashMap::new(),
            code_cache: CodeCache::default(),
            cached_lines: 0,
            kept_lines: 0,
        }
    }
}

impl Transcript {
    pub(crate) fn cells(&self) -> &[Cell] {
        &self.cells
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// Something was said: a message, an answer or a tool call (notices alone are not).
    pub(crate) fn has_conversation(&self) -> bool {
        self.cells.iter().any(|c| !matches!(c.body, CellBody::Notice { .. }))
    }

    /// Rows every cell takes at `width` (for a transcript of a few notices).
    pub(crate) fn total_height(&mut self, width: u16, theme: &Theme) -> usize {
        (0..self.cells.len()).map(|i| self.height(i, width, theme)).sum()
    }

    pub(crate) fn clear(&mut self) {
        *self = Transcript { show_reasoning: self.show_reasoning, ..Transcript::default() };
    }

    fn changed_below(&mut self) {
        if matches!(self.scroll, Scroll::Anchor { .. }) {
            self.new_output = true;
        }
    }

    pub(crate) fn push(&mut self, body: CellBody) {
        if let CellBody::Tool { call_id, .. } = &body {
            self.tools.insert(call_id.clone(), self.cells.len());
        }
        if matches!(body, CellBody::Assistant { streaming: true, .. }) {
            self.open_assistant = Some(self.cells.len());
        }
        self.cells.push(Cell { body, layout: None, seq: None });
        self.changed_below();
    }

    /// Push a user message stored at `seq` (see [`Transcript::let_go_of_old`]).
    pub(crate) fn push_stored(&mut self, body: CellBody, seq: Option<i64>) {
        self.push(body);
        if let Some(cell) = self.cells.last_mut() {
            cell.seq = seq;
        }
    }

    /// With more than [`CELLS_MAX`] cells while following the newest output, drop every
    /// cell above the first stored user message among the newest [`CELLS_KEPT`] and return
    /// its seq: the history before it is to be read back from there. Nothing still under
    /// way (the open answer, a running tool) is dropped; None when nothing was.
    pub(crate) fn let_go_of_old(&mut self) -> Option<i64> {
        if self.cells.len() <= CELLS_MAX || self.scroll != Scroll::Follow {
            return None;
        }
        let from = self.cells.len() - CELLS_KEPT;
        let (cut, seq) = self.cells.iter().enumerate().skip(from).find_map(|(i, c)| Some((i, c.seq?)))?;
        let live = |c: &Cell| match &c.body {
            CellBody::Tool { outcome, .. } => outcome.is_none(),
            CellBody::Assistant { streaming, .. } => *streaming,
            _ => false,
        };
        if self.cells[..cut].iter().any(live) {
            return None;
        }
        for cell in self.cells.drain(..cut) {
            if let Some(CellLayout { lines: Some(lines), .. }) = cell.layout {
                self.cached_lines = self.cached_lines.saturating_sub(lines.len());
            }
        }
        self.kept_lines = self.kept_lines.min(self.cached_lines);
        self.tools.retain(|_, i| *i >= cut);
        for i in self.tools.values_mut() {
            *i -= cut;
        }
        if let Some(i) = &mut self.open_assistant {
            *i -= cut;
        }
        Some(seq)
    }

    /// Put `bodies` (older history) above every cell; what the view shows stays in place.
    pub(crate) fn prepend(&mut self, bodies: Vec<CellBody>) {
        let n = bodies.len();
        if n == 0 {
            return;
        }
        let mut cells: Vec<Cell> = bodies.into_iter().map(|body| Cell { body, layout: None, seq: None }).collect();
        cells.append(&mut self.cells);
        self.cells = cells;
        for index in self.tools.values_mut() {
            *index += n;
        }
        if let Some(i) = &mut self.open_assistant {
            *i += n;
        }
        if let Scroll::Anchor { cell, .. } = &mut self.scroll {
            *cell += n;
        }
    }

    fn invalidate(&mut self, index: usize) {
        if let Some(cell) = self.cells.get_mut(index) {
            if let Some(CellLayout { lines: Some(lines), .. }) = &cell.layout {
                self.cached_lines = self.cached_lines.saturating_sub(lines.len());
            }
            cell.layout = None;
        }
        self.changed_below();
    }

    fn open_assistant_index(&mut self) -> usize {
        match self.open_assistant {
            Some(i) => i,
            None => {
                self.push(CellBody::Assistant { text: String::new(), reasoning: String::new(), streaming: true });
                self.cells.len() - 1
            }
        }
    }

    pub(crate) fn append_assistant(&mut self, delta: &str) {
        let i = self.open_assistant_index();
        if let CellBody::Assistant { text, .. } = &mut self.cells[i].body {
            text.push_str(delta);
        }
        self.invalidate(i);
    }

    pub(crate) fn append_reasoning(&mut self, delta: &str) {
        let i = self.open_assistant_index();
        if let CellBody::Assistant { reasoning, .. } = &mut self.cells[i].body {
            reasoning.push_str(delta);
        }
        self.invalidate(i);
    }

    /// The final text of the open assistant message (it replaces what streamed).
    pub(crate) fn finish_assistant(&mut self, final_text: &str, final_reasoning: Option<&str>) {
        let index = match self.open_assistant {
            Some(i) => i,
            None if final_text.trim().is_empty() && final_reasoning.is_none_or(|r| r.trim().is_empty()) => return,
            None => self.open_assistant_index(),
        };
        if let CellBody::Assistant { text, reasoning, streaming } = &mut self.cells[index].body {
            if !final_text.is_empty() || text.is_empty() {
                *text = final_text.to_string();
            }
            if let Some(r) = final_reasoning {
                *reasoning = r.to_string();
            }
            *streaming = false;
        }
        self.open_assistant = None;
        let empty = matches!(&self.cells[index].body,
            CellBody::Assistant { text, reasoning, .. } if text.trim().is_empty() && reasoning.trim().is_empty());
        if empty && index + 1 == self.cells.len() {
            self.cells.pop();
        } else {
            self.invalidate(index);
        }
    }

    /// End the open assistant message without new text (a tool call or the turn's end).
    pub(crate) fn close_assistant(&mut self) {
        if let Some(i) = self.open_assistant {
            let text = match &self.cells[i].body {
                CellBody::Assistant { text, .. } => text.clone(),
                _ => String::new(),
            };
            self.finish_assistant(&text, None);
        }
    }

    pub(crate) fn tool_started(&mut self, call_id: &str, name: &str, summary: &str, now: Instant) {
        self.close_assistant();
        self.push(CellBody::Tool {
            call_id: call_id.to_string(),
            name: display_text(name),
            summary: display_text(summary).replace('\n', " "),
            started: now,
            outcome: None,
            job: None,
            awaiting: false,
        });
    }

    /// The call waits for an approval (`true`), or was answered and starts now: its timer
    /// counts from then, not from when it asked.
    pub(crate) fn set_awaiting(&mut self, call_id: &str, awaiting: bool, now: Instant) {
        let Some(&i) = self.tools.get(call_id) else { return };
        if let Some(CellBody::Tool { awaiting: a, started, outcome: None, .. }) =
            self.cells.get_mut(i).map(|c| &mut c.body)
        {
            if *a && !awaiting {
                *started = now;
            }
            *a = awaiting;
        }
        self.invalidate(i);
    }

    pub(crate) fn tool_finished(&mut self, call_id: &str, result: ToolOutcome) {
        let Some(&i) = self.tools.get(call_id) else {
            self.push(CellBody::Tool {
                call_id: call_id.to_string(),
                name: "tool".into(),
                summary: String::new(),
                started: Instant::now(),
                outcome: Some(result),
                job: None,
                awaiting: false,
            });
            return;
        };
        if let Some(CellBody::Tool { outcome, .. }) = self.cells.get_mut(i).map(|c| &mut c.body) {
            *outcome = Some(result);
        }
        self.invalidate(i);
    }

    /// A background job ended: the cells of the calls that started or yielded it stop
    /// saying it runs.
    pub(crate) fn job_ended(&mut self, id: &str, fate: JobFate) {
        let hits: Vec<usize> = self
            .cells
            .iter()
            .enumerate()
            .filter(|(_, c)| match &c.body {
                CellBody::Tool { outcome: Some(o), .. } => render::started_job(o).as_deref() == Some(id),
                _ => false,
            })
            .map(|(i, _)| i)
            .collect();
        for i in hits {
            if let Some(CellBody::Tool { job, .. }) = self.cells.get_mut(i).map(|c| &mut c.body) {
                *job = Some(fate);
            }
            self.invalidate(i);
        }
    }

    pub(crate) fn toggle_reasoning(&mut self) {
        self.show_reasoning = !self.show_reasoning;
    }

    /// Rows of cell `i` including its gap row.
    fn gap(&self, i: usize) -> usize {
        if i == 0 {
            return 0;
        }
        let both_tools = self.cells[i].body.is_tool() && self.cells[i - 1].body.is_tool();
        usize::from(!both_tools)
    }

    /// Lay out cell `i` at `width` if its cache is stale; returns its height with the gap.
    pub(crate) fn ensure(&mut self, i: usize, width: u16, theme: &Theme) -> usize {
        let gap = self.gap(i);
        let show = self.show_reasoning;
        let cell = &self.cells[i];
        if let Some(l) = &cell.layout {
            if l.width == width && l.show_reasoning == show && l.lines.is_some() {
                return gap + l.height;
            }
        }
        // A tool cell's first row is drawn live (its spinner); the cache holds what is under it.
        let (lines, height) = if cell.body.is_tool() {
            let lines = wrap_lines(&tool_output_lines(&cell.body, theme, show), width);
            let height = lines.len() + 1;
            (lines, height)
        } else {
            let lines = wrap_lines(&body_lines(&cell.body, theme, show, &mut self.code_cache), width);
            let height = lines.len();
            (lines, height)
        };
        if let Some(CellLayout { lines: Some(old), .. }) = &self.cells[i].layout {
            self.cached_lines = self.cached_lines.saturating_sub(old.len());
        }
        self.cached_lines += lines.len();
        self.cells[i].layout = Some(CellLayout { width, show_reasoning: show, height, lines: Some(lines) });
        gap + height
    }

    /// Height of cell `i` when a cached height for this width exists (lines may be evicted).
    fn height(&mut self, i: usize, width: u16, theme: &Theme) -> usize {
        let show = self.show_reasoning;
        match &self.cells[i].layout {
            Some(l) if l.width == width && l.show_reasoning == show => self.gap(i) + l.height,
            _ => self.ensure(i, width, theme),
        }
    }

    /// The top row when following: enough cells from the bottom to fill `rows`.
    fn bottom_top(&mut self, width: u16, rows: usize, theme: &Theme) -> (usize, usize) {
        let mut acc = 0;
        for i in (0..self.cells.len()).rev() {
            acc += self.height(i, width, theme);
            if acc >= rows {
                return (i, acc - rows);
            }
        }
        (0, 0)
    }

    pub(crate) fn top(&mut self, width: u16, rows: usize, theme: &Theme) -> (usize, usize) {
        match self.scroll {
            Scroll::Follow => self.bottom_top(width, rows, theme),
            Scroll::Anchor { cell, line } => {
                if self.cells.is_empty() {
                    return (0, 0);
                }
                let cell = cell.min(self.cells.len() - 1);
                let h = self.height(cell, width, theme);
                (cell, line.min(h.saturating_sub(1)))
            }
        }
    }

    /// True when fewer than `rows` rows remain from (cell, line) to the end.
    fn fits_from(&mut self, (cell, line): (usize, usize), width: u16, rows: usize, theme: &Theme) -> bool {
        let mut acc = 0usize;
        for i in cell..self.cells.len() {
            acc += self.height(i, width, theme);
            if i == cell {
                acc -= line.min(acc);
            }
            if acc > rows {
                return false;
            }
        }
        true
    }

    pub(crate) fn scroll_up(&mut self, n: usize, width: u16, rows: usize, theme: &Theme) {
        if self.cells.is_empty() {
            return;
        }
        let (mut cell, mut line) = self.top(width, rows, theme);
        if matches!(self.scroll, Scroll::Follow) && self.fits_from((0, 0), width, rows, theme) {
            return;
        }
        let mut n = n;
        while n > 0 {
            if line > 0 {
                let d = n.min(line);
                line -= d;
                n -= d;
            } else if cell > 0 {
                cell -= 1;
                line = self.height(cell, width, theme).saturating_sub(1);
                n -= 1;
            } else {
                break;
            }
        }
        self.scroll = Scroll::Anchor { cell, line };
    }

    pub(crate) fn scroll_down(&mut self, n: usize, width: u16, rows: usize, theme: &Theme) {
        let Scroll::Anchor { .. } = self.scroll else { return };
        let (mut cell, mut line) = self.top(width, rows, theme);
        let mut n = n;
        while n > 0 && cell < self.cells.len() {
            let h = self.height(cell, width, theme);
            let left = h.saturating_sub(line + 1);
            if left >= n {
                line += n;
                n = 0;
            } else if cell + 1 < self.cells.len() {
                n -= left + 1;
                cell += 1;
                line = 0;
            } else {
                line = h.saturating_sub(1);
                n = 0;
            }
        }
        if self.fits_from((cell, line), width, rows, theme) {
            self.follow();
        } else {
            self.scroll = Scroll::Anchor { cell, line };
        }
    }

    /// True when every cell fits in a view of `width`×`rows` (scrolling shows nothing new).
    pub(crate) fn fits(&mut self, width: u16, rows: usize, theme: &Theme) -> bool {
        self.cells.is_empty() || self.fits_from((0, 0), width, rows, theme)
    }

    pub(crate) fn scroll_top(&mut self) {
        if !self.cells.is_empty() {
            self.scroll = Scroll::Anchor { cell: 0, line: 0 };
        }
    }

    pub(crate) fn follow(&mut self) {
        self.scroll = Scroll::Follow;
        self.new_output = false;
    }

    /// Lay out what a view of `width`×`rows` shows and return it, top to bottom. Drops
    /// cached lines of cells far from view when the cache grows past its cap.
    pub(crate) fn prepare(&mut self, width: u16, rows: usize, theme: &Theme) -> Vec<Slice> {
        if self.cells.is_empty() || rows == 0 || width == 0 {
            return Vec::new();
        }
        let (mut cell, mut skip) = self.top(width, rows, theme);
        if matches!(self.scroll, Scroll::Anchor { .. }) && self.fits_from((cell, skip), width, rows, theme) {
            // Nothing below the fold any more (scrolled down, or a resize): follow again.
            self.follow();
            (cell, skip) = self.top(width, rows, theme);
        }
        let mut slices = Vec::new();
        let mut left = rows;
        while left > 0 && cell < self.cells.len() {
            let h = self.ensure(cell, width, theme);
            let take = h.saturating_sub(skip).min(left);
            if take > 0 {
                slices.push(Slice { cell, skip, take });
            }
            left -= take;
            cell += 1;
            skip = 0;
        }
        if self.cached_lines > self.kept_lines + CACHED_LINES_MAX {
            let first = slices.first().map_or(0, |s| s.cell);
            let last = slices.last().map_or(0, |s| s.cell);
            for (i, c) in self.cells.iter_mut().enumerate() {
                if i + 64 < first || i > last + 64 {
                    if let Some(layout) = &mut c.layout {
                        if let Some(lines) = layout.lines.take() {
                            self.cached_lines = self.cached_lines.saturating_sub(lines.len());
                        }
                    }
                }
            }
            self.kept_lines = self.cached_lines;
        }
        slices
    }

    /// The rows of `slice` as lines (the gap row is blank). `now` drives spinners and
    /// running times. A cell without cached lines for `width` is laid out on the spot.
    pub(crate) fn rows(&self, slice: Slice, width: u16, theme: &Theme, now: Instant) -> Vec<Line<'static>> {
        let gap = self.gap(slice.cell);
        let cell = &self.cells[slice.cell];
        let mut rows: Vec<Line<'static>> = Vec::with_capacity(slice.take);
        let body: Vec<Line<'static>>;
        let body_ref: &[Line<'static>] = match (&cell.body, &cell.layout) {
            (CellBody::Tool { .. }, layout) => {
                let mut lines = vec![tool_line(&cell.body, theme, now, usize::from(width))];
                match layout {
                    Some(CellLayout { width: w, show_reasoning: s, lines: Some(cached), .. })
                        if *w == width && *s == self.show_reasoning =>
                    {
                        lines.extend(cached.iter().cloned())
                    }
                    _ => lines.extend(wrap_lines(&tool_output_lines(&cell.body, theme, self.show_reasoning), width)),
                }
                body = lines;
                &body
            }
            (_, Some(CellLayout { width: w, show_reasoning, lines: Some(lines), .. }))
                if *w == width && *show_reasoning == self.show_reasoning =>
            {
                lines
            }
            _ => {
                let mut cache = CodeCache::default();
                body = wrap_lines(&body_lines(&cell.body, theme, self.show_reasoning, &mut cache), width);
                &body
            }
        };
        for row in slice.skip..slice.skip + slice.take {
            if row < gap {
                rows.push(Line::default());
            } else if let Some(line) = body_ref.get(row - gap) {
                rows.push(line.clone());
            }
        }
        rows
    }

    /// Whether any tool cell still runs (for the spinner tick).
    pub(crate) fn has_running_tool(&self) -> bool {
        self.tools
            .values()
            .any(|&i| matches!(self.cells.get(i), Some(Cell { body: CellBody::Tool { outcome: None, .. }, .. })))
    }

    /// Mark every tool cell that never got a result as ended (the turn is over).
    pub(crate) fn end_running_tools(&mut self) {
        for cell in &mut self.cells {
            if let CellBody::Tool { outcome: outcome @ None, started, .. } = &mut cell.body {
                *outcome = Some(ToolOutcome {
                    ok: false,
                    exit_code: None,
                    status: Some(crate::protocol::ToolStatus::Interrupted),
                    duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    result: String::new(),
                });
            }
        }
        self.tools.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn theme() -> Theme {
        Theme::default()
    }

    /// The rows a 40×5 view shows now, as text.
    fn screen(t: &mut Transcript) -> Vec<String> {
        let slices = t.prepare(40, 5, &theme());
        slices.into_iter().flat_map(|s| t.rows(s, 40, &theme(), Instant::now())).map(|l| l.to_string()).collect()
    }

    fn user(t: &mut Transcript, n: usize) {
        for i in 0..n {
            t.push(CellBody::User { text: format!("message {i}"), origin: UserOrigin::Typed, folds: Vec::new() });
        }
    }

    #[test]
    fn follow_shows_the_bottom_and_scrolling_anchors() {
        let mut t = Transcript::default();
        user(&mut t, 10); // 10 cells: first 1 row, others 2 (gap + text) = 19 rows
        let slices = t.prepare(40, 5, &theme());
        assert_eq!(slices.first().map(|s| s.cell), Some(7));
        assert_eq!(slices.iter().map(|s| s.take).sum::<usize>(), 5);
        t.scroll_up(4, 40, 5, &theme());
        assert!(matches!(t.scroll, Scroll::Anchor { .. }));
        t.push(CellBody::User { text: "new".into(), origin: UserOrigin::Typed, folds: Vec::new() });
        assert!(t.new_output);
        t.scroll_down(100, 40, 5, &theme());
        assert_eq!(t.scroll, Scroll::Follow);
        assert!(!t.new_output);
        t.scroll_top();
        let slices = t.prepare(40, 5, &theme());
        assert_eq!(slices[0], Slice { cell: 0, skip: 0, take: 1 });
    }

    #[test]
    fn prepending_older_cells_keeps_the_view_the_open_message_and_live_tools() {
        let mut t = Transcript::default();
        user(&mut t, 10);
        t.tool_started("c1", "terminal", "sleep 5", Instant::now());
        t.append_assistant("streaming");
        t.prepare(40, 5, &theme());
        t.scroll_up(6, 40, 5, &theme());
        let before = t.scroll;
        let Scroll::Anchor { cell, line } = before else { panic!("scrolled: {before:?}") };
        let rows_before = screen(&mut t);
        t.prepend(
            (0..4)
                .map(|i| CellBody::User { text: format!("old {i}"), origin: UserOrigin::Typed, folds: Vec::new() })
                .collect(),
        );
        assert_eq!(t.scroll, Scroll::Anchor { cell: cell + 4, line });
        let rows_after = screen(&mut t);
        assert_eq!(rows_after, rows_before);
        // Live updates still reach their cells.
        t.append_assistant(" more");
        t.tool_finished(
            "c1",
            ToolOutcome { ok: true, exit_code: Some(0), status: None, duration_ms: 5, result: String::new() },
        );
        assert!(!t.has_running_tool());
        assert!(matches!(&t.cells[15].body, CellBody::Assistant { text, .. } if text == "streaming more"));
        assert!(matches!(&t.cells[0].body, CellBody::User { text, .. } if text == "old 0"));
    }

    #[test]
    fn streaming_invalidates_only_the_open_message() {
        let mut t = Transcript::default();
        user(&mut t, 3);
        t.prepare(40, 20, &theme());
        t.append_assistant("hello ");
        t.append_assistant("world");
        assert!(t.cells[0].layout.is_some());
        assert!(t.cells[3].layout.is_none());
        t.finish_assistant("hello world", None);
        assert_eq!(t.cells.len(), 4);
        let slices = t.prepare(40, 20, &theme());
        let last = slices.last().copied().unwrap();
        let rows = t.rows(last, 40, &theme(), Instant::now());
        assert_eq!(rows.last().map(|l| l.to_string()), Some("hello world".to_string()));
    }

    /// A long session followed at the bottom passes every cell through the view once: the
    /// cache of wrapped lines stays a few screens, and scrolling back re-wraps what it shows.
    #[test]
    fn the_line_cache_stays_bounded_as_a_long_session_scrolls_by() {
        let mut t = Transcript::default();
        for i in 0..20_000 {
            t.push(CellBody::User { text: format!("message {i}"), origin: UserOrigin::Typed, folds: Vec::new() });
            t.prepare(40, 30, &theme());
            assert!(t.cached_lines <= 5_000, "{} lines cached after {i} cells", t.cached_lines);
        }
        let total: usize = (0..t.cells.len()).map(|i| t.ensure(i, 40, &theme()) - t.gap(i)).sum();
        assert_eq!(total, 20_000, "every cell keeps its height");
        t.scroll_top();
        let rows = screen(&mut t);
        let shown: Vec<&str> = rows.iter().map(|r| r.trim_start_matches("› ")).collect();
        assert_eq!(shown, ["message 0", "", "message 1", "", "message 2"]);
    }

    fn done(ms: u64) -> ToolOutcome {
        ToolOutcome { ok: true, exit_code: Some(0), status: None, duration_ms: ms, result: String::new() }
    }

    /// Turn `n`: the typed message (stored at seq 10·n), a command and the answer.
    fn stored_turn(t: &mut Transcript, n: i64) -> Option<i64> {
        let text = format!("turn {n}");
        t.push_stored(CellBody::User { text, origin: UserOrigin::Typed, folds: Vec::new() }, Some(10 * n));
        let let_go = t.let_go_of_old();
        t.tool_started(&format!("c{n}"), "terminal", "ls", Instant::now());
        t.tool_finished(&format!("c{n}"), done(1));
        t.append_assistant("done");
        t.finish_assistant("done", None);
        t.prepare(40, 30, &theme());
        let_go
    }

    fn first_text(t: &Transcript) -> String {
        match &t.cells[0].body {
            CellBody::User { text, .. } => text.clone(),
            other => format!("{other:?}"),
        }
    }

    /// A long day followed at the bottom: past `CELLS_MAX` cells the oldest are let go of at
    /// a stored user message, whose seq is where to read them back; a running tool above it
    /// holds them until it ends (and still finds its cell); a view scrolled up keeps them all.
    #[test]
    fn a_long_transcript_lets_go_of_its_oldest_cells_above_a_stored_message_but_not_of_live_work() {
        let mut t = Transcript::default();
        let mut last = None;
        for n in 0..2_000 {
            if let Some(seq) = stored_turn(&mut t, n) {
                last = Some(seq);
                assert_eq!(first_text(&t), format!("turn {}", seq / 10), "the cut is at the stored message");
            }
            assert!(t.cells.len() <= CELLS_MAX + 3, "{} cells after {n} turns", t.cells.len());
        }
        let seq = last.expect("cells were let go of");
        assert!(t.cached_lines <= 5_000);

        // A command of turn 2000 still runs: nothing above it goes, however long it takes.
        t.push_stored(CellBody::User { text: "slow".into(), origin: UserOrigin::Typed, folds: Vec::new() }, Some(1));
        t.tool_started("slow", "terminal", "sleep 600", Instant::now());
        let after: Vec<Option<i64>> = (2_001..2_700).map(|n| stored_turn(&mut t, n)).collect();
        // Once it is older than the newest cells kept (three per turn), nothing goes.
        assert!(after[CELLS_KEPT / 3 + 1..].iter().all(Option::is_none), "{after:?}");
        let cells = t.cells.len();
        assert!(cells > CELLS_MAX + 1_000, "{cells}");
        t.tool_finished("slow", done(600_000));
        assert_eq!(t.cells.len(), cells, "the result reached the running call's cell");
        assert!(!t.has_running_tool());
        let seq_after = stored_turn(&mut t, 2_700).expect("let go once the command ended");
        assert!(seq_after > seq);
        assert!(t.cells.len() <= CELLS_KEPT + 3);

        // Scrolled up to read: nothing goes.
        t.scroll_up(10, 40, 30, &theme());
        for n in 2_701..3_800 {
            assert_eq!(stored_turn(&mut t, n), None);
        }
        assert_eq!(first_text(&t), format!("turn {}", seq_after / 10));
    }

    #[test]
    fn empty_assistant_messages_leave_no_cell() {
        let mut t = Transcript::default();
        t.finish_assistant("", None);
        assert!(t.is_empty());
        t.append_assistant("");
        t.tool_started("c1", "terminal", "ls", Instant::now());
        assert_eq!(t.cells.len(), 1);
    }
}
