//! Where Talaria keeps its files. `TALARIA_HOME`, when set, holds everything;
//! otherwise the platform directories from `directories::ProjectDirs` are used.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Set by the test helpers: a binary that sees it refuses to use the real home directory.
pub(crate) const TEST_GUARD_ENV: &str = "TALARIA_TEST_GUARD";

/// Fault injection for the tests' crash paths: with [`TEST_GUARD_ENV`] set, naming a point in
/// `TALARIA_TEST_PANIC` makes talaria panic there (e.g. `shutdown`: the engine panics when
/// asked to shut down). Without the guard the variable is ignored.
pub(crate) const TEST_PANIC_ENV: &str = "TALARIA_TEST_PANIC";

/// Panic at `point` if a test asked for it (see [`TEST_PANIC_ENV`]).
pub(crate) fn test_panic_point(point: &str) {
    if std::env::var_os(TEST_GUARD_ENV).is_some() && std::env::var(TEST_PANIC_ENV).is_ok_and(|p| p == point) {
        panic!("{TEST_PANIC_ENV}={point}: a panic a test asked for");
    }
}

/// A hold for the tests' ordering checks: with [`TEST_GUARD_ENV`] set and
/// `TALARIA_TEST_HOLD=<point>:<path>`, talaria at `point` creates `<path>.held` and waits
/// there until `<path>` exists (a test sees the work in progress, then lets it go on).
/// Without the guard the variable is ignored.
pub(crate) const TEST_HOLD_ENV: &str = "TALARIA_TEST_HOLD";

/// Wait at `point` if a test asked for it (see [`TEST_HOLD_ENV`]); a blocking wait, for
/// threads that may block.
pub(crate) fn test_hold_point(point: &str) {
    if std::env::var_os(TEST_GUARD_ENV).is_none() {
        return;
    }
    let Ok(hold) = std::env::var(TEST_HOLD_ENV) else { return };
    let Some(path) = hold.strip_prefix(point).and_then(|rest| rest.strip_prefix(':')) else { return };
    let release = PathBuf::from(path);
    let _ = std::fs::write(format!("{path}.held"), b"");
    while !release.exists() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub config_file: PathBuf,
    pub state_db: PathBuf,
    pub logs_dir: PathBuf,
    pub jobs_dir: PathBuf,
    pub estop: PathBuf,
    /// User-level keymap override.
    pub(crate) keymap_file: PathBuf,
    /// User-level instructions added to every session's system prompt.
    pub(crate) user_instructions: PathBuf,
}

impl Paths {
    /// Resolve from the environment.
    pub fn from_env() -> anyhow::Result<Paths> {
        if let Some(home) = std::env::var_os("TALARIA_HOME").filter(|v| !v.is_empty()) {
            return Ok(Paths::under(Path::new(&home)));
        }
        if std::env::var_os(TEST_GUARD_ENV).is_some() {
            anyhow::bail!("{TEST_GUARD_ENV} is set but TALARIA_HOME is not: refusing to use the real home directory");
        }
        let dirs = directories::ProjectDirs::from("", "", "talaria")
            .ok_or_else(|| anyhow::anyhow!("no home directory found; set TALARIA_HOME"))?;
        let data = dirs.data_dir();
        Ok(Paths {
            config_file: dirs.config_dir().join("config.toml"),
            state_db: data.join("state.db"),
            logs_dir: data.join("logs"),
            jobs_dir: data.join("jobs"),
            estop: data.join("ESTOP"),
            keymap_file: dirs.config_dir().join("keymap.toml"),
            user_instructions: dirs.config_dir().join("TALARIA.md"),
        })
    }

    /// Everything under one directory (what `TALARIA_HOME` means).
    pub fn under(home: &Path) -> Paths {
        Paths {
            config_file: home.join("config.toml"),
            state_db: home.join("state.db"),
            logs_dir: home.join("logs"),
            jobs_dir: home.join("jobs"),
            estop: home.join("ESTOP"),
            keymap_file: home.join("keymap.toml"),
            user_instructions: home.join("TALARIA.md"),
        }
    }

    /// Create the private directories (mode 0700) this process writes to.
    pub fn ensure_dirs(&self) -> std::io::Result<()> {
        for dir in [&self.logs_dir, &self.jobs_dir] {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        if let Some(parent) = self.state_db.parent() {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
        }
        Ok(())
    }

    /// Refuse a database inside the real home directory when the test guard is set
    /// (a test once wrote into a user's live database; this makes that impossible).
    pub fn check_test_guard(&self) -> anyhow::Result<()> {
        if std::env::var_os(TEST_GUARD_ENV).is_none() {
            return Ok(());
        }
        let Some(real_home) = directories::BaseDirs::new().map(|b| b.home_dir().to_path_buf()) else {
            return Ok(());
        };
        let db = &self.state_db;
        let tmp = std::env::temp_dir();
        if db.starts_with(&real_home) && !db.starts_with(&tmp) {
            anyhow::bail!(
                "{TEST_GUARD_ENV} is set and the database {} is inside the real home directory {}; refusing to open it",
                db.display(),
                real_home.display()
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn talaria_home_holds_everything() {
        let p = Paths::under(Path::new("/x/home"));
        assert_eq!(p.config_file, Path::new("/x/home/config.toml"));
        assert_eq!(p.state_db, Path::new("/x/home/state.db"));
        assert_eq!(p.logs_dir, Path::new("/x/home/logs"));
        assert_eq!(p.jobs_dir, Path::new("/x/home/jobs"));
        assert_eq!(p.estop, Path::new("/x/home/ESTOP"));
    }

    #[test]
    fn dirs_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let p = Paths::under(tmp.path());
        p.ensure_dirs().unwrap();
        let mode = std::fs::metadata(&p.jobs_dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }
}
