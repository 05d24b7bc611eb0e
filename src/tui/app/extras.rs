//! Everyday conveniences on top of the input: slash-command completion, large pastes
//! shown as placeholders, mouse capture on/off, copying the last answer (OSC 52), and the
//! requests for the event loop to suspend or to run an editor.

use crate::protocol::commands::{CommandHelp, COMMANDS};
use crate::protocol::NoticeLevel;
use crate::tui::keymap::{Action, Context};
use crate::tui::transcript::CellBody;

use super::{App, Layer};

/// A paste with more lines than this shows as a placeholder.
pub(crate) const PASTE_MAX_LINES: usize = 20;
/// A paste with more characters than this shows as a placeholder.
pub(crate) const PASTE_MAX_CHARS: usize = 2_000;
/// Rows of the completion popup.
pub(crate) const POPUP_MAX_ROWS: usize = 8;

/// Something only the event loop can do, because it owns the terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TerminalRequest {
    /// Ctrl+Z: give the terminal back and stop until `fg`.
    Suspend,
    /// Ctrl+G: edit this text in `$VISUAL`/`$EDITOR`; the result replaces the input.
    Editor(String),
}

/// A large paste kept out of the input: `placeholder` stands for `text` until submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Paste {
    pub(crate) placeholder: String,
    pub(crate) text: String,
}

/// The command word of a usage line (`/jobs [log|…]` -> `/jobs`).
fn command_name(c: &CommandHelp) -> &'static str {
    c.usage.split_whitespace().next().unwrap_or(c.usage)
}

/// The words of a usage line before its first argument (`/goal gate [list|…]` ->
/// `/goal gate`), and whether that command needs an argument (`<…>`).
fn usage_head(c: &CommandHelp) -> (String, bool) {
    let mut words = Vec::new();
    for word in c.usage.split_whitespace() {
        if word.starts_with('<') {
            return (words.join(" "), true);
        }
        if word.starts_with('[') {
            break;
        }
        words.push(word);
    }
    (words.join(" "), false)
}

/// OSC 52 "set clipboard" for `text` (base64, as terminals expect).
pub(crate) fn osc52(text: &str) -> String {
    format!("\x1b]52;c;{}\x07", base64(text.as_bytes()))
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

impl App {
    /// The slash commands matching what is typed: the input is one line starting with `/`
    /// and no space yet, and the input has the focus.
    pub(crate) fn completions(&self) -> Vec<&'static CommandHelp> {
        let typing = self.top_layer() == Layer::Input && self.input.lines().len() == 1;
        if !typing {
            return Vec::new();
        }
        let word = self.input.lines()[0].as_str();
        if !word.starts_with('/') || word.chars().any(char::is_whitespace) {
            return Vec::new();
        }
        if self.completion_dismissed.as_deref() == Some(word) {
            return Vec::new();
        }
        COMMANDS.iter().filter(|c| command_name(c).starts_with(word)).collect()
    }

    /// The highlighted row of the completion popup.
    pub(crate) fn completion_selected(&self) -> usize {
        self.completion_sel.min(self.completions().len().saturating_sub(1))
    }

    pub(super) fn completion_move(&mut self, down: bool) {
        let n = self.completions().len();
        if n == 0 {
            return;
        }
        let at = self.completion_selected();
        self.completion_sel = if down { (at + 1) % n } else { (at + n - 1) % n };
    }

    /// Esc: close the popup until the input changes.
    pub(super) fn dismiss_completions(&mut self) {
        self.completion_dismissed = Some(self.input_text());
    }

    /// The command the popup would take: the only match, or the highlighted one.
    fn chosen_completion(&self) -> Option<&'static CommandHelp> {
        let matches = self.completions();
        matches.get(self.completion_selected()).copied()
    }

    /// Tab: complete the only matching command, or the highlighted one. A command that
    /// takes arguments gets a space after it.
    pub(super) fn complete(&mut self) {
        let Some(chosen) = self.chosen_completion() else { return };
        let (head, _) = usage_head(chosen);
        let text = if chosen.usage.len() > head.len() { format!("{head} ") } else { head };
        self.reset_input(text);
        self.completion_sel = 0;
    }

    /// Enter with the popup open: the highlighted command. Returns true when it is ready
    /// to run; one that needs an argument is completed and waits for it.
    pub(super) fn accept_completion(&mut self) -> bool {
        let Some(chosen) = self.chosen_completion() else { return true };
        let (head, required) = usage_head(chosen);
        self.completion_sel = 0;
        if required {
            self.reset_input(format!("{head} "));
            false
        } else {
            self.reset_input(head);
            true
        }
    }

    /// The `@path` being typed at the cursor (without the `@`), if any.
    pub(super) fn mention_at_cursor(&self) -> Option<String> {
        let cursor = self.input.cursor();
        let (row, col) = (cursor.0, cursor.1);
        let line = self.input.lines().get(row)?;
        let before: String = line.chars().take(col).collect();
        let word = before.rsplit(char::is_whitespace).next().unwrap_or("");
        word.strip_prefix('@').map(str::to_string)
    }

    /// The paths that start with `prefix` (from the event loop): one is completed, several
    /// are completed as far as they agree and listed in the hint line.
    pub(crate) fn paths_listed(&mut self, prefix: &str, found: Vec<String>) {
        if self.mention_at_cursor().as_deref() != Some(prefix) {
            return; // the input changed meanwhile
        }
        let Some(first) = found.first() else {
            self.input_hint = Some(format!("no file here starts with {prefix}"));
            return;
        };
        let common = found.iter().fold(first.clone(), |acc, p| {
            acc.chars().zip(p.chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).collect()
        });
        let completion = if found.len() == 1 && !first.ends_with('/') { format!("{first} ") } else { common };
        if completion.len() > prefix.len() {
            for _ in 0..prefix.chars().count() {
                self.input.delete_char();
            }
            self.input.insert_str(&completion);
        }
        if found.len() > 1 {
            let names: Vec<&str> =
                found.iter().map(|p| p.trim_end_matches('/').rsplit('/').next().unwrap_or(p.as_str())).collect();
            self.input_hint = Some(format!("{} files: {}", found.len(), names.join(" ")));
        }
    }

    /// Paste into the input; a large one becomes a placeholder that submit expands.
    pub(super) fn paste_into_input(&mut self, text: String) {
        let lines = text.lines().count();
        let chars = text.chars().count();
        if lines <= PASTE_MAX_LINES && chars <= PASTE_MAX_CHARS {
            self.input.insert_str(text);
            return;
        }
        let what = if lines > PASTE_MAX_LINES { format!("{lines} lines") } else { format!("{chars} chars") };
        let base = format!("[pasted {what}");
        let same = self.pastes.iter().filter(|p| p.placeholder.starts_with(&base)).count();
        let placeholder = if same == 0 { format!("{base}]") } else { format!("{base} #{}]", same + 1) };
        self.input.insert_str(&placeholder);
        self.pastes.push(Paste { placeholder, text });
    }

    /// The input with every paste placeholder still in it replaced by its text.
    pub(crate) fn expanded_input(&self) -> String {
        let mut text = self.input_text();
        for paste in &self.pastes {
            text = text.replacen(&paste.placeholder, &paste.text, 1);
        }
        text
    }

    /// `/mouse` or F2: mouse capture on or off. The event loop applies it.
    pub(super) fn toggle_mouse(&mut self) {
        self.mouse = !self.mouse;
        let key = self.keymap.hint(Context::Global, Action::ToggleMouse);
        let text = if self.mouse {
            format!("mouse capture on: the wheel scrolls the transcript ({key} or /mouse turns it off)")
        } else {
            format!("mouse capture off: select text with the mouse ({key} or /mouse turns it back on)")
        };
        self.transcript.push(CellBody::Notice { level: NoticeLevel::Info, text });
    }

    /// The text of the newest assistant answer that has any.
    pub(crate) fn last_answer(&self) -> Option<&str> {
        self.transcript.cells().iter().rev().find_map(|c| match &c.body {
            CellBody::Assistant { text, .. } if !text.trim().is_empty() => Some(text.as_str()),
            _ => None,
        })
    }

    /// `/copy`: the last answer to the clipboard via OSC 52 (the event loop writes it).
    pub(super) fn copy_last_answer(&mut self) {
        let (level, text) = match self.last_answer().map(str::to_string) {
            Some(answer) => {
                let chars = answer.chars().count();
                self.clipboard = Some(osc52(&answer));
                let tmux = if self.in_tmux {
                    " — inside tmux it reaches your terminal only with `set -g set-clipboard on` in tmux.conf"
                } else {
                    ""
                };
                (NoticeLevel::Info, format!("copied the last answer ({chars} chars) to the clipboard{tmux}"))
            }
            None => (NoticeLevel::Warn, "nothing to copy yet: no answer in this session".to_string()),
        };
        self.transcript.push(CellBody::Notice { level, text });
    }

    /// Ctrl+G: hand the input (pastes expanded) to the event loop for the editor.
    pub(super) fn open_editor(&mut self) {
        let text = self.expanded_input();
        self.terminal_request = Some(TerminalRequest::Editor(text));
    }

    /// The editor finished: its text becomes the input (`None`: it failed, keep the input).
    pub(crate) fn editor_done(&mut self, result: Result<String, String>) {
        match result {
            Ok(text) => {
                let text = text.strip_suffix('\n').unwrap_or(&text).to_string();
                self.pastes.clear();
                self.reset_input(text);
            }
            Err(message) => self.transcript.push(CellBody::Notice { level: NoticeLevel::Error, text: message }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"hello, world"), "aGVsbG8sIHdvcmxk");
        assert_eq!(osc52("hi"), "\x1b]52;c;aGk=\x07");
    }
}
