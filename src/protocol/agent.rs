//! A sub-agent as the front ends show it (DESIGN §14): the Background jobs pane labels an
//! agent job with its state and task, `/usage` and the exit summary count its tokens.

use serde::{Deserialize, Serialize};

use super::usage::Usage;

/// What a sub-agent is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentState {
    /// Started while `agents.max_parallel` others ran: it starts when one ends.
    Queued,
    /// Its turn runs (the model or its tools).
    #[default]
    Working,
    /// Its turn waits: for an approval the parent's user must give, or for `/unpause`.
    Waiting,
    /// It has ended (its job's status says how).
    Done,
}

impl AgentState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AgentState::Queued => "queued",
            AgentState::Working => "working",
            AgentState::Waiting => "waiting",
            AgentState::Done => "done",
        }
    }
}

/// A job that is a sub-agent: its sub-session, task and progress.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AgentInfo {
    /// The sub-session it works in (linked to the parent's in the database).
    pub session: String,
    /// Its task, shortened (the sub-session's title).
    pub task: String,
    pub state: AgentState,
    /// The last thing it did, one line ("terminal: cargo test", its last answer).
    #[serde(default)]
    pub activity: String,
    /// Tokens its model calls used so far.
    #[serde(default)]
    pub usage: Usage,
    /// Dollars of its priced calls; None when none was priced.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

impl AgentInfo {
    /// `"add tests for …"`: the task, quoted, in at most `max` characters.
    pub(crate) fn short_task(&self, max: usize) -> String {
        let task = self.task.trim();
        if task.chars().count() + 2 <= max {
            return format!("\"{task}\"");
        }
        let cut: String = task.chars().take(max.saturating_sub(4).max(1)).collect();
        format!("\"{} …\"", cut.trim_end())
    }

    /// Its spend as `/usage` and the exit summary say it.
    pub(crate) fn spend(&self) -> super::usage::Spend {
        super::usage::Spend {
            usage: self.usage,
            cost_usd: self.cost_usd.unwrap_or(0.0),
            priced_calls: u32::from(self.cost_usd.is_some()),
            unpriced_calls: 0,
        }
    }
}

/// The exit summary after "This run: ": its own spend, then on lines of their own each
/// sub-agent's and all together.
pub(crate) fn spend_summary(main: &super::usage::Spend, agents: &[(String, AgentInfo)]) -> String {
    let mut text = main.describe();
    let counted: Vec<&(String, AgentInfo)> = agents.iter().filter(|(_, a)| !a.usage.is_empty()).collect();
    if counted.is_empty() {
        return text;
    }
    let mut total = *main;
    for (id, agent) in &counted {
        let spend = agent.spend();
        text.push_str(&format!("\n  sub-agent {id} {}: {}", agent.short_task(40), spend.describe()));
        total.usage.add(&spend.usage);
        total.cost_usd += spend.cost_usd;
        total.priced_calls += spend.priced_calls;
    }
    text.push_str(&format!("\n  with its {} sub-agent(s): {}", counted.len(), total.describe()));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_task_is_quoted_and_shortened() {
        let info = AgentInfo { task: "add tests for the parser and the lexer".into(), ..Default::default() };
        assert_eq!(info.short_task(18), "\"add tests for …\"");
        assert_eq!(info.short_task(18).chars().count(), 17);
        assert_eq!(info.short_task(80), "\"add tests for the parser and the lexer\"");
    }

    #[test]
    fn the_summary_counts_each_sub_agent_and_the_sum() {
        let main = super::super::usage::Spend { usage: Usage::tokens(1000, 50), ..Default::default() };
        let agent =
            |p, c, task: &str| AgentInfo { usage: Usage::tokens(p, c), task: task.into(), ..Default::default() };
        let agents = vec![
            ("job_3".to_string(), agent(300, 20, "echo alpha")),
            ("job_4".to_string(), agent(0, 0, "never ran")),
            ("job_5".to_string(), agent(200, 10, "echo beta")),
        ];
        assert_eq!(
            spend_summary(&main, &agents),
            "1,000 in / 50 out\n  sub-agent job_3 \"echo alpha\": 300 in / 20 out\n  \
             sub-agent job_5 \"echo beta\": 200 in / 10 out\n  with its 2 sub-agent(s): 1,500 in / 80 out"
        );
        assert_eq!(spend_summary(&main, &[]), "1,000 in / 50 out");
    }
}
