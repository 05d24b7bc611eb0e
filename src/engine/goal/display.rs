//! What the goal looks like to a front end: `GoalInfo`, the data `present` formats for the
//! status line, `/goal status` and `/goal gate list`.

use super::{GoalMachine, GoalStatus, Phase};
use crate::protocol::{GateInfo, GateRun, GoalInfo, GoalState};

impl GoalMachine {
    /// The goal and its gates; None when there has never been one. A cleared goal whose
    /// gates wait for the next one is `GoalState::Unset`.
    pub(crate) fn info(&self) -> Option<GoalInfo> {
        let g = self.goal.as_ref()?;
        let state = match g.status {
            GoalStatus::Active => GoalState::Active,
            GoalStatus::Paused => GoalState::Paused,
            GoalStatus::Achieved => GoalState::Achieved,
            GoalStatus::Cleared => GoalState::Unset,
        };
        let running_gate = match &self.phase {
            Phase::Gating { cmd, .. } => g.gates.iter().position(|gate| &gate.cmd == cmd),
            Phase::Idle | Phase::Fingerprinting { .. } | Phase::Judging => None,
        };
        let gates = g
            .gates
            .iter()
            .map(|gate| GateInfo {
                cmd: gate.cmd.clone(),
                attempts: gate.attempts,
                last: gate.last.as_ref().map(|l| GateRun {
                    passed: l.passed,
                    timed_out: l.timed_out,
                    exit_code: l.exit_code,
                }),
            })
            .collect();
        Some(GoalInfo {
            text: g.text.clone(),
            state,
            turns_used: g.turns_used,
            max_turns: g.max_turns,
            pause_reason: g.pause_reason.clone(),
            last_verdict: g.last_verdict.clone(),
            gates,
            gate_max_retries: self.max_retries(),
            running_gate,
        })
    }
}

pub(super) fn status_word(s: GoalStatus) -> &'static str {
    match s {
        GoalStatus::Active => "active",
        GoalStatus::Paused => "paused",
        GoalStatus::Achieved => "achieved",
        GoalStatus::Cleared => "cleared",
    }
}
