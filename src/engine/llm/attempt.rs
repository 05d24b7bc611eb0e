//! The streaming attempt loop both clients share (OpenAI-compatible and Anthropic): send
//! the request, read the server-sent events under the idle timeout, hand each event to the
//! client's decoder, and retry with backoff while nothing has reached `on_delta`
//! ([`Retries`]). What differs per client is the request (built by the client, body
//! included) and the decoder ([`StreamDecoder`]). Cancellation is dropping the future:
//! the connection goes with it, and no retry is left waiting.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::bytes::Bytes;

use super::client::{describe, http_error, send_error, whole_seconds, ClientSettings, Retries};
use super::sse::SseParser;
use super::{Completion, LlmError, RequestSent, StreamDelta};

/// A single SSE event longer than this is refused rather than buffered without end.
const MAX_SSE_BUFFER: usize = 16 * 1024 * 1024;
/// A non-SSE body (some servers ignore `stream: true`) is kept up to this size.
const MAX_PLAIN_BODY: usize = 4 * 1024 * 1024;

/// What turns one client's stream of events into an answer. A fresh one per attempt.
pub(crate) trait StreamDecoder {
    /// One event's data; the deltas it completes.
    fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, LlmError>;
    /// The answer is whole already: stop reading (a server may keep the connection open).
    fn finished(&self) -> bool;
    /// The stream has ended: is what came a whole answer?
    fn is_complete(&self) -> bool;
    fn finish(self) -> Result<Completion, LlmError>;
    /// A body without a single event, as JSON (a server that ignored `stream: true`): the
    /// answer it holds, when this API has such a form. None: not an answer.
    fn plain(&self, _body: &Value, _on_delta: &mut dyn FnMut(StreamDelta)) -> Option<Result<Completion, LlmError>> {
        None
    }
    /// The error of a stream that ended before the answer was whole.
    fn truncated(&self) -> LlmError;
}

/// One request, as the shared loop sends it.
pub(crate) struct Exchange<'a, R, D, E> {
    pub(crate) settings: &'a ClientSettings,
    /// Names the request in the retry log line ("model", "Anthropic").
    pub(crate) what: &'static str,
    pub(crate) url: &'a str,
    /// The request with its headers and this body (called once per attempt).
    pub(crate) request: R,
    pub(crate) decoder: D,
    /// What an error may not show (the client's key), applied before the retry rule.
    pub(crate) redact: E,
    /// Fired when an attempt's body goes to the connection.
    pub(crate) sent: &'a RequestSent,
}

impl<R, D, Dec, E> Exchange<'_, R, D, E>
where
    R: Fn(reqwest::Body) -> reqwest::RequestBuilder,
    D: Fn() -> Dec,
    Dec: StreamDecoder,
    E: Fn(LlmError) -> LlmError,
{
    /// Attempts until one answers, the error may not pass, output has been shown, or the
    /// retries are spent.
    pub(crate) async fn run(
        &self,
        body: &Bytes,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<Completion, LlmError> {
        let mut retries = Retries::new(self.settings, self.what);
        loop {
            let mut delivered = false;
            let error = match self.attempt(body, on_delta, &mut delivered).await {
                Ok(completion) => return Ok(completion),
                Err(error) => (self.redact)(error),
            };
            if !retries.wait(&error, delivered).await {
                return Err(error);
            }
        }
    }

    /// One attempt. `delivered` turns true as soon as anything reaches `on_delta`.
    async fn attempt(
        &self,
        body: &Bytes,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
        delivered: &mut bool,
    ) -> Result<Completion, LlmError> {
        let idle = self.settings.idle_timeout;
        let request = (self.request)(signalling_body(body, self.sent))
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        tracing::trace!(target: "enter_request", "attempt: sending");
        let response = match tokio::time::timeout(idle, request.send()).await {
            Err(_) => return Err(LlmError::IdleTimeout(whole_seconds(idle))),
            Ok(Err(e)) => return Err(send_error(self.url, &e)),
            Ok(Ok(response)) => response,
        };
        tracing::trace!(target: "enter_request", "attempt: response headers");
        if !response.status().is_success() {
            return Err(http_error(response, idle).await);
        }
        let mut stream = response.bytes_stream();
        let mut parser = SseParser::new();
        let mut decoder = (self.decoder)();
        let mut seen_event = false;
        let mut plain = Vec::new();
        let mut hand_on = |events: Vec<String>, decoder: &mut Dec| -> Result<(), LlmError> {
            for data in events {
                for delta in decoder.push(&data)? {
                    *delivered = true;
                    on_delta(delta);
                }
            }
            Ok(())
        };
        loop {
            let bytes = match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => return Err(LlmError::IdleTimeout(whole_seconds(idle))),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(LlmError::Stream(describe(&e))),
                Ok(Some(Ok(bytes))) => bytes,
            };
            if !seen_event && plain.len() < MAX_PLAIN_BODY {
                plain.extend_from_slice(&bytes);
            }
            let events = parser.push(&bytes);
            seen_event |= !events.is_empty();
            hand_on(events, &mut decoder)?;
            if decoder.finished() {
                return decoder.finish();
            }
            if parser.buffered_len() > MAX_SSE_BUFFER {
                return Err(LlmError::Protocol("an event in the stream is larger than 16 MiB".into()));
            }
        }
        let events = parser.finish();
        seen_event |= !events.is_empty();
        hand_on(events, &mut decoder)?;
        if decoder.is_complete() {
            return decoder.finish();
        }
        if !seen_event {
            if let Ok(value) = serde_json::from_slice::<Value>(&plain) {
                let answer = decoder.plain(&value, &mut |d| {
                    *delivered = true;
                    on_delta(d)
                });
                if let Some(answer) = answer {
                    return answer;
                }
            }
        }
        Err(decoder.truncated())
    }
}

/// The body of an attempt: plain bytes, or, while someone waits to hear that the request
/// is on the wire, the same bytes in a body that says so when the connection takes them.
fn signalling_body(body: &Bytes, sent: &RequestSent) -> reqwest::Body {
    if sent.is_armed() {
        reqwest::Body::wrap(SignallingBody { data: Some(body.clone()), sent: sent.clone() })
    } else {
        reqwest::Body::from(body.clone())
    }
}

/// One chunk of known length (so `Content-Length` is sent, as for plain bytes). hyper
/// writes the chunk it polls out of a body to the socket in the same step, so handing it
/// over is when the request goes out. A body dropped unpolled (no connection) fires nothing.
struct SignallingBody {
    data: Option<Bytes>,
    sent: RequestSent,
}

impl http_body::Body for SignallingBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let frame = self.data.take().map(|data| Ok(http_body::Frame::data(data)));
        if frame.is_some() {
            tracing::trace!(target: "enter_request", "attempt: body on the wire");
            self.sent.fire();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::testkit::scripted::{ScriptedResponse, ScriptedServer};

    /// Each event's data is one text delta; `end` finishes the answer. Counts what it saw,
    /// so a test can tell that every attempt starts with a fresh decoder.
    struct Lines {
        text: String,
        done: bool,
    }

    impl StreamDecoder for Lines {
        fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, LlmError> {
            if data == "end" {
                self.done = true;
                return Ok(Vec::new());
            }
            self.text.push_str(data);
            Ok(vec![StreamDelta::Content(data.to_string())])
        }
        fn finished(&self) -> bool {
            self.done
        }
        fn is_complete(&self) -> bool {
            self.done
        }
        fn finish(self) -> Result<Completion, LlmError> {
            Ok(Completion { content: self.text, ..Default::default() })
        }
        fn truncated(&self) -> LlmError {
            LlmError::Stream("cut short".into())
        }
    }

    fn sse(events: &[&str]) -> ScriptedResponse {
        let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        ScriptedResponse::sse_raw(vec![body.into_bytes()])
    }

    async fn run(server: &ScriptedServer, retries: u32) -> (Vec<StreamDelta>, Result<Completion, LlmError>) {
        run_with(&server.base_url(), retries, &RequestSent::default(), b"{}").await
    }

    async fn run_with(
        base_url: &str,
        retries: u32,
        sent: &RequestSent,
        body: &'static [u8],
    ) -> (Vec<StreamDelta>, Result<Completion, LlmError>) {
        let settings = ClientSettings::new(base_url)
            .max_retries(retries)
            .timeouts(Duration::from_secs(10), Duration::from_secs(10))
            .backoff(Duration::from_millis(10), Duration::from_millis(50));
        let http = super::super::client::http_client(Duration::from_secs(10)).unwrap();
        let url = format!("{base_url}/chat/completions");
        let exchange = Exchange {
            settings: &settings,
            what: "test",
            url: &url,
            request: |body| http.post(&url).body(body),
            sent,
            decoder: || Lines { text: String::new(), done: false },
            redact: |e: LlmError| match e {
                LlmError::Http { status, body, retry_after_s } => {
                    LlmError::Http { status, body: body.replace("secret", "[redacted]"), retry_after_s }
                }
                other => other,
            },
        };
        let mut deltas = Vec::new();
        let result = exchange.run(&Bytes::from_static(body), &mut |d| deltas.push(d)).await;
        (deltas, result)
    }

    #[tokio::test]
    async fn the_shared_loop_retries_only_before_output_with_a_fresh_decoder_each_time() {
        // A 503, a stream cut before any event, then an answer: three attempts, one answer,
        // nothing of the failed attempts in it.
        let server = ScriptedServer::start([
            ScriptedResponse::error(503, "busy"),
            sse(&["lost"]).close_after(0),
            sse(&["a", "b", "end"]),
        ])
        .await
        .unwrap();
        let (deltas, result) = run(&server, 3).await;
        assert_eq!(result.unwrap().content, "ab");
        assert_eq!(deltas, vec![StreamDelta::Content("a".into()), StreamDelta::Content("b".into())]);
        assert_eq!(server.request_count(), 3);

        // Output shown, then the stream ends early: an error at once, no second attempt.
        let server = ScriptedServer::start([sse(&["partial"]), sse(&["never", "end"])]).await.unwrap();
        let (deltas, result) = run(&server, 3).await;
        assert_eq!(result, Err(LlmError::Stream("cut short".into())));
        assert_eq!(deltas, vec![StreamDelta::Content("partial".into())]);
        assert_eq!(server.request_count(), 1);

        // Retries spent: the last error, redacted, after 1 + 2 attempts.
        let server = ScriptedServer::with_responder(|_| ScriptedResponse::error(500, "secret down")).await.unwrap();
        let (_, result) = run(&server, 2).await;
        assert_eq!(result, Err(LlmError::Http { status: 500, body: "[redacted] down".into(), retry_after_s: None }));
        assert_eq!(server.request_count(), 3);

        // A client error is never retried.
        let server = ScriptedServer::start([ScriptedResponse::error(400, "bad request")]).await.unwrap();
        let (_, result) = run(&server, 3).await;
        assert!(matches!(result, Err(LlmError::Http { status: 400, .. })), "{result:?}");
        assert_eq!(server.request_count(), 1);
    }

    #[tokio::test]
    async fn the_sent_signal_fires_once_the_body_is_on_the_wire_and_not_when_nothing_listens() {
        use tokio::sync::oneshot::error::TryRecvError;
        // A 503, then an answer: the first attempt's body fires the signal (once); both
        // requests go with their length, not chunked, and the whole body.
        let server = ScriptedServer::start([ScriptedResponse::error(503, "busy"), sse(&["a", "end"])]).await.unwrap();
        let (sent, mut heard) = RequestSent::new();
        let (_, result) = run_with(&server.base_url(), 3, &sent, br#"{"hello":1}"#).await;
        assert_eq!(result.unwrap().content, "a");
        assert_eq!(heard.try_recv(), Ok(()));
        assert!(!sent.is_armed(), "spent");
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        for r in &requests {
            assert_eq!(r.header("content-length"), Some("11"));
            assert_eq!(r.header("transfer-encoding"), None);
            assert_eq!(r.raw_body, r#"{"hello":1}"#);
        }

        // Nothing listens: no body goes out and nothing fires; closing it is what its
        // listener hears then.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (sent, mut heard) = RequestSent::new();
        let (_, result) = run_with(&format!("http://127.0.0.1:{port}/v1"), 0, &sent, b"{}").await;
        assert!(matches!(result, Err(LlmError::Refused { .. })), "{result:?}");
        assert_eq!(heard.try_recv(), Err(TryRecvError::Empty));
        sent.close();
        assert_eq!(heard.try_recv(), Err(TryRecvError::Closed));
    }
}
