//! The scripted model server of `pty_bench --keystrokes`: plain HTTP/1.1 on 127.0.0.1, one
//! request per connection, one thread per connection. Every program under test streams the same
//! long answer from it, slowly, in the wire format it speaks:
//!
//! - `POST …/chat/completions` — OpenAI Chat Completions (`data: {chunk}` … `data: [DONE]`);
//! - `POST …/responses` — OpenAI Responses (`response.created`, `response.output_text.delta` …,
//!   `response.completed`);
//! - `POST …/messages` — Anthropic Messages (`message_start`, `content_block_start`,
//!   `content_block_delta` text_delta …, `message_stop`); `…/messages/count_tokens` counts;
//! - `GET …/models` — a one-model list (fields of both the OpenAI and the Anthropic shape);
//! - anything else — 404 with a JSON error, so nothing waits on it.
//!
//! It is also every program's HTTP(S) proxy (`HTTPS_PROXY`, with `NO_PROXY` for loopback): a
//! `CONNECT` or an absolute-form request to any other host is refused with 403 and logged, so a
//! peer's telemetry or update check never leaves the machine and the report can say it tried.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The model name the server reports; the programs are configured to ask for it.
pub const MODEL: &str = "pty-bench-model";

/// The answer opens with these words; the driver waits for them on screen.
pub const ANSWER_OPENING: &str = "Saltmarsh lighthouse log";

const WORDS: &[&str] = &[
    "the", "keeper", "climbed", "stairs", "again", "while", "grey", "gulls", "circled", "over", "cold", "water", "and",
    "lamp", "turned", "slowly", "through", "long", "night", "of", "rain", "wind", "ships", "passed", "far", "beyond",
    "rocks", "without", "knowing", "who", "watched", "them", "go",
];

/// How the scripted answer streams.
#[derive(Debug, Clone, Copy)]
pub struct StreamConfig {
    /// Pieces (events) in one answer.
    pub pieces: usize,
    /// Words per piece.
    pub words_per_piece: usize,
    /// Pause before each piece after the first.
    pub interval: Duration,
}

impl StreamConfig {
    /// The text of piece `i` (with a trailing space; a paragraph break every 40 pieces).
    pub fn piece(&self, i: usize) -> String {
        if i == 0 {
            return format!("{ANSWER_OPENING}, entry one: ");
        }
        let mut s = String::new();
        for w in 0..self.words_per_piece {
            let n = i * self.words_per_piece + w;
            s.push_str(WORDS[(n * 7 + n / WORDS.len()) % WORDS.len()]);
            s.push(' ');
        }
        if i % 40 == 39 {
            s.push_str("\n\n");
        }
        s
    }

    pub fn full_text(&self) -> String {
        (0..self.pieces).map(|i| self.piece(i)).collect()
    }
}

/// One request as logged.
#[derive(Debug, Clone)]
pub struct Logged {
    /// `METHOD /path` (query kept), or `CONNECT host:port (refused)`.
    pub line: String,
}

pub struct Server {
    pub port: u16,
    pub log: Arc<Mutex<Vec<Logged>>>,
    /// Streamed answers started so far.
    pub streams_started: Arc<AtomicU64>,
    /// Streamed answers being written right now.
    pub streams_active: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Server {
    pub fn start(config: StreamConfig) -> std::io::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let server = Server {
            port,
            log: Arc::default(),
            streams_started: Arc::default(),
            streams_active: Arc::default(),
            stop: Arc::default(),
        };
        let shared = Shared {
            port,
            config,
            log: server.log.clone(),
            started: server.streams_started.clone(),
            active: server.streams_active.clone(),
            stop: server.stop.clone(),
        };
        thread::spawn(move || {
            for conn in listener.incoming() {
                if shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let shared = shared.clone();
                thread::spawn(move || {
                    let _ = handle(conn, &shared);
                });
            }
        });
        Ok(server)
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The log entries from index `from` on.
    pub fn log_since(&self, from: usize) -> Vec<Logged> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.get(from..).map(<[Logged]>::to_vec).unwrap_or_default()
    }

    pub fn log_len(&self) -> usize {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

#[derive(Clone)]
struct Shared {
    port: u16,
    config: StreamConfig,
    log: Arc<Mutex<Vec<Logged>>>,
    started: Arc<AtomicU64>,
    active: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Shared {
    fn log(&self, line: String) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push(Logged { line });
    }
}

struct Request {
    method: String,
    target: String,
    body: Vec<u8>,
}

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 64 << 20;

fn read_request(conn: &TcpStream) -> std::io::Result<Option<Request>> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else { return Err(bad("bad request line")) };
    let (method, target) = (method.to_string(), target.to_string());
    let mut length = 0usize;
    let mut chunked = false;
    let mut head = line.len();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(bad("headers cut"));
        }
        head += line.len();
        if head > MAX_HEAD {
            return Err(bad("headers too long"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            if k == "content-length" {
                length = v.parse().map_err(|_| bad("bad content-length"))?;
            } else if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                chunked = true;
            } else if k == "expect" && v.eq_ignore_ascii_case("100-continue") {
                let mut w: &TcpStream = r.get_ref();
                w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| bad("bad chunk size"))?;
            if size == 0 {
                // Trailers, then the blank line.
                loop {
                    line.clear();
                    if r.read_line(&mut line)? == 0 || line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            if body.len() + size > MAX_BODY {
                return Err(bad("body too long"));
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            line.clear();
            r.read_line(&mut line)?;
        }
    } else {
        if length > MAX_BODY {
            return Err(bad("body too long"));
        }
        body.resize(length, 0);
        r.read_exact(&mut body)?;
    }
    Ok(Some(Request { method, target, body }))
}

fn handle(mut conn: TcpStream, shared: &Shared) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let Some(req) = read_request(&conn)? else { return Ok(()) };
    if req.method == "CONNECT" {
        shared.log(format!("CONNECT {} (refused)", req.target));
        return respond(&mut conn, 403, "text/plain", b"pty_bench: no network beyond 127.0.0.1\n");
    }
    // An absolute-form target came through the proxy setting: serve it only for this server.
    let path = match req.target.strip_prefix("http://").or_else(|| req.target.strip_prefix("https://")) {
        Some(rest) => {
            let (host, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
            let ours = [format!("127.0.0.1:{}", shared.port), format!("localhost:{}", shared.port)];
            if !ours.iter().any(|o| o == host) {
                shared.log(format!("{} {} (refused proxy request)", req.method, req.target));
                return respond(&mut conn, 403, "text/plain", b"pty_bench: no network beyond 127.0.0.1\n");
            }
            path
        }
        None => req.target.clone(),
    };
    let route = path.split('?').next().unwrap_or("").trim_end_matches('/');
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    // A body that is not JSON (compressed, say) is taken for a streaming request.
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(body.is_null());
    let model = body.get("model").and_then(Value::as_str).unwrap_or(MODEL).to_string();
    let line = format!("{} {path}", req.method);
    // Tells a program's main turn (with its tools) from side requests (titles, warm-ups).
    let tools = body.get("tools").and_then(Value::as_array).map_or(0, Vec::len);
    let flavour = match (req.method.as_str(), route) {
        ("POST", r) if r.ends_with("/chat/completions") => Flavour::Chat,
        ("POST", r) if r.ends_with("/responses") => Flavour::Responses,
        ("POST", r) if r.ends_with("/messages/count_tokens") => {
            shared.log(line);
            return respond_json(&mut conn, 200, &json!({"input_tokens": 12}));
        }
        ("POST", r) if r.ends_with("/messages") => Flavour::Messages,
        ("GET", r) if r.ends_with("/models") => {
            shared.log(line);
            return respond_json(&mut conn, 200, &models_list());
        }
        _ => {
            shared.log(format!("{line} (404)"));
            return respond_json(
                &mut conn,
                404,
                &json!({"error": {"type": "not_found_error", "message": "not found"}}),
            );
        }
    };
    if !stream {
        shared.log(format!("{line} (not streamed, {tools} tools)"));
        return respond_json(&mut conn, 200, &flavour.whole(&model, "Saltmarsh."));
    }
    shared.log(format!("{line} (streamed, {tools} tools)"));
    shared.started.fetch_add(1, Ordering::Relaxed);
    shared.active.fetch_add(1, Ordering::Relaxed);
    let written = stream_answer(&mut conn, flavour, &model, &shared.config);
    shared.active.fetch_sub(1, Ordering::Relaxed);
    written
}

fn models_list() -> Value {
    json!({
        "object": "list",
        "data": [{
            "id": MODEL, "object": "model", "type": "model", "display_name": MODEL,
            "created": 0, "created_at": "2026-01-01T00:00:00Z", "owned_by": "pty_bench"
        }],
        "models": [],
        "has_more": false, "first_id": MODEL, "last_id": MODEL
    })
}

fn respond(conn: &mut TcpStream, status: u16, content_type: &str, body: &[u8]) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        403 => "Forbidden",
        _ => "Not Found",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()?;
    let _ = conn.shutdown(Shutdown::Write);
    Ok(())
}

fn respond_json(conn: &mut TcpStream, status: u16, v: &Value) -> std::io::Result<()> {
    respond(conn, status, "application/json", v.to_string().as_bytes())
}

/// One `text/event-stream` event; `event:` line only when named.
pub fn sse_event(name: Option<&str>, data: &str) -> String {
    match name {
        Some(n) => format!("event: {n}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// One HTTP/1.1 chunk.
pub fn http_chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Flavour {
    Chat,
    Responses,
    Messages,
}

impl Flavour {
    /// The events before the first piece of text.
    pub fn opening(self, model: &str) -> String {
        match self {
            Flavour::Chat => sse_event(None, &chat_chunk(model, json!({"role": "assistant", "content": ""}), None)),
            Flavour::Responses => [
                sse_event(
                    Some("response.created"),
                    &json!({"type": "response.created", "sequence_number": 0, "response": response_object(model, "in_progress", &[])})
                        .to_string(),
                ),
                sse_event(
                    Some("response.output_item.added"),
                    &json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                        "item": {"id": "msg_pty_bench", "type": "message", "status": "in_progress", "role": "assistant", "content": []}})
                    .to_string(),
                ),
                sse_event(
                    Some("response.content_part.added"),
                    &json!({"type": "response.content_part.added", "sequence_number": 2, "item_id": "msg_pty_bench",
                        "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})
                    .to_string(),
                ),
            ]
            .concat(),
            Flavour::Messages => [
                sse_event(
                    Some("message_start"),
                    &json!({"type": "message_start", "message": {"id": "msg_pty_bench", "type": "message", "role": "assistant",
                        "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                        "usage": {"input_tokens": 12, "output_tokens": 1}}})
                    .to_string(),
                ),
                sse_event(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}).to_string(),
                ),
            ]
            .concat(),
        }
    }

    /// One piece of text (`seq` counts events for the Responses API).
    pub fn delta(self, model: &str, text: &str, seq: usize) -> String {
        match self {
            Flavour::Chat => sse_event(None, &chat_chunk(model, json!({"content": text}), None)),
            Flavour::Responses => sse_event(
                Some("response.output_text.delta"),
                &json!({"type": "response.output_text.delta", "sequence_number": seq + 3, "item_id": "msg_pty_bench",
                    "output_index": 0, "content_index": 0, "delta": text})
                .to_string(),
            ),
            Flavour::Messages => sse_event(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
                    .to_string(),
            ),
        }
    }

    /// The events after the last piece; `full` is the whole answer.
    pub fn closing(self, model: &str, full: &str, pieces: usize) -> String {
        let seq = pieces + 3;
        match self {
            Flavour::Chat => sse_event(None, &chat_chunk(model, json!({}), Some("stop"))) + &sse_event(None, "[DONE]"),
            Flavour::Responses => {
                let item = message_item(full);
                [
                    sse_event(
                        Some("response.output_text.done"),
                        &json!({"type": "response.output_text.done", "sequence_number": seq, "item_id": "msg_pty_bench",
                            "output_index": 0, "content_index": 0, "text": full})
                        .to_string(),
                    ),
                    sse_event(
                        Some("response.content_part.done"),
                        &json!({"type": "response.content_part.done", "sequence_number": seq + 1, "item_id": "msg_pty_bench",
                            "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": full, "annotations": []}})
                        .to_string(),
                    ),
                    sse_event(
                        Some("response.output_item.done"),
                        &json!({"type": "response.output_item.done", "sequence_number": seq + 2, "output_index": 0, "item": item})
                            .to_string(),
                    ),
                    sse_event(
                        Some("response.completed"),
                        &json!({"type": "response.completed", "sequence_number": seq + 3,
                            "response": response_object(model, "completed", &[item])})
                        .to_string(),
                    ),
                ]
                .concat()
            }
            Flavour::Messages => [
                sse_event(Some("content_block_stop"), &json!({"type": "content_block_stop", "index": 0}).to_string()),
                sse_event(
                    Some("message_delta"),
                    &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                        "usage": {"output_tokens": pieces}})
                    .to_string(),
                ),
                sse_event(Some("message_stop"), &json!({"type": "message_stop"}).to_string()),
            ]
            .concat(),
        }
    }

    /// A whole (non-streamed) answer.
    pub fn whole(self, model: &str, text: &str) -> Value {
        match self {
            Flavour::Chat => {
                json!({"id": "chatcmpl-pty-bench", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}})
            }
            Flavour::Responses => response_object(model, "completed", &[message_item(text)]),
            Flavour::Messages => json!({"id": "msg_pty_bench", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 12, "output_tokens": 1}}),
        }
    }
}

fn chat_chunk(model: &str, delta: Value, finish: Option<&str>) -> String {
    let mut v = json!({"id": "chatcmpl-pty-bench", "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    if finish.is_some() {
        v["usage"] = json!({"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13});
    }
    v.to_string()
}

fn message_item(text: &str) -> Value {
    json!({"id": "msg_pty_bench", "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn response_object(model: &str, status: &str, output: &[Value]) -> Value {
    json!({"id": "resp_pty_bench", "object": "response", "created_at": 0, "status": status, "model": model,
        "output": output, "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 13}})
}

fn stream_answer(conn: &mut TcpStream, flavour: Flavour, model: &str, config: &StreamConfig) -> std::io::Result<()> {
    conn.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
          transfer-encoding: chunked\r\nconnection: close\r\n\r\n",
    )?;
    conn.write_all(&http_chunk(flavour.opening(model).as_bytes()))?;
    let mut next = Instant::now();
    for i in 0..config.pieces {
        if i > 0 {
            next += config.interval;
            let now = Instant::now();
            if next > now {
                thread::sleep(next - now);
            }
        }
        conn.write_all(&http_chunk(flavour.delta(model, &config.piece(i), i).as_bytes()))?;
    }
    conn.write_all(&http_chunk(flavour.closing(model, &config.full_text(), config.pieces).as_bytes()))?;
    conn.write_all(b"0\r\n\r\n")?;
    conn.flush()?;
    let _ = conn.shutdown(Shutdown::Write);
    Ok(())
}

/// Splits an event-stream body into (event name, data) pairs.
pub fn parse_sse(body: &str) -> Vec<(Option<String>, String)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = None;
            let mut data = String::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (name, data)
        })
        .collect()
}

/// Decodes a chunked HTTP body.
pub fn unchunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = body.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&body[..eol]).ok()?.trim(), 16).ok()?;
        body = &body[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

/// Self-check: each flavour's stream, read back through a real loopback request, carries every
/// piece of the answer in the fields its clients read, and ends the way they expect.
pub fn self_check() -> Result<(), String> {
    let config = StreamConfig { pieces: 45, words_per_piece: 3, interval: Duration::from_millis(0) };
    let server = Server::start(config).map_err(|e| format!("server: {e}"))?;
    let full = config.full_text();
    if !full.starts_with(ANSWER_OPENING) || !full.contains("\n\n") {
        return Err(format!("answer text {:?}...", &full[..60.min(full.len())]));
    }
    for (path, body, last) in [
        ("/v1/chat/completions", r#"{"model":"m","stream":true}"#, "[DONE]"),
        ("/v1/responses", r#"{"model":"m","stream":true}"#, "response.completed"),
        ("/v1/messages?beta=true", r#"{"model":"m","stream":true}"#, "message_stop"),
    ] {
        let (status, raw) = request(server.port, "POST", path, body)?;
        if status != 200 {
            return Err(format!("{path}: status {status}"));
        }
        let text = String::from_utf8(unchunk(&raw).ok_or(format!("{path}: bad chunked body"))?)
            .map_err(|_| format!("{path}: not UTF-8"))?;
        let events = parse_sse(&text);
        let mut got = String::new();
        for (name, data) in &events {
            if data == "[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_str(data).map_err(|e| format!("{path}: {e} in {data:?}"))?;
            if let Some(n) = name {
                if v["type"] != n.as_str() {
                    return Err(format!("{path}: event {n} carries type {}", v["type"]));
                }
            }
            let piece = match path {
                "/v1/chat/completions" => v.pointer("/choices/0/delta/content"),
                "/v1/responses" => v.get("delta"),
                _ => v.pointer("/delta/text"),
            };
            got.push_str(piece.and_then(Value::as_str).unwrap_or(""));
        }
        let end = events.last().map(|(n, d)| n.clone().unwrap_or(d.clone()));
        if got != full || end.as_deref() != Some(last) {
            return Err(format!("{path}: {} of {} bytes of text, last event {end:?}", got.len(), full.len()));
        }
    }
    if server.streams_started.load(Ordering::Relaxed) != 3 {
        return Err("the server did not count three streams".into());
    }
    let (status, raw) = request(server.port, "GET", "/v1/models", "")?;
    let models: Value = serde_json::from_slice(&raw).map_err(|e| format!("/v1/models: {e}"))?;
    if status != 200 || models.pointer("/data/0/id") != Some(&json!(MODEL)) {
        return Err(format!("/v1/models answered {status} {models}"));
    }
    let (status, _) = request(server.port, "CONNECT", "example.com:443", "")?;
    let (status2, _) = request(server.port, "GET", "http://example.com/", "")?;
    if status != 403 || status2 != 403 {
        return Err(format!("proxy requests answered {status} and {status2}, want 403"));
    }
    let log: Vec<String> = server.log_since(0).into_iter().map(|l| l.line).collect();
    if log.len() != 6 || log[2] != "POST /v1/messages?beta=true (streamed, 0 tools)" || !log[4].ends_with("(refused)") {
        return Err(format!("request log {log:?}"));
    }
    Ok(())
}

/// A bare HTTP/1.1 request; returns the status and the raw body.
fn request(port: u16, method: &str, path: &str, body: &str) -> Result<(u16, Vec<u8>), String> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    let req = format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {}\r\n\r\n{body}", body.len());
    conn.write_all(req.as_bytes()).map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no header end")?;
    let status =
        String::from_utf8_lossy(&raw[..split]).split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, raw[split + 4..].to_vec()))
}
