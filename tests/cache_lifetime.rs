//! The prompt cache's lifetime follows the session's cadence (Anthropic): a request whose
//! successor is expected later than 5 minutes — a heartbeat's tick when its interval is
//! longer, a goal's turn that leaves a job running — marks its breakpoints `"ttl": "1h"` (and
//! names the beta flag); every other request keeps the 5-minute default. The bill of a
//! 10-tick heartbeat at 30 minutes, before and after, is printed (BENCHMARKS.md has it).
//!
//! The heartbeat's clock is moved forward (`testkit::clock`), which is process-wide: this
//! file is its own test binary, and only one test in it uses a heartbeat.

#[path = "common/anthropic.rs"]
mod anthropic_wire;
#[path = "common/inproc.rs"]
mod inproc;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anthropic_wire::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use talaria::config::Config;
use talaria::engine::llm::anthropic::{AnthropicClient, MessagesOptions};
use talaria::engine::llm::client::ClientSettings;
use talaria::engine::SessionChoice;
use talaria::protocol::commands::{GoalCmd, HeartbeatCmd};
use talaria::protocol::{Event, Op, SlashCommand, TurnOutcome, TurnTrigger};
use talaria::testkit::clock::advance_heartbeat_clock;
use talaria::testkit::scripted::{RecordedRequest, ScriptedServer};

const KEY: &str = "sk-ant-test-cadence";
const MODEL: &str = "claude-sonnet-4-5";
/// Sonnet's input price per million tokens; the cache prices follow from it.
const INPUT_PRICE: f64 = 3.0;
/// Sonnet's output price per million tokens, and what every answer reports.
const OUTPUT_PRICE: f64 = 15.0;
const OUTPUT_TOKENS: u64 = 40;

/// A request as the server saw it, with the time on the cache model's clock.
#[derive(Clone)]
struct Seen {
    at_s: u64,
    request: RecordedRequest,
}

/// A scripted Anthropic server on a clock the test moves: each turn runs one command and
/// answers; usage is billed by a [`CacheModel`] that honours the lifetimes the requests ask
/// for. Every `POST /messages` is kept with its time.
async fn server(clock: Arc<AtomicU64>) -> (ScriptedServer, Arc<Mutex<Vec<Seen>>>) {
    let model = Mutex::new(CacheModel::default());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let server = ScriptedServer::with_responder(move |request| {
        let at_s = clock.load(Ordering::SeqCst);
        let usage = {
            let mut model = model.lock().unwrap();
            model.now_s = at_s;
            model.bill(&request.body)
        };
        log.lock().unwrap().push(Seen { at_s, request: request.clone() });
        let last = request.body["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or(Value::Null);
        let after_tool = last["content"].as_array().is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
        let judging = request.body.get("tools").is_none();
        let (blocks, stop) = if judging {
            (vec![text_block(0, r#"{"verdict":"blocked","reason":"the build is still running"}"#, 20)], "end_turn")
        } else if after_tool {
            (vec![text_block(0, &"Checked: nothing has changed since the last look. ".repeat(3), 40)], "end_turn")
        } else {
            let n = request.body["messages"].as_array().map_or(0, Vec::len);
            let input = json!({"command": format!("echo look {n}; seq 1 40")});
            (vec![tool_use_block(0, &format!("toolu_{n}"), "terminal", &input, 40)], "tool_use")
        };
        stream(answer(usage.start_usage(), blocks, stop, OUTPUT_TOKENS))
    })
    .await
    .expect("scripted server");
    (server, seen)
}

async fn engine(home: &std::path::Path, server: &ScriptedServer) -> inproc::Running {
    let settings = ClientSettings::new(server.base_url())
        .api_key(KEY)
        .max_retries(0)
        .timeouts(Duration::from_secs(10), Duration::from_secs(60));
    let provider = Arc::new(AnthropicClient::new(settings, MessagesOptions::default()).unwrap());
    inproc::start_provider(home, provider, MODEL, SessionChoice::New, Config::default()).await
}

/// Every `cache_control` of a request body, in prefix order.
fn marks(body: &Value) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for tool in body["tools"].as_array().into_iter().flatten() {
        out.extend(tool.get("cache_control").cloned());
    }
    for block in body["system"].as_array().into_iter().flatten() {
        out.extend(block.get("cache_control").cloned());
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            out.extend(block.get("cache_control").cloned());
        }
    }
    out
}

/// The lifetime a request asked for: "1h" when every breakpoint says so and the beta flag
/// is named, "5m" when none names a ttl and the flag is absent; anything else fails.
fn lifetime(request: &RecordedRequest) -> &'static str {
    let marks = marks(&request.body);
    assert!(!marks.is_empty(), "a request without breakpoints: {}", request.body);
    let beta = request.header("anthropic-beta");
    if marks.iter().all(|m| m == &json!({"type": "ephemeral", "ttl": "1h"})) {
        assert_eq!(beta, Some("extended-cache-ttl-2025-04-11"), "a 1-hour request names the beta flag");
        "1h"
    } else if marks.iter().all(|m| m == &json!({"type": "ephemeral"})) {
        assert_eq!(beta, None, "a 5-minute request names no beta flag");
        "5m"
    } else {
        panic!("mixed lifetimes in one request: {marks:?}")
    }
}

/// The body as it was before lifetimes: every `ttl` taken out of its breakpoints.
fn without_ttl(body: &Value) -> Value {
    let mut body = body.clone();
    let strip = |v: &mut Value| {
        if let Some(mark) = v.get_mut("cache_control").and_then(Value::as_object_mut) {
            mark.remove("ttl");
        }
    };
    for tool in body["tools"].as_array_mut().into_iter().flatten() {
        strip(tool);
    }
    for block in body["system"].as_array_mut().into_iter().flatten() {
        strip(block);
    }
    for message in body["messages"].as_array_mut().into_iter().flatten() {
        for block in message["content"].as_array_mut().into_iter().flatten() {
            strip(block);
        }
    }
    body
}

/// Bill `requests` on a fresh cache model at their times.
fn bill(requests: &[(u64, Value)]) -> CacheUsage {
    let mut model = CacheModel::default();
    let mut sum = CacheUsage::default();
    for (at_s, body) in requests {
        model.now_s = *at_s;
        let u = model.bill(body);
        sum.input += u.input;
        sum.cache_read += u.cache_read;
        sum.cache_write += u.cache_write;
        sum.cache_write_1h += u.cache_write_1h;
    }
    sum
}

/// Move both clocks (the heartbeat's and the cache model's) by `s` and wake the engine,
/// which then finds the heartbeat due.
fn advance(running: &inproc::Running, clock: &AtomicU64, s: u64) {
    clock.fetch_add(s, Ordering::SeqCst);
    advance_heartbeat_clock(s * 1000);
    running.send(Op::Command(SlashCommand::Heartbeat(HeartbeatCmd::Status)));
}

/// The next turn, which must be the heartbeat's, to its end.
async fn heartbeat_turn(running: &mut inproc::Running) {
    let started = running.wait_for("TurnStarted", |e| matches!(e, Event::TurnStarted { .. })).await;
    assert_eq!(started, Event::TurnStarted { trigger: TurnTrigger::Heartbeat });
    match running.turn_finished().await {
        Event::TurnFinished { outcome } => assert_eq!(outcome, TurnOutcome::Completed),
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_heartbeat_slower_than_the_cache_keeps_it_for_an_hour_and_pays_less() {
    const TICKS: usize = 10;
    let clock = Arc::new(AtomicU64::new(0));
    let (server, seen) = server(clock.clone()).await;
    let home = tempfile::tempdir().unwrap();
    let mut running = engine(home.path(), &server).await;

    // A person's turn first: 5 minutes, whatever comes after it.
    running.send(Op::Submit { text: "Look at the build once.".into(), mode: None });
    running.turn_finished().await;
    let set = HeartbeatCmd::Set { interval_s: 30 * 60, prompt: "Check the build and report anything new.".into() };
    running.send(Op::Command(SlashCommand::Heartbeat(set)));
    running.notice("heartbeat set").await;
    let typed = seen.lock().unwrap().len();
    let ticks_from = running.seen.len();
    for _ in 0..TICKS {
        advance(&running, &clock, 30 * 60 + 1);
        heartbeat_turn(&mut running).await;
    }
    let all = seen.lock().unwrap().clone();
    // What the session itself counted and priced for the ticks (its `Usage` events).
    let reported: Vec<(u64, u64, Option<f64>)> = running.seen[ticks_from..]
        .iter()
        .filter_map(|e| match e {
            Event::Usage { cache_write_tokens, cache_write_1h_tokens, cost_usd, .. } => {
                Some((*cache_write_tokens, *cache_write_1h_tokens, *cost_usd))
            }
            _ => None,
        })
        .collect();
    running.send(Op::Command(SlashCommand::Usage));
    let usage_text = running.notice("this run:").await;
    assert_eq!(typed, 2, "the typed turn made two requests");
    assert_eq!(all.len(), typed + 2 * TICKS, "each tick: a command and an answer");
    let lifetimes: Vec<&str> = all.iter().map(|s| lifetime(&s.request)).collect();
    let expected: Vec<&str> = [vec!["5m"; typed], vec!["1h"; 2 * TICKS]].concat();
    assert_eq!(lifetimes, expected);

    // A 4-minute heartbeat's next tick comes while the 5-minute entry lives: no hour.
    let set = HeartbeatCmd::Set { interval_s: 4 * 60, prompt: "Check the build again.".into() };
    running.send(Op::Command(SlashCommand::Heartbeat(set)));
    running.notice("heartbeat replaced").await;
    advance(&running, &clock, 4 * 60 + 1);
    heartbeat_turn(&mut running).await;
    // And a typed turn after the heartbeat ticks: 5 minutes again.
    running.send(Op::Submit { text: "Thanks, that is all.".into(), mode: None });
    running.turn_finished().await;
    let later: Vec<&str> = seen.lock().unwrap()[all.len()..].iter().map(|s| lifetime(&s.request)).collect();
    assert_eq!(later, vec!["5m"; 4]);

    // The bill of the ten ticks (requests 3..22) as sent, and as the same requests were sent
    // before lifetimes (no ttl: each tick found the 5-minute entries of the last one gone).
    let ticks: Vec<(u64, Value)> = all[typed..].iter().map(|s| (s.at_s, s.request.body.clone())).collect();
    let before_ticks: Vec<(u64, Value)> = ticks.iter().map(|(t, b)| (*t, without_ttl(b))).collect();
    let typed_part: Vec<(u64, Value)> = all[..typed].iter().map(|s| (s.at_s, s.request.body.clone())).collect();
    let after = bill(&[typed_part.clone(), ticks].concat());
    let before = bill(&[typed_part.clone(), before_ticks].concat());
    let first = bill(&typed_part);
    let minus = |a: CacheUsage| CacheUsage {
        input: a.input - first.input,
        cache_read: a.cache_read - first.cache_read,
        cache_write: a.cache_write - first.cache_write,
        cache_write_1h: a.cache_write_1h - first.cache_write_1h,
    };
    let (after, before) = (minus(after), minus(before));
    for (label, u) in [("before (5-minute lifetime)", before), ("after (1-hour lifetime)", after)] {
        eprintln!(
            "{label}: {TICKS} ticks, {} requests, {} input tokens = {} cache read + {} cache write ({} of them 1h) \
             + {} uncached; input cost ${:.4}",
            2 * TICKS,
            u.total(),
            u.cache_read,
            u.cache_write,
            u.cache_write_1h,
            u.input,
            u.cost(INPUT_PRICE)
        );
    }
    eprintln!("saved: {:.0}%", 100.0 * (1.0 - after.cost(INPUT_PRICE) / before.cost(INPUT_PRICE)));

    // The session's own bill of the ticks is the server's: every 1-hour write counted and
    // priced at 2 × input (the 5-minute write price would have undercounted it).
    assert_eq!(reported.len(), 2 * TICKS, "one Usage per request: {reported:?}");
    let sum = |f: fn(&(u64, u64, Option<f64>)) -> u64| reported.iter().map(f).sum::<u64>();
    assert_eq!((sum(|r| r.0), sum(|r| r.1)), (after.cache_write, after.cache_write_1h));
    let cost: f64 = reported.iter().map(|r| r.2.expect("Sonnet is priced")).sum();
    let output_cost = (2 * TICKS) as f64 * OUTPUT_TOKENS as f64 * OUTPUT_PRICE / 1e6;
    assert!((cost - (after.cost(INPUT_PRICE) + output_cost)).abs() < 1e-9, "{cost} vs {after:?}");
    let at_5m_price = cost - after.cache_write_1h as f64 * INPUT_PRICE * (2.0 - 1.25) / 1e6;
    eprintln!(
        "the session's own bill of the ticks (/usage): ${cost:.4} with output; \
         ${at_5m_price:.4} if its 1-hour writes were priced as 5-minute ones"
    );
    let one_hour = format!(", {} of them 1-hour)", thousands(after.cache_write_1h));
    assert!(usage_text.contains(&one_hour), "{usage_text}");
    assert_eq!(before.total(), after.total(), "the same requests");
    assert_eq!(before.cache_write_1h, 0);
    assert!(
        after.cache_read > before.cache_read + before.cache_read / 2,
        "the hour keeps the prefix: {after:?} vs {before:?}"
    );
    assert!(after.cost(INPUT_PRICE) < before.cost(INPUT_PRICE) * 0.6, "{after:?} vs {before:?}");
    running.shutdown().await;
}

/// A goal's turn that starts a background job and ends: its answer's request, made while the
/// job runs, asks for the hour (the goal's next step waits for the job's end); the request
/// that started it, and the judge's, keep 5 minutes.
#[tokio::test(flavor = "multi_thread")]
async fn a_goal_waiting_on_a_job_keeps_the_cache_for_an_hour() {
    let home = tempfile::tempdir().unwrap();
    let marker = format!("talaria-cadence-{}", std::process::id());
    let seen = Arc::new(Mutex::new(Vec::<RecordedRequest>::new()));
    let log = seen.clone();
    let command = format!("sleep 600 # {marker}");
    let server = ScriptedServer::with_responder(move |request| {
        log.lock().unwrap().push(request.clone());
        let n = log.lock().unwrap().len();
        let blocks = match n {
            1 => {
                vec![tool_use_block(0, "toolu_build", "terminal", &json!({"command": command, "background": true}), 30)]
            }
            2 => vec![text_block(0, "The build runs in the background; I will look when it ends.", 20)],
            _ => vec![text_block(0, r#"{"verdict":"blocked","reason":"the build is still running"}"#, 20)],
        };
        let stop = if n == 1 { "tool_use" } else { "end_turn" };
        stream(answer(start_usage(10, 0, 0), blocks, stop, 10))
    })
    .await
    .expect("scripted server");
    let mut running = engine(home.path(), &server).await;
    running.send(Op::Command(SlashCommand::Goal(GoalCmd::Set("build the project".into()))));
    running.notice("goal paused").await;
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 3, "the goal's two requests and the judge's");
    assert_eq!(lifetime(&requests[0]), "5m", "no job runs yet");
    assert_eq!(lifetime(&requests[1]), "1h", "the job runs: the next step waits for it");
    assert!(marks(&requests[2].body).is_empty() || lifetime(&requests[2]) == "5m", "the judge");
    assert_eq!(requests[2].header("anthropic-beta"), None);
    // Shutting down kills the session's jobs (the marked `sleep` with them).
    running.shutdown().await;
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
