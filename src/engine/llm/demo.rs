//! The built-in demo model: a scripted OpenAI-compatible endpoint on loopback, used when no
//! real model is configured. It goes through the real HTTP path, and it shows what Talaria
//! does — tool calls, a long command moved to the background, a background job, goals — with
//! deterministic answers chosen from the conversation it receives.

use std::time::Duration;

use serde_json::{json, Value};

use super::{ChatMessage, Role};
use crate::loopback::chunks::{finish_chunk, text_chunks, tool_call_chunks, usage_chunk, DONE};
use crate::loopback::{Reply, Request, Server};

/// The model id the demo server lists.
pub(crate) const DEMO_MODEL: &str = "talaria-demo";

/// Shown in the transcript (stderr in `talaria exec`) while the demo model is in use.
pub const DEMO_BANNER: &str = "You are talking to Talaria's built-in demo model: scripted answers, no AI.\n\
To use a real model, set OPENAI_API_KEY, OPENROUTER_API_KEY or ANTHROPIC_API_KEY, set [model] base_url in config.toml, or run Ollama.";

/// The quick, harmless command of the first answer.
pub(crate) const FIRST_COMMAND: &str = "uname -sr && ls | head";
/// A two-minute foreground command, to try typing while it runs or Ctrl+B.
pub(crate) const LONG_COMMAND: &str = "for i in $(seq 1 120); do echo \"tick $i\"; sleep 1; done";
/// A command started with `background: true`.
pub(crate) const BACKGROUND_COMMAND: &str = "for i in $(seq 1 30); do echo \"background tick $i\"; sleep 2; done";

const PIECE_CHARS: usize = 10;
const PIECE_DELAY: Duration = Duration::from_millis(15);

/// Start the demo server (keep it alive as long as the provider using it). It keeps
/// nothing of the requests it answers.
pub(crate) async fn start_demo() -> anyhow::Result<Server> {
    Server::start(|request: Request| match request.is_models() {
        true => Reply::models([DEMO_MODEL]),
        false => respond(&request),
    })
    .await
    .map_err(|e| anyhow::anyhow!("cannot start the built-in demo model on 127.0.0.1: {e}"))
}

impl Request {
    /// The conversation of a chat request (empty when the body has none or it does not parse).
    pub fn messages(&self) -> Vec<ChatMessage> {
        self.body.get("messages").and_then(|m| serde_json::from_value(m.clone()).ok()).unwrap_or_default()
    }
}

/// What the demo says: some text and at most one tool call (name, JSON arguments).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DemoReply {
    pub(crate) text: String,
    pub(crate) tool_call: Option<(String, Value)>,
}

impl DemoReply {
    fn text(text: impl Into<String>) -> DemoReply {
        DemoReply { text: text.into(), tool_call: None }
    }
}

/// The answer to a request other than `GET …/models`.
pub(crate) fn respond(request: &Request) -> Reply {
    if !request.is_chat() {
        return Reply::error(404, &format!("the demo model has no {} {}", request.method, request.path));
    }
    let messages = request.messages();
    let reply = reply(&messages, &request.tool_names(), request.temperature());
    let call_id = format!("call_demo_{}", messages.len());
    stream(&reply, &call_id, prompt_tokens(request, &messages))
}

/// The prompt's size as the context meter estimates it (the messages, and the tool
/// definitions as the meter counts them): a fixed count here made `ctx` jump between the
/// meter's estimate and the server's figure (2 % → 0 % → 2 % after `/compact`).
fn prompt_tokens(request: &Request, messages: &[ChatMessage]) -> u64 {
    use super::estimate::{estimate_text_tokens, estimate_tokens, MESSAGE_OVERHEAD_TOKENS};
    let tools = match request.body.get("tools") {
        Some(tools) if !tools.is_null() => estimate_text_tokens(&tools.to_string()) + MESSAGE_OVERHEAD_TOKENS,
        _ => 0,
    };
    estimate_tokens(messages) + tools
}

fn stream(reply: &DemoReply, call_id: &str, prompt_tokens: u64) -> Reply {
    let mut payloads = if reply.text.is_empty() { Vec::new() } else { text_chunks(&reply.text, PIECE_CHARS) };
    let mut completion_chars = reply.text.chars().count();
    let finish = match &reply.tool_call {
        Some((name, arguments)) => {
            let arguments = arguments.to_string();
            completion_chars += arguments.len();
            payloads.extend(tool_call_chunks(0, call_id, name, &arguments, 16));
            "tool_calls"
        }
        None => "stop",
    };
    payloads.push(finish_chunk(finish));
    payloads.push(usage_chunk(prompt_tokens, completion_chars.div_ceil(4) as u64));
    payloads.push(DONE.to_string());
    Reply::sse(payloads).delay(PIECE_DELAY)
}

/// Decide the answer from the conversation (deterministic; no randomness, no clock).
pub(crate) fn reply(messages: &[ChatMessage], tools: &[String], temperature: Option<f64>) -> DemoReply {
    let Some(last) = messages.last() else {
        return DemoReply::text(format!("Hello! {}", DEMO_BANNER.replace('\n', " ")));
    };
    if tools.is_empty() && (temperature == Some(0.0) || last.text().contains("verdict")) {
        return DemoReply::text(r#"{"verdict":"done","reason":"demo"}"#);
    }
    match last.role {
        Role::Tool => summarise_tool_result(messages, last),
        Role::User => answer_user(messages, last.text(), tools.iter().any(|t| t == "terminal")),
        Role::System | Role::Assistant => DemoReply::text("Your turn: type a message below."),
    }
}

fn answer_user(messages: &[ChatMessage], text: &str, can_run: bool) -> DemoReply {
    let trimmed = text.trim_start();
    if trimmed.starts_with("[Background job") {
        return DemoReply::text(
            "A background job finished — it is marked in the **jobs pane**, where you can open its full log. \
             (I am the demo model, so I will not do anything more with it.)",
        );
    }
    if trimmed.starts_with("[Heartbeat") {
        return DemoReply::text("Nothing has changed since the last heartbeat. (Demo model.)");
    }
    if trimmed.starts_with("[Continuing toward your standing goal — a quality gate failed]") {
        return DemoReply::text(
            "A quality gate failed. I am only the demo model, so I cannot fix it; with a real model, \
             Talaria keeps working until the gate passes or the retries run out.",
        );
    }
    if trimmed.starts_with("[Continuing toward your standing goal") {
        return DemoReply::text("The goal is complete. (The demo model always says so.)");
    }

    let (text, mid_turn) = match out_of_band(text) {
        Some(inner) => (inner, true),
        None => (text, false),
    };
    let preface =
        if mid_turn { "Got your message mid-turn — that is how typing while I work reaches me.\n\n" } else { "" };
    let words = words(text);
    let has = |test: &dyn Fn(&str) -> bool| words.iter().any(|w| test(w));

    let mut reply = if has(&|w| w.starts_with("background")) {
        run(
            can_run,
            "Starting a job in the background: it runs on its own and I am free at once. \
             Watch it in the **jobs pane**; select it to read its log, or ask me to poll or kill it.",
            json!({"command": BACKGROUND_COMMAND, "background": true}),
        )
    } else if has(&|w| w == "long" || w == "longer" || w.starts_with("sleep")) {
        run(
            can_run,
            "Running a two-minute command in the foreground. While it runs, **type a message**: it reaches \
             me at once and the command moves to the background, still running. Or press **Ctrl+B** to move \
             it there yourself (twice inside tmux).",
            json!({"command": LONG_COMMAND}),
        )
    } else if has(&|w| w.starts_with("goal") || w.starts_with("gate")) {
        DemoReply::text(GOAL_HELP)
    } else if has(&|w| w == "help") {
        DemoReply::text(HELP)
    } else if !messages.iter().any(|m| m.role == Role::Assistant) {
        run(
            can_run,
            &format!(
                "Hello! I am Talaria's **built-in demo model** — scripted answers, no AI.\n\n\
                 To use a real model: set `OPENAI_API_KEY`, `OPENROUTER_API_KEY` or `ANTHROPIC_API_KEY`, set \
                 `[model] base_url` in `config.toml`, or run Ollama.\n\nMeanwhile, let me show you a tool: I'll run `{FIRST_COMMAND}`."
            ),
            json!({"command": FIRST_COMMAND}),
        )
    } else {
        DemoReply::text(format!(
            "I am only the demo model, so I cannot really answer that.\n\n{HELP}\n\n\
             For real answers, set `OPENAI_API_KEY`, `OPENROUTER_API_KEY` or `ANTHROPIC_API_KEY`, set \
             `[model] base_url` in `config.toml`, or run Ollama."
        ))
    };
    reply.text.insert_str(0, preface);
    reply
}

fn run(can_run: bool, text: &str, arguments: Value) -> DemoReply {
    if can_run {
        DemoReply { text: text.to_string(), tool_call: Some(("terminal".to_string(), arguments)) }
    } else {
        DemoReply::text("I would run a command now, but no `terminal` tool was offered to me.")
    }
}

const HELP: &str = "Things to try with the demo model:\n\
- say **long** — a two-minute command; type while it runs, or press Ctrl+B\n\
- say **background** — a job that runs on its own in the jobs pane\n\
- say **goal** — how standing goals and quality gates work\n\
- press **?** for every key";

const GOAL_HELP: &str = "## Goals and gates\n\n\
A **goal** keeps me working across turns until it is done:\n\n\
- `/goal make the tests pass` sets a standing goal and starts at once\n\
- `/goal gate add cargo test` adds a quality gate: a shell command that must succeed\n\
- after each turn the gates run; a failing gate's output becomes my next instruction\n\
- when every gate passes, a judge decides whether the goal is done\n\
- `/goal status`, `/goal pause`, `/goal clear` manage it\n\n\
Try it:\n\n```text\n/goal demo goal\n/goal gate add true\n```";

/// The text inside an out-of-band wrapper (a message typed while the agent was busy).
fn out_of_band(text: &str) -> Option<&str> {
    let start = text.find("[OUT-OF-BAND USER MESSAGE")?;
    let after = &text[start..];
    let body = &after[after.find('\n')? + 1..];
    let end = body.find("[/OUT-OF-BAND USER MESSAGE]").unwrap_or(body.len());
    Some(body[..end].trim())
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

fn summarise_tool_result(messages: &[ChatMessage], result: &ChatMessage) -> DemoReply {
    let call_id = result.tool_call_id.as_deref().unwrap_or_default();
    let command = messages
        .iter()
        .flat_map(|m| m.tool_calls.iter())
        .find(|c| c.id == call_id)
        .and_then(|c| serde_json::from_str::<Value>(&c.function.arguments).ok())
        .and_then(|args| args.get("command").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "(unknown command)".to_string());
    let parsed: Value = serde_json::from_str(result.text()).unwrap_or_else(|_| json!({"output": result.text()}));
    let field = |key: &str| parsed.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    let output = field("output");
    let job = field("session_id");
    let exit_code = parsed.get("exit_code").and_then(Value::as_i64);
    let error = field("error");

    if field("status") == "yielded_to_background" {
        return DemoReply::text(format!(
            "## Moved to the background\n\n\
             `{command}` was **not killed**: it was moved to the background as **{job}**.\n\n\
             - follow it in the jobs pane (select it to open the log)\n\
             - I will be told when it finishes\n\
             - `/jobs kill {job}` stops it\n\n\
             Output so far:\n\n```text\n{}\n```",
            tail_lines(&output, 5)
        ));
    }
    if output.starts_with("Background process started") {
        return DemoReply::text(format!(
            "## Background job started\n\n\
             - **{job}** runs `{command}`\n\
             - its output goes to the jobs pane, with a full log\n\
             - you and I can keep talking meanwhile; I hear when it ends\n\n\
             ```text\n/jobs log {job}\n```"
        ));
    }
    if exit_code == Some(130) || output.contains("[Command interrupted]") {
        return DemoReply::text(format!(
            "## Interrupted\n\n- `{command}` was stopped\n- exit code 130\n\n```text\n{}\n```",
            tail_lines(&output, 5)
        ));
    }
    if !error.is_empty() {
        return DemoReply::text(format!(
            "## The command did not run\n\n- command: `{command}`\n- reason: {error}\n\n```text\n{}\n```",
            tail_lines(&output, 5)
        ));
    }
    let lines = output.lines().count();
    let exit = exit_code.map_or_else(|| "none".to_string(), |c| c.to_string());
    DemoReply::text(format!(
        "## What I ran\n\n\
         - command: `{command}`\n\
         - exit code: {exit}\n\
         - output: {lines} line{}\n\n\
         ```text\n{}\n```\n\n\
         That is a tool call: the model asks, Talaria runs it (asking you first if it looks dangerous) \
         and hands back the output. Say **long** or **background** to see jobs, or **goal** for goals.",
        if lines == 1 { "" } else { "s" },
        head_lines(&output, 12)
    ))
}

fn head_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines.iter().take(n).copied().collect::<Vec<_>>().join("\n");
    if lines.len() > n {
        out.push_str(&format!("\n… {} more lines", lines.len() - n));
    }
    out.replace("```", "'''")
}

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n").replace("```", "'''")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::llm::client::{ClientSettings, OpenAiClient};
    use crate::engine::llm::{ChatRequest, Provider, StreamDelta, ToolCall};
    use pretty_assertions::assert_eq;

    fn tools() -> Vec<String> {
        vec!["terminal".to_string(), "process".to_string()]
    }

    /// The figure the demo reports is the context meter's estimate of the same request, so
    /// `ctx` reads the same before and after `/compact` or a resume (which estimate afresh).
    #[test]
    fn the_reported_prompt_is_the_meters_estimate_of_the_same_request() {
        use crate::engine::context::{estimate_tokens, ContextMeter};
        let definitions = json!([{"type": "function", "function": {"name": "terminal", "description": "run it"}}]);
        let history = vec![ChatMessage::user("hello"), ChatMessage::assistant("hi there", Vec::new())];
        let mut sent = vec![ChatMessage::system("the system prompt")];
        sent.extend(history.clone());
        let body = json!({"messages": sent, "tools": definitions});
        let request = Request {
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            headers: Vec::new(),
            raw_body: body.to_string(),
            body,
        };
        let mut fixed = vec![ChatMessage::system("the system prompt"), ChatMessage::system(definitions.to_string())];
        fixed.extend(history);
        let mut meter = ContextMeter::new(1000);
        meter.reset(&fixed);
        assert_eq!(prompt_tokens(&request, &request.messages()), meter.used());
        assert_eq!(meter.used(), estimate_tokens(&fixed));
    }

    fn command_of(reply: &DemoReply) -> Option<(String, Value)> {
        reply.tool_call.clone()
    }

    #[test]
    fn the_first_message_greets_and_runs_a_safe_command() {
        let reply = reply(&[ChatMessage::system("sys"), ChatMessage::user("hi")], &tools(), None);
        assert!(reply.text.contains("built-in demo model"), "{}", reply.text);
        assert!(reply.text.contains("OPENAI_API_KEY") && reply.text.contains("base_url"), "{}", reply.text);
        assert_eq!(command_of(&reply), Some(("terminal".into(), json!({"command": FIRST_COMMAND}))));
    }

    #[test]
    fn later_messages_point_at_what_to_try() {
        let history = [ChatMessage::user("hi"), ChatMessage::assistant("hello", vec![]), ChatMessage::user("why?")];
        let reply = reply(&history, &tools(), None);
        assert!(reply.text.contains("**long**") && reply.tool_call.is_none(), "{reply:?}");
    }

    #[test]
    fn long_or_sleep_runs_the_long_foreground_command() {
        for text in ["run something long", "please Sleep a while"] {
            let reply = reply(&[ChatMessage::user(text)], &tools(), None);
            assert_eq!(command_of(&reply), Some(("terminal".into(), json!({"command": LONG_COMMAND}))), "{text}");
            assert!(reply.text.contains("Ctrl+B"));
        }
        // "along" is not "long".
        let reply = reply(&[ChatMessage::user("go along"), ChatMessage::assistant("x", vec![])], &tools(), None);
        assert_eq!(reply.tool_call, None);
    }

    #[test]
    fn background_starts_a_background_job() {
        let reply = reply(&[ChatMessage::user("start a background job")], &tools(), None);
        assert_eq!(
            command_of(&reply),
            Some(("terminal".into(), json!({"command": BACKGROUND_COMMAND, "background": true})))
        );
    }

    #[test]
    fn goal_and_gate_explain_goals() {
        for text in ["what are goals?", "tell me about gates"] {
            let reply = reply(&[ChatMessage::user(text)], &tools(), None);
            assert!(reply.text.contains("/goal ") && reply.text.contains("/goal gate add"), "{}", reply.text);
            assert_eq!(reply.tool_call, None);
        }
    }

    #[test]
    fn a_tool_result_gets_a_markdown_summary() {
        let history = [
            ChatMessage::user("hi"),
            ChatMessage::assistant("", vec![ToolCall::new("c1", "terminal", json!({"command": "ls"}).to_string())]),
            ChatMessage::tool("c1", json!({"output": "a.txt\nb.txt", "exit_code": 0, "error": null}).to_string()),
        ];
        let reply = reply(&history, &tools(), None);
        assert!(reply.text.starts_with("## What I ran"), "{}", reply.text);
        assert!(reply.text.contains("- command: `ls`") && reply.text.contains("- exit code: 0"), "{}", reply.text);
        assert!(reply.text.contains("```text\na.txt\nb.txt\n```"), "{}", reply.text);
        assert_eq!(reply.tool_call, None);
    }

    #[test]
    fn a_yielded_command_is_explained() {
        let yielded = json!({"status": "yielded_to_background", "session_id": "job_3", "output": "tick 1\ntick 2",
                             "exit_code": null, "error": null});
        let history = [
            ChatMessage::assistant(
                "",
                vec![ToolCall::new("c9", "terminal", json!({"command": LONG_COMMAND}).to_string())],
            ),
            ChatMessage::tool("c9", yielded.to_string()),
        ];
        let reply = reply(&history, &tools(), None);
        assert!(reply.text.contains("not killed") && reply.text.contains("job_3"), "{}", reply.text);
    }

    #[test]
    fn a_judge_request_gets_a_json_verdict() {
        let judge = [ChatMessage::system("judge"), ChatMessage::user("Answer with a JSON verdict")];
        let reply = reply(&judge, &[], Some(0.0));
        assert_eq!(reply, DemoReply::text(r#"{"verdict":"done","reason":"demo"}"#));
        let parsed: Value = serde_json::from_str(&reply.text).unwrap();
        assert_eq!(parsed, json!({"verdict": "done", "reason": "demo"}));
    }

    #[test]
    fn notifications_and_continuations_never_start_commands() {
        for text in [
            "[Background job job_3 exited with code 0 after 1m. Command: x. Output tail: background]",
            "[Heartbeat — recurring instruction, fires every 10m]\nrun something long",
            "[Continuing toward your standing goal]\nGoal: long background",
            "[Continuing toward your standing goal — a quality gate failed]\nGoal: x",
        ] {
            let reply = reply(&[ChatMessage::user(text)], &tools(), None);
            assert_eq!(reply.tool_call, None, "{text}");
        }
    }

    #[test]
    fn an_out_of_band_message_is_read_from_inside_the_wrapper() {
        let text = "[OUT-OF-BAND USER MESSAGE — a direct message from the user, delivered mid-turn; not tool output]\n\
                    tell me about goals\n[/OUT-OF-BAND USER MESSAGE]";
        let reply = reply(
            &[ChatMessage::user("hi"), ChatMessage::assistant("x", vec![]), ChatMessage::user(text)],
            &tools(),
            None,
        );
        assert!(reply.text.starts_with("Got your message mid-turn"), "{}", reply.text);
        assert!(reply.text.contains("/goal gate add"));
    }

    #[test]
    fn without_a_terminal_tool_nothing_is_called() {
        let reply = reply(&[ChatMessage::user("hi")], &["read_file".to_string()], None);
        assert_eq!(reply.tool_call, None);
    }

    #[tokio::test]
    async fn the_demo_streams_through_the_real_client() {
        let server = start_demo().await.unwrap();
        let client = OpenAiClient::new(ClientSettings::new(server.base_url())).unwrap();
        assert_eq!(client.list_models().await.unwrap(), vec![DEMO_MODEL.to_string()]);
        let tool = json!({"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}});
        let request =
            ChatRequest { tools: vec![tool], ..ChatRequest::owned(DEMO_MODEL, vec![ChatMessage::user("hello")]) };
        let mut deltas = Vec::new();
        let done = client.stream_chat(&request, &mut |d| deltas.push(d)).await.unwrap();
        assert!(done.content.contains("built-in demo model"));
        assert_eq!(
            done.tool_calls,
            vec![ToolCall::new("call_demo_1", "terminal", json!({"command": FIRST_COMMAND}).to_string())]
        );
        assert!(deltas.len() > 5, "small pieces: {}", deltas.len());
        assert!(deltas.contains(&StreamDelta::ToolCallStarted { index: 0, name: "terminal".into() }));
    }
}
