//! Where each part of a frame goes: one function of a few facts of the app state, used by
//! the app (to size the transcript) and by the views (to draw).

use ratatui::layout::Rect;

use super::wrap::str_width;

/// Below this size the TUI shows a notice instead of its layout.
pub(crate) const MIN_WIDTH: u16 = 40;
pub(crate) const MIN_HEIGHT: u16 = 10;
/// The side column appears from this width on.
const SIDE_MIN_TOTAL_WIDTH: u16 = 80;
/// Transcript lines are wrapped at most this wide: a 250-column terminal does not make
/// 200-column paragraphs.
pub(crate) const TRANSCRIPT_MAX_WIDTH: u16 = 120;
const INPUT_MAX_LINES: u16 = 6;
pub(crate) const PENDING_MAX_LINES: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Areas {
    /// Transcript and side column together (the log view uses all of it).
    pub(crate) main: Rect,
    pub(crate) transcript: Rect,
    pub(crate) tools: Option<Rect>,
    pub(crate) jobs: Option<Rect>,
    pub(crate) pending: Rect,
    pub(crate) input: Rect,
    pub(crate) status: Rect,
    pub(crate) too_small: bool,
    /// The side column is on screen (wide enough); below that width a focused pane takes
    /// the transcript's place instead.
    pub(crate) side: bool,
}

/// What the layout depends on, taken from the app state (so the app can lay out a frame
/// without depending on the views, and the views without recomputing it differently).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayoutFacts<'a> {
    pub(crate) input_lines: &'a [String],
    pub(crate) pending: usize,
    pub(crate) tools: usize,
    /// The pane that has the focus, if one does: at narrow widths it is drawn where the
    /// transcript goes.
    pub(crate) focused_pane: Option<Pane>,
}

/// The two panes of the side column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pane {
    Tools,
    Jobs,
}

/// Where everything goes in a frame of `area`.
pub(crate) fn layout(area: Rect, app: &LayoutFacts<'_>) -> Areas {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        return Areas { too_small: true, ..Areas::default() };
    }
    let status = Rect::new(area.x, area.bottom() - 1, area.width, 1);
    // Rows the input needs with its soft wrapping, within the cap.
    // Inside the border and its one column of padding on each side.
    let inner_w = usize::from(area.width.saturating_sub(4)).max(1);
    let rows: usize = app.input_lines.iter().map(|l| str_width(l).div_ceil(inner_w).max(1)).sum();
    let input_lines = u16::try_from(rows).unwrap_or(INPUT_MAX_LINES).clamp(1, INPUT_MAX_LINES);
    let input_h = input_lines + 2;
    let input = Rect::new(area.x, status.y.saturating_sub(input_h), area.width, input_h);
    let pending_n = app.pending.min(PENDING_MAX_LINES) + usize::from(app.pending > PENDING_MAX_LINES);
    let pending_h = u16::try_from(pending_n).unwrap_or(0);
    let pending = Rect::new(area.x, input.y.saturating_sub(pending_h), area.width, pending_h);
    let main = Rect::new(area.x, area.y, area.width, pending.y.saturating_sub(area.y));
    if area.width < SIDE_MIN_TOTAL_WIDTH {
        let width = main.width.saturating_sub(2).min(TRANSCRIPT_MAX_WIDTH);
        let transcript = Rect::new(main.x + 1, main.y, width, main.height);
        let (tools, jobs) = match app.focused_pane {
            Some(Pane::Tools) => (Some(main), None),
            Some(Pane::Jobs) => (None, Some(main)),
            None => (None, None),
        };
        return Areas { main, transcript, tools, jobs, pending, input, status, too_small: false, side: false };
    }
    let side_w = (main.width / 3).clamp(30, 50);
    let side_x = main.right() - side_w;
    let width = side_x.saturating_sub(main.x + 2).min(TRANSCRIPT_MAX_WIDTH);
    let transcript = Rect::new(main.x + 1, main.y, width, main.height);
    let wanted = u16::try_from(app.tools * 2 + 2).unwrap_or(u16::MAX);
    let tools_h = wanted.clamp(3, (main.height / 2).max(3)).min(main.height);
    let tools = Rect::new(side_x, main.y, side_w, tools_h);
    let jobs = Rect::new(side_x, main.y + tools_h, side_w, main.height - tools_h);
    Areas {
        main,
        transcript,
        tools: Some(tools),
        jobs: Some(jobs),
        pending,
        input,
        status,
        too_small: false,
        side: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(focused_pane: Option<Pane>) -> LayoutFacts<'static> {
        LayoutFacts { input_lines: &[], pending: 0, tools: 0, focused_pane }
    }

    #[test]
    fn transcript_lines_stop_at_a_readable_width_on_a_wide_terminal() {
        let wide = layout(Rect::new(0, 0, 250, 40), &facts(None));
        assert_eq!(wide.transcript.width, TRANSCRIPT_MAX_WIDTH);
        assert!(wide.side && wide.jobs.is_some());
        let normal = layout(Rect::new(0, 0, 140, 42), &facts(None));
        assert!(normal.transcript.width < TRANSCRIPT_MAX_WIDTH, "{normal:?}");
    }

    #[test]
    fn below_eighty_columns_a_focused_pane_takes_the_transcripts_place() {
        let none = layout(Rect::new(0, 0, 70, 20), &facts(None));
        assert!(!none.side && none.jobs.is_none() && none.tools.is_none());
        let jobs = layout(Rect::new(0, 0, 70, 20), &facts(Some(Pane::Jobs)));
        assert_eq!(jobs.jobs, Some(jobs.main));
        assert!(!jobs.side && jobs.tools.is_none());
    }
}
