//! The content-addressed store of a workspace's snapshots: the system `git` with a
//! repository of its own under talaria's data dir (`GIT_DIR`, `GIT_INDEX_FILE`), the
//! workspace as its work tree. The user's repository is never read or written: no user or
//! system config is loaded, hooks point at /dev/null, no fsmonitor runs, and the attributes
//! of our own `info/attributes` turn every filter, eol and text conversion off. The index of
//! our own is git's stat cache: a snapshot re-reads only the files whose stat changed.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// What can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    #[error("git could not start ({0}); rewind needs git on PATH")]
    Spawn(std::io::Error),
    #[error("git {args} failed: {stderr}")]
    Git { args: String, stderr: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Other(String),
}

/// A file left out of a snapshot, and why (said, never silently lost).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub path: String,
    pub bytes: u64,
}

/// One snapshot: the tree of the workspace as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub tree: String,
    pub skipped: Vec<Skipped>,
}

/// How a path differs between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// A path that differs between two snapshots, with its line counts (None for binary files).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub path: String,
    pub kind: ChangeKind,
    pub added: Option<u64>,
    pub removed: Option<u64>,
}

/// The tree of no files (what a workspace with nothing in it snapshots to).
pub const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// Git's own settings for every call: nothing of the user's runs.
const SETTINGS: &[&str] = &[
    "-c",
    "core.bare=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.safecrlf=false",
    "-c",
    "core.quotepath=false",
    "-c",
    "core.untrackedCache=true",
    "-c",
    "core.symlinks=true",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "diff.external=",
    "-c",
    "color.ui=false",
];

/// The snapshot repository of one workspace.
#[derive(Debug, Clone)]
pub struct GitStore {
    git_dir: PathBuf,
    work_tree: PathBuf,
    max_file_bytes: u64,
}

impl GitStore {
    /// Open (creating it the first time) the store at `git_dir` for `work_tree`; `exclude`
    /// lists work-tree-relative paths never snapshotted (talaria's own data dir, if inside).
    pub fn open(
        git_dir: &Path,
        work_tree: &Path,
        max_file_bytes: u64,
        exclude: &[String],
    ) -> Result<GitStore, RewindError> {
        let store = GitStore { git_dir: git_dir.to_path_buf(), work_tree: work_tree.to_path_buf(), max_file_bytes };
        if !git_dir.join("HEAD").exists() {
            std::fs::create_dir_all(git_dir)?;
            let mut init = store.command(&["init", "--quiet", "--bare"]);
            init.env_remove("GIT_WORK_TREE").env_remove("GIT_INDEX_FILE").arg(git_dir);
            check(&["init"], init.output().map_err(RewindError::Spawn)?)?;
        }
        let info = git_dir.join("info");
        std::fs::create_dir_all(&info)?;
        // Highest precedence of all attributes: no filter, eol or text conversion runs.
        std::fs::write(info.join("attributes"), "* -text -eol -ident -filter -working-tree-encoding\n")?;
        let mut ignore = String::from("# talaria rewind: never snapshotted\n");
        for path in exclude {
            ignore.push('/');
            ignore.push_str(path);
            ignore.push('\n');
        }
        std::fs::write(info.join("exclude"), ignore)?;
        Ok(store)
    }

    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("git");
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.work_tree)
            .env("GIT_INDEX_FILE", self.git_dir.join("index"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("HOME", &self.git_dir)
            .env("XDG_CONFIG_HOME", &self.git_dir)
            .env("LC_ALL", "C")
            .current_dir(&self.work_tree)
            .args(SETTINGS)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Run git, feeding `input`, and return its stdout.
    fn git(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, RewindError> {
        let mut cmd = self.command(args);
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(RewindError::Spawn)?;
        if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
            // A writer thread: git may fill its stdout before it has read all of stdin.
            let data = data.to_vec();
            let writer = std::thread::spawn(move || stdin.write_all(&data));
            let out = child.wait_with_output()?;
            let _ = writer.join();
            return check(args, out);
        }
        check(args, child.wait_with_output()?)
    }

    /// Record the work tree as it is now.
    pub fn snapshot(&self) -> Result<Snapshot, RewindError> {
        let listed =
            self.git(&["ls-files", "-z", "--others", "--modified", "--deleted", "--exclude-standard"], None)?;
        let paths: BTreeSet<&[u8]> = listed.split(|b| *b == 0).filter(|p| !p.is_empty()).collect();
        let mut update = Vec::new();
        let mut drop = Vec::new();
        let mut skipped = Vec::new();
        for raw in paths {
            // A directory listed with a slash is a repository of its own inside the workspace.
            if raw.ends_with(b"/") {
                continue;
            }
            let path = String::from_utf8_lossy(raw).into_owned();
            match std::fs::symlink_metadata(self.work_tree.join(&path)) {
                Ok(meta) if meta.is_file() && meta.size() > self.max_file_bytes => {
                    skipped.push(Skipped { path, bytes: meta.size() });
                    drop.extend_from_slice(raw);
                    drop.push(0);
                }
                Ok(meta) if meta.is_dir() => {}
                _ => {
                    update.extend_from_slice(raw);
                    update.push(0);
                }
            }
        }
        if !update.is_empty() {
            self.git(&["update-index", "-z", "--add", "--remove", "--stdin"], Some(&update))?;
        }
        if !drop.is_empty() {
            self.git(&["update-index", "-z", "--force-remove", "--stdin"], Some(&drop))?;
        }
        // Files over the cap that are already in the index (they grew) were dropped above;
        // those never added are listed as untracked every time, so they are said every time.
        let tree = text(self.git(&["write-tree"], None)?);
        Ok(Snapshot { tree, skipped })
    }

    /// The paths that differ from `from` to `to`, with line counts.
    pub fn changes(&self, from: &str, to: &str) -> Result<Vec<Change>, RewindError> {
        if from == to {
            return Ok(Vec::new());
        }
        let status = self.git(&["diff-tree", "-r", "-z", "--no-renames", "--name-status", from, to], None)?;
        let mut fields = status.split(|b| *b == 0).filter(|f| !f.is_empty());
        let mut changes = Vec::new();
        while let (Some(kind), Some(path)) = (fields.next(), fields.next()) {
            let kind = match kind.first() {
                Some(b'A') => ChangeKind::Added,
                Some(b'D') => ChangeKind::Deleted,
                _ => ChangeKind::Modified,
            };
            changes.push(Change { path: String::from_utf8_lossy(path).into_owned(), kind, added: None, removed: None });
        }
        let numstat = self.git(&["diff-tree", "-r", "-z", "--no-renames", "--numstat", from, to], None)?;
        // Each record: "added\tremoved\tpath\0"; binary files read "-\t-\t".
        for record in numstat.split(|b| *b == 0).filter(|f| !f.is_empty()) {
            let record = String::from_utf8_lossy(record);
            let mut parts = record.splitn(3, '\t');
            let (Some(a), Some(r), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
            if let Some(c) = changes.iter_mut().find(|c| c.path == path) {
                c.added = a.parse().ok();
                c.removed = r.parse().ok();
            }
        }
        Ok(changes)
    }

    /// Which of `paths` are in the snapshot `tree`.
    fn has(&self, tree: &str, paths: &[String]) -> Result<BTreeSet<String>, RewindError> {
        let mut args = vec!["ls-tree", "-z", "--name-only", "-r", "--full-tree", tree, "--"];
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        args.extend(refs.iter().copied());
        let out = self.literal(&args)?;
        Ok(out.split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into_owned()).collect())
    }

    /// Git with pathspecs taken literally (a path named `*.txt` is that file).
    fn literal(&self, args: &[&str]) -> Result<Vec<u8>, RewindError> {
        let mut cmd = self.command(args);
        cmd.env("GIT_LITERAL_PATHSPECS", "1");
        check(args, cmd.output().map_err(RewindError::Spawn)?)
    }

    /// Put `paths` back as they are in `tree`: written if there, removed if not (with the
    /// directories that leaves empty). Then our index follows, so the next snapshot is cheap.
    pub fn restore(&self, tree: &str, paths: &[String]) -> Result<(), RewindError> {
        if paths.is_empty() {
            return Ok(());
        }
        let present = self.has(tree, paths)?;
        let (write, remove): (Vec<&String>, Vec<&String>) = paths.iter().partition(|p| present.contains(*p));
        for path in &remove {
            let full = self.work_tree.join(path);
            match std::fs::remove_file(&full) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            let mut dir = full.parent();
            while let Some(d) = dir {
                if d == self.work_tree || std::fs::remove_dir(d).is_err() {
                    break;
                }
                dir = d.parent();
            }
        }
        if !write.is_empty() {
            let mut args = vec!["checkout", "--no-overlay", tree, "--"];
            args.extend(write.iter().map(|p| p.as_str()));
            self.literal(&args)?;
        }
        Ok(())
    }

    /// A unified diff of `paths` (all when empty) from `from` to `to`.
    pub fn diff(&self, from: &str, to: &str, paths: &[String]) -> Result<String, RewindError> {
        let mut args = vec!["diff-tree", "-r", "-p", "--no-renames", "--no-color", from, to, "--"];
        args.extend(paths.iter().map(String::as_str));
        Ok(String::from_utf8_lossy(&self.literal(&args)?).into_owned())
    }

    /// Bytes the store takes on disk.
    pub fn disk_bytes(&self) -> u64 {
        fn walk(dir: &Path) -> u64 {
            let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk(&e.path()),
                    Ok(m) => m.blocks() * 512,
                    Err(_) => 0,
                })
                .sum()
        }
        walk(&self.git_dir)
    }
}

fn check(args: &[&str], out: std::process::Output) -> Result<Vec<u8>, RewindError> {
    if out.status.success() {
        Ok(out.stdout)
    } else {
        let shown: Vec<&str> = args.iter().copied().take(3).collect();
        Err(RewindError::Git { args: shown.join(" "), stderr: String::from_utf8_lossy(&out.stderr).trim().to_string() })
    }
}

fn text(out: Vec<u8>) -> String {
    String::from_utf8_lossy(&out).trim().to_string()
}
