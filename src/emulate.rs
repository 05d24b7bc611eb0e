//! Job output as a terminal shows it (DESIGN §4c).
//!
//! A job's output is fed through a terminal emulator (the `vt100` crate): a progress bar
//! redrawn a thousand times with `\r`, or a multi-line display redrawn with cursor-up and
//! erase-line (docker, npm, pip, cargo), collapses to what a terminal would show at the end.
//! Lines that scroll off the emulator's screen are collected in order as they go, so the
//! result is every line the terminal ever scrolled past plus its final screen. Colours are
//! kept as SGR sequences by [`styled`] (the log view) and dropped by [`plain`] (the model).
//! The raw log on disk is never touched: this runs on what is read from it.

use std::num::NonZeroU16;

use vt100::capture::{BasicFormattedCaptureRange, BasicFormattedCaptureState, RowContents};

/// Rows a redraw can reach back with cursor-up (taller progress displays are rare).
const ROWS: u16 = 64;
/// Columns before a line wraps; wrapped rows are joined again, so this only bounds the
/// memory of the screen.
const COLS: u16 = 256;
/// Bytes fed to the emulator per call (bounds the work between collections).
const FEED_CHUNK: usize = 64 * 1024;

/// What the model sees of job output: escape sequences applied, then dropped.
pub fn plain(text: &str) -> String {
    let styled = styled(text);
    vt100::capture::basic_formatted_to_plain(&styled).collect()
}

/// What the log view shows of job output: escape sequences applied, colours kept as
/// SGR sequences (every other sequence is gone).
pub fn styled(text: &str) -> String {
    // vt100 drops U+FFFD, but it is how invalid UTF-8 in the output shows: carry it
    // through as a private-use character (width 1, like it).
    let carried;
    let text = if text.contains(REPLACEMENT) {
        carried = text.replace(REPLACEMENT, CARRIED);
        &carried
    } else {
        text
    };
    let mut term = Emulator::new();
    term.feed(text.as_bytes());
    let out = term.finish();
    if out.contains(CARRIED) {
        out.replace(CARRIED, REPLACEMENT)
    } else {
        out
    }
}

const REPLACEMENT: &str = "\u{FFFD}";
const CARRIED: &str = "\u{10FFFD}";

/// Collects each row as it scrolls off the top of the screen.
struct Collector {
    out: String,
    state: BasicFormattedCaptureState,
}

impl vt100::Callbacks for Collector {
    fn on_scroll(&mut self, contents: RowContents<'_>, _alternate_screen: bool) {
        // Writing into a String cannot fail.
        let _ = contents.write_formatted_basic(&mut self.out, &mut self.state);
    }
}

/// A terminal fed with one job's output.
pub struct Emulator {
    parser: vt100::Parser<Collector>,
    /// The last byte fed was `\n`: the text keeps its final newline.
    ends_with_newline: bool,
}

impl Default for Emulator {
    fn default() -> Self {
        Emulator::new()
    }
}

impl Emulator {
    pub fn new() -> Emulator {
        let collector = Collector { out: String::new(), state: BasicFormattedCaptureState::new() };
        Emulator {
            parser: vt100::Parser::new_with_callbacks(nonzero(ROWS), nonzero(COLS), 0, collector),
            ends_with_newline: false,
        }
    }

    /// Feed raw output. A pipe has no tty to turn `\n` into `\r\n` (the `onlcr` a
    /// terminal's line discipline applies), so that is done here.
    pub fn feed(&mut self, bytes: &[u8]) {
        if let Some(&last) = bytes.last() {
            self.ends_with_newline = last == b'\n';
        }
        let mut buf = Vec::with_capacity(FEED_CHUNK + FEED_CHUNK / 8);
        for chunk in bytes.chunks(FEED_CHUNK) {
            buf.clear();
            for &b in chunk {
                if b == b'\n' {
                    buf.push(b'\r');
                }
                buf.push(b);
            }
            self.parser.process(&buf);
        }
    }

    /// Every line, in order: those that scrolled off, then the final screen without its
    /// trailing blank rows (and the final newline when the output ended with one).
    pub fn finish(mut self) -> String {
        let (screen, collector) = self.parser.screen_and_callbacks_mut();
        let _ = screen
            .write_contents_formatted_basic(&mut collector.out, BasicFormattedCaptureRange::Full(&mut collector.state));
        let mut out = std::mem::take(&mut collector.out);
        trim_blank_tail(&mut out);
        if self.ends_with_newline && !out.is_empty() {
            out.push('\n');
        }
        out
    }
}

/// How a run of cells looks: the attributes a cell of the emulated terminal carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Look {
    pub fg: vt100::Color,
    pub bg: vt100::Color,
    pub bold: bool,
    pub dim: bool,
    pub italic: bool,
    pub underline: bool,
    pub inverse: bool,
}

impl Look {
    fn of(cell: &vt100::Cell) -> Look {
        Look {
            fg: cell.fgcolor(),
            bg: cell.bgcolor(),
            bold: cell.bold(),
            dim: cell.dim(),
            italic: cell.italic(),
            underline: cell.underline(),
            inverse: cell.inverse(),
        }
    }
}

/// Neighbouring cells of one line that look the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub text: String,
    pub look: Look,
}

/// Rows kept in the emulator's scrollback before they are read out as cells: what a
/// read-out costs in memory (32 bytes a cell) is bounded by this, whatever the output.
const SCROLLBACK: usize = 1024;
/// Bytes fed between read-outs: at most one row scrolls per byte of text, so plain
/// output can never push a row out of the scrollback unread.
const DISPLAY_CHUNK: usize = SCROLLBACK / 2;

/// What the log view shows of job output, read from the emulator's cells: the lines of
/// [`styled`], each as runs of text with how they look. One parser (vt100) on the way from
/// the bytes to the screen; no escape sequence is written or read again.
pub fn styled_lines(text: &str) -> Vec<Vec<Run>> {
    let carried;
    let text = if text.contains(REPLACEMENT) {
        carried = text.replace(REPLACEMENT, CARRIED);
        &carried
    } else {
        text
    };
    let mut parser = vt100::Parser::new_with_callbacks(nonzero(ROWS), nonzero(COLS), SCROLLBACK, Uncounted);
    let mut rows: Vec<(Vec<Run>, bool)> = Vec::new();
    let mut buf = Vec::with_capacity(DISPLAY_CHUNK * 2);
    for chunk in text.as_bytes().chunks(DISPLAY_CHUNK) {
        buf.clear();
        for &b in chunk {
            // No `onlcr` on a pipe (see `Emulator::feed`).
            if b == b'\n' {
                buf.push(b'\r');
            }
            buf.push(b);
        }
        parser.process(&buf);
        if parser.screen().scrollback_len() > SCROLLBACK - DISPLAY_CHUNK {
            read_scrollback(parser.screen_mut(), &mut rows);
        }
    }
    let screen = parser.screen_mut();
    read_scrollback(screen, &mut rows);
    for r in 0..ROWS {
        rows.push((row_runs(screen, r), screen.row_wrapped(r)));
    }
    let mut lines: Vec<Vec<Run>> = Vec::new();
    let mut continues = false;
    for (runs, wrapped) in rows {
        match lines.last_mut() {
            Some(line) if continues => append_runs(line, runs),
            _ => lines.push(runs),
        }
        continues = wrapped;
    }
    // The unused rows of the screen, and the padding of the last row, are not output.
    while lines.last().is_some_and(|l| l.iter().all(|r| r.text.trim().is_empty())) {
        lines.pop();
    }
    if let Some(last) = lines.last_mut() {
        while let Some(run) = last.last_mut() {
            let kept = run.text.trim_end_matches(' ').len();
            run.text.truncate(kept);
            if !run.text.is_empty() {
                break;
            }
            last.pop();
        }
    }
    for run in lines.iter_mut().flatten() {
        if run.text.contains(CARRIED) {
            run.text = run.text.replace(CARRIED, REPLACEMENT);
        }
    }
    lines
}

/// Rows pushed out of the scrollback unread go nowhere: only a flood of scroll-up escapes
/// can do it (plain text is read out first), and what they push out is blank.
struct Uncounted;

impl vt100::Callbacks for Uncounted {}

/// Every row in the scrollback, oldest first, as runs; then the scrollback is emptied.
fn read_scrollback(screen: &mut vt100::Screen, rows: &mut Vec<(Vec<Run>, bool)>) {
    let len = screen.scrollback_len();
    let mut first = 0;
    while first < len {
        // With the view scrolled back by `len - first` rows, row `first` is at the top.
        screen.set_scrollback(len - first);
        let n = (len - first).min(usize::from(ROWS));
        for r in 0..n as u16 {
            rows.push((row_runs(screen, r), screen.row_wrapped(r)));
        }
        first += n;
    }
    screen.clear_scrollback();
}

/// One visible row as runs: cells never written stay out at the end and are plain
/// spaces between written ones; the second half of a wide character is skipped.
fn row_runs(screen: &vt100::Screen, row: u16) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut blank = 0;
    for col in 0..COLS {
        let Some(cell) = screen.cell(row, col) else { break };
        if cell.is_wide_continuation() {
            continue;
        }
        let look = Look::of(cell);
        if !cell.has_contents() && look == Look::default() {
            blank += 1;
            continue;
        }
        if blank > 0 {
            push_text(&mut runs, &" ".repeat(std::mem::take(&mut blank)), Look::default());
        }
        push_text(&mut runs, if cell.has_contents() { cell.contents() } else { " " }, look);
    }
    runs
}

fn push_text(runs: &mut Vec<Run>, text: &str, look: Look) {
    match runs.last_mut() {
        Some(last) if last.look == look => last.text.push_str(text),
        _ => runs.push(Run { text: text.to_string(), look }),
    }
}

fn append_runs(line: &mut Vec<Run>, runs: Vec<Run>) {
    for run in runs {
        push_text(line, &run.text, run.look);
    }
}

/// The lines of a stream as they are completed, each as a terminal shows it (escape
/// sequences applied, colours dropped): what watch patterns are matched against.
///
/// A one-row terminal: each line feed scrolls the row off, and that row (with the rows a
/// long line wrapped into before it, joined again) is a finished line. `\r` rewrites,
/// erase-line and colours apply within a line; cursor-up redraws of several lines give
/// each redrawn line in turn (what [`plain`] collapses is the final state of a whole
/// window). Memory is one row, whatever the stream.
pub(crate) struct LineFeed {
    parser: vt100::Parser<LineCollector>,
    /// Nothing of the current line has been fed yet (its row is blank).
    at_line_start: bool,
}

#[derive(Default)]
struct LineCollector {
    /// Rows of the line being written that already scrolled off (it wrapped).
    current: String,
    /// The row scrolling off now is scrolled by a line feed: it ends a line.
    line_feed: bool,
    done: Vec<String>,
}

impl vt100::Callbacks for LineCollector {
    fn on_scroll(&mut self, contents: RowContents<'_>, _alternate_screen: bool) {
        let mut row = String::new();
        let _ = contents.write_formatted_basic(&mut row, &mut BasicFormattedCaptureState::new());
        self.current.extend(vt100::capture::basic_formatted_to_plain(&row));
        if self.line_feed {
            let line = std::mem::take(&mut self.current);
            self.done.push(uncarry(line.trim_end()));
        }
    }
}

impl Default for LineFeed {
    fn default() -> Self {
        LineFeed::new()
    }
}

impl LineFeed {
    pub(crate) fn new() -> LineFeed {
        LineFeed {
            parser: vt100::Parser::new_with_callbacks(nonzero(1), nonzero(COLS), 0, LineCollector::default()),
            at_line_start: true,
        }
    }

    /// Feed output; returns the lines it finished, in order.
    pub(crate) fn feed(&mut self, text: &str) -> Vec<String> {
        let carried;
        let text = if text.contains(REPLACEMENT) {
            carried = text.replace(REPLACEMENT, CARRIED);
            &carried
        } else {
            text
        };
        for piece in text.split_inclusive('\n') {
            match piece.strip_suffix('\n') {
                // A whole line of plain text shows as itself: no terminal needed (most
                // lines of a flood), which keeps a watched job's output cheap to follow.
                Some(line) if self.at_line_start && is_plain(line.strip_suffix('\r').unwrap_or(line)) => {
                    let line = line.strip_suffix('\r').unwrap_or(line);
                    self.parser.callbacks_mut().done.push(uncarry(line.trim_end()));
                }
                Some(line) => {
                    self.parser.process(line.as_bytes());
                    // A pipe has no `onlcr`: the line feed returns the carriage too.
                    self.parser.callbacks_mut().line_feed = true;
                    self.parser.process(b"\r\n");
                    self.parser.callbacks_mut().line_feed = false;
                    self.at_line_start = true;
                }
                None => {
                    self.parser.process(piece.as_bytes());
                    self.at_line_start = false;
                }
            }
        }
        std::mem::take(&mut self.parser.callbacks_mut().done)
    }

    /// The line being written (no line feed yet), as it shows now; "" when there is none.
    pub(crate) fn pending(&self) -> String {
        let row = self.parser.screen().contents();
        let mut line = self.parser.callbacks().current.clone();
        line.push_str(&row);
        uncarry(line.trim_end())
    }
}

/// No control character (C0, DEL, C1) in `line`: a terminal shows it as it is.
fn is_plain(line: &str) -> bool {
    line.bytes().all(|b| b >= 0x20 && b != 0x7f) && !line.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c))
}

fn uncarry(text: &str) -> String {
    if text.contains(CARRIED) {
        text.replace(CARRIED, REPLACEMENT)
    } else {
        text.to_string()
    }
}

fn nonzero(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

/// Drop trailing lines with no visible text (the unused rows of the screen), keeping any
/// style reset that closes the last real line.
fn trim_blank_tail(out: &mut String) {
    loop {
        let start = out.rfind('\n').map_or(0, |i| i + 1);
        let last = &out[start..];
        let visible = vt100::capture::basic_formatted_to_plain(last).any(|piece| !piece.trim().is_empty());
        if visible || out.is_empty() {
            break;
        }
        out.truncate(start.saturating_sub(1));
        if start == 0 {
            break;
        }
    }
    // Trailing blanks on the last row are padding, not output.
    let trimmed = out.trim_end_matches(' ').len();
    out.truncate(trimmed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn plain_lines_pass_through() {
        assert_eq!(plain("one\ntwo\n"), "one\ntwo\n");
        assert_eq!(plain("one\ntwo"), "one\ntwo");
        assert_eq!(plain("a\n\nb"), "a\n\nb");
        assert_eq!(plain(""), "");
    }

    #[test]
    fn a_carriage_return_progress_bar_is_one_line() {
        let mut raw = String::new();
        for pct in 0..=100 {
            raw.push_str(&format!("\rDownloading {pct:3}% [{}]", "#".repeat(pct / 5)));
        }
        raw.push_str("\ndone\n");
        assert_eq!(plain(&raw), format!("Downloading 100% [{}]\ndone\n", "#".repeat(20)));
    }

    #[test]
    fn crlf_and_lone_cr_mix_like_a_terminal() {
        assert_eq!(plain("a\r\nb\r\n"), "a\nb\n");
        // A shorter rewrite leaves the end of the longer line, as a terminal does.
        assert_eq!(plain("12345\rab\n"), "ab345\n");
        // Erase-line after the return clears it.
        assert_eq!(plain("12345\r\x1b[Kab\n"), "ab\n");
    }

    #[test]
    fn a_multi_line_display_redrawn_with_cursor_up_collapses() {
        // Two progress lines redrawn 300 times the way docker and cargo draw them.
        let mut raw = String::from("Pulling layers\n");
        for i in 0..300 {
            if i > 0 {
                raw.push_str("\x1b[2A");
            }
            raw.push_str(&format!("\x1b[2Klayer a: {i}/299\n\x1b[2Klayer b: {}/299\n", i / 2));
        }
        raw.push_str("Pull complete\n");
        let out = plain(&raw);
        assert_eq!(out, "Pulling layers\nlayer a: 299/299\nlayer b: 149/299\nPull complete\n");
        assert!(raw.len() > 8_000, "the raw stream is {} bytes", raw.len());
    }

    /// Progress displays recorded from real programs with `script`
    /// (tests/fixtures/progress/README.md): the model gets each display's final state.
    #[test]
    fn recorded_progress_displays_collapse_to_their_final_state() {
        let fixture = |name: &str| -> String {
            let path = format!("{}/tests/fixtures/progress/{name}", env!("CARGO_MANIFEST_DIR"));
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        // docker-pull style: three coloured layer lines redrawn 20 times (cursor-up, erase-line).
        let raw = fixture("docker-style-layers.typescript");
        assert_eq!(raw.matches("\x1b[3A").count(), 20, "the recording redraws");
        let out = plain(&raw);
        assert_eq!(
            out,
            "Pulling from library/demo\na1b2c3: Pull complete\nd4e5f6: Pull complete\n0718ab: Pull complete\n\
             Status: Downloaded newer image for demo:latest\n"
        );
        assert!(out.len() * 10 < raw.len(), "{} of {} characters", out.len(), raw.len());
        // curl -#: one bar redrawn with \r, every state the same width.
        let raw = fixture("curl-progress-bar.typescript");
        let states: Vec<&str> = raw.trim_end().split('\r').filter(|s| !s.is_empty()).collect();
        assert!(states.len() > 20, "{} states", states.len());
        let last = states.last().unwrap();
        assert!(last.starts_with("####") && last.ends_with("100.0%"), "{last:?}");
        assert_eq!(plain(&raw), format!("{last}\n"));
        // curl's meter: two header lines kept, one line redrawn with \r.
        let raw = fixture("curl-meter.typescript");
        let header: Vec<&str> = raw.split("\r\n").take(2).collect();
        let last = raw.trim_end().rsplit('\r').next().unwrap();
        assert!(last.starts_with("100 ") && header[0].contains("% Total"), "{last:?}");
        assert_eq!(plain(&raw), format!("{}\n{}\n{last}\n", header[0], header[1]));
    }

    #[test]
    fn colours_stay_in_the_styled_text_and_go_from_the_plain_text() {
        let raw = "\x1b[31merror\x1b[0m: bad\nok\n";
        assert_eq!(plain(raw), "error: bad\nok\n");
        let styled = styled(raw);
        assert!(styled.contains("\x1b[31m"), "{styled:?}");
        assert!(styled.contains("error"));
    }

    #[test]
    fn other_escape_sequences_are_dropped() {
        // OSC 52 (clipboard), a title and a screen clear never reach the model.
        let raw = "\x1b]52;c;ZXZpbA==\x07\x1b]0;title\x07visible\n";
        assert_eq!(plain(raw), "visible\n");
    }

    #[test]
    fn lines_longer_than_the_screen_stay_whole() {
        let long = "x".repeat(3 * COLS as usize + 7);
        assert_eq!(plain(&format!("{long}\nend\n")), format!("{long}\nend\n"));
    }

    #[test]
    fn a_flood_keeps_every_line_in_order() {
        let raw: String = (0..10_000).map(|i| format!("line {i}\n")).collect();
        let out = plain(&raw);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 10_000);
        assert_eq!(lines[0], "line 0");
        assert_eq!(lines[5_000], "line 5000");
        assert_eq!(lines[9_999], "line 9999");
    }

    #[test]
    fn output_split_anywhere_gives_the_same_result() {
        let raw = "\x1b[1mbold\x1b[0m\r\x1b[Kover\nnext é line\n";
        let whole = plain(raw);
        for cut in 0..raw.len() {
            let mut term = Emulator::new();
            term.feed(&raw.as_bytes()[..cut]);
            term.feed(&raw.as_bytes()[cut..]);
            let styled = term.finish();
            let parts: String = vt100::capture::basic_formatted_to_plain(&styled).collect();
            assert_eq!(parts, whole, "cut at {cut}");
        }
    }

    #[test]
    fn invalid_utf8_stays_visible_as_the_replacement_character() {
        assert_eq!(plain("a\u{FFFD}b\n"), "a\u{FFFD}b\n");
    }

    #[test]
    fn tabs_become_spaces_to_the_next_stop() {
        assert_eq!(plain("a\tb\n"), "a       b\n");
    }

    #[test]
    fn a_line_feed_gives_each_line_when_it_is_finished() {
        let mut feed = LineFeed::new();
        assert_eq!(feed.feed("one\ntw"), vec!["one".to_string()]);
        assert_eq!(feed.pending(), "tw");
        assert_eq!(feed.feed("o\n"), vec!["two".to_string()]);
        assert_eq!(feed.pending(), "");
        // Rewrites, erase-line and colours apply within a line.
        let lines = feed.feed("50%\r\x1b[K\x1b[32mREADY\x1b[0m on :80\r\nbar\r12\n\tx\n");
        assert_eq!(lines, vec!["READY on :80".to_string(), "12r".to_string(), "        x".to_string()]);
        // A cursor-up redraw gives each redrawn line in turn.
        let lines = feed.feed("a: 1\nb: 1\n\x1b[2A\x1b[2Ka: 2\n\x1b[2Kb: 2\n");
        assert_eq!(lines, vec!["a: 1", "b: 1", "a: 2", "b: 2"]);
        // Plain lines (with or without \r before the line feed) skip the terminal.
        assert_eq!(feed.feed("plain \u{FFFD} one  \r\nplain two\n"), vec!["plain \u{FFFD} one", "plain two"]);
        // A long line wraps on the screen and comes back whole; U+FFFD stays.
        let long = format!("{}\u{FFFD}end", "y".repeat(3 * COLS as usize));
        assert_eq!(feed.feed(&format!("{long}\n")), vec![long.clone()]);
        assert_eq!(feed.feed(""), Vec::<String>::new());
    }

    #[test]
    fn a_line_feed_split_anywhere_gives_the_same_lines() {
        let raw = "\x1b[1mbold\x1b[0m\r\x1b[Kover\nnext é line\nlast";
        for cut in 0..=raw.len() {
            if !raw.is_char_boundary(cut) {
                continue;
            }
            let mut feed = LineFeed::new();
            let mut lines = feed.feed(&raw[..cut]);
            lines.extend(feed.feed(&raw[cut..]));
            assert_eq!(lines, vec!["over", "next é line"], "cut at {cut}");
            assert_eq!(feed.pending(), "last");
        }
    }

    /// The lines of `styled_lines` as plain text, for comparing with `plain`.
    fn texts(lines: &[Vec<Run>]) -> Vec<String> {
        lines.iter().map(|l| l.iter().map(|r| r.text.as_str()).collect()).collect()
    }

    #[test]
    fn cells_keep_colours_bold_and_the_rest_as_runs() {
        let lines = styled_lines(
            "\x1b[32m   Compiling\x1b[0m x\n\x1b[1;33mwarning\x1b[0m: \x1b[4;3;7;38;5;208;48;2;1;2;3mu\x1b[0m\n",
        );
        let green = Look { fg: vt100::Color::Idx(2), ..Look::default() };
        let bold_yellow = Look { fg: vt100::Color::Idx(3), bold: true, ..Look::default() };
        let odd = Look {
            fg: vt100::Color::Idx(208),
            bg: vt100::Color::Rgb(1, 2, 3),
            italic: true,
            underline: true,
            inverse: true,
            ..Look::default()
        };
        let run = |text: &str, look| Run { text: text.into(), look };
        assert_eq!(
            lines,
            vec![
                vec![run("   Compiling", green), run(" x", Look::default())],
                vec![run("warning", bold_yellow), run(": ", Look::default()), run("u", odd)],
            ]
        );
    }

    #[test]
    fn styled_lines_show_what_plain_shows() {
        let long = "x".repeat(600);
        let many: String = (0..3000).map(|i| format!("\x1b[3{}mline {i}\x1b[0m\n", i % 8)).collect();
        for text in [
            "a\rb\n".to_string(),
            "10%\r\x1b[31m100%\x1b[0m\ndone".to_string(),
            "one\ntwo\n\x1b[1A\x1b[2Kthree\n".to_string(),
            format!("{long}\nend"),
            many,
            "bad \u{FFFD} byte\n\n\n".to_string(),
            "wide 漢字 and\ttab\n".to_string(),
        ] {
            let want: Vec<String> = plain(&text).lines().map(str::to_string).collect();
            assert_eq!(texts(&styled_lines(&text)), want, "{text:?}");
        }
    }
}
