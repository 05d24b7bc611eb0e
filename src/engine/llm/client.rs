//! The OpenAI-compatible streaming client (`POST {base}/chat/completions`, `stream: true`).
//!
//! A request is retried with backoff (connect errors, 429 honouring `Retry-After`, 5xx, a
//! broken or silent stream) only while nothing has been handed to `on_delta`; after the
//! first delta a failure is returned, and the caller keeps what it already showed.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::Value;
use tokio_util::bytes::Bytes;

use super::attempt::{Exchange, StreamDecoder};
use super::sse::{clip, error_message, ChunkAccumulator};
use super::{ChatMessage, ChatRequest, Completion, LlmError, Provider, StreamDelta, ToolCall};
use crate::config::AgentConfig;

/// How much of an error body is read and kept.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How to reach a server and how patiently.
#[derive(Clone)]
pub struct ClientSettings {
    /// Ends in `/v1` (no trailing slash needed).
    pub(crate) base_url: String,
    /// Sent as `Authorization: Bearer …`; `None` sends no Authorization header at all.
    pub(crate) api_key: Option<String>,
    /// Extra attempts after the first (`agent.api_max_retries`).
    pub(crate) max_retries: u32,
    pub(crate) connect_timeout: Duration,
    /// Longest silence while waiting for response headers or the next body bytes.
    pub(crate) idle_timeout: Duration,
    /// The first backoff; it doubles on each retry.
    pub(crate) backoff_initial: Duration,
    /// Cap on any single wait, including a server's `Retry-After`.
    pub(crate) backoff_max: Duration,
}

impl std::fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSettings")
            .field("base_url", &crate::secrets::redact(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("max_retries", &self.max_retries)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("backoff_initial", &self.backoff_initial)
            .field("backoff_max", &self.backoff_max)
            .finish()
    }
}

impl ClientSettings {
    /// The documented defaults: 3 retries, connect 10 s, idle read 120 s, backoff 1 s … 30 s.
    pub fn new(base_url: impl Into<String>) -> ClientSettings {
        ClientSettings {
            base_url: base_url.into(),
            api_key: None,
            max_retries: 3,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
        }
    }

    /// Retries and timeouts from `[agent]`.
    pub(crate) fn from_agent(
        base_url: impl Into<String>,
        api_key: Option<String>,
        agent: &AgentConfig,
    ) -> ClientSettings {
        ClientSettings {
            api_key,
            max_retries: agent.api_max_retries,
            connect_timeout: Duration::from_secs(agent.connect_timeout_s.max(1)),
            idle_timeout: Duration::from_secs(agent.idle_read_timeout_s.max(1)),
            ..ClientSettings::new(base_url)
        }
    }

    pub fn api_key(mut self, key: impl Into<String>) -> ClientSettings {
        self.api_key = Some(key.into());
        self
    }

    pub fn max_retries(mut self, n: u32) -> ClientSettings {
        self.max_retries = n;
        self
    }

    pub fn timeouts(mut self, connect: Duration, idle: Duration) -> ClientSettings {
        self.connect_timeout = connect;
        self.idle_timeout = idle;
        self
    }

    pub fn backoff(mut self, initial: Duration, max: Duration) -> ClientSettings {
        self.backoff_initial = initial;
        self.backoff_max = max;
        self
    }
}

/// Builds the HTTP client every provider uses (rustls with the ring provider), on the
/// process's one TLS setup (`shared_tls`).
pub(crate) fn http_client(connect_timeout: Duration) -> anyhow::Result<reqwest::Client> {
    // Installing twice is harmless; the first provider stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .tls_backend_preconfigured(shared_tls()?)
        .connect_timeout(connect_timeout)
        .user_agent(concat!("talaria/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| anyhow::anyhow!("cannot set up the HTTP client: {}", describe(&e)))
}

/// The TLS configuration every client of the process shares, made once. Left to itself,
/// reqwest 0.13 builds a platform verifier per client, and each reads and parses the
/// system's CA bundle (milliseconds, several times on the way to the first frame); here the
/// bundle is read once, at the first TLS handshake, so a start that talks only to a
/// loopback server (the demo, Ollama, a test's server) never reads it.
fn shared_tls() -> anyhow::Result<rustls::ClientConfig> {
    static TLS: std::sync::OnceLock<Result<rustls::ClientConfig, String>> = std::sync::OnceLock::new();
    let made = TLS.get_or_init(|| {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier = std::sync::Arc::new(PlatformRoots { provider: provider.clone(), verifier: Default::default() });
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(rustls::ALL_VERSIONS)
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        // What reqwest offers itself with HTTP/2 enabled.
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(tls)
    });
    made.clone().map_err(|e| anyhow::anyhow!("cannot set up TLS: {e}"))
}

/// The verifier reqwest would use (rustls-platform-verifier: the system's roots and
/// WebPKI), made at the first certificate it is asked about instead of with the client.
#[derive(Debug)]
struct PlatformRoots {
    provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
    verifier: std::sync::OnceLock<Result<rustls_platform_verifier::Verifier, rustls::Error>>,
}

impl PlatformRoots {
    fn verifier(&self) -> Result<&rustls_platform_verifier::Verifier, rustls::Error> {
        let made = self.verifier.get_or_init(|| rustls_platform_verifier::Verifier::new(self.provider.clone()));
        made.as_ref().map_err(Clone::clone)
    }
}

impl rustls::client::danger::ServerCertVerifier for PlatformRoots {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        self.verifier()?.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.verifier()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.verifier()?.verify_tls13_signature(message, cert, dss)
    }

    /// Asked when the ClientHello is written: the provider knows them without the roots.
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A [`Provider`] for any OpenAI-compatible Chat Completions server.
pub struct OpenAiClient {
    http: reqwest::Client,
    settings: ClientSettings,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl OpenAiClient {
    pub fn new(settings: ClientSettings) -> anyhow::Result<OpenAiClient> {
        let http = http_client(settings.connect_timeout)?;
        Ok(OpenAiClient { http, settings })
    }

    pub(crate) fn settings(&self) -> &ClientSettings {
        &self.settings
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.settings.base_url.trim_end_matches('/'))
    }

    fn authorise(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.settings.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }
}

#[async_trait]
impl Provider for OpenAiClient {
    async fn stream_chat(
        &self,
        request: &ChatRequest<'_>,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<Completion, LlmError> {
        let url = self.url("chat/completions");
        let body = request_body(request);
        let exchange = Exchange {
            settings: &self.settings,
            what: "model",
            url: &url,
            request: |body| self.authorise(self.http.post(&url).body(body)),
            decoder: ChunkAccumulator::new,
            redact: |error| error,
            sent: &request.sent,
        };
        exchange.run(&body, on_delta).await
    }

    async fn list_models(&self) -> Result<Vec<String>, LlmError> {
        fetch_models(&self.http, &self.settings.base_url, self.settings.api_key.as_deref(), self.settings.idle_timeout)
            .await
    }
}

impl StreamDecoder for ChunkAccumulator {
    fn push(&mut self, data: &str) -> Result<Vec<StreamDelta>, LlmError> {
        ChunkAccumulator::push(self, data)
    }
    /// `[DONE]` came (the connection may stay open).
    fn finished(&self) -> bool {
        self.is_done()
    }
    fn is_complete(&self) -> bool {
        ChunkAccumulator::is_complete(self)
    }
    fn finish(self) -> Result<Completion, LlmError> {
        self.finish_complete()
    }
    /// Some servers ignore `stream: true` and answer with one JSON completion.
    fn plain(&self, body: &Value, on_delta: &mut dyn FnMut(StreamDelta)) -> Option<Result<Completion, LlmError>> {
        Some(plain_completion(body, on_delta))
    }
    fn truncated(&self) -> LlmError {
        LlmError::Stream("the server closed the stream before the answer was complete".into())
    }
}

/// The retry rule both clients follow: a request that failed before any output reached
/// the caller is tried again, up to `max_retries` times, for errors that may pass
/// (`LlmError::is_retryable`), after a backoff.
pub(crate) struct Retries<'a> {
    settings: &'a ClientSettings,
    /// Names the request in the log line ("model", "Anthropic").
    what: &'static str,
    done: u32,
}

impl<'a> Retries<'a> {
    pub(crate) fn new(settings: &'a ClientSettings, what: &'static str) -> Retries<'a> {
        Retries { settings, what, done: 0 }
    }

    /// After a failed attempt: false to give up with `error`; true once the backoff has
    /// been waited and the next attempt may start.
    pub(crate) async fn wait(&mut self, error: &LlmError, delivered: bool) -> bool {
        if delivered || !error.is_retryable() || self.done >= self.settings.max_retries {
            return false;
        }
        let wait = self.backoff(error);
        self.done += 1;
        tracing::warn!(%error, attempt = self.done, max = self.settings.max_retries,
            wait_ms = wait.as_millis() as u64, "{} request failed before any output; retrying", self.what);
        tokio::time::sleep(wait).await;
        true
    }

    /// How long to wait before the next retry: the server's `Retry-After` when it gave
    /// one, else doubling from `backoff_initial`; never more than `backoff_max`.
    fn backoff(&self, error: &LlmError) -> Duration {
        let max = self.settings.backoff_max;
        if let LlmError::Http { retry_after_s: Some(s), .. } = error {
            if s.is_finite() && *s >= 0.0 {
                return Duration::from_secs_f64(*s).min(max);
            }
        }
        self.settings.backoff_initial.saturating_mul(2u32.saturating_pow(self.done)).min(max)
    }
}

/// `GET {base_url}/models` → model ids, the whole exchange bounded by `timeout`.
pub(crate) async fn fetch_models(
    http: &reqwest::Client,
    base_url: &str,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<Vec<String>, LlmError> {
    let url = format!("{}/models", base_url.trim_end_matches('/'));
    let mut request = http.get(&url);
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let exchange = async {
        let response = request.send().await.map_err(|e| send_error(&url, &e))?;
        if !response.status().is_success() {
            return Err(http_error(response, timeout).await);
        }
        let bytes = response.bytes().await.map_err(|e| LlmError::Stream(describe(&e)))?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            LlmError::Protocol(format!(
                "{url} did not answer with JSON ({e}): {}",
                clip(&String::from_utf8_lossy(&bytes), 200)
            ))
        })?;
        let data = value.get("data").and_then(Value::as_array).ok_or_else(|| {
            LlmError::Protocol(format!("{url} answered without a \"data\" list: {}", clip(&value.to_string(), 200)))
        })?;
        Ok(data.iter().filter_map(|m| m.get("id").and_then(Value::as_str)).map(str::to_string).collect())
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(LlmError::IdleTimeout(whole_seconds(timeout))),
    }
}

/// The JSON body sent for `request`, serialised straight from the (borrowed) messages: no
/// JSON tree or copy of the conversation is built on the way, only the bytes sent.
pub(crate) fn request_body(request: &ChatRequest<'_>) -> Bytes {
    #[derive(Serialize)]
    struct StreamOptions {
        include_usage: bool,
    }
    #[derive(Serialize)]
    struct Body<'r, 'a> {
        model: &'r str,
        messages: &'r [Cow<'a, ChatMessage>],
        stream: bool,
        stream_options: StreamOptions,
        #[serde(skip_serializing_if = "<[Value]>::is_empty")]
        tools: &'r [Value],
        #[serde(skip_serializing_if = "Option::is_none")]
        temperature: Option<f64>,
    }
    let body = Body {
        model: &request.model,
        messages: &request.messages,
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        tools: &request.tools,
        // Through text, so 0.2f32 is sent as 0.2 rather than 0.20000000298023224.
        temperature: request.temperature.and_then(|t| t.to_string().parse::<f64>().ok()),
    };
    // Serialising plain structs and strings cannot fail.
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// A server that ignored `stream: true` and sent one JSON object.
fn plain_completion(value: &Value, on_delta: &mut dyn FnMut(StreamDelta)) -> Result<Completion, LlmError> {
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        return Err(LlmError::Server(error_message(error)));
    }
    let choice = value.pointer("/choices/0").ok_or_else(|| {
        LlmError::Protocol(format!("expected an event stream, got: {}", clip(&value.to_string(), 200)))
    })?;
    let message = choice.get("message").cloned().unwrap_or(Value::Null);
    let text = |key: &str| message.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    let reasoning =
        if message.get("reasoning_content").is_some() { text("reasoning_content") } else { text("reasoning") };
    let tool_calls: Vec<ToolCall> =
        message.get("tool_calls").and_then(|t| serde_json::from_value(t.clone()).ok()).unwrap_or_default();
    let completion = Completion {
        content: text("content"),
        reasoning,
        finish_reason: choice.get("finish_reason").and_then(Value::as_str).map(str::to_string),
        usage: value.get("usage").and_then(|u| serde_json::from_value(u.clone()).ok()),
        tool_calls,
        thinking: Vec::new(),
    };
    if !completion.reasoning.is_empty() {
        on_delta(StreamDelta::Reasoning(completion.reasoning.clone()));
    }
    if !completion.content.is_empty() {
        on_delta(StreamDelta::Content(completion.content.clone()));
    }
    for (index, call) in completion.tool_calls.iter().enumerate() {
        on_delta(StreamDelta::ToolCallStarted { index, name: call.function.name.clone() });
    }
    Ok(completion)
}

pub(crate) fn send_error(url: &str, error: &reqwest::Error) -> LlmError {
    if error.is_connect() && refused(error) {
        return LlmError::Refused { server: server_of(url) };
    }
    // Redacted here, at the source: these texts are shown and logged (`user:pass@` in a
    // base URL, a key echoed back).
    let message = crate::secrets::redact(&describe(error));
    if error.is_connect() || error.is_timeout() {
        LlmError::Connect { url: crate::secrets::redact(url), message }
    } else {
        LlmError::Stream(message)
    }
}

/// A non-success status: the server's own error text, and `Retry-After` in seconds.
pub(crate) async fn http_error(response: reqwest::Response, timeout: Duration) -> LlmError {
    let status = response.status().as_u16();
    let retry_after_s = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0);
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    let read = async {
        while let Some(Ok(bytes)) = stream.next().await {
            body.extend_from_slice(&bytes);
            if body.len() >= MAX_ERROR_BODY {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(timeout, read).await;
    let text = String::from_utf8_lossy(&body);
    let message = match serde_json::from_str::<Value>(&text) {
        Ok(value) => match value.get("error") {
            Some(error) => error_message(error),
            None => value.to_string(),
        },
        Err(_) => text.trim().to_string(),
    };
    let body = if message.is_empty() {
        reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("no details")
            .to_string()
    } else {
        clip(&crate::secrets::redact(&message), 500)
    };
    LlmError::Http { status, body, retry_after_s }
}

/// An error and its causes on one line, without repeats.
/// The connection was refused (an `io::Error` somewhere down the chain says so).
fn refused(error: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused) {
            return true;
        }
        current = e.source();
    }
    false
}

/// `scheme://host:port` of a URL, for a short message.
fn server_of(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port_or_known_default()) {
            (Some(host), Some(port)) => format!("{}://{host}:{port}", u.scheme()),
            _ => crate::secrets::redact(url),
        },
        Err(_) => crate::secrets::redact(url),
    }
}

pub(crate) fn describe(error: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

pub(crate) fn whole_seconds(d: Duration) -> u64 {
    d.as_secs_f64().ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn body_omits_empty_tools_and_missing_temperature() {
        let request = ChatRequest::owned("m", vec![ChatMessage::user("hi")]);
        let json = |body: Bytes| serde_json::from_slice::<Value>(&body).expect("JSON");
        assert_eq!(
            json(request_body(&request)),
            json!({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,
                   "stream_options":{"include_usage":true}})
        );
        let request = ChatRequest { tools: vec![json!({"type":"function"})], temperature: Some(0.2), ..request };
        let body = json(request_body(&request));
        assert_eq!(body["tools"], json!([{"type":"function"}]));
        assert_eq!(body["temperature"], json!(0.2));
    }

    #[test]
    fn backoff_doubles_and_honours_retry_after_within_the_cap() {
        let settings =
            ClientSettings::new("http://127.0.0.1:1/v1").backoff(Duration::from_secs(1), Duration::from_secs(30));
        let after = |done: u32, error: &LlmError| Retries { settings: &settings, what: "test", done }.backoff(error);
        let stream = LlmError::Stream("x".into());
        assert_eq!(after(0, &stream), Duration::from_secs(1));
        assert_eq!(after(2, &stream), Duration::from_secs(4));
        assert_eq!(after(10, &stream), Duration::from_secs(30));
        let limited = |s| LlmError::Http { status: 429, body: String::new(), retry_after_s: Some(s) };
        assert_eq!(after(0, &limited(7.0)), Duration::from_secs(7));
        assert_eq!(after(0, &limited(3600.0)), Duration::from_secs(30));
    }

    #[test]
    fn clients_share_one_tls_setup_whose_roots_are_read_at_the_first_certificate() {
        use rustls::client::danger::ServerCertVerifier;
        http_client(Duration::from_secs(1)).unwrap();
        http_client(Duration::from_secs(2)).unwrap();
        let (a, b) = (shared_tls().unwrap(), shared_tls().unwrap());
        assert!(std::sync::Arc::ptr_eq(a.crypto_provider(), b.crypto_provider()), "one setup, not one per client");
        assert_eq!(a.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);

        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let roots = PlatformRoots { provider, verifier: Default::default() };
        assert!(!roots.supported_verify_schemes().is_empty());
        assert!(roots.verifier.get().is_none(), "writing a ClientHello reads no roots");
        // A certificate that is not one is refused: the lazy verifier still verifies.
        let name = rustls::pki_types::ServerName::try_from("example.com").unwrap();
        let bogus = rustls::pki_types::CertificateDer::from(vec![0u8; 16]);
        let verdict = roots.verify_server_cert(&bogus, &[], &name, &[], rustls::pki_types::UnixTime::now());
        assert!(verdict.is_err(), "{verdict:?}");
        assert!(roots.verifier.get().is_some(), "the roots are read when a certificate is checked");
    }

    #[test]
    fn settings_debug_hides_the_key() {
        let settings = ClientSettings::new("http://x/v1").api_key("sk-secret");
        assert!(!format!("{settings:?}").contains("sk-secret"));
    }

    #[test]
    fn a_plain_json_answer_is_accepted() {
        let mut deltas = Vec::new();
        let value = json!({"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],
                           "usage":{"prompt_tokens":1,"completion_tokens":2}});
        let done = plain_completion(&value, &mut |d| deltas.push(d)).unwrap();
        assert_eq!(done.content, "hi");
        assert_eq!(deltas, vec![StreamDelta::Content("hi".into())]);
        let err = plain_completion(&json!({"error":{"message":"bad model"}}), &mut |_| {}).unwrap_err();
        assert_eq!(err, LlmError::Server("bad model".into()));
    }
}
