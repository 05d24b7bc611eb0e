//! Text utilities shared by the engine and the TUI: removing terminal escape sequences
//! and capping tool output for the model.

/// Remove ANSI/VT escape sequences (CSI, OSC, DCS, …) and other control characters
/// except `\n` and `\t`. `\r\n` becomes `\n`; a lone `\r` starts the line again, as a
/// terminal would show it.
pub fn strip_ansi(input: &str) -> String {
    let mut performer = Strip { out: String::with_capacity(input.len()), line_start: 0, after_cr: false };
    let mut parser = vte::Parser::new();
    parser.advance(&mut performer, input.as_bytes());
    performer.out
}

struct Strip {
    out: String,
    line_start: usize,
    /// A `\r` was seen: the next printed text replaces the current line (progress bars).
    after_cr: bool,
}

impl vte::Perform for Strip {
    fn print(&mut self, c: char) {
        if self.after_cr {
            self.out.truncate(self.line_start);
            self.after_cr = false;
        }
        self.out.push(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                // A `\r` right before `\n` leaves the line as it was.
                self.after_cr = false;
                self.out.push('\n');
                self.line_start = self.out.len();
            }
            b'\t' => self.out.push('\t'),
            b'\r' => self.after_cr = true,
            _ => {}
        }
    }
}

/// Cap text at `max_chars` characters: the first 40% and the last 60%, with a marker
/// saying how much was left out (DESIGN §4a).
pub fn truncate_for_model(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_string();
    }
    let head_n = max_chars * 2 / 5;
    let tail_n = max_chars - head_n;
    let omitted = total - head_n - tail_n;
    let head: String = text.chars().take(head_n).collect();
    let tail: String = text.chars().skip(total - tail_n).collect();
    format!("{head}\n\n... [OUTPUT TRUNCATED - {omitted} chars omitted out of {total} total] ...\n\n{tail}")
}

/// The last `n` characters of `text`.
pub fn tail_chars(text: &str, n: usize) -> &str {
    let count = text.chars().count();
    if count <= n {
        return text;
    }
    let skip = count - n;
    let idx = text.char_indices().nth(skip).map(|(i, _)| i).unwrap_or(0);
    &text[idx..]
}

/// Text from a model or a tool, made safe to hand to ratatui (DESIGN §9): every escape
/// sequence removed (OSC 52 clipboard writes, titles, cursor movement, screen clears; an
/// OSC 8 hyperlink keeps its text), other control characters removed, tabs expanded to the
/// next multiple of 8 columns, and `\r` handled as a terminal shows it.
pub fn sanitize_for_display(text: &str) -> String {
    render_lines(text, false)
}

/// Like [`sanitize_for_display`] but colour/style SGR sequences (`ESC[...m`) are kept.
/// Every other escape sequence is removed.
pub fn sgr_only(text: &str) -> String {
    render_lines(text, true)
}

/// C1 control characters (U+0080..U+009F, which some terminals read as ESC sequences)
/// removed, and bidirectional controls (RLO, LRI, …, which reorder what a reader sees)
/// shown as `<U+202E>` instead of acting. For text that reaches a terminal as is.
pub fn neutralise_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\u{80}'..='\u{9f}' => {}
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}' => {
                out.push_str(&format!("<U+{:04X}>", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// Text a person must read exactly (a command waiting for approval): every control
/// character but newline shown as an escape (`\x1b`, `\t`, `\r`, `\x9b`), bidirectional
/// and zero-width characters as `<U+202E>`, so no disguise hides in it. The flag says
/// whether anything was revealed.
pub(crate) fn reveal_hidden(text: &str) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut revealed = false;
    for c in text.chars() {
        let shown = match c {
            '\n' => None,
            '\t' => Some("\\t".to_string()),
            '\r' => Some("\\r".to_string()),
            '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => Some(format!("\\x{:02x}", c as u32)),
            '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2060}'
            | '\u{feff}'
            | '\u{061c}' => Some(format!("<U+{:04X}>", c as u32)),
            _ => None,
        };
        match shown {
            Some(s) => {
                revealed = true;
                out.push_str(&s);
            }
            None => out.push(c),
        }
    }
    (out, revealed)
}

/// Status text for a terminal we do not draw (`talaria exec`'s stderr): every escape
/// sequence and control character but newline removed, C1 and bidi controls neutralised.
pub fn for_terminal(text: &str) -> String {
    neutralise_controls(&sanitize_for_display(text))
}

const TAB_STOP: usize = 8;
/// Styles carried over a `\r` rewrite of a line.
const MAX_KEPT_STYLES: usize = 16;

fn render_lines(text: &str, keep_sgr: bool) -> String {
    let mut screen =
        LineScreen { out: String::with_capacity(text.len()), line: Vec::new(), col: 0, after_cr: false, keep_sgr };
    let mut parser = vte::Parser::new();
    parser.advance(&mut screen, text.as_bytes());
    screen.flush_line();
    screen.out
}

/// One piece of the line being built: a visible character or a kept SGR sequence.
enum Piece {
    Char(char),
    Sgr(String),
}

/// A one-line terminal model: completed lines go to `out`; the current line can still be
/// rewritten by `\r` (progress bars) and backspace.
struct LineScreen {
    out: String,
    line: Vec<Piece>,
    /// Display column of the cursor on the current line.
    col: usize,
    /// A `\r` was seen: the next printed character starts the line again.
    after_cr: bool,
    keep_sgr: bool,
}

impl LineScreen {
    fn flush_line(&mut self) {
        for piece in self.line.drain(..) {
            match piece {
                Piece::Char(c) => self.out.push(c),
                Piece::Sgr(s) => self.out.push_str(&s),
            }
        }
        self.col = 0;
        self.after_cr = false;
    }

    /// Start the line again, keeping the styles set so far (their effect is still on).
    fn restart_line(&mut self) {
        // Styles before the last reset no longer apply; dropping them keeps a progress bar
        // that recolours on every update from growing the line without bound.
        let last_reset = self.line.iter().rposition(|p| matches!(p, Piece::Sgr(s) if s == "\x1b[m" || s == "\x1b[0m"));
        if let Some(pos) = last_reset {
            self.line.drain(..=pos);
        }
        self.line.retain(|p| matches!(p, Piece::Sgr(_)));
        let excess = self.line.len().saturating_sub(MAX_KEPT_STYLES);
        self.line.drain(..excess);
        self.col = 0;
        self.after_cr = false;
    }

    fn put(&mut self, c: char) {
        if self.after_cr {
            self.restart_line();
        }
        self.col += unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        self.line.push(Piece::Char(c));
    }
}

/// Invisible characters that reorder or hide text (bidi overrides), removed like controls.
fn is_hidden_format_char(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

impl vte::Perform for LineScreen {
    fn print(&mut self, c: char) {
        if c.is_control() || is_hidden_format_char(c) {
            return;
        }
        self.put(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                // `\r\n` (and `\r` then `\n`) keeps the line as it was.
                self.flush_line();
                self.out.push('\n');
            }
            b'\r' => self.after_cr = true,
            b'\t' => {
                if self.after_cr {
                    self.restart_line();
                }
                let spaces = TAB_STOP - self.col % TAB_STOP;
                for _ in 0..spaces {
                    self.put(' ');
                }
            }
            0x08 => {
                // Backspace moves back over the last character; the next one replaces it.
                if let Some(pos) = self.line.iter().rposition(|p| matches!(p, Piece::Char(_))) {
                    if let Piece::Char(c) = self.line.remove(pos) {
                        self.col = self.col.saturating_sub(unicode_width::UnicodeWidthChar::width(c).unwrap_or(0));
                    }
                }
            }
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, action: char) {
        if !self.keep_sgr || action != 'm' || !intermediates.is_empty() || ignore {
            return;
        }
        let mut seq = String::from("\x1b[");
        for (i, param) in params.iter().enumerate() {
            if i > 0 {
                seq.push(';');
            }
            let sub: Vec<String> = param.iter().map(u16::to_string).collect();
            seq.push_str(&sub.join(":"));
        }
        seq.push('m');
        self.line.push(Piece::Sgr(seq));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_for_a_terminal_carries_no_escape_c1_or_bidi_control() {
        let hostile = "a\x1b]52;c;aGk=\x07b\u{9b}31mc\u{202e}d\x1b[2Je\u{2066}f\n";
        let out = super::for_terminal(hostile);
        // The display sanitiser already drops bidi controls and takes U+009B as a CSI.
        assert_eq!(out, "ab31mcdef\n");
        assert_eq!(super::neutralise_controls("x\u{85}y\u{200f}"), "xy<U+200F>");
    }

    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn strips_escape_sequences() {
        assert_eq!(strip_ansi("\x1b[31mred\x1b[0m plain"), "red plain");
        assert_eq!(strip_ansi("a\x1b]52;c;aGVsbG8=\x07b"), "ab");
        assert_eq!(strip_ansi("a\x1b]0;title\x1b\\b"), "ab");
        assert_eq!(strip_ansi("x\x1b[2Jy"), "xy");
        assert_eq!(strip_ansi("tab\there"), "tab\there");
    }

    #[test]
    fn carriage_returns_behave_like_a_terminal() {
        assert_eq!(strip_ansi("line\r\nnext"), "line\nnext");
        assert_eq!(strip_ansi("10%\r50%\r100%\ndone"), "100%\ndone");
    }

    #[test]
    fn truncation_keeps_head_and_tail() {
        let text: String = (0..1000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let out = truncate_for_model(&text, 100);
        assert!(out.starts_with(&text[..40]));
        assert!(out.ends_with(&text[940..]));
        assert!(out.contains("[OUTPUT TRUNCATED - 900 chars omitted out of 1000 total]"));
        assert_eq!(truncate_for_model("short", 100), "short");
    }

    #[test]
    fn truncation_counts_characters_not_bytes() {
        let text = "é".repeat(300);
        let out = truncate_for_model(&text, 100);
        assert!(out.contains("200 chars omitted out of 300 total"));
        assert_eq!(tail_chars("héllo", 3), "llo");
    }

    fn assert_clean(s: &str) {
        assert!(!s.contains('\x1b'), "ESC left in {s:?}");
        assert!(!s.contains("]52;"), "OSC 52 left in {s:?}");
        assert!(!s.chars().any(|c| c.is_control() && c != '\n'), "control char left in {s:?}");
    }

    #[test]
    fn display_sanitiser_removes_escape_sequences() {
        let cases = [
            ("a\x1b]52;c;aGVsbG8=\x07b", "ab"),
            ("a\x1b]52;c;aGVsbG8=\x1b\\b", "ab"),
            ("x\x1b[2Jy\x1b[H", "xy"),
            ("\x1b]0;title\x07text", "text"),
            ("see \x1b]8;;http://x\x07link\x1b]8;;\x07 here", "see link here"),
            ("\x1b[31mred\x1b[0m \x1b[1;32mbold\x1b[m", "red bold"),
            ("up\x1b[3Adown\x1b[10;5Hmove\x1b[K", "updownmove"),
            ("a\x1bPq#0;2;0;0;0\x1b\\b", "ab"),
            ("a\x1b_apc payload\x1b\\b", "ab"),
            ("bell\x07 and nul\x00 and del\x7f", "bell and nul and del"),
            ("c1 \u{9b}31m \u{90}x\u{9c} \u{85}end", "c1 31m x end"),
            ("bidi \u{202E}evil\u{202C}", "bidi evil"),
        ];
        for (input, want) in cases {
            let got = sanitize_for_display(input);
            assert_eq!(got, want, "input {input:?}");
            assert_clean(&got);
        }
    }

    #[test]
    fn display_sanitiser_expands_tabs_by_column() {
        assert_eq!(sanitize_for_display("a\tb"), "a       b");
        assert_eq!(sanitize_for_display("\tx"), "        x");
        assert_eq!(sanitize_for_display("12345678\tx"), "12345678        x");
        // A wide character takes two columns.
        assert_eq!(sanitize_for_display("日本\tx"), "日本    x");
        assert_eq!(sanitize_for_display("a\tb\nc\td"), "a       b\nc       d");
        // Escape sequences take no columns.
        assert_eq!(sanitize_for_display("\x1b[31mab\x1b[0m\tc"), "ab      c");
    }

    #[test]
    fn display_sanitiser_handles_carriage_returns_like_a_terminal() {
        assert_eq!(sanitize_for_display("10%\r50%\r100%\ndone"), "100%\ndone");
        assert_eq!(sanitize_for_display("line\r\nnext"), "line\nnext");
        assert_eq!(sanitize_for_display("text\r"), "text");
        assert_eq!(sanitize_for_display("[#   ] 25%\r[##  ] 50%\r[####] 100%"), "[####] 100%");
        assert_eq!(sanitize_for_display("ab\x08c"), "ac");
        assert_eq!(sanitize_for_display("\x08\x08x"), "x");
    }

    #[test]
    fn sgr_only_keeps_colours_and_drops_everything_else() {
        let got = sgr_only("\x1b]52;c;aGk=\x07\x1b[31mred\x1b[0m\x1b[2J \x1b]0;t\x07\x1b[38;5;208mx\x1b[38:2:1:2:3my");
        assert_eq!(got, "\x1b[31mred\x1b[0m \x1b[38;5;208mx\x1b[38:2:1:2:3my");
        assert!(!got.contains("]52;"));
        // Private modes are not SGR, even those that end in `m` (xterm's modifyOtherKeys
        // `CSI > 4 ; 1 m` would otherwise come out as underline + bold).
        assert_eq!(sgr_only("\x1b[?25lx\x1b[?1049h"), "x");
        assert_eq!(sgr_only("\x1b[>4;1mx\x1b[?1m"), "x");
        // A rewritten progress line keeps the colour that was set before the `\r`.
        assert_eq!(sgr_only("\x1b[32m10%\r100%\x1b[0m\n"), "\x1b[32m100%\x1b[0m\n");
        assert_eq!(sgr_only("\x1b[1ma\tb"), "\x1b[1ma       b");
        let bar: String = (0..1000).map(|i| format!("\x1b[32m{i}%\x1b[0m\r")).collect();
        assert_eq!(sgr_only(&format!("{bar}done")), "done");
    }

    #[test]
    fn hidden_characters_in_a_command_are_revealed() {
        assert_eq!(reveal_hidden("ls -la"), ("ls -la".to_string(), false));
        assert_eq!(reveal_hidden("a\nb"), ("a\nb".to_string(), false));
        let (shown, revealed) = reveal_hidden("echo ok\x1b[2K\r\trm -rf ~ #\u{202e}txt.exe\u{200b}\u{9b}");
        assert!(revealed);
        assert_eq!(shown, "echo ok\\x1b[2K\\r\\trm -rf ~ #<U+202E>txt.exe<U+200B>\\x9b");
    }
}
