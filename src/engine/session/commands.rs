//! Slash commands, one small handler each. Whether a command may run now (some wait
//! until nothing runs) was decided by the scheduler before any of these is called.

use tokio_util::sync::CancellationToken;

use super::{Engine, RunningCompaction};
use crate::engine::compaction;
use crate::engine::scheduler::{Input, TurnInput};
use crate::engine::turn::compactor;
use crate::protocol::commands::{JobsCmd, McpCmd, SlashCommand};
use crate::protocol::{BusyMode, Event, JobAction, NoticeLevel, SessionInfo, TurnTrigger};

impl Engine {
    /// Carry out a command the scheduler let through; what the scheduler must learn of it
    /// (the goal of a session opened, a pause, a turn to run) comes back.
    pub(super) async fn run_command(&mut self, command: SlashCommand) -> Vec<Input> {
        match command {
            SlashCommand::New => return self.new_session().await,
            SlashCommand::Resume(None) => self.offer_recent_sessions().await,
            SlashCommand::Sessions => self.list_sessions().await,
            SlashCommand::Resume(Some(key)) => return self.resume(&key).await,
            SlashCommand::Title(title) => self.set_title(title).await,
            SlashCommand::Retry => return self.retry().await,
            SlashCommand::Undo(n) => return self.undo(n).await,
            SlashCommand::Rewind(cmd) => return self.rewind_command(cmd).await,
            SlashCommand::Diff(target) => self.diff_command(target).await,
            // The scheduler turns `/stop` into an interrupt and starts `/compact` itself.
            SlashCommand::Stop | SlashCommand::Compact(_) => {
                tracing::error!(?command, "a command the scheduler performs reached run_command");
            }
            SlashCommand::Busy(mode) => self.busy_command(mode),
            SlashCommand::Approvals(mode) => self.approvals_command(mode),
            SlashCommand::Jobs(cmd) => return self.jobs_command(cmd).await,
            SlashCommand::Model(None) => self.list_models(),
            SlashCommand::Model(Some(name)) => self.set_model(name),
            SlashCommand::Heartbeat(cmd) => self.heartbeat_command(&cmd).await,
            SlashCommand::Usage => self.usage().await,
            SlashCommand::Permissions => self.permissions(),
            SlashCommand::Network => self.network(),
            SlashCommand::Backend(choice) => self.backend_command(choice).await,
            SlashCommand::Mcp(cmd) => self.mcp_command(cmd),
            SlashCommand::Goal(cmd) => return self.goal_command(&cmd).await,
            SlashCommand::Pause(reason) => return self.pause(reason.as_deref()),
            SlashCommand::Unpause => return self.unpause(),
        }
        Vec::new()
    }

    /// Open the session now in `env.session_id`; what the scheduler must learn of it.
    async fn open(&mut self, failed: &str) -> Vec<Input> {
        match self.load_session().await {
            Ok(inputs) => inputs,
            Err(e) => {
                self.notice(NoticeLevel::Error, format!("{failed}: {e}"));
                Vec::new()
            }
        }
    }

    async fn new_session(&mut self) -> Vec<Input> {
        let cwd = self.env.cwd().display().to_string();
        match self.env.store.create_session(&self.env.model, &cwd, None).await {
            Ok(id) => {
                let old = std::mem::replace(&mut self.env.session_id, id);
                let _ = self.env.store.delete_if_empty(&old).await;
                self.title = None;
                self.open("could not open the new session").await
            }
            Err(e) => {
                self.notice(NoticeLevel::Error, format!("could not create a session: {e}"));
                Vec::new()
            }
        }
    }

    /// By id, id prefix or title; else by title words (several matches are listed).
    async fn resume(&mut self, key: &str) -> Vec<Input> {
        // An id prefix that fits several sessions is a choice, not the latest of them.
        let Some(s) = self.find_to_resume(key).await else { return Vec::new() };
        let old = std::mem::replace(&mut self.env.session_id, s.id.clone());
        if old != s.id {
            let _ = self.env.store.delete_if_empty(&old).await;
        }
        self.title = s.title.clone();
        match self.load_session().await {
            Ok(inputs) => {
                if old != s.id {
                    self.env.jobs.attach_session(&s.id);
                }
                let title = s.title.as_deref().map(|t| format!("\"{t}\" ")).unwrap_or_default();
                let noun = if s.message_count == 1 { "message" } else { "messages" };
                let text = format!("resumed {title}({} · {} {noun})", s.id, s.message_count);
                self.notice(NoticeLevel::Info, text);
                inputs
            }
            Err(e) => {
                self.notice(NoticeLevel::Error, format!("could not resume: {e}"));
                Vec::new()
            }
        }
    }

    /// The one session `/resume <key>` names; None after saying why not (several match:
    /// the front end offers them).
    async fn find_to_resume(&mut self, key: &str) -> Option<crate::engine::store::SessionSummary> {
        use crate::engine::store::cli::{resume_match, ResumeMatch};
        match resume_match(&self.env.store, key).await {
            Ok(ResumeMatch::One(s)) => Some(s),
            Ok(ResumeMatch::Several(matches)) => {
                self.offer_sessions(key, matches);
                None
            }
            // None: the front end says so (with how to list them).
            Ok(ResumeMatch::None) => {
                self.events().send(Event::SessionList { sessions: Vec::new(), matching: Some(key.to_string()) });
                None
            }
            Err(e) => {
                self.notice(NoticeLevel::Error, format!("could not search sessions: {e}"));
                None
            }
        }
    }

    fn offer_sessions(&self, key: &str, matches: Vec<crate::engine::store::SessionSummary>) {
        let sessions = matches.into_iter().map(session_info).collect();
        self.events().send(Event::SessionChoices { query: key.trim().to_string(), sessions });
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
            self.notice(NoticeLevel::Info, busy_explained(self.scheduler.busy_mode()));
            return;
        };
        // The scheduler already routes by the new mode; this remembers it.
        let saved = crate::config_edit::set_string(&self.paths.config_file, "agent", "busy_input_mode", mode.as_str());
        match saved {
            Ok(()) => self.notice(NoticeLevel::Info, format!("busy mode: {} (saved)", mode.as_str())),
            Err(e) => self.notice(NoticeLevel::Warn, format!("busy mode: {} (not saved: {e})", mode.as_str())),
        }
        self.send_status();
    }

    async fn jobs_command(&mut self, cmd: JobsCmd) -> Vec<Input> {
        match cmd {
            JobsCmd::List => {
                let jobs = self.env.jobs.list().await;
                self.events().send(Event::JobList { jobs });
                Vec::new()
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

    /// Switch at once; then check, as its own task, that the provider lists the model.
    fn set_model(&mut self, name: String) {
        self.notice(NoticeLevel::Info, format!("model for this session: {name}"));
        self.env.model = name.clone();
        self.send_status();
        let provider = self.env.provider.clone();
        let events = self.env.events.clone();
        tokio::spawn(async move {
            if let Ok(models) = provider.list_models().await {
                if !models.is_empty() && !models.contains(&name) {
                    let text = format!(
                        "the provider does not list a model named {name}: requests may fail (/model lists the ones it has)"
                    );
                    events.send(Event::notice(NoticeLevel::Warn, text));
                }
            }
        });
    }

    /// `/approvals [mode]`: show what asks, or switch it for this session (the config keeps
    /// its own; the editor protocol's `session/set_mode` comes here too).
    fn approvals_command(&self, mode: Option<crate::config::ApprovalMode>) {
        let configured = self.env.config.approvals.mode;
        if let Some(mode) = mode {
            self.env.approver.set_mode(mode);
        }
        let now = self.env.approver.mode();
        let note = if now == configured {
            String::new()
        } else {
            format!(" — this session only; config.toml says {}", configured.as_str())
        };
        self.notice(
            NoticeLevel::Info,
            format!("{}{note}\n/approvals auto|prompt|off switches it", self.approvals_line()),
        );
    }

    /// What the approval mode in force means, in one line.
    fn approvals_line(&self) -> &'static str {
        let policy = self.env.jobs.sandbox_policy();
        match self.env.approver.mode() {
            crate::config::ApprovalMode::Auto if policy.active() => {
                "approvals: auto (sandboxed commands run; every command outside the sandbox asks)"
            }
            crate::config::ApprovalMode::Auto => "approvals: auto, acting as prompt (no kernel sandbox)",
            crate::config::ApprovalMode::Prompt => {
                "approvals: prompt (inside the sandbox what is not known safe asks; outside, everything asks)"
            }
            crate::config::ApprovalMode::Off => "approvals: off (nothing asks; hardline commands are still refused)",
        }
    }

    /// `/network`: the session's connections through the proxy, oldest first.
    fn network(&self) {
        let text = match self.env.jobs.proxy() {
            Some(proxy) => {
                let offset = crate::util::local_utc_offset_s(crate::util::now_ms());
                crate::present::network_list(&proxy.connections(), offset)
            }
            None => format!(
                "no network proxy in this session ({})",
                self.env
                    .jobs
                    .sandbox_policy()
                    .describe()
                    .split("; ")
                    .nth(1)
                    .unwrap_or("sandbox.network is not \"ask\"")
            ),
        };
        self.notice(NoticeLevel::Info, text);
    }

    /// `/permissions`: what commands may touch and what still asks (DESIGN §6).
    fn permissions(&self) {
        let policy = self.env.jobs.sandbox_policy();
        let approvals = self.approvals_line();
        self.notice(
            NoticeLevel::Info,
            format!(
                "{}\n{}\n{}\n{}\n{}\n{}\n{approvals}\nwiden it with sandbox.writable_roots in config.toml",
                policy.describe(),
                policy.describe_view(),
                policy.describe_git_guard(),
                policy.describe_sockets(),
                policy.describe_limits(),
                crate::engine::sandbox::env::EnvFilter::from_config(&self.env.config).describe()
            ),
        );
    }

    /// `/backend`: where commands run, its connection state, and what that means for
    /// approvals; `/backend <choice>` switches this session (remembered with it).
    async fn backend_command(&mut self, choice: Option<crate::protocol::Backend>) {
        let backends = self.env.jobs.backends().clone();
        if let Some(backend) = choice {
            backends.set_current(backend.clone());
            let key = super::backend_key(&self.env.session_id);
            let _ = self.env.store.meta_set(&key, &backend.label()).await;
            self.send_status();
        }
        let backend = backends.current();
        let text = if backend.is_remote() {
            let cwd = backends.remote_cwd(&backend);
            format!(
                "backend: {backend} ({}); remote cwd: {}\n\
                 Commands and the file tools run there with the remote user's rights, outside \
                 talaria's sandbox: in approvals mode \"auto\" a remote command asks unless it is known safe.\n\
                 An unreachable host gives the model a `degraded` result (terminal.degraded_mode); the next \
                 call reconnects by itself. /backend local switches back.",
                backends.state(&backend).as_str(),
                if cwd.is_empty() { "~ (the remote home)" } else { cwd.as_str() },
            )
        } else {
            "backend: local (commands run on this machine, in the sandbox); \
             /backend ssh <host> or /backend docker <container> runs them elsewhere"
                .to_string()
        };
        self.notice(NoticeLevel::Info, text);
    }

    /// `/mcp`: the servers' state as data; `restart` starts one again (in the background).
    fn mcp_command(&self, cmd: McpCmd) {
        let Some(mcp) = &self.env.mcp else { return };
        let servers = mcp.status();
        match cmd {
            McpCmd::List => self.events().send(Event::McpStatus { servers, tools: false }),
            McpCmd::Tools(None) => self.events().send(Event::McpStatus { servers, tools: true }),
            McpCmd::Tools(Some(name)) => {
                let one: Vec<_> = servers.into_iter().filter(|s| s.name == name).collect();
                if one.is_empty() {
                    self.notice(NoticeLevel::Error, format!("no MCP server named '{name}'; /mcp lists them"));
                } else {
                    self.events().send(Event::McpStatus { servers: one, tools: true });
                }
            }
            McpCmd::Restart(name) => match mcp.restart(&name) {
                Ok(()) => self
                    .notice(NoticeLevel::Info, format!("restarting MCP server '{name}'; /mcp shows when it is ready")),
                Err(e) => self.notice(NoticeLevel::Error, e),
            },
        }
    }

    /// `/usage`: the session's totals over every run (from the database: a resumed session
    /// counts what earlier runs used too), this run's with cache reads and the cost, and
    /// the last turn's.
    async fn usage(&self) {
        let priced = self.env.config.prices.find(self.env.provider.kind(), &self.env.model).is_some();
        let unpriced = if priced { "" } else { " (no price for this model in [prices]: tokens only)" };
        let session = match self.env.store.session_usage(&self.env.session_id).await {
            Ok(Some((prompt, completion))) => {
                let total = crate::protocol::usage::Spend {
                    usage: crate::protocol::usage::Usage::tokens(prompt, completion),
                    ..Default::default()
                };
                total.describe()
            }
            Ok(None) | Err(_) => self.session_usage.describe(),
        };
        let mut text = format!(
            "this session (all runs): {session} · this run: {} · last turn: {} · {}{unpriced}",
            self.session_usage.describe(),
            self.last_turn_usage.describe(),
            self.meter.label()
        );
        if self.turn.is_some() {
            text.push_str("\nthe running turn's tokens are counted when it ends");
        }
        // Sub-agents (DESIGN §14): each one's spend this run, then what their sessions used
        // over every run (the database has tokens, not dollars).
        let agents = self.env.jobs.agents();
        let summary = crate::protocol::agent::spend_summary(&self.session_usage, &agents);
        for line in summary.lines().skip(1) {
            text.push('\n');
            text.push_str(line);
        }
        if let Ok(subs) = self.env.store.sub_session_usage(&self.env.session_id).await {
            let used: Vec<_> = subs.iter().filter(|(_, p, c)| p + c > 0).collect();
            if !used.is_empty() {
                let sum = crate::protocol::usage::Spend {
                    usage: crate::protocol::usage::Usage::tokens(
                        used.iter().map(|(_, p, _)| p).sum(),
                        used.iter().map(|(_, _, c)| c).sum(),
                    ),
                    ..Default::default()
                };
                text.push_str(&format!("\n  sub-agent sessions (all runs): {} · {}", used.len(), sum.describe()));
            }
        }
        self.notice(NoticeLevel::Info, text);
    }

    /// `/compact [focus]`: the summary request runs as its own task; Esc cancels it.
    pub(super) fn compact(&mut self, focus: Option<String>) {
        self.notice(NoticeLevel::Info, "compacting older turns…");
        let history = std::mem::take(&mut self.history);
        let omitted = self.omitted;
        let with = compactor(&self.env);
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        let join =
            tokio::spawn(
                async move { compaction::compact_history(&with, history, omitted, focus.as_deref(), &stop).await },
            );
        self.compaction = Some(RunningCompaction { cancel, join });
    }

    async fn goal_command(&mut self, cmd: &crate::protocol::commands::GoalCmd) -> Vec<Input> {
        // Nothing running that the goal must wait for. A pause or a queued message does not
        // count: the continuation waits for them in the scheduler (a goal set while paused
        // would otherwise never start).
        let idle = self.turn.is_none() && self.compaction.is_none() && !self.goal.in_boundary();
        let effects = self.goal.command(cmd, idle);
        let inputs = self.perform_goal_effects(effects).await;
        let starts = inputs.iter().any(|i| matches!(i, Input::GoalContinuation(Some(_))));
        if starts && self.scheduler.paused() {
            self.notice(NoticeLevel::Info, "◎ paused: the goal starts when you unpause");
        }
        self.send_status();
        inputs
    }

    /// The scheduler announces the pause (once: the file watcher's report of the same
    /// change finds it paused already); a pause renewed is said again here.
    fn pause(&mut self, reason: Option<&str>) -> Vec<Input> {
        match crate::engine::estop::pause(&self.paths.estop, reason) {
            Ok(_) => {
                if self.scheduler.paused() {
                    self.notice(NoticeLevel::Warn, crate::engine::scheduler::pause_notice(reason));
                }
                let working = self
                    .env
                    .jobs
                    .agents()
                    .iter()
                    .filter(|(_, a)| a.state != crate::protocol::agent::AgentState::Done)
                    .count();
                if working > 0 {
                    self.notice(
                        NoticeLevel::Info,
                        format!("{working} sub-agent(s) pause too: each waits before its next model call (/unpause)"),
                    );
                }
                vec![Input::PauseChanged { paused: true, reason: reason.map(str::to_string) }]
            }
            Err(e) => {
                self.notice(NoticeLevel::Error, format!("could not pause: {e}"));
                Vec::new()
            }
        }
    }

    fn unpause(&mut self) -> Vec<Input> {
        match crate::engine::estop::unpause(&self.paths.estop) {
            Ok(removed) => {
                if !removed {
                    self.notice(NoticeLevel::Info, "not paused");
                }
                vec![Input::PauseChanged { paused: false, reason: None }]
            }
            Err(e) => {
                self.notice(NoticeLevel::Error, format!("could not unpause: {e}"));
                Vec::new()
            }
        }
    }

    /// Bare `/resume`: the recent sessions in the picker (never the one open now).
    async fn offer_recent_sessions(&self) {
        match self.env.store.list_sessions(21).await {
            Ok(sessions) => {
                let others: Vec<_> = sessions.into_iter().filter(|s| s.id != self.env.session_id).take(20).collect();
                if others.is_empty() {
                    self.notice(NoticeLevel::Info, "no other session to resume yet");
                } else {
                    self.offer_sessions("", others);
                }
            }
            Err(e) => self.notice(NoticeLevel::Error, format!("could not list sessions: {e}")),
        }
    }

    async fn list_sessions(&self) {
        match self.env.store.list_sessions(20).await {
            Ok(sessions) => {
                let sessions = sessions.into_iter().map(session_info).collect();
                self.events().send(Event::SessionList { sessions, matching: None });
            }
            Err(e) => self.notice(NoticeLevel::Error, format!("could not list sessions: {e}")),
        }
    }

    /// `/retry` and `/undo n`: the last exchanges leave the history (kept in the store,
    /// inactive); the message that started the first of them is re-sent or given back.
    async fn unwind(&mut self, n: usize, what: &str) -> Option<(String, Vec<Input>)> {
        match self.env.store.deactivate_last_exchanges(&self.env.session_id, n).await {
            Ok(Some(text)) => match self.load_session().await {
                Ok(inputs) => Some((text, inputs)),
                Err(e) => {
                    self.notice(NoticeLevel::Error, format!("could not reload the session: {e}"));
                    None
                }
            },
            Ok(None) => {
                self.notice(NoticeLevel::Info, format!("nothing to {what}"));
                None
            }
            Err(e) => {
                self.notice(NoticeLevel::Error, format!("could not {what}: {e}"));
                None
            }
        }
    }

    async fn retry(&mut self) -> Vec<Input> {
        let Some((text, mut inputs)) = self.unwind(1, "retry").await else { return Vec::new() };
        inputs.push(Input::Run { input: TurnInput::typed(text), trigger: TurnTrigger::Retry });
        inputs
    }

    async fn undo(&mut self, n: usize) -> Vec<Input> {
        let Some((text, inputs)) = self.unwind(n, "undo").await else { return Vec::new() };
        self.events().send(Event::RestoreInput { text });
        let what = if n == 1 {
            "the last exchange; its message is back in the input".to_string()
        } else {
            format!("the last {n} exchanges; the first of their messages is back in the input")
        };
        self.notice(NoticeLevel::Info, format!("removed {what}"));
        inputs
    }
}

/// A saved session as the front ends list it.
fn session_info(s: crate::engine::store::SessionSummary) -> SessionInfo {
    SessionInfo {
        id: s.id,
        title: s.title,
        message_count: s.message_count,
        first_line: s.first_line,
        updated_at_ms: s.updated_at,
    }
}

/// `/busy` without a mode: the current one, and what each does, one line each.
fn busy_explained(current: BusyMode) -> String {
    let line = |mode: BusyMode, what: &str| {
        let mark = if mode == current { "▸" } else { " " };
        format!("{mark} {:<9}{what}", mode.as_str())
    };
    [
        format!("busy mode: {} — what Enter does while the agent works (/busy <mode> switches):", current.as_str()),
        line(
            BusyMode::Redirect,
            "stop what it is doing (a running command moves to the background) and read your message now",
        ),
        line(BusyMode::Steer, "give it your message once the running tools finish, without stopping them"),
        line(BusyMode::Queue, "keep your message for the next turn (Tab always does this)"),
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::busy_explained;
    use crate::protocol::BusyMode;

    #[test]
    fn busy_explains_each_mode_in_one_line() {
        let text = busy_explained(BusyMode::Steer);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("busy mode: steer"));
        assert!(lines[2].starts_with("▸ steer"), "{text}");
        assert!(lines[1].starts_with("  redirect") && lines[3].starts_with("  queue"), "{text}");
    }
}
