//! A small shell lexer for the classifier: cuts a command line into simple commands at
//! `;`, `&&`, `||`, `|`, `&`, newlines and parentheses, removes quotes and backslashes from
//! words, and collects redirections, `$(...)`/backtick/`<(...)` substitutions and heredocs.
//! It never expands variables: `$HOME` stays `$HOME` for the rules to recognise.

/// One simple command.
#[derive(Debug, Default, Clone)]
pub(super) struct Segment {
    pub(super) words: Vec<String>,
    /// (operator, target) — `>`, `>>`, `&>`, `<`, …
    pub(super) redirects: Vec<(String, String)>,
    /// Heredoc bodies and here-strings: text on this command's stdin.
    pub(super) stdin_docs: Vec<String>,
    /// Inner text of `$(...)`, backticks, `<(...)`, `>(...)`.
    pub(super) substitutions: Vec<String>,
    /// Its stdin is the previous segment's stdout.
    pub(super) piped: bool,
}

struct Lexer {
    chars: Vec<char>,
    i: usize,
    segments: Vec<Segment>,
    cur: Segment,
    word: Option<String>,
    pending_redirect: Option<String>,
    /// Heredocs whose bodies start after the next newline.
    pending_heredocs: Vec<Heredoc>,
    /// The current word had quoting in it (a quoted heredoc delimiter means no expansion).
    word_quoted: bool,
    /// Index in `segments` of the command each pending heredoc belongs to.
    heredoc_owner: Option<usize>,
}

struct Heredoc {
    delimiter: String,
    /// `<<-`: leading tabs are removed from body lines.
    strip_tabs: bool,
    /// An unquoted delimiter: the shell runs `$(...)` and backticks in the body.
    expands: bool,
}

pub(super) fn parse(command: &str) -> Vec<Segment> {
    let mut lx = Lexer::new(command);
    lx.run();
    lx.segments
}

/// `$(...)` and backtick substitutions in text the shell expands (an unquoted heredoc body).
fn substitutions_in(text: &str) -> Vec<String> {
    let mut lx = Lexer::new(text);
    let mut found = Vec::new();
    while let Some(c) = lx.peek(0) {
        match c {
            '\\' => lx.i += 2,
            '$' if lx.peek(1) == Some('(') => {
                lx.i += 2;
                found.push(lx.read_paren());
            }
            '`' => {
                lx.i += 1;
                found.push(lx.read_backtick());
            }
            _ => lx.i += 1,
        }
    }
    found
}

impl Lexer {
    fn new(text: &str) -> Lexer {
        Lexer {
            chars: text.chars().collect(),
            i: 0,
            segments: Vec::new(),
            cur: Segment::default(),
            word: None,
            pending_redirect: None,
            pending_heredocs: Vec::new(),
            word_quoted: false,
            heredoc_owner: None,
        }
    }

    fn peek(&self, off: usize) -> Option<char> {
        self.chars.get(self.i + off).copied()
    }

    fn push_char(&mut self, c: char) {
        self.word.get_or_insert_with(String::new).push(c);
    }

    fn push_str(&mut self, s: &str) {
        self.word.get_or_insert_with(String::new).push_str(s);
    }

    fn end_word(&mut self) {
        let quoted = std::mem::take(&mut self.word_quoted);
        let Some(word) = self.word.take() else { return };
        match self.pending_redirect.take() {
            Some(op) if op == "<<" || op == "<<-" => {
                self.pending_heredocs.push(Heredoc { delimiter: word, strip_tabs: op == "<<-", expands: !quoted })
            }
            Some(op) if op == "<<<" => self.cur.stdin_docs.push(word),
            Some(op) => self.cur.redirects.push((op, word)),
            None => self.cur.words.push(word),
        }
    }

    fn end_segment(&mut self, next_piped: bool) {
        self.end_word();
        let seg = std::mem::take(&mut self.cur);
        let has_heredoc = !self.pending_heredocs.is_empty() && self.heredoc_owner.is_none();
        if !seg.words.is_empty()
            || !seg.redirects.is_empty()
            || !seg.stdin_docs.is_empty()
            || !seg.substitutions.is_empty()
        {
            self.segments.push(seg);
        }
        if has_heredoc {
            self.heredoc_owner = self.segments.len().checked_sub(1);
        }
        self.cur.piped = next_piped;
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' => {
                    self.end_word();
                    self.i += 1;
                }
                '\n' => {
                    self.i += 1;
                    self.end_segment(false);
                    self.read_heredoc_bodies();
                }
                '\\' => {
                    self.word_quoted = true;
                    match self.peek(1) {
                        Some('\n') => {}
                        Some(next) => self.push_char(next),
                        None => {}
                    }
                    self.i += 2;
                }
                '\'' => {
                    self.i += 1;
                    self.word_quoted = true;
                    let text = self.read_until('\'');
                    self.push_str(&text);
                }
                '"' => {
                    self.i += 1;
                    self.word_quoted = true;
                    self.read_double_quoted();
                }
                '`' => {
                    self.i += 1;
                    let inner = self.read_backtick();
                    self.push_str(&format!("`{inner}`"));
                    self.cur.substitutions.push(inner);
                }
                '$' if self.peek(1) == Some('(') => {
                    self.i += 2;
                    let inner = self.read_paren();
                    self.push_str(&format!("$({inner})"));
                    self.cur.substitutions.push(inner);
                }
                '$' if self.peek(1) == Some('\'') => {
                    self.i += 2;
                    let text = self.read_ansi_c();
                    self.push_str(&text);
                }
                '<' | '>' if self.peek(1) == Some('(') && self.word.is_none() => {
                    self.i += 2;
                    let inner = self.read_paren();
                    self.push_str(&format!("{c}({inner})"));
                    self.cur.substitutions.push(inner);
                }
                '#' if self.word.is_none() => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.i += 1;
                    }
                }
                ';' | '(' | ')' => {
                    self.i += 1;
                    self.end_segment(false);
                }
                '&' => match self.peek(1) {
                    Some('&') => {
                        self.i += 2;
                        self.end_segment(false);
                    }
                    Some('>') => {
                        self.end_word();
                        let op = if self.peek(2) == Some('>') { "&>>" } else { "&>" };
                        self.i += op.len();
                        self.pending_redirect = Some(op.to_string());
                    }
                    _ => {
                        self.i += 1;
                        self.end_segment(false);
                    }
                },
                '|' => match self.peek(1) {
                    Some('|') => {
                        self.i += 2;
                        self.end_segment(false);
                    }
                    Some('&') => {
                        self.i += 2;
                        self.end_segment(true);
                    }
                    _ => {
                        self.i += 1;
                        self.end_segment(true);
                    }
                },
                '<' | '>' => self.read_redirect(c),
                _ => {
                    self.push_char(c);
                    self.i += 1;
                }
            }
        }
        self.end_segment(false);
        self.read_heredoc_bodies();
    }

    fn read_redirect(&mut self, first: char) {
        // `2>file`: the digits just before the operator name a file descriptor.
        if self.word.as_deref().is_some_and(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit())) {
            self.word = None;
        }
        self.end_word();
        let mut op = String::from(first);
        self.i += 1;
        while let Some(c) = self.peek(0) {
            let more = matches!((op.as_str(), c), (">", '>' | '|' | '&') | ("<", '<' | '&' | '>') | ("<<", '<' | '-'));
            if !more {
                break;
            }
            op.push(c);
            self.i += 1;
        }
        self.pending_redirect = Some(op);
    }

    fn read_until(&mut self, end: char) -> String {
        let mut out = String::new();
        while let Some(c) = self.peek(0) {
            self.i += 1;
            if c == end {
                break;
            }
            out.push(c);
        }
        out
    }

    fn read_double_quoted(&mut self) {
        self.word.get_or_insert_with(String::new);
        while let Some(c) = self.peek(0) {
            match c {
                '"' => {
                    self.i += 1;
                    return;
                }
                '\\' => {
                    match self.peek(1) {
                        Some(n @ ('$' | '`' | '"' | '\\')) => self.push_char(n),
                        Some('\n') => {}
                        Some(n) => {
                            self.push_char('\\');
                            self.push_char(n);
                        }
                        None => {}
                    }
                    self.i += 2;
                }
                '$' if self.peek(1) == Some('(') => {
                    self.i += 2;
                    let inner = self.read_paren();
                    self.push_str(&format!("$({inner})"));
                    self.cur.substitutions.push(inner);
                }
                '`' => {
                    self.i += 1;
                    let inner = self.read_backtick();
                    self.push_str(&format!("`{inner}`"));
                    self.cur.substitutions.push(inner);
                }
                _ => {
                    self.push_char(c);
                    self.i += 1;
                }
            }
        }
    }

    /// After `$(` or `<(`: the text up to the matching `)`, quotes respected.
    fn read_paren(&mut self) -> String {
        let mut depth = 1usize;
        let mut out = String::new();
        let mut quote: Option<char> = None;
        while let Some(c) = self.peek(0) {
            self.i += 1;
            match (quote, c) {
                (Some(q), _) if c == q => quote = None,
                (Some('"'), '\\') | (None, '\\') => {
                    out.push(c);
                    if let Some(n) = self.peek(0) {
                        out.push(n);
                        self.i += 1;
                    }
                    continue;
                }
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '(') => depth += 1,
                (None, ')') => {
                    depth -= 1;
                    if depth == 0 {
                        return out;
                    }
                }
                (None, _) => {}
            }
            out.push(c);
        }
        out
    }

    fn read_backtick(&mut self) -> String {
        let mut out = String::new();
        while let Some(c) = self.peek(0) {
            self.i += 1;
            match c {
                '`' => break,
                '\\' => {
                    if let Some(n) = self.peek(0) {
                        if !matches!(n, '`' | '\\' | '$') {
                            out.push('\\');
                        }
                        out.push(n);
                        self.i += 1;
                    }
                }
                _ => out.push(c),
            }
        }
        out
    }

    /// `$'...'` with its backslash escapes (`\x72m` is `rm`).
    fn read_ansi_c(&mut self) -> String {
        let mut out = String::new();
        while let Some(c) = self.peek(0) {
            self.i += 1;
            match c {
                '\'' => break,
                '\\' => {
                    let Some(n) = self.peek(0) else { break };
                    self.i += 1;
                    match n {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'x' => {
                            let hex: String =
                                self.chars[self.i..].iter().take(2).take_while(|c| c.is_ascii_hexdigit()).collect();
                            self.i += hex.len();
                            out.extend(u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32));
                        }
                        '0'..='7' => {
                            let mut oct = String::from(n);
                            oct.extend(self.chars[self.i..].iter().take(2).take_while(|c| matches!(c, '0'..='7')));
                            self.i += oct.len() - 1;
                            out.extend(u32::from_str_radix(&oct, 8).ok().and_then(char::from_u32));
                        }
                        other => out.push(other),
                    }
                }
                _ => out.push(c),
            }
        }
        out
    }

    /// After a newline: the bodies of heredocs opened on the line just ended.
    fn read_heredoc_bodies(&mut self) {
        let pending = std::mem::take(&mut self.pending_heredocs);
        let owner = self.heredoc_owner.take();
        for Heredoc { delimiter, strip_tabs, expands } in pending {
            let mut body = String::new();
            while self.i < self.chars.len() {
                let start = self.i;
                while self.peek(0).is_some_and(|c| c != '\n') {
                    self.i += 1;
                }
                let line: String = self.chars[start..self.i].iter().collect();
                self.i += 1;
                let line = if strip_tabs { line.trim_start_matches('\t').to_string() } else { line };
                if line == delimiter {
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            if let Some(seg) = owner.and_then(|o| self.segments.get_mut(o)) {
                if expands {
                    seg.substitutions.extend(substitutions_in(&body));
                }
                seg.stdin_docs.push(body);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn lexer_removes_quotes_and_splits_commands() {
        let segs = parse("a 'b c' \"d$(e f)\" g\\ h | i >> out 2>&1; j");
        let words: Vec<Vec<String>> = segs.iter().map(|s| s.words.clone()).collect();
        assert_eq!(words, vec![vec!["a", "b c", "d$(e f)", "g h"], vec!["i"], vec!["j"]]);
        assert_eq!(segs[0].substitutions, vec!["e f".to_string()]);
        assert!(segs[1].piped);
        assert_eq!(segs[1].redirects, vec![(">>".to_string(), "out".to_string()), (">&".to_string(), "1".to_string())]);
        assert!(!segs[2].piped);
    }

    #[test]
    fn heredoc_bodies_belong_to_their_command() {
        let segs = parse("cat <<'EOF' | sh\nrm -rf /\nEOF\necho after");
        assert_eq!(segs.len(), 3);
        assert_eq!(segs[0].stdin_docs, vec!["rm -rf /\n".to_string()]);
        assert_eq!(segs[2].words, vec!["echo".to_string(), "after".to_string()]);
    }

    #[test]
    fn only_unquoted_heredocs_expand_substitutions() {
        let segs = parse("cat <<EOF > f\n$(date) `id` \\$(not)\nEOF");
        assert_eq!(segs[0].substitutions, vec!["date".to_string(), "id".to_string()]);
        let segs = parse("cat <<'EOF' > f\n$(date)\nEOF");
        assert_eq!(segs[0].substitutions, Vec::<String>::new());
        let segs = parse("cat <<\\EOF > f\n$(date)\nEOF");
        assert_eq!(segs[0].substitutions, Vec::<String>::new());
    }

    #[test]
    fn ansi_c_quotes_decode_escapes() {
        let segs = parse("$'\\x72\\155' x");
        assert_eq!(segs[0].words, vec!["rm".to_string(), "x".to_string()]);
    }
    fn words(command: &str) -> Vec<Vec<String>> {
        parse(command).into_iter().map(|s| s.words).collect()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_operator_ends_a_command_and_pipes_mark_the_next() {
        let segs = parse("a && b || c ; d & e | f |& g\nh(i)j");
        let w: Vec<Vec<String>> = segs.iter().map(|s| s.words.clone()).collect();
        let expected: Vec<Vec<String>> =
            ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"].iter().map(|x| strings(&[x])).collect();
        assert_eq!(w, expected);
        let piped: Vec<bool> = segs.iter().map(|s| s.piped).collect();
        assert_eq!(piped, vec![false, false, false, false, false, true, true, false, false, false]);
        assert_eq!(words("a&&b||c"), vec![strings(&["a"]), strings(&["b"]), strings(&["c"])]);
        // `&&` is read as one operator: its second `&` does not start `&>`.
        assert_eq!(parse("a &&> f")[1].redirects, vec![(">".to_string(), "f".to_string())]);
        // Empty commands between operators leave nothing behind.
        assert_eq!(words(";; (a) ; ;b"), vec![strings(&["a"]), strings(&["b"])]);
    }

    #[test]
    fn redirections_are_collected_with_their_targets() {
        let segs = parse("cmd > out 2>err >> app < in &> all &>> both 2>&1 <> rw >| clob <<< here");
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].words, strings(&["cmd"]));
        let expected: Vec<(String, String)> = [
            (">", "out"),
            (">", "err"),
            (">>", "app"),
            ("<", "in"),
            ("&>", "all"),
            ("&>>", "both"),
            (">&", "1"),
            ("<>", "rw"),
            (">|", "clob"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(segs[0].redirects, expected);
        assert_eq!(segs[0].stdin_docs, strings(&["here"]));
        // Digits right before the operator name a descriptor; anything else is a word.
        let segs = parse("echo 2 > f; echo 2>f; echo a2>f; a>b");
        let w: Vec<Vec<String>> = segs.iter().map(|s| s.words.clone()).collect();
        assert_eq!(w, vec![strings(&["echo", "2"]), strings(&["echo"]), strings(&["echo", "a2"]), strings(&["a"])]);
        assert!(segs.iter().all(|s| s.redirects.len() == 1 && s.redirects[0].0 == ">"));
        // A command that is only a redirection or a here-string is still a command.
        assert_eq!(parse("> f")[0].redirects, vec![(">".to_string(), "f".to_string())]);
        assert_eq!(parse("<<< x")[0].stdin_docs, strings(&["x"]));
    }

    #[test]
    fn quotes_and_backslashes_are_removed_as_the_shell_does() {
        let w = words(r#"echo 'a "b"' "c 'd' \$e \"f\" \\g \h" x\ y\"z"#);
        assert_eq!(w, vec![strings(&["echo", r#"a "b""#, r#"c 'd' $e "f" \g \h"#, r#"x y"z"#])]);
        // A backslash before a newline joins the lines, quoted or not; a lone one at the end
        // is dropped.
        assert_eq!(words("ec\\\nho \"a\\\nb\" c\\"), vec![strings(&["echo", "ab", "c"])]);
        assert_eq!(words("\\rm x"), vec![strings(&["rm", "x"])]);
        assert_eq!(words("''"), vec![strings(&[""])]);
    }

    #[test]
    fn comments_run_to_the_end_of_the_line_only_at_a_word_start() {
        assert_eq!(words("echo a # rm -rf /\necho b"), vec![strings(&["echo", "a"]), strings(&["echo", "b"])]);
        assert_eq!(words("echo a#b"), vec![strings(&["echo", "a#b"])]);
    }

    #[test]
    fn substitutions_keep_their_inner_text_with_nesting_and_quotes() {
        let segs = parse(r#"echo $(a $(b) 'c)' "d)" \)) x"#);
        assert_eq!(segs[0].words, strings(&["echo", r#"$(a $(b) 'c)' "d)" \))"#, "x"]));
        assert_eq!(segs[0].substitutions, strings(&[r#"a $(b) 'c)' "d)" \)"#]));
        let segs = parse(r#"echo `a \` \$ \\ \x`"#);
        assert_eq!(segs[0].substitutions, strings(&[r#"a ` $ \ \x"#]));
        let segs = parse("diff <(ls a) >(cat) \"$(id) `pwd`\"");
        assert_eq!(segs[0].words, strings(&["diff", "<(ls a)", ">(cat)", "$(id) `pwd`"]));
        assert_eq!(segs[0].substitutions, strings(&["ls a", "cat", "id", "pwd"]));
        // An unclosed substitution takes the rest of the line.
        assert_eq!(parse("echo $(rm -rf x")[0].substitutions, strings(&["rm -rf x"]));
        assert_eq!(parse("echo `rm x")[0].substitutions, strings(&["rm x"]));
    }

    #[test]
    fn ansi_c_quotes_decode_every_escape() {
        assert_eq!(words(r"$'a\nb\tc\x41\101\'\q' z"), vec![strings(&["a\nb\tcAA'q", "z"])]);
        assert_eq!(words(r"$'\x4g\7'"), vec![strings(&["\u{4}g\u{7}"])]);
        assert_eq!(words(r"$'unclosed\"), vec![strings(&["unclosed"])]);
    }

    #[test]
    fn heredocs_read_their_bodies_in_order_and_strip_tabs_when_asked() {
        let segs = parse("cat <<-EOF\n\tline\n\tEOF\necho after");
        assert_eq!(segs[0].stdin_docs, strings(&["line\n"]));
        assert_eq!(segs[1].words, strings(&["echo", "after"]));
        let segs = parse("cat <<A <<B\na1\nA\nb1\nB\nnext");
        assert_eq!(segs[0].stdin_docs, strings(&["a1\n", "b1\n"]));
        assert_eq!(segs[1].words, strings(&["next"]));
        // A tab before the delimiter ends a `<<-` body only.
        let segs = parse("cat <<EOF\n\tEOF\nEOF");
        assert_eq!(segs[0].stdin_docs, strings(&["\tEOF\n"]));
        // An unterminated body runs to the end, a final newline included once.
        assert_eq!(parse("cat <<EOF\nabc")[0].stdin_docs, strings(&["abc\n"]));
        assert_eq!(parse("cat <<EOF\nabc\n")[0].stdin_docs, strings(&["abc\n"]));
        assert_eq!(parse("cat <<EOF\n")[0].stdin_docs, strings(&[""]));
        // A double-quoted delimiter does not expand either.
        assert!(parse("cat <<\"EOF\"\n$(x)\nEOF")[0].substitutions.is_empty());
    }

    #[test]
    fn an_expanding_heredoc_yields_only_real_substitutions() {
        assert!(substitutions_in("a $HOME b ${x} $").is_empty());
        assert_eq!(substitutions_in("\\$(no) $(yes)"), strings(&["yes"]));
        assert_eq!(substitutions_in("\\`no\\` `id` $(date)"), strings(&["id", "date"]));
        assert!(parse("cat <<EOF\n$HOME\nEOF")[0].substitutions.is_empty());
    }
}
