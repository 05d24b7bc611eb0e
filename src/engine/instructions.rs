//! Project instructions: `AGENTS.md` and `TALARIA.md` files added to the system prompt.
//!
//! Looked up in the working directory and each parent up to the repository root (the first
//! ancestor holding `.git`; with no repository, the working directory alone), plus the
//! user-level `TALARIA.md` (`paths.user_instructions`). Ordered outermost first, so the most
//! specific file comes last and wins a conflict.

use std::fs::File;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// File names looked for in each directory, in this order.
pub(crate) const FILE_NAMES: [&str; 2] = ["AGENTS.md", "TALARIA.md"];

/// Each file is cut to this many bytes (a marker says so).
pub(crate) const MAX_FILE_BYTES: usize = 32 * 1024;

/// One instruction file, as it goes into the system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionFile {
    pub(crate) path: PathBuf,
    /// The file's text, trimmed; cut at [`MAX_FILE_BYTES`] with a marker when longer.
    pub(crate) text: String,
    /// How a person sees the path: relative to the working directory (`AGENTS.md`,
    /// `../AGENTS.md`) or with the home directory as `~`.
    pub(crate) label: String,
    /// The user-level file rather than one from the project.
    pub(crate) user_level: bool,
}

/// Find the instruction files for a session in `cwd`, outermost first: the user file, then
/// the repository root, …, then `cwd` itself. Missing, empty and unreadable files are left
/// out (an unreadable one is logged). A file reached twice (the user file inside the
/// project) is listed once.
pub fn discover(cwd: &Path, user_file: &Path) -> Vec<InstructionFile> {
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    discover_with_home(cwd, user_file, home.as_deref())
}

fn discover_with_home(cwd: &Path, user_file: &Path, home: Option<&Path>) -> Vec<InstructionFile> {
    let mut files: Vec<InstructionFile> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut add = |path: &Path, user_level: bool, files: &mut Vec<InstructionFile>| {
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if seen.contains(&key) {
            return;
        }
        if let Some(text) = read_capped(path) {
            seen.push(key);
            let label = if user_level { home_label(path, home) } else { label_for(path, cwd, home) };
            files.push(InstructionFile { path: path.to_path_buf(), text, label, user_level });
        }
    };
    add(user_file, true, &mut files);
    for dir in project_dirs(cwd) {
        for name in FILE_NAMES {
            add(&dir.join(name), false, &mut files);
        }
    }
    files
}

/// The directories searched, outermost first: from the repository root down to `cwd`, or
/// just `cwd` when no ancestor holds `.git`.
pub(crate) fn project_dirs(cwd: &Path) -> Vec<PathBuf> {
    let ancestors: Vec<&Path> = cwd.ancestors().collect();
    match ancestors.iter().position(|dir| dir.join(".git").exists()) {
        Some(root) => ancestors[..=root].iter().rev().map(|d| d.to_path_buf()).collect(),
        None => vec![cwd.to_path_buf()],
    }
}

/// Read a regular file, keeping at most [`MAX_FILE_BYTES`]; `None` when it is missing, not a
/// file, unreadable or blank.
fn read_capped(path: &Path) -> Option<String> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("instructions: cannot read {}: {e}", path.display());
            return None;
        }
    };
    if !meta.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|f| f.take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes));
    if let Err(e) = read {
        tracing::warn!("instructions: cannot read {}: {e}", path.display());
        return None;
    }
    let total = meta.len().max(bytes.len() as u64);
    let cut = bytes.len() > MAX_FILE_BYTES;
    bytes.truncate(MAX_FILE_BYTES);
    let text = if cut { utf8_prefix(&bytes) } else { String::from_utf8_lossy(&bytes).into_owned() };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if cut {
        Some(format!("{text}\n\n[… cut: only the first {MAX_FILE_BYTES} of {total} bytes of this file are shown]"))
    } else {
        Some(text.to_string())
    }
}

/// The bytes as text, dropping a character split by the cut at the end.
fn utf8_prefix(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_string(),
        Err(e) if e.error_len().is_none() => String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// `path` as a person reads it: relative to `cwd` when it lies in `cwd` or one of its
/// parents' directories (`AGENTS.md`, `../../AGENTS.md`), else with `home` shown as `~`.
pub(crate) fn label_for(path: &Path, cwd: &Path, home: Option<&Path>) -> String {
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        if let Ok(rest) = cwd.strip_prefix(dir) {
            let ups = rest.components().filter(|c| matches!(c, Component::Normal(_))).count();
            let mut label = "../".repeat(ups);
            label.push_str(&name.to_string_lossy());
            return label;
        }
    }
    home_label(path, home)
}

/// `path` with `home` shown as `~`.
pub(crate) fn home_label(path: &Path, home: Option<&Path>) -> String {
    match home.and_then(|home| path.strip_prefix(home).ok()) {
        Some(rest) => format!("~/{}", rest.display()),
        None => path.display().to_string(),
    }
}

/// The system prompt section holding the files, or an empty string when there are none.
pub fn system_prompt_section(files: &[InstructionFile]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "# Instructions from files\n\n\
         The user and the project left these instructions. Follow them. When two disagree, \
         the later (more specific) file wins.\n",
    );
    for file in files {
        let kind = if file.user_level { " (the user's own instructions, for every project)" } else { "" };
        out.push_str(&format!("\n## {}{kind}\n\n{}\n", file.path.display(), file.text));
    }
    out
}

/// One line for the status and help: `instructions: AGENTS.md, ~/…/TALARIA.md`.
pub fn describe(files: &[InstructionFile]) -> String {
    if files.is_empty() {
        return "instructions: none".to_string();
    }
    let labels: Vec<String> = files.iter().map(|f| short_label(&f.label)).collect();
    format!("instructions: {}", labels.join(", "))
}

/// A label of more than three parts keeps its first and last: `~/…/TALARIA.md`.
fn short_label(label: &str) -> String {
    let parts: Vec<&str> = label.split('/').collect();
    if parts.len() <= 3 || parts.iter().all(|p| *p == ".." || parts.last() == Some(p)) {
        return label.to_string();
    }
    let first = parts[0];
    let last = parts[parts.len() - 1];
    format!("{first}/…/{last}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::fs;

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn finds_files_from_the_repository_root_down_to_cwd_after_the_user_file() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("AGENTS.md");
        write(&outside, "above the repository: never read");
        let repo = tmp.path().join("repo");
        fs::create_dir_all(repo.join(".git")).unwrap();
        write(&repo.join("AGENTS.md"), "root agents\n");
        write(&repo.join("TALARIA.md"), "root talaria");
        write(&repo.join("sub/AGENTS.md"), "   \n"); // blank: left out
        let cwd = repo.join("sub/deep");
        write(&cwd.join("TALARIA.md"), "deep talaria");
        let user = tmp.path().join("home/TALARIA.md");
        write(&user, "user prefs");

        let files = discover_with_home(&cwd, &user, Some(&tmp.path().join("home")));
        let got: Vec<(PathBuf, &str, &str, bool)> =
            files.iter().map(|f| (f.path.clone(), f.text.as_str(), f.label.as_str(), f.user_level)).collect();
        assert_eq!(
            got,
            vec![
                (user.clone(), "user prefs", "~/TALARIA.md", true),
                (repo.join("AGENTS.md"), "root agents", "../../AGENTS.md", false),
                (repo.join("TALARIA.md"), "root talaria", "../../TALARIA.md", false),
                (cwd.join("TALARIA.md"), "deep talaria", "TALARIA.md", false),
            ]
        );
    }

    #[test]
    fn without_a_repository_only_cwd_is_searched() {
        let tmp = tempfile::tempdir().unwrap();
        write(&tmp.path().join("AGENTS.md"), "parent");
        let cwd = tmp.path().join("work");
        write(&cwd.join("AGENTS.md"), "here");
        let files = discover(&cwd, &tmp.path().join("missing/TALARIA.md"));
        assert_eq!(files.iter().map(|f| f.text.as_str()).collect::<Vec<_>>(), vec!["here"]);
        assert_eq!(project_dirs(&cwd), vec![cwd.clone()]);
    }

    #[test]
    fn a_git_file_marks_the_root_too_and_cwd_can_be_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        // A worktree or submodule has a `.git` file, not a directory.
        write(&tmp.path().join("wt/.git"), "gitdir: elsewhere");
        let root = tmp.path().join("wt");
        assert_eq!(project_dirs(&root), vec![root.clone()]);
        assert_eq!(project_dirs(&root.join("a/b")), vec![root.clone(), root.join("a"), root.join("a/b")]);
    }

    #[test]
    fn the_user_file_inside_the_project_is_listed_once() {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("TALARIA.md");
        write(&user, "shared");
        let files = discover(tmp.path(), &user);
        assert_eq!(files.len(), 1);
        assert!(files[0].user_level);
    }

    #[test]
    fn a_directory_named_like_a_file_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("AGENTS.md")).unwrap();
        assert_eq!(discover(tmp.path(), &tmp.path().join("nope.md")), vec![]);
    }

    #[test]
    fn a_long_file_is_cut_with_a_marker_on_a_character_boundary() {
        let tmp = tempfile::tempdir().unwrap();
        // 3-byte characters: the cut at 32 KiB falls inside one.
        let long = "é€".repeat(MAX_FILE_BYTES);
        write(&tmp.path().join("AGENTS.md"), &long);
        let files = discover(tmp.path(), &tmp.path().join("none"));
        let text = &files[0].text;
        let total = long.len();
        assert!(text
            .ends_with(&format!("[… cut: only the first {MAX_FILE_BYTES} of {total} bytes of this file are shown]")));
        assert!(!text.contains('\u{FFFD}'), "no replacement character from a split code point");
        assert!(text.len() <= MAX_FILE_BYTES + 120);
        assert!(long.starts_with(text.split("\n\n[… cut").next().unwrap()));
    }

    #[test]
    fn labels_are_relative_to_cwd_or_home() {
        let home = Path::new("/home/ann");
        let cwd = Path::new("/home/ann/src/app/web");
        assert_eq!(label_for(Path::new("/home/ann/src/app/web/AGENTS.md"), cwd, Some(home)), "AGENTS.md");
        assert_eq!(label_for(Path::new("/home/ann/src/app/AGENTS.md"), cwd, Some(home)), "../AGENTS.md");
        assert_eq!(
            label_for(Path::new("/home/ann/.config/talaria/TALARIA.md"), cwd, Some(home)),
            "~/.config/talaria/TALARIA.md"
        );
        assert_eq!(label_for(Path::new("/etc/talaria/TALARIA.md"), cwd, None), "/etc/talaria/TALARIA.md");
    }

    fn file(path: &str, label: &str, text: &str, user_level: bool) -> InstructionFile {
        InstructionFile { path: PathBuf::from(path), text: text.into(), label: label.into(), user_level }
    }

    #[test]
    fn describe_lists_short_labels() {
        let files = vec![
            file("/home/ann/.config/talaria/TALARIA.md", "~/.config/talaria/TALARIA.md", "u", true),
            file("/r/AGENTS.md", "../../AGENTS.md", "a", false),
            file("/r/x/y/AGENTS.md", "AGENTS.md", "b", false),
        ];
        assert_eq!(describe(&files), "instructions: ~/…/TALARIA.md, ../../AGENTS.md, AGENTS.md");
        assert_eq!(describe(&[]), "instructions: none");
        assert_eq!(short_label("../../../AGENTS.md"), "../../../AGENTS.md");
        assert_eq!(short_label("/tmp/a/b/TALARIA.md"), "/…/TALARIA.md");
    }

    #[test]
    fn the_prompt_section_names_each_file_in_order() {
        assert_eq!(system_prompt_section(&[]), "");
        let files = vec![
            file("/home/ann/TALARIA.md", "~/TALARIA.md", "Be brief.", true),
            file("/r/AGENTS.md", "AGENTS.md", "Run cargo test.", false),
        ];
        let section = system_prompt_section(&files);
        assert_eq!(
            section,
            "# Instructions from files\n\n\
             The user and the project left these instructions. Follow them. When two disagree, \
             the later (more specific) file wins.\n\
             \n## /home/ann/TALARIA.md (the user's own instructions, for every project)\n\nBe brief.\n\
             \n## /r/AGENTS.md\n\nRun cargo test.\n"
        );
    }
}
