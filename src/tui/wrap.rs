//! Word wrapping of styled lines to a width, so the transcript knows every cell's
//! height exactly and can draw only the visible window.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

/// A logical line before wrapping: styled spans plus the indent of continuation rows
/// (a list item's text lines up under its first word).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RLine {
    pub(crate) spans: Vec<Span<'static>>,
    pub(crate) hang: u16,
}

impl RLine {
    pub(crate) fn new(spans: Vec<Span<'static>>) -> RLine {
        RLine { spans, hang: 0 }
    }

    pub(crate) fn plain(text: impl Into<String>, style: Style) -> RLine {
        RLine { spans: vec![Span::styled(text.into(), style)], hang: 0 }
    }

    pub(crate) fn blank() -> RLine {
        RLine::default()
    }

    pub(crate) fn with_hang(mut self, hang: u16) -> RLine {
        self.hang = hang;
        self
    }
}

/// Display width of a string in terminal columns.
pub(crate) fn str_width(s: &str) -> usize {
    s.chars().map(|c| c.width().unwrap_or(0)).sum()
}

/// Wrap one logical line into rows of at most `width` columns. Breaks at spaces; a word
/// longer than a row is split. Always returns at least one row.
pub(crate) fn wrap_line(line: &RLine, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width.max(1));
    let hang = usize::from(line.hang).min(width.saturating_sub(1) / 2);
    let mut rows: Vec<Line<'static>> = Vec::new();
    let mut row = Row::new(0);
    for word in words(&line.spans) {
        let tw: usize = word.pieces.iter().map(|(t, _)| str_width(t)).sum();
        if row.width + tw <= width {
            for (text, style) in &word.pieces {
                row.push(text, *style);
            }
            continue;
        }
        if word.space {
            // A break at a space: the space itself disappears.
            rows.push(row.finish());
            row = Row::new(hang);
            continue;
        }
        if tw <= width - hang && row.width > row.indent {
            rows.push(row.finish());
            row = Row::new(hang);
            for (text, style) in &word.pieces {
                row.push(text, *style);
            }
            continue;
        }
        // Too long for any row (or the row is empty): split by characters.
        for (text, style) in &word.pieces {
            for c in text.chars() {
                let cw = c.width().unwrap_or(0);
                if row.width + cw > width && row.width > row.indent {
                    rows.push(row.finish());
                    row = Row::new(hang);
                }
                let mut buf = [0u8; 4];
                row.push(c.encode_utf8(&mut buf), *style);
            }
        }
    }
    rows.push(row.finish());
    rows
}

/// Wrap many logical lines.
pub fn wrap_lines(lines: &[RLine], width: u16) -> Vec<Line<'static>> {
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        out.extend(wrap_line(line, width));
    }
    out
}

/// Cut a line to `width` columns, ending with `…` when something was cut.
pub(crate) fn truncate_spans(spans: Vec<Span<'static>>, width: usize) -> Line<'static> {
    let total: usize = spans.iter().map(|s| str_width(&s.content)).sum();
    if total <= width {
        return Line::from(spans);
    }
    let mut out = Vec::new();
    let mut used = 0;
    let budget = width.saturating_sub(1);
    for span in spans {
        let mut text = String::new();
        for c in span.content.chars() {
            let cw = c.width().unwrap_or(0);
            if used + cw > budget {
                break;
            }
            used += cw;
            text.push(c);
        }
        let done = used >= budget || text.chars().count() < span.content.chars().count();
        if !text.is_empty() {
            out.push(Span::styled(text, span.style));
        }
        if done {
            break;
        }
    }
    if width > 0 {
        out.push(Span::raw("…"));
    }
    Line::from(out)
}

struct Row {
    spans: Vec<Span<'static>>,
    width: usize,
    indent: usize,
}

impl Row {
    fn new(indent: usize) -> Row {
        let spans = if indent > 0 { vec![Span::raw(" ".repeat(indent))] } else { Vec::new() };
        Row { spans, width: indent, indent }
    }

    fn push(&mut self, text: &str, style: Style) {
        self.width += str_width(text);
        let mergeable = self.spans.len() > usize::from(self.indent > 0);
        if let Some(last) = self.spans.last_mut().filter(|l| mergeable && l.style == style) {
            last.content.to_mut().push_str(text);
            return;
        }
        self.spans.push(Span::styled(text.to_string(), style));
    }

    fn finish(mut self) -> Line<'static> {
        // A row never ends in the space it broke at.
        if self.spans.len() > usize::from(self.indent > 0) {
            if let Some(last) = self.spans.last_mut() {
                let trimmed = last.content.trim_end_matches(' ').len();
                if trimmed < last.content.len() {
                    last.content.to_mut().truncate(trimmed);
                }
            }
        }
        Line::from(self.spans)
    }
}

struct Token<'a> {
    text: &'a str,
    space: bool,
}

/// A run of spaces or a word, possibly made of several styled pieces (`**bold**:` is one
/// word, so it never breaks between the bold part and the colon).
struct Word<'a> {
    pieces: Vec<(&'a str, Style)>,
    space: bool,
}

fn words<'a>(spans: &'a [Span<'static>]) -> Vec<Word<'a>> {
    let mut out: Vec<Word<'a>> = Vec::new();
    for span in spans {
        for token in tokens(&span.content) {
            match out.last_mut() {
                Some(last) if last.space == token.space => last.pieces.push((token.text, span.style)),
                _ => out.push(Word { pieces: vec![(token.text, span.style)], space: token.space }),
            }
        }
    }
    out
}

/// Split into runs of spaces and runs of non-spaces.
fn tokens(s: &str) -> impl Iterator<Item = Token<'_>> {
    let mut rest = s;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        let space = first == ' ';
        let end = rest.find(|c: char| (c == ' ') != space).unwrap_or(rest.len());
        let (tok, tail) = rest.split_at(end);
        rest = tail;
        Some(Token { text: tok, space })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn texts(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn wraps_at_spaces_and_splits_long_words() {
        let line = RLine::plain("the quick brown fox jumps", Style::default());
        assert_eq!(texts(&wrap_line(&line, 10)), vec!["the quick", "brown fox", "jumps"]);
        let long = RLine::plain("abcdefghijklmnop", Style::default());
        assert_eq!(texts(&wrap_line(&long, 6)), vec!["abcdef", "ghijkl", "mnop"]);
        assert_eq!(texts(&wrap_line(&RLine::blank(), 6)), vec![""]);
    }

    #[test]
    fn a_word_split_across_styles_wraps_as_one() {
        let bold = Style::default().add_modifier(ratatui::style::Modifier::BOLD);
        let line = RLine::new(vec![Span::raw("type a "), Span::styled("message", bold), Span::raw(": it goes")]);
        assert_eq!(texts(&wrap_line(&line, 12)), vec!["type a", "message: it", "goes"]);
        // "message" alone would end the first row exactly; with its colon it moves as one.
        assert_eq!(texts(&wrap_line(&line, 14)), vec!["type a", "message: it", "goes"]);
    }

    #[test]
    fn continuation_rows_hang() {
        let line = RLine::plain("• one two three four", Style::default()).with_hang(2);
        assert_eq!(texts(&wrap_line(&line, 10)), vec!["• one two", "  three", "  four"]);
    }

    #[test]
    fn wide_characters_count_double() {
        let line = RLine::plain("日本語のテキスト", Style::default());
        assert_eq!(texts(&wrap_line(&line, 6)), vec!["日本語", "のテキ", "スト"]);
    }

    #[test]
    fn a_row_holds_exactly_its_width() {
        let line = RLine::plain("abc def", Style::default());
        assert_eq!(texts(&wrap_line(&line, 7)), vec!["abc def"]);
        assert_eq!(texts(&wrap_line(&line, 6)), vec!["abc", "def"]);
        assert_eq!(texts(&wrap_line(&RLine::plain("abcdef", Style::default()), 6)), vec!["abcdef"]);
        // Width 0 is treated as 1.
        assert_eq!(texts(&wrap_line(&RLine::plain("ab", Style::default()), 0)), vec!["a", "b"]);
    }

    #[test]
    fn a_word_longer_than_a_row_fills_the_row_it_starts_on() {
        let line = RLine::plain("ab cdefghij", Style::default());
        assert_eq!(texts(&wrap_line(&line, 6)), vec!["ab cde", "fghij"]);
        // A word that fits a fresh row moves there whole instead.
        let line = RLine::plain("ab cdef", Style::default());
        assert_eq!(texts(&wrap_line(&line, 6)), vec!["ab", "cdef"]);
    }

    #[test]
    fn a_word_that_fits_under_the_hang_moves_whole_and_a_longer_one_is_split() {
        // Width 10, hang 2: 8 columns are left on a continuation row.
        let fits = RLine::plain("• abcdefgh", Style::default()).with_hang(2);
        assert_eq!(texts(&wrap_line(&fits, 10)), vec!["• abcdefgh"]);
        let fits = RLine::plain("• x abcdefgh", Style::default()).with_hang(2);
        assert_eq!(texts(&wrap_line(&fits, 10)), vec!["• x", "  abcdefgh"]);
        let long = RLine::plain("• x abcdefghi", Style::default()).with_hang(2);
        assert_eq!(texts(&wrap_line(&long, 10)), vec!["• x abcdef", "  ghi"]);
    }

    #[test]
    fn the_hang_is_capped_at_half_the_row() {
        let line = RLine::plain("aaaa bbbb cccc", Style::default()).with_hang(8);
        assert_eq!(texts(&wrap_line(&line, 6)), vec!["aaaa", "  bbbb", "  cccc"]);
    }

    #[test]
    fn wide_characters_never_straddle_a_row_end() {
        let line = RLine::plain("a日本", Style::default());
        assert_eq!(texts(&wrap_line(&line, 4)), vec!["a日", "本"]);
        assert_eq!(str_width("a日本"), 5);
        assert_eq!(str_width("e\u{301}"), 1, "a combining mark takes no column");
    }

    #[test]
    fn rows_keep_styles_apart_and_the_indent_as_its_own_span() {
        let bold = Style::default().add_modifier(ratatui::style::Modifier::BOLD);
        let line = RLine::new(vec![Span::raw("• one "), Span::raw("two "), Span::styled("three", bold)]).with_hang(2);
        let rows = wrap_line(&line, 9);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].spans, vec![Span::raw("• one two")]);
        assert_eq!(rows[1].spans, vec![Span::raw("  "), Span::styled("three", bold)]);
        let line = RLine::new(vec![Span::raw("• one two "), Span::raw("three")]).with_hang(2);
        assert_eq!(wrap_line(&line, 9)[1].spans, vec![Span::raw("  "), Span::raw("three")]);
    }

    #[test]
    fn wrapping_many_lines_keeps_their_order_and_blank_lines() {
        let lines =
            [RLine::plain("one two", Style::default()), RLine::blank(), RLine::plain("three", Style::default())];
        assert_eq!(texts(&wrap_lines(&lines, 4)), vec!["one", "two", "", "thre", "e"]);
        assert!(wrap_lines(&[], 4).is_empty());
    }

    #[test]
    fn truncation_counts_columns_across_spans_and_wide_characters() {
        let bold = Style::default().add_modifier(ratatui::style::Modifier::BOLD);
        let line = truncate_spans(vec![Span::raw("abc"), Span::styled("def", bold)], 5);
        assert_eq!(line.spans, vec![Span::raw("abc"), Span::styled("d", bold), Span::raw("…")]);
        let line = truncate_spans(vec![Span::raw("abcd"), Span::raw("ef")], 5);
        assert_eq!(texts(&[line]), vec!["abcd…"]);
        let line = truncate_spans(vec![Span::raw("日本語")], 5);
        assert_eq!(texts(&[line]), vec!["日本…"]);
        let line = truncate_spans(vec![Span::raw("abcdef")], 6);
        assert_eq!(texts(&[line]), vec!["abcdef"]);
        let line = truncate_spans(vec![Span::raw("abc")], 0);
        assert_eq!(texts(&[line]), vec![""]);
        let line = truncate_spans(vec![Span::raw("abc")], 1);
        assert_eq!(texts(&[line]), vec!["…"]);
    }

    #[test]
    fn truncation_adds_an_ellipsis() {
        let line = truncate_spans(vec![Span::raw("hello "), Span::raw("world")], 8);
        assert_eq!(texts(&[line]), vec!["hello w…"]);
        let line = truncate_spans(vec![Span::raw("short")], 8);
        assert_eq!(texts(&[line]), vec!["short"]);
    }

    /// A span cut before a wide character that no longer fits ends the line there: a narrow
    /// character of the next span must not slip into the column the wide one left.
    #[test]
    fn truncation_stops_at_the_span_it_cut() {
        let line = truncate_spans(vec![Span::raw("ab日"), Span::raw("c")], 4);
        assert_eq!(texts(&[line]), vec!["ab…"]);
    }

    /// A character wider than the whole row goes on the row it starts (overflowing it), with
    /// no empty row before it.
    #[test]
    fn a_character_wider_than_the_row_gets_no_empty_row_before_it() {
        let line = RLine::plain("日本", Style::default());
        assert_eq!(texts(&wrap_line(&line, 1)), vec!["日", "本"]);
    }
}
