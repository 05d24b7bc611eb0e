//! Sub-agent jobs in the registry (DESIGN §14): a job whose command is `talaria __agent`
//! ([`crate::engine::agents`]). Its output is the child's JSON event stream; an approval it
//! asks for is forwarded to this talaria's approver (labelled with the job) and the answer
//! written back to its stdin; a message to it is wrapped as an inbound line; its end is
//! told with its final answer instead of an output tail.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::{lock, Job, JobsHandle, Registry};
use crate::engine::agents::{self, Inbound, APPROVAL_ANSWERED};
use crate::engine::approval::Approver;
use crate::engine::store::Store;
use crate::protocol::{AskGround, JobStatus};

/// What the registry keeps about its sub-agents' streams.
#[derive(Default)]
pub(super) struct Bridge {
    /// Who answers forwarded approvals (the engine sets it when the session starts).
    approver: std::sync::Mutex<Option<Approver>>,
    /// The unfinished last line of each sub-agent's output.
    partial: std::sync::Mutex<HashMap<u64, String>>,
    /// Approvals already forwarded or answered, by job and the child's approval id.
    seen: std::sync::Mutex<HashSet<(u64, u64)>>,
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
        self.inner.get(id).is_some_and(|j| agents::session_of(&j.command).is_some())
    }

    /// Sub-agents running now.
    pub(crate) fn running_agents(&self) -> usize {
        self.inner.all().iter().filter(|j| j.is_running() && agents::session_of(&j.command).is_some()).count()
    }

    /// Run every job under `policy` as it is (a sub-agent's parent's).
    pub(crate) fn set_sandbox_policy(&self, policy: crate::engine::sandbox::Policy) {
        *lock(&self.inner.sandbox) = policy;
    }

    /// Forward sub-agents' approvals to `approver`.
    pub(crate) fn set_agent_approver(&self, approver: Approver) {
        *lock(&self.inner.agents.approver) = Some(approver);
    }

    /// Write `line` (already a whole inbound line) to sub-agent `id`'s stdin.
    pub(crate) async fn write_agent_line(&self, id: &str, line: &str) -> Result<(), String> {
        let job = self.inner.get(id).ok_or_else(|| format!("no job {id}"))?;
        let _serial = job.stdin_lock.lock().await;
        write_fifo(job.dir.stdin(), line).await
    }

    /// Kill sub-agent `id` once it has run `limit` (its wall-clock limit).
    pub(crate) fn limit_runtime(&self, id: &str, limit: Duration) {
        let Some(job) = self.inner.get(id) else { return };
        let reg = self.inner.clone();
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

impl Registry {
    /// New output of a job: for a sub-agent, forward the approvals it asks for.
    pub(super) fn feed_agent(&self, job: &Job, text: &str) {
        if agents::session_of(&job.command).is_none() {
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
        for line in &lines {
            let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
            match event["type"].as_str() {
                Some("ApprovalNeeded") => {
                    let data = &event["data"];
                    let Some(id) = data["id"].as_u64() else { continue };
                    asked.push(Asked {
                        id,
                        command: data["command"].as_str().unwrap_or("").to_string(),
                        reason: data["reason"].as_str().unwrap_or("").to_string(),
                        grounds: serde_json::from_value(data["grounds"].clone()).unwrap_or_default(),
                    });
                }
                Some(APPROVAL_ANSWERED) => answered.extend(event["data"]["id"].as_u64()),
                _ => {}
            }
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
        let label = job.id.clone();
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

    /// The notice of a sub-agent that ended: its final answer from its session.
    pub(super) async fn agent_notice(&self, job: &Job, status: &JobStatus) -> Option<String> {
        let session = agents::session_of(&job.command)?;
        lock(&self.agents.partial).remove(&job.num);
        let answer = match &self.store {
            Some(store) => agents::final_answer(store, &session).await,
            None => None,
        };
        let max = self.config.agents.max_result_chars;
        Some(agents::notice_text(&job.id, &session, status, job.runtime(), answer.as_deref(), max))
    }
}
