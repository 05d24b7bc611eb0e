//! Markdown to styled logical lines (pulldown-cmark), with fenced code highlighted by
//! syntect. The syntax set loads lazily once; highlighted blocks are cached by content,
//! so while a message streams only its open block is highlighted again.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use pulldown_cmark::{CodeBlockKind, Event as MdEvent, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Span;

use super::theme::Theme;
use super::wrap::{str_width, RLine};

/// Highlighted code blocks kept at most (cleared when full: a cache, not a store).
const CODE_CACHE_MAX: usize = 512;

/// Highlighted code lines, keyed by a hash of (language, code).
#[derive(Debug, Default)]
pub struct CodeCache {
    blocks: HashMap<u64, Vec<Vec<Span<'static>>>>,
}

impl CodeCache {
    fn highlighted(&mut self, lang: &str, code: &str, fallback: Style) -> &Vec<Vec<Span<'static>>> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        lang.hash(&mut hasher);
        code.hash(&mut hasher);
        let key = hasher.finish();
        if !self.blocks.contains_key(&key) && self.blocks.len() >= CODE_CACHE_MAX {
            self.blocks.clear();
        }
        self.blocks.entry(key).or_insert_with(|| highlight(lang, code, fallback))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }
}

struct Syntaxes {
    set: syntect::parsing::SyntaxSet,
    theme: syntect::highlighting::Theme,
}

fn syntaxes() -> &'static Syntaxes {
    static SYNTAXES: OnceLock<Syntaxes> = OnceLock::new();
    SYNTAXES.get_or_init(|| {
        let set = syntect::parsing::SyntaxSet::load_defaults_newlines();
        let mut themes = syntect::highlighting::ThemeSet::load_defaults();
        let theme = themes.themes.remove("base16-ocean.dark").unwrap_or_default();
        Syntaxes { set, theme }
    })
}

fn highlight(lang: &str, code: &str, fallback: Style) -> Vec<Vec<Span<'static>>> {
    let plain = || code.lines().map(|l| vec![Span::styled(l.to_string(), fallback)]).collect();
    let token = lang.split([',', ' ']).next().unwrap_or("").trim();
    if token.is_empty() {
        return plain();
    }
    let syn = syntaxes();
    let Some(syntax) = syn.set.find_syntax_by_token(token) else {
        return plain();
    };
    let mut lines = Vec::new();
    let mut h = syntect::easy::HighlightLines::new(syntax, &syn.theme);
    for line in syntect::util::LinesWithEndings::from(code) {
        let Ok(ranges) = h.highlight_line(line, &syn.set) else {
            return plain();
        };
        lines.push(spans_of(ranges));
    }
    lines
}

/// Syntect's styled pieces of one line as spans (the foreground only; no newline).
fn spans_of(ranges: Vec<(syntect::highlighting::Style, &str)>) -> Vec<Span<'static>> {
    ranges
        .into_iter()
        .filter_map(|(style, text)| {
            let text = text.trim_end_matches(['\n', '\r']);
            if text.is_empty() {
                return None;
            }
            let fg = style.foreground;
            Some(Span::styled(text.to_string(), Style::default().fg(Color::Rgb(fg.r, fg.g, fg.b))))
        })
        .collect()
}

/// Highlights the lines of one file in order, its syntax chosen by the file's name (a
/// diff's old or new side: `/diff`).
pub(crate) struct FileHighlighter {
    lines: syntect::easy::HighlightLines<'static>,
}

impl FileHighlighter {
    /// None for a name no syntax knows (plain text).
    pub(crate) fn for_path(path: &str) -> Option<FileHighlighter> {
        let name = path.rsplit('/').next().unwrap_or(path);
        let ext = name.rsplit_once('.').map_or(name, |(_, e)| e);
        let syn = syntaxes();
        let syntax = syn.set.find_syntax_by_extension(ext).or_else(|| syn.set.find_syntax_by_extension(name))?;
        if syntax.name == "Plain Text" {
            return None;
        }
        Some(FileHighlighter { lines: syntect::easy::HighlightLines::new(syntax, &syn.theme) })
    }

    /// The next line of the file (without its newline); None if syntect failed on it.
    pub(crate) fn line(&mut self, text: &str) -> Option<Vec<Span<'static>>> {
        let with_newline = format!("{text}\n");
        let ranges = self.lines.highlight_line(&with_newline, &syntaxes().set).ok()?;
        Some(spans_of(ranges))
    }
}

/// Render markdown `text` (already sanitised) into logical lines.
pub fn render(text: &str, theme: &Theme, base: Style, cache: &mut CodeCache) -> Vec<RLine> {
    let mut r = Renderer {
        theme,
        base,
        cache,
        out: Vec::new(),
        cur: Vec::new(),
        cur_hang: 0,
        styles: vec![base],
        lists: Vec::new(),
        bullet: None,
        quote_depth: 0,
        code: None,
        needs_blank: false,
    };
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(text, options) {
        r.event(event);
    }
    r.flush_line();
    while r.out.last().is_some_and(|l| l.spans.is_empty()) {
        r.out.pop();
    }
    r.out
}

struct ListLevel {
    next: Option<u64>,
    marker_width: usize,
}

struct Renderer<'a> {
    theme: &'a Theme,
    base: Style,
    cache: &'a mut CodeCache,
    out: Vec<RLine>,
    cur: Vec<Span<'static>>,
    cur_hang: u16,
    styles: Vec<Style>,
    lists: Vec<ListLevel>,
    /// The marker of a list item whose first line has not started yet.
    bullet: Option<String>,
    quote_depth: usize,
    code: Option<(String, String)>,
    needs_blank: bool,
}

impl Renderer<'_> {
    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or(self.base)
    }

    fn push_style(&mut self, f: impl FnOnce(Style) -> Style) {
        let s = f(self.style());
        self.styles.push(s);
    }

    fn pop_style(&mut self) {
        if self.styles.len() > 1 {
            self.styles.pop();
        }
    }

    fn block_start(&mut self) {
        self.flush_line();
        if self.needs_blank && !self.out.is_empty() {
            self.out.push(RLine::blank());
        }
        self.needs_blank = false;
    }

    /// Start the current line with the quote bars and list indentation.
    fn ensure_prefix(&mut self) {
        if !self.cur.is_empty() {
            return;
        }
        let mut width = 0usize;
        if self.quote_depth > 0 {
            let bars = "│ ".repeat(self.quote_depth);
            width += str_width(&bars);
            self.cur.push(Span::styled(bars, Style::default().fg(self.theme.quote)));
        }
        let outer: usize = self.lists.iter().map(|l| l.marker_width).sum();
        match self.bullet.take() {
            Some(marker) => {
                let inner = self.lists.last().map_or(0, |l| l.marker_width);
                let pad = outer - inner;
                if pad > 0 {
                    self.cur.push(Span::raw(" ".repeat(pad)));
                }
                let marker = format!("{marker:<inner$}");
                self.cur.push(Span::styled(marker, Style::default().fg(self.theme.dim)));
            }
            None if outer > 0 => self.cur.push(Span::raw(" ".repeat(outer))),
            None => {}
        }
        width += outer;
        self.cur_hang = u16::try_from(width).unwrap_or(u16::MAX);
    }

    fn flush_line(&mut self) {
        if self.cur.is_empty() && self.bullet.is_none() {
            return;
        }
        self.ensure_prefix();
        let spans = std::mem::take(&mut self.cur);
        self.out.push(RLine { spans, hang: self.cur_hang });
    }

    fn text(&mut self, text: &str, style: Style) {
        for (i, part) in text.split('\n').enumerate() {
            if i > 0 {
                self.flush_line();
            }
            if !part.is_empty() {
                self.ensure_prefix();
                self.cur.push(Span::styled(part.to_string(), style));
            }
        }
    }

    fn event(&mut self, event: MdEvent<'_>) {
        if let Some((_, buf)) = &mut self.code {
            match event {
                MdEvent::Text(t) => {
                    buf.push_str(&t);
                    return;
                }
                MdEvent::End(TagEnd::CodeBlock) => {
                    self.end_code_block();
                    return;
                }
                _ => return,
            }
        }
        match event {
            MdEvent::Start(tag) => self.start(tag),
            MdEvent::End(tag) => self.end(tag),
            MdEvent::Text(t) => self.text(&t, self.style()),
            MdEvent::Code(t) => {
                let style = self.style().fg(self.theme.inline_code);
                self.text(&t, style);
            }
            MdEvent::InlineMath(t) | MdEvent::DisplayMath(t) => self.text(&t, self.style()),
            MdEvent::Html(t) | MdEvent::InlineHtml(t) => self.text(&t, self.style()),
            MdEvent::FootnoteReference(t) => self.text(&format!("[{t}]"), self.style()),
            MdEvent::SoftBreak => self.text(" ", self.style()),
            MdEvent::HardBreak => self.flush_line(),
            MdEvent::Rule => {
                self.block_start();
                self.out.push(RLine::plain("─".repeat(24), Style::default().fg(self.theme.dim)));
                self.needs_blank = true;
            }
            MdEvent::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }, self.style()),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.block_start(),
            Tag::Heading { level, .. } => {
                self.block_start();
                let heading = self.theme.heading;
                self.push_style(|s| {
                    let s = s.fg(heading).add_modifier(Modifier::BOLD);
                    if level == HeadingLevel::H1 {
                        s.add_modifier(Modifier::UNDERLINED)
                    } else {
                        s
                    }
                });
            }
            Tag::BlockQuote(_) => {
                self.block_start();
                self.quote_depth += 1;
                let quote = self.theme.quote;
                self.push_style(|s| s.fg(quote).add_modifier(Modifier::ITALIC));
            }
            Tag::CodeBlock(kind) => {
                self.block_start();
                let lang = match kind {
                    CodeBlockKind::Fenced(l) => l.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.code = Some((lang, String::new()));
            }
            Tag::List(start) => {
                if self.lists.is_empty() {
                    self.block_start();
                } else {
                    self.flush_line();
                }
                let marker_width = start.map_or(2, |n| format!("{n}. ").len());
                self.lists.push(ListLevel { next: start, marker_width });
            }
            Tag::Item => {
                self.flush_line();
                self.needs_blank = false;
                if let Some(level) = self.lists.last_mut() {
                    let marker = match level.next {
                        Some(n) => {
                            level.next = Some(n + 1);
                            let m = format!("{n}. ");
                            level.marker_width = level.marker_width.max(m.len());
                            m
                        }
                        None => "• ".to_string(),
                    };
                    self.bullet = Some(marker);
                }
            }
            Tag::Emphasis => self.push_style(|s| s.add_modifier(Modifier::ITALIC)),
            Tag::Strong => self.push_style(|s| s.add_modifier(Modifier::BOLD)),
            Tag::Strikethrough => self.push_style(|s| s.add_modifier(Modifier::CROSSED_OUT)),
            Tag::Link { .. } | Tag::Image { .. } => {
                let link = self.theme.link;
                self.push_style(|s| s.fg(link).add_modifier(Modifier::UNDERLINED));
            }
            Tag::Superscript | Tag::Subscript => self.push_style(|s| s),
            Tag::HtmlBlock
            | Tag::FootnoteDefinition(_)
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::Table(_)
            | Tag::MetadataBlock(_) => self.block_start(),
            Tag::TableHead | Tag::TableRow => self.flush_line(),
            Tag::TableCell => self.text(" │ ", Style::default().fg(self.theme.dim)),
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => {
                self.flush_line();
                self.needs_blank = true;
            }
            TagEnd::Heading(_) => {
                self.flush_line();
                self.pop_style();
                self.needs_blank = true;
            }
            TagEnd::BlockQuote(_) => {
                self.flush_line();
                self.quote_depth = self.quote_depth.saturating_sub(1);
                self.pop_style();
                self.needs_blank = true;
            }
            TagEnd::CodeBlock => self.end_code_block(),
            TagEnd::List(_) => {
                self.flush_line();
                self.lists.pop();
                self.needs_blank = self.lists.is_empty();
            }
            TagEnd::Item => self.flush_line(),
            TagEnd::Emphasis
            | TagEnd::Strong
            | TagEnd::Strikethrough
            | TagEnd::Link
            | TagEnd::Image
            | TagEnd::Superscript
            | TagEnd::Subscript => self.pop_style(),
            TagEnd::HtmlBlock
            | TagEnd::FootnoteDefinition
            | TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition
            | TagEnd::Table
            | TagEnd::TableHead
            | TagEnd::TableRow
            | TagEnd::MetadataBlock(_) => {
                self.flush_line();
                self.needs_blank = matches!(tag, TagEnd::Table | TagEnd::HtmlBlock | TagEnd::MetadataBlock(_));
            }
            TagEnd::TableCell => {}
        }
    }

    fn end_code_block(&mut self) {
        let Some((lang, code)) = self.code.take() else { return };
        let fallback = Style::default().fg(self.theme.inline_code);
        let lines = self.cache.highlighted(&lang, &code, fallback).clone();
        for spans in lines {
            self.ensure_prefix();
            self.cur.push(Span::raw("  "));
            self.cur.extend(spans);
            self.cur_hang = self.cur_hang.saturating_add(2);
            self.flush_line();
        }
        self.needs_blank = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn plain(lines: &[RLine]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn renders_blocks_lists_and_code() {
        let md = "# Title\n\nSome *emphasis* and `code`.\n\n- one\n- two\n  1. nested\n\n```rust\nfn main() {}\n```\n\n> quoted";
        let mut cache = CodeCache::default();
        let lines = render(md, &Theme::default(), Style::default(), &mut cache);
        assert_eq!(
            plain(&lines),
            vec![
                "Title",
                "",
                "Some emphasis and code.",
                "",
                "• one",
                "• two",
                "  1. nested",
                "",
                "  fn main() {}",
                "",
                "│ quoted",
            ]
        );
        assert_eq!(cache.len(), 1);
        // The list item's continuation rows hang under its text.
        assert_eq!(lines[6].hang, 5);
    }

    #[test]
    fn code_is_highlighted_once_per_block() {
        let mut cache = CodeCache::default();
        let md = "```python\nprint('hi')\n```\n";
        let a = render(md, &Theme::default(), Style::default(), &mut cache);
        let b = render(md, &Theme::default(), Style::default(), &mut cache);
        assert_eq!(a, b);
        assert_eq!(cache.len(), 1);
        assert!(a[0].spans.len() > 2, "python should be split into coloured tokens: {:?}", a[0]);
    }

    #[test]
    fn an_open_fence_while_streaming_still_renders() {
        let mut cache = CodeCache::default();
        let lines = render("text\n\n```sh\nls -la", &Theme::default(), Style::default(), &mut cache);
        assert_eq!(plain(&lines), vec!["text", "", "  ls -la"]);
    }
}
