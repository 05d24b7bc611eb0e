//! One ACP session as the client sees it: which `session/prompt` requests wait for an
//! answer, what each running tool has printed, which approval belongs to which tool call.
//! Pure: Talaria `Event`s in, [`Out`]s (updates, permission asks, answers) out; the server
//! performs them. The engine decides everything; this only translates.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::updates;
use crate::present;
use crate::protocol::commands::{self, Command, SlashCommand, UiCommand};
use crate::protocol::{AskGround, Event, HistoryItem, JobId, Op, Phase, TurnOutcome, TurnTrigger};

/// A `session/prompt` request, by the server's own number.
pub(crate) type PromptId = u64;

/// Characters of a running command's output kept for its tool-call cell (the tail).
const OUTPUT_KEPT: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    EndTurn,
    Cancelled,
    MaxTurnRequests,
}

impl StopReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::Cancelled => "cancelled",
            StopReason::MaxTurnRequests => "max_turn_requests",
        }
    }
}

/// How a prompt request is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Stop(StopReason),
    /// The turn failed: a JSON-RPC error with the engine's reason.
    Failed(String),
}

/// What the server does for a session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Out {
    /// Send a `session/update` with this update.
    Update(Value),
    /// Ask the client with `session/request_permission`; its answer becomes `Op::Approve`.
    Permission {
        approval: u64,
        tool_call: Value,
    },
    Answer {
        prompts: Vec<PromptId>,
        answer: Answer,
    },
    /// The engine showed (or re-showed) the session: its end, and whether older pages exist.
    Ready {
        history: Vec<HistoryItem>,
        earlier: Option<i64>,
        model: String,
    },
    /// A page of older history (answers `Op::LoadEarlier`).
    Earlier {
        items: Vec<HistoryItem>,
        earlier: Option<i64>,
    },
    /// The model in use changed (`/model`, `session/set_config_option`).
    Model(String),
    /// The engine has shut down.
    Closed,
}

/// A prompt whose message the engine has (`delivered`: it reached the model) and whose
/// answer waits for the turn that carries it to end.
#[derive(Debug)]
struct Waiting {
    id: PromptId,
    text: String,
    delivered: bool,
}

#[derive(Debug, Default)]
pub(crate) struct SessionState {
    prompts: Vec<Waiting>,
    /// A slash command sent as a prompt, answered by the engine's reply to it.
    command: Option<PromptId>,
    /// What the engine is doing (its phase event). Read only by [`SessionState::busy`], the
    /// one place this module tells busy from idle.
    phase: Phase,
    /// Output so far of each running tool call.
    outputs: HashMap<String, String>,
    /// Running tool calls, oldest first: an approval belongs to the latest.
    running_tools: Vec<String>,
    /// The last error notice, for a failed turn's answer.
    last_error: Option<String>,
    /// The last tail sent for each job (unchanged tails are not sent again).
    job_tails: HashMap<JobId, String>,
    model: String,
}

impl SessionState {
    pub(crate) fn new(model: &str) -> SessionState {
        SessionState { model: model.to_string(), ..SessionState::default() }
    }

    /// Is the engine working on a turn, or about to (a prompt sent, its turn not yet
    /// started): a cancel then has something to stop, and a model switch waits.
    pub(crate) fn busy(&self) -> bool {
        self.phase.busy() || !self.prompts.is_empty()
    }

    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    /// The client switched the model: the engine's status will say the same.
    pub(crate) fn model_chosen(&mut self, model: &str) {
        self.model = model.to_string();
    }

    /// A `session/prompt`: the ops to send and what to tell the client at once. Text that
    /// is a slash command runs as one; anything else is a message, handled by the engine's
    /// busy mode when a turn runs (redirect by default).
    pub(crate) fn prompt(&mut self, id: PromptId, text: String) -> (Vec<Op>, Vec<Out>) {
        let answer_now = |text: String| {
            vec![
                Out::Update(updates::agent_text(&text)),
                Out::Answer { prompts: vec![id], answer: Answer::Stop(StopReason::EndTurn) },
            ]
        };
        if !commands::is_command(&text) {
            self.prompts.push(Waiting { id, text: text.clone(), delivered: false });
            return (vec![Op::Submit { text, mode: None }], Vec::new());
        }
        if updates::EDITOR_HAS_ITS_OWN.iter().any(|own| text.split_whitespace().next() == Some(own)) {
            return (
                Vec::new(),
                answer_now(format!(
                    "{} is the editor's to do here: use its own session list and new-session command",
                    text.trim()
                )),
            );
        }
        match commands::parse(&text) {
            Err(e) => (Vec::new(), answer_now(e)),
            Ok(Command::Ui(UiCommand::Help)) => (Vec::new(), answer_now(help_text())),
            Ok(Command::Ui(UiCommand::Quit | UiCommand::Mouse | UiCommand::Copy)) => {
                (Vec::new(), answer_now(format!("{} does nothing in the editor", text.trim())))
            }
            Ok(Command::Engine(SlashCommand::Stop)) => (
                vec![Op::Interrupt],
                vec![Out::Answer { prompts: vec![id], answer: Answer::Stop(StopReason::EndTurn) }],
            ),
            Ok(Command::Engine(command)) => {
                // A command that never replies (none should) must not hold an earlier one's answer.
                let mut out = Vec::new();
                if let Some(old) = self.command.replace(id) {
                    out.push(Out::Answer { prompts: vec![old], answer: Answer::Stop(StopReason::EndTurn) });
                }
                (vec![Op::Command(command)], out)
            }
        }
    }

    /// The command sent as prompt `id` has had time to reply and did not: answer it.
    pub(crate) fn command_overdue(&mut self, id: PromptId) -> Vec<Out> {
        if self.command == Some(id) {
            self.command = None;
            return vec![Out::Answer { prompts: vec![id], answer: Answer::Stop(StopReason::EndTurn) }];
        }
        Vec::new()
    }

    /// A command's reply arrived: the prompt that sent it is answered after it.
    fn command_replied(&mut self, out: &mut Vec<Out>) {
        if let Some(id) = self.command.take() {
            out.push(Out::Answer { prompts: vec![id], answer: Answer::Stop(StopReason::EndTurn) });
        }
    }

    pub(crate) fn on_event(&mut self, event: Event) -> Vec<Out> {
        let mut out = Vec::new();
        match event {
            Event::SessionReady { history, earlier, model, .. } => {
                self.model = model.clone();
                out.push(Out::Ready { history, earlier, model });
            }
            Event::EarlierHistory { items, earlier } => out.push(Out::Earlier { items, earlier }),
            Event::Phase { phase } => {
                self.phase = phase;
                out.push(Out::Update(json!({
                    "sessionUpdate": "session_info_update",
                    "_meta": updates::meta(json!({ "event": "phase", "phase": phase })),
                })));
            }
            Event::TurnStarted { .. } => {
                // A command that starts a turn (`/retry`) is answered when the turn ends.
                if let Some(id) = self.command.take() {
                    self.prompts.push(Waiting { id, text: String::new(), delivered: true });
                }
            }
            Event::UserMessage { text, trigger, .. } => out.extend(self.user_message(&text, &trigger)),
            Event::PendingChanged { pending, queued } => out.push(Out::Update(json!({
                "sessionUpdate": "session_info_update",
                "_meta": updates::meta(json!({ "event": "pending", "pending": pending, "queued": queued })),
            }))),
            Event::RestoreInput { text } => out.push(self.restore_input(text)),
            Event::AssistantDelta(text) => out.push(Out::Update(updates::agent_text(&text))),
            Event::ReasoningDelta(text) => out.push(Out::Update(updates::agent_thought(&text))),
            Event::AssistantDone { .. } => {}
            event @ (Event::ToolStarted { .. } | Event::ToolOutput { .. } | Event::ToolFinished { .. }) => {
                out.extend(self.on_tool(event))
            }
            Event::ApprovalNeeded { id, command, reason, grounds, from } => {
                let reason = match from {
                    Some(agent) => format!("{agent} asks: {reason}"),
                    None => reason,
                };
                out.push(self.approval_needed(id, &command, &reason, &grounds))
            }
            event @ (Event::JobStarted { .. }
            | Event::JobUpdated { .. }
            | Event::JobFinished { .. }
            | Event::WatchMatched { .. }) => out.extend(self.on_job(event)),
            // The job's own updates already reach the editor; a sub-agent's progress is the pane's.
            Event::JobLog { .. }
            | Event::JobWatches { .. }
            | Event::AgentUpdated { .. }
            | Event::Usage { .. }
            | Event::Context { .. } => {}
            Event::TurnFinished { outcome } => out.extend(self.turn_finished(outcome)),
            Event::Notice { level, text } => {
                if level == crate::protocol::NoticeLevel::Error {
                    self.last_error = Some(text.clone());
                }
                out.push(Out::Update(updates::notice(level, &text)));
                self.command_replied(&mut out);
            }
            Event::McpStatus { servers, tools } => self.reply(&mut out, "mcp", present::mcp_status(&servers, tools)),
            Event::JobList { jobs } => self.reply(&mut out, "jobs", present::job_list(&jobs)),
            Event::SessionList { sessions, matching } => {
                self.reply(&mut out, "sessions", present::session_list(&sessions, matching.as_deref()))
            }
            Event::HeartbeatStatus { heartbeat } => {
                let offset = crate::util::local_utc_offset_s(crate::util::now_ms());
                self.reply(&mut out, "heartbeat", present::heartbeat_status(heartbeat.as_ref(), offset))
            }
            Event::GoalStatus { goal, gates_only } => {
                let text = if gates_only {
                    present::gate_list(goal.as_deref())
                } else {
                    present::goal_status(goal.as_deref())
                };
                self.reply(&mut out, "goal", text)
            }
            Event::SessionChoices { sessions, query } => {
                self.reply(&mut out, "sessions", present::session_list(&sessions, Some(&query)))
            }
            Event::Status(status) => {
                if status.model != self.model {
                    self.model = status.model.clone();
                    out.push(Out::Model(status.model));
                }
            }
            Event::JobsKilled { jobs } => {
                for job in jobs {
                    let text = format!("killed {} as Talaria stopped: {}", job.id, job.command);
                    out.push(Out::Update(updates::agent_note(&text, json!({ "event": "job_killed", "job": job.id }))));
                }
            }
            Event::TurnChanges { .. } => {}
            Event::RewindPoints { points, warnings } => {
                self.reply(&mut out, "rewind", crate::protocol::rewind::points_text(&points, &warnings))
            }
            Event::RewindPreview(preview) => {
                self.reply(&mut out, "rewind", crate::protocol::rewind::preview_text(&preview))
            }
            Event::Diff { title, text } => self.reply(&mut out, "diff", format!("{title}\n{text}")),
            Event::ShutdownComplete => out.push(Out::Closed),
            Event::NetworkConnection(_) => {}
        }
        out
    }

    /// A tool call's start, output and end.
    fn on_tool(&mut self, event: Event) -> Option<Out> {
        let update = match event {
            Event::ToolStarted { call_id, name, summary } => {
                self.running_tools.push(call_id.clone());
                self.outputs.insert(call_id.clone(), String::new());
                updates::tool_call(&call_id, &name, &summary)
            }
            Event::ToolOutput { call_id, chunk } => {
                let kept = self.outputs.entry(call_id.clone()).or_default();
                kept.push_str(&chunk);
                if kept.len() > 2 * OUTPUT_KEPT {
                    *kept = crate::text::tail_chars(kept, OUTPUT_KEPT).to_string();
                }
                updates::tool_output(&call_id, &shown(kept))
            }
            Event::ToolFinished { call_id, outcome } => {
                self.running_tools.retain(|c| *c != call_id);
                let output = self.outputs.remove(&call_id).unwrap_or_default();
                updates::tool_finished(&call_id, &shown(&output), &outcome)
            }
            _ => return None,
        };
        Some(Out::Update(update))
    }

    /// A background job's start, progress, end and watch matches.
    fn on_job(&mut self, event: Event) -> Option<Out> {
        let update = match event {
            Event::JobStarted { job } => updates::job_started(&job),
            Event::JobUpdated { id, status, tail } => {
                if self.job_tails.get(&id) == Some(&tail) {
                    return None;
                }
                let update = updates::job_updated(&id, &status, &tail);
                self.job_tails.insert(id, tail);
                update
            }
            Event::JobFinished { id, status } => {
                self.job_tails.remove(&id);
                updates::job_finished(&id, &status)
            }
            Event::WatchMatched { id, pattern, line, more, .. } => updates::watch_matched(&id, &pattern, &line, more),
            _ => return None,
        };
        Some(Out::Update(update))
    }

    fn user_message(&mut self, text: &str, trigger: &TurnTrigger) -> Option<Out> {
        match trigger {
            TurnTrigger::User | TurnTrigger::Queued | TurnTrigger::Retry => {
                // Messages typed before one delivery reach the model together.
                for p in self.prompts.iter_mut().filter(|p| !p.delivered && text.contains(p.text.as_str())) {
                    p.delivered = true;
                }
                None
            }
            TurnTrigger::JobNotification | TurnTrigger::Heartbeat | TurnTrigger::Goal => {
                Some(Out::Update(updates::engine_message(text, trigger)))
            }
        }
    }

    /// Typed but never delivered (an interrupt, a pause): those prompts end cancelled.
    fn restore_input(&mut self, text: String) -> Out {
        let (back, keep): (Vec<Waiting>, Vec<Waiting>) =
            std::mem::take(&mut self.prompts).into_iter().partition(|p| !p.delivered && text.contains(p.text.as_str()));
        self.prompts = keep;
        if back.is_empty() {
            let note = format!("not sent: {text}");
            Out::Update(updates::agent_note(&note, json!({ "event": "restore_input", "text": text })))
        } else {
            Out::Answer { prompts: back.iter().map(|p| p.id).collect(), answer: Answer::Stop(StopReason::Cancelled) }
        }
    }

    fn approval_needed(&self, id: u64, command: &str, reason: &str, grounds: &[AskGround]) -> Out {
        let call_id = self.running_tools.last().cloned().unwrap_or_else(|| format!("approval_{id}"));
        let why: Vec<&str> = grounds.iter().map(|g| g.explain()).collect();
        let text =
            if why.is_empty() { reason.to_string() } else { format!("{reason}\nasks because {}", why.join("; ")) };
        Out::Permission {
            approval: id,
            tool_call: json!({
                "toolCallId": call_id,
                "title": command,
                "rawInput": { "command": command, "reason": reason },
                "content": [{ "type": "content", "content": { "type": "text", "text": text } }],
            }),
        }
    }

    /// The delivered prompts are answered with how the turn ended.
    fn turn_finished(&mut self, outcome: TurnOutcome) -> Option<Out> {
        let answer = match outcome {
            TurnOutcome::Completed => Answer::Stop(StopReason::EndTurn),
            TurnOutcome::Interrupted => Answer::Stop(StopReason::Cancelled),
            TurnOutcome::BudgetExhausted => Answer::Stop(StopReason::MaxTurnRequests),
            TurnOutcome::Failed => {
                Answer::Failed(self.last_error.take().unwrap_or_else(|| "the turn failed; see the log".into()))
            }
        };
        let (done, keep): (Vec<Waiting>, Vec<Waiting>) =
            std::mem::take(&mut self.prompts).into_iter().partition(|p| p.delivered);
        self.prompts = keep;
        (!done.is_empty()).then(|| Out::Answer { prompts: done.iter().map(|p| p.id).collect(), answer })
    }

    fn reply(&mut self, out: &mut Vec<Out>, what: &str, text: String) {
        out.push(Out::Update(updates::agent_note(&text, json!({ "event": what }))));
        self.command_replied(out);
    }
}

/// Command output as an editor shows it: no escape sequences, `\r` redraws applied.
fn shown(raw: &str) -> String {
    crate::text::neutralise_controls(&crate::text::strip_ansi(raw))
}

fn help_text() -> String {
    let lines: Vec<String> = commands::COMMANDS
        .iter()
        .filter(|c| !updates::EDITOR_HAS_ITS_OWN.iter().any(|own| c.usage.starts_with(own)))
        .map(|c| format!("{}  {}", c.usage, c.help))
        .collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{AskGround, Origin, ToolOutcome};
    use pretty_assertions::assert_eq;

    fn answers(out: &[Out]) -> Vec<(Vec<PromptId>, Answer)> {
        out.iter()
            .filter_map(|o| match o {
                Out::Answer { prompts, answer } => Some((prompts.clone(), answer.clone())),
                _ => None,
            })
            .collect()
    }

    fn user(text: &str, origin: Origin) -> Event {
        Event::UserMessage { seq: None, text: text.into(), trigger: TurnTrigger::User, origin }
    }

    #[test]
    fn a_prompt_during_a_turn_is_answered_with_the_turn_that_read_it() {
        let mut s = SessionState::new("m");
        let (ops, _) = s.prompt(1, "run the tests".into());
        assert_eq!(ops, vec![Op::Submit { text: "run the tests".into(), mode: None }]);
        s.on_event(Event::TurnStarted { trigger: TurnTrigger::User });
        s.on_event(user("run the tests", Origin::Typed));
        assert!(s.busy());
        s.prompt(2, "stop and list files".into());
        let wrapped = "[OUT-OF-BAND USER MESSAGE]\nstop and list files\n[/OUT-OF-BAND USER MESSAGE]";
        s.on_event(user(wrapped, Origin::MidTurn));
        let out = s.on_event(Event::TurnFinished { outcome: TurnOutcome::Completed });
        assert_eq!(answers(&out), vec![(vec![1, 2], Answer::Stop(StopReason::EndTurn))]);
        assert!(!s.busy());
    }

    #[test]
    fn a_prompt_not_yet_started_counts_as_busy_so_a_cancel_right_after_it_stops_it() {
        let mut s = SessionState::new("m");
        assert!(!s.busy());
        s.prompt(1, "hi".into());
        assert!(s.busy(), "the turn's start is still on its way from the engine");
    }

    #[test]
    fn a_queued_prompt_waits_for_its_own_turn() {
        let mut s = SessionState::new("m");
        s.prompt(1, "first".into());
        s.on_event(user("first", Origin::Typed));
        s.prompt(2, "second".into());
        let out = s.on_event(Event::TurnFinished { outcome: TurnOutcome::Completed });
        assert_eq!(answers(&out), vec![(vec![1], Answer::Stop(StopReason::EndTurn))]);
        s.on_event(Event::UserMessage {
            seq: None,
            text: "second".into(),
            trigger: TurnTrigger::Queued,
            origin: Origin::Typed,
        });
        let out = s.on_event(Event::TurnFinished { outcome: TurnOutcome::Interrupted });
        assert_eq!(answers(&out), vec![(vec![2], Answer::Stop(StopReason::Cancelled))]);
    }

    #[test]
    fn a_message_that_comes_back_unsent_cancels_its_prompt() {
        let mut s = SessionState::new("m");
        s.prompt(1, "first".into());
        s.on_event(user("first", Origin::Typed));
        s.prompt(2, "typed while busy".into());
        let out = s.on_event(Event::RestoreInput { text: "typed while busy".into() });
        assert_eq!(answers(&out), vec![(vec![2], Answer::Stop(StopReason::Cancelled))]);
        let out = s.on_event(Event::TurnFinished { outcome: TurnOutcome::Interrupted });
        assert_eq!(answers(&out), vec![(vec![1], Answer::Stop(StopReason::Cancelled))]);
    }

    #[test]
    fn a_failed_turn_answers_with_the_engines_error() {
        let mut s = SessionState::new("m");
        s.prompt(1, "hi".into());
        s.on_event(user("hi", Origin::Typed));
        s.on_event(Event::Notice { level: crate::protocol::NoticeLevel::Error, text: "model said 400".into() });
        let out = s.on_event(Event::TurnFinished { outcome: TurnOutcome::Failed });
        assert_eq!(answers(&out), vec![(vec![1], Answer::Failed("model said 400".into()))]);
    }

    #[test]
    fn a_command_is_answered_after_its_reply() {
        let mut s = SessionState::new("m");
        let (ops, out) = s.prompt(1, "/jobs".into());
        assert_eq!(ops, vec![Op::Command(SlashCommand::Jobs(crate::protocol::commands::JobsCmd::List))]);
        assert!(out.is_empty());
        let out = s.on_event(Event::JobList { jobs: Vec::new() });
        assert!(matches!(&out[0], Out::Update(u) if u["content"]["text"] == "\nno background jobs\n"));
        assert_eq!(answers(&out), vec![(vec![1], Answer::Stop(StopReason::EndTurn))]);
        let (ops, out) = s.prompt(2, "/new".into());
        assert!(ops.is_empty());
        assert_eq!(answers(&out), vec![(vec![2], Answer::Stop(StopReason::EndTurn))]);
        let (ops, _) = s.prompt(3, "/stop".into());
        assert_eq!(ops, vec![Op::Interrupt]);
    }

    #[test]
    fn an_approval_belongs_to_the_running_tool_call() {
        let mut s = SessionState::new("m");
        s.on_event(Event::ToolStarted {
            call_id: "call_9".into(),
            name: "terminal".into(),
            summary: "rm -r build".into(),
        });
        let out = s.on_event(Event::ApprovalNeeded {
            id: 4,
            command: "rm -r build".into(),
            reason: "deletes files".into(),
            grounds: vec![AskGround::NotKnownSafe],
            from: None,
        });
        let Out::Permission { approval, tool_call } = &out[0] else { panic!("{out:?}") };
        assert_eq!(*approval, 4);
        assert_eq!(tool_call["toolCallId"], "call_9");
        assert_eq!(tool_call["title"], "rm -r build");
    }

    #[test]
    fn a_running_command_streams_its_whole_output_so_far() {
        let mut s = SessionState::new("m");
        s.on_event(Event::ToolStarted { call_id: "c".into(), name: "terminal".into(), summary: "make".into() });
        s.on_event(Event::ToolOutput { call_id: "c".into(), chunk: "one\n".into() });
        let out = s.on_event(Event::ToolOutput { call_id: "c".into(), chunk: "\x1b[31mtwo\x1b[0m\n".into() });
        assert!(matches!(&out[0], Out::Update(u) if u["content"][0]["content"]["text"] == "one\ntwo\n"));
        let outcome = ToolOutcome { ok: true, exit_code: Some(0), status: None, duration_ms: 1, result: "{}".into() };
        let out = s.on_event(Event::ToolFinished { call_id: "c".into(), outcome });
        assert!(matches!(&out[0], Out::Update(u) if u["status"] == "completed"));
    }
}
