//! What runs in the foreground: a model turn or the user's `!command`, each its own task
//! that owns the history while it runs; and the jobs pane's actions.

use super::{Engine, RunningTurn};
use crate::engine::llm::spend::{cost_of, Spend};
use crate::engine::scheduler::{Input, TurnInput};
use crate::engine::turn::{run_bang, run_turn, TurnControl, TurnResult};
use crate::protocol::{Event, JobAction, JobId, JobStatus, NoticeLevel, TurnOutcome, TurnTrigger};

/// What the scheduler started.
pub(super) enum Work {
    Turn {
        inputs: Vec<TurnInput>,
        trigger: TurnTrigger,
    },
    /// `!cmd`: the user's own command, run as a foreground job in the transcript (Esc stops
    /// it, Ctrl+B backgrounds it); its output tail becomes context for the next message.
    Bang(String),
}

impl Engine {
    /// Start `work` as its own task with the history; it hands the history back when done.
    pub(super) fn begin(&mut self, work: Work) {
        let mut control = TurnControl::new(self.asks_tx.clone(), self.waiting.subscribe());
        control.standing = crate::engine::cadence::Standing {
            heartbeat_interval_s: self.heartbeat.as_ref().and_then(|h| h.active_interval_s()),
            goal_active: self.goal.is_active(),
        };
        let history = std::mem::take(&mut self.history);
        let (env, ctl, omitted, meter) = (self.env.clone(), control.clone(), self.omitted, self.meter);
        let rewind = self.rewind.clone();
        let mut watchdog = None;
        let join = match work {
            Work::Turn { inputs, trigger } => {
                watchdog = self.spawn_watchdog(&control);
                let label = inputs.first().map(|i| i.shown.clone()).unwrap_or_default();
                let mut ctl = ctl;
                let before =
                    super::rewind::BeforeTurn::start(rewind.as_ref(), &env, &mut ctl, trigger_name(&trigger), label);
                tokio::spawn(async move {
                    let result = run_turn(env.clone(), ctl, history, omitted, inputs, trigger, meter).await;
                    let snap = match before {
                        Some(before) => before.taken().await,
                        None => None,
                    };
                    // Handed over before the turn reports its end; it runs on without the turn.
                    super::rewind::after_turn(rewind.as_ref(), &env, snap);
                    result
                })
            }
            Work::Bang(command) => tokio::spawn(async move {
                let snap = super::rewind::before_turn(rewind.as_ref(), &env, "bang", format!("!{command}")).await;
                let result = run_bang(env.clone(), ctl, history, omitted, command, meter).await;
                super::rewind::after_turn(rewind.as_ref(), &env, snap);
                result
            }),
        };
        self.turn = Some(RunningTurn { control, join, _watchdog: watchdog });
    }

    pub(super) async fn on_turn_finished(&mut self, result: Result<TurnResult, tokio::task::JoinError>) {
        // What the turn said on its way out (it stored what it was handed) comes first.
        while let Ok(ask) = self.asks.try_recv() {
            self.on_ask(ask).await;
        }
        self.turn = None;
        let outcome = match result {
            Ok(result) => self.keep_result(result).await,
            Err(e) => {
                // The turn task itself panicked: the history it owned is lost from memory but
                // every completed message is in the store, so reload from there.
                tracing::error!(error = %e, "turn task failed");
                self.notice(
                    NoticeLevel::Error,
                    format!("the turn crashed: {e}; reloading the session from the database"),
                );
                self.reload_context().await;
                TurnOutcome::Failed
            }
        };
        // A quiet moment: what the turn freed goes back to the system now and then.
        crate::memory::trim_heap_now_and_then();
        // Sent once the turn no longer runs, so a message sent on seeing it is not busy input.
        self.events().send(Event::TurnFinished { outcome });
        self.feed(Input::TurnFinished { outcome }).await;
    }

    /// Take back what the turn owned, and count what it spent (this run's; the database
    /// counted each call as it ended).
    async fn keep_result(&mut self, result: TurnResult) -> TurnOutcome {
        self.history = result.history;
        self.omitted = result.omitted;
        self.meter = result.meter;
        let usage = result.usage;
        if !usage.is_empty() {
            let cost = cost_of(&self.env.config.prices, self.env.provider.kind(), &self.env.model, &usage);
            self.last_turn_usage = Spend::default();
            self.last_turn_usage.add(&usage, cost);
            self.session_usage.add(&usage, cost);
        }
        result.outcome
    }

    /// The model's last answer (what the goal's judge reads).
    pub(super) fn last_reply(&self) -> String {
        self.history
            .iter()
            .rev()
            .find(|m| m.role == crate::engine::llm::Role::Assistant)
            .map(|m| m.text().to_string())
            .unwrap_or_default()
    }

    /// A job action from the UI runs as its own task: reading a large log must not hold up
    /// the engine loop (a redirect or interrupt typed meanwhile is handled at once).
    /// A kill the user makes is news for the scheduler (its exit notice starts no turn).
    pub(super) fn job_action(&mut self, id: JobId, action: JobAction) -> Vec<Input> {
        let learnt = if action == JobAction::Kill { vec![Input::JobKilled(id.clone())] } else { Vec::new() };
        let jobs = self.env.jobs.clone();
        let events = self.env.events.clone();
        let poll = action == JobAction::Poll;
        tokio::spawn(async move {
            let event = jobs.ui_action(&id, action).await;
            // A poll the user asked for says what it found (the pane alone may be hidden).
            if let (true, Event::JobUpdated { id, status, tail }) = (poll, &event) {
                events.send(Event::notice(NoticeLevel::Info, poll_text(id, status, tail)));
            }
            events.send(event)
        });
        learnt
    }
}

/// How the rewind list names what started a turn.
fn trigger_name(trigger: &TurnTrigger) -> &'static str {
    match trigger {
        TurnTrigger::User => "user",
        TurnTrigger::Queued => "user",
        TurnTrigger::JobNotification => "job notice",
        TurnTrigger::Heartbeat => "heartbeat",
        TurnTrigger::Goal => "goal",
        TurnTrigger::Retry => "retry",
    }
}

/// What `/jobs poll` (or `p`) found: the status and the last line of output.
fn poll_text(id: &str, status: &JobStatus, tail: &str) -> String {
    let last = crate::emulate::plain(tail);
    let last = last.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let state = match status {
        JobStatus::Reconnecting => "is reconnecting (it runs on over there)".to_string(),
        _ if status.is_running() => "is running".to_string(),
        _ => status.label(),
    };
    if last.is_empty() {
        format!("{id} {state} · no output{}", if status.is_running() { " yet" } else { "" })
    } else {
        format!("{id} {state} · last output: {last}")
    }
}

#[cfg(test)]
mod tests {
    use super::poll_text;
    use crate::protocol::JobStatus;

    #[test]
    fn a_poll_says_the_status_and_the_last_line() {
        assert_eq!(
            poll_text("job_3", &JobStatus::Running, "tick 1\n\x1b[32mtick 2\x1b[0m\n\n"),
            "job_3 is running · last output: tick 2"
        );
        assert_eq!(poll_text("job_4", &JobStatus::Exited(0), ""), "job_4 exited 0 · no output");
    }
}
