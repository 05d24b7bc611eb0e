//! Keys -> actions, from `ui/keymap.toml` (embedded) with the user's file on top.

use std::fmt;
use std::path::{Path, PathBuf};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

const DEFAULT_KEYMAP: &str = include_str!("../../ui/keymap.toml");

/// Where a key is pressed: each context has its own bindings; `Global` applies when the
/// current context does not bind the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Context {
    Global,
    Input,
    Panes,
    Log,
    Approval,
    Help,
    Confirm,
    Picker,
}

impl Context {
    pub(crate) const ALL: [Context; 8] = [
        Context::Global,
        Context::Input,
        Context::Panes,
        Context::Log,
        Context::Approval,
        Context::Help,
        Context::Confirm,
        Context::Picker,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Context::Global => "global",
            Context::Input => "input",
            Context::Panes => "panes",
            Context::Log => "log",
            Context::Approval => "approval",
            Context::Help => "help",
            Context::Confirm => "confirm",
            Context::Picker => "picker",
        }
    }

    pub(crate) fn title(self) -> &'static str {
        match self {
            Context::Global => "Everywhere",
            Context::Input => "Message input",
            Context::Panes => "Tools and jobs panes (sub-agents too)",
            Context::Log => "Log view",
            Context::Approval => "Approval",
            Context::Help => "Help",
            Context::Confirm => "Questions",
            Context::Picker => "Choosing from a list (/resume with several matches, /rewind)",
        }
    }

    fn from_name(name: &str) -> Option<Context> {
        Context::ALL.into_iter().find(|c| c.name() == name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    Cancel,
    Background,
    Help,
    ToggleReasoning,
    ToggleMouse,
    Suspend,
    Submit,
    Complete,
    ExternalEditor,
    Queue,
    FocusPanes,
    Newline,
    Interrupt,
    Quit,
    HelpEmpty,
    HistoryPrev,
    HistoryNext,
    ScrollUp,
    ScrollDown,
    ScrollTop,
    ScrollBottom,
    LineStart,
    LineEnd,
    KillToEnd,
    KillToStart,
    DeleteWord,
    WordBack,
    WordForward,
    Up,
    Down,
    Open,
    Kill,
    Poll,
    Write,
    Watch,
    NextPane,
    Back,
    LineUp,
    LineDown,
    PageUp,
    PageDown,
    Top,
    Follow,
    Search,
    NextMatch,
    PrevMatch,
    Close,
    Once,
    Session,
    Always,
    Deny,
    DenyAndStop,
    Yes,
    No,
    Keep,
}

/// Every bindable (context, action) with its name in keymap.toml and its help text.
/// The order here is the order in the help overlay and the order in which two actions
/// bound to one key are tried.
pub(crate) const BINDABLE: &[(Context, Action, &str, &str)] = &[
    (Context::Global, Action::Cancel, "cancel", "stop the turn when busy, else clear the input; twice quits"),
    (Context::Global, Action::Background, "background", "move running commands to background jobs"),
    (Context::Global, Action::Help, "help", "this help"),
    (Context::Global, Action::ToggleReasoning, "toggle_reasoning", "show or hide details: the model's reasoning, MCP results, folded pastes"),
    (Context::Global, Action::ToggleMouse, "toggle_mouse", "mouse capture on/off (off: the terminal selects text)"),
    (Context::Global, Action::Suspend, "suspend", "suspend Talaria to the shell (`fg` resumes)"),
    (Context::Input, Action::Submit, "submit", "send (while busy: the configured busy mode)"),
    (Context::Input, Action::Complete, "complete", "complete the slash command or @path (when idle)"),
    (Context::Input, Action::Queue, "queue", "while busy: queue the message for the next turn"),
    (
        Context::Input,
        Action::FocusPanes,
        "focus_panes",
        "the jobs and tools panes (Tab: on an empty input); below 80 columns they show in the transcript's place",
    ),
    (Context::Input, Action::Newline, "newline", "insert a new line"),
    (Context::Input, Action::Interrupt, "interrupt", "stop the running turn"),
    (Context::Input, Action::Quit, "quit", "quit (on an empty input)"),
    (Context::Input, Action::HelpEmpty, "help_empty", "this help (on an empty input)"),
    (Context::Input, Action::HistoryPrev, "history_prev", "earlier message (on an empty input)"),
    (Context::Input, Action::HistoryNext, "history_next", "later message"),
    (Context::Input, Action::ScrollUp, "scroll_up", "scroll the transcript up a page"),
    (Context::Input, Action::ScrollDown, "scroll_down", "scroll the transcript down a page"),
    (Context::Input, Action::ScrollTop, "scroll_top", "transcript start (Home: on an empty input)"),
    (Context::Input, Action::ScrollBottom, "scroll_bottom", "follow new output (End: on an empty input)"),
    (Context::Input, Action::LineStart, "line_start", "start of line"),
    (Context::Input, Action::LineEnd, "line_end", "end of line"),
    (Context::Input, Action::KillToEnd, "kill_to_end", "delete to the end of the line"),
    (Context::Input, Action::KillToStart, "kill_to_start", "delete to the start of the line"),
    (Context::Input, Action::DeleteWord, "delete_word", "delete the word before the cursor"),
    (Context::Input, Action::WordBack, "word_back", "word back"),
    (Context::Input, Action::WordForward, "word_forward", "word forward"),
    (Context::Input, Action::ExternalEditor, "external_editor", "edit the message in $VISUAL / $EDITOR"),
    (Context::Panes, Action::Up, "up", "select the previous entry"),
    (Context::Panes, Action::Down, "down", "select the next entry"),
    (Context::Panes, Action::Open, "open", "open the log of the selected entry (a sub-agent's: its conversation, live)"),
    (Context::Panes, Action::Kill, "kill", "kill the selected job (asks first; a sub-agent: with every command it started)"),
    (Context::Panes, Action::Poll, "poll", "refresh the selected job"),
    (Context::Panes, Action::Write, "write", "write a line to the selected job's stdin (a sub-agent: a message, as if typed while busy)"),
    (Context::Panes, Action::Watch, "watch", "watch the selected job's output for a pattern (you are told)"),
    (Context::Panes, Action::NextPane, "next_pane", "next pane, then back to the input"),
    (Context::Panes, Action::Back, "back", "back to the input"),
    (Context::Log, Action::LineUp, "line_up", "scroll up a line (stops following)"),
    (Context::Log, Action::LineDown, "line_down", "scroll down a line"),
    (Context::Log, Action::PageUp, "page_up", "scroll up a page"),
    (Context::Log, Action::PageDown, "page_down", "scroll down a page"),
    (Context::Log, Action::Top, "top", "start of the log"),
    (Context::Log, Action::Follow, "follow", "the end of the log; follow new output"),
    (Context::Log, Action::Kill, "kill", "kill the job (asks first)"),
    (Context::Log, Action::Poll, "poll", "refresh the job"),
    (Context::Log, Action::Write, "write", "write a line to the job's stdin (a sub-agent: a message to it)"),
    (Context::Log, Action::Watch, "watch", "watch the job's output for a pattern: each matching line is shown in the transcript and rings the terminal's bell (ui.notify)"),
    (Context::Log, Action::Search, "search", "search the log (type, then Enter)"),
    (Context::Log, Action::NextMatch, "next_match", "next match (wraps to the first)"),
    (Context::Log, Action::PrevMatch, "prev_match", "previous match"),
    (Context::Log, Action::Close, "close", "close the log view"),
    (Context::Approval, Action::Once, "once", "allow this command once"),
    (Context::Approval, Action::Session, "session", "allow this kind of command for the session"),
    (Context::Approval, Action::Always, "always", "always allow this exact command"),
    (Context::Approval, Action::Deny, "deny", "deny it"),
    (Context::Approval, Action::DenyAndStop, "deny_and_stop", "deny it and stop the turn"),
    (Context::Help, Action::Close, "close", "close the help"),
    (Context::Help, Action::LineUp, "line_up", "scroll up"),
    (Context::Help, Action::LineDown, "line_down", "scroll down"),
    (Context::Help, Action::PageUp, "page_up", "scroll up a page"),
    (Context::Help, Action::PageDown, "page_down", "scroll down a page"),
    (Context::Help, Action::Top, "top", "the start of the help"),
    (Context::Help, Action::Follow, "bottom", "the end of the help"),
    (Context::Confirm, Action::Yes, "yes", "yes (in /rewind: put back what it lists)"),
    (Context::Confirm, Action::No, "no", "no (the default: Enter is the safe answer)"),
    (Context::Confirm, Action::Keep, "keep", "quit and keep the jobs running (talaria -c re-attaches them)"),
    (Context::Picker, Action::Up, "up", "the previous row"),
    (Context::Picker, Action::Down, "down", "the next row"),
    (Context::Picker, Action::Open, "open", "resume the selected session; in /rewind, choose the point, then what to restore"),
    (Context::Picker, Action::Close, "close", "cancel (in /rewind's restore choice: back to the points)"),
];

/// A key with its modifiers, normalised so that `?` matches with or without Shift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyChord {
    pub(crate) code: KeyCode,
    pub(crate) mods: KeyModifiers,
}

impl KeyChord {
    pub(crate) fn new(code: KeyCode, mods: KeyModifiers) -> KeyChord {
        let relevant = KeyModifiers::CONTROL | KeyModifiers::ALT | KeyModifiers::SHIFT;
        let mut mods = mods & relevant;
        let code = match code {
            // Shift is already in the character itself.
            KeyCode::Char(c) => {
                mods.remove(KeyModifiers::SHIFT);
                if mods.contains(KeyModifiers::CONTROL) {
                    KeyCode::Char(c.to_ascii_lowercase())
                } else {
                    KeyCode::Char(c)
                }
            }
            KeyCode::BackTab => {
                mods.remove(KeyModifiers::SHIFT);
                KeyCode::BackTab
            }
            other => other,
        };
        KeyChord { code, mods }
    }

    pub(crate) fn from_event(key: &KeyEvent) -> KeyChord {
        KeyChord::new(key.code, key.modifiers)
    }

    /// Parse "ctrl+c", "alt+enter", "f1", "?".
    pub fn parse(text: &str) -> Result<KeyChord, String> {
        let lower = text.trim();
        if lower.is_empty() {
            return Err("empty key".into());
        }
        let mut mods = KeyModifiers::NONE;
        let mut rest = lower;
        while let Some((head, tail)) = rest.split_once('+') {
            if tail.is_empty() {
                break; // "ctrl++" or "+": the key is '+'
            }
            match head.to_ascii_lowercase().as_str() {
                "ctrl" | "control" => mods |= KeyModifiers::CONTROL,
                "alt" | "meta" | "option" => mods |= KeyModifiers::ALT,
                "shift" => mods |= KeyModifiers::SHIFT,
                other => return Err(format!("unknown modifier \"{other}\" in \"{text}\"")),
            }
            rest = tail;
        }
        let code = match rest.to_ascii_lowercase().as_str() {
            "enter" | "return" => KeyCode::Enter,
            "tab" => KeyCode::Tab,
            "backtab" => KeyCode::BackTab,
            "esc" | "escape" => KeyCode::Esc,
            "up" => KeyCode::Up,
            "down" => KeyCode::Down,
            "left" => KeyCode::Left,
            "right" => KeyCode::Right,
            "home" => KeyCode::Home,
            "end" => KeyCode::End,
            "pageup" | "pgup" => KeyCode::PageUp,
            "pagedown" | "pgdn" => KeyCode::PageDown,
            "backspace" => KeyCode::Backspace,
            "delete" | "del" => KeyCode::Delete,
            "space" => KeyCode::Char(' '),
            f if f.len() >= 2 && f.starts_with('f') && f[1..].chars().all(|c| c.is_ascii_digit()) => {
                let n: u8 = f[1..].parse().map_err(|_| format!("unknown key \"{text}\""))?;
                if !(1..=12).contains(&n) {
                    return Err(format!("unknown key \"{text}\""));
                }
                KeyCode::F(n)
            }
            _ => {
                let mut chars = rest.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => KeyCode::Char(c),
                    _ => return Err(format!("unknown key \"{text}\"")),
                }
            }
        };
        Ok(KeyChord::new(code, mods))
    }
}

impl fmt::Display for KeyChord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mods.contains(KeyModifiers::CONTROL) {
            f.write_str("Ctrl+")?;
        }
        if self.mods.contains(KeyModifiers::ALT) {
            f.write_str("Alt+")?;
        }
        if self.mods.contains(KeyModifiers::SHIFT) {
            f.write_str("Shift+")?;
        }
        match self.code {
            KeyCode::Enter => f.write_str("Enter"),
            KeyCode::Tab => f.write_str("Tab"),
            KeyCode::BackTab => f.write_str("Shift+Tab"),
            KeyCode::Esc => f.write_str("Esc"),
            KeyCode::Up => f.write_str("↑"),
            KeyCode::Down => f.write_str("↓"),
            KeyCode::Left => f.write_str("←"),
            KeyCode::Right => f.write_str("→"),
            KeyCode::Home => f.write_str("Home"),
            KeyCode::End => f.write_str("End"),
            KeyCode::PageUp => f.write_str("PgUp"),
            KeyCode::PageDown => f.write_str("PgDn"),
            KeyCode::Backspace => f.write_str("Backspace"),
            KeyCode::Delete => f.write_str("Del"),
            KeyCode::F(n) => write!(f, "F{n}"),
            KeyCode::Char(' ') => f.write_str("Space"),
            KeyCode::Char(c) if self.mods.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT) => {
                write!(f, "{}", c.to_ascii_uppercase())
            }
            KeyCode::Char(c) => write!(f, "{c}"),
            other => write!(f, "{other:?}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    pub(crate) context: Context,
    pub(crate) action: Action,
    pub(crate) name: &'static str,
    pub(crate) help: &'static str,
    pub(crate) keys: Vec<KeyChord>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keymap {
    bindings: Vec<Binding>,
}

/// A keymap file that cannot be used: what is wrong, where, and what to write instead.
/// Formatted as config errors are (`file:line: section.action: …`); talaria exits 2.
#[derive(Debug, thiserror::Error)]
pub enum KeymapError {
    #[error("{}: cannot read: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}:{line}: {message}", path.display())]
    Invalid { path: PathBuf, line: usize, message: String },
}

/// A problem in a keymap document: its line (1-based) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeymapProblem {
    pub(crate) line: usize,
    pub(crate) message: String,
}

impl fmt::Display for KeymapProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// The line of `action = …` in `[section]` (else the section's header, else 1).
fn line_of(text: &str, section: &str, action: Option<&str>) -> usize {
    let mut in_section = false;
    let mut header = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            in_section = line.trim_start_matches('[').trim_end_matches(']').trim() == section;
            if in_section && header.is_none() {
                header = Some(i + 1);
            }
            continue;
        }
        let Some(action) = action.filter(|_| in_section) else { continue };
        let key = line.split('=').next().unwrap_or("").trim().trim_matches('"');
        if line.contains('=') && key == action {
            return i + 1;
        }
    }
    header.unwrap_or(1)
}

impl Keymap {
    /// The built-in keymap.
    pub fn builtin() -> Keymap {
        let mut map = Keymap {
            bindings: BINDABLE
                .iter()
                .map(|&(context, action, name, help)| Binding { context, action, name, help, keys: Vec::new() })
                .collect(),
        };
        // A test checks the embedded file parses; a failure here would leave keys unbound.
        if let Err(e) = map.apply(DEFAULT_KEYMAP) {
            tracing::error!("built-in keymap: {e}");
        }
        map
    }

    /// The built-in keymap with the user's file on top (a missing file is fine).
    pub fn load(user_file: &Path) -> Result<Keymap, KeymapError> {
        let mut map = Keymap::builtin();
        match std::fs::read_to_string(user_file) {
            Ok(text) => map.apply(&text).map_err(|p| KeymapError::Invalid {
                path: user_file.to_path_buf(),
                line: p.line,
                message: p.message,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(KeymapError::Read { path: user_file.to_path_buf(), source }),
        }
        Ok(map)
    }

    /// Replace the keys of every action the document names.
    pub(crate) fn apply(&mut self, text: &str) -> Result<(), KeymapProblem> {
        let file: toml::Table = toml::from_str(text).map_err(|e| KeymapProblem {
            line: e.span().map_or(1, |s| text[..s.start.min(text.len())].matches('\n').count() + 1),
            message: e.message().trim().replace('\n', " "),
        })?;
        for (section, actions) in file {
            let problem = |action: Option<&str>, message: String| KeymapProblem {
                line: line_of(text, &section, action),
                message,
            };
            let Some(context) = Context::from_name(&section) else {
                let names: Vec<&str> = Context::ALL.iter().map(|c| c.name()).collect();
                return Err(problem(
                    None,
                    format!("unknown section [{section}]; expected one of {}", names.join(", ")),
                ));
            };
            let toml::Value::Table(actions) = actions else {
                return Err(problem(None, format!("{section}: expected a section [{section}] of actions")));
            };
            for (action, value) in actions {
                let at = |message: String| problem(Some(&action), format!("{section}.{action}: {message}"));
                let Some(binding) = self.bindings.iter_mut().find(|b| b.context == context && b.name == action) else {
                    return Err(at("no such action; `?` in talaria lists them".to_string()));
                };
                let keys: Vec<String> = match value {
                    toml::Value::Array(items) => items
                        .iter()
                        .map(|k| k.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .ok_or_else(|| at("expected a list of keys as strings, e.g. [\"ctrl+x\"]".to_string()))?,
                    // The likeliest slip: one key without the brackets.
                    toml::Value::String(key) => {
                        return Err(at(format!("expected a list of keys: write {action} = [\"{key}\"]")));
                    }
                    other => {
                        return Err(at(format!(
                            "expected a list of keys, e.g. [\"ctrl+x\"], not a {}",
                            other.type_str()
                        )))
                    }
                };
                let parsed = keys.iter().map(|k| KeyChord::parse(k)).collect::<Result<Vec<_>, _>>().map_err(&at)?;
                if parsed.is_empty() && binding.action == Action::Submit {
                    return Err(at("needs at least one key (with none, nothing could be sent)".to_string()));
                }
                binding.keys = parsed;
            }
        }
        Ok(())
    }

    /// Actions bound to `key` in `context`, then in `Global`, in table order.
    pub(crate) fn actions(&self, context: Context, key: &KeyEvent) -> Vec<Action> {
        let chord = KeyChord::from_event(key);
        let find = |ctx: Context| -> Vec<Action> {
            self.bindings.iter().filter(|b| b.context == ctx && b.keys.contains(&chord)).map(|b| b.action).collect()
        };
        let mut found = find(context);
        if context != Context::Global {
            found.extend(find(Context::Global));
        }
        found
    }

    pub(crate) fn keys(&self, context: Context, action: Action) -> &[KeyChord] {
        self.bindings.iter().find(|b| b.context == context && b.action == action).map_or(&[], |b| b.keys.as_slice())
    }

    /// The first key of an action as text, for hints ("Esc", "Ctrl+B").
    pub(crate) fn hint(&self, context: Context, action: Action) -> String {
        self.keys(context, action).first().map(|k| k.to_string()).unwrap_or_default()
    }

    pub(crate) fn bindings(&self) -> &[Binding] {
        &self.bindings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn key(code: KeyCode, mods: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, mods)
    }

    #[test]
    fn builtin_keymap_binds_every_action() {
        let map = Keymap::builtin();
        let mut parsed = Keymap {
            bindings: BINDABLE
                .iter()
                .map(|&(context, action, name, help)| Binding { context, action, name, help, keys: Vec::new() })
                .collect(),
        };
        parsed.apply(DEFAULT_KEYMAP).expect("ui/keymap.toml parses");
        for b in map.bindings() {
            assert!(!b.keys.is_empty(), "[{}] {} has no key", b.context.name(), b.name);
        }
    }

    #[test]
    fn a_keymap_that_leaves_submit_without_a_key_is_rejected() {
        let mut map = Keymap::builtin();
        let err = map.apply("[input]\nsubmit = []\n").unwrap_err().to_string();
        assert!(err.contains("submit") && err.contains("at least one key"), "{err}");
        // Other actions may be unbound on purpose.
        map.apply("[input]\nnewline = []\n").unwrap();
    }

    #[test]
    fn keys_parse_and_match_events() {
        let map = Keymap::builtin();
        assert_eq!(map.actions(Context::Input, &key(KeyCode::Enter, KeyModifiers::NONE)), vec![Action::Submit]);
        assert_eq!(map.actions(Context::Input, &key(KeyCode::Enter, KeyModifiers::ALT)), vec![Action::Newline]);
        assert_eq!(map.actions(Context::Input, &key(KeyCode::Char('j'), KeyModifiers::CONTROL)), vec![Action::Newline]);
        assert_eq!(map.actions(Context::Input, &key(KeyCode::Char('?'), KeyModifiers::SHIFT)), vec![Action::HelpEmpty]);
        assert_eq!(
            map.actions(Context::Input, &key(KeyCode::Tab, KeyModifiers::NONE)),
            vec![Action::Complete, Action::Queue, Action::FocusPanes]
        );
        // Global bindings apply in every context.
        assert_eq!(map.actions(Context::Log, &key(KeyCode::Char('c'), KeyModifiers::CONTROL)), vec![Action::Cancel]);
        assert_eq!(map.hint(Context::Global, Action::Background), "Ctrl+B");
        assert_eq!(KeyChord::parse("ctrl++").unwrap(), KeyChord::new(KeyCode::Char('+'), KeyModifiers::CONTROL));
        assert!(KeyChord::parse("hyper+x").is_err());
        assert!(KeyChord::parse("f13").is_err());
    }

    /// A keymap error names the file, the line and the key, and says what to write, as a
    /// config error does (it was `invalid type: string "ctrl+x", expected a sequence`).
    #[test]
    fn a_bad_keymap_names_the_line_the_key_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keymap.toml");
        std::fs::write(&file, "# mine\n[global]\nhelp = [\"f1\"]\n\n[input]\nquit = \"ctrl+x\"\n").unwrap();
        let err = Keymap::load(&file).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("{}:6: input.quit: expected a list of keys: write quit = [\"ctrl+x\"]", file.display())
        );
        std::fs::write(&file, "[log]\nclose = [\"esc\", \"hyper+q\"]\n").unwrap();
        let err = Keymap::load(&file).unwrap_err().to_string();
        assert!(err.ends_with(":2: log.close: unknown modifier \"hyper\" in \"hyper+q\""), "{err}");
        std::fs::write(&file, "[panes\nup = [\"k\"]\n").unwrap();
        let err = Keymap::load(&file).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:1: ", file.display())), "{err}");
    }

    #[test]
    fn user_file_overrides_entries() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keymap.toml");
        std::fs::write(&file, "[global]\nbackground = [\"ctrl+g\"]\n").unwrap();
        let map = Keymap::load(&file).unwrap();
        assert_eq!(map.hint(Context::Global, Action::Background), "Ctrl+G");
        assert_eq!(map.hint(Context::Global, Action::Cancel), "Ctrl+C");
        std::fs::write(&file, "[input]\nfly = [\"x\"]\n").unwrap();
        let err = format!("{:#}", Keymap::load(&file).unwrap_err());
        assert!(err.contains("keymap.toml") && err.contains("fly"), "{err}");
        assert!(Keymap::load(&dir.path().join("missing.toml")).is_ok());
    }
}
