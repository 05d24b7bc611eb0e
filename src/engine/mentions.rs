//! `@path` references in a message: each names a file whose content is attached to the
//! message the model sees (size-capped, text only). The text the user typed is kept as is.

use std::path::Path;

use crate::engine::tools::resolve_path;

/// Bytes of one attached file, at most.
pub const MAX_ATTACH_BYTES: usize = 64 * 1024;
/// Files attached to one message, at most.
pub const MAX_ATTACHMENTS: usize = 8;

/// The `@path` words of `text` (a word starting with `@`, trailing punctuation removed).
pub fn mentioned_paths(text: &str) -> Vec<&str> {
    text.split_whitespace()
        .filter_map(|w| w.strip_prefix('@'))
        .map(|p| p.trim_end_matches([',', '.', ';', ':', ')', '!', '?']))
        .filter(|p| !p.is_empty())
        .collect()
}

/// `text` with the content of every mentioned file that exists appended.
pub fn expand(text: &str, cwd: &Path) -> String {
    let mut out = text.to_string();
    let mut attached = 0;
    for mention in mentioned_paths(text) {
        if attached == MAX_ATTACHMENTS {
            break;
        }
        let path = resolve_path(cwd, mention);
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if !meta.is_file() {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let sample = &bytes[..bytes.len().min(8192)];
        if sample.contains(&0) {
            out.push_str(&format!("\n\n[Attached file: {mention} — binary, not attached]"));
            continue;
        }
        let cut = bytes.len() > MAX_ATTACH_BYTES;
        let body = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_ATTACH_BYTES)]);
        out.push_str(&format!("\n\n[Attached file: {mention}]\n```\n{}", body.trim_end()));
        if cut {
            out.push_str(&format!("\n… [cut: only the first {MAX_ATTACH_BYTES} of {} bytes]", bytes.len()));
        }
        out.push_str("\n```");
        attached += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_are_words_starting_with_at() {
        assert_eq!(mentioned_paths("look at @src/main.rs, and @b.txt."), vec!["src/main.rs", "b.txt"]);
        assert!(mentioned_paths("mail me at a@b.c or @").is_empty());
    }

    #[test]
    fn existing_text_files_are_attached_and_capped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
        std::fs::write(dir.path().join("big.txt"), "x".repeat(MAX_ATTACH_BYTES + 10)).unwrap();
        std::fs::write(dir.path().join("bin"), [0u8, 1, 2]).unwrap();
        let out = expand("see @a.txt and @big.txt and @bin and @missing.txt", dir.path());
        assert!(out.starts_with("see @a.txt and @big.txt and @bin and @missing.txt"));
        assert!(out.contains("[Attached file: a.txt]\n```\nalpha\n```"));
        assert!(out.contains(&format!("[cut: only the first {MAX_ATTACH_BYTES} of {} bytes]", MAX_ATTACH_BYTES + 10)));
        assert!(out.contains("[Attached file: bin — binary, not attached]"));
        assert!(!out.contains("missing.txt]"));
        assert_eq!(expand("no mentions", dir.path()), "no mentions");
    }
}
