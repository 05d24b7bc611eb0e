//! What the goal looks like to a person: the status-line row, `/goal status`, the gate list.

use super::{Goal, GoalMachine, GoalStatus, Phase, NO_GOAL, ROW_TEXT_CHARS};

impl GoalMachine {
    /// The status-line row: `goal 3/20 · gate 1/2 ✗ · fix the flaky…`; None without a goal.
    pub fn row(&self) -> Option<String> {
        let g = self.live()?;
        let head = match g.status {
            GoalStatus::Active => format!("goal {}/{}", g.turns_used, g.max_turns),
            GoalStatus::Paused => format!("goal paused {}/{}", g.turns_used, g.max_turns),
            GoalStatus::Achieved => "goal ✓".to_string(),
            GoalStatus::Cleared => return None,
        };
        let mut parts = vec![head];
        if let Some(gates) = self.gates_summary(g) {
            parts.push(gates);
        }
        let text: String = g.text.split_whitespace().collect::<Vec<_>>().join(" ");
        let short = if text.chars().count() > ROW_TEXT_CHARS {
            format!("{}…", text.chars().take(ROW_TEXT_CHARS - 1).collect::<String>().trim_end())
        } else {
            text
        };
        parts.push(short);
        Some(parts.join(" · "))
    }

    fn gates_summary(&self, g: &Goal) -> Option<String> {
        let n = g.gates.len();
        if n == 0 {
            return None;
        }
        if let Phase::Gating { cmd, .. } = &self.phase {
            if let Some(pos) = g.gates.iter().position(|gate| &gate.cmd == cmd) {
                return Some(format!("gate {}/{n} …", pos + 1));
            }
        }
        if let Some(pos) = g.gates.iter().position(|gate| gate.last.as_ref().is_some_and(|l| !l.passed)) {
            return Some(format!("gate {}/{n} ✗", pos + 1));
        }
        if g.gates.iter().all(|gate| gate.last.as_ref().is_some_and(|l| l.passed)) {
            return Some("gate ✓".to_string());
        }
        Some(format!("{n} gate{}", if n == 1 { "" } else { "s" }))
    }

    /// `/goal status`.
    pub fn status_text(&self) -> String {
        let Some(g) = self.live() else { return NO_GOAL.to_string() };
        let mut lines = vec![format!("◎ goal ({}): {}", status_word(g.status), g.text)];
        lines.push(format!("  turns {}/{}", g.turns_used, g.max_turns));
        if let Some(reason) = &g.pause_reason {
            lines.push(format!("  paused because {reason} — /goal resume continues it"));
        }
        if let Some(v) = &g.last_verdict {
            lines.push(format!("  last judge verdict: {v}"));
        }
        lines.push(gate_list(g, self.max_retries()));
        lines.join("\n")
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

pub(super) fn gate_list(g: &Goal, max: u32) -> String {
    if g.gates.is_empty() {
        return "  no gates; add one with /goal gate add <cmd>".to_string();
    }
    let mut lines = vec!["  gates:".to_string()];
    for (i, gate) in g.gates.iter().enumerate() {
        let state = match &gate.last {
            None => "not run yet".to_string(),
            Some(l) if l.passed => "✓ passed".to_string(),
            Some(l) if l.timed_out => format!("✗ timed out (attempt {}/{max})", gate.attempts),
            Some(l) => format!("✗ exit {} (attempt {}/{max})", l.exit_code, gate.attempts),
        };
        lines.push(format!("    {}. $ {} — {state}", i + 1, gate.cmd));
    }
    lines.join("\n")
}
