//! Rewind (DESIGN §13): a snapshot of the session's workspace before each turn starts and
//! after it ends, in a store of talaria's own ([`git::GitStore`]); each turn's changed
//! paths are the difference between the two, whatever wrote them; what changed while no turn
//! ran is the user's. A rewind puts back the paths later turns changed, keeps the user's,
//! and is itself an entry of the list, so it can be rewound (undone) in turn.

pub mod cli;
pub mod git;
pub mod journal;
pub mod plan;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use git::{Change, ChangeKind, GitStore, RewindError, Skipped, Snapshot};
pub use journal::{Entry, EntryKind, Journal, Record, RewindMode};
pub use plan::{Action, Plan, Step};

/// A stable short name for a workspace path (FNV-1a: the same in every build).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// Where the store of `workspace` lives under talaria's data dir.
pub fn workspace_dir(data_dir: &Path, workspace: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let name: String = workspace
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .take(32)
                .collect()
        })
        .unwrap_or_default();
    data_dir.join("rewind").join(format!("{name}-{:016x}", fnv(workspace.as_os_str().as_bytes())))
}

/// The store of one workspace and its sessions' journals.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub store: GitStore,
    root: PathBuf,
}

impl Workspace {
    /// `data_dir` is talaria's (the parent of state.db); it is excluded if inside `workspace`.
    pub fn open(data_dir: &Path, workspace: &Path, max_file_bytes: u64) -> Result<Workspace, RewindError> {
        let root = workspace_dir(data_dir, workspace);
        let data = data_dir.canonicalize().unwrap_or_else(|_| data_dir.to_path_buf());
        let exclude: Vec<String> =
            data.strip_prefix(workspace).ok().map(|p| p.to_string_lossy().into_owned()).into_iter().collect();
        let store = GitStore::open(&root.join("git"), workspace, max_file_bytes, &exclude)?;
        Ok(Workspace { store, root })
    }

    pub fn journal(&self, session_id: &str) -> Journal {
        Journal::new(&self.root.join("sessions"), session_id)
    }
}

/// A session's entries with the workspace as it is now.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub entries: Vec<Entry>,
    pub now: String,
}

impl Timeline {
    /// Read the journal and take a snapshot of now.
    pub fn load(ws: &Workspace, journal: &Journal) -> Result<Timeline, RewindError> {
        let entries = journal::entries(&journal.load()?);
        let now = ws.store.snapshot()?.tree;
        Ok(Timeline { entries, now })
    }

    /// The workspace right after entry `i` (0-based): its end, or what came next.
    fn after(&self, i: usize) -> &str {
        match &self.entries[i].end {
            Some(end) => end,
            None => self.entries.get(i + 1).map_or(self.now.as_str(), |e| e.start.as_str()),
        }
    }

    /// The tree after entry `i` and before whatever came next (the user's stretch).
    fn until_next(&self, i: usize) -> &str {
        self.entries.get(i + 1).map_or(self.now.as_str(), |e| e.start.as_str())
    }

    /// What entry `i` (0-based) changed.
    pub fn changes(&self, ws: &Workspace, i: usize) -> Result<Vec<Change>, RewindError> {
        ws.store.changes(&self.entries[i].start, self.after(i))
    }

    /// What changed after entry `i` while no turn ran.
    pub fn user_changes(&self, ws: &Workspace, i: usize) -> Result<Vec<Change>, RewindError> {
        match &self.entries[i].end {
            Some(end) => ws.store.changes(end, self.until_next(i)),
            None => Ok(Vec::new()),
        }
    }

    /// The entry numbered `n` (from 1), or a message saying which numbers there are.
    pub fn index_of(&self, n: usize) -> Result<usize, RewindError> {
        if n >= 1 && n <= self.entries.len() {
            Ok(n - 1)
        } else if self.entries.is_empty() {
            Err(RewindError::Other("no turn of this session has a snapshot yet".into()))
        } else {
            Err(RewindError::Other(format!("no entry {n}: this session has 1 to {}", self.entries.len())))
        }
    }

    /// The code part of rewinding to before entry `n`.
    pub fn plan(&self, ws: &Workspace, n: usize, include_user: bool) -> Result<Plan, RewindError> {
        let i = self.index_of(n)?;
        let mut agent = BTreeSet::new();
        let mut user = BTreeSet::new();
        for k in i..self.entries.len() {
            agent.extend(self.changes(ws, k)?.into_iter().map(|c| c.path));
            user.extend(self.user_changes(ws, k)?.into_iter().map(|c| c.path));
        }
        let differs = ws.store.changes(&self.entries[i].start, &self.now)?;
        Ok(plan::plan(&differs, &agent, &user, include_user))
    }

    /// Carry out `plan` (the code part of a rewind to before `n`) and record it. Returns the
    /// tree after.
    pub fn apply(
        &self,
        ws: &Workspace,
        journal: &Journal,
        n: usize,
        mode: RewindMode,
        plan: &Plan,
    ) -> Result<String, RewindError> {
        let i = self.index_of(n)?;
        let paths: Vec<String> = plan.steps.iter().map(|s| s.path.clone()).collect();
        if mode.restores_code() {
            ws.store.restore(&self.entries[i].start, &paths)?;
        }
        let after = ws.store.snapshot()?.tree;
        let id = self.entries.iter().map(|e| e.id).max().unwrap_or(0) + 1;
        journal.append(&Record::Rewind {
            id,
            target: n,
            mode,
            before: self.now.clone(),
            after: after.clone(),
            at_ms: crate::engine::heartbeat::now_ms(),
        })?;
        Ok(after)
    }
}

/// One piece of store work, run on the rewinder's own thread.
type Job = Box<dyn FnOnce() + Send>;

/// The engine's side: snapshots before and after each turn, one at a time, off the loop, in
/// the order they were asked for. The order is taken when the work is handed over (a
/// synchronous send to the rewinder's one worker thread), not when a future is first polled:
/// a turn hands over its end snapshot before it reports its end, so whatever the engine does
/// on seeing the end (the next turn's snapshot, `/rewind`, the picker's points) comes after it.
#[derive(Debug)]
pub struct Rewinder {
    pub ws: Workspace,
    next_id: AtomicU64,
    queue: std::sync::Mutex<std::sync::mpsc::Sender<Job>>,
}

impl Rewinder {
    pub fn open(data_dir: &Path, workspace: &Path, max_file_bytes: u64) -> Result<Arc<Rewinder>, RewindError> {
        let ws = Workspace::open(data_dir, workspace, max_file_bytes)?;
        // Ids only need to be unique within a session's journal, across runs too.
        let first = crate::engine::heartbeat::now_ms().saturating_mul(1000);
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        // The worker ends when the rewinder (the only sender) is dropped.
        std::thread::Builder::new()
            .name("talaria-rewind".into())
            .spawn(move || {
                for job in rx {
                    // A job that panics loses its answer (its caller is told), not the worker.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .map_err(|e| RewindError::Other(format!("could not start the snapshot thread: {e}")))?;
        Ok(Arc::new(Rewinder { ws, next_id: AtomicU64::new(first), queue: std::sync::Mutex::new(tx) }))
    }

    /// Snapshot before a turn of `session_id`; returns its id and what was too large to keep.
    pub async fn turn_started(
        self: &Arc<Self>,
        session_id: &str,
        trigger: String,
        text: String,
        seq: i64,
    ) -> Result<(u64, Vec<Skipped>), RewindError> {
        let (id, done) = self.begin_turn(session_id, trigger, text, seq);
        done.await.map(|skipped| (id, skipped))
    }

    /// [`Rewinder::turn_started`] with its id and its place in the order taken at the call:
    /// the turn can hand over its end snapshot (which comes after this one) without waiting
    /// for this one to be done. The future says what was too large to keep.
    pub fn begin_turn(
        self: &Arc<Self>,
        session_id: &str,
        trigger: String,
        text: String,
        seq: i64,
    ) -> (u64, impl std::future::Future<Output = Result<Vec<Skipped>, RewindError>> + Send + 'static) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let done = self.with(session_id, move |ws, journal| {
            crate::paths::test_hold_point("before_snapshot");
            let snap = ws.store.snapshot()?;
            let first_line: String = text.lines().next().unwrap_or("").chars().take(200).collect();
            journal.append(&Record::Start {
                id,
                trigger,
                text: first_line,
                seq,
                tree: snap.tree,
                at_ms: crate::engine::heartbeat::now_ms(),
                skipped: snap.skipped.clone(),
            })?;
            Ok(snap.skipped)
        });
        (id, done)
    }

    /// Snapshot after turn `id`, in order from now on (this returns at once): `done` gets its
    /// number in the list and what it changed, on the worker, before any later work runs.
    pub fn turn_ended(
        self: &Arc<Self>,
        session_id: &str,
        id: u64,
        done: impl FnOnce(Result<(usize, Vec<Change>), RewindError>) + Send + 'static,
    ) {
        let me = self.clone();
        let journal = self.ws.journal(session_id);
        self.hand_over(Box::new(move || {
            crate::paths::test_hold_point("end_snapshot");
            done(end_snapshot(&me.ws, &journal, id))
        }));
    }

    /// Once every snapshot handed over before this call is done (the journal has its records).
    pub fn settled(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.hand_over(Box::new(move || {
            let _ = tx.send(());
        }));
        async move {
            let _ = rx.await;
        }
    }

    /// Run `f` on the store and `session_id`'s journal, with no other snapshot in between,
    /// after every piece of work handed over before this call (the place is taken here, at
    /// the call, not when the future is polled).
    pub fn with<T: Send + 'static>(
        self: &Arc<Self>,
        session_id: &str,
        f: impl FnOnce(&Workspace, &Journal) -> Result<T, RewindError> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<T, RewindError>> + Send + 'static {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let me = self.clone();
        let journal = self.ws.journal(session_id);
        self.hand_over(Box::new(move || {
            let _ = tx.send(f(&me.ws, &journal));
        }));
        async move {
            match rx.await {
                Ok(r) => r,
                Err(_) => Err(RewindError::Other("the snapshot task failed".into())),
            }
        }
    }

    fn hand_over(&self, job: Job) {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        // The worker lives as long as the rewinder; a failed send drops the job, and its
        // caller hears "the snapshot task failed".
        let _ = queue.send(job);
    }
}

/// The snapshot after turn `id` and its record; its number in the list and what it changed.
fn end_snapshot(ws: &Workspace, journal: &Journal, id: u64) -> Result<(usize, Vec<Change>), RewindError> {
    // A turn whose snapshot before failed (said then) gets no end record either.
    if !journal::entries(&journal.load()?).iter().any(|e| e.id == id) {
        return Err(RewindError::Other(format!("turn {id} has no snapshot before it")));
    }
    let tree = ws.store.snapshot()?.tree;
    journal.append(&Record::End { id, tree: tree.clone() })?;
    let entries = journal::entries(&journal.load()?);
    match entries.iter().rev().find(|e| e.id == id) {
        Some(e) => Ok((e.number, ws.store.changes(&e.start, &tree)?)),
        None => Ok((0, Vec::new())),
    }
}

/// A change as the protocol carries it.
pub fn changed_path(c: &Change) -> crate::protocol::rewind::ChangedPath {
    let kind = match c.kind {
        ChangeKind::Added => "added",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
    };
    crate::protocol::rewind::ChangedPath { path: c.path.clone(), kind: kind.into(), added: c.added, removed: c.removed }
}

impl Entry {
    /// How the picker and `talaria rewind list` name it.
    pub fn label(&self) -> String {
        match &self.kind {
            EntryKind::Turn { trigger, text } if trigger == "user" => text.clone(),
            EntryKind::Turn { trigger, text } => format!("[{trigger}] {text}"),
            EntryKind::Rewind { target, mode } => format!("[rewind] to before {target} ({})", mode.label()),
        }
    }
}

impl Timeline {
    /// Every entry with what it changed, oldest first.
    pub fn points(&self, ws: &Workspace) -> Result<Vec<crate::protocol::rewind::RewindPoint>, RewindError> {
        (0..self.entries.len())
            .map(|i| {
                let e = &self.entries[i];
                Ok(crate::protocol::rewind::RewindPoint {
                    number: e.number,
                    label: e.label(),
                    paths: self.changes(ws, i)?.iter().map(changed_path).collect(),
                    conversation: e.seq.is_some(),
                })
            })
            .collect()
    }

    /// What a rewind to before `n` would do, for the confirmation.
    pub fn preview(
        &self,
        ws: &Workspace,
        n: usize,
        mode: RewindMode,
        include_user: bool,
    ) -> Result<(Plan, crate::protocol::rewind::RewindPreview), RewindError> {
        let i = self.index_of(n)?;
        let plan = if mode.restores_code() { self.plan(ws, n, include_user)? } else { Plan::default() };
        let mut warnings = Vec::new();
        if mode.restores_conversation() && self.entries[i].seq.is_none() {
            warnings.push(format!("entry {n} is a rewind: only the code goes back (the conversation stays)"));
        }
        let steps = plan.steps.iter().map(|s| format!("{} {}", s.action.label(), s.path)).collect();
        let preview = crate::protocol::rewind::RewindPreview {
            number: n,
            mode: mode.as_str().to_string(),
            steps,
            kept: plan.kept.clone(),
            warnings,
            include_user,
        };
        Ok((plan, preview))
    }
}

/// `+3 −1` for a change, or `binary`.
pub fn counts(change: &Change) -> String {
    match (change.added, change.removed) {
        (Some(a), Some(r)) => format!("+{a} −{r}"),
        _ => "binary".to_string(),
    }
}

#[cfg(test)]
mod tests;
