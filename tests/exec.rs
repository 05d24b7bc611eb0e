//! `talaria exec` end to end: the real binary against a scripted OpenAI-compatible server.

mod common;

use std::time::Duration;

use common::{stderr, stdout, Home};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};

#[tokio::test(flavor = "multi_thread")]
async fn exec_prints_the_streamed_answer_and_sends_the_exact_request() {
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::text("Hello from the scripted model.")]).await.unwrap();
    let out = home.run(&["exec", "--base-url", &server.base_url(), "--model", "m1", "say hi"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Hello from the scripted model.");

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["model"], "m1");
    assert_eq!(body["stream"], true);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[1], json!({"role": "user", "content": "say hi"}));
    let mut tools = requests[0].tool_names();
    tools.sort();
    assert_eq!(tools, ["agent", "edit_file", "process", "read_file", "search_files", "terminal", "write_file"]);
    assert_eq!(requests[0].header("authorization"), None, "no key configured, no Authorization header");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_file_call_comes_back_with_its_tool_call_id() {
    let home = Home::new();
    std::fs::write(home.work().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_7", "read_file", r#"{"path":"notes.txt"}"#),
        ScriptedResponse::text("The file has two lines."),
    ])
    .await
    .unwrap();
    let out = home.run(&["exec", "--base-url", &server.base_url(), "read notes.txt"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(stdout(&out).contains("The file has two lines."));
    assert!(stderr(&out).contains("read_file"), "tool activity goes to stderr: {}", stderr(&out));

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    let assistant = &messages[messages.len() - 2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_7");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "read_file");
    let tool = messages.last().unwrap();
    assert_eq!(tool["role"], "tool");
    assert_eq!(tool["tool_call_id"], "call_7");
    let result: Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    let content = result["content"].as_str().unwrap();
    assert!(content.contains("alpha") && content.contains("beta"), "{content}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_error_fails_with_one_line_and_keeps_the_message() {
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::error(400, "model 'nope' does not exist")]).await.unwrap();
    let out = home.run(&["exec", "--base-url", &server.base_url(), "remember this message"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("model 'nope' does not exist"), "{err}");
    // Advice for the TUI (Enter, /retry) means nothing to a script.
    for tui_advice in ["Enter", "/retry"] {
        assert!(!err.contains(tui_advice), "exec offers TUI advice {tui_advice:?}: {err}");
    }
    assert_eq!(server.chat_requests().len(), 1, "a 4xx is not retried");

    let search = home.run(&["sessions", "search", "remember"]).await;
    assert!(stdout(&search).contains("remember"), "the user's message was stored: {}", stdout(&search));
}

#[tokio::test(flavor = "multi_thread")]
async fn json_mode_prints_one_event_per_line() {
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::text("ok")]).await.unwrap();
    let out = home.run(&["exec", "--json", "--base-url", &server.base_url(), "hi"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let types: Vec<String> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .map(|v| v["type"].as_str().unwrap().to_string())
        .collect();
    for expected in ["SessionReady", "TurnStarted", "UserMessage", "AssistantDelta", "AssistantDone", "TurnFinished"] {
        assert!(types.iter().any(|t| t == expected), "missing {expected} in {types:?}");
    }
    let delta = stdout(&out).lines().find(|l| l.contains("AssistantDelta")).unwrap().to_string();
    let v: Value = serde_json::from_str(&delta).unwrap();
    assert!(v["data"].is_string(), "a tuple variant carries its value as data: {delta}");
}

#[tokio::test(flavor = "multi_thread")]
async fn continue_sends_the_earlier_exchange() {
    let home = Home::new();
    let server =
        ScriptedServer::start([ScriptedResponse::text("first answer"), ScriptedResponse::text("second answer")])
            .await
            .unwrap();
    let url = server.base_url();
    assert_eq!(home.run(&["exec", "--base-url", &url, "first question"]).await.status.code(), Some(0));
    let out = home.run(&["exec", "-c", "--base-url", &url, "second question"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let messages = server.chat_requests()[1].body["messages"].clone();
    let texts: Vec<(String, String)> = messages
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|m| (m["role"].as_str().unwrap().to_string(), m["content"].as_str().unwrap_or("").to_string()))
        .collect();
    assert_eq!(
        texts,
        [
            ("user".to_string(), "first question".to_string()),
            ("assistant".to_string(), "first answer".to_string()),
            ("user".to_string(), "second question".to_string()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_prompt_can_come_from_stdin() {
    use tokio::io::AsyncWriteExt;
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::text("got it")]).await.unwrap();
    let mut child = home
        .command()
        .args(["exec", "--base-url", &server.base_url(), "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"a prompt\nfrom stdin\n").await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let messages = server.chat_requests()[0].body["messages"].clone();
    assert_eq!(messages[1]["content"], "a prompt\nfrom stdin\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_config_is_a_one_line_error() {
    let home = Home::new();
    home.write_config("[model]\nname = \"x\"\ncolour = \"blue\"\n");
    let out = home.run(&["exec", "hi"]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("config.toml:3") && err.contains("colour"), "{err}");

    home.write_config("[jobs]\nmax_jobs = \"lots\"\n");
    let err = stderr(&home.run(&["exec", "hi"]).await);
    assert!(err.contains("config.toml:2") && err.contains("expected"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_key_the_demo_model_answers_over_http() {
    let home = Home::new();
    let out = home.run(&["exec", "hello"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.to_lowercase().contains("demo"), "the banner says it is the demo model: {err}");
    assert!(!stdout(&out).trim().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_during_a_slow_stream_exits_130() {
    let home = Home::new();
    let mut payloads = talaria::testkit::scripted::text_chunks(&"slow ".repeat(200), 5);
    payloads.push("[DONE]".into());
    let server =
        ScriptedServer::start([ScriptedResponse::sse(payloads).delay(Duration::from_millis(100))]).await.unwrap();
    let mut child = home
        .command()
        .args(["exec", "--base-url", &server.base_url(), "go slowly"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once part of the answer is on stdout (a state, not a guess at a time).
    let printed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut pipe = child.stdout.take().unwrap();
    let sink = printed.clone();
    let reader = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf).await {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !printed.lock().unwrap().contains("slow") {
        assert!(tokio::time::Instant::now() < deadline, "no partial answer on stdout");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = child.id().unwrap() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap();
    reader.await.unwrap();
    assert_eq!(out.status.code(), Some(130), "stderr: {}", stderr(&out));
    assert!(printed.lock().unwrap().contains("slow"), "the partial answer was printed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bang_command_runs_locally_and_its_output_reaches_the_next_request() {
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::text("it printed the marker")]).await.unwrap();
    let url = server.base_url();
    let out = home.run(&["exec", "--base-url", &url, "!echo bang-output-42"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(server.chat_requests().is_empty(), "a !command is not sent to the model");

    let out = home.run(&["exec", "-c", "--base-url", &url, "what did it print?"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let messages = server.chat_requests()[0].body["messages"].as_array().unwrap().clone();
    let note =
        messages.iter().find(|m| m["content"].as_str().is_some_and(|c| c.contains("[The user ran a shell command]")));
    let note = note.expect("the command's output is context for the next message");
    let text = note["content"].as_str().unwrap();
    assert!(text.contains("$ echo bang-output-42") && text.contains("Exit code: 0"), "{text}");
    assert!(text.lines().any(|l| l == "bang-output-42"), "{text}");
    assert_eq!(messages.last().unwrap()["content"], "what did it print?");
}

#[tokio::test(flavor = "multi_thread")]
async fn typed_messages_are_kept_as_input_history_but_exec_json_does_not_print_it() {
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::text("one"), ScriptedResponse::text("two")]).await.unwrap();
    let url = server.base_url();
    assert_eq!(home.run(&["exec", "--base-url", &url, "first typed line"]).await.status.code(), Some(0));
    let out = home.run(&["exec", "--json", "--base-url", &url, "second"]).await;
    let ready = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "SessionReady")
        .expect("SessionReady");
    assert!(ready["data"].get("input_history").is_none(), "exec has no use for it: {ready}");
    // The history is still kept for the next interactive run in this directory.
    let store = talaria::engine::store::Store::open(&talaria::paths::Paths::under(home.path()).state_db).unwrap();
    let history = store.history_list(&home.work().display().to_string(), 500).await.unwrap();
    assert!(history.contains(&"first typed line".to_string()), "{history:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_denies_what_needs_approval_unless_yes_and_never_runs_hardline() {
    let home = Home::new();
    let marker = home.work().join("cleaned");
    std::fs::create_dir_all(&marker).unwrap();
    // Outside the sandbox (the model asks for it): that needs an approval in the default mode.
    let dangerous = r#"{"command":"rm -r cleaned","sandbox":false}"#;
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("c1", "terminal", dangerous),
        ScriptedResponse::text("denied, fine"),
        ScriptedResponse::tool_call("c2", "terminal", dangerous),
        ScriptedResponse::text("done"),
        ScriptedResponse::tool_call("c3", "terminal", r#"{"command":"rm -rf /"}"#),
        ScriptedResponse::text("refused"),
    ])
    .await
    .unwrap();
    let url = server.base_url();
    let tool_result = |i: usize| -> Value {
        let messages = server.chat_requests()[i].body["messages"].as_array().unwrap().clone();
        serde_json::from_str(messages.last().unwrap()["content"].as_str().unwrap()).unwrap()
    };

    let out = home.run(&["exec", "--base-url", &url, "clean up"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let denied = tool_result(1);
    assert!(denied["error"].as_str().unwrap().contains("--yes"), "{denied}");
    assert!(marker.exists(), "a command needing approval did not run");

    let out = home.run(&["exec", "--yes", "--base-url", &url, "clean up"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(tool_result(3)["exit_code"], 0, "{}", tool_result(3));
    assert!(!marker.exists(), "--yes allowed it");

    let out = home.run(&["exec", "--yes", "--base-url", &url, "wipe"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let refused = tool_result(5);
    assert!(refused["error"].as_str().unwrap().contains("never allowed"), "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_listening_is_one_short_error_at_once() {
    let home = Home::new();
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/v1");
    for args in [vec!["exec", "--base-url", &url, "hi"], vec!["exec", "--base-url", &url, "--model", "m", "hi"]] {
        let started = std::time::Instant::now();
        let out = home.run(&args).await;
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line: {err}");
        assert!(lines[0].contains(&format!("nothing is listening at http://127.0.0.1:{port}")), "{err}");
        assert_eq!(lines[0].matches("127.0.0.1").count(), 1, "{err}");
        assert!(!lines[0].contains("--model"), "no blame on --model: {err}");
        assert!(started.elapsed() < Duration::from_secs(5), "no silent retries: {:?}", started.elapsed());
    }
}

/// exec reads the engine's phase: paused, its prompt would wait for `talaria unpause`, so
/// the run fails at once (saying why) instead of hanging, and nothing is left waiting.
#[tokio::test(flavor = "multi_thread")]
async fn exec_while_paused_fails_at_once_and_sends_nothing() {
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::text("never asked")]).await.unwrap();
    assert_eq!(home.run(&["pause"]).await.status.code(), Some(0));
    let out = home.run(&["exec", "--base-url", &server.base_url(), "are you there?"]).await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("paused (talaria unpause resumes): the prompt was not sent"), "{}", stderr(&out));
    assert!(server.chat_requests().is_empty());
    let db = rusqlite::Connection::open(home.path().join("state.db")).unwrap();
    let left: i64 =
        db.query_row("SELECT COUNT(*) FROM state_meta WHERE key LIKE 'pending:%'", [], |r| r.get(0)).unwrap();
    assert_eq!(left, 0, "the prompt was taken back, not kept for a later run");
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_takes_its_reason_as_words_and_only_model_commands_offer_model_options() {
    let home = Home::new();
    let out = home.run(&["pause", "lunch", "break"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let file = std::fs::read_to_string(home.path().join("ESTOP")).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&file).unwrap()["reason"], "lunch break");
    assert_eq!(home.run(&["unpause"]).await.status.code(), Some(0));
    for sub in [&["pause", "--help"][..], &["sessions", "--help"], &["unpause", "--help"]] {
        let help = stdout(&home.run(sub).await);
        assert!(!help.contains("--model") && !help.contains("--base-url"), "{sub:?}: {help}");
    }
    let help = stdout(&home.run(&["exec", "--help"]).await);
    assert!(help.contains("--model") && help.contains("--base-url"), "{help}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_notice_turn_cut_short_at_shutdown_does_not_change_the_exit_code() {
    // The background job ends while the user's turn still runs, so its completion notice
    // starts a second turn the moment the first ends; exec's shutdown interrupts that one.
    let home = Home::new();
    let mut chunks = talaria::testkit::scripted::text_chunks("all done, the job is started", 1);
    chunks.push("[DONE]".into());
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("call_1", "terminal", r#"{"command":"sleep 1","background":true}"#),
        // The reply streams for about 3 s: the job ends meanwhile.
        ScriptedResponse::sse(chunks).delay(Duration::from_millis(150)),
        common::slow_stream(),
    ])
    .await
    .unwrap();
    let out = home.run(&["exec", "--base-url", &server.base_url(), "start a short job"]).await;
    assert!(stdout(&out).contains("all done"), "stdout: {}", stdout(&out));
    assert_eq!(out.status.code(), Some(0), "the user's turn completed; stderr: {}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_with_a_prefix_of_several_sessions_lists_them_and_exits_2() {
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::text("one"), ScriptedResponse::text("two")]).await.unwrap();
    for prompt in ["the first session", "the second session"] {
        let out = home.run(&["exec", "--base-url", &server.base_url(), prompt]).await;
        assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    }
    let listed = stdout(&home.run(&["sessions", "list"]).await);
    let ids: Vec<String> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.len() > 10 && w.as_bytes()[0].is_ascii_digit())
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    let common: String = ids[0].chars().zip(ids[1].chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).collect();
    assert!(!common.is_empty(), "{ids:?}");

    let out = home.run(&["--resume", &common, "exec", "--base-url", &server.base_url(), "which one?"]).await;
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(ids.iter().all(|id| err.contains(id.as_str())), "both are listed: {err}");
    assert_eq!(server.chat_requests().len(), 2, "nothing was sent");
    // A full id still resumes that session.
    server.push(ScriptedResponse::text("resumed"));
    let out = home.run(&["--resume", &ids[0], "exec", "--base-url", &server.base_url(), "go on"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_larger_than_the_context_window_is_refused_before_it_is_sent_or_stored() {
    use tokio::io::AsyncWriteExt;
    let home = Home::new();
    let server = ScriptedServer::start([ScriptedResponse::text("never")]).await.unwrap();
    // 10 MB of text is ~2.6M tokens; the default window is 128,000.
    let prompt = "lorem ipsum ".repeat(10 * 1024 * 1024 / 12);
    let mut child = home
        .command()
        .args(["exec", "--base-url", &server.base_url(), "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = tokio::spawn(async move {
        stdin.write_all(prompt.as_bytes()).await.unwrap();
    });
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
    writer.await.unwrap();
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("context window of 128000 tokens"), "{err}");
    assert!(err.len() < 2000, "the refusal does not echo the prompt: {} bytes", err.len());
    assert_eq!(server.chat_requests().len(), 0, "nothing was sent");
    let search = home.run(&["sessions", "search", "lorem"]).await;
    assert!(stdout(&search).contains("No matches"), "nothing was stored: {}", stdout(&search));
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replies_are_set_apart_by_a_blank_line() {
    use talaria::testkit::scripted::{finish_chunk, text_chunks, tool_call_chunks, DONE};
    let home = Home::new();
    std::fs::write(home.work().join("notes.txt"), "alpha\n").unwrap();
    // A reply that also calls a tool, then the reply after the tool's result.
    let mut first = text_chunks("Let me read it.", 4);
    first.extend(tool_call_chunks(0, "call_1", "read_file", r#"{"path":"notes.txt"}"#, 8));
    first.push(finish_chunk("tool_calls"));
    first.push(DONE.to_string());
    let server =
        ScriptedServer::start([ScriptedResponse::sse(first), ScriptedResponse::text("It says alpha.")]).await.unwrap();
    let out = home.run(&["exec", "--base-url", &server.base_url(), "read notes.txt"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "Let me read it.\n\nIt says alpha.\n");
    assert_eq!(server.chat_requests().len(), 2);
}

/// The mappings of glibc's extra malloc arenas in `/proc/<pid>/maps`: each is a heap of its
/// own, 64 MiB aligned and reserved, its used part read-write and the rest `---p` up to the
/// next 64 MiB (the main arena grows the `[heap]` instead).
fn malloc_arenas(pid: u32) -> Vec<String> {
    const HEAP_MAX: u64 = 64 << 20;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    // (start, end, permissions, the line) of every anonymous mapping.
    let mut rows: Vec<(u64, u64, String, String)> = Vec::new();
    for line in maps.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((a, b)) = words.first().and_then(|w| w.split_once('-')) else { continue };
        if let (Ok(start), Ok(end), None) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16), words.get(5)) {
            rows.push((start, end, words[1].to_string(), line.to_string()));
        }
    }
    rows.iter()
        .enumerate()
        .filter(|(i, (start, end, perms, _))| {
            let reserved =
                rows.get(i + 1).is_some_and(|(s, e, p, _)| s == end && p == "---p" && *e == start + HEAP_MAX);
            start % HEAP_MAX == 0 && perms == "rw-p" && (reserved || end - start == HEAP_MAX)
        })
        .map(|(_, (.., line))| line.clone())
        .collect()
}

/// Every thread of talaria allocates from one malloc arena (`talaria::one_malloc_arena`):
/// with one per thread, a long day's RSS grew on pages that freed chunks kept. Checked on
/// the real process (exec) while a turn streams, its tokio workers and store thread up.
#[tokio::test(flavor = "multi_thread")]
async fn talaria_allocates_from_one_malloc_arena() {
    let home = Home::new();
    let server = ScriptedServer::start([common::slow_stream()]).await.unwrap();
    let (mut child, mut lines) = common::spawn_json(&home, &["--yes", "--base-url", &server.base_url(), "talk slowly"]);
    common::wait_event(&mut lines, "AssistantDelta", |_| true).await;
    let pid = child.id().expect("talaria runs");
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0);
    let arenas = malloc_arenas(pid);
    child.kill().await.unwrap();
    assert!(threads > 2, "{threads} threads");
    assert!(arenas.is_empty(), "extra malloc arenas: {arenas:#?}");
}
