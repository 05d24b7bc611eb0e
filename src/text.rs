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

#[cfg(test)]
mod tests {
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
}
