//! Sub-agent jobs in the registry (DESIGN §14). A job is a sub-agent when its sub-session
//! names it in the database (`sessions.agent_job`, with `parent_session_id` the job's own
//! session) — never because of its command line. Its output is the child's JSON event
//! stream: an approval it asks for is forwarded to this talaria's approver (labelled with
//! the job) and the answer written back to its stdin; its state, last activity and spend are
//! read from the stream for the pane and `/usage`; a message to it is wrapped as an inbound
//! line; its end is told with its final answer instead of an output tail. More than
//! `agents.max_parallel` queue: their hello line waits here until one ends, and in the job's
//! directory without the keys ([`QUEUED_HELLO`]), so a `talaria -c` after a crash starts them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::{lock, Job, JobsHandle, Registry, SpawnSpec, Spawned};
use crate::engine::agents::{self, Inbound, APPROVAL_ANSWERED};
use crate::engine::approval::Approver;
use crate::engine::store::Store;
use crate::protocol::agent::{AgentInfo, AgentState};
use crate::protocol::{AskGround, Event, JobStatus, Phase};

/// What the registry keeps about its sub-agents.
#[derive(Default)]
pub(super) struct Bridge {
    /// Who answers forwarded approvals (the engine sets it when the session starts).
    approver: std::sync::Mutex<Option<Approver>>,
    /// The unfinished last line of each sub-agent's output.
    partial: std::sync::Mutex<HashMap<u64, String>>,
    /// Approvals already forwarded or answered, by job and the child's approval id.
    seen: std::sync::Mutex<HashSet<(u64, u64)>>,
    /// The jobs that are sub-agents (by number), as the pane shows them.
    agents: std::sync::Mutex<HashMap<u64, AgentInfo>>,
    /// Sub-agents waiting for a slot, oldest first.
    queue: std::sync::Mutex<VecDeque<Queued>>,
}

/// A sub-agent started while `agents.max_parallel` others worked: its child talaria waits
/// for its hello line.
struct Queued {
    num: u64,
    hello: String,
    limit: Option<Duration>,
}

/// A queued sub-agent's hello in its job directory, without the provider keys (they are
/// added again from this talaria's when it starts); removed once it was handed over.
pub(super) const QUEUED_HELLO: &str = "queued-hello.json";

/// What the agent tool hands over to start a sub-agent.
pub(crate) struct AgentStart {
    /// Its sub-session (already created, linked to the parent session).
    pub(crate) session: String,
    /// Its task, shortened (the sub-session's title).
    pub(crate) task: String,
    /// What the child is told: the task, the limits, the keys.
    pub(crate) hello: agents::Hello,
    /// Its wall-clock limit, counted from when it starts working.
    pub(crate) limit: Option<Duration>,
}

/// One approval a sub-agent asks for.
struct Asked {
    id: u64,
    command: String,
    reason: String,
    grounds: Vec<AskGround>,
}

/// A write to a sub-agent's stdin gives up after this long.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Characters of a sub-agent's last activity kept for the pane.
const ACTIVITY_CHARS: usize = 200;

impl JobsHandle {
    /// The database the job records live in (sub-agents' sessions go there too).
    pub(crate) fn store(&self) -> Option<Store> {
        self.inner.store.clone()
    }

    /// The talaria binary (what supervises jobs and what a sub-agent runs).
    pub(crate) fn talaria_exe(&self) -> Option<PathBuf> {
        self.inner.exe.clone()
    }

    /// The TALARIA_HOME this talaria uses, if it keeps everything under one: the variable, or
    /// the directory that holds both the jobs and the database (`Paths::under`).
    pub(crate) fn talaria_home(&self) -> Option<PathBuf> {
        if let Some(home) = std::env::var_os("TALARIA_HOME").filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(home));
        }
        let home = self.inner.dir.parent()?;
        let store = self.inner.store.as_ref()?;
        (store.path() == home.join("state.db")).then(|| home.to_path_buf())
    }

    /// Is job `id` a sub-agent?
    pub(crate) fn is_agent(&self, id: &str) -> bool {
        self.inner.get(id).is_some_and(|j| self.inner.agent_info(&j).is_some())
    }

    /// Every sub-agent this talaria follows, by job id (for `/usage`).
    pub(crate) fn agents(&self) -> Vec<(String, AgentInfo)> {
        let mut jobs = self.inner.all();
        jobs.sort_by_key(|j| j.num);
        jobs.iter().filter_map(|j| self.inner.agent_info(j).map(|a| (j.id.clone(), a))).collect()
    }

    /// Run every job under `policy` as it is (a sub-agent's parent's).
    pub(crate) fn set_sandbox_policy(&self, policy: crate::engine::sandbox::Policy) {
        *lock(&self.inner.sandbox) = policy;
    }

    /// Forward sub-agents' approvals to `approver`.
    pub(crate) fn set_agent_approver(&self, approver: Approver) {
        *lock(&self.inner.agents.approver) = Some(approver);
    }

    /// Start a sub-agent: spawn its child talaria, link its sub-session to the job, and hand
    /// it its hello line — now, or when one of the `agents.max_parallel` working ends.
    pub(crate) async fn spawn_agent(
        &self,
        spec: SpawnSpec,
        start: AgentStart,
    ) -> Result<(Spawned, AgentState), String> {
        let store = self.store().ok_or("cannot start a sub-agent: the session database is not available")?;
        let spawned = self.spawn(spec).await.map_err(|e| format!("cannot start the sub-agent: {e}"))?;
        let Some(job) = self.inner.get(&spawned.id) else {
            return Err("the sub-agent ended as it started".to_string());
        };
        if let Err(e) = store.set_agent_job(&start.session, job.num as i64).await {
            self.kill(&spawned.id).await;
            return Err(format!("cannot link the sub-agent's session to its job: {e}"));
        }
        let max = self.inner.config.agents.max_parallel.max(1);
        let info = AgentInfo { session: start.session, task: start.task, ..Default::default() };
        let state = {
            let mut agents = lock(&self.inner.agents.agents);
            let working =
                agents.values().filter(|a| matches!(a.state, AgentState::Working | AgentState::Waiting)).count();
            let state = if working < max { AgentState::Working } else { AgentState::Queued };
            agents.insert(job.num, AgentInfo { state, ..info });
            state
        };
        let line = hello_line(&start.hello)?;
        if state == AgentState::Queued {
            // Kept on disk too (without the keys): a crash of this talaria must not lose it.
            let kept = agents::Hello { keys: Default::default(), ..start.hello };
            let text = hello_line(&kept)?;
            let written = super::jobdir::create_new(&job.dir.path.join(QUEUED_HELLO))
                .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()));
            if let Err(e) = written {
                tracing::warn!(id = %job.id, error = %e, "cannot keep the queued sub-agent's task on disk");
            }
            lock(&self.inner.agents.queue).push_back(Queued { num: job.num, hello: line, limit: start.limit });
            self.inner.publish_agent(&job);
            return Ok((spawned, state));
        }
        self.inner.publish_agent(&job);
        if let Err(e) = self.inner.begin_agent(&job, &line, start.limit).await {
            self.kill(&spawned.id).await;
            return Err(format!("cannot start the sub-agent: {e}"));
        }
        Ok((spawned, state))
    }
}

/// The hello as the child reads it: one JSON line.
fn hello_line(hello: &agents::Hello) -> Result<String, String> {
    let mut line = serde_json::to_string(hello).map_err(|e| e.to_string())?;
    line.push('\n');
    Ok(line)
}

async fn write_fifo(path: PathBuf, line: &str) -> Result<(), String> {
    let write = async {
        let mut pipe = tokio::net::unix::pipe::OpenOptions::new().open_sender(&path)?;
        pipe.write_all(line.as_bytes()).await?;
        pipe.flush().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("cannot write to the sub-agent: {e}")),
        Err(_) => Err("the sub-agent is not reading its input".to_string()),
    }
}

/// How one line of a sub-agent's stream changes what the pane shows of it.
fn progress(info: &mut AgentInfo, event: &Event) -> bool {
    let before = (info.state, info.activity.clone(), info.usage);
    match event {
        Event::TurnStarted { .. } => info.state = AgentState::Working,
        Event::Phase { phase: Phase::Paused } => {
            info.state = AgentState::Waiting;
            info.activity = "paused (/unpause resumes it)".to_string();
        }
        Event::Phase { phase: Phase::Turn } if info.state == AgentState::Waiting => info.state = AgentState::Working,
        Event::ToolStarted { name, summary, .. } => {
            info.activity = one_line(&format!("{name}: {summary}"));
        }
        Event::AssistantDone { text, .. } if !text.trim().is_empty() => info.activity = one_line(text),
        Event::ApprovalNeeded { command, .. } => {
            info.state = AgentState::Waiting;
            info.activity = one_line(&format!("asks you to approve: {command}"));
        }
        Event::Usage { .. } => {
            let Some((tokens, cost_usd)) = event.spent() else { return false };
            info.usage.add(&tokens);
            if let Some(cost) = cost_usd {
                info.cost_usd = Some(info.cost_usd.unwrap_or(0.0) + cost);
            }
            return true;
        }
        _ => {}
    }
    before != (info.state, info.activity.clone(), info.usage)
}

fn one_line(text: &str) -> String {
    let line = crate::text::sanitize_for_display(text);
    let line = line.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("").to_string();
    crate::text::truncate_for_model(&line, ACTIVITY_CHARS)
}

impl Registry {
    /// The sub-agent job `job` is, if it is one.
    pub(super) fn agent_info(&self, job: &Job) -> Option<AgentInfo> {
        lock(&self.agents.agents).get(&job.num).cloned()
    }

    /// Re-attached job `job`: a sub-agent when its sub-session says so.
    pub(super) async fn recognise_agent(&self, job: &Job) {
        let Some(store) = &self.store else { return };
        match store.agent_of_job(job.num as i64, &job.session_id).await {
            Ok(Some((session, task))) => {
                let mut info = AgentInfo { session, task, ..Default::default() };
                // Queued when the talaria that started it went away: it queues again.
                if let Some(line) = self.queued_hello(job) {
                    info.state = AgentState::Queued;
                    let limit = self.config.agents.max_runtime_s;
                    let limit = (limit > 0).then(|| Duration::from_secs(limit));
                    lock(&self.agents.queue).push_back(Queued { num: job.num, hello: line, limit });
                }
                lock(&self.agents.agents).insert(job.num, info);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, id = %job.id, "cannot read the sub-agent link"),
        }
    }

    /// The hello of a queued sub-agent kept in its running job's directory, with this
    /// talaria's keys put back.
    fn queued_hello(&self, job: &Job) -> Option<String> {
        if !job.is_running() {
            return None;
        }
        let mut hello: agents::Hello = super::jobdir::read_json(&job.dir.path.join(QUEUED_HELLO))?;
        hello.keys = crate::secrets::held().into_iter().collect();
        hello_line(&hello).ok()
    }

    /// Tell the front end what sub-agent `job` is doing now.
    fn publish_agent(&self, job: &Job) {
        if let Some(agent) = self.agent_info(job) {
            self.events.send(Event::AgentUpdated { id: job.id.clone(), agent: Box::new(agent) });
        }
    }

    /// Hand a sub-agent its hello line: it starts working.
    async fn begin_agent(self: &Arc<Self>, job: &Arc<Job>, hello: &str, limit: Option<Duration>) -> Result<(), String> {
        {
            let _serial = job.stdin_lock.lock().await;
            write_fifo(job.dir.stdin(), hello).await?;
        }
        let _ = std::fs::remove_file(job.dir.path.join(QUEUED_HELLO));
        if let Some(limit) = limit {
            self.limit_runtime(job.clone(), limit);
        }
        Ok(())
    }

    /// Kill sub-agent `job` once it has worked `limit` (its wall-clock limit).
    fn limit_runtime(self: &Arc<Self>, job: Arc<Job>, limit: Duration) {
        let reg = self.clone();
        tokio::spawn(async move {
            let mut done = job.done.subscribe();
            tokio::select! {
                _ = async { drop(done.wait_for(Option::is_some).await) } => {}
                _ = job.forgotten.cancelled() => {}
                _ = tokio::time::sleep(limit) => {
                    tracing::info!(id = %job.id, "sub-agent reached its wall-clock limit");
                    reg.kill_job_because(&job, "wall-clock limit").await;
                }
            }
        });
    }

    /// A sub-agent ended: queued ones start while there is room.
    pub(super) async fn start_queued_agents(self: &Arc<Self>) {
        let max = self.config.agents.max_parallel.max(1);
        loop {
            let next = {
                let mut agents = lock(&self.agents.agents);
                let working =
                    agents.values().filter(|a| matches!(a.state, AgentState::Working | AgentState::Waiting)).count();
                if working >= max {
                    return;
                }
                let mut queue = lock(&self.agents.queue);
                let Some(next) = queue.pop_front() else { return };
                match agents.get_mut(&next.num) {
                    Some(info) if info.state == AgentState::Queued => info.state = AgentState::Working,
                    _ => continue,
                }
                next
            };
            let Some(job) = lock(&self.jobs).get(&next.num).cloned() else { continue };
            if !job.is_running() {
                continue;
            }
            self.publish_agent(&job);
            if let Err(e) = self.begin_agent(&job, &next.hello, next.limit).await {
                tracing::warn!(id = %job.id, error = %e, "cannot start a queued sub-agent");
                self.kill_job_because(&job, "could not start").await;
            }
        }
    }

    /// New output of a job: for a sub-agent, follow its progress and forward the approvals
    /// it asks for.
    pub(super) fn feed_agent(&self, job: &Job, text: &str) {
        if self.agent_info(job).is_none() {
            return;
        }
        let lines: Vec<String> = {
            let mut partial = lock(&self.agents.partial);
            let buf = partial.entry(job.num).or_default();
            buf.push_str(text);
            let Some(end) = buf.rfind('\n') else { return };
            let complete: String = buf.drain(..=end).collect();
            complete.lines().map(str::to_string).collect()
        };
        let mut asked = Vec::new();
        let mut answered = Vec::new();
        let mut changed = false;
        for line in &lines {
            if let Ok(event) = serde_json::from_str::<Event>(line) {
                if let Some(info) = lock(&self.agents.agents).get_mut(&job.num) {
                    changed |= progress(info, &event);
                }
                if let Event::ApprovalNeeded { id, command, reason, grounds, .. } = event {
                    asked.push(Asked { id, command, reason, grounds });
                }
                continue;
            }
            let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
            if event["type"].as_str() == Some(APPROVAL_ANSWERED) {
                answered.extend(event["data"]["id"].as_u64());
                if let Some(info) = lock(&self.agents.agents).get_mut(&job.num) {
                    changed |= info.state != AgentState::Working;
                    info.state = AgentState::Working;
                }
            }
        }
        if changed {
            self.publish_agent(job);
        }
        let fresh: Vec<Asked> = {
            let mut seen = lock(&self.agents.seen);
            for id in &answered {
                seen.insert((job.num, *id));
            }
            asked.into_iter().filter(|a| seen.insert((job.num, a.id))).collect()
        };
        if fresh.is_empty() {
            return;
        }
        let approver = lock(&self.agents.approver).clone();
        let stdin = job.dir.stdin();
        // The name the pane shows it by (`agent_3`), not its job id.
        let label = format!("agent_{}", job.num);
        for ask in fresh {
            let approver = approver.clone();
            let stdin = stdin.clone();
            let label = label.clone();
            tokio::spawn(async move {
                let decision = match &approver {
                    Some(approver) => approver.ask_for_agent(&label, &ask.command, &ask.reason, ask.grounds).await,
                    None => crate::protocol::Approval::Deny,
                };
                let line = agents::inbound_line(&Inbound::Approve { id: ask.id, decision });
                if let Err(e) = write_fifo(stdin, &line).await {
                    tracing::warn!(id = %label, error = %e, "cannot answer the sub-agent's approval");
                }
            });
        }
    }

    /// A sub-agent's job ended: it is done (and leaves the queue).
    pub(super) fn agent_done(&self, job: &Job) {
        let changed = match lock(&self.agents.agents).get_mut(&job.num) {
            Some(info) if info.state != AgentState::Done => {
                info.state = AgentState::Done;
                true
            }
            _ => false,
        };
        lock(&self.agents.queue).retain(|q| q.num != job.num);
        lock(&self.agents.partial).remove(&job.num);
        if changed {
            self.publish_agent(job);
        }
    }

    /// The final answer of sub-agent `job`, capped at `agents.max_result_chars` (None when
    /// it is no sub-agent or said nothing).
    pub(super) async fn agent_answer(&self, job: &Job) -> Option<String> {
        let agent = self.agent_info(job)?;
        let answer = agents::final_answer(self.store.as_ref()?, &agent.session).await?;
        Some(crate::text::truncate_for_model(answer.trim(), self.config.agents.max_result_chars.max(1)))
    }

    /// The notice of a sub-agent that ended: its final answer from its session.
    pub(super) async fn agent_notice(&self, job: &Job, status: &JobStatus) -> Option<String> {
        let agent = self.agent_info(job)?;
        let answer = match &self.store {
            Some(store) => agents::final_answer(store, &agent.session).await,
            None => None,
        };
        let max = self.config.agents.max_result_chars;
        Some(agents::notice_text(&job.id, &agent.session, status, job.runtime(), answer.as_deref(), max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_stream_moves_the_state_and_counts_the_spend() {
        let mut info = AgentInfo { state: AgentState::Working, ..Default::default() };
        let tool = Event::ToolStarted { call_id: "c".into(), name: "terminal".into(), summary: "cargo test\nx".into() };
        assert!(progress(&mut info, &tool));
        assert_eq!(info.activity, "terminal: cargo test");
        let ask = Event::ApprovalNeeded {
            id: 1,
            command: "rm -rf x".into(),
            reason: String::new(),
            grounds: vec![],
            from: None,
        };
        assert!(progress(&mut info, &ask));
        assert_eq!(info.state, AgentState::Waiting);
        assert!(progress(&mut info, &Event::Phase { phase: Phase::Turn }));
        assert_eq!(info.state, AgentState::Working);
        let usage = Event::Usage {
            prompt_tokens: 100,
            completion_tokens: 7,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
            cost_usd: Some(0.5),
        };
        progress(&mut info, &usage);
        progress(&mut info, &usage);
        assert_eq!((info.usage.prompt_tokens, info.usage.completion_tokens, info.cost_usd), (200, 14, Some(1.0)));
        assert!(!progress(&mut info, &Event::AssistantDelta("x".into())), "deltas change nothing");
    }
}
