//! Frame render time at 200×60 for transcripts of 100, 1,000 and 10,000 messages.
//! The transcript is virtualised, so the three should cost about the same.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use talaria::config::Config;
use talaria::protocol::{Event, Origin, ToolOutcome, TurnTrigger};
use talaria::tui::app::{App, AppEvent};
use talaria::tui::keymap::Keymap;
use talaria::tui::theme::Theme;

fn conversation(messages: usize) -> App {
    let mut app = App::new(&Config::default(), Keymap::builtin(), Theme::default(), None);
    let mut feed = |e: Event| {
        app.update(AppEvent::Engine(e));
    };
    for i in 0..messages {
        match i % 4 {
            0 => feed(Event::UserMessage { text: format!("Please look at item {i} and fix it"), trigger: TurnTrigger::User, origin: Origin::Typed, seq: None }),
            1 => feed(Event::AssistantDone {
                text: format!(
                    "## Step {i}\n\nI will **check** the `src/lib.rs` file first, then run the tests. \
                     This paragraph is long enough to wrap at least once on a wide terminal window, \
                     which is what real answers look like.\n\n- one\n- two\n\n```rust\nfn item_{i}() -> u32 {{ {i} }}\n```"
                ),
                reasoning: None,
            }),
            2 => {
                let call_id = format!("call_{i}");
                feed(Event::ToolStarted { call_id: call_id.clone(), name: "terminal".into(), summary: "cargo test".into() });
                feed(Event::ToolFinished {
                    call_id,
                    outcome: ToolOutcome { ok: i % 3 != 0, exit_code: Some(0), status: None, duration_ms: 1234, result: String::new() },
                });
            }
            _ => feed(Event::AssistantDone { text: "Done. All tests pass.".into(), reasoning: None }),
        }
    }
    app
}

fn bench_render(c: &mut Criterion) {
    let mut group = c.benchmark_group("render_200x60");
    for messages in [100usize, 1_000, 10_000] {
        let mut app = conversation(messages);
        let mut terminal = Terminal::new(TestBackend::new(200, 60)).expect("test backend");
        // The first frame lays out the visible cells; later frames reuse the cache.
        terminal.draw(|f| talaria::tui::render(&mut app, f)).expect("draw");
        group.bench_with_input(BenchmarkId::from_parameter(messages), &messages, |b, _| {
            b.iter(|| {
                terminal.draw(|f| talaria::tui::render(&mut app, f)).expect("draw");
                black_box(&app.visible);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_render);
criterion_main!(benches);
