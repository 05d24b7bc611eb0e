//! The scripted model server of the tests: an OpenAI-compatible endpoint on loopback
//! ([`crate::loopback`]) that records every request and answers from a queue of
//! [`ScriptedResponse`]s or a responder closure — streams split at any byte, slow streams,
//! rate limits, server errors, hangs, and connections cut mid-stream.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use talaria::testkit::scripted::{ScriptedResponse, ScriptedServer};
//! let server = ScriptedServer::start([ScriptedResponse::text("Hello!")]).await?;
//! let base_url = server.base_url(); // http://127.0.0.1:PORT/v1
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::loopback::chunks::{chunk, split_chars};
pub use crate::loopback::chunks::{finish_chunk, text_chunks, tool_call_chunks, usage_chunk, DONE};
use crate::loopback::Server;
pub use crate::loopback::{Reply as ScriptedResponse, Request as RecordedRequest, SseStream, StreamEnd};
use crate::util::lock;

/// Requests kept in memory; older ones are dropped (the count keeps going).
const MAX_RECORDED: usize = 1000;

/// The responses only tests need.
impl ScriptedResponse {
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

    /// 429 with `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after_s: u64) -> ScriptedResponse {
        ScriptedResponse::error(429, "rate limited").header("Retry-After", retry_after_s.to_string())
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

/// Reasoning delta chunks (`reasoning_content`), `piece_chars` characters each.
pub fn reasoning_chunks(text: &str, piece_chars: usize) -> Vec<String> {
    split_chars(text, piece_chars)
        .into_iter()
        .map(|piece| chunk(json!({"reasoning_content": piece}), Value::Null))
        .collect()
}

/// An `{"error":{…}}` payload as some servers send it mid-stream.
pub fn error_chunk(message: &str) -> String {
    json!({"error": {"message": message, "type": "server_error"}}).to_string()
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

/// The server. Dropping it stops it and closes every connection it holds.
pub struct ScriptedServer {
    server: Server,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer").field("addr", &self.server.addr()).finish_non_exhaustive()
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
        let shared = Arc::new(Shared {
            log: Mutex::new(RequestLog { recording: true, ..RequestLog::default() }),
            arrived: Notify::new(),
            queue: Mutex::new(queue),
            responder,
            models: Mutex::new(ScriptedResponse::models(["scripted-model"])),
        });
        let handler = shared.clone();
        let server = Server::start(move |request| handler.answer_and_record(request)).await?;
        Ok(ScriptedServer { server, shared })
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    #[cfg(test)]
    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        self.server.addr()
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

    /// Stop keeping request bodies (a long test should not grow memory); the count
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

impl Shared {
    /// The answer to `request`; then the request is recorded and waiters are woken.
    fn answer_and_record(&self, request: RecordedRequest) -> ScriptedResponse {
        let response = self.answer(&request);
        {
            let mut log = lock(&self.log);
            log.total += 1;
            if log.recording {
                if log.requests.len() >= MAX_RECORDED {
                    log.requests.pop_front();
                }
                log.requests.push_back(request);
            }
        }
        self.arrived.notify_waiters();
        response
    }

    fn answer(&self, request: &RecordedRequest) -> ScriptedResponse {
        if request.is_models() {
            return lock(&self.models).clone();
        }
        if let Some(queued) = lock(&self.queue).pop_front() {
            return queued;
        }
        match &self.responder {
            Some(responder) => responder(request),
            None => ScriptedResponse::error(
                500,
                &format!("scripted server: no response queued for {} {}", request.method, request.path),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

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
        assert_eq!(r.body["messages"], serde_json::json!([{"role": "user", "content": "hi"}]));
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
}
