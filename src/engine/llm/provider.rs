//! Which model to talk to (DESIGN §8).
//!
//! An explicit base URL (`--base-url` beats `[model] base_url`) is used with the key named by
//! `model.api_key_env` only; else `OPENAI_API_KEY`, else `OPENROUTER_API_KEY`, else
//! `ANTHROPIC_API_KEY` (DESIGN §8a); else a local OpenAI-compatible server answering
//! `GET /v1/models` on loopback within 300 ms (Ollama, llama.cpp); else the built-in demo
//! model. `model.provider` (`--provider`) picks the wire protocol: `openai`, `anthropic`, or
//! `auto` (from the key found). A key is only ever sent where it belongs.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

use super::anthropic::{AnthropicClient, MessagesOptions, ANTHROPIC_BASE_URL, ANTHROPIC_DEFAULT_MODEL};
use super::client::{fetch_models, http_client, ClientSettings, OpenAiClient};
use super::demo::{start_demo, DEMO_MODEL};
use super::{LlmError, Provider};
use crate::config::{AgentConfig, ModelConfig, ModelProvider};
use crate::loopback::Server;

/// Environment variables holding API keys: never logged, never passed to child processes.
pub(crate) const SECRET_ENV_VARS: &[&str] = &["OPENAI_API_KEY", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY"];

pub(crate) const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub(crate) const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api/v1";
/// Used with `OPENAI_API_KEY` when `[model] name` is empty.
pub(crate) const OPENAI_DEFAULT_MODEL: &str = "gpt-4.1-mini";
/// Used with `OPENROUTER_API_KEY` when `[model] name` is empty.
pub(crate) const OPENROUTER_DEFAULT_MODEL: &str = "openai/gpt-4.1-mini";

/// The secret variables plus the one `model.api_key_env` names (to strip from a child's env).
pub fn secret_env_vars(model: &ModelConfig) -> Vec<String> {
    let mut names: Vec<String> = SECRET_ENV_VARS.iter().map(|s| s.to_string()).collect();
    let named = model.api_key_env.trim();
    if !named.is_empty() && !names.iter().any(|n| n == named) {
        names.push(named.to_string());
    }
    names
}

/// The model Talaria will talk to.
pub struct ResolvedProvider {
    pub provider: Arc<dyn Provider>,
    pub model: String,
    pub(crate) base_url: String,
    /// Short human name: `OpenAI`, `OpenRouter`, `Ollama`, `llama.cpp`, `demo`, or host:port.
    pub label: String,
    pub demo: bool,
    /// Keeps the demo model's server alive as long as this value.
    pub(crate) _demo_server: Option<Server>,
}

impl std::fmt::Debug for ResolvedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedProvider")
            .field("model", &self.model)
            .field("base_url", &crate::secrets::redact(&self.base_url))
            .field("label", &self.label)
            .field("demo", &self.demo)
            .finish_non_exhaustive()
    }
}

/// A loopback server to look for when nothing else is configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalServer {
    pub(crate) label: String,
    pub(crate) base_url: String,
}

/// Where and how patiently to look for local servers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LocalProbe {
    /// Looked at together; the first in this order that answers wins.
    pub(crate) servers: Vec<LocalServer>,
    pub(crate) timeout: Duration,
}

impl Default for LocalProbe {
    /// Ollama on :11434 and llama.cpp on :8080, 300 ms.
    fn default() -> LocalProbe {
        LocalProbe {
            servers: vec![
                LocalServer { label: "Ollama".into(), base_url: "http://127.0.0.1:11434/v1".into() },
                LocalServer { label: "llama.cpp".into(), base_url: "http://127.0.0.1:8080/v1".into() },
            ],
            timeout: Duration::from_millis(300),
        }
    }
}

/// Which wire protocol a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireKind {
    /// OpenAI-compatible Chat Completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

/// A remote endpoint picked from the configuration and environment alone.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) wire: WireKind,
    pub(crate) base_url: String,
    pub(crate) api_key: Option<String>,
    /// `None`: ask the server (`GET /models`) for its first model.
    pub(crate) model: Option<String>,
    pub(crate) label: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("wire", &self.wire)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("label", &self.label)
            .finish()
    }
}

/// The decision that needs no network: an endpoint, or `None` for "look on loopback, then
/// fall back to the demo".
pub(crate) fn choose_endpoint(
    model: &ModelConfig,
    cli_model: Option<&str>,
    cli_base_url: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<Endpoint>> {
    let non_empty = |s: Option<&str>| s.map(str::trim).filter(|s| !s.is_empty()).map(str::to_string);
    let name = non_empty(cli_model).or_else(|| non_empty(Some(&model.name)));
    let provider = model.provider;
    let key_env = model.api_key_env.trim();
    let named_key = || -> anyhow::Result<Option<String>> {
        if key_env.is_empty() {
            return Ok(None);
        }
        match env(key_env).filter(|v| !v.trim().is_empty()) {
            Some(key) => Ok(Some(key.trim().to_string())),
            None => bail!("[model] api_key_env names {key_env}, but {key_env} is not set in the environment"),
        }
    };

    let explicit = non_empty(cli_base_url).or_else(|| non_empty(Some(&model.base_url)));
    if let Some(base_url) = explicit {
        let not_a_url = || format!("the model base URL {base_url:?} is not a URL (expected e.g. http://host:port/v1)");
        let url = reqwest::Url::parse(&base_url).with_context(not_a_url)?;
        if !matches!(url.scheme(), "http" | "https") {
            bail!(not_a_url());
        }
        let label = match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_string(),
            (None, _) => base_url.clone(),
        };
        let base_url = base_url.trim_end_matches('/').to_string();
        let wire = if provider == ModelProvider::Anthropic { WireKind::Anthropic } else { WireKind::OpenAi };
        return Ok(Some(Endpoint { wire, base_url, api_key: named_key()?, model: name, label }));
    }

    let anthropic = |key: String| Endpoint {
        wire: WireKind::Anthropic,
        base_url: ANTHROPIC_BASE_URL.into(),
        api_key: Some(key),
        model: Some(name.clone().unwrap_or_else(|| ANTHROPIC_DEFAULT_MODEL.into())),
        label: "Anthropic".into(),
    };
    let openai = |key: String| Endpoint {
        wire: WireKind::OpenAi,
        base_url: OPENAI_BASE_URL.into(),
        api_key: Some(key),
        model: Some(name.clone().unwrap_or_else(|| OPENAI_DEFAULT_MODEL.into())),
        label: "OpenAI".into(),
    };
    let openrouter = |key: String| Endpoint {
        wire: WireKind::OpenAi,
        base_url: OPENROUTER_BASE_URL.into(),
        api_key: Some(key),
        model: Some(name.clone().unwrap_or_else(|| OPENROUTER_DEFAULT_MODEL.into())),
        label: "OpenRouter".into(),
    };
    let from_env = |var: &str| env(var).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    if provider == ModelProvider::Anthropic {
        return match named_key()?.or_else(|| from_env("ANTHROPIC_API_KEY")) {
            Some(key) => Ok(Some(anthropic(key))),
            None => bail!(
                "the model provider is \"anthropic\" but ANTHROPIC_API_KEY is not set \
                 (or set [model] api_key_env to the variable holding the key)"
            ),
        };
    }
    if let Some(key) = named_key()? {
        // A key named without a base URL: the provider its name says, else OpenAI.
        let upper = key_env.to_ascii_uppercase();
        let endpoint = if upper.contains("OPENROUTER") {
            openrouter(key)
        } else if upper.contains("ANTHROPIC") {
            if provider == ModelProvider::Openai {
                bail!(
                    "[model] api_key_env names {key_env}, an Anthropic key, but the provider is \"openai\": \
                     set provider = \"anthropic\" (or give an OpenAI-compatible base_url)"
                );
            }
            anthropic(key)
        } else {
            openai(key)
        };
        return Ok(Some(endpoint));
    }
    if let Some(key) = from_env("OPENAI_API_KEY") {
        return Ok(Some(openai(key)));
    }
    if let Some(key) = from_env("OPENROUTER_API_KEY") {
        return Ok(Some(openrouter(key)));
    }
    if provider == ModelProvider::Auto {
        if let Some(key) = from_env("ANTHROPIC_API_KEY") {
            return Ok(Some(anthropic(key)));
        }
    }
    Ok(None)
}

/// Resolve the provider as DESIGN §8 says, probing Ollama (:11434) and llama.cpp (:8080).
pub async fn resolve(
    model: &ModelConfig,
    cli_model: Option<&str>,
    cli_base_url: Option<&str>,
    agent: &AgentConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<ResolvedProvider> {
    resolve_with(model, cli_model, cli_base_url, agent, env, &LocalProbe::default()).await
}

/// [`resolve`] with the local servers to probe given (tests point it at scripted servers).
pub(crate) async fn resolve_with(
    model: &ModelConfig,
    cli_model: Option<&str>,
    cli_base_url: Option<&str>,
    agent: &AgentConfig,
    env: &dyn Fn(&str) -> Option<String>,
    probe: &LocalProbe,
) -> anyhow::Result<ResolvedProvider> {
    if let Some(endpoint) = choose_endpoint(model, cli_model, cli_base_url, env)? {
        let settings = ClientSettings::from_agent(&endpoint.base_url, endpoint.api_key.clone(), agent);
        let (client, model_name): (Arc<dyn Provider>, String) = match endpoint.wire {
            WireKind::OpenAi => {
                let client = OpenAiClient::new(settings)?;
                let name = match endpoint.model {
                    Some(name) => name,
                    None => first_model(&client, &endpoint.base_url).await?,
                };
                (Arc::new(client), name)
            }
            WireKind::Anthropic => {
                let options =
                    MessagesOptions { max_tokens: model.max_tokens.max(1), thinking_budget: model.thinking_budget };
                let client = AnthropicClient::new(settings, options)?;
                let name = match endpoint.model {
                    Some(name) => name,
                    None => match client.list_models().await {
                        Ok(models) => models.into_iter().next().with_context(|| {
                            format!("{}/models lists no models; set [model] name or pass --model", endpoint.base_url)
                        })?,
                        Err(e @ LlmError::Refused { .. }) => bail!("{e}"),
                        Err(e) => bail!(
                            "no model name is configured and asking {}/models failed ({e}); \
                             set [model] name in config.toml or pass --model",
                            endpoint.base_url
                        ),
                    },
                };
                (Arc::new(client), name)
            }
        };
        tracing::info!(label = %endpoint.label, base_url = %endpoint.base_url, model = %model_name, "model provider");
        return Ok(ResolvedProvider {
            provider: client,
            model: model_name,
            base_url: endpoint.base_url,
            label: endpoint.label,
            demo: false,
            _demo_server: None,
        });
    }

    let configured = [cli_model, Some(model.name.as_str())]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|s| !s.is_empty())
        .map(str::to_string);
    if let Some((server, model_name)) = probe_local(probe, configured.as_deref()).await {
        let client = OpenAiClient::new(ClientSettings::from_agent(&server.base_url, None, agent))?;
        tracing::info!(label = %server.label, base_url = %server.base_url, model = %model_name, "local model server");
        return Ok(ResolvedProvider {
            provider: Arc::new(client),
            model: model_name,
            base_url: server.base_url,
            label: server.label,
            demo: false,
            _demo_server: None,
        });
    }

    let server = start_demo().await?;
    let base_url = server.base_url();
    let client = OpenAiClient::new(ClientSettings::from_agent(&base_url, None, agent))?;
    tracing::info!(%base_url, "no model configured; using the built-in demo model");
    Ok(ResolvedProvider {
        provider: Arc::new(client),
        model: DEMO_MODEL.into(),
        base_url,
        label: "demo".into(),
        demo: true,
        _demo_server: Some(server),
    })
}

/// The first model an explicitly configured server lists, for when no name is configured.
async fn first_model(client: &OpenAiClient, base_url: &str) -> anyhow::Result<String> {
    let http = http_client(client.settings().connect_timeout)?;
    let ask = fetch_models(&http, base_url, client.settings().api_key.as_deref(), client.settings().connect_timeout);
    match ask.await {
        Ok(models) => models.into_iter().next().with_context(|| {
            format!("{base_url}/models lists no models; set [model] name in config.toml or pass --model")
        }),
        // A server that is not there is the whole story: no talk of model names.
        Err(e @ LlmError::Refused { .. }) => bail!("{e}"),
        Err(e) => bail!(
            "no model name is configured and asking {base_url}/models failed ({e}); \
             set [model] name in config.toml or pass --model"
        ),
    }
}

/// Ask every local server at once; the first (in the given order) that answers in time with
/// a usable model wins.
async fn probe_local(probe: &LocalProbe, configured: Option<&str>) -> Option<(LocalServer, String)> {
    // Only a port that takes a connection is asked for its models: on most machines none
    // does, and a start finds that out without setting up an HTTP client.
    let listening = futures_util::future::join_all(probe.servers.iter().map(|s| listens(&s.base_url, probe.timeout)));
    let servers: Vec<&LocalServer> =
        probe.servers.iter().zip(listening.await).filter_map(|(s, up)| up.then_some(s)).collect();
    if servers.is_empty() {
        tracing::debug!("no local model server: nothing listens on their ports");
        return None;
    }
    let http = match http_client(probe.timeout) {
        Ok(http) => http,
        Err(e) => {
            tracing::warn!(error = %e, "cannot probe for local model servers");
            return None;
        }
    };
    let asks = servers.iter().map(|s| fetch_models(&http, &s.base_url, None, probe.timeout));
    let answers = futures_util::future::join_all(asks).await;
    for (server, answer) in servers.into_iter().zip(answers) {
        match answer {
            Ok(models) => match configured.map(str::to_string).or_else(|| models.into_iter().next()) {
                Some(model) => return Some((server.clone(), model)),
                None => tracing::warn!(label = %server.label, "local model server lists no models; skipping it"),
            },
            Err(e) => tracing::debug!(label = %server.label, error = %e, "no local model server"),
        }
    }
    None
}

/// Does something take a TCP connection at `base_url`'s host and port (within `timeout`)?
async fn listens(base_url: &str, timeout: Duration) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else { return true };
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else { return true };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    matches!(tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port))).await, Ok(Ok(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::llm::{ChatMessage, ChatRequest};
    use crate::testkit::scripted::{ScriptedResponse, ScriptedServer};
    use pretty_assertions::assert_eq;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    fn config(base_url: &str, name: &str, api_key_env: &str) -> ModelConfig {
        ModelConfig {
            base_url: base_url.into(),
            name: name.into(),
            api_key_env: api_key_env.into(),
            ..ModelConfig::default()
        }
    }

    fn endpoint(base_url: &str, key: Option<&str>, model: Option<&str>, label: &str) -> Option<Endpoint> {
        Some(Endpoint {
            wire: WireKind::OpenAi,
            base_url: base_url.into(),
            api_key: key.map(str::to_string),
            model: model.map(str::to_string),
            label: label.into(),
        })
    }

    const BOTH_KEYS: &[(&str, &str)] = &[("OPENAI_API_KEY", "sk-openai"), ("OPENROUTER_API_KEY", "sk-or")];

    #[test]
    fn an_explicit_base_url_never_gets_an_environment_key() {
        let chosen = choose_endpoint(&config("http://gpu:8000/v1/", "", ""), None, None, &env_of(BOTH_KEYS)).unwrap();
        assert_eq!(chosen, endpoint("http://gpu:8000/v1", None, None, "gpu:8000"));
    }

    #[test]
    fn the_cli_base_url_and_model_beat_the_config() {
        let chosen = choose_endpoint(
            &config("http://config:1/v1", "config-model", ""),
            Some("cli-model"),
            Some("http://cli.example/v1"),
            &env_of(&[]),
        )
        .unwrap();
        assert_eq!(chosen, endpoint("http://cli.example/v1", None, Some("cli-model"), "cli.example"));
    }

    #[test]
    fn an_explicit_base_url_uses_the_key_api_key_env_names() {
        let env = env_of(&[("MY_KEY", "sk-mine"), ("OPENAI_API_KEY", "sk-openai")]);
        let chosen = choose_endpoint(&config("http://gpu:8000/v1", "m", "MY_KEY"), None, None, &env).unwrap();
        assert_eq!(chosen, endpoint("http://gpu:8000/v1", Some("sk-mine"), Some("m"), "gpu:8000"));
        let chosen = choose_endpoint(&config("http://gpu:8000/v1", "m", "OPENAI_API_KEY"), None, None, &env).unwrap();
        assert_eq!(chosen.unwrap().api_key.as_deref(), Some("sk-openai"));
    }

    #[test]
    fn a_named_key_that_is_not_set_is_an_error() {
        let err = choose_endpoint(&config("http://gpu/v1", "m", "MY_KEY"), None, None, &env_of(&[("MY_KEY", " ")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("MY_KEY") && err.contains("not set"), "{err}");
    }

    #[test]
    fn a_bad_base_url_says_what_was_expected() {
        let err = choose_endpoint(&config("localhost:8080", "", ""), None, None, &env_of(&[])).unwrap_err();
        assert!(format!("{err:#}").contains("not a URL"), "{err:#}");
    }

    #[test]
    fn openai_key_first_then_openrouter() {
        let chosen = choose_endpoint(&config("", "", ""), None, None, &env_of(BOTH_KEYS)).unwrap();
        assert_eq!(chosen, endpoint(OPENAI_BASE_URL, Some("sk-openai"), Some(OPENAI_DEFAULT_MODEL), "OpenAI"));
        let chosen = choose_endpoint(
            &config("", "", ""),
            None,
            None,
            &env_of(&[("OPENAI_API_KEY", ""), ("OPENROUTER_API_KEY", "sk-or")]),
        )
        .unwrap();
        assert_eq!(chosen, endpoint(OPENROUTER_BASE_URL, Some("sk-or"), Some(OPENROUTER_DEFAULT_MODEL), "OpenRouter"));
        let chosen = choose_endpoint(&config("", "gpt-5", ""), None, None, &env_of(BOTH_KEYS)).unwrap();
        assert_eq!(chosen.unwrap().model.as_deref(), Some("gpt-5"));
    }

    #[test]
    fn api_key_env_without_base_url_picks_its_provider() {
        let env = env_of(&[("OPENROUTER_API_KEY", "sk-or"), ("OPENAI_API_KEY", "sk-openai")]);
        let chosen = choose_endpoint(&config("", "", "OPENROUTER_API_KEY"), None, None, &env).unwrap();
        assert_eq!(chosen.unwrap().label, "OpenRouter");
    }

    fn with_provider(provider: &str, base_url: &str, api_key_env: &str) -> ModelConfig {
        ModelConfig { provider: provider.parse().unwrap(), ..config(base_url, "", api_key_env) }
    }

    #[test]
    fn anthropic_key_comes_after_the_openai_and_openrouter_keys() {
        let all = env_of(&[("OPENAI_API_KEY", "sk-openai"), ("ANTHROPIC_API_KEY", "sk-ant")]);
        let chosen = choose_endpoint(&config("", "", ""), None, None, &all).unwrap().unwrap();
        assert_eq!((chosen.wire, chosen.label.as_str()), (WireKind::OpenAi, "OpenAI"));
        let only = env_of(&[("ANTHROPIC_API_KEY", "sk-ant")]);
        let chosen = choose_endpoint(&config("", "", ""), None, None, &only).unwrap();
        assert_eq!(
            chosen,
            Some(Endpoint {
                wire: WireKind::Anthropic,
                base_url: ANTHROPIC_BASE_URL.into(),
                api_key: Some("sk-ant".into()),
                model: Some(ANTHROPIC_DEFAULT_MODEL.into()),
                label: "Anthropic".into(),
            })
        );
        // provider = "openai" never picks the Anthropic key.
        assert_eq!(choose_endpoint(&with_provider("openai", "", ""), None, None, &only).unwrap(), None);
    }

    #[test]
    fn provider_anthropic_wins_over_other_keys_and_needs_its_key() {
        let all = env_of(&[("OPENAI_API_KEY", "sk-openai"), ("ANTHROPIC_API_KEY", "sk-ant")]);
        let chosen = choose_endpoint(&with_provider("anthropic", "", ""), None, None, &all).unwrap().unwrap();
        assert_eq!((chosen.wire, chosen.api_key.as_deref()), (WireKind::Anthropic, Some("sk-ant")));
        let err = choose_endpoint(&with_provider("anthropic", "", ""), None, None, &env_of(BOTH_KEYS)).unwrap_err();
        assert!(err.to_string().contains("ANTHROPIC_API_KEY"), "{err}");
        // An explicit server speaks the configured protocol and gets only the named key.
        let chosen = choose_endpoint(
            &with_provider("anthropic", "http://proxy:9/v1", "MY_KEY"),
            None,
            None,
            &env_of(&[("MY_KEY", "sk-mine"), ("ANTHROPIC_API_KEY", "sk-ant")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!((chosen.wire, chosen.api_key.as_deref()), (WireKind::Anthropic, Some("sk-mine")));
        // A named Anthropic key without a base URL: the Anthropic API, never OpenAI.
        let named = env_of(&[("ANTHROPIC_WORK_KEY", "sk-work")]);
        let chosen = choose_endpoint(&with_provider("auto", "", "ANTHROPIC_WORK_KEY"), None, None, &named).unwrap();
        assert_eq!(chosen.map(|e| (e.wire, e.api_key)), Some((WireKind::Anthropic, Some("sk-work".to_string()))));
        let err = choose_endpoint(&with_provider("openai", "", "ANTHROPIC_WORK_KEY"), None, None, &named).unwrap_err();
        assert!(err.to_string().contains("an Anthropic key"), "{err}");
    }

    #[test]
    fn no_key_means_look_locally() {
        assert_eq!(choose_endpoint(&config("", "", ""), None, None, &env_of(&[])).unwrap(), None);
    }

    #[test]
    fn secret_variables_include_the_configured_one() {
        assert_eq!(
            secret_env_vars(&config("", "", "MY_KEY")),
            vec!["OPENAI_API_KEY", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY", "MY_KEY"]
        );
        assert_eq!(secret_env_vars(&config("", "", "OPENAI_API_KEY")).len(), 3);
    }

    #[test]
    fn endpoint_debug_hides_the_key() {
        let e = endpoint("http://x/v1", Some("sk-secret"), None, "x").unwrap();
        assert!(!format!("{e:?}").contains("sk-secret"));
    }

    fn probe_of(servers: &[(&str, String)], timeout: Duration) -> LocalProbe {
        LocalProbe {
            servers: servers.iter().map(|(l, u)| LocalServer { label: l.to_string(), base_url: u.clone() }).collect(),
            timeout,
        }
    }

    fn closed_port_url() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", listener.local_addr().unwrap())
    }

    #[tokio::test]
    async fn a_local_server_is_found_and_its_first_model_used() {
        let silent = ScriptedServer::start([]).await.unwrap();
        silent.set_models_response(ScriptedResponse::hang());
        let empty = ScriptedServer::start([]).await.unwrap();
        empty.set_models(Vec::<String>::new());
        let local = ScriptedServer::start([]).await.unwrap();
        local.set_models(["llama3.2", "qwen2.5"]);
        let probe = probe_of(
            &[
                ("down", closed_port_url()),
                ("silent", silent.base_url()),
                ("empty", empty.base_url()),
                ("Ollama", local.base_url()),
            ],
            Duration::from_secs(2),
        );
        let agent = AgentConfig::default();
        let resolved = resolve_with(&config("", "", ""), None, None, &agent, &env_of(&[]), &probe).await.unwrap();
        assert_eq!(
            (resolved.label.as_str(), resolved.model.as_str(), resolved.base_url.clone(), resolved.demo),
            ("Ollama", "llama3.2", local.base_url(), false)
        );
        let resolved =
            resolve_with(&config("", "qwen2.5", ""), None, None, &agent, &env_of(&[]), &probe).await.unwrap();
        assert_eq!(resolved.model, "qwen2.5");
    }

    #[tokio::test]
    async fn with_nothing_found_the_demo_model_answers() {
        let silent = ScriptedServer::start([]).await.unwrap();
        silent.set_models_response(ScriptedResponse::hang());
        let probe = probe_of(&[("down", closed_port_url()), ("silent", silent.base_url())], Duration::from_millis(300));
        let resolved =
            resolve_with(&config("", "", ""), None, None, &AgentConfig::default(), &env_of(&[]), &probe).await.unwrap();
        assert!(resolved.demo && resolved._demo_server.is_some());
        assert_eq!((resolved.label.as_str(), resolved.model.as_str()), ("demo", DEMO_MODEL));
        let request = ChatRequest::owned(resolved.model.clone(), vec![ChatMessage::user("tell me about goals")]);
        let done = resolved.provider.stream_chat(&request, &mut |_| {}).await.unwrap();
        assert!(done.content.contains("/goal gate add"), "{}", done.content);
    }

    #[tokio::test]
    async fn an_explicit_server_without_a_model_name_is_asked_for_one() {
        let server = ScriptedServer::start([]).await.unwrap();
        server.set_models(["served-model"]);
        let probe = probe_of(&[], Duration::from_millis(300));
        let agent = AgentConfig::default();
        let base = server.base_url();
        let resolved =
            resolve_with(&config("", "", ""), None, Some(&base), &agent, &env_of(BOTH_KEYS), &probe).await.unwrap();
        assert_eq!((resolved.model.as_str(), resolved.demo), ("served-model", false));
        let requests = server.wait_for_requests(1, Duration::from_secs(10)).await;
        assert_eq!(requests[0].header("authorization"), None, "an environment key must not leak");

        // A server that is not there is named as such, without talk of model names.
        let down = closed_port_url();
        let err = resolve_with(&config(&down, "", ""), None, None, &agent, &env_of(&[]), &probe).await.unwrap_err();
        assert!(err.to_string().contains("connection refused") && !err.to_string().contains("--model"), "{err}");
    }
}
