//! A job's full output on disk, capped at `jobs.log_max_bytes` as two rotating segments:
//! when the newer segment is full, the older one is deleted (that output is dropped) and
//! a new one starts. Line numbers are absolute: a segment knows the number of its first
//! line, and reading says where the kept log starts (`first_line`).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::output::{floor_char_boundary, memchr_count};

/// Longest line `read_lines` returns whole; longer lines are cut (their rest is skipped).
const LINE_CAP: usize = 4000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    pub(crate) path: PathBuf,
    /// Absolute (1-based) number of the line this segment starts in.
    pub(crate) start_line: u64,
    pub(crate) bytes: u64,
    /// The segment starts in the middle of a line (a line longer than the room left).
    pub(crate) mid_line: bool,
}

/// Where the kept log is; cheap to clone (at most two segments).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogIndex {
    pub(crate) segments: Vec<Segment>,
    /// Bytes of output deleted by rotation.
    pub(crate) dropped_bytes: u64,
    /// Absolute number of the last line (a last line without `\n` counts); 0 when empty.
    pub(crate) end_line: u64,
}

impl LogIndex {
    /// Absolute number of the first line of the kept log.
    /// A partial first line (its start was dropped) is not shown.
    pub(crate) fn first_line(&self) -> u64 {
        self.segments.first().map(|s| s.start_line + u64::from(self.skips_partial_line())).unwrap_or(1)
    }

    fn skips_partial_line(&self) -> bool {
        self.dropped_bytes > 0 && self.segments.first().is_some_and(|s| s.mid_line)
    }
}

/// Appends decoded output to the segments. Owned by the job's reader task.
#[derive(Debug)]
pub struct LogWriter {
    dir: PathBuf,
    base: String,
    segment_max: u64,
    next_index: u64,
    file: Option<File>,
    newlines: u64,
    at_line_start: bool,
    index: LogIndex,
    failed: bool,
    rotations: u64,
}

impl LogWriter {
    /// Segments are `<dir>/<base>.<n>.log`, each at most `max_bytes / 2`.
    pub fn new(dir: &Path, base: &str, max_bytes: u64) -> LogWriter {
        LogWriter {
            dir: dir.to_path_buf(),
            base: base.to_string(),
            segment_max: (max_bytes / 2).max(1024),
            next_index: 0,
            file: None,
            newlines: 0,
            at_line_start: true,
            index: LogIndex::default(),
            failed: false,
            rotations: 0,
        }
    }

    pub(crate) fn index(&self) -> &LogIndex {
        &self.index
    }

    /// How many segments have been started (changes when `index.json` must be rewritten).
    pub(crate) fn rotations(&self) -> u64 {
        self.rotations
    }

    pub fn write(&mut self, mut text: &str) {
        while !text.is_empty() && !self.failed {
            let used = self.index.segments.last().map(|s| s.bytes).unwrap_or(self.segment_max);
            let room = self.segment_max.saturating_sub(used) as usize;
            if room == 0 || self.file.is_none() {
                self.rotate();
                continue;
            }
            let piece = if text.len() <= room {
                text
            } else {
                // Prefer to end a segment at a line end so segments start at line starts.
                let fit = &text[..floor_char_boundary(text, room)];
                match fit.rfind('\n') {
                    Some(i) => &text[..=i],
                    // Start the line in a fresh segment rather than split it.
                    None if used > 0 => "",
                    None if fit.is_empty() => &text[..text.chars().next().map_or(0, char::len_utf8)],
                    None => fit,
                }
            };
            if piece.is_empty() {
                self.rotate();
                continue;
            }
            self.append(piece);
            text = &text[piece.len()..];
        }
    }

    fn append(&mut self, piece: &str) {
        let Some(file) = self.file.as_mut() else { return };
        if let Err(e) = file.write_all(piece.as_bytes()) {
            tracing::warn!(error = %e, base = %self.base, "cannot write the job log; output is kept in memory only");
            self.failed = true;
            return;
        }
        self.newlines += memchr_count(piece.as_bytes(), b'\n');
        self.at_line_start = piece.ends_with('\n');
        self.index.end_line = self.newlines + u64::from(!self.at_line_start);
        if let Some(seg) = self.index.segments.last_mut() {
            seg.bytes += piece.len() as u64;
        }
    }

    fn rotate(&mut self) {
        if self.index.segments.len() >= 2 {
            let old = self.index.segments.remove(0);
            self.index.dropped_bytes += old.bytes;
            let _ = std::fs::remove_file(&old.path);
        }
        let path = self.dir.join(format!("{}.{}.log", self.base, self.next_index));
        self.next_index += 1;
        self.rotations += 1;
        // A new file, never through a link (the directory is talaria's; see jobdir.rs).
        match super::jobdir::create_new(&path) {
            Ok(file) => {
                self.file = Some(file);
                let mid_line = !self.at_line_start;
                self.index.segments.push(Segment { path, start_line: self.newlines + 1, bytes: 0, mid_line });
            }
            Err(e) => {
                tracing::warn!(error = %e, path = %path.display(), "cannot create the job log");
                self.file = None;
                self.failed = true;
            }
        }
    }
}

/// A window of the log, as `process log` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogView {
    pub(crate) text: String,
    pub(crate) first_line: u64,
    /// Numbers of the first and last line shown (0, 0 when nothing is shown).
    pub(crate) from: u64,
    pub(crate) to: u64,
}

/// The marker shown where rotation dropped output.
pub(crate) fn dropped_marker(index: &LogIndex) -> String {
    format!(
        "[... {} bytes ({} lines) of earlier output were dropped; the log keeps only the most recent output ...]",
        index.dropped_bytes,
        index.first_line().saturating_sub(1)
    )
}

/// Read lines from the kept log: from absolute line `offset` (1-based) when given, else
/// the last `limit` lines. Lines longer than a few thousand characters are cut.
pub(crate) fn read_lines(index: &LogIndex, offset: Option<u64>, limit: usize) -> LogView {
    match offset {
        None if index.end_line > 0 => read_tail(index, limit.max(1)),
        _ => read_forward(index, offset, limit),
    }
}

/// Bytes a tail read looks back at most; a longer last line is cut.
const TAIL_BYTES_MAX: u64 = 16 << 20;

/// The last `limit` lines, read backwards from the end of the log: the cost depends on
/// what is shown, not on the size of the log.
fn read_tail(index: &LogIndex, limit: usize) -> LogView {
    use std::io::{Seek, SeekFrom};
    let first_line = index.first_line();
    let ends_with_newline = index
        .segments
        .iter()
        .rev()
        .find(|s| s.bytes > 0)
        .and_then(|s| {
            let mut f = super::jobdir::open_read(&s.path).ok()?;
            f.seek(SeekFrom::Start(s.bytes - 1)).ok()?;
            let mut b = [0u8; 1];
            f.read_exact(&mut b).ok()?;
            Some(b[0] == b'\n')
        })
        .unwrap_or(false);
    // The newlines to pass going back: the one ending the last line, then one per line.
    let target = limit + usize::from(ends_with_newline);
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    let mut seen = 0usize;
    let mut taken = 0u64;
    // Whether the text gathered starts at a line start.
    let mut whole_first = false;
    let mut reached_start = false;
    let mut buf = vec![0u8; 64 * 1024];
    'segments: for (i, seg) in index.segments.iter().enumerate().rev() {
        let Ok(mut file) = super::jobdir::open_read(&seg.path) else { break };
        let mut end = seg.bytes;
        while end > 0 {
            let len = (end.min(buf.len() as u64)) as usize;
            let start = end - len as u64;
            if file.seek(SeekFrom::Start(start)).is_err() || file.read_exact(&mut buf[..len]).is_err() {
                break 'segments;
            }
            let block = &buf[..len];
            let mut cut = None;
            for (j, b) in block.iter().enumerate().rev() {
                if *b == b'\n' {
                    seen += 1;
                    if seen == target {
                        cut = Some(j + 1);
                        break;
                    }
                }
            }
            if let Some(c) = cut {
                pieces.push(block[c..].to_vec());
                whole_first = true;
                break 'segments;
            }
            pieces.push(block.to_vec());
            taken += len as u64;
            end = start;
            if taken >= TAIL_BYTES_MAX {
                break 'segments;
            }
        }
        if i == 0 {
            reached_start = true;
            whole_first = !index.skips_partial_line();
        }
    }
    let _ = reached_start;
    let mut bytes = Vec::with_capacity(pieces.iter().map(Vec::len).sum());
    for p in pieces.iter().rev() {
        bytes.extend_from_slice(p);
    }
    if ends_with_newline {
        bytes.pop();
    }
    let mut raw: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if !whole_first && !raw.is_empty() {
        raw.remove(0);
    }
    if raw.len() > limit {
        raw.drain(..raw.len() - limit);
    }
    let to = index.end_line;
    let from = (to + 1).saturating_sub(raw.len() as u64);
    let mut text = String::new();
    if raw.is_empty() {
        return LogView { text, first_line, from: 0, to: 0 };
    }
    if index.dropped_bytes > 0 && from == first_line {
        text.push_str(&dropped_marker(index));
        text.push('\n');
    }
    for (i, line) in raw.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        let mut current = String::new();
        let mut cut = false;
        push_capped(&mut current, &mut cut, line, LINE_CAP);
        text.push_str(&finish_line(&mut current, &mut cut));
    }
    LogView { text, first_line, from, to }
}

/// Lines a sub-agent's event stream may be (a tool result is capped at
/// `tool_output.max_chars`, JSON escaping can double it).
const EVENT_LINE_CAP: usize = 1 << 20;

/// Whole lines from `offset` on, each up to `EVENT_LINE_CAP`, without the last line while it
/// has no newline yet: a sub-agent's event stream, one JSON object a line (DESIGN §14).
pub(crate) fn read_event_lines(index: &LogIndex, offset: u64, limit: usize) -> LogView {
    read_forward_with(index, Some(offset), limit, EVENT_LINE_CAP, true)
}

fn read_forward(index: &LogIndex, offset: Option<u64>, limit: usize) -> LogView {
    read_forward_with(index, offset, limit, LINE_CAP, false)
}

fn read_forward_with(
    index: &LogIndex,
    offset: Option<u64>,
    limit: usize,
    line_cap: usize,
    whole_only: bool,
) -> LogView {
    let first_line = index.first_line();
    let limit = limit.max(1);
    let mut lines: std::collections::VecDeque<(u64, String)> = std::collections::VecDeque::new();
    let start = offset.map(|o| o.max(first_line));
    let mut skip_partial = index.skips_partial_line();
    let mut lineno = index.segments.first().map(|s| s.start_line).unwrap_or(1);
    let mut current = String::new();
    let mut cut = false;
    let mut done = false;
    let keep = |lineno: u64, line: String, lines: &mut std::collections::VecDeque<(u64, String)>| -> bool {
        match start {
            Some(s) if lineno < s => true,
            Some(_) => {
                lines.push_back((lineno, line));
                lines.len() < limit
            }
            None => {
                lines.push_back((lineno, line));
                if lines.len() > limit {
                    lines.pop_front();
                }
                true
            }
        }
    };
    let mut buf = vec![0u8; 64 * 1024];
    'segments: for seg in &index.segments {
        let Ok(file) = super::jobdir::open_read(&seg.path) else { continue };
        let mut reader = file.take(seg.bytes);
        let mut carry: Vec<u8> = Vec::new();
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            carry.extend_from_slice(&buf[..n]);
            let mut from = 0;
            while let Some(pos) = carry[from..].iter().position(|b| *b == b'\n') {
                push_capped(&mut current, &mut cut, &carry[from..from + pos], line_cap);
                let line = finish_line(&mut current, &mut cut);
                if std::mem::take(&mut skip_partial) {
                    lineno += 1;
                    from += pos + 1;
                    continue;
                }
                if !keep(lineno, line, &mut lines) {
                    done = true;
                    break 'segments;
                }
                lineno += 1;
                from += pos + 1;
            }
            // The line goes on in the next read; keep a character split by the read.
            let rest = carry.split_off(from);
            let whole = match std::str::from_utf8(&rest) {
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                _ => rest.len(),
            };
            push_capped(&mut current, &mut cut, &rest[..whole], line_cap);
            carry = rest[whole..].to_vec();
        }
    }
    if !done && !current.is_empty() && !whole_only {
        let line = finish_line(&mut current, &mut cut);
        keep(lineno, line, &mut lines);
    }

    let (from, to) = match (lines.front(), lines.back()) {
        (Some(f), Some(b)) => (f.0, b.0),
        _ => (0, 0),
    };
    let mut text = String::new();
    if index.dropped_bytes > 0 && from == first_line && !whole_only {
        text.push_str(&dropped_marker(index));
        text.push('\n');
    }
    for (i, (_, line)) in lines.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        text.push_str(line);
    }
    LogView { text, first_line, from, to }
}

fn push_capped(current: &mut String, cut: &mut bool, bytes: &[u8], line_cap: usize) {
    if *cut || bytes.is_empty() {
        return;
    }
    let text = String::from_utf8_lossy(bytes);
    let room = line_cap.saturating_sub(current.len());
    if text.len() <= room {
        current.push_str(&text);
    } else {
        current.push_str(&text[..floor_char_boundary(&text, room)]);
        *cut = true;
    }
}

fn finish_line(current: &mut String, cut: &mut bool) -> String {
    let mut line = std::mem::take(current);
    if *cut {
        line.push_str(" … [line cut]");
        *cut = false;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn small_log_reads_back_with_absolute_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = LogWriter::new(dir.path(), "j", 1 << 20);
        w.write("a\nb\n");
        w.write("c");
        let view = read_lines(w.index(), None, 2);
        assert_eq!(view, LogView { text: "b\nc".into(), first_line: 1, from: 2, to: 3 });
        let view = read_lines(w.index(), Some(1), 1);
        assert_eq!(view.text, "a");
    }

    #[test]
    fn rotation_drops_the_oldest_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = LogWriter::new(dir.path(), "j", 4096);
        for i in 1..=1000 {
            w.write(&format!("line {i}\n"));
        }
        let index = w.index().clone();
        assert_eq!(index.segments.len(), 2);
        assert!(index.dropped_bytes > 0);
        let kept: u64 = index.segments.iter().map(|s| s.bytes).sum();
        assert!(kept <= 4096, "{kept}");
        let first = index.first_line();
        assert!(first > 1);
        let view = read_lines(&index, Some(first), 3);
        assert!(view.text.starts_with("[... "), "{}", view.text);
        assert!(
            view.text.ends_with(&format!("line {}\nline {}\nline {}", first, first + 1, first + 2)),
            "{}",
            view.text
        );
        let last = read_lines(&index, None, 1);
        assert_eq!(last.text, "line 1000");
        assert_eq!((last.from, last.to), (1000, 1000));
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, 2);
    }

    #[test]
    fn the_tail_read_from_the_end_matches_a_forward_read() {
        let dir = tempfile::tempdir().unwrap();
        for (max, lines, partial) in
            [(1 << 20, 50u64, false), (4096, 1000, true), (4096, 1000, false), (1 << 20, 3, true)]
        {
            let mut w = LogWriter::new(dir.path(), &format!("t{max}{lines}{partial}"), max);
            for i in 1..=lines {
                w.write(&format!("line {i}\n"));
            }
            if partial {
                w.write("tail without newline");
            }
            let index = w.index().clone();
            for limit in [1, 2, 7, 200, 5000] {
                let back = read_tail(&index, limit);
                let fwd = read_forward(&index, None, limit);
                assert_eq!(back, fwd, "max {max} lines {lines} partial {partial} limit {limit}");
            }
        }
    }

    #[test]
    fn a_line_without_newlines_is_cut_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = LogWriter::new(dir.path(), "j", 1 << 20);
        w.write(&"é".repeat(10_000));
        let view = read_lines(w.index(), None, 10);
        assert!(view.text.ends_with("[line cut]"));
        assert!(view.text.len() < LINE_CAP + 100);
    }
}
