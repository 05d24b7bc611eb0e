//! `/rewind` and `/diff` in the engine (DESIGN §13): the store work runs on a blocking
//! thread through the session's [`Rewinder`]; the conversation part goes through the store.

use std::sync::Arc;

use super::Engine;
use crate::engine::rewind::{changed_path, RewindError, Rewinder, Timeline};
use crate::engine::scheduler::Input;
use crate::engine::turn::TurnEnv;
use crate::protocol::rewind::{DiffTarget, RewindCmd};
use crate::protocol::{Event, NoticeLevel};

/// The snapshot before a turn (on the turn's own task: the engine loop never waits for it,
/// and the turn's tools start only after it). None when rewind is off or it failed (said).
pub(super) async fn before_turn(
    rewind: Option<&Arc<Rewinder>>,
    env: &TurnEnv,
    trigger: &str,
    label: String,
) -> Option<u64> {
    let seq = turn_seq(rewind, env).await?;
    snapshot_before(rewind, env, trigger, label, seq).await
}

/// Where the turn starts in the conversation (its first message's seq), read before the
/// turn stores anything. None when rewind is off or the store did not answer (said).
pub(super) async fn turn_seq(rewind: Option<&Arc<Rewinder>>, env: &TurnEnv) -> Option<i64> {
    rewind?;
    match env.store.next_seq(&env.session_id).await {
        Ok(seq) => Some(seq),
        Err(e) => {
            tracing::warn!(error = %e, "no rewind snapshot: the store did not answer");
            None
        }
    }
}

/// The snapshot of the workspace before a turn that starts at `seq`.
pub(super) async fn snapshot_before(
    rewind: Option<&Arc<Rewinder>>,
    env: &TurnEnv,
    trigger: &str,
    label: String,
    seq: i64,
) -> Option<u64> {
    let rewind = rewind?;
    match rewind.turn_started(&env.session_id, trigger.to_string(), label, seq).await {
        Ok((id, skipped)) => {
            if !skipped.is_empty() {
                let list: Vec<String> =
                    skipped.iter().map(|s| format!("{} ({} MB)", s.path, s.bytes / (1024 * 1024))).collect();
                env.events.send(Event::notice(
                    NoticeLevel::Info,
                    format!("rewind: not kept (over rewind.max_file_bytes): {}", list.join(", ")),
                ));
            }
            Some(id)
        }
        Err(e) => {
            tracing::warn!(error = %e, "no rewind snapshot");
            env.events.send(Event::notice(NoticeLevel::Warn, format!("rewind: no snapshot before this turn: {e}")));
            None
        }
    }
}

/// The snapshot after a turn, and what it changed for the front ends.
pub(super) async fn after_turn(rewind: Option<&Arc<Rewinder>>, env: &TurnEnv, id: Option<u64>) {
    let (Some(rewind), Some(id)) = (rewind, id) else { return };
    match rewind.turn_ended(&env.session_id, id).await {
        Ok((turn, changes)) => {
            env.events.send(Event::TurnChanges { turn, paths: changes.iter().map(changed_path).collect() })
        }
        Err(e) => tracing::warn!(error = %e, "no rewind snapshot after the turn"),
    }
}

impl Engine {
    fn rewinder(&self) -> Option<Arc<Rewinder>> {
        if self.rewind.is_none() {
            self.notice(
                NoticeLevel::Warn,
                "rewind is off for this session (rewind.enabled, or git not found: see the log)",
            );
        }
        self.rewind.clone()
    }

    /// What to say before any rewind: jobs still writing, commands on another host.
    async fn rewind_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let running: Vec<String> =
            self.env.jobs.list().await.into_iter().filter(|j| j.status.is_running()).map(|j| j.id).collect();
        if !running.is_empty() {
            warnings.push(format!(
                "{} still running: what it writes from now on is not undone, and counts to the turn that is running when it does",
                running.join(", ")
            ));
        }
        if let Some(remote) = self.env.jobs.backends().status_label() {
            warnings.push(format!("commands run on {remote}: rewind covers only this machine's files"));
        }
        warnings
    }

    pub(super) async fn rewind_command(&mut self, cmd: RewindCmd) -> Vec<Input> {
        let Some(rewinder) = self.rewinder() else { return Vec::new() };
        let warnings = self.rewind_warnings().await;
        let Some(n) = cmd.target else {
            match rewinder.with(&self.env.session_id, |ws, j| Timeline::load(ws, j)?.points(ws)).await {
                Ok(mut points) => {
                    points.reverse();
                    self.events().send(Event::RewindPoints { points, warnings });
                }
                Err(e) => self.notice(NoticeLevel::Error, format!("rewind: {e}")),
            }
            return Vec::new();
        };
        let (mode, include_user) = (cmd.mode, cmd.include_user);
        if !cmd.yes {
            match rewinder
                .with(&self.env.session_id, move |ws, j| Timeline::load(ws, j)?.preview(ws, n, mode, include_user))
                .await
            {
                Ok((_, mut preview)) => {
                    preview.warnings.splice(0..0, warnings);
                    self.events().send(Event::RewindPreview(preview));
                }
                Err(e) => self.notice(NoticeLevel::Error, format!("rewind: {e}")),
            }
            return Vec::new();
        }
        let done = rewinder
            .with(&self.env.session_id, move |ws, j| {
                let tl = Timeline::load(ws, j)?;
                let (plan, _) = tl.preview(ws, n, mode, include_user)?;
                let seq = tl.entries[tl.index_of(n)?].seq;
                if mode.restores_code() || seq.is_some() {
                    tl.apply(ws, j, n, mode, &plan)?;
                }
                Ok::<_, RewindError>((plan, seq))
            })
            .await;
        let (plan, seq) = match done {
            Ok(done) => done,
            Err(e) => {
                self.notice(NoticeLevel::Error, format!("rewind: {e}"));
                return Vec::new();
            }
        };
        let mut said = Vec::new();
        if mode.restores_code() {
            said.push(format!("put back {} path{}", plan.steps.len(), if plan.steps.len() == 1 { "" } else { "s" }));
            if !plan.kept.is_empty() {
                said.push(format!("kept yours: {}", plan.kept.join(", ")));
            }
        }
        let mut inputs = Vec::new();
        if let (true, Some(seq)) = (mode.restores_conversation(), seq) {
            match self.env.store.deactivate_from(&self.env.session_id, seq).await {
                Ok(text) => {
                    match self.load_session().await {
                        Ok(loaded) => inputs = loaded,
                        Err(e) => self.notice(NoticeLevel::Error, format!("could not reload the session: {e}")),
                    }
                    if let Some(text) = text {
                        self.events().send(Event::RestoreInput { text });
                        said.push("the conversation is back to before it; its message is in the input".into());
                    }
                }
                Err(e) => self.notice(NoticeLevel::Error, format!("rewind of the conversation: {e}")),
            }
        }
        self.notice(
            NoticeLevel::Info,
            format!("rewound to before {n}: {} (/rewind lists this rewind too: it can be undone)", said.join("; ")),
        );
        inputs
    }

    pub(super) async fn diff_command(&mut self, target: DiffTarget) {
        let Some(rewinder) = self.rewinder() else { return };
        let answer = rewinder
            .with(&self.env.session_id, move |ws, j| {
                let tl = Timeline::load(ws, j)?;
                if tl.entries.is_empty() {
                    return Err(RewindError::Other("no turn of this session has a snapshot yet".into()));
                }
                let (title, from, to) = match target {
                    DiffTarget::Session => {
                        ("the whole session".to_string(), tl.entries[0].start.clone(), tl.now.clone())
                    }
                    DiffTarget::Last | DiffTarget::Turn(_) => {
                        let i = match target {
                            DiffTarget::Turn(n) => tl.index_of(n)?,
                            _ => tl.entries.len() - 1,
                        };
                        let e = &tl.entries[i];
                        let changes = tl.changes(ws, i)?;
                        let to = e
                            .end
                            .clone()
                            .unwrap_or_else(|| tl.entries.get(i + 1).map_or(tl.now.clone(), |n| n.start.clone()));
                        let what: Vec<String> = changes.iter().map(|c| changed_path(c).line()).collect();
                        (format!("{} {}: {}", e.number, e.label(), what.join(", ")), e.start.clone(), to)
                    }
                };
                Ok((title, ws.store.diff(&from, &to, &[])?))
            })
            .await;
        match answer {
            Ok((title, text)) => {
                let text = if text.is_empty() { "no file changed".to_string() } else { text };
                self.events().send(Event::Diff { title, text });
            }
            Err(e) => self.notice(NoticeLevel::Error, format!("diff: {e}")),
        }
    }
}
