//! Opening a session: which one, what the front end shows of it first, and what the model
//! gets of it (repaired, with the input that was pending when talaria last stopped).

use std::path::Path;

use super::{Engine, EngineOptions};
use crate::config::Config;
use crate::engine::approval::PromptPolicy;
use crate::engine::llm::ChatMessage;
use crate::engine::scheduler::Input;
use crate::engine::store::OmittedRows;
use crate::engine::{history, instructions};
use crate::protocol::{Event, NoticeLevel};

pub(crate) const SYSTEM_PROMPT: &str = include_str!("../../../assets/system_prompt.md");

/// Stored messages a transcript page holds: what a resumed session shows first, and what
/// each `Op::LoadEarlier` adds above it.
pub const HISTORY_PAGE: usize = 400;

/// Which session to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionChoice {
    New,
    /// The most recent session started in this working directory (a new one if none).
    Continue,
    /// The same, passing over sessions `talaria exec` started (`talaria -c`).
    ContinueInteractive,
    /// By id, id prefix or title.
    Resume(String),
}

/// The session `opts` asks for (created when there is none): its id and title.
pub(super) async fn open_session(opts: &EngineOptions, cwd: &Path) -> anyhow::Result<(String, Option<String>)> {
    let cwd_text = cwd.display().to_string();
    let store = &opts.store;
    let existing = match &opts.session {
        SessionChoice::New => None,
        SessionChoice::Continue => store.latest_in_cwd(&cwd_text).await?,
        SessionChoice::ContinueInteractive => store.latest_interactive_in_cwd(&cwd_text).await?,
        SessionChoice::Resume(key) => Some(
            store
                .find_session(key)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no session matches '{key}'; `talaria sessions list` shows them"))?,
        ),
    };
    Ok(match existing {
        Some(s) => (s.id, s.title),
        None => {
            let id = store.create_session(&opts.model, &cwd_text, None).await?;
            // A front end that cannot ask the user is `exec`: `talaria -c` passes over it.
            if opts.approval_policy != PromptPolicy::Ask {
                store.mark_headless(&id).await?;
            }
            (id, None)
        }
    })
}

/// Give the pages freed after reading a long session back to the system: the rows and
/// their copies were tens of MiB that glibc would otherwise keep for the process.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the kernel; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub(super) fn system_prompt(config: &Config, cwd: &Path, files: &[instructions::InstructionFile]) -> String {
    let mut prompt = SYSTEM_PROMPT.trim_end().to_string();
    prompt.push_str(&format!("\n\nWorking directory: {}\n", cwd.display()));
    let section = instructions::system_prompt_section(files);
    if !section.is_empty() {
        prompt.push('\n');
        prompt.push_str(&section);
        prompt.push('\n');
    }
    if !config.agent.system_prompt_extra.trim().is_empty() {
        prompt.push('\n');
        prompt.push_str(config.agent.system_prompt_extra.trim());
        prompt.push('\n');
    }
    prompt
}

impl Engine {
    /// Show the session, then load what the model needs of it (both at once, for commands
    /// that switch sessions; at start-up `start` sends the first part before the rest).
    pub(super) async fn load_session(&mut self) -> anyhow::Result<Vec<Input>> {
        self.show_session().await?;
        self.load_context().await
    }

    /// The end of the session for the front end: one page of history, the rest on request
    /// (`Op::LoadEarlier`), so a long session is on screen before it is read whole.
    pub(super) async fn show_session(&mut self) -> anyhow::Result<()> {
        let cwd_text = self.env.cwd().display().to_string();
        let input_history = self.env.store.history_list(&cwd_text, 500).await.unwrap_or_default();
        self.send_session_ready(input_history).await
    }

    async fn send_session_ready(&mut self, input_history: Vec<String>) -> anyhow::Result<()> {
        let page = self.env.store.load_page(&self.env.session_id, None, HISTORY_PAGE).await?;
        let fates = self.env.jobs.fates(&self.env.session_id).await;
        let items = history::to_items(&page.messages, &self.env.registry, &fates);
        self.events().send(Event::SessionReady {
            session_id: self.env.session_id.clone(),
            title: self.title.clone(),
            model: self.env.model.clone(),
            provider: self.provider_label.clone(),
            demo: self.demo,
            cwd: self.env.cwd().display().to_string(),
            busy_mode: self.scheduler.busy_mode(),
            history: items,
            input_history,
            earlier: page.earlier,
        });
        Ok(())
    }

    /// `Op::LoadEarlier`: the page of history before seq `before`.
    pub(super) async fn send_earlier(&mut self, before: i64) {
        match self.env.store.load_page(&self.env.session_id, Some(before), HISTORY_PAGE).await {
            Ok(page) => {
                let fates = self.env.jobs.fates(&self.env.session_id).await;
                let items = history::to_items(&page.messages, &self.env.registry, &fates);
                self.events().send(Event::EarlierHistory { items, earlier: page.earlier });
            }
            Err(e) => self.notice(NoticeLevel::Error, format!("cannot load earlier messages: {e}")),
        }
    }

    /// The conversation for the model (repaired where a crash left a tool call without its
    /// result), the pending input, instructions, goal and heartbeat. What the scheduler must
    /// learn of the session's goal comes back for the caller to feed it.
    pub(super) async fn load_context(&mut self) -> anyhow::Result<Vec<Input>> {
        let (history, omitted, fillers) = self.read_context().await?;
        for filler in &fillers {
            crate::engine::turn::persist(&self.env, filler, None).await;
        }
        self.history = history;
        self.omitted = omitted;
        if !fillers.is_empty() {
            // The transcript was sent before the repair: send it again with the fillers.
            self.send_session_ready(Vec::new()).await?;
        }
        let mut all = crate::engine::turn::fixed_context(&self.env);
        all.extend_from_slice(&self.history);
        self.meter.reset_with(&all, self.omitted.map_or(0, |o| o.tokens));
        drop(all);
        release_freed_memory();
        self.restore_pending().await;
        if !self.instruction_files.is_empty() {
            self.notice(NoticeLevel::Info, instructions::describe(&self.instruction_files));
        }
        let inputs = self.load_standing().await;
        crate::engine::turn::send_context(&self.env, &self.meter);
        self.send_status();
        Ok(inputs)
    }

    /// Messages typed but not delivered before talaria last stopped go back into the input.
    async fn restore_pending(&mut self) {
        let key = self.pending_key();
        let Ok(Some(saved)) = self.env.store.meta_get(&key).await else { return };
        if let Ok(messages) = serde_json::from_str::<Vec<String>>(&saved) {
            if !messages.is_empty() {
                self.events().send(Event::RestoreInput { text: messages.join("\n\n") });
                self.notice(NoticeLevel::Info, "messages you typed before talaria stopped are back in the input");
            }
        }
        let _ = self.env.store.meta_delete(&key).await;
    }

    /// What the model gets of this session, read from the database: the messages from the
    /// last compaction on, repaired (with the fillers to store), and, when they are more
    /// than fit the window, only their end: the rest stays there (`omitted`) for the next
    /// compaction to summarise. An unknown window (0) reads them all.
    pub(super) async fn read_context(
        &self,
    ) -> anyhow::Result<(Vec<ChatMessage>, Option<OmittedRows>, Vec<ChatMessage>)> {
        let window = self.env.config.model.context_window;
        let budget = (window > 0).then(|| {
            let fixed = crate::engine::context::estimate_tokens(&crate::engine::turn::fixed_context(&self.env));
            // What may be sent before a compaction is due; at least the last turn is read.
            let threshold = (window as f64 * self.env.config.agent.compact_at.clamp(0.0, 1.0)) as u64;
            threshold.saturating_sub(fixed).max(1)
        });
        let rows = self.env.store.load_context(&self.env.session_id, budget).await?;
        let history: Vec<ChatMessage> = rows.messages.iter().filter_map(history::to_chat).collect();
        let (history, fillers) = history::repair(history);
        Ok((history, rows.omitted, fillers))
    }

    /// Read the context again after a task that held it crashed.
    pub(super) async fn reload_context(&mut self) {
        (self.history, self.omitted) = match self.read_context().await {
            Ok((history, omitted, _)) => (history, omitted),
            Err(_) => (Vec::new(), None),
        };
    }
}
