//! The everyday-essentials pieces used the way the engine uses them, against the scripted
//! loopback server: instructions in the system prompt, the context meter crossing the
//! threshold, compaction, and the next request carrying the summary instead of old turns.

use std::time::Duration;

use pretty_assertions::assert_eq;
use talaria::engine::bang;
use talaria::engine::compaction::plan as compact;
use talaria::engine::compaction::SUMMARY_HEADER;
use talaria::engine::context::ContextMeter;
use talaria::engine::instructions;
use talaria::engine::llm::client::{ClientSettings, OpenAiClient};
use talaria::engine::llm::{ChatMessage, ChatRequest, Provider, Role, ToolCall};
use talaria::testkit::scripted::{finish_chunk, text_chunks, usage_chunk, ScriptedResponse, ScriptedServer, DONE};

const WAIT: Duration = Duration::from_secs(10);

/// A text answer whose usage says the prompt took `prompt_tokens`.
fn answer(text: &str, prompt_tokens: u64) -> ScriptedResponse {
    let mut payloads = text_chunks(text, 8);
    payloads.push(finish_chunk("stop"));
    payloads.push(usage_chunk(prompt_tokens, 3));
    payloads.push(DONE.to_string());
    ScriptedResponse::sse(payloads)
}

fn chat(model: &str, system: &str, history: &[ChatMessage]) -> ChatRequest<'static> {
    let mut messages = vec![ChatMessage::system(system)];
    messages.extend_from_slice(history);
    ChatRequest::owned(model, messages)
}

/// The request's messages, for the context meter.
fn messages_of(request: &ChatRequest<'_>) -> Vec<ChatMessage> {
    request.messages.iter().map(|m| m.as_ref().clone()).collect()
}

#[tokio::test]
async fn a_full_context_is_compacted_and_the_next_request_carries_the_summary() {
    // Instructions: the user file and the repository's AGENTS.md go into the system prompt.
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("talaria-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("TALARIA.md"), "Answer in English.").unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(repo.join("AGENTS.md"), "Run `cargo test` before saying done.").unwrap();
    let files = instructions::discover(&repo, &home.join("TALARIA.md"));
    assert_eq!(files.len(), 2);
    assert_eq!(instructions::describe(&files).split(", ").last(), Some("AGENTS.md"));
    let system = format!("You are Talaria.\n\n{}", instructions::system_prompt_section(&files));

    let server = ScriptedServer::start([
        answer("Done: tests pass.", 900),
        answer("Goals: make tests pass. Commands: cargo test (exit 0).", 40),
        answer("Next step taken.", 120),
    ])
    .await
    .unwrap();
    let client = OpenAiClient::new(ClientSettings::new(server.base_url())).unwrap();

    // Three turns of work, then a `!cmd` note from the user.
    let mut history = Vec::new();
    for t in 0..3 {
        let id = format!("call-{t}");
        history.push(ChatMessage::user(format!("old request {t}")));
        history.push(ChatMessage::assistant("", vec![ToolCall::new(&id, "terminal", r#"{"command":"cargo test"}"#)]));
        history.push(ChatMessage::tool(&id, format!("old output {t}")));
        history.push(ChatMessage::assistant(format!("old answer {t}"), vec![]));
    }
    history.push(ChatMessage::user(bang::context_message("git status", Some(0), "clean")));
    history.push(ChatMessage::user("finish up"));

    let mut meter = ContextMeter::new(1_000);
    let first = chat("m", &system, &history);
    meter.reset(&messages_of(&first));
    let done = client.stream_chat(&first, &mut |_| {}).await.unwrap();
    meter.observe_usage(done.usage.unwrap().prompt_tokens);
    let reply = ChatMessage::assistant(done.content, vec![]);
    meter.add_estimate(std::slice::from_ref(&reply));
    history.push(reply);
    assert!(meter.percent() >= 90, "{}", meter.label());
    assert!(meter.should_compact(0.85));

    // Compaction keeps the last two user turns (the `!cmd` note and "finish up").
    let plan = compact::plan(&history, 2).unwrap();
    assert_eq!(plan.cut, 12);
    let request = compact::summary_request("m", &history[..plan.cut], None);
    let summary = compact::summarise(&client, &request).await.unwrap();
    let history = compact::apply(history, plan.cut, &summary);
    meter.reset(&messages_of(&chat("m", &system, &history)));
    assert!(!meter.should_compact(0.85), "{}", meter.label());

    history.iter().for_each(|m| assert_ne!(m.role, Role::Tool));
    let next = chat("m", &system, &[history.clone(), vec![ChatMessage::user("and now?")]].concat());
    client.stream_chat(&next, &mut |_| {}).await.unwrap();

    let sent = server.wait_for_chat_requests(3, WAIT).await;
    assert_eq!(sent.len(), 3);
    let summary_asked = sent[1].messages()[1].text().to_string();
    assert!(summary_asked.contains("old output 2") && !summary_asked.contains("finish up"));
    let last = sent[2].messages();
    assert!(last[0].text().contains("Run `cargo test` before saying done."));
    assert!(last[0].text().contains("Answer in English."));
    assert_eq!(
        last[1],
        ChatMessage::user(format!("{SUMMARY_HEADER}\nGoals: make tests pass. Commands: cargo test (exit 0)."))
    );
    assert!(last[2].text().starts_with("[The user ran a shell command]\n$ git status\nExit code: 0\n"));
    assert_eq!(
        last[3..].iter().map(ChatMessage::text).collect::<Vec<_>>(),
        vec!["finish up", "Done: tests pass.", "and now?"]
    );
    let all: String = last.iter().map(ChatMessage::text).collect();
    assert!(!all.contains("old request") && !all.contains("old output") && !all.contains("old answer"));
}
