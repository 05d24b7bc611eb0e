//! `/rewind` and `/diff` in the engine (DESIGN §13): the store work runs on a blocking
//! thread through the session's [`Rewinder`]; the conversation part goes through the store.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Engine;
use crate::engine::llm::RequestSent;
use crate::engine::rewind::{changed_path, RewindError, Rewinder, Timeline};
use crate::engine::scheduler::Input;
use crate::engine::turn::{TurnControl, TurnEnv};
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

/// Where the turn starts in the conversation (its first message's seq). The store is asked
/// when this is called (it answers in order), so call it before the turn stores anything;
/// the answer may be awaited later. None when rewind is off or the store did not answer (said).
pub(super) fn turn_seq(
    rewind: Option<&Arc<Rewinder>>,
    env: &TurnEnv,
) -> impl std::future::Future<Output = Option<i64>> + Send + 'static {
    let asked = rewind.map(|_| env.store.next_seq(&env.session_id));
    async move {
        match asked?.await {
            Ok(seq) => Some(seq),
            Err(e) => {
                tracing::warn!(error = %e, "no rewind snapshot: the store did not answer");
                None
            }
        }
    }
}

/// The snapshot before a model turn, on a task of its own that starts its git work once
/// the turn's first model request is on the wire (or the turn ended without one): Enter ->
/// request waits for no git and shares the CPU with none. The turn's tools wait for it.
pub(super) struct BeforeTurn {
    sent: RequestSent,
    /// The snapshot's id once it is handed over (None: rewind could not place it).
    id: tokio::sync::oneshot::Receiver<Option<u64>>,
}

impl BeforeTurn {
    /// Set up the snapshot before the turn `control` runs (None when rewind is off). Its
    /// place in the conversation is asked of the store now, before the turn stores anything.
    pub(super) fn start(
        rewind: Option<&Arc<Rewinder>>,
        env: &TurnEnv,
        control: &mut TurnControl,
        trigger: &'static str,
        label: String,
    ) -> Option<BeforeTurn> {
        let rewind = rewind?.clone();
        let seq = turn_seq(Some(&rewind), env);
        let (saved_tx, saved) = tokio::sync::watch::channel(false);
        control.tools_wait_for(saved);
        let (sent, request_out) = RequestSent::new();
        control.on_first_request(sent.clone());
        let (id_tx, id) = tokio::sync::oneshot::channel();
        let env = env.clone();
        tokio::spawn(async move {
            let seq = seq.await;
            let _ = request_out.await;
            tracing::trace!(target: "enter_request", "snapshot: starting");
            match seq {
                Some(seq) => {
                    let (snap, done) = begin_before(&rewind, &env, trigger, label, seq);
                    let _ = id_tx.send(Some(snap));
                    done.await;
                }
                None => {
                    let _ = id_tx.send(None);
                }
            }
            let _ = saved_tx.send(true);
        });
        Some(BeforeTurn { sent, id })
    }

    /// After the turn: the snapshot's id (it is handed over now if no request went out).
    /// Not its end: the turn's end snapshot is handed over after it and runs in order, so a
    /// turn's end never waits for git (a first snapshot of a big workspace takes seconds).
    pub(super) async fn taken(self) -> Option<u64> {
        self.sent.close();
        self.id.await.ok().flatten()
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
    let (id, done) = begin_before(rewind, env, trigger, label, seq);
    done.await.then_some(id)
}

/// Hand over the snapshot before a turn: its id now, and a future that says (and tells the
/// user about what was left out or went wrong) whether it was taken.
fn begin_before(
    rewind: &Arc<Rewinder>,
    env: &TurnEnv,
    trigger: &str,
    label: String,
    seq: i64,
) -> (u64, impl std::future::Future<Output = bool> + Send + 'static) {
    let (id, done) = rewind.begin_turn(&env.session_id, trigger.to_string(), label, seq);
    let events = env.events.clone();
    let reported = async move {
        match done.await {
            Ok(skipped) => {
                if !skipped.is_empty() {
                    let list: Vec<String> =
                        skipped.iter().map(|s| format!("{} ({} MB)", s.path, s.bytes / (1024 * 1024))).collect();
                    events.send(Event::notice(
                        NoticeLevel::Info,
                        format!("rewind: not kept (over rewind.max_file_bytes): {}", list.join(", ")),
                    ));
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "no rewind snapshot");
                events.send(Event::notice(NoticeLevel::Warn, format!("rewind: no snapshot before this turn: {e}")));
                false
            }
        }
    };
    (id, reported)
}

/// The remote backends the session's tools ran on, from their results (`"backend":
/// "ssh:box"`; local ones say `local` or nothing), so a resumed session knows it too.
fn hosts_in(history: &[crate::engine::llm::ChatMessage]) -> BTreeSet<String> {
    history
        .iter()
        .filter(|m| m.role == crate::engine::llm::Role::Tool)
        .filter_map(|m| m.content.as_deref())
        .filter(|c| c.contains("\"backend\""))
        .filter_map(|c| serde_json::from_str::<serde_json::Value>(c).ok())
        .filter_map(|v| v.get("backend").and_then(|b| b.as_str()).map(String::from))
        .filter(|b| b != "local")
        .collect()
}

/// What `/rewind` says when commands ran on another host: plainly, they are not covered.
fn remote_warning(hosts: &BTreeSet<String>) -> String {
    let list: Vec<&str> = hosts.iter().map(String::as_str).collect();
    format!(
        "this session ran commands on {}: rewind does not cover remote backends — only this machine's files are snapshotted and put back; what changed there stays as it is",
        list.join(", ")
    )
}

/// A diff longer than this is cut (at a line) before it reaches a front end.
const DIFF_MAX_BYTES: usize = 4 << 20;

/// `text` cut to [`DIFF_MAX_BYTES`], saying so at the end.
fn cap_diff(mut text: String) -> String {
    if text.len() <= DIFF_MAX_BYTES {
        return text;
    }
    let total = text.len();
    let cut = text[..DIFF_MAX_BYTES].rfind('\n').map_or(0, |i| i + 1);
    text.truncate(cut);
    text.push_str(&format!(
        "… the diff goes on: {} KB of {} KB shown (`talaria rewind list` names every path)\n",
        cut >> 10,
        total.div_ceil(1 << 10)
    ));
    text
}

/// The snapshot after a turn, and what it changed for the front ends: handed over to the
/// rewinder now, so it comes before anything asked of it later (the next turn's snapshot, a
/// `/rewind`), and taken off the turn, whose end the engine sees without waiting for it.
/// `TurnChanges` is sent from the snapshot's own step, so a front end hears it before
/// [`Rewinder::settled`] returns (shutdown waits for that).
pub(super) fn after_turn(rewind: Option<&Arc<Rewinder>>, env: &TurnEnv, id: Option<u64>) {
    let (Some(rewind), Some(id)) = (rewind, id) else { return };
    let events = env.events.clone();
    rewind.turn_ended(&env.session_id, id, move |ended| match ended {
        Ok((turn, changes)) => {
            events.send(Event::TurnChanges { turn, paths: changes.iter().map(changed_path).collect() })
        }
        Err(e) => tracing::warn!(error = %e, "no rewind snapshot after the turn"),
    });
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
        let backends = self.env.jobs.backends();
        let mut hosts = hosts_in(&self.history);
        hosts.extend(backends.remotes_used());
        let current = backends.current();
        if current.is_remote() {
            hosts.insert(current.label());
        }
        if !hosts.is_empty() {
            warnings.push(remote_warning(&hosts));
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
                    DiffTarget::Session => (
                        format!("the whole session (turns 1–{})", tl.entries.len()),
                        tl.entries[0].start.clone(),
                        tl.now.clone(),
                    ),
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
                        (format!("turn {} · {} · {}", e.number, e.label(), what.join(", ")), e.start.clone(), to)
                    }
                };
                Ok((title, ws.store.diff(&from, &to, &[])?))
            })
            .await;
        match answer {
            Ok((title, text)) => {
                let text = if text.is_empty() { "no file changed".to_string() } else { cap_diff(text) };
                self.events().send(Event::Diff { title, text });
            }
            Err(e) => self.notice(NoticeLevel::Error, format!("diff: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(content: &str) -> crate::engine::llm::ChatMessage {
        crate::engine::llm::ChatMessage::tool("c1", content)
    }

    #[test]
    fn the_hosts_a_session_ran_commands_on_come_from_its_tool_results() {
        let history = vec![
            tool(r#"{"output":"x","exit_code":0,"backend":"local"}"#),
            tool(r#"{"output":"x","exit_code":0,"backend":"ssh:box"}"#),
            tool(r#"{"output":"Background process started","session_id":"job_1","backend":"docker:dev"}"#),
            tool(r#"{"output":"the text \"backend\": \"ssh:fake\" in output","exit_code":0}"#),
            tool("not json"),
        ];
        let hosts = hosts_in(&history);
        assert_eq!(hosts.iter().map(String::as_str).collect::<Vec<_>>(), ["docker:dev", "ssh:box"]);
        let said = remote_warning(&hosts);
        assert!(
            said.contains("ran commands on docker:dev, ssh:box") && said.contains("does not cover remote"),
            "{said}"
        );
    }

    #[test]
    fn a_huge_diff_is_cut_at_a_line_and_says_so() {
        let line = "+".to_string() + &"x".repeat(99) + "\n";
        let text = line.repeat(DIFF_MAX_BYTES / 100 + 10);
        let cut = cap_diff(text.clone());
        assert!(cut.len() < DIFF_MAX_BYTES + 200);
        let (kept, said) = cut.rsplit_once('\n').map(|(k, _)| k.rsplit_once('\n').unwrap()).unwrap();
        assert!(kept.lines().all(|l| l == line.trim_end()), "whole lines only");
        assert!(said.starts_with("… the diff goes on: 4095 KB of 4138 KB shown"), "{said}");
        assert_eq!(cap_diff("+a\n".into()), "+a\n");
    }
}
