//! A minimal HTTP/1.1 server on 127.0.0.1 (one request per connection): every request
//! goes to a handler that returns the [`Reply`] — a plain response, a `text/event-stream`
//! written one piece per TCP write (optionally cut, reset or stalled), or no answer at all.
//! The built-in demo model (`engine::llm::demo`) serves from it; the test kit's scripted
//! model server (`testkit::scripted`, tests only) builds on it.

pub(crate) mod chunks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// One request as the server received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: String,
    /// The request target, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header names in lower case, in the order received.
    pub(crate) headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Null` when empty or not JSON (see `raw_body`).
    pub body: Value,
    pub raw_body: String,
}

impl Request {
    /// The first header with this name (case-insensitive).
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))] // the testkit's API
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// A `POST …/chat/completions`.
    pub fn is_chat(&self) -> bool {
        self.method == "POST" && self.path.trim_end_matches('/').ends_with("/chat/completions")
    }

    /// A `GET …/models`.
    pub(crate) fn is_models(&self) -> bool {
        self.method == "GET" && self.path.trim_end_matches('/').ends_with("/models")
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

/// How a streamed response ends. The demo model only completes; the other ends are the testkit's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "testkit"), allow(dead_code))]
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
    pub(crate) pieces: Vec<Vec<u8>>,
    /// Pause before every piece after the first.
    pub(crate) delay: Duration,
    pub(crate) end: StreamEnd,
}

/// What the server answers to one request. `Hang` is the testkit's (the demo model always answers).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(not(feature = "testkit"), allow(dead_code))]
pub enum Reply {
    Stream(SseStream),
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Read the request, then never answer (until the client goes away or the server drops).
    Hang,
}

impl Reply {
    /// A stream of `data:` events, one per payload (a chunk's JSON, or [`chunks::DONE`]).
    pub fn sse<I, S>(payloads: I) -> Reply
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let pieces = payloads.into_iter().map(|p| format!("data: {}\n\n", p.into()).into_bytes()).collect();
        Reply::Stream(SseStream { pieces, delay: Duration::ZERO, end: StreamEnd::Complete })
    }

    /// A plain response with this status and body (`content-type: application/json`).
    pub fn status(status: u16, body: impl Into<String>) -> Reply {
        Reply::Status { status, headers: Vec::new(), body: body.into() }
    }

    /// An OpenAI-style error: `{"error":{"message":…,"type":…}}`.
    pub fn error(status: u16, message: &str) -> Reply {
        let body = json!({"error": {"message": message, "type": "scripted_error", "code": status}});
        Reply::status(status, body.to_string())
    }

    /// `GET /v1/models` answer listing these ids.
    pub(crate) fn models<I, S>(ids: I) -> Reply
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let data: Vec<Value> =
            ids.into_iter().map(|id| json!({"id": id.into(), "object": "model", "owned_by": "scripted"})).collect();
        Reply::status(200, json!({"object": "list", "data": data}).to_string())
    }

    /// Pause between the pieces of a stream (no effect on the others).
    pub fn delay(mut self, delay: Duration) -> Reply {
        if let Reply::Stream(stream) = &mut self {
            stream.delay = delay;
        }
        self
    }
}

/// Answers one request.
pub(crate) type Handler = Arc<dyn Fn(Request) -> Reply + Send + Sync>;

/// The server. Dropping it stops it and closes every connection it holds.
pub(crate) struct Server {
    addr: SocketAddr,
    cancel: CancellationToken,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Server {
    /// Listen on an ephemeral port of 127.0.0.1 and answer every request with `handler`.
    pub(crate) async fn start<F>(handler: F) -> std::io::Result<Server>
    where
        F: Fn(Request) -> Reply + Send + Sync + 'static,
    {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let cancel = CancellationToken::new();
        tokio::spawn(accept_loop(listener, Arc::new(handler), cancel.clone()));
        Ok(Server { addr, cancel })
    }

    /// `http://127.0.0.1:PORT/v1`
    pub(crate) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    #[cfg_attr(not(feature = "testkit"), allow(dead_code))] // the testkit's
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn accept_loop(listener: TcpListener, handler: Handler, cancel: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                let handler = handler.clone();
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = serve(stream, handler) => {}
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "loopback server: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn serve(mut stream: TcpStream, handler: Handler) {
    let _ = stream.set_nodelay(true);
    let request = match read_request(&mut stream).await {
        Ok(Some(request)) => request,
        Ok(None) => return,
        Err(message) => {
            let _ = write_status(&mut stream, 400, &[], &json!({"error": {"message": message}}).to_string()).await;
            return;
        }
    };
    let reply = handler(request);
    let _ = respond(&mut stream, reply).await;
}

/// `Ok(None)` when the client closed before sending a request.
async fn read_request(stream: &mut TcpStream) -> Result<Option<Request>, String> {
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
    Ok(Some(Request { method: method.to_string(), path: path.to_string(), headers, body, raw_body }))
}

async fn respond(stream: &mut TcpStream, response: Reply) -> std::io::Result<()> {
    match response {
        Reply::Status { status, headers, body } => write_status(stream, status, &headers, &body).await,
        Reply::Hang => {
            wait_for_client_to_leave(stream).await;
            Ok(())
        }
        Reply::Stream(sse) => write_stream(stream, sse).await,
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

    async fn raw_exchange(addr: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn the_handler_sees_the_request_and_streams_use_chunked_framing() {
        let server = Server::start(|request: Request| {
            if request.is_chat() && request.header("x-test") == Some("yes") {
                Reply::sse(["{}", chunks::DONE])
            } else {
                Reply::error(404, "no")
            }
        })
        .await
        .unwrap();
        let reply = raw_exchange(
            server.addr(),
            "POST /v1/chat/completions HTTP/1.1\r\nX-Test: yes\r\nContent-Length: 2\r\n\r\n{}",
        )
        .await;
        assert!(reply.contains("text/event-stream"), "{reply}");
        assert!(reply.ends_with("a\r\ndata: {}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"), "{reply:?}");
        let reply = raw_exchange(server.addr(), "GET /v1/models HTTP/1.1\r\n\r\n").await;
        assert!(reply.starts_with("HTTP/1.1 404 "), "{reply}");
        let reply = raw_exchange(server.addr(), "nonsense\r\n\r\n").await;
        assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
    }
}
