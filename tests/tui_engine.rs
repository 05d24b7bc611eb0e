//! What the user sees: the TUI's `App` typed into and drawn on a `TestBackend`, its ops
//! sent to the engine in-process (against a scripted server) and every event fed back, as
//! the event loop does. For feedback that only the two together show.

#[path = "common/inproc.rs"]
mod inproc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use talaria::config::Config;
use talaria::engine::SessionChoice;
use talaria::protocol::{Event, NoticeLevel, Origin, Phase, TurnOutcome, TurnTrigger};
use talaria::testkit::scripted::{text_chunks, ScriptedResponse, ScriptedServer};
use talaria::tui::app::{App, AppEvent};
use talaria::tui::keymap::Keymap;
use talaria::tui::theme::Theme;

/// How long a check that something does NOT happen watches (the pause watcher polls
/// every second).
const QUIET: std::time::Duration = std::time::Duration::from_secs(3);

struct Tui {
    app: App,
    engine: inproc::Running,
    /// Events of `engine.seen` already given to the app.
    fed: usize,
}

impl Tui {
    async fn start(home: &std::path::Path, server: &ScriptedServer) -> Tui {
        let engine = inproc::start(home, &server.base_url(), SessionChoice::New).await;
        let app = App::new(&Config::default(), Keymap::builtin(), Theme::default(), None);
        let mut tui = Tui { app, engine, fed: 0 };
        tui.feed();
        tui
    }

    fn key(&mut self, code: KeyCode) {
        for op in self.app.update(AppEvent::Key(KeyEvent::new(code, KeyModifiers::NONE))) {
            self.engine.send(op);
        }
    }

    fn type_text(&mut self, text: &str) {
        for c in text.chars() {
            self.key(KeyCode::Char(c));
        }
    }

    /// Type `text` and press Enter.
    fn enter(&mut self, text: &str) {
        self.type_text(text);
        self.key(KeyCode::Enter);
    }

    /// Wait for an event matching `pred` seen at index `since` or later, feeding the app.
    async fn since(&mut self, since: usize, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
        let event = self.engine.wait_since(since, what, pred).await;
        self.feed();
        event
    }

    /// The crash copy of what waits (`pending:{session}` in state_meta), once it reads `want`.
    async fn saved_pending_is(&mut self, want: &[&str]) {
        let key = format!("pending:{}", self.engine.session_id());
        let want = serde_json::to_string(want).unwrap();
        let deadline = tokio::time::Instant::now() + inproc::DEADLINE;
        loop {
            let saved = self.engine.store.meta_get(&key).await.unwrap();
            if saved.as_deref() == Some(want.as_str()) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{key} is {saved:?}, not {want}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Give the app every event received so far; what it asks for goes to the engine.
    fn feed(&mut self) {
        while self.fed < self.engine.seen.len() {
            let event = self.engine.seen[self.fed].clone();
            self.fed += 1;
            for op in self.app.update(AppEvent::Engine(event)) {
                self.engine.send(op);
            }
        }
    }

    /// Wait for an event matching `pred`, feeding the app everything up to it.
    async fn until(&mut self, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
        let event = self.engine.wait_for(what, pred).await;
        self.feed();
        event
    }

    async fn notice(&mut self, needle: &str) -> String {
        match self.until(needle, |e| matches!(e, Event::Notice { text, .. } if text.contains(needle))).await {
            Event::Notice { text, .. } => text,
            _ => unreachable!(),
        }
    }

    /// Every event for `period`, fed to the app (for checks that something does NOT happen).
    async fn collect_for(&mut self, period: std::time::Duration) {
        self.engine.collect_for(period).await;
        self.feed();
    }

    fn screen(&mut self) -> String {
        let mut terminal = Terminal::new(TestBackend::new(120, 30)).expect("test backend");
        terminal.draw(|f| talaria::tui::render(&mut self.app, f)).expect("draw");
        terminal.backend().to_string()
    }

    /// The notices received since event `since`.
    fn notices_since(&self, since: usize) -> Vec<(NoticeLevel, String)> {
        self.engine.seen[since..]
            .iter()
            .filter_map(|e| match e {
                Event::Notice { level, text } => Some((*level, text.clone())),
                _ => None,
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_at_file_is_a_warning_on_screen() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("There is no such file.")]).await.unwrap();
    let mut tui = Tui::start(home.path(), &server).await;
    tui.enter("summarise @missing-file.md please");
    tui.until("the turn's end", |e| matches!(e, Event::TurnFinished { .. })).await;
    let out = tui.screen();
    assert!(out.contains("@missing-file.md: no such file here — not attached"), "{out}");
    assert!(out.contains("There is no such file."), "{out}");
    tui.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_says_which_session_it_resumed() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("noted")]).await.unwrap();
    let mut tui = Tui::start(home.path(), &server).await;
    tui.enter("the parser drops tabs");
    tui.until("the turn's end", |e| matches!(e, Event::TurnFinished { .. })).await;
    tui.enter("/title parser tabs");
    tui.notice("session titled").await;
    let first = tui.engine.session_id();
    tui.enter("/new");
    tui.until("the new session", |e| matches!(e, Event::SessionReady { session_id, .. } if *session_id != first)).await;
    tui.enter("/resume parser tabs");
    let said = tui.notice("resumed").await;
    assert_eq!(said, format!("resumed \"parser tabs\" ({first} · 2 messages)"));
    let out = tui.screen();
    assert!(out.contains("resumed \"parser tabs\""), "the notice is on screen:\n{out}");
    assert!(out.contains("the parser drops tabs"), "with the resumed transcript:\n{out}");
    tui.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_and_unpause_say_so_once_each() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("unused")]).await.unwrap();
    let mut tui = Tui::start(home.path(), &server).await;
    let since = tui.engine.seen.len();
    tui.enter("/pause lunch break");
    tui.notice("PAUSED — lunch break").await;
    // The pause file's watcher sees the change within a second: it must not say it again.
    tui.collect_for(QUIET).await;
    let said: Vec<_> = tui.notices_since(since).into_iter().filter(|(_, t)| t.contains("PAUSED")).collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].1.contains("typed messages wait"), "{said:?}");
    assert_eq!(tui.screen().matches("PAUSED — lunch break").count(), 1, "{}", tui.screen());

    let since = tui.engine.seen.len();
    tui.enter("/unpause");
    tui.notice("unpaused").await;
    tui.collect_for(QUIET).await;
    let said: Vec<_> = tui.notices_since(since).into_iter().filter(|(_, t)| t.contains("unpaused")).collect();
    assert_eq!(said.len(), 1, "{said:?}");
    tui.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn model_warns_when_the_provider_does_not_list_the_name() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("unused")]).await.unwrap();
    server.set_models(["alpha-1", "beta-2"]);
    let mut tui = Tui::start(home.path(), &server).await;
    let since = tui.engine.seen.len();
    // A listed model: switched, no warning.
    tui.enter("/model alpha-1");
    tui.notice("model for this session: alpha-1").await;
    server.wait_for_requests(1, inproc::DEADLINE).await;
    // One the provider does not list: switched all the same, with a warning on screen.
    tui.enter("/model gamma-3");
    tui.notice("model for this session: gamma-3").await;
    let warning = tui.notice("does not list a model named gamma-3").await;
    assert!(warning.contains("/model lists the ones it has"), "{warning}");
    tui.collect_for(std::time::Duration::from_secs(1)).await;
    let notices = tui.notices_since(since);
    let warnings: Vec<_> = notices.iter().filter(|(level, _)| *level == NoticeLevel::Warn).collect();
    assert_eq!(warnings.len(), 1, "only the unlisted model warns: {notices:?}");
    let out = tui.screen();
    assert!(out.contains("does not list a model named gamma-3"), "{out}");
    tui.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_the_engine_refuses_comes_back_to_the_input_selected() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("unused")]).await.unwrap();
    let mut tui = Tui::start(home.path(), &server).await;
    for (command, error) in [
        ("/goal gate remove 9", "no gate 9: no gates are waiting for a goal"),
        ("/jobs kill job_9", "No job_9 here: this session has no background jobs."),
    ] {
        tui.enter(command);
        tui.notice(error).await;
        let out = tui.screen();
        let input: Vec<&str> = out.lines().filter(|l| l.contains(command)).collect();
        assert!(!input.is_empty(), "{command} is back in the input:\n{out}");
        assert!(out.contains("typing replaces the command"), "{out}");
        // Typing replaces it: Ctrl+U would otherwise be needed first.
        for c in "/help".chars() {
            tui.key(KeyCode::Char(c));
        }
        let out = tui.screen();
        assert!(!out.contains(&format!("{command}/help")), "typing appended:\n{out}");
        tui.key(KeyCode::Esc);
        for _ in 0.."/help".len() {
            tui.key(KeyCode::Backspace);
        }
    }
    tui.engine.shutdown().await;
}

/// `text` streamed, then silence with the connection open: only the user can end it.
fn stalled(text: &str) -> ScriptedResponse {
    let payloads = text_chunks(text, 4);
    let n = payloads.len();
    ScriptedResponse::sse(payloads).stall_after(n)
}

/// The #35 finding: the TUI set `busy` only for turns, so Esc during `/compact` said
/// "nothing to stop: Talaria is idle" while the summary request was in flight.
#[tokio::test(flavor = "multi_thread")]
async fn esc_during_compact_stops_the_summary_request() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([
        ScriptedResponse::text("answer one"),
        ScriptedResponse::text("answer two"),
        ScriptedResponse::hang(),
    ])
    .await
    .unwrap();
    let mut tui = Tui::start(home.path(), &server).await;
    for text in ["first question", "second question"] {
        tui.enter(text);
        tui.until("the turn's end", |e| matches!(e, Event::TurnFinished { .. })).await;
    }
    let since = tui.engine.seen.len();
    tui.enter("/compact");
    tui.since(since, "the compacting phase", |e| *e == Event::Phase { phase: Phase::Compacting }).await;
    // The summary request has reached the server, which never answers it.
    server.wait_for_chat_requests(3, inproc::DEADLINE).await;
    assert!(tui.screen().contains("compacting · "), "the status line says so:\n{}", tui.screen());
    let since = tui.engine.seen.len();
    tui.key(KeyCode::Esc);
    tui.notice("not compacted: interrupted").await;
    tui.since(since, "idle again", |e| *e == Event::Phase { phase: Phase::Idle }).await;
    let out = tui.screen();
    assert!(!out.contains("nothing to stop"), "{out}");
    assert!(out.contains("● idle"), "{out}");
    tui.engine.shutdown().await;
}

/// The #35 finding: LONG command, Tab-queue a message, type a redirect: once the redirect
/// was delivered the queued message left the pending line and its crash copy was deleted.
#[tokio::test(flavor = "multi_thread")]
async fn a_queued_message_stays_shown_and_saved_after_a_redirect_is_delivered() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([
        ScriptedResponse::tool_call("c1", "terminal", r#"{"command":"sleep 3004419"}"#),
        ScriptedResponse::hang(),
    ])
    .await
    .unwrap();
    let mut tui = Tui::start(home.path(), &server).await;
    tui.enter("run the long thing");
    tui.until("the command", |e| matches!(e, Event::ToolStarted { .. })).await;
    tui.type_text("do this next");
    tui.key(KeyCode::Tab);
    tui.until("the queued line", |e| matches!(e, Event::PendingChanged { queued, .. } if !queued.is_empty())).await;
    tui.saved_pending_is(&["do this next"]).await;
    tui.enter("stop and look");
    tui.until(
        "the redirect delivered",
        |e| matches!(e, Event::UserMessage { text, origin: Origin::MidTurn, .. } if text == "stop and look"),
    )
    .await;
    let published = tui
        .until(
            "what waits after the delivery",
            |e| matches!(e, Event::PendingChanged { pending, .. } if pending.is_empty()),
        )
        .await;
    assert_eq!(published, Event::PendingChanged { pending: Vec::new(), queued: vec!["do this next".into()] });
    server.wait_for_chat_requests(2, inproc::DEADLINE).await;
    let out = tui.screen();
    assert!(out.contains("⏭ queued for the next turn: do this next"), "still on the pending line:\n{out}");
    assert!(out.contains("↳ delivered mid-turn"), "{out}");
    tui.saved_pending_is(&["do this next"]).await;
    // Esc ends the turn: the queued message goes back to the input, never sent.
    tui.key(KeyCode::Esc);
    tui.until("the restore", |e| matches!(e, Event::RestoreInput { text } if text == "do this next")).await;
    tui.engine.shutdown().await;
    assert_eq!(server.chat_requests().len(), 2, "the queued message was never sent");
}

/// The #35 finding: only the idle path expanded `@path` mentions.
#[tokio::test(flavor = "multi_thread")]
async fn an_at_path_in_a_message_typed_while_busy_reaches_the_model_expanded() {
    let home = tempfile::tempdir().unwrap();
    let server =
        ScriptedServer::start([stalled("Thinking about it"), ScriptedResponse::text("Read it.")]).await.unwrap();
    let mut tui = Tui::start(home.path(), &server).await;
    std::fs::write(tui.engine.work.join("notes.txt"), "the secret word is marmalade\n").unwrap();
    tui.enter("go");
    tui.until("a delta", |e| matches!(e, Event::AssistantDelta(_))).await;
    tui.enter("look at @notes.txt");
    let end = tui.until("the turn's end", |e| matches!(e, Event::TurnFinished { .. })).await;
    assert_eq!(end, Event::TurnFinished { outcome: TurnOutcome::Completed });
    let requests = server.wait_for_chat_requests(2, inproc::DEADLINE).await;
    let last = requests[1].messages().last().map(|m| m.text().to_string()).unwrap_or_default();
    assert!(last.starts_with("look at @notes.txt"), "{last}");
    assert!(last.contains("[Attached file: notes.txt]") && last.contains("marmalade"), "{last}");
    let out = tui.screen();
    assert!(out.contains("look at @notes.txt") && !out.contains("marmalade"), "the file stays out of view:\n{out}");
    tui.engine.shutdown().await;
}

/// #32 item 12: `/pause` said "typed messages wait", but a message typed while paused was
/// bounced back into the input; it now waits on the pending line and goes on unpause.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_typed_while_paused_waits_on_the_pending_line_and_goes_on_unpause() {
    let home = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([ScriptedResponse::text("Hello to you.")]).await.unwrap();
    let mut tui = Tui::start(home.path(), &server).await;
    tui.enter("/pause");
    tui.notice("PAUSED").await;
    tui.enter("hello while paused");
    let said = tui.notice("paused: your message waits").await;
    assert!(!said.contains('`'), "no markup printed literally: {said}");
    let out = tui.screen();
    assert!(out.contains("◌ waiting: hello while paused"), "{out}");
    assert_eq!(out.matches("hello while paused").count(), 1, "not back in the input as well:\n{out}");
    assert!(!out.contains("`"), "{out}");
    tui.saved_pending_is(&["hello while paused"]).await;
    assert!(server.chat_requests().is_empty());

    tui.enter("/unpause");
    let started = tui.until("the turn", |e| matches!(e, Event::TurnStarted { .. })).await;
    assert_eq!(started, Event::TurnStarted { trigger: TurnTrigger::Queued });
    tui.until("the turn's end", |e| matches!(e, Event::TurnFinished { .. })).await;
    let requests = server.wait_for_chat_requests(1, inproc::DEADLINE).await;
    assert_eq!(requests[0].messages().last().map(|m| m.text().to_string()).as_deref(), Some("hello while paused"));
    assert!(!tui.screen().contains("◌ waiting"), "{}", tui.screen());
    tui.engine.shutdown().await;
}
