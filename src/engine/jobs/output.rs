//! What a job printed, in memory: an incremental UTF-8 decoder and a bounded buffer
//! (the first bytes, a tail ring, counters). The full output goes to the log (`log.rs`).

/// Decodes UTF-8 across reads: a character split between two reads is kept until its
/// last byte arrives; invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Decoder {
    pending: Vec<u8>,
}

impl Utf8Decoder {
    pub fn decode(&mut self, bytes: &[u8]) -> String {
        let owned;
        let mut input: &[u8] = if self.pending.is_empty() {
            bytes
        } else {
            self.pending.extend_from_slice(bytes);
            owned = std::mem::take(&mut self.pending);
            &owned
        };
        let mut out = String::with_capacity(input.len());
        loop {
            match std::str::from_utf8(input) {
                Ok(s) => {
                    out.push_str(s);
                    return out;
                }
                Err(e) => {
                    let (valid, rest) = input.split_at(e.valid_up_to());
                    // from_utf8 said this prefix is valid.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            input = &rest[n..];
                        }
                        None => {
                            // An incomplete character at the end: wait for the rest.
                            self.pending = rest.to_vec();
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// The stream ended: a dangling partial character is replaced.
    pub(crate) fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            char::REPLACEMENT_CHARACTER.to_string()
        }
    }
}

/// The output of one job kept in memory: its first `head_cap` bytes (what a short
/// command printed, whole) and a ring of its last `tail_cap` bytes. Memory stays below
/// within a few times `head_cap + tail_cap` whatever the job prints.
#[derive(Debug)]
pub struct OutputBuf {
    head: String,
    head_cap: usize,
    tail: String,
    tail_cap: usize,
    /// Output did not fit in `head`.
    overflowed: bool,
    total_chars: u64,
    total_bytes: u64,
    newlines: u64,
    ends_with_newline: bool,
}

impl OutputBuf {
    pub(crate) fn new(head_cap: usize, tail_cap: usize) -> OutputBuf {
        OutputBuf {
            head: String::new(),
            head_cap,
            tail: String::new(),
            tail_cap,
            overflowed: false,
            total_chars: 0,
            total_bytes: 0,
            newlines: 0,
            ends_with_newline: false,
        }
    }

    /// Buffer caps for a given model cap: enough to show `max_chars` characters whole.
    pub fn for_model_cap(max_chars: usize) -> OutputBuf {
        let cap = max_chars.saturating_mul(4).clamp(64 * 1024, 8 * 1024 * 1024);
        OutputBuf::new(cap, cap)
    }

    pub fn push(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.total_bytes += text.len() as u64;
        self.total_chars += text.chars().count() as u64;
        self.newlines += memchr_count(text.as_bytes(), b'\n');
        self.ends_with_newline = text.ends_with('\n');

        if !self.overflowed {
            let room = self.head_cap - self.head.len();
            if text.len() <= room {
                self.head.push_str(text);
            } else {
                self.head.push_str(&text[..floor_char_boundary(text, room)]);
                self.overflowed = true;
            }
        }

        if text.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.push_str(&text[ceil_char_boundary(text, text.len() - self.tail_cap)..]);
        } else {
            if self.tail.len() + text.len() > 2 * self.tail_cap {
                // Keep the ring below 2 * tail_cap so its allocation never grows past that.
                let cut = ceil_char_boundary(&self.tail, self.tail.len() + text.len() - self.tail_cap);
                self.tail.drain(..cut);
            }
            self.tail.push_str(text);
        }
    }

    /// The job's true totals (from its exit record): output this buffer never saw (a
    /// follower that fell behind rotation) counts as omitted.
    pub(crate) fn settle_totals(&mut self, chars: u64, bytes: u64, lines: u64) {
        if chars > self.total_chars {
            self.overflowed = true;
            self.total_chars = chars;
            self.total_bytes = self.total_bytes.max(bytes);
            self.newlines = self.newlines.max(lines.saturating_sub(u64::from(!self.ends_with_newline)));
        }
    }

    /// The most recent output (at most `2 * tail_cap` bytes, raw).
    pub(crate) fn tail(&self) -> &str {
        &self.tail
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Lines printed so far; a last line without `\n` counts.
    pub(crate) fn total_lines(&self) -> u64 {
        self.newlines + u64::from(self.total_bytes > 0 && !self.ends_with_newline)
    }

    /// The last non-empty line as a terminal shows it (`process list`, the jobs pane): the
    /// recent output run through the emulator, so a `\r` progress bar, an erased spinner or
    /// a cursor-up redraw give their final state; colours dropped; at most `max` characters.
    pub(crate) fn last_line(&self, max: usize) -> String {
        // A tail cut inside an escape sequence garbles only its first line.
        let shown = crate::emulate::plain(crate::text::tail_chars(&self.tail, 4096));
        let line = shown.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim_end();
        crate::text::tail_chars(line, max).to_string()
    }

    /// The last `n` characters, ANSI stripped.
    pub(crate) fn clean_tail(&self, n: usize) -> String {
        let clean = crate::emulate::plain(crate::text::tail_chars(&self.tail, n.saturating_mul(4)));
        crate::text::tail_chars(&clean, n).to_string()
    }

    /// All output as the model sees it: ANSI stripped, capped at `max_chars` (first 40%,
    /// last 60%). When the output overflowed the in-memory head, the middle is gone and
    /// the omitted count is computed from the totals.
    pub(crate) fn model_text(&self, max_chars: usize) -> String {
        if !self.overflowed {
            return crate::text::truncate_for_model(&crate::emulate::plain(&self.head), max_chars);
        }
        let head_n = max_chars * 2 / 5;
        let tail_n = max_chars - head_n;
        let head_clean = crate::emulate::plain(&self.head);
        let tail_clean = crate::emulate::plain(&self.tail);
        let head: String = head_clean.chars().take(head_n).collect();
        let tail = crate::text::tail_chars(&tail_clean, tail_n);
        let shown = (head.chars().count() + tail.chars().count()) as u64;
        let omitted = self.total_chars.saturating_sub(shown);
        format!(
            "{head}\n\n... [OUTPUT TRUNCATED - {omitted} chars omitted out of {} total] ...\n\n{tail}",
            self.total_chars
        )
    }

    /// Bytes this buffer holds (for tests of the memory bound).
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.head.capacity() + self.tail.capacity()
    }
}

pub(crate) fn memchr_count(bytes: &[u8], needle: u8) -> u64 {
    bytes.iter().filter(|b| **b == needle).count() as u64
}

/// The largest char boundary `<= i`.
pub(crate) fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    (0..=i).rev().find(|j| s.is_char_boundary(*j)).unwrap_or(0)
}

/// The smallest char boundary `>= i`.
pub(crate) fn ceil_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    (i..=s.len()).find(|j| s.is_char_boundary(*j)).unwrap_or(s.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn decoder_joins_characters_split_across_reads() {
        let mut d = Utf8Decoder::default();
        let bytes = "é€😀".as_bytes();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&d.decode(std::slice::from_ref(b)));
        }
        out.push_str(&d.finish());
        assert_eq!(out, "é€😀");
    }

    #[test]
    fn decoder_replaces_invalid_bytes_and_goes_on() {
        let mut d = Utf8Decoder::default();
        assert_eq!(d.decode(b"a\xffb\xc3"), "a\u{fffd}b");
        assert_eq!(d.decode(b"\xa9c"), "éc");
        assert_eq!(d.decode(b"\xe2\x82"), "");
        assert_eq!(d.finish(), "\u{fffd}");
    }

    #[test]
    fn short_output_is_kept_whole() {
        let mut b = OutputBuf::new(100, 100);
        b.push("one\n");
        b.push("\x1b[31mtwo\x1b[0m");
        assert_eq!(b.model_text(1000), "one\ntwo");
        assert_eq!(b.total_lines(), 2);
        assert_eq!(b.last_line(80), "two");
    }

    #[test]
    fn the_last_line_is_what_a_terminal_shows() {
        let mut b = OutputBuf::new(100, 4096);
        b.push("Downloading x.tar.gz\n");
        for pct in [10, 55, 100] {
            b.push(&format!("\r\x1b[32m[{:<10}]\x1b[0m {pct:>3}%", "#".repeat(pct / 10)));
        }
        assert_eq!(b.last_line(80), "[##########] 100%");
        // A shorter rewrite leaves the end of the longer line, as on a terminal.
        b.push("\rok");
        assert_eq!(b.last_line(80), "ok#########] 100%");
        // A spinner erased at the end: the line above is the last one shown.
        b.push("\nsaved x.tar.gz\n\u{280b} unpacking\r\x1b[K");
        assert_eq!(b.last_line(80), "saved x.tar.gz");
        // A two-line display where only the top line was redrawn: the bottom line is last.
        b.push("layer a: 1/2\nlayer b: 2/2\n\x1b[2A\x1b[2Klayer a: 2/2\x1b[2B\r");
        assert_eq!(b.last_line(80), "layer b: 2/2");
        assert_eq!(b.last_line(5), ": 2/2");
    }

    #[test]
    fn memory_is_bounded_and_the_marker_counts_everything() {
        let mut b = OutputBuf::new(1000, 1000);
        let line = "x".repeat(99) + "\n";
        for _ in 0..10_000 {
            b.push(&line);
        }
        // Allocations grow by doubling: at most 2 * 1000 for the head, 4 * 1000 for the tail.
        assert!(b.held_bytes() <= 6000, "{}", b.held_bytes());
        assert_eq!(b.total_lines(), 10_000);
        let text = b.model_text(500);
        assert!(text.contains("chars omitted out of 1000000 total"), "{text}");
        assert!(text.chars().count() < 700);
    }

    #[test]
    fn tail_ring_keeps_the_end() {
        let mut b = OutputBuf::new(10, 10);
        b.push("héllo wörld, this is long");
        b.push(" end");
        assert!(b.tail().ends_with("long end"));
        assert!(b.tail().len() <= 20);
    }
}
