//! The engine's effects for standing work: heartbeats, goals with gates and a judge,
//! the turn-liveness watchdog, and the end of a `/compact`. The decisions are made by the
//! pure state machines in `heartbeat` and `goal`; this file only performs their effects.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Engine;
use crate::engine::activity;
use crate::engine::compaction::Compacted;
use crate::engine::goal::{self, GateOutcome, GoalEffect, GoalMachine};
use crate::engine::heartbeat::{self, Heartbeat};
use crate::engine::llm::{ChatMessage, ChatRequest};
use crate::engine::scheduler::{self, Input, TurnInput};
use crate::engine::turn::TurnControl;
use crate::protocol::commands::HeartbeatCmd;
use crate::protocol::{Event, NoticeLevel, Origin, TurnTrigger};

/// Results of work done at a goal's turn boundary, coming back to the engine loop.
pub(crate) enum BoundaryResult {
    Fingerprint(Option<String>),
    Gate { idx: usize, outcome: GateOutcome },
    Judge(Result<String, String>),
}

/// Gate runs and judge calls in flight: they run as tasks so the engine keeps handling
/// ops (gate edits, interrupts) meanwhile.
pub(crate) struct Boundary {
    tx: mpsc::UnboundedSender<BoundaryResult>,
    pub(crate) results: mpsc::UnboundedReceiver<BoundaryResult>,
    cancel: CancellationToken,
}

impl Boundary {
    pub(crate) fn new() -> Boundary {
        let (tx, results) = mpsc::unbounded_channel();
        Boundary { tx, results, cancel: CancellationToken::new() }
    }

    /// Stop whatever runs (a gate is killed); later results are ignored by the machine.
    pub(crate) fn cancel(&mut self) {
        self.cancel.cancel();
        self.cancel = CancellationToken::new();
    }
}

/// Sleep until a unix time in ms, or forever when there is none.
pub(crate) async fn sleep_until_ms(at: Option<u64>) {
    match at {
        Some(at) => {
            let now = heartbeat::now_ms();
            tokio::time::sleep(Duration::from_millis(at.saturating_sub(now))).await
        }
        None => std::future::pending().await,
    }
}

impl Engine {
    /// When the engine must wake by itself: a heartbeat falling due, or its status text
    /// changing (so the status line is redrawn only when its text changes).
    pub(super) fn next_wake_ms(&self) -> Option<u64> {
        let now = heartbeat::now_ms();
        // Idle job notices waiting out their window.
        let notices =
            self.scheduler.job_notices_due_in_ms(self.env.jobs.notice_wait_ms(&self.env.session_id)).map(|ms| now + ms);
        let beat = self.heartbeat_wake_ms(now);
        match (notices, beat) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn heartbeat_wake_ms(&self, now: u64) -> Option<u64> {
        let hb = self.heartbeat.as_ref()?;
        // A heartbeat already due that cannot fire yet (busy, paused) needs no timer: the
        // loop tries again after the event that ends the wait. Waking for it would spin.
        let idle = self.scheduler.idle();
        let due = hb.next_due_at().filter(|&d| d > now || idle).map(|d| d.max(now));
        let change = hb.next_change_at(now);
        match (due, change) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The scheduler chose the heartbeat: record the fire; its turn is the answer.
    pub(super) async fn fire_heartbeat(&mut self) -> Vec<Input> {
        let now = heartbeat::now_ms();
        let Some(hb) = self.heartbeat.as_mut() else { return Vec::new() };
        let text = hb.fire(now);
        let (json, instruction) = (hb.to_json(), hb.prompt.clone());
        let _ = self.env.store.meta_set(&heartbeat::state_key(&self.env.session_id), &json).await;
        self.send_status();
        let input = TurnInput::injected(text, instruction, Origin::Heartbeat);
        vec![Input::Run { input, trigger: TurnTrigger::Heartbeat }]
    }

    pub(super) async fn heartbeat_command(&mut self, cmd: &HeartbeatCmd) {
        let now = heartbeat::now_ms();
        if *cmd == HeartbeatCmd::Status {
            let heartbeat = self.heartbeat.as_ref().map(|h| h.info(now));
            return self.events().send(Event::HeartbeatStatus { heartbeat });
        }
        let reply = heartbeat::apply(self.heartbeat.as_ref(), cmd, now, heartbeat::local_utc_offset_s(now));
        let key = heartbeat::state_key(&self.env.session_id);
        if reply.changed {
            let saved = match &reply.state {
                Some(state) => self.env.store.meta_set(&key, &state.to_json()).await,
                None => self.env.store.meta_delete(&key).await,
            };
            if let Err(e) = saved {
                self.notice(NoticeLevel::Error, format!("could not save the heartbeat: {e}"));
            }
        }
        self.heartbeat = reply.state;
        self.notice(if reply.error { NoticeLevel::Error } else { NoticeLevel::Info }, reply.message);
        self.send_status();
    }

    /// Heartbeat and goal of the session just opened (a resumed active goal comes back
    /// paused); what the scheduler must learn of them.
    pub(super) async fn load_standing(&mut self) -> Vec<Input> {
        let sid = self.env.session_id.clone();
        self.heartbeat = match self.env.store.meta_get(&heartbeat::state_key(&sid)).await {
            Ok(Some(json)) => Heartbeat::from_json(&json).ok(),
            _ => None,
        };
        self.boundary.cancel();
        self.goal = match self.env.store.meta_get(&goal::state_key(&sid)).await {
            Ok(Some(json)) => GoalMachine::from_json(self.env.config.goals.clone(), &json)
                .unwrap_or_else(|_| GoalMachine::new(self.env.config.goals.clone())),
            _ => GoalMachine::new(self.env.config.goals.clone()),
        };
        let effects = self.goal.on_session_resumed();
        let mut inputs = vec![Input::GoalContinuation(None)];
        inputs.extend(self.perform_goal_effects(effects).await);
        inputs.push(Input::Boundary(self.goal_boundary()));
        // The session's backend: `--backend` for this run, else what `/backend` chose for
        // it, else `terminal.backend`.
        let terminal = &self.env.config.terminal;
        let configured = terminal.backend.clone();
        let backend = if terminal.backend_from_flag {
            configured
        } else {
            match self.env.store.meta_get(&super::backend_key(&sid)).await {
                Ok(Some(label)) => crate::engine::backend::Backend::parse(&label).unwrap_or(configured),
                _ => configured,
            }
        };
        self.env.jobs.backends().set_current(backend);
        inputs
    }

    pub(super) async fn on_boundary_result(&mut self, result: BoundaryResult) {
        let effects = match result {
            BoundaryResult::Fingerprint(fp) => self.goal.start_gates(fp),
            BoundaryResult::Gate { idx, outcome } => self.goal.on_gate_result(idx, &outcome),
            BoundaryResult::Judge(Ok(text)) => self.goal.on_judge_reply(&text),
            BoundaryResult::Judge(Err(e)) => self.goal.on_judge_error(&e),
        };
        for input in self.perform_goal_effects(effects).await {
            self.feed(input).await;
        }
        self.send_status();
    }

    /// Where the goal's turn boundary stands, for the scheduler.
    fn goal_boundary(&self) -> scheduler::Boundary {
        match (self.goal.in_boundary(), self.goal.judging()) {
            (false, _) => scheduler::Boundary::None,
            (true, false) => scheduler::Boundary::Gates,
            (true, true) => scheduler::Boundary::Judging,
        }
    }

    /// Perform what the goal machine asked for, in order; what the scheduler must learn of
    /// it (a continuation due or dropped, where the boundary stands) comes back.
    pub(super) async fn perform_goal_effects(&mut self, effects: Vec<GoalEffect>) -> Vec<Input> {
        if effects.is_empty() {
            return Vec::new();
        }
        let mut inputs = Vec::new();
        for effect in effects {
            match effect {
                GoalEffect::Notice { level, text } => self.notice(level, text),
                GoalEffect::Save => {
                    let key = goal::state_key(&self.env.session_id);
                    let saved = match self.goal.to_json() {
                        Some(json) => self.env.store.meta_set(&key, &json).await,
                        None => self.env.store.meta_delete(&key).await,
                    };
                    if let Err(e) = saved {
                        self.notice(NoticeLevel::Error, format!("could not save the goal: {e}"));
                    }
                }
                GoalEffect::RunGates => {
                    // In the session's root, not wherever the model `cd`'d (DESIGN §6).
                    let policy = self.env.jobs.sandbox_policy();
                    let tx = self.boundary.tx.clone();
                    tokio::spawn(async move {
                        let _ = tx.send(BoundaryResult::Fingerprint(goal::fingerprint(&policy).await));
                    });
                }
                GoalEffect::RunGate { idx, cmd } => self.spawn_gate(idx, cmd),
                GoalEffect::Judge { system, prompt } => self.spawn_judge(system, prompt),
                GoalEffect::Continue { prompt } => inputs.push(Input::GoalContinuation(Some(prompt))),
                GoalEffect::Abandon => {
                    self.boundary.cancel();
                    inputs.push(Input::GoalContinuation(None));
                }
                GoalEffect::Paused { message, .. } => {
                    inputs.push(Input::GoalContinuation(None));
                    self.notice(NoticeLevel::Warn, message);
                }
                GoalEffect::Done { message } => self.notice(NoticeLevel::Info, message),
                GoalEffect::ShowStatus { gates_only } => {
                    self.events().send(Event::GoalStatus { goal: self.goal.info().map(Box::new), gates_only })
                }
            }
        }
        self.send_status();
        inputs.push(Input::Boundary(self.goal_boundary()));
        inputs
    }

    fn spawn_gate(&self, idx: usize, cmd: String) {
        let runner = goal::GateRunner { jobs: self.env.jobs.clone(), session_id: self.env.session_id.clone() };
        let timeout = Duration::from_secs(self.env.config.goals.gate_timeout_s.max(1));
        let cwd = self.env.cwd();
        let cancel = self.boundary.cancel.clone();
        let tx = self.boundary.tx.clone();
        let mut paused = self.paused.subscribe();
        // One notice per gate run (its result); while it runs, the status line says so.
        self.send_status();
        tokio::spawn(async move {
            // Nothing autonomous runs while paused (DESIGN §5): the gate waits for the pause
            // to lift; one that is running when a pause comes is killed and run again
            // after it (its result would be stale by then anyway).
            let outcome = loop {
                tokio::select! {
                    r = paused.wait_for(|p| !*p) => if r.is_err() { return },
                    _ = cancel.cancelled() => return,
                }
                let attempt = cancel.child_token();
                let run = runner.run(&cmd, &cwd, timeout, &attempt);
                tokio::pin!(run);
                tokio::select! {
                    outcome = &mut run => break outcome,
                    // (`is_ok` drops the watch guard before anything is awaited.)
                    _ = async { paused.wait_for(|p| *p).await.is_ok() } => {
                        attempt.cancel();
                        // Wait for the kill, so a gate never runs twice at once.
                        let _ = run.await;
                        if cancel.is_cancelled() {
                            return;
                        }
                    }
                }
            };
            let _ = tx.send(BoundaryResult::Gate { idx, outcome });
        });
    }

    fn spawn_judge(&self, system: String, prompt: String) {
        let provider = self.env.provider.clone();
        let request = ChatRequest {
            temperature: Some(0.0),
            ..ChatRequest::owned(self.env.model.clone(), vec![ChatMessage::system(system), ChatMessage::user(prompt)])
        };
        let tx = self.boundary.tx.clone();
        let cancel = self.boundary.cancel.clone();
        let mut paused = self.paused.subscribe();
        tokio::spawn(async move {
            // The judge calls the model: it waits out a pause, including one that comes
            // while it is asking (that call is dropped and made again after the pause).
            let result = loop {
                tokio::select! {
                    r = paused.wait_for(|p| !*p) => if r.is_err() { return },
                    _ = cancel.cancelled() => return,
                }
                let mut ignore = |_| {};
                tokio::select! {
                    r = provider.stream_chat(&request, &mut ignore) => {
                        break r.map(|c| c.content).map_err(|e| e.to_string());
                    }
                    _ = cancel.cancelled() => return,
                    _ = paused.wait_for(|p| *p) => continue,
                }
            };
            let _ = tx.send(BoundaryResult::Judge(result));
        });
    }

    /// The turn-liveness watchdog for one turn (DESIGN §5): a turn with no activity for
    /// `agent.turn_liveness.timeout_s` is interrupted, loudly. The guard it returns stops
    /// the watchdog when dropped, with the turn.
    pub(super) fn spawn_watchdog(&self, control: &TurnControl) -> Option<tokio_util::sync::DropGuard> {
        let live = &self.env.config.agent.turn_liveness;
        let timeout = activity::liveness_timeout(live)?;
        let poll = activity::liveness_poll(live);
        let activity = control.activity.clone()?;
        let events = self.env.events.clone();
        // Dropped with the running turn: the watchdog stops when the turn is over.
        let over = tokio_util::sync::CancellationToken::new();
        let guard = over.clone().drop_guard();
        tokio::spawn(async move {
            let watched = tokio::select! {
                idle = activity::watchdog(activity, timeout, poll) => idle,
                _ = over.cancelled() => None,
            };
            if let Some(idle) = watched {
                events.send(Event::notice(
                    NoticeLevel::Error,
                    format!(
                        "the turn made no progress for {} s (agent.turn_liveness.timeout_s) and was interrupted",
                        idle.as_secs()
                    ),
                ));
            }
        });
        Some(guard)
    }

    /// `/compact` ended: keep the new history, or the old one when it failed or was
    /// interrupted.
    pub(super) async fn on_compaction_finished(
        &mut self,
        result: Result<Result<Compacted, (Vec<ChatMessage>, String)>, tokio::task::JoinError>,
    ) {
        self.compaction = None;
        match result {
            Ok(Ok(done)) => {
                self.history = done.history;
                self.omitted = None;
                let mut all = crate::engine::turn::fixed_context(&self.env);
                all.extend_from_slice(&self.history);
                self.meter.reset(&all);
                self.notice(
                    NoticeLevel::Info,
                    format!(
                        "context compacted: {} earlier messages summarised ({})",
                        done.summarised,
                        self.meter.label()
                    ),
                );
                crate::engine::turn::send_context(&self.env, &self.meter);
            }
            Ok(Err((history, why))) => {
                self.history = history;
                self.notice(NoticeLevel::Warn, format!("not compacted: {why}"));
            }
            Err(e) => {
                // The task panicked with the history: rebuild it from the database.
                tracing::error!(error = %e, "compaction task failed");
                self.notice(NoticeLevel::Error, format!("compaction crashed: {e}; reloading the session"));
                self.reload_context().await;
            }
        }
        self.feed(Input::CompactionFinished).await;
    }
}
