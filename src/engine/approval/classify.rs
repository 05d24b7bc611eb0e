//! Pure classification of commands and file writes (DESIGN §6).
//! SKELETON — the approvals helper replaces this.

use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classification {
    Safe,
    /// Needs the user's approval. `category` is the rule's short name (session approvals
    /// cover a category), `reason` a human sentence.
    Dangerous {
        category: &'static str,
        reason: String,
    },
    /// Refused outright, whatever the settings.
    Hardline {
        reason: String,
    },
}

pub fn classify_command(_command: &str) -> Classification {
    todo!()
}

pub fn classify_write(_path: &Path, _home: Option<&Path>) -> Classification {
    todo!()
}

/// Whitespace folded, for the allowlist.
pub fn normalise_command(command: &str) -> String {
    command.split_whitespace().collect::<Vec<_>>().join(" ")
}
