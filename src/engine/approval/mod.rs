//! Approvals (DESIGN §6). Containment comes first (engine/sandbox); asking second:
//! `known_safe` is the allow-list of what never asks, `classify` keeps the hardline list
//! (refused in every mode) and names what a command looks like for the modal. Both are
//! pure; `Approver` performs the asking.

pub(crate) mod classify;
mod forward;
pub(crate) mod known_safe;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::config::{ApprovalMode, Config};
use crate::engine::sandbox::Policy;
use crate::engine::EventSink;
use crate::protocol::{Approval, AskGround, Event};

pub use classify::{classify_command, classify_write, normalise_command, Classification};
pub use known_safe::is_known_safe;

/// The answer to "may this run?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Run it. `note` (e.g. "approved by the user") goes into the tool result.
    Allowed { note: Option<String>, by: Provenance },
    /// Do not run it; `reason` goes into the tool result.
    Denied { reason: String },
}

/// Who let a command run. Contracts are types: code that must know whether the user said
/// "run it" just now (a stale interrupt must not kill it) matches on this, never on `note`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provenance {
    /// A rule: known safe, approvals off, the allowlist, a category approved earlier, `--yes`.
    Rule,
    /// The user's answer to this command's prompt.
    User,
}

/// How unanswerable prompts are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptPolicy {
    /// Ask the front end (TUI).
    Ask,
    /// Headless without --yes: deny what would need a prompt.
    DenyUnattended,
    /// Headless with --yes: allow what would need a prompt (never hardline).
    AllowUnattended,
}

#[derive(Clone)]
pub struct Approver {
    inner: Arc<Inner>,
}

struct Inner {
    /// `approvals.mode`, switched for the session by `/approvals` (or the editor).
    mode: Mutex<ApprovalMode>,
    policy: PromptPolicy,
    timeout: Duration,
    config_file: Option<PathBuf>,
    /// Rules the user gave "always" (the config's allowlist) and "this session", each
    /// key in its namespace ([`rule_key`]): a command named like an MCP tool is not it.
    allowlist: Mutex<HashSet<String>>,
    session_categories: Mutex<HashSet<String>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Approval>>>,
    next_id: AtomicU64,
    events: EventSink,
    /// The writable roots and protected paths file writes are judged against.
    sandbox: Mutex<Option<Policy>>,
}

impl Approver {
    pub fn new(config: &Config, policy: PromptPolicy, config_file: Option<PathBuf>, events: EventSink) -> Approver {
        Approver {
            inner: Arc::new(Inner {
                mode: Mutex::new(config.approvals.mode),
                policy,
                timeout: Duration::from_secs(config.approvals.timeout_s.max(1)),
                config_file,
                allowlist: Mutex::new(config.approvals.allowlist.iter().map(|c| key_of_config_entry(c)).collect()),
                session_categories: Mutex::new(HashSet::new()),
                pending: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
                events,
                sandbox: Mutex::new(None),
            }),
        }
    }

    /// What asks now: `approvals.mode`, or what `/approvals` switched this session to.
    pub(crate) fn mode(&self) -> ApprovalMode {
        *lock(&self.inner.mode)
    }

    /// `/approvals <mode>`: from the next check on. A question already asked stays asked.
    pub(crate) fn set_mode(&self, mode: ApprovalMode) {
        *lock(&self.inner.mode) = mode;
    }

    /// Judge file writes against the session's sandbox policy (set when the session starts;
    /// public for tests that need roots of their own).
    pub fn set_sandbox_policy(&self, policy: Policy) {
        *lock(&self.inner.sandbox) = Some(policy);
    }

    /// The session's policy, or one built from the defaults, the current directory and
    /// `$HOME` when none was set (library callers, tests).
    pub(crate) fn sandbox_policy(&self) -> Policy {
        if let Some(policy) = lock(&self.inner.sandbox).clone() {
            return policy;
        }
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let paths =
            crate::paths::Paths::from_env().unwrap_or_else(|_| crate::paths::Paths::under(Path::new("/nonexistent")));
        Policy::from_config(&crate::config::SandboxConfig::default(), &cwd, &paths, home.as_deref())
    }

    /// May `command` run? `sandboxed`: it will run inside an active kernel sandbox.
    /// Hardline commands are refused in every mode. A command outside the sandbox — asked
    /// for, or with no kernel sandbox at all — always asks (`off` aside): known safe decides
    /// only what runs inside without asking in `prompt` mode; outside, a read-only-looking
    /// command reads what the sandbox hides and runs what repositories configure.
    pub(crate) async fn check_command(&self, command: &str, sandboxed: bool, interrupt: &CancellationToken) -> Verdict {
        self.check_command_with(command, sandboxed, !sandboxed, interrupt).await
    }

    /// A command on a remote backend: talaria's sandbox does not reach it; what is not
    /// known safe asks.
    pub(crate) async fn check_remote_command(&self, command: &str, interrupt: &CancellationToken) -> Verdict {
        self.check_command_with(command, false, false, interrupt).await
    }

    async fn check_command_with(
        &self,
        command: &str,
        sandboxed: bool,
        outside_asks: bool,
        interrupt: &CancellationToken,
    ) -> Verdict {
        let looks_like = match classify_command(command) {
            Classification::Hardline { reason } => {
                return Verdict::Denied { reason: format!("refused: {reason} (this is never allowed)") }
            }
            Classification::Dangerous { reason, .. } => Some(reason),
            Classification::Safe => None,
        };
        let known_safe = is_known_safe(command);
        let asks = match self.mode() {
            ApprovalMode::Off => false,
            ApprovalMode::Auto => outside_asks || (!sandboxed && !known_safe),
            ApprovalMode::Prompt => outside_asks || !known_safe,
        };
        if !asks {
            return Verdict::Allowed { note: None, by: Provenance::Rule };
        }
        let program = command.split_whitespace().next().unwrap_or("command");
        let mut grounds = Vec::new();
        if !sandboxed {
            grounds.push(AskGround::OutsideSandbox);
        }
        if !known_safe {
            grounds.push(AskGround::NotKnownSafe);
        }
        if looks_like.is_some() {
            grounds.push(AskGround::LooksDangerous);
        }
        const FULL_RIGHTS: &str = "runs outside the sandbox with your full rights: it can read your credential \
                                   stores and run what a repository configures";
        let (category, reason) = match (sandboxed, looks_like) {
            (false, Some(r)) => (format!("{program} outside the sandbox"), format!("{FULL_RIGHTS}; {r}")),
            (false, None) => (format!("{program} outside the sandbox"), FULL_RIGHTS.to_string()),
            (true, Some(r)) => (program.to_string(), r),
            (true, None) => (program.to_string(), "not a known-safe read-only command".to_string()),
        };
        let ask = Ask { ns: Namespace::Command, category, reason, shown: command, entry: normalise_command(command) };
        self.ask_keyed(ask, grounds, true, interrupt).await
    }

    /// Is a write to `path` (resolved) inside the writable roots, under no protected path
    /// and not dangerous-looking — one that runs without asking, in the sandboxed helper?
    pub(crate) fn write_is_inside(&self, path: &Path, policy: &Policy) -> bool {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let safe = matches!(classify_write(path, home.as_deref()), Classification::Safe);
        safe && protected_write(path, policy, home.as_deref()).is_none()
            && policy.writable_roots.iter().any(|r| path.starts_with(r))
    }

    /// May a file tool write to `path` (already resolved through every symlink)? Inside
    /// the writable roots it just runs; outside them, or under a protected path, it asks.
    /// A protected path asks every time (no session or always rule covers it); a session
    /// rule for writes outside the roots covers the one directory it was given for.
    pub(crate) async fn check_write(&self, path: &Path, policy: &Policy, interrupt: &CancellationToken) -> Verdict {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let looks_like = match classify_write(path, home.as_deref()) {
            Classification::Hardline { reason } => {
                return Verdict::Denied { reason: format!("refused: {reason} (this is never allowed)") }
            }
            Classification::Dangerous { reason, .. } => Some(reason),
            Classification::Safe => None,
        };
        let protected = protected_write(path, policy, home.as_deref());
        let inside = policy.writable_roots.iter().any(|r| path.starts_with(r));
        if self.mode() == ApprovalMode::Off || (inside && protected.is_none() && looks_like.is_none()) {
            return Verdict::Allowed { note: None, by: Provenance::Rule };
        }
        let mut grounds = Vec::new();
        if !inside {
            grounds.push(AskGround::OutsideRoots);
        }
        if protected.is_some() {
            grounds.push(AskGround::ProtectedPath);
        }
        if looks_like.is_some() {
            grounds.push(AskGround::LooksDangerous);
        }
        let reason = match (&protected, looks_like) {
            (Some(p), Some(r)) => format!("{p}; {r}"),
            (Some(p), None) => p.clone(),
            (None, Some(r)) => r,
            (None, None) => "outside the writable roots".to_string(),
        };
        let dir = path.parent().unwrap_or(path);
        let what = format!("write {}", path.display());
        let ask = Ask {
            ns: Namespace::Write,
            category: format!("writes in {}", dir.display()),
            reason,
            shown: &what,
            entry: path.display().to_string(),
        };
        self.ask_keyed(ask, grounds, protected.is_none(), interrupt).await
    }

    /// `process write` to a job that runs outside the sandbox: each line is approved like
    /// a command. A sandboxed job's input is contained by its sandbox.
    pub(crate) async fn check_job_input(&self, line: &str, sandboxed: bool, interrupt: &CancellationToken) -> Verdict {
        self.check_command(line, sandboxed, interrupt).await
    }

    /// May the model call `tool` on MCP server `server`? Asks once per server and tool
    /// (once / this session / always / deny) unless approvals are off; `shown` is what the
    /// modal shows (`server › tool  args`). "Always" saves `mcp:<server>/<tool>`.
    pub(crate) async fn check_mcp(
        &self,
        server: &str,
        tool: &str,
        shown: &str,
        interrupt: &CancellationToken,
    ) -> Verdict {
        if self.mode() == ApprovalMode::Off {
            return Verdict::Allowed { note: None, by: Provenance::Rule };
        }
        let entry = format!("{server}/{tool}");
        let reason = format!("MCP tool '{tool}' of server '{server}' (not marked trust = true)");
        let ask = Ask { ns: Namespace::Mcp, category: entry.clone(), reason, shown, entry };
        self.ask_keyed(ask, vec![AskGround::UntrustedTool], true, interrupt).await
    }

    /// Ask about `ask.shown`. `rules`: a session or always rule may cover it (and the
    /// user's "this session"/"always" makes one); a protected path has none.
    async fn ask_keyed(
        &self,
        ask: Ask<'_>,
        grounds: Vec<AskGround>,
        rules: bool,
        interrupt: &CancellationToken,
    ) -> Verdict {
        let Ask { ns, category, reason, shown: command, entry } = ask;
        let allow_key = rule_key(ns, &entry);
        let session_key = rule_key(ns, &category);
        if rules && lock(&self.inner.allowlist).contains(&allow_key) {
            return Verdict::Allowed { note: Some("allowed by the approvals allowlist".into()), by: Provenance::Rule };
        }
        if rules && lock(&self.inner.session_categories).contains(&session_key) {
            return Verdict::Allowed {
                note: Some(format!("{category} approved for this session")),
                by: Provenance::Rule,
            };
        }
        match self.inner.policy {
            PromptPolicy::AllowUnattended => {
                return Verdict::Allowed { note: Some("approved by --yes".into()), by: Provenance::Rule };
            }
            PromptPolicy::DenyUnattended => {
                return Verdict::Denied {
                    reason: format!("needs approval ({reason}); run talaria exec with --yes to allow it"),
                };
            }
            PromptPolicy::Ask => {}
        }
        let answer = match self.ask_user(command, &reason, grounds, interrupt).await {
            Ok(answer) => answer,
            Err(reason) => return Verdict::Denied { reason },
        };
        match answer {
            Approval::Once => Verdict::Allowed { note: Some("approved by the user".into()), by: Provenance::User },
            Approval::Session | Approval::Always if !rules => Verdict::Allowed {
                note: Some("approved by the user for this write only (a protected path asks every time)".into()),
                by: Provenance::User,
            },
            Approval::Session => {
                lock(&self.inner.session_categories).insert(session_key);
                let note = Some(format!("approved by the user for this session ({category})"));
                Verdict::Allowed { note, by: Provenance::User }
            }
            Approval::Always => {
                lock(&self.inner.allowlist).insert(allow_key);
                if let Some(path) = &self.inner.config_file {
                    if let Err(e) = save_allowlist_entry(path, &config_entry(ns, &entry)) {
                        self.inner.events.send(Event::notice(
                            crate::protocol::NoticeLevel::Warn,
                            format!("could not save the approval to {}: {e}", path.display()),
                        ));
                    }
                }
                Verdict::Allowed { note: Some("approved by the user (always)".into()), by: Provenance::User }
            }
            Approval::Deny => Verdict::Denied { reason: "the user denied this command".into() },
        }
    }

    /// Put one question to the front end and wait (bounded by `approvals.timeout_s`); the
    /// error says why there is no answer.
    async fn ask_user(
        &self,
        shown: &str,
        reason: &str,
        grounds: Vec<AskGround>,
        interrupt: &CancellationToken,
    ) -> Result<Approval, String> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.pending).insert(id, tx);
        self.inner.events.send(Event::ApprovalNeeded {
            id,
            command: shown.to_string(),
            reason: reason.to_string(),
            grounds,
            from: None,
        });
        tokio::select! {
            answer = rx => Ok(answer.unwrap_or(Approval::Deny)),
            _ = tokio::time::sleep(self.inner.timeout) => {
                lock(&self.inner.pending).remove(&id);
                Err(format!("approval timed out after {} s", self.inner.timeout.as_secs()))
            }
            _ = interrupt.cancelled() => {
                lock(&self.inner.pending).remove(&id);
                Err("the user interrupted the turn".into())
            }
        }
    }

    /// Deliver the user's answer (from `Op::Approve`). Unknown ids are ignored.
    pub fn answer(&self, id: u64, decision: Approval) {
        if let Some(tx) = lock(&self.inner.pending).remove(&id) {
            let _ = tx.send(decision);
        }
    }

    /// Deny everything still waiting (interrupt, shutdown).
    pub(crate) fn deny_all(&self) {
        for (_, tx) in lock(&self.inner.pending).drain() {
            let _ = tx.send(Approval::Deny);
        }
    }
}

use crate::util::lock;

/// The network proxy's questions (DESIGN §6b): the approval modal, or `exec`'s rule —
/// without `--yes` a host not listed is refused. Approvals off asks nothing.
#[async_trait::async_trait]
impl crate::engine::netproxy::Gate for Approver {
    async fn ask(&self, question: crate::engine::netproxy::Question) -> crate::engine::netproxy::Answer {
        use crate::engine::netproxy::Answer;
        if self.mode() == ApprovalMode::Off {
            return Answer::Once;
        }
        match self.inner.policy {
            PromptPolicy::AllowUnattended => return Answer::Once,
            PromptPolicy::DenyUnattended => {
                return Answer::Deny(
                    "talaria exec asks nobody, and the host is not in sandbox.network_allow (--yes allows what \
                     would ask)"
                        .into(),
                )
            }
            PromptPolicy::Ask => {}
        }
        let reason = "a command wants a host not in sandbox.network_allow";
        match self.ask_user(&question.shown(), reason, vec![AskGround::Network], &CancellationToken::new()).await {
            Ok(Approval::Once) => Answer::Once,
            Ok(Approval::Session) => Answer::Session,
            Ok(Approval::Always) => Answer::Always,
            Ok(Approval::Deny) => Answer::Deny("the user denied it".into()),
            Err(why) => Answer::Deny(why),
        }
    }
}

/// Which kind of thing a rule allows: rules of one never match another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespace {
    Command,
    Mcp,
    Write,
}

/// One question: its namespace, the session category an answer "this session" covers,
/// why it asks, what the prompt shows, and its always-rule entry.
struct Ask<'a> {
    ns: Namespace,
    category: String,
    reason: String,
    shown: &'a str,
    entry: String,
}

/// The in-memory key of a rule: its namespace, then the entry.
fn rule_key(ns: Namespace, entry: &str) -> String {
    format!("{ns:?}\u{0}{entry}")
}

/// How an always rule is saved in `approvals.allowlist`: commands as typed (normalised),
/// MCP tools `mcp:<server>/<tool>`, file writes `write:<path>` — the old entries read back
/// the same.
fn config_entry(ns: Namespace, entry: &str) -> String {
    match ns {
        Namespace::Command => entry.to_string(),
        Namespace::Mcp => format!("mcp:{entry}"),
        Namespace::Write => format!("write:{entry}"),
    }
}

fn key_of_config_entry(saved: &str) -> String {
    if let Some(rest) = saved.strip_prefix("mcp:") {
        rule_key(Namespace::Mcp, rest)
    } else if let Some(rest) = saved.strip_prefix("write:") {
        rule_key(Namespace::Write, rest)
    } else {
        rule_key(Namespace::Command, &normalise_command(saved))
    }
}

/// Start-up files of the shells, under the home: what they hold runs at every login.
const SHELL_STARTUP: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".config/fish",
    ".kshrc",
    ".cshrc",
    ".tcshrc",
];

/// Why a write to `path` (resolved) is protected — it asks every time, whatever rules say —
/// or None: credential stores, talaria's config and state, `sandbox.deny_read` (all in
/// `deny_write`), shell start-up files and anything inside a `.git` directory.
fn protected_write(path: &Path, policy: &Policy, home: Option<&Path>) -> Option<String> {
    let protected = |what: &str| Some(format!("{} is {what}, so each write there asks", path.display()));
    if path.components().any(|c| c.as_os_str() == ".git") {
        return protected("inside a .git directory (hooks and config run code on your next git command)");
    }
    if let Some(home) = home.map(crate::engine::sandbox::canonical) {
        if SHELL_STARTUP.iter().any(|f| path.starts_with(home.join(f))) {
            return protected("a shell start-up file (it runs at every login)");
        }
    }
    if policy.deny_write.iter().any(|d| path.starts_with(d)) {
        return protected(
            "a protected path (a credential store, talaria's own config or state, or under sandbox.deny_read)",
        );
    }
    None
}

/// Append `command` to `approvals.allowlist` in the user's config, keeping its comments.
pub(crate) fn save_allowlist_entry(path: &Path, command: &str) -> anyhow::Result<()> {
    crate::config_edit::edit(path, |doc| {
        let approvals = doc.entry("approvals").or_insert(toml_edit::table());
        let table = approvals.as_table_mut().ok_or_else(|| anyhow::anyhow!("[approvals] is not a table"))?;
        let list = table.entry("allowlist").or_insert(toml_edit::value(toml_edit::Array::new()));
        let array = list.as_array_mut().ok_or_else(|| anyhow::anyhow!("approvals.allowlist is not an array"))?;
        if !array.iter().any(|v| v.as_str() == Some(command)) {
            array.push(command);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approver(allowlist: &[&str], mode: ApprovalMode) -> Approver {
        let mut config = Config::default();
        config.approvals.allowlist = allowlist.iter().map(|s| s.to_string()).collect();
        config.approvals.mode = mode;
        let (events, _rx) = EventSink::channel();
        Approver::new(&config, PromptPolicy::DenyUnattended, None, events)
    }

    fn allowed(v: &Verdict) -> bool {
        matches!(v, Verdict::Allowed { .. })
    }

    /// An "always" for MCP tool `fs/write` (saved as `mcp:fs/write`, the old form) allows
    /// that tool and never a command of the same name; command rules never allow a tool.
    #[tokio::test]
    async fn mcp_and_command_rules_live_in_separate_namespaces() {
        let stop = CancellationToken::new();
        let a = approver(&["mcp:fs/write", "make deploy", "write:/srv/notes.md"], ApprovalMode::Prompt);
        assert!(allowed(&a.check_mcp("fs", "write", "fs › write", &stop).await));
        assert!(!allowed(&a.check_command("mcp:fs/write", true, &stop).await));
        assert!(!allowed(&a.check_command("./mcp:fs/write", true, &stop).await));
        assert!(allowed(&a.check_command("make  deploy", true, &stop).await));
        let b = approver(&["fs/write", "make deploy"], ApprovalMode::Prompt);
        assert!(!allowed(&b.check_mcp("fs", "write", "fs › write", &stop).await));
        assert!(!allowed(&a.check_command("write:/srv/notes.md", true, &stop).await));
        assert_eq!(key_of_config_entry("mcp:fs/write"), rule_key(Namespace::Mcp, "fs/write"));
        assert_eq!(config_entry(Namespace::Write, "/a b"), "write:/a b");
    }

    /// Outside an active sandbox every command asks, known safe or not, in auto and
    /// prompt mode; inside, known safe decides only in prompt mode.
    #[tokio::test]
    async fn outside_the_sandbox_always_asks() {
        let stop = CancellationToken::new();
        for mode in [ApprovalMode::Auto, ApprovalMode::Prompt] {
            let a = approver(&[], mode);
            a.set_sandbox_policy(Policy::from_config(
                &crate::config::SandboxConfig::default(),
                Path::new("/nonexistent/work"),
                &crate::paths::Paths::under(Path::new("/nonexistent/talaria")),
                None,
            ));
            for command in ["ls", "cat notes.txt", "git status", "grep -r x ."] {
                match a.check_command(command, false, &stop).await {
                    Verdict::Denied { reason } => assert!(reason.contains("full rights"), "{reason}"),
                    other => panic!("{mode:?}: {command} outside the sandbox: {other:?}"),
                }
                assert!(allowed(&a.check_command(command, true, &stop).await), "{mode:?}: {command} inside");
            }
            let inside = a.check_command("sort -S 1 --com=sh notes.txt", true, &stop).await;
            assert_eq!(allowed(&inside), mode == ApprovalMode::Auto, "{mode:?}: {inside:?}");
        }
        let off = approver(&[], ApprovalMode::Off);
        assert!(allowed(&off.check_command("cat ~/.netrc", false, &stop).await));
    }

    #[test]
    fn allowlist_entry_is_appended_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        save_allowlist_entry(&path, "git push --force").unwrap();
        save_allowlist_entry(&path, "git push --force").unwrap();
        let config = crate::config::Config::load(&path).unwrap();
        assert_eq!(config.approvals.allowlist, vec!["git push --force".to_string()]);
    }
}
