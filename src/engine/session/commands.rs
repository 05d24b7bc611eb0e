//! Slash commands, one small handler each. Whether a command may run now (some wait
//! until nothing runs) was decided by the scheduler before any of these is called.

use tokio_util::sync::CancellationToken;

use super::{Engine, RunningCompaction};
use crate::engine::compaction;
use crate::engine::turn::{compactor, TurnInput};
use crate::protocol::commands::{JobsCmd, SlashCommand};
use crate::protocol::{BusyMode, Event, JobAction, NoticeLevel, TurnTrigger};

impl Engine {
    pub(super) async fn run_command(&mut self, command: SlashCommand) {
        match command {
            SlashCommand::New => self.new_session().await,
            SlashCommand::Resume(None) | SlashCommand::Sessions => self.list_sessions().await,
            SlashCommand::Resume(Some(key)) => self.resume(&key).await,
            SlashCommand::Title(title) => self.set_title(title).await,
            SlashCommand::Retry => self.retry().await,
            SlashCommand::Undo(n) => self.undo(n).await,
            // The scheduler turns `/stop` into an interrupt; it never gets here.
            SlashCommand::Stop => {}
            SlashCommand::Busy(mode) => self.busy_command(mode),
            SlashCommand::Jobs(cmd) => self.jobs_command(cmd).await,
            SlashCommand::Model(None) => self.list_models(),
            SlashCommand::Model(Some(name)) => self.set_model(name),
            SlashCommand::Heartbeat(cmd) => self.heartbeat_command(&cmd).await,
            SlashCommand::Usage => self.usage(),
            SlashCommand::Compact(focus) => self.compact(focus),
            SlashCommand::Goal(cmd) => self.goal_command(&cmd).await,
            SlashCommand::Pause(reason) => self.pause(reason.as_deref()),
            SlashCommand::Unpause => self.unpause(),
        }
    }

    async fn new_session(&mut self) {
        let cwd = self.env.cwd().display().to_string();
        match self.env.store.create_session(&self.env.model, &cwd, None).await {
            Ok(id) => {
                self.env.session_id = id;
                self.title = None;
                self.queued.clear();
                crate::engine::turn::lock(&self.pending).clear();
                if let Err(e) = self.load_session().await {
                    self.notice(NoticeLevel::Error, format!("could not open the new session: {e}"));
                }
            }
            Err(e) => self.notice(NoticeLevel::Error, format!("could not create a session: {e}")),
        }
    }

    async fn resume(&mut self, key: &str) {
        match self.env.store.find_session(key).await {
            Ok(Some(s)) => {
                self.env.session_id = s.id;
                self.title = s.title;
                if let Err(e) = self.load_session().await {
                    self.notice(NoticeLevel::Error, format!("could not resume: {e}"));
                }
            }
            Ok(None) => self.notice(NoticeLevel::Error, format!("no session matches '{key}'")),
            Err(e) => self.notice(NoticeLevel::Error, format!("could not search sessions: {e}")),
        }
    }

    async fn set_title(&mut self, title: String) {
        match self.env.store.set_title(&self.env.session_id, &title).await {
            Ok(()) => {
                self.notice(NoticeLevel::Info, format!("session titled \"{title}\""));
                self.title = Some(title);
            }
            Err(e) => self.notice(NoticeLevel::Error, format!("could not set the title: {e}")),
        }
    }

    fn busy_command(&mut self, mode: Option<BusyMode>) {
        let Some(mode) = mode else {
            self.notice(
                NoticeLevel::Info,
                format!("busy mode: {} (redirect | steer | queue)", self.busy_mode.as_str()),
            );
            return;
        };
        self.busy_mode = mode;
        let saved = crate::config_edit::set_string(&self.paths.config_file, "agent", "busy_input_mode", mode.as_str());
        match saved {
            Ok(()) => self.notice(NoticeLevel::Info, format!("busy mode: {} (saved)", mode.as_str())),
            Err(e) => self.notice(NoticeLevel::Warn, format!("busy mode: {} (not saved: {e})", mode.as_str())),
        }
        self.send_status();
    }

    async fn jobs_command(&mut self, cmd: JobsCmd) {
        match cmd {
            JobsCmd::List => {
                let jobs = self.env.jobs.list().await;
                if jobs.is_empty() {
                    self.notice(NoticeLevel::Info, "no background jobs");
                } else {
                    let lines: Vec<String> = jobs
                        .iter()
                        .map(|j| format!("{}  {:<10} {}  {}", j.id, j.status.label(), j.command, j.last_line))
                        .collect();
                    self.notice(NoticeLevel::Info, lines.join("\n"));
                }
            }
            JobsCmd::Log(id) => self.job_action(id, JobAction::Log { offset: None, limit: None }),
            JobsCmd::Poll(id) => self.job_action(id, JobAction::Poll),
            JobsCmd::Kill(id) => self.job_action(id, JobAction::Kill),
        }
    }

    /// `/model`: the listing is a network request, so it runs as its own task.
    fn list_models(&self) {
        let provider = self.env.provider.clone();
        let events = self.env.events.clone();
        let model = self.env.model.clone();
        tokio::spawn(async move {
            let event = match provider.list_models().await {
                Ok(models) => {
                    Event::notice(NoticeLevel::Info, format!("model: {model} · available: {}", models.join(", ")))
                }
                Err(e) => Event::notice(NoticeLevel::Warn, format!("model: {model} · could not list models: {e}")),
            };
            events.send(event);
        });
    }

    fn set_model(&mut self, name: String) {
        self.notice(NoticeLevel::Info, format!("model for this session: {name}"));
        self.env.model = name;
        self.send_status();
    }

    fn usage(&self) {
        let priced = self.env.config.prices.find(self.env.provider.kind(), &self.env.model).is_some();
        let unpriced = if priced { "" } else { " (no price for this model in [prices]: tokens only)" };
        self.notice(
            NoticeLevel::Info,
            format!(
                "this session: {} · last turn: {} · {}{unpriced}",
                self.session_usage.describe(),
                self.last_turn_usage.describe(),
                self.meter.label()
            ),
        );
    }

    /// `/compact [focus]`: the summary request runs as its own task; Esc cancels it.
    fn compact(&mut self, focus: Option<String>) {
        self.notice(NoticeLevel::Info, "compacting older turns…");
        let history = std::mem::take(&mut self.history);
        let with = compactor(&self.env);
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        let join =
            tokio::spawn(async move { compaction::compact_history(&with, history, focus.as_deref(), &stop).await });
        self.compaction = Some(RunningCompaction { cancel, join });
    }

    async fn goal_command(&mut self, cmd: &crate::protocol::commands::GoalCmd) {
        // Nothing running that the goal must wait for. A pause or a queued message does not
        // count: the continuation waits for them in the scheduler (a goal set while paused
        // would otherwise never start).
        let idle = self.turn.is_none() && self.compaction.is_none() && !self.goal.in_boundary();
        let effects = self.goal.command(cmd, idle);
        self.perform_goal_effects(effects).await;
        if self.goal_continuation.is_some() && self.is_paused() {
            self.notice(NoticeLevel::Info, "◎ paused: the goal starts when you unpause");
        }
        self.send_status();
    }

    fn pause(&self, reason: Option<&str>) {
        match crate::engine::estop::pause(&self.paths.estop, reason) {
            Ok(_) => self.notice(
                NoticeLevel::Warn,
                "paused: no heartbeat, goal, queued message or job notice runs until /unpause",
            ),
            Err(e) => self.notice(NoticeLevel::Error, format!("could not pause: {e}")),
        }
        self.send_status();
    }

    fn unpause(&self) {
        match crate::engine::estop::unpause(&self.paths.estop) {
            Ok(true) => self.notice(NoticeLevel::Info, "unpaused"),
            Ok(false) => self.notice(NoticeLevel::Info, "not paused"),
            Err(e) => self.notice(NoticeLevel::Error, format!("could not unpause: {e}")),
        }
        self.send_status();
    }

    async fn list_sessions(&self) {
        match self.env.store.list_sessions(20).await {
            Ok(sessions) if sessions.is_empty() => self.notice(NoticeLevel::Info, "no sessions yet"),
            Ok(sessions) => {
                let lines: Vec<String> = sessions
                    .iter()
                    .map(|s| {
                        format!(
                            "{}  {:<30} {:>4} msgs  {}",
                            s.id,
                            s.title.clone().unwrap_or_else(|| "(untitled)".into()),
                            s.message_count,
                            s.first_line
                        )
                    })
                    .collect();
                self.notice(NoticeLevel::Info, format!("{}\n/resume <id|title> to open one", lines.join("\n")));
            }
            Err(e) => self.notice(NoticeLevel::Error, format!("could not list sessions: {e}")),
        }
    }

    async fn retry(&mut self) {
        match self.env.store.deactivate_last_exchanges(&self.env.session_id, 1).await {
            Ok(Some(text)) => {
                if let Err(e) = self.load_session().await {
                    self.notice(NoticeLevel::Error, format!("could not reload the session: {e}"));
                    return;
                }
                self.begin_turn(vec![TurnInput { text, display_kind: None }], TurnTrigger::Retry);
            }
            Ok(None) => self.notice(NoticeLevel::Info, "nothing to retry"),
            Err(e) => self.notice(NoticeLevel::Error, format!("could not retry: {e}")),
        }
    }

    async fn undo(&mut self, n: usize) {
        match self.env.store.deactivate_last_exchanges(&self.env.session_id, n).await {
            Ok(Some(text)) => {
                if let Err(e) = self.load_session().await {
                    self.notice(NoticeLevel::Error, format!("could not reload the session: {e}"));
                    return;
                }
                self.events().send(Event::RestoreInput { text });
                self.notice(
                    NoticeLevel::Info,
                    format!("removed the last {n} exchange(s); the message is back in the input"),
                );
            }
            Ok(None) => self.notice(NoticeLevel::Info, "nothing to undo"),
            Err(e) => self.notice(NoticeLevel::Error, format!("could not undo: {e}")),
        }
    }
}
