//! Job output between two frames, coalesced: the jobs pane and an open log view show one
//! state a frame, so however often the jobs print, the app applies at most one update per
//! job per frame. Every other engine event is applied at once and in order — the pending
//! job output goes in before any event that could depend on it (a job's end, a new list).

use crate::protocol::{Event, JobStatus};

/// One job's newest state since the last frame.
#[derive(Debug, Clone, PartialEq)]
struct PendingJob {
    id: String,
    status: JobStatus,
    /// The newest tail that shows something (an update with a blank tail keeps the row's
    /// last line, as applying it would).
    tail: String,
}

/// Job updates waiting for the next frame, the newest per job, in the order the jobs
/// first spoke.
#[derive(Debug, Default)]
pub struct JobOutputBatch {
    jobs: Vec<PendingJob>,
    /// Updates taken in since the batch was made / updates given out (for the stats line).
    pub received: u64,
    pub applied: u64,
}

impl JobOutputBatch {
    /// Take `event` in. `Some` hands an event back to apply now: everything that is not a
    /// job's output update. Before applying it the caller applies [`JobOutputBatch::take`]
    /// when [`needs_flush`] says the event may depend on the jobs' state.
    pub fn offer(&mut self, event: Event) -> Option<Event> {
        let Event::JobUpdated { id, status, tail } = event else { return Some(event) };
        self.received += 1;
        match self.jobs.iter_mut().find(|j| j.id == id) {
            Some(job) => {
                job.status = status;
                if !tail.trim().is_empty() {
                    job.tail = tail;
                }
            }
            None => self.jobs.push(PendingJob { id, status, tail }),
        }
        None
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The coalesced updates to apply before a frame (or before an event that needs them).
    pub fn take(&mut self) -> Vec<Event> {
        self.applied += self.jobs.len() as u64;
        self.jobs.drain(..).map(|j| Event::JobUpdated { id: j.id, status: j.status, tail: j.tail }).collect()
    }
}

/// Whether the job output waiting must be applied before `event`: true for anything
/// about jobs or the session they belong to; false for the high-rate events of a turn
/// (the model's words, a foreground command's output), which never read the jobs pane.
pub fn needs_flush(event: &Event) -> bool {
    match event {
        Event::AssistantDelta(_) | Event::ReasoningDelta(_) | Event::ToolOutput { .. } | Event::JobUpdated { .. } => {
            false
        }
        Event::Usage { .. } | Event::Context { .. } | Event::Status(_) | Event::NetworkConnection(_) => false,
        Event::SessionReady { .. }
        | Event::EarlierHistory { .. }
        | Event::TurnStarted { .. }
        | Event::UserMessage { .. }
        | Event::PendingChanged { .. }
        | Event::Phase { .. }
        | Event::RestoreInput { .. }
        | Event::AssistantDone { .. }
        | Event::ToolStarted { .. }
        | Event::ToolFinished { .. }
        | Event::ApprovalNeeded { .. }
        | Event::JobStarted { .. }
        | Event::AgentUpdated { .. }
        | Event::JobFinished { .. }
        | Event::JobLog { .. }
        | Event::WatchMatched { .. }
        | Event::JobWatches { .. }
        | Event::TurnFinished { .. }
        | Event::Notice { .. }
        | Event::McpStatus { .. }
        | Event::JobList { .. }
        | Event::TurnChanges { .. }
        | Event::RewindPoints { .. }
        | Event::RewindPreview(_)
        | Event::Diff { .. }
        | Event::SessionList { .. }
        | Event::HeartbeatStatus { .. }
        | Event::GoalStatus { .. }
        | Event::SessionChoices { .. }
        | Event::JobsKilled { .. }
        | Event::ShutdownComplete => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn update(id: &str, tail: &str) -> Event {
        Event::JobUpdated { id: id.into(), status: JobStatus::Running, tail: tail.into() }
    }

    #[test]
    fn many_updates_of_a_job_between_two_frames_become_one_with_the_newest_tail() {
        let mut batch = JobOutputBatch::default();
        for i in 0..500 {
            assert_eq!(batch.offer(update("job_1", &format!("line {i}\n"))), None);
        }
        assert_eq!(batch.take(), vec![update("job_1", "line 499\n")]);
        assert!(batch.is_empty());
        assert_eq!((batch.received, batch.applied), (500, 1));
    }

    #[test]
    fn each_job_keeps_its_own_newest_state_in_the_order_they_first_spoke() {
        let mut batch = JobOutputBatch::default();
        for i in 0..100 {
            for job in ["job_2", "job_1", "job_3"] {
                batch.offer(update(job, &format!("{job} {i}")));
            }
        }
        let exited = Event::JobUpdated { id: "job_1".into(), status: JobStatus::Exited(0), tail: "  \n".into() };
        batch.offer(exited);
        let taken = batch.take();
        let want = vec![
            update("job_2", "job_2 99"),
            // The newest status, with the newest tail that shows something.
            Event::JobUpdated { id: "job_1".into(), status: JobStatus::Exited(0), tail: "job_1 99".into() },
            update("job_3", "job_3 99"),
        ];
        assert_eq!(taken, want);
    }

    #[test]
    fn other_events_pass_through_and_those_about_jobs_ask_for_the_output_first() {
        let mut batch = JobOutputBatch::default();
        let delta = Event::AssistantDelta("words".into());
        assert_eq!(batch.offer(delta.clone()), Some(delta.clone()));
        assert!(!needs_flush(&delta), "the model's words do not wait for, nor flush, job output");
        let finished = Event::JobFinished { id: "job_1".into(), status: JobStatus::Exited(0) };
        assert!(needs_flush(&finished), "a job's end comes after its last output");
        assert!(batch.is_empty());
    }
}
