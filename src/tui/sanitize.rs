//! Text from models and tools made safe to draw. ratatui drops control characters
//! silently, so an escape sequence would leave visible garbage (`]52;…`) behind and a
//! tab would vanish: everything shown goes through here first.

use crate::text::strip_ansi;

/// Tab stops every this many columns, as a terminal has them.
const TAB_WIDTH: usize = 8;

/// Escape sequences removed, `\r` handled as a terminal would, tabs expanded.
pub fn display_text(input: &str) -> String {
    expand_tabs(&strip_ansi(input))
}

/// Expand `\t` to spaces up to the next tab stop of its line.
pub fn expand_tabs(input: &str) -> String {
    if !input.contains('\t') {
        return input.to_string();
    }
    let mut out = String::with_capacity(input.len() + 16);
    let mut col = 0usize;
    for c in input.chars() {
        match c {
            '\t' => {
                let n = TAB_WIDTH - col % TAB_WIDTH;
                out.extend(std::iter::repeat_n(' ', n));
                col += n;
            }
            '\n' => {
                out.push('\n');
                col = 0;
            }
            c => {
                out.push(c);
                col += unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
            }
        }
    }
    out
}

/// Keep only colour/attribute (SGR) sequences, so a job log keeps its colours while
/// cursor movement, screen clears, titles and clipboard writes are dropped. `\r`
/// rewrites the line as a terminal would; tabs are expanded.
pub fn sgr_only(input: &str) -> String {
    let mut performer = SgrOnly { out: String::with_capacity(input.len()), line_start: 0, after_cr: false, col: 0 };
    let mut parser = vte::Parser::new();
    parser.advance(&mut performer, input.as_bytes());
    performer.out
}

struct SgrOnly {
    out: String,
    line_start: usize,
    after_cr: bool,
    col: usize,
}

impl SgrOnly {
    fn begin_text(&mut self) {
        if self.after_cr {
            self.out.truncate(self.line_start);
            self.after_cr = false;
            self.col = 0;
        }
    }
}

impl vte::Perform for SgrOnly {
    fn print(&mut self, c: char) {
        self.begin_text();
        self.out.push(c);
        self.col += unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                self.after_cr = false;
                self.out.push('\n');
                self.line_start = self.out.len();
                self.col = 0;
            }
            b'\t' => {
                self.begin_text();
                let n = TAB_WIDTH - self.col % TAB_WIDTH;
                self.out.extend(std::iter::repeat_n(' ', n));
                self.col += n;
            }
            b'\r' => self.after_cr = true,
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, action: char) {
        if action != 'm' || ignore || !intermediates.is_empty() {
            return;
        }
        self.begin_text();
        self.out.push_str("\x1b[");
        for (i, param) in params.iter().enumerate() {
            if i > 0 {
                self.out.push(';');
            }
            for (j, sub) in param.iter().enumerate() {
                if j > 0 {
                    self.out.push(':');
                }
                self.out.push_str(&sub.to_string());
            }
        }
        self.out.push('m');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn display_text_removes_sequences_and_expands_tabs() {
        assert_eq!(display_text("a\x1b]52;c;aGk=\x07b\tc"), "ab      c");
        assert_eq!(display_text("x\x1b[2J\x1b]0;title\x07y"), "xy");
        assert_eq!(display_text("1\r2\n\tz"), "2\n        z");
    }

    #[test]
    fn sgr_only_keeps_colours_and_drops_the_rest() {
        assert_eq!(sgr_only("\x1b[31mred\x1b[0m \x1b[2J\x1b]0;t\x07ok"), "\x1b[31mred\x1b[0m ok");
        assert_eq!(sgr_only("\x1b[38;5;208mx\x1b[1A"), "\x1b[38;5;208mx");
        assert_eq!(sgr_only("10%\r100%\na\tb"), "100%\na       b");
    }
}
