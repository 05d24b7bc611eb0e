//! The ACP server task: one engine per ACP session, started the way the TUI starts one.
//! Requests come in from the SDK's handlers over a channel, events from each engine over
//! another; this task translates both ways (through [`SessionState`]) and never decides
//! what the engine does.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    CancelNotification, CloseSessionRequest, CloseSessionResponse, ListSessionsRequest, ListSessionsResponse,
    LoadSessionRequest, LoadSessionResponse, NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse,
    RequestPermissionOutcome, RequestPermissionRequest, SessionNotification, SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse, SetSessionModeRequest, SetSessionModeResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Client, Error};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use super::session::{Answer, Out, PromptId, SessionState};
use super::settings::{config_options, mode_id, modes, prompt_text};
use super::{updates, AcpOptions, SetModelRequest, SetModelResponse};
use crate::config::OnQuit;
use crate::engine::api::SessionChoice;
use crate::protocol::{Approval, ApprovalMode, BusyMode, Event, HistoryItem, Op};

/// What the SDK's handlers hand over.
pub(crate) enum Incoming {
    NewSession(NewSessionRequest, Responder<NewSessionResponse>),
    LoadSession(LoadSessionRequest, Responder<LoadSessionResponse>),
    ListSessions(ListSessionsRequest, Responder<ListSessionsResponse>),
    Prompt(PromptRequest, Responder<PromptResponse>),
    Cancel(CancelNotification),
    SetMode(SetSessionModeRequest, Responder<SetSessionModeResponse>),
    SetConfigOption(SetSessionConfigOptionRequest, Responder<SetSessionConfigOptionResponse>),
    SetModel(SetModelRequest, Responder<SetModelResponse>),
    Close(CloseSessionRequest, Responder<CloseSessionResponse>),
}

/// Pages of older history a `session/load` replays at most (400 messages each).
const REPLAY_PAGES: usize = 50;
/// How long a slash command sent as a prompt may take to reply before its prompt is answered.
const COMMAND_REPLY: Duration = Duration::from_secs(3);
/// How long the engines get to shut down when the client goes away.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(15);

/// A `session/load` waiting for its history to be replayed.
struct Loading {
    responder: Responder<LoadSessionResponse>,
    /// Pages oldest last (each `EarlierHistory` is older than the one before).
    pages: Vec<Vec<HistoryItem>>,
}

/// A session with its engine.
struct Live {
    ops: mpsc::UnboundedSender<Op>,
    state: SessionState,
    loading: Option<Loading>,
    models: Vec<String>,
    busy_mode: BusyMode,
    /// The approval mode in force (`session/set_mode` switches it for this session).
    approval_mode: ApprovalMode,
}

impl Live {
    fn settings(&self) -> Value {
        config_options(self.state.model(), &self.models, self.busy_mode)
    }
}

pub(crate) struct Server {
    cx: ConnectionTo<Client>,
    options: AcpOptions,
    sessions: HashMap<String, Live>,
    prompts: HashMap<PromptId, Responder<PromptResponse>>,
    next_prompt: PromptId,
    events_tx: mpsc::UnboundedSender<(String, Event)>,
    events: mpsc::UnboundedReceiver<(String, Event)>,
    overdue_tx: mpsc::UnboundedSender<(String, PromptId)>,
    overdue: mpsc::UnboundedReceiver<(String, PromptId)>,
}

/// A schema type from its JSON (the shapes are built in `updates`).
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    serde_json::from_value(value)
        .map_err(|e| Error::internal_error().data(json!(format!("talaria built a bad message: {e}"))))
}

fn unknown_session(id: &str) -> Error {
    Error::invalid_params().data(json!(format!("no open session {id}: session/new or session/load opens one")))
}

impl Server {
    pub(crate) fn new(cx: ConnectionTo<Client>, options: AcpOptions) -> Server {
        let (events_tx, events) = mpsc::unbounded_channel();
        let (overdue_tx, overdue) = mpsc::unbounded_channel();
        Server {
            cx,
            options,
            sessions: HashMap::new(),
            prompts: HashMap::new(),
            next_prompt: 1,
            events_tx,
            events,
            overdue_tx,
            overdue,
        }
    }

    pub(crate) async fn run(mut self, mut incoming: mpsc::UnboundedReceiver<Incoming>) -> anyhow::Result<i32> {
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut sighup = signal(SignalKind::hangup())?;
        let cx = self.cx.clone();
        let closed = cx.incoming_closed();
        tokio::pin!(closed);
        // Closing stdin is a quit: jobs go as `jobs.on_quit` says (no one to ask: kill).
        let detach = loop {
            tokio::select! {
                Some(request) = incoming.recv() => self.on_request(request).await,
                Some((id, event)) = self.events.recv() => self.on_event(&id, event),
                Some((id, prompt)) = self.overdue.recv() => {
                    if let Some(live) = self.sessions.get_mut(&id) {
                        let out = live.state.command_overdue(prompt);
                        self.perform(&id, out);
                    }
                }
                _ = &mut closed => break Some(self.options.config.jobs.on_quit == OnQuit::Keep),
                _ = sigterm.recv() => break Some(false),
                _ = sigint.recv() => break Some(false),
                // The terminal went away: jobs wait `jobs.orphan_grace_s` for a new owner.
                _ = sighup.recv() => break None,
            }
        };
        self.shut_down(detach).await;
        Ok(0)
    }

    async fn shut_down(&mut self, detach: Option<bool>) {
        tracing::info!(sessions = self.sessions.len(), "acp: shutting down");
        for live in self.sessions.values() {
            match detach {
                Some(true) => drop(live.ops.send(Op::LeaveJobs { detach: true })),
                Some(false) => {}
                None => drop(live.ops.send(Op::LeaveJobs { detach: false })),
            }
            let _ = live.ops.send(Op::Shutdown);
        }
        let deadline = tokio::time::Instant::now() + SHUTDOWN_DEADLINE;
        while !self.sessions.is_empty() {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some((id, event))) => self.on_event(&id, event),
                Ok(None) | Err(_) => break,
            }
        }
    }

    async fn on_request(&mut self, request: Incoming) {
        let result = match request {
            Incoming::NewSession(req, responder) => self.new_session(req, responder).await,
            Incoming::LoadSession(req, responder) => self.load_session(req, responder).await,
            Incoming::ListSessions(req, responder) => self.list_sessions(req, responder).await,
            Incoming::Prompt(req, responder) => self.prompt(req, responder),
            Incoming::Cancel(note) => {
                self.cancel(&note.session_id.to_string());
                Ok(())
            }
            Incoming::SetMode(req, responder) => self.set_mode(req, responder),
            Incoming::SetConfigOption(req, responder) => self.set_config_option(req, responder),
            Incoming::SetModel(req, responder) => self.set_model(req, responder),
            Incoming::Close(req, responder) => self.close(req, responder),
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "acp: could not answer a request");
        }
    }

    /// Start an engine and read up to its `SessionReady`; what came before it is kept.
    async fn open(&mut self, choice: SessionChoice, cwd: PathBuf) -> anyhow::Result<(String, Vec<Event>)> {
        let mut handle = self.options.starter.start(choice, cwd).await?;
        let mut early = Vec::new();
        let id = loop {
            let event = tokio::time::timeout(Duration::from_secs(30), handle.events.recv())
                .await
                .map_err(|_| anyhow::anyhow!("the engine did not show the session within 30 s"))?
                .ok_or_else(|| anyhow::anyhow!("the engine stopped before it showed the session"))?;
            if let Event::SessionReady { session_id, .. } = &event {
                let id = session_id.clone();
                early.push(event);
                break id;
            }
            early.push(event);
        };
        let models = self.options.starter.models().await;
        let live = Live {
            ops: handle.ops.clone(),
            state: SessionState::new(""),
            loading: None,
            models,
            busy_mode: self.options.config.agent.busy_input_mode,
            approval_mode: self.options.config.approvals.mode,
        };
        self.sessions.insert(id.clone(), live);
        let tx = self.events_tx.clone();
        let key = id.clone();
        tokio::spawn(async move {
            while let Some(event) = handle.events.recv().await {
                if tx.send((key.clone(), event)).is_err() {
                    break;
                }
            }
        });
        Ok((id, early))
    }

    async fn new_session(
        &mut self,
        req: NewSessionRequest,
        responder: Responder<NewSessionResponse>,
    ) -> Result<(), Error> {
        let (id, early) = match self.open(SessionChoice::New, req.cwd.clone()).await {
            Ok(opened) => opened,
            Err(e) => return responder.respond_with_error(Error::internal_error().data(json!(format!("{e:#}")))),
        };
        for event in early {
            self.on_event(&id, event);
        }
        let mut response = self.session_setup(&id);
        response["sessionId"] = json!(id);
        responder.respond(typed(response)?)?;
        self.send_update(&id, updates::available_commands());
        Ok(())
    }

    async fn load_session(
        &mut self,
        req: LoadSessionRequest,
        responder: Responder<LoadSessionResponse>,
    ) -> Result<(), Error> {
        let id = req.session_id.to_string();
        if self.sessions.contains_key(&id) {
            return responder.respond_with_error(
                Error::invalid_params().data(json!(format!("session {id} is already open on this connection"))),
            );
        }
        let (opened, early) = match self.open(SessionChoice::Resume(id.clone()), req.cwd.clone()).await {
            Ok(opened) => opened,
            Err(e) => return responder.respond_with_error(Error::invalid_params().data(json!(format!("{e:#}")))),
        };
        if let Some(live) = self.sessions.get_mut(&opened) {
            live.loading = Some(Loading { responder, pages: Vec::new() });
        }
        for event in early {
            self.on_event(&opened, event);
        }
        Ok(())
    }

    /// The history is all here: replay it, oldest first, then answer the load.
    fn finish_load(&mut self, id: &str) {
        let Some(loading) = self.sessions.get_mut(id).and_then(|l| l.loading.take()) else { return };
        for page in loading.pages.iter().rev() {
            for update in updates::replay(page) {
                self.send_update(id, update);
            }
        }
        let response = self.session_setup(id);
        let answered = typed(response).and_then(|r| loading.responder.respond(r));
        if let Err(e) = answered {
            tracing::warn!(error = %e, "acp: could not answer session/load");
        }
        self.send_update(id, updates::available_commands());
    }

    /// What `session/new` and `session/load` answer besides the id: the approval modes and
    /// the settings a client can change.
    fn session_setup(&self, id: &str) -> Value {
        let Some(live) = self.sessions.get(id) else { return json!({}) };
        json!({
            "modes": modes(live.approval_mode),
            "configOptions": live.settings(),
        })
    }

    async fn list_sessions(
        &mut self,
        req: ListSessionsRequest,
        responder: Responder<ListSessionsResponse>,
    ) -> Result<(), Error> {
        let listed = match self.options.store.list_sessions(500).await {
            Ok(listed) => listed,
            Err(e) => return responder.respond_with_error(Error::internal_error().data(json!(e.to_string()))),
        };
        let cwd = req.cwd.as_ref().map(|c| c.display().to_string());
        let sessions: Vec<Value> = listed
            .into_iter()
            .filter(|s| cwd.as_ref().is_none_or(|c| *c == s.cwd))
            .map(|s| {
                let title = s.title.clone().unwrap_or_else(|| s.first_line.clone());
                let updated = chrono::DateTime::from_timestamp_millis(s.updated_at).map(|t| t.to_rfc3339());
                json!({ "sessionId": s.id, "cwd": s.cwd, "title": title, "updatedAt": updated })
            })
            .collect();
        responder.respond(typed(json!({ "sessions": sessions }))?)
    }

    fn prompt(&mut self, req: PromptRequest, responder: Responder<PromptResponse>) -> Result<(), Error> {
        let id = req.session_id.to_string();
        let Some(live) = self.sessions.get_mut(&id) else { return responder.respond_with_error(unknown_session(&id)) };
        let text = prompt_text(&serde_json::to_value(&req.prompt).unwrap_or(Value::Null));
        let prompt = self.next_prompt;
        self.next_prompt += 1;
        self.prompts.insert(prompt, responder);
        let (ops, out) = live.state.prompt(prompt, text.clone());
        let is_command = ops.iter().any(|op| matches!(op, Op::Command(_)));
        for op in ops {
            let _ = live.ops.send(op);
        }
        if is_command {
            let tx = self.overdue_tx.clone();
            let key = id.clone();
            tokio::spawn(async move {
                tokio::time::sleep(COMMAND_REPLY).await;
                let _ = tx.send((key, prompt));
            });
        }
        self.perform(&id, out);
        Ok(())
    }

    /// `session/cancel` is Esc: the turn stops, foreground commands are killed, background
    /// jobs are not touched.
    fn cancel(&mut self, id: &str) {
        if let Some(live) = self.sessions.get(id) {
            if live.state.busy() {
                let _ = live.ops.send(Op::Interrupt);
            }
        }
    }

    /// `session/set_mode`: the approval mode, for this session (as `/approvals` is).
    fn set_mode(
        &mut self,
        req: SetSessionModeRequest,
        responder: Responder<SetSessionModeResponse>,
    ) -> Result<(), Error> {
        let id = req.session_id.to_string();
        let Some(live) = self.sessions.get_mut(&id) else { return responder.respond_with_error(unknown_session(&id)) };
        let Some(mode) = ApprovalMode::parse(&req.mode_id.to_string()) else {
            return responder.respond_with_error(
                Error::invalid_params().data(json!("the approval modes are auto, prompt and off")),
            );
        };
        live.approval_mode = mode;
        let _ = live.ops.send(Op::Command(crate::protocol::SlashCommand::Approvals(Some(mode))));
        responder.respond(typed(json!({}))?)?;
        self.send_update(&id, json!({ "sessionUpdate": "current_mode_update", "currentModeId": mode_id(mode) }));
        Ok(())
    }

    fn set_config_option(
        &mut self,
        req: SetSessionConfigOptionRequest,
        responder: Responder<SetSessionConfigOptionResponse>,
    ) -> Result<(), Error> {
        let id = req.session_id.to_string();
        let Some(live) = self.sessions.get_mut(&id) else { return responder.respond_with_error(unknown_session(&id)) };
        // A select's value is `{"value": "<id>"}` once serialised (a boolean's has a type too).
        let value = serde_json::to_value(&req.value).unwrap_or(Value::Null);
        let value = value["value"].as_str().map(str::to_string).unwrap_or_default();
        match req.config_id.to_string().as_str() {
            "model" => {
                if let Err(e) = switch_model(live, &value) {
                    return responder.respond_with_error(e);
                }
            }
            "busy_mode" => match BusyMode::parse(&value) {
                Some(mode) => {
                    live.busy_mode = mode;
                    let _ = live.ops.send(Op::Command(crate::protocol::SlashCommand::Busy(Some(mode))));
                }
                None => {
                    return responder.respond_with_error(
                        Error::invalid_params().data(json!("busy_mode is redirect, steer or queue")),
                    )
                }
            },
            other => {
                return responder.respond_with_error(
                    Error::invalid_params().data(json!(format!("no setting {other}: model and busy_mode are"))),
                )
            }
        }
        responder.respond(typed(json!({ "configOptions": live.settings() }))?)
    }

    /// The older `session/set_model` some clients still send.
    fn set_model(&mut self, req: SetModelRequest, responder: Responder<SetModelResponse>) -> Result<(), Error> {
        let Some(live) = self.sessions.get_mut(&req.session_id) else {
            return responder.respond_with_error(unknown_session(&req.session_id));
        };
        match switch_model(live, &req.model_id) {
            Ok(()) => responder.respond(SetModelResponse {}),
            Err(e) => responder.respond_with_error(e),
        }
    }

    fn close(&mut self, req: CloseSessionRequest, responder: Responder<CloseSessionResponse>) -> Result<(), Error> {
        let id = req.session_id.to_string();
        let Some(live) = self.sessions.get(&id) else { return responder.respond_with_error(unknown_session(&id)) };
        if self.options.config.jobs.on_quit == OnQuit::Keep {
            let _ = live.ops.send(Op::LeaveJobs { detach: true });
        }
        let _ = live.ops.send(Op::Shutdown);
        responder.respond(typed(json!({}))?)
    }

    fn on_event(&mut self, id: &str, event: Event) {
        let Some(live) = self.sessions.get_mut(id) else { return };
        let out = live.state.on_event(event);
        self.perform(id, out);
    }

    fn perform(&mut self, id: &str, out: Vec<Out>) {
        for o in out {
            match o {
                Out::Update(update) => self.send_update(id, update),
                Out::Permission { approval, tool_call } => self.ask(id, approval, tool_call),
                Out::Answer { prompts, answer } => {
                    for prompt in prompts {
                        if let Some(responder) = self.prompts.remove(&prompt) {
                            let answered = match &answer {
                                Answer::Stop(reason) => {
                                    typed(json!({ "stopReason": reason.as_str() })).and_then(|r| responder.respond(r))
                                }
                                Answer::Failed(why) => {
                                    responder.respond_with_error(Error::internal_error().data(json!(why)))
                                }
                            };
                            if let Err(e) = answered {
                                tracing::warn!(error = %e, "acp: could not answer a prompt");
                            }
                        }
                    }
                }
                Out::Ready { history, earlier, .. } => self.on_ready(id, history, earlier),
                Out::Earlier { items, earlier } => self.on_ready(id, items, earlier),
                Out::Model(_) => {
                    if let Some(live) = self.sessions.get(id) {
                        let update =
                            json!({ "sessionUpdate": "config_option_update", "configOptions": live.settings() });
                        self.send_update(id, update);
                    }
                }
                Out::Closed => {
                    self.sessions.remove(id);
                }
            }
        }
    }

    /// A page of history arrived: a load asks for the page before it, or replays them all.
    fn on_ready(&mut self, id: &str, items: Vec<HistoryItem>, earlier: Option<i64>) {
        let Some(live) = self.sessions.get_mut(id) else { return };
        let Some(loading) = live.loading.as_mut() else { return };
        loading.pages.push(items);
        match earlier {
            Some(before) if loading.pages.len() < REPLAY_PAGES => {
                let _ = live.ops.send(Op::LoadEarlier { before });
            }
            _ => self.finish_load(id),
        }
    }

    fn send_update(&self, id: &str, update: Value) {
        let sent = typed::<SessionNotification>(json!({ "sessionId": id, "update": update }))
            .and_then(|n| self.cx.send_notification(n));
        if let Err(e) = sent {
            tracing::warn!(error = %e, "acp: could not send an update");
        }
    }

    /// `session/request_permission` with Talaria's four answers; no answer (or an error)
    /// is a denial.
    fn ask(&self, id: &str, approval: u64, tool_call: Value) {
        let Some(live) = self.sessions.get(id) else { return };
        let ops = live.ops.clone();
        let cx = self.cx.clone();
        let request = json!({
            "sessionId": id,
            "toolCall": tool_call,
            "options": [
                { "optionId": "once", "name": "Allow once", "kind": "allow_once" },
                { "optionId": "session", "name": "Allow for this session", "kind": "allow_always" },
                { "optionId": "always", "name": "Always allow (saved in config.toml)", "kind": "allow_always" },
                { "optionId": "deny", "name": "Deny", "kind": "reject_once" },
            ],
        });
        tokio::spawn(async move {
            let decision = match typed::<RequestPermissionRequest>(request) {
                Ok(request) => match cx.send_request(request).block_task().await {
                    Ok(response) => match response.outcome {
                        RequestPermissionOutcome::Selected(selected) => approval_of(&selected.option_id.to_string()),
                        RequestPermissionOutcome::Cancelled => Approval::Deny,
                        _ => Approval::Deny,
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "acp: request_permission failed; denying");
                        Approval::Deny
                    }
                },
                Err(_) => Approval::Deny,
            };
            let _ = ops.send(Op::Approve { id: approval, decision });
        });
    }
}

fn approval_of(option: &str) -> Approval {
    match option {
        "once" => Approval::Once,
        "session" => Approval::Session,
        "always" => Approval::Always,
        _ => Approval::Deny,
    }
}

/// `/model <name>`; the engine refuses it while a turn runs, and so does this, with words.
fn switch_model(live: &mut Live, model: &str) -> Result<(), Error> {
    if model.is_empty() {
        return Err(Error::invalid_params().data(json!("a model needs a name")));
    }
    if live.state.busy() {
        return Err(Error::invalid_params().data(json!("the model can change once the running turn ends")));
    }
    if !live.models.iter().any(|m| m == model) {
        live.models.push(model.to_string());
    }
    live.state.model_chosen(model);
    let _ = live.ops.send(Op::Command(crate::protocol::SlashCommand::Model(Some(model.to_string()))));
    Ok(())
}
