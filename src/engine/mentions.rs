//! `@path` references in a message: each names a file whose content is attached to the
//! message the model sees (size-capped, text only). The text the user typed is kept as is.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::engine::sandbox::Policy;
use crate::engine::tools::fs_helper::{self, Request};
use crate::engine::tools::resolve_path;

/// Bytes of one attached file, at most.
pub(crate) const MAX_ATTACH_BYTES: usize = 64 * 1024;
/// Files attached to one message, at most.
pub(crate) const MAX_ATTACHMENTS: usize = 8;

/// The `@path` words of `text` (a word starting with `@`, trailing punctuation removed).
pub(crate) fn mentioned_paths(text: &str) -> Vec<&str> {
    text.split_whitespace()
        .filter_map(|w| w.strip_prefix('@'))
        .map(|p| p.trim_end_matches([',', '.', ';', ':', ')', '!', '?']))
        .filter(|p| !p.is_empty())
        .collect()
}

/// A fence of backticks longer than any run of backticks in `body`, so the file's own
/// fences cannot close it early.
pub(crate) fn fence_for(body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat((longest + 1).max(3))
}

/// `text` with the content of every mentioned file that exists appended, and the
/// mentions that name no file (to warn about: they are not attached). The files are read
/// by the sandboxed file helper under `policy`: a mention of a credential store (or of a
/// link to one) attaches a refusal, never the content.
pub(crate) async fn expand(text: &str, cwd: &Path, policy: &Policy) -> (String, Vec<String>) {
    let mut out = text.to_string();
    let mut missing = Vec::new();
    let mut attached = 0;
    for mention in mentioned_paths(text) {
        if attached == MAX_ATTACHMENTS {
            break;
        }
        let path = resolve_path(cwd, mention);
        let request = Request::Attach { path, max: MAX_ATTACH_BYTES };
        let got = fs_helper::call(policy, request, &CancellationToken::new()).await;
        if !got.ok {
            let why = got.value["error"].as_str().unwrap_or("could not be read").to_string();
            out.push_str(&format!("\n\n[Attached file: {mention} — not attached: {why}]"));
            continue;
        }
        match got.value["kind"].as_str() {
            Some("file") => {}
            Some("binary") => {
                out.push_str(&format!("\n\n[Attached file: {mention} — binary, not attached]"));
                continue;
            }
            _ => {
                missing.push(mention.to_string());
                continue;
            }
        }
        let body = got.value["text"].as_str().unwrap_or_default();
        let len = got.value["len"].as_u64().unwrap_or(0);
        let fence = fence_for(body);
        out.push_str(&format!("\n\n[Attached file: {mention}]\n{fence}\n{}", body.trim_end()));
        if len > MAX_ATTACH_BYTES as u64 {
            out.push_str(&format!("\n… [cut: only the first {MAX_ATTACH_BYTES} of {len} bytes]"));
        }
        out.push_str(&format!("\n{fence}"));
        attached += 1;
    }
    (out, missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No kernel sandbox (lib tests have no talaria binary to run as the helper): reads
    /// run here, `deny` refused by where they lead.
    fn policy(deny: Vec<std::path::PathBuf>) -> Policy {
        Policy {
            mode: crate::config::SandboxMode::Off,
            network: true,
            proxy_only: false,
            proxy_port: None,
            writable_roots: vec![],
            deny_read: deny,
            deny_write: vec![],
            job_files: vec![],
            view: None,
            git_guard: None,
            git_start: Default::default(),
            workspace: Default::default(),
            allow_unix_sockets: vec![],
            limits: Default::default(),
        }
    }

    #[test]
    fn mentions_are_words_starting_with_at() {
        assert_eq!(mentioned_paths("look at @src/main.rs, and @b.txt."), vec!["src/main.rs", "b.txt"]);
        assert!(mentioned_paths("mail me at a@b.c or @").is_empty());
    }

    #[tokio::test]
    async fn existing_text_files_are_attached_and_capped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
        std::fs::write(dir.path().join("big.txt"), "x".repeat(MAX_ATTACH_BYTES + 10)).unwrap();
        std::fs::write(dir.path().join("bin"), [0u8, 1, 2]).unwrap();
        let (out, missing) =
            expand("see @a.txt and @big.txt and @bin and @missing.txt", dir.path(), &policy(vec![])).await;
        assert_eq!(missing, vec!["missing.txt".to_string()]);
        assert!(out.starts_with("see @a.txt and @big.txt and @bin and @missing.txt"));
        assert!(out.contains("[Attached file: a.txt]\n```\nalpha\n```"));
        assert!(out.contains(&format!("[cut: only the first {MAX_ATTACH_BYTES} of {} bytes]", MAX_ATTACH_BYTES + 10)));
        assert!(out.contains("[Attached file: bin — binary, not attached]"));
        assert!(!out.contains("missing.txt]"));
        assert_eq!(expand("no mentions", dir.path(), &policy(vec![])).await, ("no mentions".to_string(), Vec::new()));
    }

    #[tokio::test]
    async fn a_protected_file_is_not_attached_even_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let secret = crate::engine::sandbox::canonical(dir.path()).join("keys");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("id"), "PRIVATE-KEY").unwrap();
        std::os::unix::fs::symlink(secret.join("id"), dir.path().join("innocent.txt")).unwrap();
        let (out, missing) = expand("@innocent.txt @keys/id", dir.path(), &policy(vec![secret])).await;
        assert!(missing.is_empty(), "{missing:?}");
        assert!(!out.contains("PRIVATE"), "{out}");
        assert!(out.contains("[Attached file: innocent.txt — not attached: Permission denied"), "{out}");
        assert!(out.contains("the sandbox stopped it"), "{out}");
    }

    #[tokio::test]
    async fn a_file_with_its_own_fences_cannot_break_out_of_the_attachment() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("r.md"), "intro\n```sh\nls\n```\nthen ````four````\n").unwrap();
        let (out, _) = expand("@r.md", dir.path(), &policy(vec![])).await;
        assert!(out.contains("[Attached file: r.md]\n`````\nintro\n```sh"), "{out}");
        assert!(out.ends_with("````four````\n`````"), "{out}");
        assert_eq!(fence_for("no ticks"), "```");
    }
}
