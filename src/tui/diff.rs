//! `/diff` as its view shows it (DESIGN §13): git's unified diff line by line, each file's
//! lines highlighted as code blocks are (syntect, the syntax chosen by the file's name) —
//! the old side and the new side by a highlighter each, so a construct that spans lines stays
//! right on both — and added and removed lines on a green or red ground.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use super::markdown::FileHighlighter;
use super::theme::Theme;

/// Lines highlighted at most; the rest are coloured by `+`/`-` only (a session's diff can be
/// very long, and highlighting runs on the UI thread).
const HIGHLIGHT_MAX_LINES: usize = 20_000;
/// Longer lines are not highlighted (minified code: slow to highlight, no help to read).
const HIGHLIGHT_MAX_CHARS: usize = 1_000;

/// The file whose hunks are being read.
#[derive(Default)]
struct File {
    old_path: Option<String>,
    new_path: Option<String>,
    old: Option<FileHighlighter>,
    new: Option<FileHighlighter>,
    in_hunk: bool,
}

/// The path of a `--- a/x` or `+++ b/x` line (None for `/dev/null`).
fn header_path(rest: &str, side: &str) -> Option<String> {
    let rest = rest.trim_end_matches('\t');
    let rest = rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(rest);
    rest.strip_prefix(side).map(str::to_string)
}

/// A line of a file as it may reach the terminal: a CRLF's `\r` dropped, another shown as
/// `␍`, escape sequences removed, tabs expanded, bidi controls shown.
fn clean(text: &str) -> String {
    let text = text.strip_suffix('\r').unwrap_or(text).replace('\r', "␍");
    crate::text::neutralise_controls(&crate::text::sanitize_for_display(&text))
}

/// The styled lines of `text`, a unified diff as `git diff` writes it.
pub(crate) fn diff_lines(text: &str, theme: &Theme) -> Vec<Line<'static>> {
    let mut out: Vec<Line<'static>> = Vec::new();
    let mut file: Option<File> = None;
    let mut highlighted = 0usize;
    let text = text.strip_suffix('\n').unwrap_or(text);
    for raw in text.split('\n') {
        if let Some(f) = file.as_mut().filter(|f| f.in_hunk) {
            let marker = raw.chars().next();
            if let Some(m @ (' ' | '+' | '-')) = marker {
                let content = clean(&raw[1..]);
                let budget = highlighted < HIGHLIGHT_MAX_LINES && content.chars().count() <= HIGHLIGHT_MAX_CHARS;
                // Context lines go through both sides, so each keeps its state.
                let old =
                    (m != '+').then_some(()).and(f.old.as_mut().filter(|_| budget)).and_then(|h| h.line(&content));
                let new =
                    (m != '-').then_some(()).and(f.new.as_mut().filter(|_| budget)).and_then(|h| h.line(&content));
                if budget {
                    highlighted += 1;
                }
                let spans = if m == '-' { old } else { new };
                out.push(content_line(m, content, spans, theme));
                continue;
            }
            if marker == Some('\\') {
                out.push(Line::from(Span::styled(raw.to_string(), Style::default().fg(theme.dim))));
                continue;
            }
            f.in_hunk = false;
        }
        let shown = clean(raw);
        if raw.starts_with("diff --git ") {
            if !out.is_empty() {
                out.push(Line::default());
            }
            file = Some(File::default());
            let style = Style::default().fg(theme.heading).add_modifier(Modifier::BOLD);
            out.push(Line::from(Span::styled(shown, style)));
        } else if let (Some(f), true) = (file.as_mut(), raw.starts_with("@@")) {
            if !f.in_hunk && f.old.is_none() && f.new.is_none() {
                let (old, new) = (f.old_path.clone().or(f.new_path.clone()), f.new_path.clone().or(f.old_path.clone()));
                f.old = old.as_deref().and_then(FileHighlighter::for_path);
                f.new = new.as_deref().and_then(FileHighlighter::for_path);
            }
            f.in_hunk = true;
            let (range, context) = match shown[2..].find("@@") {
                Some(end) => shown.split_at(end + 4),
                None => (shown.as_str(), ""),
            };
            out.push(Line::from(vec![
                Span::styled(range.to_string(), Style::default().fg(theme.notice_info)),
                Span::styled(context.to_string(), Style::default().fg(theme.dim)),
            ]));
        } else if let Some(f) = file.as_mut() {
            if let Some(rest) = raw.strip_prefix("--- ") {
                f.old_path = header_path(rest, "a/");
            } else if let Some(rest) = raw.strip_prefix("+++ ") {
                f.new_path = header_path(rest, "b/");
            }
            let style = if raw.starts_with("--- ") || raw.starts_with("+++ ") {
                Style::default().add_modifier(Modifier::BOLD)
            } else {
                Style::default().fg(theme.dim)
            };
            out.push(Line::from(Span::styled(shown, style)));
        } else {
            out.push(Line::raw(shown));
        }
    }
    out
}

/// One line of a hunk: its marker, then the text (highlighted when `spans` has it), on the
/// added or removed ground.
fn content_line(marker: char, text: String, spans: Option<Vec<Span<'static>>>, theme: &Theme) -> Line<'static> {
    let (ground, mark): (Option<Color>, Color) = match marker {
        '+' => (Some(theme.diff_added), theme.tool_ok),
        '-' => (Some(theme.diff_removed), theme.tool_failed),
        _ => (None, theme.text),
    };
    let on = |style: Style| match ground {
        Some(bg) => style.bg(bg),
        None => style,
    };
    let mut line = vec![Span::styled(marker.to_string(), on(Style::default().fg(mark).add_modifier(Modifier::BOLD)))];
    match spans {
        Some(spans) => line.extend(spans.into_iter().map(|s| {
            let style = on(s.style);
            s.style(style)
        })),
        // No syntax: the text in the marker's colour (plain for context).
        None => {
            let style = if ground.is_some() { Style::default().fg(mark) } else { Style::default() };
            line.push(Span::styled(text, on(style)));
        }
    }
    Line::from(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const DIFF: &str = "diff --git a/src/main.rs b/src/main.rs
index 1111111..2222222 100644
--- a/src/main.rs
+++ b/src/main.rs
@@ -1,3 +1,3 @@ fn main() {
 fn main() {
-    let x = 1;
+    let x = \"two\";
 }
diff --git a/notes.unknownext b/notes.unknownext
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/notes.unknownext
@@ -0,0 +1 @@
+plain words
\\ No newline at end of file
diff --git a/blob.bin b/blob.bin
index 4444444..5555555 100644
Binary files a/blob.bin and b/blob.bin differ
";

    fn text(line: &Line<'_>) -> String {
        line.spans.iter().map(|s| s.content.as_ref()).collect()
    }

    /// The distinct foregrounds of a line's text after its marker.
    fn colours(line: &Line<'_>) -> std::collections::BTreeSet<String> {
        line.spans
            .iter()
            .skip(1)
            .filter(|s| !s.content.trim().is_empty())
            .map(|s| format!("{:?}", s.style.fg))
            .collect()
    }

    #[test]
    fn a_diff_keeps_gits_lines_and_colours_each_kind() {
        let theme = Theme::default();
        let lines = diff_lines(DIFF, &theme);
        let texts: Vec<String> = lines.iter().map(text).collect();
        let expected: Vec<String> = DIFF
            .lines()
            .flat_map(|l| {
                if l.starts_with("diff --git a/notes") || l.starts_with("diff --git a/blob") {
                    vec!["", l]
                } else {
                    vec![l]
                }
            })
            .map(String::from)
            .collect();
        assert_eq!(texts, expected, "git's lines, a blank line between files");
        let find = |t: &str| lines.iter().find(|l| text(l) == t).unwrap_or_else(|| panic!("{t}"));
        // Added and removed lines: on their ground, the marker in green or red.
        let added = find("+    let x = \"two\";");
        assert!(added.spans.iter().all(|s| s.style.bg == Some(theme.diff_added)), "{added:?}");
        assert_eq!(added.spans[0].style.fg, Some(theme.tool_ok));
        let removed = find("-    let x = 1;");
        assert!(removed.spans.iter().all(|s| s.style.bg == Some(theme.diff_removed)), "{removed:?}");
        assert_eq!(removed.spans[0].style.fg, Some(theme.tool_failed));
        // Rust is highlighted (a keyword, a number and a string in colours of their own)...
        assert!(colours(added).len() >= 2, "syntax colours: {added:?}");
        assert!(colours(find(" fn main() {")).len() >= 2, "context lines too");
        // ...a name no syntax knows is the marker's colour.
        let plain = find("+plain words");
        assert_eq!(plain.spans[1].style.fg, Some(theme.tool_ok));
        assert_eq!(find("@@ -1,3 +1,3 @@ fn main() {").spans[0].style.fg, Some(theme.notice_info));
        assert_eq!(find("diff --git a/src/main.rs b/src/main.rs").spans[0].style.fg, Some(theme.heading));
        assert_eq!(find("Binary files a/blob.bin and b/blob.bin differ").spans[0].style.fg, Some(theme.dim));
    }

    #[test]
    fn what_a_file_holds_cannot_reach_the_terminal_as_escapes() {
        let diff = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-x\r\n+\x1b]52;c;aGk=\x07y\tz\u{202e}\n";
        let lines = diff_lines(diff, &Theme::default());
        let texts: Vec<String> = lines.iter().map(text).collect();
        assert_eq!(texts[4], "-x", "a CRLF's \\r is dropped");
        assert_eq!(texts[5], "+y       z", "escapes and the bidi override removed, the tab expanded");
    }

    #[test]
    fn a_removed_line_that_looks_like_a_header_is_still_a_removed_line() {
        let diff = "diff --git a/a.sql b/a.sql\n--- a/a.sql\n+++ b/a.sql\n@@ -1,2 +1 @@\n--- a comment\n+++x\n";
        let theme = Theme::default();
        let lines = diff_lines(diff, &theme);
        assert_eq!(lines[4].spans[0].style.fg, Some(theme.tool_failed), "{:?}", lines[4]);
        assert_eq!(lines[5].spans[0].style.fg, Some(theme.tool_ok), "{:?}", lines[5]);
    }
}
