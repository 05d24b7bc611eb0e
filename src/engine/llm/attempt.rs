//! The streaming attempt loop both clients share (OpenAI-compatible and Anthropic): send
//! the request, read the server-sent events under the idle timeout, hand each event to the
//! client's decoder, and retry with backoff while nothing has reached `on_delta`
//! ([`Retries`]). What differs per client is the request (built by the client, body
//! included) and the decoder ([`StreamDecoder`]). Cancellation is dropping the future:
//! the connection goes with it, and no retry is left waiting.

use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::bytes::Bytes;

use super::client::{describe, http_error, send_error, whole_seconds, ClientSettings, Retries};
use super::sse::SseParser;
use super::{Completion, LlmError, StreamDelta};

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
}

impl<R, D, Dec, E> Exchange<'_, R, D, E>
where
    R: Fn(Bytes) -> reqwest::RequestBuilder,
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
        let request = (self.request)(body.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        let response = match tokio::time::timeout(idle, request.send()).await {
            Err(_) => return Err(LlmError::IdleTimeout(whole_seconds(idle))),
            Ok(Err(e)) => return Err(send_error(self.url, &e)),
            Ok(Ok(response)) => response,
        };
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
        let settings = ClientSettings::new(server.base_url())
            .max_retries(retries)
            .timeouts(Duration::from_secs(10), Duration::from_secs(10))
            .backoff(Duration::from_millis(10), Duration::from_millis(50));
        let http = super::super::client::http_client(Duration::from_secs(10)).unwrap();
        let url = format!("{}/chat/completions", server.base_url());
        let exchange = Exchange {
            settings: &settings,
            what: "test",
            url: &url,
            request: |body| http.post(&url).body(body),
            decoder: || Lines { text: String::new(), done: false },
            redact: |e: LlmError| match e {
                LlmError::Http { status, body, retry_after_s } => {
                    LlmError::Http { status, body: body.replace("secret", "[redacted]"), retry_after_s }
                }
                other => other,
            },
        };
        let mut deltas = Vec::new();
        let result = exchange.run(&Bytes::from_static(b"{}"), &mut |d| deltas.push(d)).await;
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
}
