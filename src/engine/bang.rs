//! `!cmd`: the user runs a shell command themselves; its output becomes context for the
//! model. This is the pure part: recognising the input and writing the note.

use crate::emulate;
use crate::text::tail_chars;

/// How much of the output (the end of it) the model sees.
pub(crate) const MAX_OUTPUT_CHARS: usize = 4_000;

/// The first line of the note given to the model.
pub(crate) const HEADER: &str = "[The user ran a shell command]";

/// The command in a `!cmd` input, trimmed; `None` when the input is not one (or is just `!`).
pub(crate) fn parse_bang(input: &str) -> Option<&str> {
    let command = input.trim().strip_prefix('!')?.trim();
    (!command.is_empty()).then_some(command)
}

/// The user-context note for a command the user ran: the command, its exit code and the
/// last [`MAX_OUTPUT_CHARS`] characters of its output with escape sequences removed.
/// `exit_code` is `None` when there was none (killed by a signal, interrupted).
pub fn context_message(command: &str, exit_code: Option<i32>, output_tail: &str) -> String {
    let output = emulate::plain(output_tail);
    let output = output.trim_end();
    let exit = match exit_code {
        Some(code) => code.to_string(),
        None => "none (killed by a signal or interrupted)".to_string(),
    };
    let mut note = format!("{HEADER}\n$ {command}\nExit code: {exit}\n");
    if output.trim().is_empty() {
        note.push_str("Output: (none)");
        return note;
    }
    let total = output.chars().count();
    let tail = tail_chars(output, MAX_OUTPUT_CHARS);
    if total > MAX_OUTPUT_CHARS {
        note.push_str(&format!("Output (last {MAX_OUTPUT_CHARS} of {total} characters):\n…{tail}"));
    } else {
        note.push_str(&format!("Output (tail):\n{tail}"));
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn recognises_a_bang_line() {
        assert_eq!(parse_bang("!ls -la"), Some("ls -la"));
        assert_eq!(parse_bang("  ! cargo test  \n"), Some("cargo test"));
        assert_eq!(parse_bang("!echo a\necho b"), Some("echo a\necho b"));
        assert_eq!(parse_bang("!!"), Some("!"));
        assert_eq!(parse_bang("!"), None);
        assert_eq!(parse_bang("  !   "), None);
        assert_eq!(parse_bang("ls !"), None);
        assert_eq!(parse_bang("/help"), None);
        assert_eq!(parse_bang(""), None);
    }

    #[test]
    fn a_short_output_is_given_whole_without_escapes() {
        assert_eq!(
            context_message("cargo test", Some(0), "\x1b[32mok\x1b[0m 3 passed\n\n"),
            "[The user ran a shell command]\n$ cargo test\nExit code: 0\nOutput (tail):\nok 3 passed"
        );
    }

    #[test]
    fn no_output_and_no_exit_code_are_said_plainly() {
        assert_eq!(
            context_message("sleep 100", None, "\x1b[0m\n"),
            "[The user ran a shell command]\n$ sleep 100\nExit code: none (killed by a signal or interrupted)\nOutput: (none)"
        );
    }

    #[test]
    fn a_long_output_keeps_its_last_characters() {
        let output = format!("{}\nthe end", "é".repeat(10_000));
        let note = context_message("make", Some(2), &output);
        let total = output.chars().count();
        let header = format!(
            "[The user ran a shell command]\n$ make\nExit code: 2\nOutput (last {MAX_OUTPUT_CHARS} of {total} characters):\n…"
        );
        assert!(note.starts_with(&header), "{note:.200}");
        let tail = &note[header.len()..];
        assert_eq!(tail.chars().count(), MAX_OUTPUT_CHARS);
        assert!(tail.ends_with("é\nthe end"));
    }
}
