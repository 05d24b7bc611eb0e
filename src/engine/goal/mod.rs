//! `/goal` + quality gates + judge (DESIGN §5) as a pure state machine.
//!
//! The engine feeds it commands and turn-boundary facts and performs the effects it
//! returns, in order: run gates (`gate::GateRunner`), compute the workspace
//! fingerprint (`fingerprint::fingerprint`), ask the judge, start a goal turn, show
//! notices, save `to_json()` under `goal:<session_id>`. Nothing here does I/O.
//!
//! One boundary, after a turn ends `completed`:
//! `on_turn_end` → `RunGates` → `start_gates(fp)` → `RunGate{0}` → `on_gate_result(0, …)`
//! → … → `Judge` → `on_judge_reply` → `Continue(prompt)` | `Paused` | `Done`.
//! A failing gate skips the judge and continues with the gate-failed prompt.

mod display;
pub(crate) mod fingerprint;
pub mod gate;
pub(crate) mod judge;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::config::GoalsConfig;
use crate::protocol::commands::{GateCmd, GoalCmd};
use crate::protocol::{NoticeLevel, TurnOutcome};
use crate::text::tail_chars;
use display::status_word;

pub(crate) use fingerprint::fingerprint;
pub(crate) use gate::{GateOutcome, GateRunner, GATE_TAIL_CHARS};
pub(crate) use judge::{parse_judge_reply, Verdict, JUDGE_SYSTEM};

/// `state_meta` key of a session's goal.
pub(crate) fn state_key(session_id: &str) -> String {
    format!("goal:{session_id}")
}

/// Unparseable judge replies in a row that pause the goal.
pub(crate) const JUDGE_FAILURE_LIMIT: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum GoalStatus {
    Active,
    Paused,
    Achieved,
    Cleared,
}

/// The last run (or replay) of a gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GateRecord {
    pub(crate) passed: bool,
    pub(crate) exit_code: i32,
    pub(crate) output_tail: String,
    #[serde(default)]
    pub(crate) timed_out: bool,
    /// Workspace fingerprint the gate ran on (None outside git: never replayed).
    #[serde(default)]
    pub(crate) fingerprint: Option<String>,
}

/// A quality gate: a shell command that must exit 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Gate {
    pub(crate) cmd: String,
    /// Failed runs since it last passed.
    #[serde(default)]
    pub(crate) attempts: u32,
    /// Turns since its last failed run that changed nothing in the workspace (it was not
    /// run again: the failure stands). They are not failed runs, but they use up the same
    /// retries, so a model that changes nothing cannot loop forever.
    #[serde(default)]
    pub(crate) unchanged: u32,
    #[serde(default)]
    pub(crate) last: Option<GateRecord>,
}

impl Gate {
    fn new(cmd: &str) -> Gate {
        Gate { cmd: cmd.to_string(), attempts: 0, unchanged: 0, last: None }
    }
}

/// A session's standing goal, as saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Goal {
    pub(crate) text: String,
    pub(crate) status: GoalStatus,
    /// Goal turns started (the first one included).
    pub(crate) turns_used: u32,
    pub(crate) max_turns: u32,
    #[serde(default)]
    pub(crate) gate_max_retries: Option<u32>,
    #[serde(default)]
    pub(crate) gates: Vec<Gate>,
    /// Unparseable judge replies in a row.
    #[serde(default)]
    pub(crate) judge_failures: u32,
    #[serde(default)]
    pub(crate) pause_reason: Option<String>,
    /// The judge's last verdict and reason, for `/goal status`.
    #[serde(default)]
    pub(crate) last_verdict: Option<String>,
}

/// What the engine should do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GoalEffect {
    /// Show a line in the transcript (not part of the model's context).
    Notice { level: NoticeLevel, text: String },
    /// Save `GoalMachine::to_json()` under `state_key(session)`.
    Save,
    /// Compute `fingerprint(cwd)`, then call `start_gates(fp)`.
    RunGates,
    /// Run gate `idx` (`GateRunner::run`, `goals.gate_timeout_s`) in the session's working
    /// directory, then call `on_gate_result(idx, outcome)`.
    RunGate { idx: usize, cmd: String },
    /// Ask the model (no tools, temperature 0) with this system and user message, then
    /// call `on_judge_reply(text)` or `on_judge_error(error)`.
    Judge { system: String, prompt: String },
    /// Start a goal turn (`TurnTrigger::Goal`) with this user message — when the session
    /// is not paused (ESTOP); it waits otherwise.
    Continue { prompt: String },
    /// Stop the gate run or judge request in flight for this goal (a command replaced,
    /// paused or cleared it); if it still reports, the result is ignored.
    Abandon,
    /// The goal paused; show `message` (it says why and how to resume).
    Paused { reason: String, message: String },
    /// The goal is achieved; show `message`.
    Done { message: String },
    /// Send the goal (`GoalMachine::info`) for the front end to show: `/goal status`, or
    /// only its gates (`/goal gate list`).
    ShowStatus { gates_only: bool },
}

/// Where the machine is within a turn boundary (not saved: a restart starts afresh).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Phase {
    #[default]
    Idle,
    /// Waiting for `start_gates`.
    Fingerprinting { last_reply: String },
    /// Gate `idx` is running.
    Gating { idx: usize, cmd: String, fingerprint: Option<String>, last_reply: String },
    /// The judge was asked.
    Judging,
}

/// The goal of one session and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GoalMachine {
    goal: Option<Goal>,
    limits: GoalsConfig,
    phase: Phase,
}

impl GoalMachine {
    pub(crate) fn new(limits: GoalsConfig) -> GoalMachine {
        GoalMachine { goal: None, limits, phase: Phase::Idle }
    }

    /// Restore a saved goal (`to_json` output). An unreadable row is an error to show.
    pub(crate) fn from_json(limits: GoalsConfig, json: &str) -> Result<GoalMachine, String> {
        let goal: Goal = serde_json::from_str(json).map_err(|e| format!("stored goal is unreadable: {e}"))?;
        Ok(GoalMachine { goal: Some(goal), limits, phase: Phase::Idle })
    }

    /// The saved form; None when there has never been a goal.
    pub(crate) fn to_json(&self) -> Option<String> {
        self.goal.as_ref().and_then(|g| serde_json::to_string(g).ok())
    }

    #[cfg(test)]
    pub(crate) fn goal(&self) -> Option<&Goal> {
        self.goal.as_ref()
    }

    fn live(&self) -> Option<&Goal> {
        self.goal.as_ref().filter(|g| g.status != GoalStatus::Cleared)
    }

    pub(crate) fn is_active(&self) -> bool {
        self.goal.as_ref().is_some_and(|g| g.status == GoalStatus::Active)
    }

    /// True while boundary work (fingerprint, a gate, the judge) is outstanding: the
    /// session is not idle.
    pub(crate) fn in_boundary(&self) -> bool {
        self.phase != Phase::Idle
    }

    /// The judge was asked (the boundary's last step); before it the gates run.
    pub(crate) fn judging(&self) -> bool {
        self.phase == Phase::Judging
    }

    fn max_retries(&self) -> u32 {
        self.goal.as_ref().and_then(|g| g.gate_max_retries).unwrap_or(self.limits.gate_max_retries).max(1)
    }

    // ---- commands -------------------------------------------------------------------

    /// Apply a `/goal` command. `idle`: the session is idle (a new goal starts at once).
    pub(crate) fn command(&mut self, cmd: &GoalCmd, idle: bool) -> Vec<GoalEffect> {
        match cmd {
            GoalCmd::Set(text) => self.set(text, idle),
            GoalCmd::Status => vec![GoalEffect::ShowStatus { gates_only: false }],
            GoalCmd::Pause => match self.live() {
                Some(g) if g.status == GoalStatus::Active => {
                    let mut fx = self.abandon_boundary();
                    fx.extend(self.pause("you paused it"));
                    fx
                }
                Some(g) => vec![info(format!("the goal is {}, not active", status_word(g.status)))],
                None => vec![error(NO_GOAL)],
            },
            GoalCmd::Resume => self.resume(idle),
            GoalCmd::Clear => match self.goal.as_mut().filter(|g| g.status != GoalStatus::Cleared) {
                Some(g) => {
                    let gates = g.gates.len();
                    g.status = GoalStatus::Cleared;
                    g.gates.clear();
                    g.pause_reason = None;
                    let mut fx = self.abandon_boundary();
                    let extra = match gates {
                        0 => String::new(),
                        1 => " and its gate".to_string(),
                        n => format!(" and its {n} gates"),
                    };
                    fx.extend([info(format!("◎ goal cleared{extra}")), GoalEffect::Save]);
                    fx
                }
                None => vec![info("no goal to clear")],
            },
            GoalCmd::Gate(g) => self.gate_command(g),
        }
    }

    fn set(&mut self, text: &str, idle: bool) -> Vec<GoalEffect> {
        let text = text.trim();
        if text.is_empty() {
            return vec![error("a goal needs text: /goal <text>")];
        }
        // The gates of the goal it replaces, or those added before any goal was set.
        let kept: Vec<Gate> =
            self.goal.as_ref().map(|g| g.gates.iter().map(|gate| Gate::new(&gate.cmd)).collect()).unwrap_or_default();
        let replaced = self.live().is_some();
        // Gates or a judge still working for the old goal: drop them and start afresh now.
        let was_in_boundary = self.in_boundary();
        let mut fx = self.abandon_boundary();
        let gates_note = match (kept.len(), replaced) {
            (0, _) => String::new(),
            (1, true) => " — keeping its gate".to_string(),
            (n, true) => format!(" — keeping its {n} gates"),
            (1, false) => " — with the gate added before it".to_string(),
            (n, false) => format!(" — with the {n} gates added before it"),
        };
        self.goal = Some(Goal {
            text: text.to_string(),
            status: GoalStatus::Active,
            turns_used: 0,
            max_turns: self.limits.max_turns.max(1),
            gate_max_retries: Some(self.limits.gate_max_retries.max(1)),
            gates: kept,
            judge_failures: 0,
            pause_reason: None,
            last_verdict: None,
        });
        let verb = if replaced { "replaced" } else { "set" };
        let budget = self.limits.max_turns.max(1);
        fx.push(info(format!("◎ goal {verb}{gates_note}: {text} (budget {budget} turns)")));
        if idle || was_in_boundary {
            fx.extend(self.continue_with(kickoff_prompt(text)));
        } else {
            fx.push(info("◎ it starts when the current turn ends"));
            fx.push(GoalEffect::Save);
        }
        fx
    }

    fn resume(&mut self, idle: bool) -> Vec<GoalEffect> {
        let max_retries = self.max_retries();
        let Some(g) = self.goal.as_mut().filter(|g| g.status != GoalStatus::Cleared) else {
            return vec![error(NO_GOAL)];
        };
        match g.status {
            GoalStatus::Active => return vec![info("◎ the goal is already active")],
            GoalStatus::Achieved => {
                return vec![info("◎ the goal was achieved; set a new one with /goal <text>")];
            }
            GoalStatus::Paused | GoalStatus::Cleared => {}
        }
        let mut notes = Vec::new();
        if g.turns_used >= g.max_turns {
            // Another full budget on top of what was used, so the row stays a true count.
            let grant = self.limits.max_turns.max(1);
            g.max_turns = g.turns_used.saturating_add(grant);
            notes.push(format!("{grant} more turns"));
        }
        for gate in g.gates.iter_mut().filter(|gate| gate.attempts + gate.unchanged >= max_retries) {
            gate.attempts = 0;
            gate.unchanged = 0;
            notes.push(format!("retries reset for $ {}", gate.cmd));
        }
        g.judge_failures = 0;
        g.status = GoalStatus::Active;
        g.pause_reason = None;
        self.phase = Phase::Idle;
        let notes = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join("; ")) };
        let mut fx = vec![info(format!("◎ goal resumed{notes}"))];
        if idle {
            let prompt = if g.turns_used == 0 { kickoff_prompt(&g.text) } else { continue_prompt(&g.text) };
            fx.extend(self.continue_with(prompt));
        } else {
            fx.push(GoalEffect::Save);
        }
        fx
    }

    /// `/goal gate …`. Before any goal the gates wait for the next `/goal <text>` (kept in a
    /// cleared goal, so they are saved like the others), and the answers say so.
    fn gate_command(&mut self, cmd: &GateCmd) -> Vec<GoalEffect> {
        let staged = self.live().is_none();
        let g = self.goal.get_or_insert_with(|| Goal {
            text: String::new(),
            status: GoalStatus::Cleared,
            turns_used: 0,
            max_turns: 0,
            gate_max_retries: None,
            gates: Vec::new(),
            judge_failures: 0,
            pause_reason: None,
            last_verdict: None,
        });
        match cmd {
            GateCmd::List => vec![GoalEffect::ShowStatus { gates_only: true }],
            GateCmd::Add(c) => {
                let c = c.trim();
                if c.is_empty() {
                    return vec![error("a gate needs a command: /goal gate add <cmd>")];
                }
                g.gates.push(Gate::new(c));
                let n = g.gates.len();
                let later = if staged { " — no goal yet: it applies to the next /goal <text>" } else { "" };
                vec![info(format!("◎ gate {n} added: $ {c}{later}")), GoalEffect::Save]
            }
            GateCmd::Remove(n) => {
                if *n == 0 || *n > g.gates.len() {
                    let have = match (g.gates.len(), staged) {
                        (0, false) => "there are no gates".to_string(),
                        (1, false) => "there is 1 gate".to_string(),
                        (k, false) => format!("there are {k} gates"),
                        (0, true) => "no gates are waiting for a goal".to_string(),
                        (1, true) => "1 gate is waiting for a goal".to_string(),
                        (k, true) => format!("{k} gates are waiting for a goal"),
                    };
                    return vec![error(format!("no gate {n}: {have}"))];
                }
                let gate = g.gates.remove(n - 1);
                vec![info(format!("◎ gate {n} removed: $ {}", gate.cmd)), GoalEffect::Save]
            }
            GateCmd::Clear => {
                let n = g.gates.len();
                g.gates.clear();
                vec![info(format!("◎ {n} gate{} removed", if n == 1 { "" } else { "s" })), GoalEffect::Save]
            }
        }
    }

    // ---- turn boundary --------------------------------------------------------------

    /// A turn ended. `last_reply` is the assistant's final text (for the judge).
    pub(crate) fn on_turn_end(&mut self, outcome: TurnOutcome, last_reply: &str) -> Vec<GoalEffect> {
        if !self.is_active() {
            return Vec::new();
        }
        self.phase = Phase::Idle;
        match outcome {
            TurnOutcome::Interrupted => self.pause("the turn was interrupted"),
            TurnOutcome::Failed => self.pause("the turn failed"),
            TurnOutcome::BudgetExhausted => self.pause("the turn used up its model calls (agent.max_iterations)"),
            TurnOutcome::Completed => {
                let Some(g) = self.goal.as_ref() else { return Vec::new() };
                if g.turns_used == 0 {
                    // Set while another turn ran: nothing has worked on it yet.
                    let prompt = kickoff_prompt(&g.text);
                    return self.continue_with(prompt);
                }
                if g.gates.is_empty() {
                    return self.judge(last_reply.to_string());
                }
                self.phase = Phase::Fingerprinting { last_reply: last_reply.to_string() };
                vec![GoalEffect::RunGates]
            }
        }
    }

    /// The workspace fingerprint for this boundary is known: start running gates.
    pub(crate) fn start_gates(&mut self, fingerprint: Option<String>) -> Vec<GoalEffect> {
        let Phase::Fingerprinting { last_reply } = std::mem::take(&mut self.phase) else {
            return Vec::new();
        };
        if !self.is_active() {
            return Vec::new();
        }
        self.gate_step(0, fingerprint, last_reply)
    }

    fn gate_step(&mut self, idx: usize, fingerprint: Option<String>, last_reply: String) -> Vec<GoalEffect> {
        let Some(g) = self.goal.as_mut() else { return Vec::new() };
        let Some(gate) = g.gates.get_mut(idx) else {
            return self.judge(last_reply);
        };
        let unchanged = match (&fingerprint, &gate.last) {
            (Some(fp), Some(last)) => !last.passed && last.fingerprint.as_deref() == Some(fp),
            _ => false,
        };
        if unchanged {
            gate.unchanged += 1;
            let n = g.gates.len();
            let mut fx = vec![GoalEffect::Notice {
                level: NoticeLevel::Warn,
                text: format!(
                    "gate {}/{n} ✗ $ {} — not re-run: the workspace has not changed since it failed",
                    idx + 1,
                    g.gates[idx].cmd
                ),
            }];
            fx.extend(self.gate_failed(idx));
            return fx;
        }
        let cmd = gate.cmd.clone();
        self.phase = Phase::Gating { idx, cmd: cmd.clone(), fingerprint, last_reply };
        vec![GoalEffect::RunGate { idx, cmd }]
    }

    /// Gate `idx` finished.
    pub(crate) fn on_gate_result(&mut self, idx: usize, outcome: &GateOutcome) -> Vec<GoalEffect> {
        let Phase::Gating { idx: running, cmd, fingerprint, last_reply } = std::mem::take(&mut self.phase) else {
            return Vec::new();
        };
        if running != idx || !self.is_active() {
            self.phase =
                if running != idx { Phase::Gating { idx: running, cmd, fingerprint, last_reply } } else { Phase::Idle };
            return Vec::new();
        }
        let Some(g) = self.goal.as_mut() else { return Vec::new() };
        // Gates may be edited while one runs: find the one that ran by its command.
        let Some(pos) = g.gates.iter().position(|gate| gate.cmd == cmd) else {
            return self.gate_step(idx, fingerprint, last_reply);
        };
        let n = g.gates.len();
        let gate = &mut g.gates[pos];
        gate.last = Some(GateRecord {
            passed: outcome.passed(),
            exit_code: outcome.exit_code,
            output_tail: tail_chars(&outcome.output_tail, GATE_TAIL_CHARS).to_string(),
            timed_out: outcome.timed_out,
            fingerprint: fingerprint.clone(),
        });
        gate.unchanged = 0;
        if outcome.passed() {
            gate.attempts = 0;
            let mut fx = vec![info(format!("gate {}/{n} ✓ $ {cmd}", pos + 1))];
            fx.extend(self.gate_step(pos + 1, fingerprint, last_reply));
            return fx;
        }
        gate.attempts += 1;
        let how = if outcome.timed_out { "timed out".to_string() } else { format!("exit {}", outcome.exit_code) };
        let mut fx = vec![GoalEffect::Notice {
            level: NoticeLevel::Warn,
            text: format!("gate {}/{n} ✗ $ {cmd} — {how}", pos + 1),
        }];
        fx.extend(self.gate_failed(pos));
        fx
    }

    fn gate_failed(&mut self, idx: usize) -> Vec<GoalEffect> {
        let max = self.max_retries();
        let Some(g) = self.goal.as_ref() else { return Vec::new() };
        let gate = &g.gates[idx];
        if gate.attempts + gate.unchanged >= max {
            let runs = if gate.attempts == 1 { "once".to_string() } else { format!("{} times", gate.attempts) };
            let reason = match gate.unchanged {
                0 => format!("gate {} failed {runs}: $ {}", idx + 1, gate.cmd),
                n => format!(
                    "gate {} failed {runs}, then {n} turn{} changed nothing in the workspace: $ {}",
                    idx + 1,
                    if n == 1 { "" } else { "s" },
                    gate.cmd
                ),
            };
            return self.pause(&reason);
        }
        let last = gate.last.clone().unwrap_or(GateRecord {
            passed: false,
            exit_code: -1,
            output_tail: String::new(),
            timed_out: false,
            fingerprint: None,
        });
        let prompt = gate_failed_prompt(
            &g.text,
            &gate.cmd,
            gate.attempts + gate.unchanged,
            max,
            last.exit_code,
            &last.output_tail,
        );
        self.continue_with(prompt)
    }

    fn judge(&mut self, last_reply: String) -> Vec<GoalEffect> {
        let Some(g) = self.goal.as_ref() else { return Vec::new() };
        let prompt = judge::judge_prompt(&g.text, g.gates.len(), &last_reply);
        self.phase = Phase::Judging;
        vec![GoalEffect::Judge { system: JUDGE_SYSTEM.to_string(), prompt }]
    }

    /// The judge answered.
    pub(crate) fn on_judge_reply(&mut self, text: &str) -> Vec<GoalEffect> {
        if self.phase != Phase::Judging {
            return Vec::new();
        }
        self.phase = Phase::Idle;
        if !self.is_active() {
            return Vec::new();
        }
        let Some(reply) = parse_judge_reply(text) else {
            return self.judge_failed("the judge's reply had no readable verdict");
        };
        let Some(g) = self.goal.as_mut() else { return Vec::new() };
        g.judge_failures = 0;
        let reason = if reply.reason.is_empty() { "no reason given".to_string() } else { reply.reason.clone() };
        g.last_verdict = Some(format!("{}: {reason}", reply.verdict.as_str()));
        match reply.verdict {
            Verdict::Done => {
                g.status = GoalStatus::Achieved;
                let message = format!("✓ goal achieved: {} — {reason}", g.text);
                vec![GoalEffect::Done { message }, GoalEffect::Save]
            }
            Verdict::Blocked => self.pause(&format!("the agent is blocked — {reason}")),
            Verdict::Continue => {
                let prompt = continue_prompt(&g.text);
                let mut fx = vec![info(format!("judge: continue — {reason}"))];
                fx.extend(self.continue_with(prompt));
                fx
            }
        }
    }

    /// The judge request failed (network, model error). Counts like an unreadable reply.
    pub(crate) fn on_judge_error(&mut self, error: &str) -> Vec<GoalEffect> {
        if self.phase != Phase::Judging {
            return Vec::new();
        }
        self.phase = Phase::Idle;
        if !self.is_active() {
            return Vec::new();
        }
        self.judge_failed(&format!("the judge request failed: {error}"))
    }

    fn judge_failed(&mut self, why: &str) -> Vec<GoalEffect> {
        let Some(g) = self.goal.as_mut() else { return Vec::new() };
        g.judge_failures += 1;
        if g.judge_failures >= JUDGE_FAILURE_LIMIT {
            return self.pause(&format!("{JUDGE_FAILURE_LIMIT} judge replies in a row had no readable verdict"));
        }
        let n = g.judge_failures;
        let prompt = continue_prompt(&g.text);
        let mut fx = vec![GoalEffect::Notice {
            level: NoticeLevel::Warn,
            text: format!("judge: {why} ({n}/{JUDGE_FAILURE_LIMIT}); continuing"),
        }];
        fx.extend(self.continue_with(prompt));
        fx
    }

    /// The user interrupted (a turn, a gate or the judge): an active goal pauses.
    pub(crate) fn on_interrupt(&mut self) -> Vec<GoalEffect> {
        self.phase = Phase::Idle;
        if !self.is_active() {
            return Vec::new();
        }
        self.pause("you interrupted it")
    }

    /// The session was resumed (`/resume`, `talaria -c`): an active goal comes back paused.
    pub(crate) fn on_session_resumed(&mut self) -> Vec<GoalEffect> {
        self.phase = Phase::Idle;
        if !self.is_active() {
            return Vec::new();
        }
        self.pause("the session was resumed")
    }

    /// Forget boundary work in flight; the engine stops it (its result would be ignored).
    fn abandon_boundary(&mut self) -> Vec<GoalEffect> {
        if std::mem::take(&mut self.phase) == Phase::Idle {
            Vec::new()
        } else {
            vec![GoalEffect::Abandon]
        }
    }

    fn continue_with(&mut self, prompt: String) -> Vec<GoalEffect> {
        let Some(g) = self.goal.as_mut() else { return Vec::new() };
        if g.turns_used >= g.max_turns {
            let reason = format!("its turn budget is spent ({}/{})", g.turns_used, g.max_turns);
            return self.pause(&reason);
        }
        g.turns_used += 1;
        self.phase = Phase::Idle;
        vec![GoalEffect::Save, GoalEffect::Continue { prompt }]
    }

    fn pause(&mut self, reason: &str) -> Vec<GoalEffect> {
        let Some(g) = self.goal.as_mut() else { return Vec::new() };
        g.status = GoalStatus::Paused;
        g.pause_reason = Some(reason.to_string());
        self.phase = Phase::Idle;
        let message = format!("◎ goal paused: {reason}. When ready, /goal resume continues it.");
        vec![GoalEffect::Paused { reason: reason.to_string(), message }, GoalEffect::Save]
    }
}

const NO_GOAL: &str = "no goal; set one with /goal <text>";

fn info(text: impl Into<String>) -> GoalEffect {
    GoalEffect::Notice { level: NoticeLevel::Info, text: text.into() }
}

fn error(text: impl Into<String>) -> GoalEffect {
    GoalEffect::Notice { level: NoticeLevel::Error, text: text.into() }
}

/// The first goal turn.
pub(crate) fn kickoff_prompt(goal: &str) -> String {
    format!(
        "[Standing goal set by the user]\nGoal: {goal}\n\nWork toward this goal. Take the next concrete step. If you believe the goal is complete, state so explicitly and stop. If you are blocked and need input from the user, say so clearly and stop."
    )
}

/// A goal turn after the judge said continue (DESIGN §5).
pub(crate) fn continue_prompt(goal: &str) -> String {
    format!(
        "[Continuing toward your standing goal]\nGoal: {goal}\n\nContinue working toward this goal. Take the next concrete step. If you believe the goal is complete, state so explicitly and stop. If you are blocked and need input from the user, say so clearly and stop."
    )
}

/// A goal turn after a gate failed (DESIGN §5).
pub(crate) fn gate_failed_prompt(
    goal: &str,
    cmd: &str,
    attempt: u32,
    max: u32,
    exit_code: i32,
    output: &str,
) -> String {
    let tail = tail_chars(output, GATE_TAIL_CHARS);
    // A gate that printed nothing says so instead of an empty heading.
    let output = if tail.trim().is_empty() { "Output: (none)".to_string() } else { format!("Output (tail):\n{tail}") };
    format!(
        "[Continuing toward your standing goal — a quality gate failed]\nGoal: {goal}\nThe quality gate below must pass (attempt {attempt}/{max}):\n  $ {cmd}\nExit code: {exit_code}\n{output}"
    )
}
