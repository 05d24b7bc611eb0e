//! Approvals a sub-agent asks for (DESIGN §14): a sub-agent never asks on its own; its
//! question comes here, to the parent's front end, labelled with the agent, under the
//! parent's policy (`exec` without `--yes` denies). The answer goes back as it is: the
//! sub-agent applies it (and its own session rules) itself.

use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::{lock, Approver, PromptPolicy};
use crate::protocol::{Approval, AskGround, Event};

impl Approver {
    /// Ask the parent's user what sub-agent `agent` (a job id) asks: `command` with `reason`.
    pub(crate) async fn ask_for_agent(
        &self,
        agent: &str,
        command: &str,
        reason: &str,
        grounds: Vec<AskGround>,
    ) -> Approval {
        match self.inner.policy {
            PromptPolicy::AllowUnattended => return Approval::Once,
            PromptPolicy::DenyUnattended => return Approval::Deny,
            PromptPolicy::Ask => {}
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.pending).insert(id, tx);
        self.inner.events.send(Event::ApprovalNeeded {
            id,
            command: command.to_string(),
            reason: reason.to_string(),
            grounds,
            from: Some(agent.to_string()),
        });
        tokio::select! {
            answer = rx => answer.unwrap_or(Approval::Deny),
            _ = tokio::time::sleep(self.inner.timeout) => {
                lock(&self.inner.pending).remove(&id);
                Approval::Deny
            }
        }
    }
}
