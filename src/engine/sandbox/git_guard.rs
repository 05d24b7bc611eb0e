//! Which parts of the writable roots' git directories a job may write (DESIGN §6). Git
//! reads instructions from its directory — `config` (core.fsmonitor, core.hooksPath,
//! filters), `hooks`, `commondir` (another directory's config), a `.git` file (another git
//! directory) — and the user's next `git status` follows them outside the sandbox. So a job
//! gets all of `.git` read-only but what git writes to commit, stash, merge or rebase.
//!
//! The git directory itself stays writable (git creates `index.lock` and renames it over
//! `index`), so only names that exist can be pinned read-only: a missing `hooks` is created
//! first; a `commondir` or `.git` file that was not there when the session started is not
//! followed and the command is refused; a symlinked entry (a name that cannot be pinned)
//! makes the whole git directory read-only. Pure planning: the mounts are made in
//! [`super::mounts`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Entries of a git directory that git writes to commit, stash, merge, rebase or fetch.
#[rustfmt::skip]
const WRITABLE: &[&str] = &[
    "objects", "refs", "logs", "index", "HEAD", "ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "MERGE_MSG",
    "MERGE_MODE", "MERGE_RR", "AUTO_MERGE", "REBASE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "BISECT_LOG",
    "BISECT_START", "BISECT_TERMS", "BISECT_NAMES", "BISECT_EXPECTED_REV", "BISECT_ANCESTORS_OK",
    "COMMIT_EDITMSG", "TAG_EDITMSG", "SQUASH_MSG", "packed-refs", "rebase-merge", "rebase-apply", "sequencer",
    "rr-cache", "shallow", "gc.pid", "gc.log", "lfs",
];

/// How deep `modules/` (submodule git directories, names may hold slashes) is searched.
const MODULES_DEPTH: usize = 4;

/// Is `name`, an entry of a git directory, one git writes to commit?
pub(crate) fn writable_entry(name: &str) -> bool {
    WRITABLE.contains(&name)
        || name.ends_with(".lock")
        || name.starts_with("sharedindex.")
        || name.starts_with("index.stash.")
}

/// What the writable roots' git directories held when the session started: only these
/// `.git` files and `commondir`s are followed (one a job wrote could point anywhere).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// `.git` files (worktrees, submodules) with what they said.
    pub dot_git_files: Vec<(PathBuf, String)>,
    /// `commondir` files with what they said.
    pub commondirs: Vec<(PathBuf, String)>,
    /// `.git` directories (or links to one) that existed.
    #[serde(default)]
    pub git_dirs: Vec<PathBuf>,
}

impl Start {
    /// Look at the roots as they are now (at session start).
    pub fn scan(roots: &[PathBuf]) -> Start {
        let mut start = Start::default();
        for root in roots {
            let dot_git = root.join(".git");
            let gitdir = match std::fs::symlink_metadata(&dot_git) {
                Ok(m) if m.is_file() => match std::fs::read_to_string(&dot_git) {
                    Ok(text) => {
                        let target = gitdir_of_file(root, &text);
                        start.dot_git_files.push((dot_git, text));
                        target
                    }
                    Err(_) => None,
                },
                Ok(_) => {
                    start.git_dirs.push(dot_git.clone());
                    Some(dot_git)
                }
                Err(_) => None,
            };
            if let Some(gitdir) = gitdir {
                let cd = gitdir.join("commondir");
                if let Ok(text) = std::fs::read_to_string(&cd) {
                    start.commondirs.push((cd, text));
                }
            }
        }
        start
    }
}

/// Something a command left that would make the user's own git follow it, moved aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub from: PathBuf,
    pub to: PathBuf,
    pub why: &'static str,
}

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "talaria moved {} to {}: {}", self.from.display(), self.to.display(), self.why)
    }
}

/// Move aside what appeared in the roots' git directories since the session started and
/// would point the user's git elsewhere or run a program: a `.git` file, a `commondir`, and
/// in a repository created during the session, a config that names a program or hooks.
/// Run before each command and after each foreground one: the git directory must stay
/// writable for commits, so these names cannot be pinned read-only while they are missing.
pub fn sweep(roots: &[PathBuf], start: &Start) -> Vec<Moved> {
    let mut moved = Vec::new();
    let mut aside = |from: PathBuf, why: &'static str| {
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut to = from.clone().into_os_string();
        to.push(format!(".planted-{stamp}"));
        let to = PathBuf::from(to);
        match std::fs::rename(&from, &to) {
            Ok(()) => {
                tracing::warn!(from = %from.display(), to = %to.display(), why, "git guard moved a planted file");
                moved.push(Moved { from, to, why });
            }
            Err(e) => tracing::warn!(path = %from.display(), error = %e, "git guard could not move a planted file"),
        }
    };
    for root in roots {
        let dot_git = root.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else { continue };
        let gitdir = if meta.is_file() {
            let text = std::fs::read_to_string(&dot_git).unwrap_or_default();
            if !start.dot_git_files.iter().any(|(p, t)| *p == dot_git && *t == text) {
                aside(dot_git, "this .git file appeared during the session and points git at another directory");
                continue;
            }
            match gitdir_of_file(root, &text) {
                Some(g) => g,
                None => continue,
            }
        } else {
            dot_git.clone()
        };
        let commondir = gitdir.join("commondir");
        if let Ok(text) = std::fs::read_to_string(&commondir) {
            if !start.commondirs.iter().any(|(p, t)| *p == commondir && *t == text) {
                aside(commondir, "this commondir appeared during the session and points git at another config");
            }
        }
        if meta.is_dir() && !start.git_dirs.contains(&dot_git) {
            // A repository a command created: its config and hooks are the command's words.
            let config = gitdir.join("config");
            if let Some(text) = std::fs::read_to_string(&config).ok().filter(|t| names_a_program(t)) {
                aside(
                    config.clone(),
                    "the repository was created during the session and its config names a program to run",
                );
                // Git wants its format settings; the guard pins the file from the next command on.
                if !config.exists() {
                    let _ = std::fs::write(&config, format_only(&text));
                }
            }
            let hooks = gitdir.join("hooks");
            let planted = std::fs::read_dir(&hooks)
                .map(|d| d.flatten().any(|e| !e.file_name().to_string_lossy().ends_with(".sample")))
                .unwrap_or(false);
            if planted {
                aside(hooks, "the repository was created during the session with hooks in it");
            }
        }
    }
    moved
}

/// Only the settings of `text` that say how the repository is stored.
fn format_only(text: &str) -> String {
    const KEEP: &[&str] =
        &["repositoryformatversion", "bare", "filemode", "logallrefupdates", "objectformat", "refstorage"];
    let mut out = String::new();
    let mut section = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix('[') {
            section = rest.split([']', ' ']).next().unwrap_or_default().to_ascii_lowercase();
            continue;
        }
        let key = trimmed.split('=').next().unwrap_or_default().trim().to_ascii_lowercase();
        if ["core", "extensions"].contains(&section.as_str()) && KEEP.contains(&key.as_str()) {
            out.push_str(&format!("[{section}]\n\t{trimmed}\n"));
        }
    }
    out
}

/// Does a git config set anything git runs as a program (or pull in another file)?
pub(crate) fn names_a_program(text: &str) -> bool {
    #[rustfmt::skip]
    const KEYS: &[&str] = &[
        "fsmonitor", "hookspath", "sshcommand", "pager", "editor", "askpass", "gitproxy", "textconv", "command",
        "external", "helper", "program", "clean", "smudge", "process", "packobjectshook", "uploadpack", "receivepack",
    ];
    let mut section = String::new();
    for line in text.lines() {
        let mut line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let Some(end) = rest.find(']') else { continue };
            section = rest[..end].split_whitespace().next().unwrap_or_default().to_ascii_lowercase();
            if ["include", "includeif", "filter"].contains(&section.as_str()) {
                return true;
            }
            line = rest[end + 1..].trim();
        }
        if line.starts_with(['#', ';']) || line.is_empty() {
            continue;
        }
        let key = line.split('=').next().unwrap_or_default().trim().to_ascii_lowercase();
        if KEYS.contains(&key.as_str()) || section.starts_with("pager") {
            return true;
        }
    }
    false
}

/// One path of the job's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Guard {
    /// Bound onto itself read-only.
    ReadOnly(PathBuf),
    /// Bound onto itself writable (a mount point cannot be renamed or removed). `under_read_only`:
    /// inside an earlier read-only bind, so it must be remounted writable.
    Writable { path: PathBuf, under_read_only: bool },
}

/// Why a command does not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "{path} appeared during this session and points git elsewhere ({what}); a command may have planted it. \
         Look at it, then move it away or restart talaria to accept it"
    )]
    Planted { path: PathBuf, what: String },
}

/// The guards for the git directories of `roots`. May create a missing `hooks` directory
/// (or a `core.hooksPath` directory inside a root): otherwise a job could create it.
pub(crate) fn plan(roots: &[PathBuf], start: &Start, home: Option<&Path>) -> Result<Vec<Guard>, Refusal> {
    let mut out = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for root in roots {
        let dot_git = root.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else { continue };
        let gitdir = if meta.is_file() {
            let text = std::fs::read_to_string(&dot_git).unwrap_or_default();
            if !start.dot_git_files.iter().any(|(p, t)| *p == dot_git && *t == text) {
                return Err(Refusal::Planted { path: dot_git, what: text.trim().to_string() });
            }
            let Some(gitdir) = gitdir_of_file(root, &text) else { continue };
            gitdir
        } else {
            // A directory, or a symlink to one (the link itself cannot be pinned).
            dot_git.clone()
        };
        let gitdir = super::canonical(&gitdir);
        if seen.contains(&gitdir) {
            continue;
        }
        seen.push(gitdir.clone());
        let common = match std::fs::read_to_string(gitdir.join("commondir")) {
            Ok(text) => {
                let cd = gitdir.join("commondir");
                let known = start.commondirs.iter().any(|(p, t)| super::canonical(p) == cd && *t == text);
                if !known {
                    return Err(Refusal::Planted { path: cd, what: text.trim().to_string() });
                }
                let c = Path::new(text.trim());
                Some(super::canonical(&if c.is_absolute() { c.to_path_buf() } else { gitdir.join(c) }))
            }
            Err(_) => None,
        };
        // The common directory first: a linked worktree's own directory lies inside it.
        if let Some(common) = common.as_ref().filter(|c| **c != gitdir && !seen.contains(c)) {
            seen.push(common.clone());
            guard_gitdir(common, &mut out, 0, true);
        }
        guard_gitdir(&gitdir, &mut out, 0, common.is_none());
        if meta.is_file() {
            out.push(Guard::ReadOnly(dot_git));
        }
        for hooks in hooks_paths(root, common.as_deref().unwrap_or(&gitdir), home) {
            if roots.iter().any(|r| hooks.starts_with(r)) && !hooks.starts_with(&gitdir) {
                if std::fs::symlink_metadata(&hooks).is_err() {
                    let _ = std::fs::create_dir_all(&hooks);
                }
                if hooks.exists() {
                    out.push(Guard::ReadOnly(hooks));
                }
            }
        }
    }
    Ok(out)
}

/// Guard one git directory: writable itself, everything in it read-only but what git
/// writes. `make_hooks`: it is where git looks for hooks (not a linked worktree's own).
fn guard_gitdir(gitdir: &Path, out: &mut Vec<Guard>, depth: usize, make_hooks: bool) {
    let under_read_only = out.iter().any(|g| matches!(g, Guard::ReadOnly(p) if gitdir.starts_with(p)));
    let hooks = gitdir.join("hooks");
    if make_hooks && std::fs::symlink_metadata(&hooks).is_err() {
        // Fails when a job starting at the same moment made it first (then it is there to
        // protect) or when talaria may not write here (then neither may the job).
        let _ = std::fs::create_dir(&hooks);
    }
    let Ok(entries) = std::fs::read_dir(gitdir) else { return };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    let pinned = |e: &std::fs::DirEntry| !writable_entry(&e.file_name().to_string_lossy());
    let links: Vec<PathBuf> =
        entries.iter().filter(|e| pinned(e) && e.file_type().is_ok_and(|t| t.is_symlink())).map(|e| e.path()).collect();
    if !links.is_empty() {
        // A symlinked hooks or config: the link could be swapped, so nothing here is
        // writable, nor where the links lead.
        out.push(Guard::ReadOnly(gitdir.to_path_buf()));
        for link in links {
            if let Ok(target) = std::fs::canonicalize(&link) {
                if !target.starts_with(gitdir) {
                    out.push(Guard::ReadOnly(target));
                }
            }
        }
        return;
    }
    out.push(Guard::Writable { path: gitdir.to_path_buf(), under_read_only });
    for entry in entries.iter().filter(|e| pinned(e)) {
        out.push(Guard::ReadOnly(entry.path()));
    }
    // Submodules' git directories: committed to like the repository's own.
    if depth < MODULES_DEPTH {
        for dir in submodule_gitdirs(&gitdir.join("modules"), MODULES_DEPTH - depth) {
            guard_gitdir(&dir, out, depth + 1, true);
        }
    }
}

/// Git directories under `modules/` (a directory with HEAD and objects).
fn submodule_gitdirs(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        if path.join("HEAD").is_file() && path.join("objects").is_dir() {
            out.push(path);
        } else if depth > 1 {
            out.extend(submodule_gitdirs(&path, depth - 1));
        }
    }
    out.sort();
    out
}

/// The git directory a `.git` file names (`gitdir: <path>`, relative to its directory).
fn gitdir_of_file(root: &Path, text: &str) -> Option<PathBuf> {
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    if target.is_empty() {
        return None;
    }
    let target = Path::new(target);
    Some(if target.is_absolute() { target.to_path_buf() } else { root.join(target) })
}

/// Every `core.hooksPath` the repository's and the user's git configs set, resolved as git
/// does (relative to the top of the working tree, `~/` to the home).
fn hooks_paths(root: &Path, gitdir: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut files = vec![gitdir.join("config"), gitdir.join("config.worktree")];
    if let Some(home) = home {
        files.push(home.join(".gitconfig"));
        files.push(home.join(".config/git/config"));
    }
    let mut out = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for value in config_values(&text, "core", "hookspath") {
            let path = match (value.strip_prefix("~/"), home) {
                (Some(rest), Some(home)) => home.join(rest),
                _ if Path::new(&value).is_absolute() => PathBuf::from(&value),
                _ => root.join(&value),
            };
            out.push(super::canonical(&path));
        }
    }
    out
}

/// The values of `section.key` in a git config file (a plain reading: sections, keys and
/// double-quoted values; enough to find a path, not a full parser).
pub(crate) fn config_values(text: &str, section: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let mut line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let Some(end) = rest.find(']') else { continue };
            current = rest[..end].split_whitespace().next().unwrap_or_default().to_ascii_lowercase();
            line = rest[end + 1..].trim();
        }
        if !current.eq_ignore_ascii_case(section) || line.starts_with(['#', ';']) {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else { continue };
        if k.trim().eq_ignore_ascii_case(key) {
            let v = v.split([';', '#']).next().unwrap_or_default().trim();
            out.push(v.trim_matches('"').to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn what_git_writes_to_commit_is_writable_and_nothing_else() {
        for name in ["objects", "refs", "logs", "index", "HEAD", "index.lock", "HEAD.lock", "packed-refs", "ORIG_HEAD"]
        {
            assert!(writable_entry(name), "{name}");
        }
        for name in ["config", "hooks", "info", "commondir", "modules", "worktrees", "description", "config.worktree"] {
            assert!(!writable_entry(name), "{name}");
        }
    }

    #[test]
    fn config_values_are_read_per_section() {
        let text = "[core]\n\tbare = false\n\thooksPath = \"hooks dir\" ; note\n[alias]\n\thookspath = x\n\
                    [core \"sub\"]\nHOOKSPATH=~/h\n";
        assert_eq!(config_values(text, "core", "hookspath"), vec!["hooks dir".to_string(), "~/h".to_string()]);
    }

    #[test]
    fn a_plain_repository_is_writable_but_its_instructions() {
        let dir = tempfile::tempdir().unwrap();
        let root = super::super::canonical(dir.path());
        let git = root.join(".git");
        for d in ["objects", "refs", "info"] {
            std::fs::create_dir_all(git.join(d)).unwrap();
        }
        for f in ["HEAD", "config", "description", "index"] {
            std::fs::write(git.join(f), "x").unwrap();
        }
        let roots = vec![root.clone()];
        let plan = plan(&roots, &Start::scan(&roots), None).unwrap();
        assert_eq!(
            plan,
            vec![
                Guard::Writable { path: git.clone(), under_read_only: false },
                Guard::ReadOnly(git.join("config")),
                Guard::ReadOnly(git.join("description")),
                Guard::ReadOnly(git.join("hooks")),
                Guard::ReadOnly(git.join("info")),
            ]
        );
        // A symlinked hooks directory: the link could be swapped, so all of .git is read-only.
        std::fs::remove_dir(git.join("hooks")).unwrap();
        std::fs::create_dir(root.join("myhooks")).unwrap();
        std::os::unix::fs::symlink(root.join("myhooks"), git.join("hooks")).unwrap();
        assert_eq!(plan_of(&roots), vec![Guard::ReadOnly(git.clone()), Guard::ReadOnly(root.join("myhooks"))]);
    }

    fn plan_of(roots: &[PathBuf]) -> Vec<Guard> {
        plan(roots, &Start::scan(roots), None).unwrap()
    }

    #[test]
    fn a_dot_git_file_or_commondir_planted_during_the_session_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = super::super::canonical(dir.path());
        let roots = vec![root.clone()];
        let start = Start::scan(&roots);
        std::fs::write(root.join(".git"), "gitdir: /tmp/elsewhere\n").unwrap();
        assert!(matches!(plan(&roots, &start, None), Err(Refusal::Planted { .. })));
        std::fs::remove_file(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        std::fs::write(root.join(".git/commondir"), "../planted\n").unwrap();
        assert!(matches!(plan(&roots, &start, None), Err(Refusal::Planted { .. })));
        // Known at the start: followed.
        std::fs::create_dir_all(root.join("planted/objects")).unwrap();
        let start = Start::scan(&roots);
        let plan = plan(&roots, &start, None).unwrap();
        assert!(plan.contains(&Guard::ReadOnly(root.join(".git/commondir"))), "{plan:?}");
        assert!(plan.contains(&Guard::Writable { path: root.join("planted"), under_read_only: false }), "{plan:?}");
    }

    #[test]
    fn what_appeared_during_the_session_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let root = super::super::canonical(dir.path());
        let roots = vec![root.clone()];
        let start = Start::scan(&roots);
        // A repository a command created, with a planted fsmonitor and hook.
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n\tfsmonitor = touch /tmp/x\n").unwrap();
        std::fs::write(root.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(root.join(".git/commondir"), "../elsewhere\n").unwrap();
        let moved = sweep(&roots, &start);
        let from: Vec<_> = moved.iter().map(|m| m.from.clone()).collect();
        assert_eq!(from, vec![root.join(".git/commondir"), root.join(".git/config"), root.join(".git/hooks")]);
        assert!(!root.join(".git/commondir").exists());
        assert!(!std::fs::read_to_string(root.join(".git/config")).unwrap().contains("fsmonitor"));
        // A plain `git init` config is left alone, and a second sweep finds nothing.
        std::fs::write(root.join(".git/config"), "[core]\n\trepositoryformatversion = 0\n\tbare = false\n").unwrap();
        assert_eq!(sweep(&roots, &start), vec![]);
        // A .git file that was not there at the start.
        std::fs::remove_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git"), "gitdir: /tmp/elsewhere\n").unwrap();
        assert_eq!(sweep(&roots, &start).len(), 1);
        assert!(!root.join(".git").exists());
    }

    #[test]
    fn a_hooks_path_inside_the_root_is_guarded() {
        let dir = tempfile::tempdir().unwrap();
        let root = super::super::canonical(dir.path());
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n\thooksPath = tools/hooks\n").unwrap();
        let roots = vec![root.clone()];
        let plan = plan_of(&roots);
        assert!(root.join("tools/hooks").is_dir());
        assert_eq!(plan.last(), Some(&Guard::ReadOnly(root.join("tools/hooks"))));
    }
}
