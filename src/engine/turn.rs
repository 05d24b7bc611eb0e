//! The turn loop (DESIGN §3): model -> tools -> model until the model answers without
//! tool calls, the iteration budget is spent, or the turn is interrupted. Messages typed
//! while it runs are delivered at the boundaries this loop defines.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::engine::activity::Activity;
use crate::engine::approval::Approver;
use crate::engine::compaction::{self, Compactor};
use crate::engine::context::ContextMeter;
use crate::engine::history::{outcome_kind, to_stored, wrap_out_of_band, DisplayKind};
use crate::engine::jobs::{JobsHandle, NoticeKind};
use crate::engine::llm::{
    CacheLifetime, ChatMessage, ChatRequest, Completion, LlmError, Provider, RequestSent, StreamDelta, ToolCall,
};
use crate::engine::mcp::McpHandle;
use crate::engine::scheduler::UserMessage;
use crate::engine::store::{OmittedRows, Store, StoredMessage};
use crate::engine::tools::{Concurrency, Registry, ToolCtx, ToolResult, ToolSignals};
use crate::engine::EventSink;
use crate::protocol::ToolStatus;
use crate::protocol::{Event, NoticeLevel, Origin, ToolOutcome, TurnOutcome, TurnTrigger};

pub use crate::engine::scheduler::TurnInput;

/// How long a turn waits for the engine to answer at a delivery point (it answers at once
/// unless it is stuck; then the turn goes on without the messages, which stay pending).
const ASK_DEADLINE: Duration = Duration::from_secs(60);

/// What stays the same for every turn of a session.
#[derive(Clone)]
pub struct TurnEnv {
    pub provider: Arc<dyn Provider>,
    pub model: String,
    pub registry: Registry,
    /// The session's MCP servers (their tools are in `registry` too); None in tests.
    pub mcp: Option<McpHandle>,
    pub config: Arc<Config>,
    pub store: Store,
    pub events: EventSink,
    pub jobs: JobsHandle,
    pub approver: Approver,
    pub cwd: Arc<Mutex<std::path::PathBuf>>,
    pub session_id: String,
    pub system_prompt: String,
}

/// How the engine reaches into a running turn.
#[derive(Clone)]
pub struct TurnControl {
    pub(crate) interrupt: CancellationToken,
    /// Bumped to make running tools yield (redirect while tools run, Ctrl+B).
    pub(crate) yield_tx: Arc<watch::Sender<u64>>,
    /// Bumped to release a `process wait` early (any message typed while busy).
    pub(crate) release_tx: Arc<watch::Sender<u64>>,
    /// Bumped to abort a model stream (redirect while streaming).
    pub(crate) redirect_tx: Arc<watch::Sender<u64>>,
    /// How the turn asks the engine, which owns them, for the messages typed since its last
    /// delivery point, and says it has stored them.
    asks: mpsc::UnboundedSender<TurnAsk>,
    /// How many such messages wait (the engine writes it): a tool that starts while one
    /// waits is released at once.
    waiting: watch::Receiver<usize>,
    /// Stamped by stream bytes and held while tools run (turn liveness, DESIGN §5).
    pub(crate) activity: Option<Activity>,
    /// Becomes true once the workspace's rewind snapshot before this turn is taken: the
    /// model's first request does not wait for it, the tools (which change files) do.
    before_tools: Option<watch::Receiver<bool>>,
    /// Fired when the turn's first model request is on the wire (the rewind snapshot waits
    /// for it, so its git processes do not compete with building and sending the request).
    first_request: RequestSent,
    /// The heartbeat and goal behind this turn: when the next request is expected.
    pub(crate) standing: crate::engine::cadence::Standing,
}

/// A running turn's question to the engine.
#[derive(Debug)]
pub(crate) enum TurnAsk {
    /// At a delivery point: the messages typed since the last one (maybe none).
    Messages(oneshot::Sender<Vec<UserMessage>>),
    /// What the last answer held is stored (or was given back to the input box).
    Delivered,
}

impl TurnControl {
    pub(crate) fn new(asks: mpsc::UnboundedSender<TurnAsk>, waiting: watch::Receiver<usize>) -> TurnControl {
        let interrupt = CancellationToken::new();
        TurnControl {
            activity: Some(Activity::new(interrupt.clone())),
            interrupt,
            yield_tx: Arc::new(watch::channel(0).0),
            release_tx: Arc::new(watch::channel(0).0),
            redirect_tx: Arc::new(watch::channel(0).0),
            asks,
            waiting,
            before_tools: None,
            first_request: RequestSent::default(),
            standing: crate::engine::cadence::Standing::default(),
        }
    }

    /// The tools of this turn wait until `ready` is true (or its sender is gone).
    pub(crate) fn tools_wait_for(&mut self, ready: watch::Receiver<bool>) {
        self.before_tools = Some(ready);
    }

    /// `sent` is fired when the turn's first model request goes out.
    pub(crate) fn on_first_request(&mut self, sent: RequestSent) {
        self.first_request = sent;
    }

    async fn ready_for_tools(&self) {
        // Tools run after an answer, so the request went out; should its signal have been
        // missed, the snapshot must not wait for it any longer.
        self.first_request.fire();
        if let Some(ready) = &self.before_tools {
            let mut ready = ready.clone();
            let _ = ready.wait_for(|done| *done).await;
        }
    }

    /// A control with no engine behind it: nothing is ever typed while the turn runs.
    pub fn detached() -> TurnControl {
        TurnControl::new(mpsc::unbounded_channel().0, watch::channel(0).1)
    }

    /// The messages typed since the last delivery point (none when the engine is gone).
    async fn ask(&self) -> Vec<UserMessage> {
        let (tx, rx) = oneshot::channel();
        if self.asks.send(TurnAsk::Messages(tx)).is_err() {
            return Vec::new();
        }
        match tokio::time::timeout(ASK_DEADLINE, rx).await {
            Ok(answer) => answer.unwrap_or_default(),
            Err(_) => {
                tracing::warn!("the engine did not answer a delivery point within {ASK_DEADLINE:?}");
                Vec::new()
            }
        }
    }

    fn delivered(&self) {
        let _ = self.asks.send(TurnAsk::Delivered);
    }

    pub(crate) fn bump(tx: &watch::Sender<u64>) {
        tx.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn signals(&self) -> ToolSignals {
        ToolSignals {
            interrupt: self.interrupt.clone(),
            yield_gen: self.yield_tx.subscribe(),
            release_gen: self.release_tx.subscribe(),
        }
    }
}

pub struct TurnResult {
    pub(crate) history: Vec<ChatMessage>,
    /// The older part of the context still only in the database (`None` once compacted).
    pub(crate) omitted: Option<OmittedRows>,
    pub outcome: TurnOutcome,
    pub(crate) usage: crate::engine::llm::Usage,
    pub(crate) meter: ContextMeter,
}

impl TurnEnv {
    pub(crate) fn cwd(&self) -> std::path::PathBuf {
        lock(&self.cwd).clone()
    }
}

pub(crate) use crate::util::lock;

/// Run one turn. Owns the history while it runs and hands it back. `omitted`: older
/// messages of the context left in the database (a compaction summarises them too). The
/// caller reports the end (`Event::TurnFinished`).
pub async fn run_turn(
    env: TurnEnv,
    control: TurnControl,
    mut history: Vec<ChatMessage>,
    mut omitted: Option<OmittedRows>,
    inputs: Vec<TurnInput>,
    trigger: TurnTrigger,
    mut meter: ContextMeter,
) -> TurnResult {
    tracing::trace!(target: "enter_request", "turn: running");
    env.events.send(Event::TurnStarted { trigger: trigger.clone() });
    let mut usage = crate::engine::llm::Usage::default();
    let mut delivery = push_inputs(&env, &mut history, inputs, &trigger).await;
    let saved = delivery == Delivery::Sent;
    tracing::trace!(target: "enter_request", "turn: inputs stored");
    let max_iterations = env.config.agent.max_iterations.max(1);
    // A message that could not be saved (or can never fit) is not sent: the turn fails
    // before any model call.
    let iterations = if saved { max_iterations } else { 0 };
    // Messages already counted by the meter.
    let mut counted = history.len();
    let mut outcome = if saved { TurnOutcome::BudgetExhausted } else { TurnOutcome::Failed };
    // Messages typed during streaming are plain user messages; after tools they are wrapped.
    let mut deliver_wrapped = false;
    if let Some(mcp) = &env.mcp {
        // Headless only (interactive runs never wait): the servers' tools are in the request.
        mcp.wait_for_startup(&control.interrupt).await;
    }
    for _ in 0..iterations {
        // Interrupted: pending messages go back to the input box, not to the model.
        if control.interrupt.is_cancelled() {
            outcome = TurnOutcome::Interrupted;
            break;
        }
        // A sub-agent whose parent paused waits here, before its next model call.
        if let Some(file) = &env.config.agents.pause_file {
            if wait_while_paused(&env, &control, file).await {
                outcome = TurnOutcome::Interrupted;
                break;
            }
        }
        // Watch for redirects before taking the pending messages: one typed from here on
        // either goes into this request or aborts it, never waits behind a whole answer.
        let mut redirect = control.redirect_tx.subscribe();
        delivery = deliver_pending(&env, &control, &mut history, deliver_wrapped).await;
        if delivery == Delivery::Sent {
            delivery = deliver_job_notices(&env, &mut history).await;
        }
        if delivery != Delivery::Sent {
            outcome = TurnOutcome::Failed;
            break;
        }
        meter.add_estimate(&history[counted..]);
        counted = history.len();
        if meter.should_compact(env.config.agent.compact_at) {
            (history, omitted) = auto_compact(&env, &control, history, omitted, &mut meter).await;
            counted = history.len();
        }
        let request_len = history.len();
        tracing::trace!(target: "enter_request", "turn: pending delivered");
        let lifetime = cache_lifetime(&env, &control, &trigger).await;
        match stream_once(&env, &control, &history, lifetime, &mut redirect).await {
            StreamEnd::Done(completion) => {
                if let Some(u) = completion.usage {
                    usage.add(&u);
                    send_usage(&env, &u);
                    if u.prompt_tokens > 0 {
                        meter.observe_usage(u.prompt_tokens);
                        counted = request_len;
                    }
                }
                send_context(&env, &meter);
                if !keep_answer(&env, &mut history, &completion).await {
                    delivery = Delivery::NotSaved;
                    // Its tool calls are not run: neither they nor their results could be kept.
                    outcome = TurnOutcome::Failed;
                    break;
                }
                if completion.tool_calls.is_empty() {
                    outcome = TurnOutcome::Completed;
                    break;
                }
                run_tools(&env, &control, &mut history, &completion.tool_calls, &redirect).await;
                if control.interrupt.is_cancelled() {
                    outcome = TurnOutcome::Interrupted;
                    break;
                }
                deliver_wrapped = true;
            }
            StreamEnd::Redirected(partial) => {
                keep_partial(&env, &mut history, partial).await;
                deliver_wrapped = false;
            }
            StreamEnd::Interrupted(partial) => {
                keep_partial(&env, &mut history, partial).await;
                outcome = TurnOutcome::Interrupted;
                break;
            }
            StreamEnd::Failed(partial, error) => {
                keep_partial(&env, &mut history, partial).await;
                env.events.send(Event::notice(NoticeLevel::Error, failure_text(&error)));
                outcome = TurnOutcome::Failed;
                break;
            }
        }
    }
    say_why_it_stopped(&env, delivery, outcome, max_iterations);
    meter.add_estimate(&history[counted.min(history.len())..]);
    send_context(&env, &meter);
    // `Event::TurnFinished` is sent by the engine once it no longer counts the turn as
    // running, so a message or command sent on seeing it is not treated as busy input.
    TurnResult { history, omitted, outcome, usage, meter }
}

/// How often a paused sub-agent looks whether its parent unpaused.
const PAUSE_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// A sub-agent's pause (its parent's `/pause`, DESIGN §14): nothing in flight is stopped,
/// but no model call starts until the sentinel is gone; the stream says `Paused` meanwhile
/// (the parent's pane shows it waiting). True when it was interrupted while it waited.
async fn wait_while_paused(env: &TurnEnv, control: &TurnControl, file: &std::path::Path) -> bool {
    if !crate::engine::estop::is_paused(file) {
        return false;
    }
    // Waiting on purpose is not a stalled turn.
    let _hold = control.activity.as_ref().map(|a| a.hold());
    env.events.send(Event::Phase { phase: crate::protocol::Phase::Paused });
    let interrupted = loop {
        tokio::select! {
            _ = control.interrupt.cancelled() => break true,
            _ = tokio::time::sleep(PAUSE_POLL) => {}
        }
        if !crate::engine::estop::is_paused(file) {
            break false;
        }
    };
    env.events.send(Event::Phase { phase: crate::protocol::Phase::Turn });
    interrupted
}

/// The turn's own inputs, in order. Job notices waiting when the user starts a turn go in
/// right before the message (a kill just made among them), not in a turn of their own.
async fn push_inputs(
    env: &TurnEnv,
    history: &mut Vec<ChatMessage>,
    inputs: Vec<TurnInput>,
    trigger: &TurnTrigger,
) -> Delivery {
    let mut notices_in = false;
    for input in inputs {
        if *trigger == TurnTrigger::User && input.origin == Origin::Typed && !notices_in {
            notices_in = true;
            let delivery = deliver_job_notices(env, history).await;
            if delivery != Delivery::Sent {
                return delivery;
            }
        }
        let delivery = push_user(env, history, input, trigger.clone(), false).await;
        if delivery != Delivery::Sent {
            return delivery;
        }
    }
    Delivery::Sent
}

/// Store and show the model's answer; false when it could not be stored.
async fn keep_answer(env: &TurnEnv, history: &mut Vec<ChatMessage>, completion: &Completion) -> bool {
    let reasoning = (!completion.reasoning.is_empty()).then(|| completion.reasoning.clone());
    let mut message = ChatMessage::assistant(completion.content.clone(), completion.tool_calls.clone());
    message.thinking = completion.thinking.clone();
    let saved = persist(env, &message, None).await;
    env.events.send(Event::AssistantDone { text: completion.content.clone(), reasoning });
    if !saved {
        return false;
    }
    history.push(message);
    if completion.hit_token_limit() {
        env.events.send(Event::notice(
            NoticeLevel::Warn,
            "the answer stopped at the output token limit (model.max_tokens); say \"go on\" for the rest",
        ));
    }
    true
}

/// A turn that stopped short of an answer says why.
fn say_why_it_stopped(env: &TurnEnv, delivery: Delivery, outcome: TurnOutcome, max_iterations: u32) {
    if delivery == Delivery::NotSaved {
        env.events.send(Event::notice(
            NoticeLevel::Error,
            "the turn stopped: a message could not be saved, so it was not sent on (free some disk space and try again)",
        ));
    }
    if outcome == TurnOutcome::BudgetExhausted {
        env.events.send(Event::notice(
            NoticeLevel::Warn,
            format!(
                "stopped after {max_iterations} model calls in one turn (agent.max_iterations); send a message to go on"
            ),
        ));
    }
}

/// Run the user's own `!command` as a foreground job shown like a tool call. It is not sent
/// to the model now; its output tail is added as context for the next message.
pub(crate) async fn run_bang(
    env: TurnEnv,
    control: TurnControl,
    mut history: Vec<ChatMessage>,
    omitted: Option<OmittedRows>,
    command: String,
    mut meter: ContextMeter,
) -> TurnResult {
    use crate::engine::tools::Tool;
    env.events.send(Event::TurnStarted { trigger: TurnTrigger::User });
    let call_id = format!("bang_{}", history.len());
    let tool = crate::engine::tools::terminal::TerminalTool;
    let args = json!({ "command": command });
    env.events.send(Event::ToolStarted { call_id: call_id.clone(), name: "!".into(), summary: command.clone() });
    // The user typed it: no approval prompt (the hardline list still applies).
    let approvals =
        Approver::new(&env.config, crate::engine::approval::PromptPolicy::AllowUnattended, None, env.events.clone());
    let ctx = ToolCtx {
        call_id: call_id.clone(),
        session_id: env.session_id.clone(),
        config: env.config.clone(),
        cwd: env.cwd.clone(),
        jobs: env.jobs.clone(),
        approvals,
        signals: control.signals(),
        events: env.events.clone(),
    };
    let started = Instant::now();
    let result = match tokio::spawn(async move { tool.call(args, ctx).await }).await {
        Ok(r) => r,
        Err(e) => ToolResult::error(format!("the command crashed: {e}")),
    };
    let output = result.value.get("output").and_then(Value::as_str).unwrap_or("").to_string();
    let error = result.value.get("error").and_then(Value::as_str).unwrap_or("");
    let shown = if error.is_empty() { output.clone() } else { format!("{output}\n{error}") };
    let outcome = ToolOutcome {
        ok: result.ok,
        exit_code: result.exit_code,
        status: result.status,
        duration_ms: started.elapsed().as_millis() as u64,
        result: result.value.to_string(),
    };
    env.events.send(Event::ToolFinished { call_id, outcome });
    let note = crate::engine::bang::context_message(&command, result.exit_code, &shown);
    let message = ChatMessage::user(note);
    let row =
        StoredMessage { origin: Some(Origin::Typed), ..to_stored(&message, Some(DisplayKind::Bang.as_str().into())) };
    persist_row(&env, row).await;
    meter.add_estimate(std::slice::from_ref(&message));
    history.push(message);
    let outcome = if control.interrupt.is_cancelled() { TurnOutcome::Interrupted } else { TurnOutcome::Completed };
    TurnResult { history, omitted, outcome, usage: crate::engine::llm::Usage::default(), meter }
}

/// One call's tokens, and its dollars when the model is priced. The session's totals in the
/// database count it now, not when the turn ends: a quit or a crash right after the answer
/// keeps what was spent.
fn send_usage(env: &TurnEnv, u: &crate::engine::llm::Usage) {
    if u.prompt_tokens + u.completion_tokens > 0 {
        // Queued on the database thread at once; nothing waits for it.
        drop(env.store.add_usage(&env.session_id, u.prompt_tokens, u.completion_tokens));
    }
    let cost_usd = crate::engine::llm::spend::cost_of(&env.config.prices, env.provider.kind(), &env.model, u);
    env.events.send(Event::Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens,
        cache_write_1h_tokens: u.cache_write_1h_tokens,
        cost_usd,
    });
}

pub(crate) fn send_context(env: &TurnEnv, meter: &ContextMeter) {
    let percent = (meter.window > 0).then(|| meter.percent());
    env.events.send(Event::Context { label: meter.label(), percent });
}

/// The system prompt and the tool definitions, as messages the meter can estimate.
pub(crate) fn fixed_context(env: &TurnEnv) -> Vec<ChatMessage> {
    let tools = serde_json::to_string(&env.registry.definitions()).unwrap_or_default();
    vec![ChatMessage::system(env.system_prompt.clone()), ChatMessage::system(tools)]
}

/// Compact before a request would overflow the window, and say so in the transcript.
async fn auto_compact(
    env: &TurnEnv,
    control: &TurnControl,
    history: Vec<ChatMessage>,
    omitted: Option<OmittedRows>,
    meter: &mut ContextMeter,
) -> (Vec<ChatMessage>, Option<OmittedRows>) {
    env.events.send(Event::notice(NoticeLevel::Info, format!("{} — compacting older turns…", meter.label())));
    match compaction::compact_history(&compactor(env), history, omitted, None, &control.interrupt).await {
        Ok(done) => {
            let mut all = fixed_context(env);
            all.extend_from_slice(&done.history);
            meter.reset(&all);
            env.events.send(Event::notice(
                NoticeLevel::Info,
                format!("context compacted: {} earlier messages summarised ({})", done.summarised, meter.label()),
            ));
            (done.history, None)
        }
        Err((history, why)) => {
            let text = match omitted {
                // The request goes with the part of the conversation that fits the window.
                Some(o) => format!(
                    "compaction failed: {why}; the model gets the last {} messages, not the {} before them",
                    history.len(),
                    o.count
                ),
                None => format!("compaction failed: {why}"),
            };
            env.events.send(Event::notice(NoticeLevel::Warn, text));
            (history, omitted)
        }
    }
}

/// What a compaction of this session needs (owned: `/compact` runs it as its own task).
pub(crate) fn compactor(env: &TurnEnv) -> Compactor {
    Compactor {
        provider: env.provider.clone(),
        model: env.model.clone(),
        store: env.store.clone(),
        session_id: env.session_id.clone(),
        context_window: env.config.model.context_window,
    }
}

/// What went wrong, without advice: each front end says what to do next in its own terms.
fn failure_text(error: &LlmError) -> String {
    format!("model request failed: {error}")
}

/// What became of a user-role message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// Saved and added to the history: the model reads it.
    Sent,
    /// It could not be saved, so it was not sent either.
    NotSaved,
    /// It can never fit the model's context window: refused before it was saved.
    TooLarge,
}

/// Why a typed message cannot be sent at all: with the system prompt and the tool
/// definitions it is larger than the model's whole context window (compaction cannot make
/// room for it). Estimated like the context meter, a quarter of the characters.
pub(crate) fn too_large_for_the_window(text: &str, fixed_tokens: u64, window: u64) -> Option<String> {
    let tokens = crate::engine::context::estimate_text_tokens(text);
    if window == 0 || tokens.saturating_add(fixed_tokens) <= window {
        return None;
    }
    Some(format!(
        "not sent: the message is about {tokens} tokens ({} characters); with the system prompt and tools \
         (about {fixed_tokens}) it cannot fit the model's context window of {window} tokens \
         (model.context_window). Shorten it, or save it to a file and ask about the file.",
        text.chars().count()
    ))
}

/// Add a user-role message (`wrapped`: inside the out-of-band wrapper). What the user
/// typed that cannot be sent (too large, not saved) goes back to the input box.
async fn push_user(
    env: &TurnEnv,
    history: &mut Vec<ChatMessage>,
    input: TurnInput,
    trigger: TurnTrigger,
    wrapped: bool,
) -> Delivery {
    if let Some(typed) = &input.restore {
        let fixed = crate::engine::context::estimate_tokens(&fixed_context(env));
        if let Some(why) = too_large_for_the_window(&input.text, fixed, env.config.model.context_window) {
            env.events.send(Event::notice(NoticeLevel::Error, why));
            env.events.send(Event::RestoreInput { text: typed.clone() });
            return Delivery::TooLarge;
        }
    }
    let message = ChatMessage::user(input.text);
    let kind = DisplayKind::of(input.origin, wrapped).map(|k| k.as_str().to_string());
    let Some(seq) = persist_row(env, StoredMessage { origin: Some(input.origin), ..to_stored(&message, kind) }).await
    else {
        // Not sent either: what the user typed goes back to the input box.
        if let Some(typed) = input.restore {
            env.events.send(Event::RestoreInput { text: typed });
        }
        return Delivery::NotSaved;
    };
    history.push(message);
    env.events.send(Event::UserMessage { text: input.shown, trigger, origin: input.origin, seq: Some(seq) });
    Delivery::Sent
}

/// Deliver messages typed while busy: the engine hands them over when asked, as one user
/// message, wrapped when delivered after tools. Anything but `Sent` when it was not added.
async fn deliver_pending(
    env: &TurnEnv,
    control: &TurnControl,
    history: &mut Vec<ChatMessage>,
    wrapped: bool,
) -> Delivery {
    let messages = control.ask().await;
    if messages.is_empty() {
        return Delivery::Sent;
    }
    let texts: Vec<String> = messages.iter().map(|m| m.text.clone()).collect();
    let shown = texts.join("\n\n");
    let typed = messages.iter().map(|m| m.typed.as_str()).collect::<Vec<_>>().join("\n\n");
    let text = if wrapped { wrap_out_of_band(&texts) } else { shown.clone() };
    let input = TurnInput { text, shown, origin: Origin::MidTurn, restore: Some(typed) };
    let delivery = push_user(env, history, input, TurnTrigger::User, wrapped).await;
    // Stored or given back: either way the engine's crash copy no longer needs them.
    control.delivered();
    delivery
}

/// Where a job notice came from: an exit notice marks its job notified (exactly once) when
/// stored, a watch notice marks nothing.
pub(crate) fn notice_origin(kind: NoticeKind) -> Origin {
    match kind {
        NoticeKind::Exit => Origin::JobNotice,
        NoticeKind::Watch => Origin::Watch,
    }
}

/// Job exits the model has not seen yet and watch matches, as separate user messages (no
/// wrapper). Anything but `Sent` when a notice could not be saved (the rest are not added then).
async fn deliver_job_notices(env: &TurnEnv, history: &mut Vec<ChatMessage>) -> Delivery {
    for notice in env.jobs.take_notices(&env.session_id).await {
        let origin = notice_origin(notice.kind);
        let input = TurnInput::injected(notice.text.clone(), notice.text, origin);
        let delivery = push_user(env, history, input, TurnTrigger::JobNotification, false).await;
        if delivery != Delivery::Sent {
            return delivery;
        }
    }
    Delivery::Sent
}

async fn keep_partial(env: &TurnEnv, history: &mut Vec<ChatMessage>, partial: Partial) {
    if partial.text.is_empty() {
        return;
    }
    // Partial tool calls are dropped: a call without its full arguments cannot be run.
    let message = ChatMessage::assistant(partial.text.clone(), Vec::new());
    persist(env, &message, Some(DisplayKind::Partial)).await;
    history.push(message);
    let reasoning = (!partial.reasoning.is_empty()).then_some(partial.reasoning);
    env.events.send(Event::AssistantDone { text: partial.text, reasoning });
}

/// Save `message`; false (after an error notice) when it could not be saved.
pub(crate) async fn persist(env: &TurnEnv, message: &ChatMessage, display_kind: Option<DisplayKind>) -> bool {
    persist_row(env, to_stored(message, display_kind.map(|k| k.as_str().to_string()))).await.is_some()
}

/// The stored row's seq, or None (said on screen) when it could not be saved.
async fn persist_row(env: &TurnEnv, row: StoredMessage) -> Option<i64> {
    match env.store.append_message(&env.session_id, row).await {
        Ok(seq) => Some(seq),
        Err(e) => {
            tracing::error!(error = %e, "could not persist a message");
            env.events.send(Event::notice(NoticeLevel::Error, format!("could not save a message: {e}")));
            None
        }
    }
}

#[derive(Default)]
struct Partial {
    text: String,
    reasoning: String,
}

enum StreamEnd {
    Done(Completion),
    Redirected(Partial),
    Interrupted(Partial),
    Failed(Partial, LlmError),
}

/// The prompt-cache lifetime of the turn's next request: its background jobs are counted
/// at each request (a goal's turn that starts a long build waits on it after its answer).
async fn cache_lifetime(env: &TurnEnv, control: &TurnControl, trigger: &TurnTrigger) -> CacheLifetime {
    let running = env.jobs.list().await.iter().filter(|j| j.background && j.status.is_running()).count();
    crate::engine::cadence::cache_lifetime(control.standing, trigger, running)
}

async fn stream_once(
    env: &TurnEnv,
    control: &TurnControl,
    history: &[ChatMessage],
    cache_lifetime: CacheLifetime,
    redirect: &mut watch::Receiver<u64>,
) -> StreamEnd {
    // The history is borrowed, not copied: a long session costs one pointer per message.
    let system = ChatMessage::system(env.system_prompt.clone());
    let mut messages = Vec::with_capacity(history.len() + 1);
    messages.push(Cow::Borrowed(&system));
    messages.extend(history.iter().map(Cow::Borrowed));
    let request = ChatRequest {
        model: env.model.clone(),
        messages,
        tools: env.registry.definitions(),
        temperature: None,
        cache_lifetime,
        sent: control.first_request.clone(),
    };
    tracing::trace!(target: "enter_request", "turn: request built");
    let mut partial = Partial::default();
    let events = env.events.clone();
    let activity = control.activity.clone();
    let result = {
        let mut on_delta = |delta: StreamDelta| {
            if let Some(a) = &activity {
                a.stamp();
            }
            match delta {
                StreamDelta::Content(text) => {
                    partial.text.push_str(&text);
                    events.send(Event::AssistantDelta(text));
                }
                StreamDelta::Reasoning(text) => {
                    partial.reasoning.push_str(&text);
                    events.send(Event::ReasoningDelta(text));
                }
                StreamDelta::ToolCallStarted { .. } => {}
            }
        };
        tokio::select! {
            result = env.provider.stream_chat(&request, &mut on_delta) => Raced::Finished(result),
            _ = control.interrupt.cancelled() => Raced::Interrupted,
            _ = redirect.changed() => Raced::Redirected,
        }
    };
    // The stream future is dropped by now: an interrupt or redirect has aborted the request.
    match result {
        Raced::Interrupted => StreamEnd::Interrupted(partial),
        Raced::Redirected => StreamEnd::Redirected(partial),
        Raced::Finished(Ok(completion)) => StreamEnd::Done(completion),
        Raced::Finished(Err(error)) => StreamEnd::Failed(partial, error),
    }
}

enum Raced {
    Finished(Result<Completion, LlmError>),
    Interrupted,
    Redirected,
}

/// Run the tool calls of one response: `Parallel` tools in a run together, `Sequential`
/// ones alone and in order. Every call gets exactly one result message, in order. After a
/// redirect (`redirect` changed since the request) the calls not started yet are skipped,
/// so the user's message is not held back by a command the model chose before it.
async fn run_tools(
    env: &TurnEnv,
    control: &TurnControl,
    history: &mut Vec<ChatMessage>,
    calls: &[ToolCall],
    redirect: &watch::Receiver<u64>,
) {
    control.ready_for_tools().await;
    let mut i = 0;
    while i < calls.len() {
        let parallel = |c: &ToolCall| {
            env.registry.get(&c.function.name).map(|t| t.concurrency() == Concurrency::Parallel).unwrap_or(true)
        };
        let mut end = i + 1;
        if parallel(&calls[i]) {
            while end < calls.len() && parallel(&calls[end]) {
                end += 1;
            }
        }
        let batch = &calls[i..end];
        // A tool inside its own deadline keeps the turn alive.
        let _hold = control.activity.as_ref().map(|a| a.hold());
        let skip = redirect.has_changed().unwrap_or(false);
        let handles: Vec<_> = batch.iter().map(|call| start_tool(env, control, call, skip)).collect();
        for (call, handle) in batch.iter().zip(handles) {
            let (result, started) = match handle {
                Started::Running(join, started) => {
                    let result = match join.await {
                        Ok(result) => result,
                        Err(e) if e.is_panic() => {
                            tracing::error!(tool = %call.function.name, "tool panicked");
                            ToolResult::error(format!("the {} tool crashed: {}", call.function.name, panic_text(e)))
                        }
                        Err(_) => ToolResult::error("the tool was cancelled"),
                    };
                    (result, started)
                }
                Started::Immediate(result) => (result, Instant::now()),
            };
            finish_tool(env, history, call, result, started).await;
        }
        i = end;
    }
}

enum Started {
    Running(tokio::task::JoinHandle<ToolResult>, Instant),
    Immediate(ToolResult),
}

fn start_tool(env: &TurnEnv, control: &TurnControl, call: &ToolCall, skip: bool) -> Started {
    let name = call.function.name.as_str();
    let Some(tool) = env.registry.get(name) else {
        env.events.send(Event::ToolStarted { call_id: call.id.clone(), name: name.into(), summary: String::new() });
        return Started::Immediate(ToolResult::error(format!("unknown tool '{name}'")));
    };
    let args: Value = match parse_arguments(&call.function.arguments) {
        Ok(v) => v,
        Err(message) => {
            env.events.send(Event::ToolStarted { call_id: call.id.clone(), name: name.into(), summary: String::new() });
            return Started::Immediate(ToolResult::error(message));
        }
    };
    // Subscribe before the UI hears of the call: a yield or a message sent from then on
    // reaches this tool. A message already waiting for delivery releases a `process wait`
    // at once (it was typed before the model chose to wait).
    let mut signals = control.signals();
    if *control.waiting.borrow() > 0 {
        signals.release_gen.mark_changed();
    }
    let summary = tool.summary(&args);
    env.events.send(Event::ToolStarted { call_id: call.id.clone(), name: tool.label(), summary });
    if control.interrupt.is_cancelled() {
        return Started::Immediate(interrupted_before_start());
    }
    if skip {
        return Started::Immediate(skipped_for_a_message());
    }
    let ctx = ToolCtx {
        call_id: call.id.clone(),
        session_id: env.session_id.clone(),
        config: env.config.clone(),
        cwd: env.cwd.clone(),
        jobs: env.jobs.clone(),
        approvals: env.approver.clone(),
        signals,
        events: env.events.clone(),
    };
    // A task per tool: a panic becomes that tool's error result instead of ending the turn.
    Started::Running(tokio::spawn(async move { tool.call(args, ctx).await }), Instant::now())
}

fn interrupted_before_start() -> ToolResult {
    ToolResult {
        value: json!({"output": "[Command interrupted]", "exit_code": 130, "error": "the user interrupted the turn before this tool ran"}),
        ok: false,
        exit_code: Some(130),
        status: Some(ToolStatus::Interrupted),
    }
}

fn skipped_for_a_message() -> ToolResult {
    ToolResult {
        value: json!({
            "output": "",
            "exit_code": null,
            "error": "not run: the user sent a message before this call started; read it, then call the tool again if it is still needed",
            "status": "skipped",
        }),
        ok: false,
        exit_code: None,
        status: Some(ToolStatus::Skipped),
    }
}

fn parse_arguments(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("tool arguments must be a JSON object".into()),
        Err(e) => Err(format!("tool arguments are not valid JSON ({e}); send a JSON object")),
    }
}

fn panic_text(e: tokio::task::JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

async fn finish_tool(
    env: &TurnEnv,
    history: &mut Vec<ChatMessage>,
    call: &ToolCall,
    result: ToolResult,
    started: Instant,
) {
    let text = result.value.to_string();
    let outcome = ToolOutcome {
        ok: result.ok,
        exit_code: result.exit_code,
        status: result.status,
        duration_ms: started.elapsed().as_millis() as u64,
        result: text.clone(),
    };
    let message = ChatMessage::tool(call.id.clone(), text);
    let mut stored = to_stored(&message, Some(outcome_kind(&outcome)));
    stored.tool_name = Some(call.function.name.clone());
    if let Err(e) = env.store.append_message(&env.session_id, stored).await {
        tracing::error!(error = %e, "could not persist a tool result");
    }
    history.push(message);
    env.events.send(Event::ToolFinished { call_id: call.id.clone(), outcome });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_that_cannot_fit_the_window_is_named_with_its_size() {
        assert_eq!(too_large_for_the_window("abcd", 10, 11), None);
        assert_eq!(too_large_for_the_window("abcd", 10, 0), None, "an unknown window refuses nothing");
        let why = too_large_for_the_window("abcde", 10, 11).expect("2 + 10 > 11");
        assert!(why.contains("about 2 tokens (5 characters)") && why.contains("window of 11 tokens"), "{why}");
        assert!(too_large_for_the_window(&"x".repeat(10 << 20), 3000, 128_000).is_some());
        assert_eq!(too_large_for_the_window("x", u64::MAX, u64::MAX), None, "no overflow");
    }

    #[test]
    fn arguments_must_be_an_object() {
        assert_eq!(parse_arguments("").unwrap(), json!({}));
        assert!(parse_arguments("[1]").is_err());
        assert!(parse_arguments("{bad").unwrap_err().contains("not valid JSON"));
        assert_eq!(parse_arguments("{\"a\":1}").unwrap(), json!({"a":1}));
    }
}
