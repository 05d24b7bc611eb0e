//! The kernel sandbox every job runs in (DESIGN §6). Nothing else knows how it works:
//! build a [`Policy`] (plain data: config + session directory), [`prepare`] it in the
//! parent before fork (all path lookups, allocation and rule building happen here), then
//! call [`apply_in_child`] between fork and exec (only `prctl` and the Landlock and seccomp
//! syscalls, all async-signal-safe).
//!
//! Files: Landlock is an allow-list, so a denied path is carved out by granting its
//! siblings instead of its parent. Network (`sandbox.network = false`): a seccomp filter
//! makes `socket` of every family but AF_UNIX fail. Landlock's own network rules only
//! cover TCP bind/connect, which would leave UDP (DNS tunnels) and raw sockets open.
//!
//! Side doors (DESIGN §6a): unix sockets are mediated by the job's supervisor
//! ([`notify`], [`sockets`]); abstract ones are also scoped by Landlock. Jobs keep no
//! capability ([`caps`]), cannot change limits or priorities of other processes (the
//! seccomp filter), and run under [`limits`]. In the child: mounts → limits → capabilities
//! → Landlock → seccomp (and the listener handed to the supervisor) → exec.

mod caps;
pub mod env;
pub mod git_guard;
pub mod limits;
pub(crate) mod listeners;
pub mod mounts;
pub mod notify;
mod seccomp;
pub(crate) mod sockets;
mod view;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, Scope, ABI,
};
use serde::{Deserialize, Serialize};

use crate::config::{NetworkMode, SandboxConfig, SandboxMode};

/// The file-system access rights we ask for: everything Landlock ABI 5 knows (the later
/// ABIs add no file-system rights). Older kernels get what they support.
const TARGET_ABI: ABI = ABI::V5;
/// Entries a policy may expand into rules before it is refused as unreasonable.
const MAX_RULES: usize = 20_000;

/// What a job may touch. Plain data, so a supervisor process can receive it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub mode: SandboxMode,
    /// The session's starting directory: where talaria's own git commands run.
    #[serde(default)]
    pub workspace: PathBuf,
    /// IP sockets may be opened (`sandbox.network` "on" or "ask").
    pub network: bool,
    /// `sandbox.network = "ask"`: an IP socket reaches only talaria's proxy (and loopback
    /// servers of the job's own processes); no datagrams, so no DNS of its own (DESIGN §6b).
    #[serde(default)]
    pub proxy_only: bool,
    /// The session's proxy on 127.0.0.1; None when none runs (nothing is reachable then).
    #[serde(default)]
    pub proxy_port: Option<u16>,
    /// Readable and writable (minus `deny_write` and `deny_read`).
    pub writable_roots: Vec<PathBuf>,
    /// Neither readable nor writable.
    pub deny_read: Vec<PathBuf>,
    /// Not writable, whatever the roots say.
    pub deny_write: Vec<PathBuf>,
    /// Files one job may write even under a denied path: its own `cwd` file in talaria's
    /// jobs directory (set by its supervisor; the directory itself is denied).
    #[serde(default)]
    pub job_files: Vec<PathBuf>,
    /// How jobs get the read-only view of the file system and their private `/dev/pts`
    /// ([`view`]); None where no mount namespace can be made (then metadata outside the roots
    /// is not protected and jobs get no terminal at all).
    #[serde(default)]
    pub view: Option<mounts::Namespace>,
    /// How jobs get the mount namespace that makes each root's `.git/hooks` and
    /// `.git/config` read-only; None where none can be created (they are then unprotected).
    #[serde(default)]
    pub git_guard: Option<mounts::Namespace>,
    /// The roots' `.git` files and `commondir`s at session start: the only ones followed.
    #[serde(default)]
    pub git_start: git_guard::Start,
    /// `sandbox.allow_unix_sockets`: sockets outside the job a command may still reach
    /// (paths, `@name` for abstract ones); the rest are refused unless a process of the
    /// job made them.
    #[serde(default)]
    pub allow_unix_sockets: Vec<PathBuf>,
    #[serde(default)]
    pub limits: limits::Limits,
}

/// Credential stores under the home directory: never readable by a job.
#[rustfmt::skip]
const HOME_SECRETS: &[&str] = &[
    ".ssh", ".gnupg", ".aws", ".netrc", ".docker/config.json", ".config/gh", ".config/gcloud", ".config/talaria",
    // git's credential store, kubeconfig tokens, npm/PyPI/crates.io publish tokens.
    ".git-credentials", ".config/git/credentials", ".kube/config", ".npmrc", ".pypirc",
    ".cargo/credentials.toml", ".cargo/credentials",
];

impl Policy {
    /// The policy for this session. `workspace` is the session's starting directory (not
    /// the directory a `cd` carried the shell to: that would let `cd ~` widen the roots).
    pub fn from_config(
        config: &SandboxConfig,
        workspace: &Path,
        paths: &crate::paths::Paths,
        home: Option<&Path>,
    ) -> Policy {
        let expand = |p: &Path| -> PathBuf {
            match (p.strip_prefix("~"), home) {
                (Ok(rest), Some(home)) => home.join(rest),
                _ => p.to_path_buf(),
            }
        };
        let mut deny_read: Vec<PathBuf> = Vec::new();
        if let Some(home) = home {
            deny_read.extend(HOME_SECRETS.iter().map(|s| home.join(s)));
        }
        // Talaria's own config and state: the database (with its journal files), the logs.
        // Named one by one rather than by directory: tests and TALARIA_HOME users may keep
        // a workspace next to them.
        let db = paths.state_db.display().to_string();
        // The jobs directory too: no job may read another's stdin FIFO or log, nor write any
        // job's spec, lease, kill request or exit record (DESIGN §6a).
        deny_read.extend([
            paths.config_file.clone(),
            paths.logs_dir.clone(),
            paths.state_db.clone(),
            paths.jobs_dir.clone(),
        ]);
        deny_read.extend(["-wal", "-shm", "-journal"].iter().map(|s| PathBuf::from(format!("{db}{s}"))));
        deny_read.extend(config.deny_read.iter().map(|p| expand(p)));
        let mut deny_write = deny_read.clone();
        deny_write.extend([paths.keymap_file.clone(), paths.user_instructions.clone(), paths.estop.clone()]);
        if let Some(home) = home {
            // The git configs can point core.hooksPath anywhere: as dangerous as the hooks.
            deny_write.extend(
                [".ssh", ".gnupg", ".aws", ".config/talaria", ".gitconfig", ".config/git"].iter().map(|s| home.join(s)),
            );
        }
        let mut writable_roots = Vec::new();
        if config.mode == SandboxMode::WorkspaceWrite {
            writable_roots.push(workspace.to_path_buf());
            writable_roots.push(std::env::temp_dir());
            writable_roots.extend(config.writable_roots.iter().map(|p| expand(p)));
        }
        // The deny lists name dozens of paths under a few directories, most of them missing:
        // each directory is resolved once.
        let mut resolved = Canonical::default();
        let writable_roots: Vec<PathBuf> = writable_roots.iter().map(|p| resolved.of(p)).collect();
        Policy {
            git_start: git_guard::Start::scan(&writable_roots),
            workspace: resolved.of(workspace),
            mode: config.mode,
            network: config.network != NetworkMode::Off,
            proxy_only: config.network == NetworkMode::Ask,
            proxy_port: None,
            writable_roots,
            deny_read: deny_read.iter().map(|p| resolved.of(p)).collect(),
            deny_write: deny_write.iter().map(|p| resolved.of(p)).collect(),
            job_files: vec![],
            view: match (config.mode, view::support()) {
                (SandboxMode::Off, _) => None,
                (_, mounts::GuardSupport::Available(ns)) => Some(*ns),
                _ => None,
            },
            git_guard: match (config.mode, mounts::support()) {
                (SandboxMode::WorkspaceWrite, mounts::GuardSupport::Available(ns)) => Some(*ns),
                _ => None,
            },
            allow_unix_sockets: config.allow_unix_sockets.iter().map(|p| expand(p)).collect(),
            limits: config.limits,
        }
    }

    /// What a supervisor needs to serve this policy's socket mediation for one job.
    pub fn notify_settings(&self, denials: PathBuf) -> notify::Settings {
        notify::Settings {
            network: self.network,
            proxy_only: self.proxy_only,
            proxy_port: self.proxy_port,
            allow_unix_sockets: self.allow_unix_sockets.clone(),
            denials,
        }
    }

    /// One line for `/permissions`: what commands may connect to.
    pub(crate) fn describe_sockets(&self) -> String {
        if !self.active() {
            return "sockets: NOT mediated (no kernel sandbox)".into();
        }
        let allowed: Vec<String> = self.allow_unix_sockets.iter().map(|p| p.display().to_string()).collect();
        format!(
            "sockets: commands reach only unix sockets their own processes made{}; capabilities dropped; \
             other processes' limits and priorities are out of reach",
            if allowed.is_empty() { String::new() } else { format!(", plus {}", allowed.join(", ")) }
        )
    }

    /// One line for `/permissions`: which limits hold and which could not be set.
    pub(crate) fn describe_limits(&self) -> String {
        if self.mode == SandboxMode::Off {
            return "limits: none (sandbox off)".into();
        }
        limits::describe(&self.limits, nix::unistd::getuid().is_root(), limits::cgroup_support())
    }

    /// One line for `/permissions`: are git hooks safe from commands?
    pub(crate) fn describe_git_guard(&self) -> String {
        self.describe_git_guard_with(mounts::support())
    }

    fn describe_git_guard_with(&self, support: &mounts::GuardSupport) -> String {
        match (self.mode, self.git_guard, support) {
            (SandboxMode::Off, ..) => "git hooks: NOT protected (sandbox off)".into(),
            (SandboxMode::ReadOnly, ..) => "git hooks: read-only like everything else (sandbox read-only)".into(),
            (_, Some(_), _) if self.active() => {
                "git: .git of the writable roots is read-only for commands but what git writes to commit \
                 (objects, refs, logs, index, HEAD, ...); a planted commondir or .git file is moved aside"
                    .into()
            }
            (_, _, mounts::GuardSupport::Unavailable { reason }) => format!(
                "git hooks: NOT protected from commands ({reason}); write_file/edit_file still ask before writing there"
            ),
            _ => "git hooks: NOT protected from commands (no kernel sandbox); write_file/edit_file still ask".into(),
        }
    }

    /// One line for `/permissions`: is everything outside the roots read-only, metadata too?
    pub(crate) fn describe_view(&self) -> String {
        match (self.mode, self.view, view::support()) {
            (SandboxMode::Off, ..) => "read-only view: none (sandbox off)".into(),
            (_, Some(_), _) if self.active() => "read-only view: outside the writable roots nothing can be written or \
                 changed (chmod, chown, touch -d, xattrs fail too); commands get a private /dev/pts, never a \
                 terminal of yours"
                .into(),
            (_, _, mounts::GuardSupport::Unavailable { reason }) => format!(
                "read-only view: NOT available ({reason}): Landlock still stops writes outside the roots, but not \
                 chmod, chown, touch -d or xattrs there; commands get no terminal (no /dev/pts)"
            ),
            _ => "read-only view: NOT available (no kernel sandbox)".into(),
        }
    }

    /// Will jobs spawned with this policy actually be contained?
    pub(crate) fn active(&self) -> bool {
        self.mode != SandboxMode::Off && matches!(support(), Support::Available { .. })
    }

    /// A few characters for the status line.
    pub(crate) fn short_label(&self) -> String {
        match (self.mode, self.active()) {
            (SandboxMode::Off, _) | (_, false) => "NO SANDBOX".into(),
            (SandboxMode::WorkspaceWrite, true) if self.network => "sandbox".into(),
            (SandboxMode::WorkspaceWrite, true) => "sandbox:offline".into(),
            (SandboxMode::ReadOnly, true) => "sandbox:ro".into(),
        }
    }

    /// One line for `/permissions` and notices.
    pub(crate) fn describe(&self) -> String {
        let kernel = match support() {
            Support::Available { abi } => format!("Landlock ABI {abi} active"),
            Support::Unavailable { reason } => format!("NOT active: {reason}"),
        };
        let mode = match self.mode {
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::Off => return "sandbox: off (commands run with your full permissions)".into(),
        };
        let roots: Vec<String> = self.writable_roots.iter().map(|p| p.display().to_string()).collect();
        format!(
            "sandbox: {mode}, kernel sandbox {kernel}; network {}; writable: {}",
            match (self.network, self.proxy_only) {
                (false, _) => "off",
                (true, true) => "through talaria's proxy, host by host (ask)",
                (true, false) => "on",
            },
            if roots.is_empty() { "nothing but talaria's job files".to_string() } else { roots.join(", ") }
        )
    }
}

/// The path with symlinks resolved; for a path that does not exist yet, its nearest
/// existing ancestor resolved and the rest appended.
pub(crate) fn canonical(path: &Path) -> PathBuf {
    Canonical::default().of(path)
}

/// [`canonical`] for many paths, each path and directory resolved once.
#[derive(Default)]
struct Canonical(std::collections::HashMap<PathBuf, PathBuf>);

impl Canonical {
    fn of(&mut self, path: &Path) -> PathBuf {
        if let Some(done) = self.0.get(path) {
            return done.clone();
        }
        let done = match std::fs::canonicalize(path) {
            Ok(p) => p,
            Err(_) => match (path.parent(), path.file_name()) {
                (Some(parent), Some(name)) if parent != path => self.of(parent).join(name),
                _ => path.to_path_buf(),
            },
        };
        self.0.insert(path.to_path_buf(), done.clone());
        done
    }
}

/// Whether this kernel can sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    Available { abi: i32 },
    Unavailable { reason: String },
}

/// Probed once per process.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(probe)
}

/// Every probe a policy needs (Landlock, and the mount namespace and the job's view, each
/// tried in a forked child), made now: a start-up calls it off its own path (a blocking
/// thread), so the session's first policy finds the answers ready or nearly so.
pub fn probe_ahead() {
    let _ = support();
    let _ = mounts::support();
    let _ = view::support();
}

/// Set (to anything) only by tests: behave as on a kernel without Landlock.
pub const NO_LANDLOCK_ENV: &str = "TALARIA_TEST_NO_LANDLOCK";

#[cfg(target_os = "linux")]
fn probe() -> Support {
    if std::env::var_os(NO_LANDLOCK_ENV).is_some() {
        return Support::Unavailable { reason: format!("Landlock turned off by {NO_LANDLOCK_ENV}") };
    }
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute and size 0 this only asks for the ABI version.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi >= 1 {
        return Support::Available { abi: abi as i32 };
    }
    let err = std::io::Error::last_os_error();
    let reason = match err.raw_os_error() {
        Some(libc::ENOSYS) => "this kernel has no Landlock (Linux 5.13 or later is needed)".to_string(),
        Some(libc::EOPNOTSUPP) => "Landlock is disabled on this kernel (boot option lsm=)".to_string(),
        _ => format!("Landlock is not usable here: {err}"),
    };
    Support::Unavailable { reason }
}

#[cfg(not(target_os = "linux"))]
fn probe() -> Support {
    Support::Unavailable { reason: "the sandbox needs Linux (Landlock)".into() }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot build the sandbox: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("cannot build the sandbox: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot build the sandbox: more than {MAX_RULES} paths to list; narrow sandbox.writable_roots")]
    TooLarge,
    #[error("the git guard refused the command: {0}")]
    Git(#[from] git_guard::Refusal),
}

/// A policy turned into kernel objects, ready for [`apply_in_child`]. One per spawn: the
/// Landlock ruleset is consumed when it is applied.
#[derive(Debug)]
pub struct Prepared {
    ruleset: Option<RulesetCreated>,
    filter: Option<seccomp::Filter>,
    git_guard: Option<mounts::Plan>,
    view: Option<view::View>,
    /// How the child hands the socket mediation's listener to its supervisor.
    handoff: Option<notify::Handoff>,
    caps: Option<caps::DropAll>,
    limits: limits::Plan,
}

impl Prepared {
    /// The supervisor's end of the socket mediation: it must [`notify::ParentEnds::receive`]
    /// the listener while the spawn runs (in a thread) and serve it. A job whose filter
    /// has nobody to serve it does not start.
    pub fn take_notify(&mut self) -> Option<notify::ParentEnds> {
        self.handoff.as_mut().and_then(|h| h.take_parent())
    }

    /// Bound the job's processes by its cgroup instead of RLIMIT_NPROC.
    pub fn with_cgroup(mut self, policy: &Policy, cgroup: Option<&limits::JobCgroup>) -> Prepared {
        if policy.mode != SandboxMode::Off {
            self.limits = limits::Plan::new(&policy.limits).with_processes(&policy.limits, cgroup);
        }
        self
    }
}

/// Build the ruleset in the parent: open every path, add every rule. Costs a directory
/// listing per ancestor of a denied path (see BENCHMARKS.md for the time per command).
pub fn prepare(policy: &Policy) -> Result<Prepared, SandboxError> {
    prepare_with(policy, policy.view)
}

/// [`prepare`], with the read-only view made in `view` (None: no view, and no /dev/pts).
fn prepare_with(policy: &Policy, view: Option<mounts::Namespace>) -> Result<Prepared, SandboxError> {
    let mut prepared = Prepared {
        ruleset: None,
        filter: None,
        git_guard: None,
        view: None,
        handoff: None,
        caps: None,
        limits: limits::Plan::default(),
    };
    if policy.mode == SandboxMode::Off {
        return Ok(prepared);
    }
    prepared.filter = Some(seccomp::Filter::new(seccomp::Rules {
        network: policy.network,
        proxy_only: policy.proxy_only,
        mediate_sockets: true,
    }));
    prepared.handoff = Some(notify::Handoff::new()?);
    prepared.caps = Some(caps::DropAll::new());
    prepared.limits = limits::Plan::new(&policy.limits).with_processes(&policy.limits, None);
    if !matches!(support(), Support::Available { .. }) {
        return Ok(prepared);
    }
    let all = AccessFs::from_all(TARGET_ABI);
    let read = AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute;

    let mut budget = MAX_RULES;
    let mut readable = Vec::new();
    grantable(Path::new("/"), &policy.deny_read, &mut readable, &mut budget)?;
    let mut writable = Vec::new();
    let holes: Vec<PathBuf> = policy.deny_read.iter().chain(&policy.deny_write).cloned().collect();
    for root in &policy.writable_roots {
        grantable(root, &holes, &mut writable, &mut budget)?;
    }
    // Granted file by file, so only the rights a file can take (write, truncate, read).
    writable.extend(policy.job_files.iter().cloned());
    // Devices every shell script expects to write; pipes need no rule. No /dev/tty and no
    // /dev/pts: no job may open a terminal of talaria or the user (it could read what they
    // type, or type for them). The view grants its private /dev/pts in the child.
    let devices = ["/dev/null", "/dev/zero", "/dev/full", "/dev/ptmx", "/dev/shm"];

    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?
        // A job may not signal processes outside its sandbox (talaria itself, the user's),
        // nor connect to an abstract unix socket made outside it (X11, dbus, ...).
        .scope(Scope::Signal)?
        .scope(Scope::AbstractUnixSocket)?
        .create()?
        // Names are listable everywhere (`ls ~` works); contents follow the rules below.
        .add_rules(path_beneath_rules(["/"], AccessFs::ReadDir))?
        .add_rules(path_beneath_rules(&readable, read))?
        .add_rules(path_beneath_rules(&writable, all))?
        .add_rules(path_beneath_rules(devices, all))?;
    if policy.mode == SandboxMode::WorkspaceWrite {
        // Before each command (DESIGN §6): what an earlier one planted is not followed.
        git_guard::sweep(&policy.writable_roots, &policy.git_start);
    }
    prepared.git_guard = match policy.git_guard {
        Some(ns) => mounts::Plan::for_roots(ns, &policy.writable_roots, &policy.git_start)?,
        None => None,
    };
    prepared.view = match view {
        Some(ns) => Some(view::View::new(ns, &policy.writable_roots, &policy.job_files)?),
        None => None,
    };
    prepared.ruleset = Some(ruleset);
    Ok(prepared)
}

/// The sandbox of talaria's file-tool helper (`talaria __fs`, engine/tools/fs_helper.rs):
/// the same Landlock rules and mounts as a job, but a seccomp filter without the socket
/// mediation (the helper opens no socket and nobody would serve its connects) and no IP
/// socket at all.
pub fn prepare_helper(policy: &Policy) -> Result<Prepared, SandboxError> {
    // The helper only reads and writes files (Landlock's rights) and makes approved writes
    // outside the roots: no read-only view (nor its cost per call), and so no /dev/pts.
    let mut prepared = prepare_with(policy, None)?;
    if prepared.filter.is_some() {
        prepared.filter =
            Some(seccomp::Filter::new(seccomp::Rules { network: false, proxy_only: false, mediate_sockets: false }));
        prepared.handoff = None;
    }
    Ok(prepared)
}

/// What may be granted whole under `root` without granting anything under `holes`: `root`
/// itself when no hole is inside it, else its entries, recursively. Symlinks are skipped
/// (Landlock checks the file they point to). All paths are canonical.
fn grantable(root: &Path, holes: &[PathBuf], out: &mut Vec<PathBuf>, budget: &mut usize) -> Result<(), SandboxError> {
    if holes.iter().any(|h| root.starts_with(h)) {
        return Ok(());
    }
    *budget = budget.checked_sub(1).ok_or(SandboxError::TooLarge)?;
    if !holes.iter().any(|h| h.starts_with(root)) {
        out.push(root.to_path_buf());
        return Ok(());
    }
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(_) => return Ok(()),
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            continue;
        }
        grantable(&entry.path(), holes, out, budget)?;
    }
    Ok(())
}

/// Restrict the calling process. Call it between fork and exec (a `pre_exec` closure):
/// it makes only async-signal-safe syscalls (`prctl`, `capset`, `setrlimit`, `write`,
/// `landlock_restrict_self`, `seccomp`, `read`, `close`). A failure must abort the spawn:
/// the command then never runs outside its sandbox.
pub fn apply_in_child(prepared: &mut Prepared) -> std::io::Result<()> {
    // Mounts first: once Landlock applies, no mount can be made or undone. The view
    // enters the namespace and puts the git guard's binds on top of itself.
    if let Some(view) = &prepared.view {
        view.apply(prepared.git_guard.as_ref())?;
    } else if let Some(plan) = &prepared.git_guard {
        plan.apply()?;
    }
    prepared.limits.apply()?;
    if let Some(caps) = &prepared.caps {
        caps.apply()?;
    }
    if let Some(view) = &prepared.view {
        if let Some(ruleset) = prepared.ruleset.take() {
            prepared.ruleset = Some(view.grant_devpts(ruleset, AccessFs::from_all(TARGET_ABI))?);
        }
    }
    if let Some(ruleset) = prepared.ruleset.take() {
        ruleset.restrict_self().map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))?;
    }
    if let Some(filter) = &prepared.filter {
        let listener = filter.install()?;
        if let (Some(listener), Some(handoff)) = (listener, &prepared.handoff) {
            // A user namespace (the git guard) leaves the child non-dumpable, and the
            // supervisor could not take the listener from it.
            nix::sys::prctl::set_dumpable(true)?;
            handoff.hand_over(listener)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// Resolving many paths at once gives what resolving each alone does: through a
    /// symlinked directory, for paths that exist and for missing ones at any depth.
    #[test]
    fn paths_resolved_together_are_what_each_resolves_to_alone() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("there")).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let link = dir.path().join("link");
        let paths = [
            link.join("there"),
            link.join("missing"),
            link.join("missing/deeper/still"),
            link.join("there/missing"),
            link.clone(),
            PathBuf::from("relative/missing"),
        ];
        let mut together = Canonical::default();
        for p in &paths {
            assert_eq!(together.of(p), canonical(p), "{}", p.display());
        }
        assert_eq!(together.of(&link.join("missing/deeper")), canonical(&real).join("missing/deeper"));
        let real = std::fs::canonicalize(&real).unwrap();
        assert_eq!(canonical(&link.join("missing/deeper/still")), real.join("missing/deeper/still"));
        assert_eq!(canonical(&link.join("there")), real.join("there"));
    }

    #[test]
    fn a_hole_is_carved_out_by_granting_its_siblings() {
        let dir = tempfile::tempdir().unwrap();
        let home = canonical(dir.path());
        for d in [".ssh", ".config/talaria", ".config/other", "src"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join("notes.txt"), "x").unwrap();
        std::os::unix::fs::symlink(home.join(".ssh"), home.join("keys")).unwrap();
        let holes = vec![home.join(".ssh"), home.join(".config/talaria")];
        let mut out = Vec::new();
        let mut budget = 100;
        grantable(&home, &holes, &mut out, &mut budget).unwrap();
        out.sort();
        assert_eq!(out, vec![home.join(".config/other"), home.join("notes.txt"), home.join("src")]);
        // A root inside a hole grants nothing; one without holes is granted whole.
        let mut out = Vec::new();
        grantable(&home.join(".ssh"), &holes, &mut out, &mut budget).unwrap();
        assert!(out.is_empty());
        grantable(&home.join("src"), &holes, &mut out, &mut budget).unwrap();
        assert_eq!(out, vec![home.join("src")]);
    }

    #[test]
    fn the_policy_keeps_secrets_out_and_roots_in() {
        let dir = tempfile::tempdir().unwrap();
        let home = canonical(dir.path()).join("home");
        let work = canonical(dir.path()).join("work");
        std::fs::create_dir_all(&work).unwrap();
        let paths = crate::paths::Paths::under(&canonical(dir.path()).join("th"));
        let config = SandboxConfig {
            writable_roots: vec![PathBuf::from("~/extra")],
            deny_read: vec![PathBuf::from("~/private")],
            ..SandboxConfig::default()
        };
        let p = Policy::from_config(&config, &work, &paths, Some(&home));
        assert!(p.writable_roots.contains(&work));
        assert!(p.writable_roots.contains(&home.join("extra")));
        #[rustfmt::skip]
        let secrets = [
            ".ssh", ".aws", ".gnupg", ".netrc", "private", ".git-credentials", ".config/git/credentials",
            ".kube/config", ".npmrc", ".pypirc", ".cargo/credentials.toml", ".cargo/credentials",
        ];
        for secret in secrets {
            assert!(p.deny_read.contains(&home.join(secret)), "{secret}");
            assert!(p.deny_write.contains(&home.join(secret)), "{secret}");
        }
        assert!(p.deny_read.contains(&canonical(dir.path()).join("th/state.db")));
        assert!(p.deny_read.contains(&canonical(dir.path()).join("th/config.toml")));
        assert!(p.deny_read.contains(&canonical(dir.path()).join("th/jobs")));
        assert!(p.deny_write.contains(&canonical(dir.path()).join("th/jobs")));
        let ro = Policy::from_config(&SandboxConfig { mode: SandboxMode::ReadOnly, ..config }, &work, &paths, None);
        assert!(ro.writable_roots.is_empty());
        // What /permissions and the status line say (Landlock is on this test machine).
        assert_eq!((p.short_label(), ro.short_label()), ("sandbox".to_string(), "sandbox:ro".to_string()));
        assert!(p.describe().contains(&work.display().to_string()), "{}", p.describe());
        assert!(p.describe().contains("Landlock ABI"), "{}", p.describe());
    }

    /// Run `script` under `policy` the way jobs run: prepared before fork, applied after.
    fn run_sandboxed(policy: &Policy, script: &str) -> (i32, String) {
        use std::os::unix::process::CommandExt;
        let mut prepared = prepare(policy).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let server = prepared
            .take_notify()
            .map(|ends| notify::serve_in_thread(ends, policy.notify_settings(dir.path().join("denials.jsonl"))));
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg(script);
        // SAFETY: apply_in_child only makes async-signal-safe syscalls.
        unsafe {
            cmd.pre_exec(move || apply_in_child(&mut prepared));
        }
        let out = cmd.output().unwrap();
        drop(cmd);
        if let Some(server) = server {
            server.join().unwrap();
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.code().unwrap_or(-1), text)
    }

    #[test]
    fn a_sandboxed_child_writes_only_under_its_roots_and_reads_no_secret() {
        if !matches!(support(), Support::Available { .. }) {
            panic!("this test needs Landlock; the kernel says: {:?}", support());
        }
        let dir = tempfile::tempdir().unwrap();
        let base = canonical(dir.path());
        let (home, work) = (base.join("home"), base.join("work"));
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE-KEY-MATERIAL").unwrap();
        std::fs::write(home.join("notes.txt"), "readable").unwrap();
        let policy = Policy {
            mode: SandboxMode::WorkspaceWrite,
            workspace: PathBuf::new(),
            network: false,
            proxy_only: false,
            proxy_port: None,
            writable_roots: vec![work.clone()],
            deny_read: vec![home.join(".ssh")],
            deny_write: vec![home.join(".ssh")],
            job_files: vec![],
            view: None,
            git_guard: None,
            git_start: Default::default(),
            allow_unix_sockets: vec![],
            limits: Default::default(),
        };
        let h = home.display();
        let (code, out) =
            run_sandboxed(&policy, &format!("cat {h}/notes.txt; echo ok > {}/made; ls {h}/.ssh", work.display()));
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("readable") && out.contains("id_ed25519"), "{out}");
        assert!(work.join("made").exists());
        let (code, out) = run_sandboxed(&policy, &format!("cat {h}/.ssh/id_ed25519"));
        assert_ne!(code, 0);
        assert!(!out.contains("PRIVATE"), "{out}");
        for attack in [
            format!("rm -rf {h}"),
            format!("echo x > {h}/.ssh/authorized_keys"),
            format!("touch {h}/new"),
            format!("mv {h}/notes.txt {}/", work.display()),
            "echo x > /proc/sysrq-trigger".to_string(),
        ] {
            let (code, out) = run_sandboxed(&policy, &attack);
            assert_ne!(code, 0, "{attack}: {out}");
        }
        assert!(home.join("notes.txt").exists() && home.join(".ssh/id_ed25519").exists());
        assert!(!home.join("new").exists() && !home.join(".ssh/authorized_keys").exists());
        // network = false: no IP socket of any kind; Unix sockets still work.
        let py = "import socket\nfor fam, kind in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET6, socket.SOCK_DGRAM)]:\n    try:\n        socket.socket(fam, kind); print('OPEN')\n    except OSError as e: print('denied', e.errno)\nsocket.socket(socket.AF_UNIX, socket.SOCK_STREAM); print('unix ok')";
        std::fs::write(work.join("net.py"), py.replace("\\n", "\n")).unwrap();
        let (code, out) = run_sandboxed(&policy, &format!("python3 {}/net.py", work.display()));
        assert_eq!(code, 0, "{out}");
        assert!(!out.contains("OPEN") && out.contains("denied 13") && out.contains("unix ok"), "{out}");
    }

    #[test]
    fn git_hooks_and_config_are_read_only_for_jobs_and_git_still_commits() {
        let namespaces = match mounts::support() {
            // Where a plain mount namespace works (root), the user-namespace way works too.
            mounts::GuardSupport::Available(mounts::Namespace::Mount) => {
                vec![mounts::Namespace::Mount, mounts::Namespace::User]
            }
            mounts::GuardSupport::Available(ns) => vec![*ns],
            other => panic!("this test needs a mount namespace; here: {other:?}"),
        };
        for ns in namespaces {
            git_guard_holds(ns);
        }
        // Without the guard the same disguised write goes through: the test bites.
        let dir = tempfile::tempdir().unwrap();
        let work = canonical(dir.path());
        std::fs::create_dir_all(work.join(".git/hooks")).unwrap();
        let policy = Policy {
            mode: SandboxMode::WorkspaceWrite,
            workspace: PathBuf::new(),
            network: true,
            proxy_only: false,
            proxy_port: None,
            writable_roots: vec![work.clone()],
            deny_read: vec![],
            deny_write: vec![],
            job_files: vec![],
            view: None,
            git_guard: None,
            git_start: Default::default(),
            allow_unix_sockets: vec![],
            limits: Default::default(),
        };
        let (code, out) =
            run_sandboxed(&policy, &format!("cd {} && p=.git/ho; echo x > ${{p}}oks/pre-commit", work.display()));
        assert_eq!(code, 0, "{out}");
        assert!(work.join(".git/hooks/pre-commit").exists());
    }

    #[test]
    fn permissions_say_whether_git_hooks_are_protected() {
        let mut policy = Policy {
            mode: SandboxMode::WorkspaceWrite,
            workspace: PathBuf::new(),
            network: true,
            proxy_only: false,
            proxy_port: None,
            writable_roots: vec![],
            deny_read: vec![],
            deny_write: vec![],
            job_files: vec![],
            view: None,
            git_guard: Some(mounts::Namespace::User),
            git_start: Default::default(),
            allow_unix_sockets: vec![],
            limits: Default::default(),
        };
        let ok = mounts::GuardSupport::Available(mounts::Namespace::User);
        assert_eq!(
            policy.describe_git_guard_with(&ok),
            "git: .git of the writable roots is read-only for commands but what git writes to commit \
             (objects, refs, logs, index, HEAD, ...); a planted commondir or .git file is moved aside"
        );
        policy.git_guard = None;
        let missing = mounts::GuardSupport::Unavailable { reason: "cannot create a mount namespace (EPERM)".into() };
        assert_eq!(
            policy.describe_git_guard_with(&missing),
            "git hooks: NOT protected from commands (cannot create a mount namespace (EPERM)); \
             write_file/edit_file still ask before writing there"
        );
    }

    fn git_guard_holds(ns: mounts::Namespace) {
        let dir = tempfile::tempdir().unwrap();
        let work = canonical(dir.path()).join("work");
        std::fs::create_dir_all(&work).unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git").args(args).current_dir(&work).output().unwrap();
            assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        git(&["init", "-q"]);
        std::fs::remove_dir_all(work.join(".git/hooks")).unwrap();
        let policy = Policy {
            mode: SandboxMode::WorkspaceWrite,
            workspace: PathBuf::new(),
            network: true,
            proxy_only: false,
            proxy_port: None,
            writable_roots: vec![work.clone()],
            deny_read: vec![],
            deny_write: vec![],
            job_files: vec![],
            view: None,
            git_guard: Some(ns),
            git_start: Default::default(),
            allow_unix_sockets: vec![],
            limits: Default::default(),
        };
        let w = work.display();
        let env = "export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t";
        // Git itself works: index.lock, objects and refs are writable.
        let (code, out) = run_sandboxed(
            &policy,
            &format!("{env}; cd {w} && echo hi > a.txt && git add a.txt && git commit -qm first && git log --oneline"),
        );
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("first"), "{out}");
        // The hooks directory was missing: it was created (read-only) rather than left for a job.
        assert!(work.join(".git/hooks").is_dir());
        for attack in [
            "sh -c 'p=.git/ho; echo x > ${p}oks/pre-commit'".to_string(),
            "git config core.hooksPath /tmp/x".to_string(),
            "git config core.fsmonitor 'touch /tmp/pwned'".to_string(),
            "echo '[core] hooksPath = /tmp' >> .git/config".to_string(),
            "cp /bin/true .git/hooks/post-checkout".to_string(),
            "python3 -c \"open('.git/hooks/pre-push','w').write('x')\"".to_string(),
            "mv .git/hooks .git/hooks.old".to_string(),
            "mv .git .git.old".to_string(),
            "umount .git/hooks".to_string(),
            "umount -l .git".to_string(),
            "mount -o remount,rw .git/hooks".to_string(),
        ] {
            let (code, out) = run_sandboxed(&policy, &format!("cd {w} && {attack}"));
            assert_ne!(code, 0, "{ns:?}: {attack} must fail: {out}");
        }
        let hooks: Vec<_> = std::fs::read_dir(work.join(".git/hooks")).unwrap().flatten().collect();
        assert!(hooks.is_empty(), "{hooks:?}");
        let config = std::fs::read_to_string(work.join(".git/config")).unwrap();
        assert!(!config.contains("hooksPath") && !config.contains("fsmonitor"), "{config}");
        assert!(work.join(".git/HEAD").exists() && !work.join(".git.old").exists());
        // Nothing leaked into talaria's own mount table.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains(&format!("{w}/.git")), "{mounts}");
    }
}
