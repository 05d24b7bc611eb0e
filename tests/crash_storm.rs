//! The crash storm (#19): `kill -9` of a real `talaria exec` at random moments of scripted
//! sessions — while the answer streams, while a tool runs, while a background job finishes,
//! while a compaction is summarising, and during start-up — 50 times on one TALARIA_HOME,
//! each run continuing the same session (`exec -c`). After every kill:
//! - `PRAGMA integrity_check` is `ok`;
//! - every message talaria acknowledged before it died is stored (an event on stdout is
//!   only sent after its message was saved, so every user message, answer and tool result
//!   read from the dead process's stdout must be in the database);
//! - every process of this home left alive is one a job record points to (its supervisor,
//!   or a member of the group the supervisor started); nothing else survives.
//!
//! At the end a clean run takes the session back, then no process of this home is left and
//! no record says `running`. The rounds and their kill moments come from a seed printed at
//! the start (`TALARIA_STORM_SEED` replays one; `TALARIA_STORM_ROUNDS` changes the count).
//! Processes are found by `TALARIA_HOME=<this test's temp dir>` in their environment, so
//! tests running side by side never see each other's.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use talaria::testkit::rng::Rng;
use talaria::testkit::scripted::{text_chunks, RecordedRequest, ScriptedResponse, ScriptedServer, DONE};
use tokio::io::AsyncBufReadExt;

use common::Home;

/// A loaded 2-core machine is slow: every wait for a state has this deadline.
const DEADLINE: Duration = Duration::from_secs(30);

/// What a round does when talaria is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moment {
    /// After the k-th streamed piece of the answer.
    Streaming(u32),
    /// This many ms after a foreground tool call started.
    ToolRunning(u64),
    /// This many ms after a short background job started (it ends around then).
    JobFinishing(u64),
    /// This many ms after the compaction's summary request reached the server.
    Compacting(u64),
    /// This many ms after talaria was started (start-up: sweep, re-attach, resume).
    Startup(u64),
}

fn moment(rng: &mut Rng) -> Moment {
    match rng.below(5) {
        0 => Moment::Streaming(1 + rng.below(60) as u32),
        1 => Moment::ToolRunning(rng.below(600)),
        2 => Moment::JobFinishing(rng.below(700)),
        3 => Moment::Compacting(rng.below(400)),
        _ => Moment::Startup(rng.below(300)),
    }
}

/// What the scripted model does in the current round.
#[derive(Default)]
struct Script {
    round: usize,
    moment: Option<Moment>,
    mark: String,
    /// Summary requests seen (compactions).
    compactions: usize,
}

/// A slow answer: `pieces` pieces of 4 characters, 15 ms apart.
fn slow_text(text: &str) -> ScriptedResponse {
    let mut payloads = text_chunks(text, 4);
    payloads.push(talaria::testkit::scripted::finish_chunk("stop"));
    payloads.push(DONE.to_string());
    ScriptedResponse::sse(payloads).delay(Duration::from_millis(15))
}

fn respond(script: &Mutex<Script>, request: &RecordedRequest) -> ScriptedResponse {
    let mut s = script.lock().unwrap();
    let round = s.round;
    let mark = s.mark.clone();
    if request.tool_names().is_empty() {
        // The summary request of a compaction.
        s.compactions += 1;
        return slow_text(&format!("summary of the storm so far, round {round}. ").repeat(4));
    }
    let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
    let prompt = format!("round {round} {mark}");
    // The round's prompt since the last answer (job notices may follow it).
    let fresh = messages
        .iter()
        .rev()
        .take_while(|m| m["role"] != "assistant" && m["role"] != "tool")
        .any(|m| m["role"] == "user" && m["content"].as_str().is_some_and(|c| c.contains(&prompt)));
    if !fresh {
        // After a tool result, a job notice or a resumed turn: a plain answer (~1 s).
        return slow_text(&format!("answer {round}: noted, all fine here. ").repeat(6));
    }
    match s.moment {
        Some(Moment::ToolRunning(_)) => {
            let args = json!({ "command": format!("sleep 0.3; echo tool-output-{round} # storm-{mark}") });
            ScriptedResponse::tool_call(&format!("call_tool_{round}"), "terminal", &args.to_string())
        }
        Some(Moment::JobFinishing(_)) => {
            let args = json!({
                "command": format!("sleep 0.{}; echo job-output-{round} # storm-{mark}", 1 + round % 5),
                "background": true,
            });
            ScriptedResponse::tool_call(&format!("call_job_{round}"), "terminal", &args.to_string())
        }
        _ => slow_text(&format!("streamed answer for round {round}, piece by piece. ").repeat(6)),
    }
}

/// One live process: what /proc says about it.
#[derive(Debug, Clone)]
struct Proc {
    pid: i32,
    ppid: i32,
    pgid: i32,
    cmdline: String,
}

fn stat_fields(pid: i32) -> Option<(char, i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some((state, ppid, pgid))
}

/// Live (non-zombie) processes whose environment holds `TALARIA_HOME=<home>`.
fn processes_of(home: &Path) -> Vec<Proc> {
    let needle = format!("TALARIA_HOME={}", home.display()).into_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if !environ.split(|b| *b == 0).any(|var| var == needle.as_slice()) {
            continue;
        }
        let Some((state, ppid, pgid)) = stat_fields(pid) else { continue };
        if state == 'Z' || state == 'X' {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push(Proc { pid, ppid, pgid, cmdline });
    }
    found
}

/// A job record as the test reads it.
#[derive(Debug)]
struct JobRecord {
    num: i64,
    pgid: Option<i64>,
}

fn job_records(db: &rusqlite::Connection) -> Vec<JobRecord> {
    // Killed while the first start was still making the schema (its transaction rolled
    // back): a database without tables has no job records, and the next start makes them.
    let tables: i64 = db
        .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'jobs'", [], |r| r.get(0))
        .unwrap();
    if tables == 0 {
        return Vec::new();
    }
    let mut stmt = db.prepare("SELECT num, pgid FROM jobs").unwrap();
    stmt.query_map([], |r| Ok(JobRecord { num: r.get(0)?, pgid: r.get(1)? })).unwrap().map(Result::unwrap).collect()
}

/// Processes of `home` that no job record points to: not a supervisor of a recorded job,
/// not a descendant of one, not in the process group of a recorded job.
fn unaccounted(home: &Path, db: &rusqlite::Connection) -> Vec<Proc> {
    let records = job_records(db);
    let jobs_dir = home.join("jobs");
    let procs = processes_of(home);
    let by_pid: HashMap<i32, &Proc> = procs.iter().map(|p| (p.pid, p)).collect();
    let supervisor_of_record = |p: &Proc| {
        records.iter().any(|r| {
            let dir = jobs_dir.join(format!("job_{}", r.num));
            p.cmdline.contains(&format!("__job {}", dir.display()))
        })
    };
    let recorded_group = |p: &Proc| records.iter().any(|r| r.pgid == Some(i64::from(p.pgid)));
    // The session's network proxy lives on for jobs a killed talaria left (#31); its socket
    // under netproxy/ is its record (it removes it when it ends; the final check below sees
    // that it does).
    // Without a socket it is ending (it removes the socket, then exits): it must be gone soon.
    let proxy_recorded = |p: &Proc| {
        p.cmdline.contains("__netproxy")
            && (std::fs::read_dir(home.join("netproxy"))
                .is_ok_and(|d| d.flatten().any(|e| e.path().extension().is_some_and(|x| x == "sock")))
                || ends_within(p.pid, Duration::from_secs(5)))
    };
    procs
        .iter()
        .filter(|p| !proxy_recorded(p))
        .filter(|p| {
            let mut at = Some(*p);
            let mut hops = 0;
            while let Some(q) = at {
                if supervisor_of_record(q) {
                    return false;
                }
                at = by_pid.get(&q.ppid).copied();
                hops += 1;
                if hops > 64 {
                    break;
                }
            }
            !recorded_group(p)
        })
        .cloned()
        .collect()
}

/// Is process `pid` gone (or a zombie) within `limit`?
fn ends_within(pid: i32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if stat_fields(pid).is_none_or(|(state, _, _)| state == 'Z' || state == 'X') {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn integrity_ok(db: &rusqlite::Connection) -> String {
    db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap()
}

/// What one run of talaria acknowledged on stdout before it died.
#[derive(Debug, Default)]
struct Acknowledged {
    session: Option<String>,
    user: Vec<String>,
    assistant: Vec<String>,
    tool_results: Vec<String>,
}

fn acknowledged(events: &[Value]) -> Acknowledged {
    let mut ack = Acknowledged::default();
    for e in events {
        let data = &e["data"];
        match e["type"].as_str().unwrap_or_default() {
            "SessionReady" => ack.session = data["session_id"].as_str().map(str::to_string),
            "UserMessage" => ack.user.extend(data["text"].as_str().map(str::to_string)),
            "AssistantDone" => {
                ack.assistant.extend(data["text"].as_str().filter(|t| !t.is_empty()).map(str::to_string))
            }
            "ToolFinished" => ack.tool_results.extend(data["call_id"].as_str().map(str::to_string)),
            _ => {}
        }
    }
    ack
}

/// Every acknowledged message is in the database; returns what is missing.
fn missing(db: &rusqlite::Connection, ack: &Acknowledged) -> Vec<String> {
    let Some(session) = &ack.session else {
        assert!(ack.user.is_empty() && ack.assistant.is_empty(), "messages before SessionReady: {ack:?}");
        return Vec::new();
    };
    let mut stmt = db
        .prepare("SELECT role, coalesce(content, ''), coalesce(tool_call_id, '') FROM messages WHERE session_id = ?1")
        .unwrap();
    let rows: Vec<(String, String, String)> =
        stmt.query_map([session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect();
    let mut lost = Vec::new();
    for text in &ack.user {
        if !rows.iter().any(|(role, content, _)| role == "user" && content.contains(text.as_str())) {
            lost.push(format!("user: {text}"));
        }
    }
    for text in &ack.assistant {
        if !rows.iter().any(|(role, content, _)| role == "assistant" && content == text) {
            lost.push(format!("assistant: {text}"));
        }
    }
    for id in &ack.tool_results {
        if !rows.iter().any(|(role, _, call)| role == "tool" && call == id) {
            lost.push(format!("tool result: {id}"));
        }
    }
    lost
}

/// `talaria exec --json --yes [-c]` with its events collected as they come.
struct Run {
    child: tokio::process::Child,
    events: Arc<Mutex<Vec<Value>>>,
    reader: tokio::task::JoinHandle<()>,
    started: Instant,
}

fn start_run(home: &Home, base_url: &str, prompt: &str, resume: bool) -> Run {
    let mut cmd = home.command();
    cmd.arg("exec").arg("--json").arg("--yes").arg("--base-url").arg(base_url);
    if resume {
        cmd.arg("-c");
    }
    cmd.arg(prompt)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().expect("spawn talaria");
    let stdout = child.stdout.take().expect("stdout");
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let reader = tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                sink.lock().unwrap().push(v);
            }
        }
    });
    Run { child, events, reader, started: Instant::now() }
}

impl Run {
    fn count(&self, kind: &str) -> usize {
        self.events.lock().unwrap().iter().filter(|e| e["type"] == kind).count()
    }

    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Wait until `cond` holds or talaria ended by itself; true when `cond` held.
    async fn wait_for(&mut self, mut cond: impl FnMut(&Run) -> bool) -> bool {
        let start = Instant::now();
        loop {
            if cond(self) {
                return true;
            }
            if self.exited() {
                return cond(self);
            }
            assert!(start.elapsed() < DEADLINE, "timed out; events so far: {:?}", self.events.lock().unwrap());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// SIGKILL (if it still runs), then every line it wrote before dying.
    async fn kill_9(mut self) -> (Vec<Value>, bool) {
        let killed = match self.child.id() {
            Some(pid) if !self.exited() => {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL)
                    .is_ok()
            }
            _ => false,
        };
        let _ = tokio::time::timeout(DEADLINE, self.child.wait()).await.expect("talaria died");
        tokio::time::timeout(DEADLINE, self.reader).await.expect("stdout closed").unwrap();
        let events = std::mem::take(&mut *self.events.lock().unwrap());
        (events, killed)
    }
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_kill_9_at_random_moments_lose_nothing_and_leave_no_stray_process() {
    let rounds: usize = std::env::var("TALARIA_STORM_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let seed: u64 = std::env::var("TALARIA_STORM_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        u64::from(nanos) | 1
    });
    eprintln!("crash storm: {rounds} rounds, TALARIA_STORM_SEED={seed}");
    let mut rng = Rng::new(seed);
    let home = Home::new();
    let mark = format!("{}{}", std::process::id(), seed % 100_000);
    let script = Arc::new(Mutex::new(Script { mark: mark.clone(), ..Script::default() }));
    let responder = script.clone();
    let server = ScriptedServer::with_responder(move |r| respond(&responder, r)).await.unwrap();
    server.set_recording(false);
    let db_path = home.path().join("state.db");

    let mut all_acks: Vec<Acknowledged> = Vec::new();
    let mut tally: HashMap<&'static str, usize> = HashMap::new();
    let kills = AtomicUsize::new(0);
    // Processes of this home alive right after a kill (jobs and their supervisors), summed.
    let mut survivors = 0;
    for round in 0..rounds {
        let moment = moment(&mut rng);
        // A compaction round compacts before its first request (any use of the window is
        // over the threshold).
        let config = if matches!(moment, Moment::Compacting(_)) { "[agent]\ncompact_at = 0.001\n" } else { "" };
        home.write_config(config);
        let compactions_before = {
            let mut s = script.lock().unwrap();
            s.round = round;
            s.moment = Some(moment);
            s.compactions
        };
        let prompt = format!("round {round} {mark}: carry on");
        let mut run = start_run(&home, &server.base_url(), &prompt, round > 0);
        let reached = match moment {
            Moment::Streaming(k) => run.wait_for(|r| r.count("AssistantDelta") >= k as usize).await,
            Moment::ToolRunning(ms) => {
                let seen = run.wait_for(|r| r.count("ToolStarted") > 0).await;
                sleep_ms(ms).await;
                seen
            }
            Moment::JobFinishing(ms) => {
                let seen = run.wait_for(|r| r.count("JobStarted") > 0).await;
                sleep_ms(ms).await;
                seen
            }
            Moment::Compacting(ms) => {
                let s = script.clone();
                let seen = run.wait_for(move |_| s.lock().unwrap().compactions > compactions_before).await;
                sleep_ms(ms).await;
                seen
            }
            Moment::Startup(ms) => {
                sleep_ms(ms.saturating_sub(run.started.elapsed().as_millis() as u64)).await;
                true
            }
        };
        let (events, killed) = run.kill_9().await;
        if killed {
            kills.fetch_add(1, Ordering::SeqCst);
        }
        let name = match moment {
            Moment::Streaming(_) => "streaming",
            Moment::ToolRunning(_) => "tool running",
            Moment::JobFinishing(_) => "job finishing",
            Moment::Compacting(_) => "compacting",
            Moment::Startup(_) => "start-up",
        };
        if killed && reached {
            *tally.entry(name).or_default() += 1;
        }
        let kinds: Vec<&str> =
            events.iter().filter_map(|e| e["type"].as_str()).filter(|k| *k != "AssistantDelta").collect();
        eprintln!("round {round}: {moment:?} reached={reached} killed={killed} events={kinds:?}");

        let db = rusqlite::Connection::open(&db_path).expect("open state.db");
        assert_eq!(integrity_ok(&db), "ok", "round {round} ({moment:?}): integrity_check");
        let ack = acknowledged(&events);
        let lost = missing(&db, &ack);
        assert!(lost.is_empty(), "round {round} ({moment:?}, seed {seed}): acknowledged but not stored: {lost:?}");
        all_acks.push(ack);
        survivors += processes_of(home.path()).len();
        let stray = unaccounted(home.path(), &db);
        assert!(stray.is_empty(), "round {round} ({moment:?}, seed {seed}): processes no record points to: {stray:?}");
    }
    eprintln!(
        "crash storm: {} kills landed, by moment: {tally:?}; {survivors} surviving processes checked",
        kills.load(Ordering::SeqCst)
    );
    assert!(survivors > 0 || rounds < 20, "jobs outlive a kill -9: the check above saw them");
    assert!(kills.load(Ordering::SeqCst) * 10 >= rounds * 8, "most rounds end in a kill -9, not a clean exit");

    // A clean run takes the session back and ends normally.
    home.write_config("");
    script.lock().unwrap().moment = None;
    script.lock().unwrap().round = rounds;
    let out = home
        .run(&["exec", "--yes", "--base-url", &server.base_url(), "-c", &format!("round {rounds} {mark}: all done?")])
        .await;
    assert_eq!(out.status.code(), Some(0), "the clean run after the storm: {}", common::stderr(&out));

    // Jobs of the storm end by themselves (they are short); then nothing of this home is left.
    let start = Instant::now();
    while !processes_of(home.path()).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(60), "left over: {:?}", processes_of(home.path()));
        sleep_ms(50).await;
    }
    let list = home.run(&["jobs", "list", "--json", "--limit", "100000"]).await;
    assert_eq!(list.status.code(), Some(0), "{}", common::stderr(&list));
    let rows: Vec<Value> = serde_json::from_str(&common::stdout(&list)).unwrap();
    let running: Vec<&Value> = rows.iter().filter(|r| r["status"] == "running").collect();
    assert!(running.is_empty(), "records still running with no process left: {running:?}");
    let db = rusqlite::Connection::open(&db_path).unwrap();
    assert_eq!(integrity_ok(&db), "ok");
    for (round, ack) in all_acks.iter().enumerate() {
        let lost = missing(&db, ack);
        assert!(lost.is_empty(), "after the storm, round {round}: {lost:?}");
    }
}
