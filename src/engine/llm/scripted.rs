//! A scripted OpenAI-compatible server on loopback.
//!
//! A minimal HTTP/1.1 server (one request per connection) that records every request and
//! answers from a queue of [`ScriptedResponse`]s or a responder closure. It serves the
//! built-in demo model and every test that needs a model: streams split at any byte, slow
//! streams, rate limits, server errors, hangs, and connections cut mid-stream.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use talaria::engine::llm::scripted::{ScriptedResponse, ScriptedServer};
//! let server = ScriptedServer::start([ScriptedResponse::text("Hello!")]).await?;
//! let base_url = server.base_url(); // http://127.0.0.1:PORT/v1
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::ChatMessage;

/// The payload that ends a Chat Completions stream.
pub const DONE: &str = "[DONE]";

/// Requests kept in memory; older ones are dropped (the count keeps going).
const MAX_RECORDED: usize = 1000;
const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// One request as the server received it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    /// The request target, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Null` when empty or not JSON (see `raw_body`).
    pub body: Value,
    pub raw_body: String,
}

impl RecordedRequest {
    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// A `POST …/chat/completions`.
    pub fn is_chat(&self) -> bool {
        self.method == "POST" && self.path.trim_end_matches('/').ends_with("/chat/completions")
    }

    /// The conversation sent (empty when the body has none or it does not parse).
    pub fn messages(&self) -> Vec<ChatMessage> {
        self.body.get("messages").and_then(|m| serde_json::from_value(m.clone()).ok()).unwrap_or_default()
    }

    /// The names of the function tools offered.
    pub fn tool_names(&self) -> Vec<String> {
        let tools = self.body.get("tools").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        tools.iter().filter_map(|t| t.pointer("/function/name").and_then(Value::as_str)).map(str::to_string).collect()
    }

    pub fn temperature(&self) -> Option<f64> {
        self.body.get("temperature").and_then(Value::as_f64)
    }
}

/// How a streamed response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// Every piece, then the end of the body.
    Complete,
    /// After this many pieces, close the connection without ending the body.
    CloseAfter(usize),
    /// After this many pieces, reset the connection (TCP RST).
    ResetAfter(usize),
    /// After this many pieces, send nothing more and keep the connection open.
    StallAfter(usize),
}

/// A `text/event-stream` body, written one piece per TCP write.
#[derive(Debug, Clone, PartialEq)]
pub struct SseStream {
    /// Raw bytes of each write (`data: …\n\n` framing included).
    pub pieces: Vec<Vec<u8>>,
    /// Pause before every piece after the first.
    pub delay: Duration,
    pub end: StreamEnd,
}

/// What the server answers to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedResponse {
    Stream(SseStream),
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Read the request, then never answer (until the client goes away or the server drops).
    Hang,
}

impl ScriptedResponse {
    /// A stream of `data:` events, one per payload (a chunk's JSON, or [`DONE`]).
    pub fn sse<I, S>(payloads: I) -> ScriptedResponse
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let pieces = payloads.into_iter().map(|p| format!("data: {}\n\n", p.into()).into_bytes()).collect();
        ScriptedResponse::Stream(SseStream { pieces, delay: Duration::ZERO, end: StreamEnd::Complete })
    }

    /// A stream whose body is exactly these bytes, one write each (to split events, UTF-8
    /// characters or CRLF pairs anywhere, or to send `: keep-alive` comments).
    pub fn sse_raw<I, B>(pieces: I) -> ScriptedResponse
    where
        I: IntoIterator<Item = B>,
        B: Into<Vec<u8>>,
    {
        let pieces = pieces.into_iter().map(Into::into).collect();
        ScriptedResponse::Stream(SseStream { pieces, delay: Duration::ZERO, end: StreamEnd::Complete })
    }

    /// A complete answer: `text` in small pieces, `finish_reason: stop`, usage, `[DONE]`.
    pub fn text(text: &str) -> ScriptedResponse {
        let mut payloads = text_chunks(text, 8);
        payloads.push(finish_chunk("stop"));
        payloads.push(usage_chunk(10, text.chars().count().div_ceil(4) as u64));
        payloads.push(DONE.to_string());
        ScriptedResponse::sse(payloads)
    }

    /// A complete answer calling one tool, its arguments split across chunks.
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> ScriptedResponse {
        let mut payloads = tool_call_chunks(0, id, name, arguments, 8);
        payloads.push(finish_chunk("tool_calls"));
        payloads.push(usage_chunk(10, 5));
        payloads.push(DONE.to_string());
        ScriptedResponse::sse(payloads)
    }

    /// A plain response with this status and body (`content-type: application/json`).
    pub fn status(status: u16, body: impl Into<String>) -> ScriptedResponse {
        ScriptedResponse::Status { status, headers: Vec::new(), body: body.into() }
    }

    /// An OpenAI-style error: `{"error":{"message":…,"type":…}}`.
    pub fn error(status: u16, message: &str) -> ScriptedResponse {
        let body = json!({"error": {"message": message, "type": "scripted_error", "code": status}});
        ScriptedResponse::status(status, body.to_string())
    }

    /// 429 with `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after_s: u64) -> ScriptedResponse {
        ScriptedResponse::error(429, "rate limited").header("Retry-After", retry_after_s.to_string())
    }

    /// `GET /v1/models` answer listing these ids.
    pub fn models<I, S>(ids: I) -> ScriptedResponse
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ScriptedResponse::status(200, models_body(ids.into_iter().map(Into::into)).to_string())
    }

    pub fn hang() -> ScriptedResponse {
        ScriptedResponse::Hang
    }

    /// Add a header to a `Status` response (no effect on the others).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> ScriptedResponse {
        if let ScriptedResponse::Status { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// Pause between the pieces of a stream (no effect on the others).
    pub fn delay(mut self, delay: Duration) -> ScriptedResponse {
        if let ScriptedResponse::Stream(stream) = &mut self {
            stream.delay = delay;
        }
        self
    }

    /// Close the connection after `n` pieces of a stream.
    pub fn close_after(self, n: usize) -> ScriptedResponse {
        self.end(StreamEnd::CloseAfter(n))
    }

    /// Reset the connection after `n` pieces of a stream.
    pub fn reset_after(self, n: usize) -> ScriptedResponse {
        self.end(StreamEnd::ResetAfter(n))
    }

    /// Go silent (connection open) after `n` pieces of a stream.
    pub fn stall_after(self, n: usize) -> ScriptedResponse {
        self.end(StreamEnd::StallAfter(n))
    }

    fn end(mut self, end: StreamEnd) -> ScriptedResponse {
        if let ScriptedResponse::Stream(stream) = &mut self {
            stream.end = end;
        }
        self
    }
}

/// Content delta chunks carrying `text`, `piece_chars` characters each (the first also
/// carries `role: assistant`).
pub fn text_chunks(text: &str, piece_chars: usize) -> Vec<String> {
    split_chars(text, piece_chars)
        .into_iter()
        .enumerate()
        .map(|(i, piece)| {
            let delta = if i == 0 { json!({"role": "assistant", "content": piece}) } else { json!({"content": piece}) };
            chunk(delta, Value::Null)
        })
        .collect()
}

/// Reasoning delta chunks (`reasoning_content`), `piece_chars` characters each.
pub fn reasoning_chunks(text: &str, piece_chars: usize) -> Vec<String> {
    split_chars(text, piece_chars)
        .into_iter()
        .map(|piece| chunk(json!({"reasoning_content": piece}), Value::Null))
        .collect()
}

/// One tool call as a server streams it: id and name in the first piece, the arguments
/// split into `piece_chars`-character pieces in the following ones.
pub fn tool_call_chunks(index: usize, id: &str, name: &str, arguments: &str, piece_chars: usize) -> Vec<String> {
    let first = json!({"tool_calls": [{
        "index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}
    }]});
    let mut out = vec![chunk(first, Value::Null)];
    out.extend(
        split_chars(arguments, piece_chars).into_iter().map(|piece| {
            chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), Value::Null)
        }),
    );
    out
}

/// The chunk carrying `finish_reason` (`stop`, `tool_calls`, `length`).
pub fn finish_chunk(reason: &str) -> String {
    chunk(json!({}), json!(reason))
}

/// The final usage chunk, with empty `choices` (as `stream_options.include_usage` sends it).
pub fn usage_chunk(prompt_tokens: u64, completion_tokens: u64) -> String {
    json!({
        "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted-model", "choices": [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}
    })
    .to_string()
}

/// An `{"error":{…}}` payload as some servers send it mid-stream.
pub fn error_chunk(message: &str) -> String {
    json!({"error": {"message": message, "type": "server_error"}}).to_string()
}

fn chunk(delta: Value, finish_reason: Value) -> String {
    json!({
        "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    })
    .to_string()
}

fn models_body(ids: impl Iterator<Item = String>) -> Value {
    let data: Vec<Value> = ids.map(|id| json!({"id": id, "object": "model", "owned_by": "scripted"})).collect();
    json!({"object": "list", "data": data})
}

/// Split into pieces of at most `n` characters (never inside a character).
fn split_chars(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

type Responder = Box<dyn Fn(&RecordedRequest) -> ScriptedResponse + Send + Sync>;

struct Shared {
    log: Mutex<RequestLog>,
    arrived: Notify,
    queue: Mutex<VecDeque<ScriptedResponse>>,
    responder: Option<Responder>,
    models: Mutex<ScriptedResponse>,
}

#[derive(Default)]
struct RequestLog {
    requests: VecDeque<RecordedRequest>,
    total: usize,
    recording: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The server. Dropping it stops it and closes every connection it holds.
pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    cancel: CancellationToken,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl ScriptedServer {
    /// Answer chat requests from this queue, in order. When it runs dry a request gets a
    /// 500 saying so. `GET …/models` is answered from [`ScriptedServer::set_models`].
    pub async fn start<I>(responses: I) -> std::io::Result<ScriptedServer>
    where
        I: IntoIterator<Item = ScriptedResponse>,
    {
        ScriptedServer::launch(responses.into_iter().collect(), None).await
    }

    /// Answer every request (except `GET …/models` and anything pushed on the queue) by
    /// calling `responder`.
    pub async fn with_responder<F>(responder: F) -> std::io::Result<ScriptedServer>
    where
        F: Fn(&RecordedRequest) -> ScriptedResponse + Send + Sync + 'static,
    {
        ScriptedServer::launch(VecDeque::new(), Some(Box::new(responder))).await
    }

    async fn launch(
        queue: VecDeque<ScriptedResponse>,
        responder: Option<Responder>,
    ) -> std::io::Result<ScriptedServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            log: Mutex::new(RequestLog { recording: true, ..RequestLog::default() }),
            arrived: Notify::new(),
            queue: Mutex::new(queue),
            responder,
            models: Mutex::new(ScriptedResponse::models(["scripted-model"])),
        });
        let cancel = CancellationToken::new();
        tokio::spawn(accept_loop(listener, shared.clone(), cancel.clone()));
        Ok(ScriptedServer { addr, shared, cancel })
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queue another response; queued responses are used before the responder.
    pub fn push(&self, response: ScriptedResponse) {
        lock(&self.shared.queue).push_back(response);
    }

    /// The ids `GET …/models` lists (default `["scripted-model"]`).
    pub fn set_models<I, S>(&self, ids: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        *lock(&self.shared.models) = ScriptedResponse::models(ids);
    }

    /// Answer `GET …/models` with this instead (an error, a hang, …).
    pub fn set_models_response(&self, response: ScriptedResponse) {
        *lock(&self.shared.models) = response;
    }

    /// Stop keeping request bodies (a long demo session should not grow memory); the count
    /// used by [`ScriptedServer::wait_for_requests`] still advances.
    pub fn set_recording(&self, on: bool) {
        lock(&self.shared.log).recording = on;
    }

    /// Every request recorded so far (at most the last 1000), oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.log).requests.iter().cloned().collect()
    }

    /// Only the chat completion requests.
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(RecordedRequest::is_chat).collect()
    }

    /// How many requests have arrived (recorded or not).
    pub fn request_count(&self) -> usize {
        lock(&self.shared.log).total
    }

    /// Wait until at least `n` requests (of any kind) have arrived or `timeout` passes;
    /// returns the recorded requests either way, so the caller asserts on what it got.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.wait_until(timeout, |log| log.total >= n).await;
        self.requests()
    }

    /// Like [`ScriptedServer::wait_for_requests`], counting only chat requests.
    pub async fn wait_for_chat_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.wait_until(timeout, |log| log.requests.iter().filter(|r| r.is_chat()).count() >= n).await;
        self.chat_requests()
    }

    async fn wait_until(&self, timeout: Duration, done: impl Fn(&RequestLog) -> bool) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.shared.arrived.notified();
            if done(&lock(&self.shared.log)) {
                return;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return;
            }
        }
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, cancel: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                let shared = shared.clone();
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = serve(stream, shared) => {}
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "scripted server: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let request = match read_request(&mut stream).await {
        Ok(Some(request)) => request,
        Ok(None) => return,
        Err(message) => {
            let _ = write_status(&mut stream, 400, &[], &json!({"error": {"message": message}}).to_string()).await;
            return;
        }
    };
    let response = answer(&shared, &request);
    {
        let mut log = lock(&shared.log);
        log.total += 1;
        if log.recording {
            if log.requests.len() >= MAX_RECORDED {
                log.requests.pop_front();
            }
            log.requests.push_back(request);
        }
    }
    shared.arrived.notify_waiters();
    let _ = respond(&mut stream, response).await;
}

fn answer(shared: &Shared, request: &RecordedRequest) -> ScriptedResponse {
    if request.method == "GET" && request.path.trim_end_matches('/').ends_with("/models") {
        return lock(&shared.models).clone();
    }
    if let Some(queued) = lock(&shared.queue).pop_front() {
        return queued;
    }
    match &shared.responder {
        Some(responder) => responder(request),
        None => ScriptedResponse::error(
            500,
            &format!("scripted server: no response queued for {} {}", request.method, request.path),
        ),
    }
}

/// `Ok(None)` when the client closed before sending a request.
async fn read_request(stream: &mut TcpStream) -> Result<Option<RecordedRequest>, String> {
    let mut buf = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err("request head too large".into());
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) if buf.is_empty() => return Ok(None),
            Ok(0) => return Err("connection closed inside the request head".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("read failed: {e}")),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        return Err(format!("bad request line: {request_line:?}"));
    };
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = match headers.iter().find(|(k, _)| k == "content-length") {
        Some((_, v)) => v.parse::<usize>().map_err(|_| format!("bad content-length: {v:?}"))?,
        None => 0,
    };
    if length > MAX_BODY_BYTES {
        return Err("request body too large".into());
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; (length - body.len()).min(64 * 1024)];
        match stream.read(&mut chunk).await {
            Ok(0) => return Err("connection closed inside the request body".into()),
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
    body.truncate(length);
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let body = serde_json::from_str(&raw_body).unwrap_or(Value::Null);
    Ok(Some(RecordedRequest { method: method.to_string(), path: path.to_string(), headers, body, raw_body }))
}

async fn respond(stream: &mut TcpStream, response: ScriptedResponse) -> std::io::Result<()> {
    match response {
        ScriptedResponse::Status { status, headers, body } => write_status(stream, status, &headers, &body).await,
        ScriptedResponse::Hang => {
            wait_for_client_to_leave(stream).await;
            Ok(())
        }
        ScriptedResponse::Stream(sse) => write_stream(stream, sse).await,
    }
}

async fn write_status(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &str,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        reason_phrase(status),
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.flush().await?;
    let _ = stream.shutdown().await;
    Ok(())
}

async fn write_stream(stream: &mut TcpStream, sse: SseStream) -> std::io::Result<()> {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                transfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await?;
    let cut = match sse.end {
        StreamEnd::Complete => None,
        StreamEnd::CloseAfter(n) | StreamEnd::ResetAfter(n) | StreamEnd::StallAfter(n) => Some(n),
    };
    for (i, piece) in sse.pieces.iter().enumerate() {
        if cut == Some(i) {
            break;
        }
        if i > 0 && !sse.delay.is_zero() {
            tokio::time::sleep(sse.delay).await;
        }
        if piece.is_empty() {
            continue; // an empty chunk would end a chunked body
        }
        let mut frame = format!("{:x}\r\n", piece.len()).into_bytes();
        frame.extend_from_slice(piece);
        frame.extend_from_slice(b"\r\n");
        stream.write_all(&frame).await?;
        stream.flush().await?;
    }
    match sse.end {
        StreamEnd::Complete => {
            stream.write_all(b"0\r\n\r\n").await?;
            stream.flush().await?;
            let _ = stream.shutdown().await;
        }
        StreamEnd::CloseAfter(_) => {
            let _ = stream.shutdown().await;
        }
        StreamEnd::ResetAfter(_) => {
            // Dropping a socket with a zero linger sends RST instead of FIN.
            stream.set_zero_linger()?;
        }
        StreamEnd::StallAfter(_) => wait_for_client_to_leave(stream).await,
    }
    Ok(())
}

/// Hold the connection open until the client closes it.
async fn wait_for_client_to_leave(stream: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    loop {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Scripted",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    async fn raw_exchange(addr: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn records_requests_and_answers_from_the_queue() {
        let server = ScriptedServer::start([ScriptedResponse::status(201, "{}")]).await.unwrap();
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Test: yes\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let reply = raw_exchange(server.addr(), &request).await;
        assert!(reply.starts_with("HTTP/1.1 201 "), "{reply}");
        let recorded = server.wait_for_requests(1, Duration::from_secs(10)).await;
        assert_eq!(recorded.len(), 1);
        let r = &recorded[0];
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.header("x-test")),
            ("POST", "/v1/chat/completions", Some("yes"))
        );
        assert!(r.is_chat());
        assert_eq!(r.messages(), vec![ChatMessage::user("hi")]);
        let reply = raw_exchange(server.addr(), "POST /v1/chat/completions HTTP/1.1\r\n\r\n").await;
        assert!(reply.starts_with("HTTP/1.1 500 ") && reply.contains("no response queued"), "{reply}");
    }

    #[tokio::test]
    async fn models_are_listed_without_using_the_queue() {
        let server = ScriptedServer::start([]).await.unwrap();
        server.set_models(["a", "b"]);
        let reply = raw_exchange(server.addr(), "GET /v1/models HTTP/1.1\r\n\r\n").await;
        assert!(reply.contains(r#""id":"a""#) && reply.contains(r#""id":"b""#), "{reply}");
    }

    #[tokio::test]
    async fn streams_use_chunked_framing() {
        let server = ScriptedServer::start([ScriptedResponse::sse(["{}", DONE])]).await.unwrap();
        let reply = raw_exchange(server.addr(), "POST /v1/chat/completions HTTP/1.1\r\n\r\n").await;
        assert!(reply.contains("text/event-stream"), "{reply}");
        assert!(reply.ends_with("a\r\ndata: {}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"), "{reply:?}");
    }

    #[test]
    fn chunk_helpers_reassemble() {
        let mut acc = super::super::sse::ChunkAccumulator::new();
        let mut chunks = text_chunks("héllo wörld", 3);
        chunks.extend(tool_call_chunks(0, "c1", "terminal", r#"{"command":"ls"}"#, 4));
        chunks.push(finish_chunk("tool_calls"));
        chunks.push(usage_chunk(1, 2));
        for c in &chunks {
            acc.push(c).unwrap();
        }
        let done = acc.finish();
        assert_eq!(done.content, "héllo wörld");
        assert_eq!(done.tool_calls, vec![super::super::ToolCall::new("c1", "terminal", r#"{"command":"ls"}"#)]);
        assert_eq!(done.usage, Some(super::super::Usage::tokens(1, 2)));
    }
}
