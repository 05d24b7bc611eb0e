//! *Known safe* (DESIGN §6): an allow-list of plain read-only commands, decided on a
//! deliberately small parse. Words, single quotes, double quotes without anything the shell
//! would expand inside, and the separators `|`, `&&`, `||`, `;` are understood; every other
//! shell character (substitution, expansion, globbing, redirection, backgrounding,
//! grouping, comments, escapes, assignments) makes a command *not* known safe. Pure.

/// Commands that read and print and cannot write, run other programs or change state
/// whatever their arguments (checked per command where that is not so).
const READ_ONLY: &[&str] = &[
    "ls",
    "pwd",
    "echo",
    "cat",
    "head",
    "tail",
    "wc",
    "true",
    "false",
    "whoami",
    "id",
    "uname",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "stat",
    "du",
    "df",
    "nl",
    "rev",
    "cut",
    "tr",
    "cmp",
    "diff",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "which",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "find",
    "git",
    "sort",
    "uniq",
    "file",
    "tree",
    "date",
    "printf",
    "jq",
    "od",
    "hexdump",
    "column",
    "seq",
    "sleep",
    "cd",
    "printenv",
    "hostname",
];

/// Names a known-safe command may not mention: reading them is exactly what must ask.
const SECRET_NAMES: &[&str] =
    &[".ssh", ".gnupg", ".aws", ".netrc", ".docker", "id_rsa", "id_ed25519", ".config/talaria"];

pub fn is_known_safe(command: &str) -> bool {
    match split_plain(command) {
        Some(commands) => !commands.is_empty() && commands.iter().all(|words| simple_is_safe(words)),
        None => false,
    }
}

/// The simple commands of `command`, or None when it uses anything beyond plain words,
/// quotes and the separators `|`, `&&`, `||`, `;`.
fn split_plain(command: &str) -> Option<Vec<Vec<String>>> {
    let mut commands = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut chars = command.trim().chars().peekable();
    fn end_word(word: &mut Option<String>, commands: &mut [Vec<String>]) {
        if let (Some(w), Some(last)) = (word.take(), commands.last_mut()) {
            last.push(w);
        }
    }
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => end_word(&mut word, &mut commands),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c if unsafe_char(c) => return None,
                        c => w.push(c),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '"' => break,
                        '$' | '`' | '\\' | '!' => return None,
                        c if unsafe_char(c) => return None,
                        c => w.push(c),
                    }
                }
            }
            '|' | '&' | ';' => {
                end_word(&mut word, &mut commands);
                match (c, chars.peek()) {
                    ('|', Some('|')) | ('&', Some('&')) => {
                        chars.next();
                    }
                    ('|', Some('&')) | ('&', _) | (';', Some(';')) => return None,
                    _ => {}
                }
                if commands.last().is_none_or(|c| c.is_empty()) {
                    return None;
                }
                commands.push(Vec::new());
            }
            c if c.is_ascii_alphanumeric() || "-_./,:=+%@^".contains(c) => word.get_or_insert_with(String::new).push(c),
            // `HEAD~1`: a tilde inside a word is not expanded (at its start, or after `=`
            // or `:`, it is).
            '~' if word.as_ref().and_then(|w| w.chars().last()).is_some_and(|l| l != '=' && l != ':') => {
                word.get_or_insert_with(String::new).push('~')
            }
            c if !c.is_ascii() && !unsafe_char(c) => word.get_or_insert_with(String::new).push(c),
            _ => return None,
        }
    }
    end_word(&mut word, &mut commands);
    if commands.last().is_some_and(|c| c.is_empty()) {
        return None;
    }
    Some(commands)
}

/// Control characters and bidi overrides never appear in a known-safe command.
fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

fn simple_is_safe(words: &[String]) -> bool {
    let Some((name, args)) = words.split_first() else { return false };
    if !READ_ONLY.contains(&name.as_str()) {
        return false;
    }
    if words.iter().any(|w| SECRET_NAMES.iter().any(|s| w.contains(s))) {
        return false;
    }
    let has = |flags: &[&str]| args.iter().any(|a| flags.iter().any(|f| a == f || a.starts_with(&format!("{f}="))));
    let has_prefix = |prefixes: &[&str]| args.iter().any(|a| prefixes.iter().any(|p| a.starts_with(p)));
    // GNU getopt_long (and git) take any unambiguous prefix of a long option: `--com=sh`
    // is `--compress-program=sh`. Every prefix counts, ambiguous or not.
    let abbreviates = |longs: &[&str]| args.iter().any(|a| longs.iter().any(|l| abbreviation_of(a, l)));
    match name.as_str() {
        // -o writes a file; GNU accepts any unambiguous abbreviation of a long option.
        "sort" => {
            !has_prefix(&["-o", "--o", "--compress"])
                && !abbreviates(&["--output", "--compress-program"])
                && !args.iter().any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('o'))
        }
        "uniq" => args.iter().filter(|a| !a.starts_with('-')).count() <= 1,
        "tree" => !has_prefix(&["-o", "--o"]),
        "file" => !has(&["-C", "--compile"]) && !abbreviates(&["--compile"]),
        "date" => {
            !has_prefix(&["-s", "--s", "-f", "--f"]) && args.iter().all(|a| a.starts_with('-') || a.starts_with('+'))
        }
        "hostname" => args.iter().all(|a| a.starts_with('-')) && !has_prefix(&["-F", "--f", "-b", "--b"]),
        "printf" => !has(&["-v"]),
        "rg" => !has_prefix(&["--pre", "-z", "--search-zip"]),
        "find" => !args.iter().any(|a| {
            matches!(
                a.as_str(),
                "-exec" | "-execdir" | "-ok" | "-okdir" | "-delete" | "-fprint" | "-fprint0" | "-fprintf" | "-fls"
            )
        }),
        "git" => git_is_safe(args),
        _ => true,
    }
}

/// Whether `arg` is `option` (a `--long` option) or a GNU abbreviation of it, with or
/// without `=value`.
fn abbreviation_of(arg: &str, option: &str) -> bool {
    let Some(name) = arg.strip_prefix("--") else { return false };
    let name = name.split('=').next().unwrap_or(name);
    !name.is_empty() && option.strip_prefix("--").is_some_and(|o| o.starts_with(name))
}

/// `git status|log|diff|show|...` with no global options before the subcommand (`-c`
/// could set a pager or an fsmonitor command) and no option that writes a file.
fn git_is_safe(args: &[String]) -> bool {
    let Some((sub, rest)) = args.split_first() else { return false };
    let writes = rest.iter().any(|a| {
        a.starts_with("--output")
            || a == "-o"
            || a.starts_with("--ext-diff")
            || ["--output", "--ext-diff", "--textconv"].iter().any(|l| abbreviation_of(a, l))
    });
    if writes {
        return false;
    }
    let operands = || rest.iter().filter(|a| !a.starts_with('-'));
    match sub.as_str() {
        "status" | "log" | "diff" | "show" | "rev-parse" | "ls-files" | "blame" | "describe" | "shortlog" => true,
        "branch" | "tag" => {
            operands().count() == 0
                && rest.iter().all(|a| {
                    matches!(a.as_str(), "-a" | "-r" | "-v" | "-vv" | "-l" | "--list" | "--all" | "--show-current")
                })
        }
        "remote" => rest.iter().all(|a| a == "-v"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_read_only_commands_are_known_safe() {
        for c in [
            "ls -la",
            "ls src | wc -l",
            "cat README.md",
            "git status",
            "git log --oneline -5 && git diff HEAD~1",
            "rg -n 'fn main' src",
            "grep -r \"a b\" .",
            "find . -name '*.rs'",
            "date +%s",
            "pwd; ls",
        ] {
            assert!(is_known_safe(c), "{c}");
        }
    }

    #[test]
    fn anything_the_parse_does_not_fully_understand_is_not() {
        for c in [
            "",
            "rm -rf ~",
            "$(echo rm) -rf ~",
            "`echo rm` -rf ~",
            "{rm,-rf,~}",
            "X=rm; $X -rf ~",
            "ls > out.txt",
            "cat < /etc/passwd",
            "ls &",
            "ls | sh",
            "echo cm0gLXJmIH4= | base64 -d | sh",
            "bash -c 'ls'",
            "python3 -c 'print(1)'",
            "eval ls",
            "source x.sh",
            "find ~ -type f -exec rm {} +",
            "find . -delete",
            "ls *",
            "cat ~/.ssh/id_ed25519",
            "ls ~",
            "ls --dir=~/x",
            "cat /home/u/.ssh/id_ed25519",
            "cat \"$HOME/x\"",
            "ls \\",
            "ls 'unterminated",
            "git -c core.pager=sh log",
            "git push --force",
            "git branch -D main",
            "git diff --output=x",
            "sort -o out in",
            "sort -uo out in",
            "date -s 2020-01-01",
            "date 010101012020",
            "ls # comment",
            "ls\nrm x",
            "(ls)",
            "ls ||",
            "| ls",
            "ls ;; ls",
            "FOO=1 ls",
            "ls\u{202e}",
            "uniq in out",
            "tree -o f",
            "rg --pre sh x",
            "/bin/ls",
            "sudo ls",
        ] {
            assert!(!is_known_safe(c), "{c:?}");
        }
    }

    #[test]
    fn separators_join_known_safe_commands_but_backgrounding_does_not() {
        for c in ["ls || pwd", "ls && pwd", "ls | wc -l", "ls; pwd"] {
            assert!(is_known_safe(c), "{c}");
        }
        for c in ["ls & pwd", "ls |& cat", "ls && rm x", "rm x || ls"] {
            assert!(!is_known_safe(c), "{c}");
        }
    }

    #[test]
    fn non_ascii_words_are_plain_but_control_and_bidi_characters_never_are() {
        for c in ["cat naïve.txt", "ls 文件", "echo 'ünïcode'", "grep \"é\" f"] {
            assert!(is_known_safe(c), "{c}");
        }
        for c in [
            "ls a\u{202e}b",
            "echo 'a\u{202e}b'",
            "echo \"a\u{2066}b\"",
            "echo 'a\u{7}b'",
            "echo \"a\u{1b}[2Jb\"",
            "ls \u{200f}x",
        ] {
            assert!(!is_known_safe(c), "{c:?}");
        }
    }

    #[test]
    fn a_tilde_is_plain_only_inside_a_word() {
        assert!(is_known_safe("git log HEAD~2..HEAD"));
        for c in ["ls x:~/y", "ls ~/y", "cat a=~/b"] {
            assert!(!is_known_safe(c), "{c}");
        }
    }

    /// Each command with an argument-dependent rule: what stays read-only and what does not.
    #[test]
    fn per_command_rules_allow_the_read_only_forms_and_refuse_the_writing_ones() {
        let cases: &[(&str, bool)] = &[
            ("sort -r -n data.txt", true),
            ("sort --ignore-case out.txt", true),
            ("sort -o out in", false),
            ("sort --output=out in", false),
            ("sort --compress-program=sh in", false),
            ("sort -S 1 --com=sh in", false),
            ("sort --comp sh in", false),
            ("sort --outp=x in", false),
            ("git diff --ext=x", false),
            ("git log --out=x", false),
            ("sort -ro out in", false),
            ("uniq -c in", true),
            ("uniq in", true),
            ("uniq -c in out", false),
            ("tree -L 2 src", true),
            ("tree --output=f", false),
            ("file Cargo.toml", true),
            ("file -C -m magic", false),
            ("file --compile", false),
            ("date", true),
            ("date -u +%F", true),
            ("date --set=2020-01-01", false),
            ("date -f dates.txt", false),
            ("hostname", true),
            ("hostname -f", true),
            ("hostname newname", false),
            ("hostname -F /etc/hostname", false),
            ("hostname -b x", false),
            ("printf %s x", true),
            ("printf -v var %s x", false),
            ("rg -n foo src", true),
            ("rg -z foo", false),
            ("rg --search-zip foo", false),
            ("rg --pre=sh foo", false),
            ("find . -type f -print", true),
            ("find . -ok rm", false),
            ("find . -fprint out", false),
            ("cat .config/talaria/x", false),
            ("ls .aws", false),
        ];
        for (c, safe) in cases {
            assert_eq!(is_known_safe(c), *safe, "{c}");
        }
    }

    #[test]
    fn git_is_known_safe_only_for_reading_subcommands() {
        let cases: &[(&str, bool)] = &[
            ("git", false),
            ("git status --short", true),
            ("git show HEAD", true),
            ("git blame src/lib.rs", true),
            ("git branch", true),
            ("git branch -a", true),
            ("git branch -vv --list", true),
            ("git tag", true),
            ("git tag -l", true),
            ("git remote", true),
            ("git remote -v", true),
            ("git branch newbranch", false),
            ("git branch -d", false),
            ("git tag v1.0", false),
            ("git remote add origin x", false),
            ("git log -o x", false),
            ("git diff --ext-diff", false),
            ("git stash", false),
            ("git commit -m x", false),
        ];
        for (c, safe) in cases {
            assert_eq!(is_known_safe(c), *safe, "{c}");
        }
    }
}
