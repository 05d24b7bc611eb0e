//! Fixed workloads for the performance guard (`scripts/perf-guard`, run by CI).
//!
//! `perf_guard WORKLOAD` builds its inputs, then runs the measured part between callgrind's
//! START and STOP instrumentation requests, so that `valgrind --tool=callgrind
//! --instr-atstart=no` counts the instructions of that part only (in every thread: the
//! store's SQL runs on its own thread). The inputs are fixed and the measured parts read no
//! clock and start no timer, so the counts repeat from run to run on a busy machine.
//! Outside valgrind the requests do nothing and the program prints the wall time instead.
//!
//! Workloads: `resume` (a 10,000-message session arriving in the UI), `frame` (the first
//! frame of that transcript at 200×60), `keys` (20 keystrokes, each with its frame), `wrap`
//! (a long markdown answer rendered and wrapped at 100 columns), `append` (1,000 messages
//! appended to the store, each awaited), `ingest` (10 MB of job output through the
//! supervisor's log writer and talaria's log follower into the job's output buffer),
//! `jobs` (32 chatty jobs' output updates reaching the UI while the model streams: 60
//! frames, 8 updates of each job between two frames, coalesced and drawn as the event
//! loop does).

use std::time::Instant;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::style::Style;
use ratatui::Terminal;
use talaria::config::Config;
use talaria::engine::jobs::jobdir::JobDir;
use talaria::engine::jobs::log::LogWriter;
use talaria::engine::jobs::output::{OutputBuf, Utf8Decoder};
use talaria::engine::jobs::LogReader;
use talaria::engine::llm::{Role, ToolCall};
use talaria::engine::store::{Store, StoredMessage};
use talaria::protocol::{BusyMode, Event, HistoryItem, JobInfo, JobStatus, NoticeLevel, Origin, ToolOutcome};
use talaria::tui::app::{App, AppEvent};
use talaria::tui::inbox::JobOutputBatch;
use talaria::tui::keymap::Keymap;
use talaria::tui::markdown::{self, CodeCache};
use talaria::tui::theme::Theme;
use talaria::tui::wrap::wrap_lines;

pub const WORKLOADS: [&str; 7] = ["resume", "frame", "keys", "wrap", "append", "ingest", "jobs"];

const TRANSCRIPT_MESSAGES: usize = 10_000;
const APPENDS: usize = 1_000;
const INGEST_BYTES: usize = 10 * 1024 * 1024;

fn main() {
    let Some(workload) = std::env::args().nth(1) else {
        eprintln!("usage: perf_guard {}", WORKLOADS.join("|"));
        std::process::exit(2);
    };
    let wall = match workload.as_str() {
        "resume" => resume(),
        "frame" => frame(),
        "keys" => keys(),
        "wrap" => wrap(),
        "append" => append(),
        "ingest" => ingest(),
        "jobs" => jobs(),
        other => {
            eprintln!("perf_guard: unknown workload {other:?}; one of {}", WORKLOADS.join(", "));
            std::process::exit(2);
        }
    };
    println!("{workload}: {:.3} ms (wall, meaningless under valgrind)", wall * 1000.0);
}

/// Run `work` with callgrind counting; the seconds it took.
fn measured<T>(work: impl FnOnce() -> T) -> (T, f64) {
    let start = Instant::now();
    callgrind::start_instrumentation();
    let out = std::hint::black_box(work());
    callgrind::stop_instrumentation();
    (out, start.elapsed().as_secs_f64())
}

/// Callgrind's client requests (valgrind/callgrind.h): a special no-op instruction
/// sequence that valgrind recognises; outside valgrind it does nothing.
mod callgrind {
    const BASE: u64 = ((b'C' as u64) << 24) | ((b'T' as u64) << 16);
    const START_INSTRUMENTATION: u64 = BASE + 4;
    const STOP_INSTRUMENTATION: u64 = BASE + 5;

    pub fn start_instrumentation() {
        request(START_INSTRUMENTATION);
    }

    pub fn stop_instrumentation() {
        request(STOP_INSTRUMENTATION);
    }

    #[cfg(target_arch = "x86_64")]
    fn request(code: u64) {
        let args: [u64; 6] = [code, 0, 0, 0, 0, 0];
        // SAFETY: the four rotations of rdi add up to 128 bits (rdi unchanged) and
        // `xchg rbx, rbx` changes nothing; valgrind reads `args` through rax and writes its
        // answer to rdx. Natively the sequence has no effect but the flags.
        unsafe {
            std::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                in("rax") args.as_ptr(),
                inout("rdx") 0u64 => _,
                inout("rdi") 0u64 => _,
                options(nostack, readonly),
            );
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn request(_code: u64) {}
}

/// A mixed answer: prose, a list, inline code and a Rust block.
fn answer(i: usize) -> String {
    format!(
        "## Step {i}\n\nI will **check** the `src/lib.rs` file first, then run the tests. This paragraph is long \
         enough to wrap at least once on a wide terminal window, which is what real answers look like.\n\n\
         - one thing to do\n- another, with `code`\n\n```rust\nfn item_{i}() -> u32 {{\n    {i}\n}}\n```\n"
    )
}

fn history(n: usize) -> Vec<HistoryItem> {
    (0..n)
        .map(|i| match i % 5 {
            0 => HistoryItem::User {
                text: format!("Please look at item {i} and fix what is wrong with it"),
                origin: Origin::Typed,
            },
            1 | 3 => HistoryItem::Assistant { text: answer(i), reasoning: None },
            2 => HistoryItem::Tool {
                call_id: format!("call_{i}"),
                name: "terminal".into(),
                summary: "cargo test --workspace".into(),
                outcome: ToolOutcome {
                    ok: i % 3 != 0,
                    exit_code: Some(0),
                    status: None,
                    duration_ms: 1234,
                    result: "{\"exit_code\":0,\"output\":\"test result: ok. 12 passed\"}".into(),
                },
                job: None,
            },
            _ => HistoryItem::Notice { level: NoticeLevel::Info, text: format!("job_{i} finished (exit 0)") },
        })
        .collect()
}

fn session_ready(n: usize) -> Event {
    Event::SessionReady {
        session_id: "20261201-000000-abcd".into(),
        title: Some("perf guard".into()),
        model: "m".into(),
        provider: "openai".into(),
        demo: false,
        cwd: "/work".into(),
        busy_mode: BusyMode::Redirect,
        history: history(n),
        input_history: (0..100).map(|i| format!("earlier input {i}")).collect(),
        earlier: None,
    }
}

fn app() -> App {
    App::new(&Config::default(), Keymap::builtin(), Theme::default(), None)
}

fn resumed_app() -> App {
    let mut app = app();
    app.update(AppEvent::Engine(session_ready(TRANSCRIPT_MESSAGES)));
    app
}

fn terminal() -> Terminal<TestBackend> {
    match Terminal::new(TestBackend::new(200, 60)) {
        Ok(t) => t,
        Err(e) => panic!("test backend: {e}"),
    }
}

fn draw(terminal: &mut Terminal<TestBackend>, app: &mut App) {
    if let Err(e) = terminal.draw(|f| talaria::tui::render(app, f)) {
        panic!("draw: {e}");
    }
}

fn resume() -> f64 {
    let mut app = app();
    let event = session_ready(TRANSCRIPT_MESSAGES);
    let (_, wall) = measured(|| app.update(AppEvent::Engine(event)));
    wall
}

fn frame() -> f64 {
    let mut app = resumed_app();
    let mut terminal = terminal();
    // Highlighting loads syntect's syntaxes once per process: not part of a frame.
    markdown::render("```rust\nfn warm() {}\n```", &Theme::default(), Style::default(), &mut CodeCache::default());
    let (_, wall) = measured(|| draw(&mut terminal, &mut app));
    wall
}

fn keys() -> f64 {
    let mut app = resumed_app();
    let mut terminal = terminal();
    draw(&mut terminal, &mut app);
    let (_, wall) = measured(|| {
        for c in "fix the failing test".chars() {
            app.update(AppEvent::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)));
            draw(&mut terminal, &mut app);
        }
    });
    wall
}

fn long_answer() -> String {
    let mut text = String::from("# A long answer\n\n");
    for i in 0..60 {
        text.push_str(&answer(i));
        text.push_str(
            "\nA second paragraph with a [link](https://example.invalid/docs) and *emphasis*, and a long \
             word: supercalifragilisticexpialidocious_identifier_name_that_does_not_fit_anywhere_at_all_really, \
             then more words after it so the wrapper has to work out where each line ends.\n\n\
             1. first\n2. second, which is a longer item that wraps onto the next line of the terminal window\n\n\
             > a quoted remark\n\n```python\ndef f(x):\n    return [y * 2 for y in range(x) if y % 3]\n```\n\n",
        );
    }
    text
}

fn wrap() -> f64 {
    let theme = Theme::default();
    let text = long_answer();
    markdown::render("```rust\nfn warm() {}\n```", &theme, Style::default(), &mut CodeCache::default());
    let (_, wall) = measured(|| {
        let mut cache = CodeCache::default();
        let lines = markdown::render(&text, &theme, Style::default(), &mut cache);
        wrap_lines(&lines, 100).len()
    });
    wall
}

fn stored(i: usize) -> StoredMessage {
    let (role, tool_calls, tool_call_id) = match i % 3 {
        0 => (Role::User, Vec::new(), None),
        1 => (Role::Assistant, vec![ToolCall::new(format!("c{i}"), "terminal", "{\"command\":\"cargo test\"}")], None),
        _ => (Role::Tool, Vec::new(), Some(format!("c{}", i - 1))),
    };
    StoredMessage {
        role,
        content: Some(format!("message {i}: {}", "some ordinary words of a conversation ".repeat(8))),
        tool_calls,
        tool_call_id,
        tool_name: (role == Role::Tool).then(|| "terminal".to_string()),
        display_kind: None,
        origin: None,
    }
}

fn append() -> f64 {
    let dir = temp_dir("append");
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let store = Store::open(&dir.join("state.db")).unwrap_or_else(|e| panic!("open store: {e}"));
    let sid = rt.block_on(store.create_session("m", "/work", None)).unwrap_or_else(|e| panic!("session: {e}"));
    let messages: Vec<StoredMessage> = (0..APPENDS).map(stored).collect();
    let (_, wall) = measured(|| {
        rt.block_on(async {
            for m in messages {
                store.append_message(&sid, m).await.unwrap_or_else(|e| panic!("append: {e}"));
            }
        })
    });
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    wall
}

/// Build-log-like lines: plain text, colour escapes, a few non-ASCII characters.
fn job_output() -> Vec<u8> {
    let mut out = Vec::with_capacity(INGEST_BYTES + 200);
    let mut i = 0u64;
    while out.len() < INGEST_BYTES {
        let line = match i % 4 {
            0 => format!("   Compiling crate_{i} v0.{}.{} (/work/crates/crate_{i})\n", i % 10, i % 7),
            1 => format!("\x1b[1m\x1b[32m    Finished\x1b[0m step {i} in {}.{}s — ok ✓\n", i % 60, i % 10),
            2 => format!("test module_{}::case_{i} ... ok\n", i % 13),
            _ => format!("warning: unused variable `x{i}` at src/file_{}.rs:{}:{}\n", i % 17, i % 400, i % 80),
        };
        out.extend_from_slice(line.as_bytes());
        i += 1;
    }
    out.truncate(INGEST_BYTES);
    out
}

fn ingest() -> f64 {
    let dir = temp_dir("ingest");
    let jd = JobDir::new(&dir, "job_1");
    if let Err(e) = std::fs::create_dir_all(&jd.path) {
        panic!("job dir: {e}");
    }
    let output = job_output();
    let (_, wall) = measured(|| {
        // The supervisor's side: decode each read, write the log (64 MiB cap, as default).
        let mut writer = LogWriter::new(&jd.path, "out", 64 << 20);
        let mut decoder = Utf8Decoder::default();
        // Talaria's side: follow the log into the job's bounded output buffer.
        let mut reader = None;
        let mut buf = OutputBuf::for_model_cap(Config::default().tool_output.max_chars);
        for piece in output.chunks(64 * 1024) {
            writer.write(&decoder.decode(piece));
            let reader = reader.get_or_insert_with(|| LogReader::open(&jd));
            buf.push(&reader.read_some());
        }
        buf.total_bytes()
    });
    let _ = std::fs::remove_dir_all(&dir);
    wall
}

const JOBS: usize = 32;
const JOB_FRAMES: usize = 60;
const UPDATES_PER_FRAME: usize = 8;

/// What a job follower sends: the job's newest ~2,000 characters of build log.
fn job_tail(job: usize, step: usize) -> String {
    let mut tail = String::new();
    let mut line = step;
    while tail.len() < 2000 {
        tail.push_str(&format!(
            "\x1b[32m   Compiling\x1b[0m job {job} crate_{line} v0.1.{} (/work/crates/crate_{line})\n",
            line % 9
        ));
        line += 1;
    }
    tail
}

fn jobs() -> f64 {
    // A short conversation: the frames cost little, so the job output's share shows.
    let mut app = app();
    app.update(AppEvent::Engine(session_ready(50)));
    let mut terminal = terminal();
    for j in 0..JOBS {
        // Its fields are the crate's; a job reaches a front end as this JSON does.
        let job: JobInfo = serde_json::from_value(serde_json::json!({
            "id": format!("job_{j}"), "command": format!("make -C crate_{j}"), "pid": 1000 + j,
            "cwd": "/work", "started_at_ms": 1_700_000_000_000u64, "status": { "state": "running" },
            "background": true, "has_stdin": false, "last_line": "",
        }))
        .unwrap_or_else(|e| panic!("job info: {e}"));
        app.update(AppEvent::Engine(Event::JobStarted { job }));
    }
    draw(&mut terminal, &mut app);
    // Built outside the measured part: the followers' events as they arrive, frame by frame.
    let frames: Vec<Vec<Event>> = (0..JOB_FRAMES)
        .map(|f| {
            let mut events = vec![Event::AssistantDelta(format!("word{f} "))];
            for u in 0..UPDATES_PER_FRAME {
                for j in 0..JOBS {
                    let tail = job_tail(j, f * UPDATES_PER_FRAME + u);
                    events.push(Event::JobUpdated { id: format!("job_{j}"), status: JobStatus::Running, tail });
                }
            }
            events
        })
        .collect();
    let (_, wall) = measured(|| {
        let mut batch = JobOutputBatch::default();
        for events in frames {
            for event in events {
                talaria::tui::engine_event(&mut app, &mut batch, event);
            }
            talaria::tui::job_output_for_frame(&mut app, &mut batch);
            draw(&mut terminal, &mut app);
        }
        batch.applied
    });
    wall
}

fn temp_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("talaria-perf-guard-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("creating {}: {e}", dir.display());
    }
    dir
}
