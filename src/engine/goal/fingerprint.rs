//! Workspace fingerprint for the unchanged-workspace gate skip (DESIGN §5): HEAD, a hash of
//! `git diff HEAD`, and the paths and contents of untracked (not ignored) files. Any change
//! to the content of the workspace changes it — unlike `git status --porcelain`, which
//! reads the same after a second edit to an already-modified file. Outside a repository,
//! before the first commit, or when git fails, there is no fingerprint and gates re-run.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::config::SandboxMode;
use crate::engine::sandbox::Policy;

/// The whole fingerprint must be computed within this, or there is none.
pub(crate) const FINGERPRINT_TIMEOUT: Duration = Duration::from_secs(60);

/// The fingerprint of the session's workspace as a hex string, or None (gates always re-run).
pub(crate) async fn fingerprint(policy: &Policy) -> Option<String> {
    let cwd = &policy.workspace;
    let git = Git::new(cwd, policy).await;
    match tokio::time::timeout(FINGERPRINT_TIMEOUT, compute(cwd, &git)).await {
        Ok(Ok(fp)) => Some(fp),
        Ok(Err(why)) => {
            tracing::debug!(cwd = %cwd.display(), why, "no workspace fingerprint; gates will re-run");
            None
        }
        Err(_) => {
            tracing::warn!(cwd = %cwd.display(), "workspace fingerprint took too long; gates will re-run");
            None
        }
    }
}

/// How talaria runs git: sandboxed read-only, with nothing the repository says run.
struct Git {
    policy: Policy,
    /// `filter.<driver>.clean|smudge|process` the configs set: each turned off.
    filters: Vec<String>,
}

/// Names that would point git at another repository or run a program of their choosing.
const GIT_ENV_DROPPED: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "GIT_EDITOR",
    "GIT_EXEC_PATH",
];

impl Git {
    async fn new(cwd: &Path, policy: &Policy) -> Git {
        let read_only = Policy {
            mode: match policy.mode {
                SandboxMode::Off => SandboxMode::Off,
                _ => SandboxMode::ReadOnly,
            },
            writable_roots: Vec::new(),
            git_guard: None,
            network: false,
            ..policy.clone()
        };
        let mut git = Git { policy: read_only, filters: Vec::new() };
        let names = output(cwd, &git, &["config", "-z", "--name-only", "--get-regexp", r"^filter\."]).await;
        git.filters = filter_overrides(&names.unwrap_or_default());
        git
    }

    fn command(&self, cwd: &Path) -> Result<Command, String> {
        let mut c = Command::new("git");
        for setting in [
            "core.fsmonitor=false",
            "core.hooksPath=/dev/null",
            "diff.external=",
            "core.pager=cat",
            "core.sshCommand=false",
        ] {
            c.arg("-c").arg(setting);
        }
        for filter in &self.filters {
            c.arg("-c").arg(filter);
        }
        for name in GIT_ENV_DROPPED {
            c.env_remove(name);
        }
        c.current_dir(cwd)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            // Read-only: never take the index lock another git process may want.
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("LC_ALL", "C")
            .kill_on_drop(true);
        if self.policy.mode != SandboxMode::Off {
            let mut prepared = crate::engine::sandbox::prepare_helper(&self.policy).map_err(|e| e.to_string())?;
            // SAFETY: apply_in_child makes only async-signal-safe syscalls.
            unsafe {
                c.pre_exec(move || crate::engine::sandbox::apply_in_child(&mut prepared));
            }
        }
        Ok(c)
    }
}

/// `-c` settings that turn off every filter driver named in `names` (`git config -z
/// --name-only` output): empty commands, and not required (a required one would fail).
fn filter_overrides(names: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for name in names.split(|b| *b == 0 || *b == b'\n').filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name);
        let Some(driver) = name.strip_prefix("filter.").and_then(|rest| rest.rsplit_once('.')).map(|(d, _)| d) else {
            continue;
        };
        for key in ["clean", "smudge", "process"] {
            out.push(format!("filter.{driver}.{key}="));
        }
        out.push(format!("filter.{driver}.required=false"));
    }
    out.sort();
    out.dedup();
    out
}

async fn output(cwd: &Path, git: &Git, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = git.command(cwd)?.args(args).stdout(Stdio::piped()).output().await.map_err(|e| format!("git: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!("git {} exited with {}", args.join(" "), out.status))
    }
}

async fn compute(cwd: &Path, git: &Git) -> Result<String, String> {
    let head = output(cwd, git, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]).await?;
    #[rustfmt::skip]
    let diff = output(cwd, git, &[
        "-c", "core.quotepath=false", "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
        "--ignore-submodules=all",
    ])
    .await?;
    let top = output(cwd, git, &["rev-parse", "--show-toplevel"]).await?;
    let top = Path::new(OsStr::from_bytes(top.strip_suffix(b"\n").unwrap_or(&top))).to_path_buf();
    // From the top, so a gate run in a subdirectory still sees every untracked file.
    let untracked = output(&top, git, &["ls-files", "--others", "--exclude-standard", "-z"]).await?;

    // Hash everything with git itself: a stable hash with no extra dependency, and file
    // contents are streamed rather than held in memory.
    let mut hasher = git
        .command(cwd)?
        .args(["hash-object", "--no-filters", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("git hash-object: {e}"))?;
    let mut stdin = hasher.stdin.take().ok_or("git hash-object has no stdin")?;
    let mut stdout = hasher.stdout.take().ok_or("git hash-object has no stdout")?;
    let feed = async move {
        let w = |e: std::io::Error| format!("writing to git hash-object: {e}");
        stdin.write_all(b"talaria-fingerprint 1\nHEAD ").await.map_err(w)?;
        stdin.write_all(&head).await.map_err(w)?;
        stdin.write_all(format!("DIFF {}\n", diff.len()).as_bytes()).await.map_err(w)?;
        stdin.write_all(&diff).await.map_err(w)?;
        for rel in untracked.split(|b| *b == 0).filter(|p| !p.is_empty()) {
            let path = top.join(OsStr::from_bytes(rel));
            stdin.write_all(format!("\nUNTRACKED {}\n", rel.len()).as_bytes()).await.map_err(w)?;
            stdin.write_all(rel).await.map_err(w)?;
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let target = std::fs::read_link(&path).map(|t| t.display().to_string()).unwrap_or_default();
                    stdin.write_all(format!("\nLINK {target}").as_bytes()).await.map_err(w)?;
                }
                Ok(meta) if meta.is_file() => {
                    stdin.write_all(format!("\nFILE {}\n", meta.len()).as_bytes()).await.map_err(w)?;
                    copy_contents(&path, &mut stdin).await.map_err(w)?;
                }
                // An embedded repository or other non-file: its name is all we hash.
                Ok(_) => stdin.write_all(b"\nOTHER").await.map_err(w)?,
                Err(_) => stdin.write_all(b"\nMISSING").await.map_err(w)?,
            }
        }
        stdin.write_all(b"\nTOP ").await.map_err(w)?;
        stdin.write_all(top.as_os_str().as_bytes()).await.map_err(w)?;
        stdin.shutdown().await.map_err(w)?;
        Ok::<(), String>(())
    };
    let read = async move {
        let mut hex = String::new();
        stdout.read_to_string(&mut hex).await.map_err(|e| format!("reading git hash-object: {e}"))?;
        Ok::<String, String>(hex)
    };
    let (fed, hex) = tokio::join!(feed, read);
    fed?;
    let hex = hex?;
    let status = hasher.wait().await.map_err(|e| format!("git hash-object: {e}"))?;
    let hex = hex.trim();
    if !status.success() || hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("git hash-object failed ({status})"));
    }
    Ok(hex.to_string())
}

/// Stream a file into the hasher. A read error is hashed as a marker (the same failure
/// gives the same fingerprint); only a write error — git went away — is an error.
async fn copy_contents(path: &Path, out: &mut tokio::process::ChildStdin) -> std::io::Result<()> {
    let mut file = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) => return out.write_all(format!("UNREADABLE {}", e.kind()).as_bytes()).await,
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buf).await {
            Ok(0) => return Ok(()),
            Ok(n) => out.write_all(&buf[..n]).await?,
            Err(e) => return out.write_all(format!("UNREADABLE {}", e.kind()).as_bytes()).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_git(dir: &Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "Talaria Test")
            .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
            .env("GIT_COMMITTER_NAME", "Talaria Test")
            .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?} failed");
    }

    /// The fingerprint as a session started in `dir` computes it (sandboxed).
    async fn fp(dir: &Path) -> Option<String> {
        let th = tempfile::tempdir().unwrap();
        let paths = crate::paths::Paths::under(th.path());
        let policy = Policy::from_config(&Default::default(), dir, &paths, None);
        fingerprint(&policy).await
    }

    /// A planted core.fsmonitor, filter and external diff never run from talaria's git,
    /// and the fingerprint is still made. The markers would land in talaria's job
    /// directory, the one place the read-only sandbox lets a command write.
    #[tokio::test]
    async fn a_planted_fsmonitor_filter_or_external_diff_never_runs() {
        let r = repo();
        std::fs::write(r.path().join("a"), "1").unwrap();
        commit_all(r.path());
        let th = tempfile::tempdir().unwrap();
        let paths = crate::paths::Paths::under(th.path());
        std::fs::create_dir_all(&paths.jobs_dir).unwrap();
        let marker = |name: &str| paths.jobs_dir.join(format!("{name}-5521"));
        let (fsm, filt, ext) = (marker("fsmonitor"), marker("filter"), marker("extdiff"));
        for (key, value) in [
            ("core.fsmonitor", format!("touch {}; echo", fsm.display())),
            ("filter.evil.clean", format!("touch {}; cat", filt.display())),
            ("filter.evil.required", "true".into()),
            ("diff.external", format!("touch {}", ext.display())),
        ] {
            run_git(r.path(), &["config", key, &value]);
        }
        std::fs::write(r.path().join(".gitattributes"), "* filter=evil\n").unwrap();
        std::fs::write(r.path().join("a"), "2").unwrap();
        let policy = Policy::from_config(&Default::default(), r.path(), &paths, None);
        assert!(fingerprint(&policy).await.is_some());
        for m in [&fsm, &filt, &ext] {
            assert!(!m.exists(), "{} ran", m.display());
        }
    }

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        run_git(dir.path(), &["init", "-q", "-b", "main"]);
        dir
    }

    fn commit_all(dir: &Path) {
        run_git(dir, &["add", "-A"]);
        run_git(dir, &["commit", "-q", "-m", "c"]);
    }

    #[tokio::test]
    async fn none_outside_a_repository_or_before_the_first_commit() {
        let plain = tempfile::tempdir().unwrap();
        std::fs::write(plain.path().join("a"), "x").unwrap();
        assert_eq!(fp(plain.path()).await, None);
        let fresh = repo();
        std::fs::write(fresh.path().join("a"), "x").unwrap();
        assert_eq!(fp(fresh.path()).await, None);
    }

    #[tokio::test]
    async fn stable_when_nothing_changes() {
        let r = repo();
        std::fs::write(r.path().join("lib.rs"), "fn a() {}\n").unwrap();
        commit_all(r.path());
        let a = fp(r.path()).await.expect("fingerprint");
        assert!(a.len() >= 40, "{a}");
        assert_eq!(fp(r.path()).await, Some(a.clone()));
        std::fs::write(r.path().join("lib.rs"), "fn a() { 1 }\n").unwrap();
        let b = fp(r.path()).await.unwrap();
        assert_ne!(a, b);
        assert_eq!(fp(r.path()).await, Some(b));
    }

    #[tokio::test]
    async fn second_edit_to_a_modified_file_changes_it() {
        let r = repo();
        std::fs::write(r.path().join("lib.rs"), "one\n").unwrap();
        commit_all(r.path());
        std::fs::write(r.path().join("lib.rs"), "two\n").unwrap();
        let first = fp(r.path()).await.unwrap();
        // `git status --porcelain` reads ` M lib.rs` both times; the fingerprint must not.
        std::fs::write(r.path().join("lib.rs"), "three\n").unwrap();
        let second = fp(r.path()).await.unwrap();
        assert_ne!(first, second);
    }

    #[tokio::test]
    async fn untracked_contents_change_it_and_ignored_files_do_not() {
        let r = repo();
        std::fs::write(r.path().join(".gitignore"), "target/\n").unwrap();
        commit_all(r.path());
        let clean = fp(r.path()).await.unwrap();
        std::fs::create_dir(r.path().join("sub")).unwrap();
        std::fs::write(r.path().join("sub").join("new.rs"), "a\n").unwrap();
        let with_new = fp(r.path()).await.unwrap();
        assert_ne!(clean, with_new);
        std::fs::write(r.path().join("sub").join("new.rs"), "b\n").unwrap();
        let edited = fp(r.path()).await.unwrap();
        assert_ne!(with_new, edited);
        std::fs::create_dir(r.path().join("target")).unwrap();
        std::fs::write(r.path().join("target").join("out.o"), "bin").unwrap();
        assert_eq!(fp(r.path()).await.unwrap(), edited);
        // The same answer from a subdirectory (gates may run there).
        assert_eq!(fp(&r.path().join("sub")).await.unwrap(), edited);
    }

    #[tokio::test]
    async fn an_embedded_repository_does_not_break_it() {
        let r = repo();
        std::fs::write(r.path().join("a"), "1").unwrap();
        commit_all(r.path());
        let inner = r.path().join("vendor");
        std::fs::create_dir(&inner).unwrap();
        run_git(&inner, &["init", "-q"]);
        let first = fp(r.path()).await;
        assert!(first.is_some());
        assert_eq!(fp(r.path()).await, first);
    }

    #[tokio::test]
    async fn a_new_commit_changes_it() {
        let r = repo();
        std::fs::write(r.path().join("a"), "1").unwrap();
        commit_all(r.path());
        let before = fp(r.path()).await.unwrap();
        std::fs::write(r.path().join("a"), "2").unwrap();
        commit_all(r.path());
        assert_ne!(fp(r.path()).await.unwrap(), before);
    }
}
