//! Typed configuration. Every key and its default lives in `config/default.toml`
//! (embedded); the user's `config.toml` is read on top of those defaults. A bad file is a
//! one-line error naming the file, the line, the key and what was expected.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::protocol::BusyMode;

/// The documented defaults, shipped inside the binary.
#[cfg(test)]
pub(crate) const DEFAULT_TOML: &str = include_str!("../config/default.toml");
/// `jobs.nice` unless set: see config/default.toml.
const DEFAULT_JOB_NICE: i32 = 0;
/// `jobs.background_nice` unless set: see config/default.toml.
const DEFAULT_BACKGROUND_NICE: i32 = 10;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub model: ModelConfig,
    pub agent: AgentConfig,
    pub terminal: TerminalConfig,
    pub tool_output: ToolOutputConfig,
    pub jobs: JobsConfig,
    pub approvals: ApprovalsConfig,
    pub(crate) sandbox: SandboxConfig,
    pub(crate) goals: GoalsConfig,
    pub(crate) ui: UiConfig,
    pub(crate) prices: Prices,
    pub(crate) mcp: McpConfig,
    pub(crate) rewind: RewindConfig,
    pub agents: AgentsConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// `auto`, `openai` (any OpenAI-compatible server) or `anthropic` (Messages API).
    pub provider: ModelProvider,
    pub(crate) base_url: String,
    pub(crate) name: String,
    pub api_key_env: String,
    pub context_window: u64,
    /// Anthropic: `max_tokens` of every request.
    pub(crate) max_tokens: u64,
    /// Anthropic: extended thinking budget in tokens; 0 leaves thinking off.
    pub(crate) thinking_budget: u64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            provider: ModelProvider::Auto,
            base_url: String::new(),
            name: String::new(),
            api_key_env: String::new(),
            context_window: 128_000,
            max_tokens: 8192,
            thinking_budget: 0,
        }
    }
}

/// `model.provider` (DESIGN §8a): the wire protocol, or `auto` to pick one by the keys set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ModelProvider {
    #[default]
    Auto,
    /// Chat Completions, any OpenAI-compatible server.
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
}

impl std::str::FromStr for ModelProvider {
    type Err = String;

    /// The names config and `--provider` take.
    fn from_str(name: &str) -> Result<ModelProvider, String> {
        match name {
            "auto" => Ok(ModelProvider::Auto),
            "openai" => Ok(ModelProvider::Openai),
            "anthropic" => Ok(ModelProvider::Anthropic),
            other => Err(format!("unknown model provider {other:?}: expected \"auto\", \"openai\" or \"anthropic\"")),
        }
    }
}

/// US dollars per million tokens of one model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Price {
    pub(crate) input: f64,
    pub(crate) output: f64,
    pub(crate) cache_read: f64,
    /// A cache write with the 5-minute lifetime (or the provider's only one).
    pub(crate) cache_write: f64,
    /// A cache write with the 1-hour lifetime. Optional in a config file: an Anthropic entry
    /// without it gets [`ANTHROPIC_ONE_HOUR_WRITE`] × input; elsewhere `cache_write` applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cache_write_1h: Option<f64>,
}

/// Anthropic bills a 1-hour cache write at twice the input price (a 5-minute one at 1.25×).
const ANTHROPIC_ONE_HOUR_WRITE: f64 = 2.0;

impl Price {
    const fn new(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
        Price { input, output, cache_read, cache_write, cache_write_1h: None }
    }

    /// Dollars for `usage`: uncached input, cache reads, 5-minute and 1-hour cache writes
    /// and output, each at its own price.
    pub(crate) fn cost(&self, usage: &crate::protocol::usage::Usage) -> f64 {
        let per_token = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per_token(usage.uncached_prompt_tokens(), self.input)
            + per_token(usage.cache_read_tokens, self.cache_read)
            + per_token(usage.cache_write_5m_tokens(), self.cache_write)
            + per_token(usage.cache_write_1h_tokens, self.cache_write_1h.unwrap_or(self.cache_write))
            + per_token(usage.completion_tokens, self.output)
    }
}

/// `[prices.<provider>]`: model name (or name prefix) → price. A user's entries are added to
/// the built-in ones (replacing one of the same name), never replace the whole table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Prices(pub(crate) std::collections::BTreeMap<String, std::collections::BTreeMap<String, Price>>);

impl Prices {
    /// The price of `model` at `provider`: the entry with the longest name that `model`
    /// starts with (`claude-sonnet-4-5` prices `claude-sonnet-4-5-20250929`).
    pub(crate) fn find(&self, provider: &str, model: &str) -> Option<&Price> {
        let table = self.0.get(provider)?;
        table
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| p)
    }

    /// Anthropic entries that name no 1-hour write price get the API's: 2 × input.
    fn with_one_hour_write_prices(mut self) -> Prices {
        for price in self.0.get_mut("anthropic").into_iter().flat_map(|t| t.values_mut()) {
            price.cache_write_1h.get_or_insert(ANTHROPIC_ONE_HOUR_WRITE * price.input);
        }
        self
    }
}

impl Default for Prices {
    fn default() -> Self {
        let table = |entries: &[(&str, Price)]| entries.iter().map(|(n, p)| (n.to_string(), *p)).collect();
        let anthropic = table(&[
            ("claude-opus-4-6", Price::new(5.0, 25.0, 0.5, 6.25)),
            ("claude-opus-4-5", Price::new(5.0, 25.0, 0.5, 6.25)),
            ("claude-opus-4-1", Price::new(15.0, 75.0, 1.5, 18.75)),
            ("claude-opus-4", Price::new(15.0, 75.0, 1.5, 18.75)),
            ("claude-sonnet-4", Price::new(3.0, 15.0, 0.3, 3.75)),
            ("claude-haiku-4-5", Price::new(1.0, 5.0, 0.1, 1.25)),
            ("claude-3-5-haiku", Price::new(0.8, 4.0, 0.08, 1.0)),
        ]);
        let openai = table(&[
            ("gpt-4.1", Price::new(2.0, 8.0, 0.5, 2.0)),
            ("gpt-4.1-mini", Price::new(0.4, 1.6, 0.1, 0.4)),
            ("gpt-4o", Price::new(2.5, 10.0, 1.25, 2.5)),
            ("gpt-4o-mini", Price::new(0.15, 0.6, 0.075, 0.15)),
        ]);
        Prices([("anthropic".to_string(), anthropic), ("openai".to_string(), openai)].into_iter().collect())
            .with_one_hour_write_prices()
    }
}

impl<'de> Deserialize<'de> for Prices {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Prices, D::Error> {
        let given: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Price>> =
            Deserialize::deserialize(deserializer)?;
        let mut prices = Prices::default();
        for (provider, models) in given {
            prices.0.entry(provider).or_default().extend(models);
        }
        Ok(prices.with_one_hour_write_prices())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub(crate) busy_input_mode: BusyMode,
    pub(crate) max_iterations: u32,
    pub(crate) api_max_retries: u32,
    pub(crate) connect_timeout_s: u64,
    pub(crate) idle_read_timeout_s: u64,
    pub(crate) compact_at: f64,
    pub(crate) system_prompt_extra: String,
    pub(crate) turn_liveness: TurnLivenessConfig,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            busy_input_mode: BusyMode::Redirect,
            max_iterations: 50,
            api_max_retries: 3,
            connect_timeout_s: 10,
            idle_read_timeout_s: 120,
            compact_at: 0.85,
            system_prompt_extra: String::new(),
            turn_liveness: TurnLivenessConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TurnLivenessConfig {
    pub(crate) timeout_s: f64,
    pub(crate) poll_s: f64,
}

impl Default for TurnLivenessConfig {
    fn default() -> Self {
        TurnLivenessConfig { timeout_s: 600.0, poll_s: 15.0 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TerminalConfig {
    pub(crate) shell: String,
    pub(crate) login_shell: bool,
    pub(crate) timeout_s: u64,
    pub(crate) max_foreground_timeout_s: u64,
    pub kill_grace_s: f64,
    /// Where commands run: `local`, `ssh:<host>` or `docker:<container>` (DESIGN §4b).
    pub backend: crate::protocol::Backend,
    /// `warn`: an unreachable remote backend gives a `degraded` result; `fail`: an error.
    pub(crate) degraded_mode: DegradedMode,
    pub(crate) ssh: SshConfig,
    pub(crate) docker: DockerConfig,
    /// `--backend` was given: it wins over the backend a resumed session had.
    #[serde(skip)]
    pub backend_from_flag: bool,
}

impl Default for TerminalConfig {
    fn default() -> Self {
        TerminalConfig {
            shell: "bash".into(),
            login_shell: false,
            timeout_s: 180,
            max_foreground_timeout_s: 600,
            kill_grace_s: 1.0,
            backend: crate::protocol::Backend::Local,
            degraded_mode: DegradedMode::Warn,
            ssh: SshConfig::default(),
            docker: DockerConfig::default(),
            backend_from_flag: false,
        }
    }
}

/// `[terminal.ssh]`: how the system `ssh` client is run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SshConfig {
    /// Passed as `ssh -F`; empty = the user's own `~/.ssh/config`.
    pub(crate) config_file: String,
    /// Extra `-o` options, e.g. `["Port=2222"]`.
    pub(crate) options: Vec<String>,
    /// The remote job directory (`~/` is the remote home).
    pub(crate) remote_dir: String,
    /// Seconds a connection attempt may take before the backend counts as degraded.
    pub(crate) connect_timeout_s: u64,
    /// Seconds the shared master connection stays open after its last use.
    pub(crate) control_persist_s: u64,
    /// Seconds a background remote job whose connection dropped keeps trying to re-attach
    /// before it is marked `lost` (it may still run over there).
    pub(crate) reconnect_timeout_s: u64,
}

impl Default for SshConfig {
    fn default() -> Self {
        SshConfig {
            config_file: String::new(),
            options: Vec::new(),
            remote_dir: "~/.cache/talaria/jobs".into(),
            connect_timeout_s: 10,
            control_persist_s: 600,
            reconnect_timeout_s: 600,
        }
    }
}

/// `[terminal.docker]`: the container engine's client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct DockerConfig {
    /// `docker` or `podman` (a name on PATH or a path).
    pub(crate) command: String,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig { command: "docker".into() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolOutputConfig {
    pub max_chars: usize,
}

impl Default for ToolOutputConfig {
    fn default() -> Self {
        ToolOutputConfig { max_chars: 50_000 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobsConfig {
    pub log_max_bytes: u64,
    pub max_jobs: usize,
    pub(crate) notify_starts_turn: bool,
    /// What a clean quit does with running jobs.
    pub(crate) on_quit: OnQuit,
    /// Seconds a job whose owner vanished (kill -9, closed terminal) waits for a new one
    /// before its supervisor kills it; 0 = at once.
    pub(crate) orphan_grace_s: f64,
    /// Seconds between two notices of one watch pattern; matches in between are counted
    /// and reported with the next notice ("+12 more").
    pub watch_cooldown_s: f64,
    /// Notices one watch sends at most; then it ends.
    pub watch_max_notices: u32,
    /// Job notices (exits, watch matches) that arrive within this many seconds of the
    /// first one, while the agent is idle, start one turn together.
    pub(crate) notice_window_s: f64,
    /// The CPU priority (nice value, 0–19) every command runs at, with its supervisor:
    /// above 0, busy jobs give way to the UI and the model stream on a loaded machine.
    pub nice: i32,
    /// The CPU priority of background jobs (started in the background or moved there), if
    /// lower than `nice`: they give way to the screen, the model stream and the foreground
    /// command when the CPU is contended, and run at full speed when it is not.
    pub background_nice: i32,
}

impl JobsConfig {
    /// The nice value a job runs at: a background one at the lower of the two priorities.
    pub(crate) fn nice_for(&self, background: bool) -> i32 {
        if background {
            self.nice.max(self.background_nice)
        } else {
            self.nice
        }
    }
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig {
            log_max_bytes: 64 * 1024 * 1024,
            max_jobs: 64,
            notify_starts_turn: true,
            on_quit: OnQuit::Ask,
            orphan_grace_s: 600.0,
            watch_cooldown_s: 10.0,
            watch_max_notices: 5,
            notice_window_s: 0.3,
            nice: DEFAULT_JOB_NICE,
            background_nice: DEFAULT_BACKGROUND_NICE,
        }
    }
}

/// `jobs.on_quit`: kill running jobs, keep them running (detached), or ask each time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnQuit {
    #[default]
    Ask,
    Kill,
    Keep,
}

/// `approvals.mode` (DESIGN §6); a protocol type, since `/approvals` and the editor
/// protocol switch it for a session.
pub use crate::protocol::ApprovalMode;

/// `sandbox.mode` (DESIGN §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Read anywhere but the credential stores; write only under the writable roots.
    #[default]
    WorkspaceWrite,
    /// Read anywhere but the credential stores; write nowhere but the job's own files.
    ReadOnly,
    /// No kernel sandbox.
    Off,
}

/// `sandbox.network` (DESIGN §6b).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// No route out but talaria's proxy, which lets listed hosts through and asks for others.
    #[default]
    Ask,
    /// The whole network.
    On,
    /// No IP socket at all.
    Off,
}

impl<'de> Deserialize<'de> for NetworkMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Flag(bool),
            Name(String),
        }
        match Form::deserialize(d)? {
            Form::Flag(true) => Ok(NetworkMode::On),
            Form::Flag(false) => Ok(NetworkMode::Off),
            Form::Name(n) => match n.as_str() {
                "ask" => Ok(NetworkMode::Ask),
                "on" => Ok(NetworkMode::On),
                "off" => Ok(NetworkMode::Off),
                other => Err(serde::de::Error::custom(format!(
                    "unknown sandbox.network {other:?}: expected \"ask\", \"on\" or \"off\""
                ))),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// `"ask"` (default): only through talaria's proxy, host by host; `"on"`; `"off"`.
    /// `true`/`false` (the old form) read as `"on"`/`"off"`.
    pub network: NetworkMode,
    /// Hosts the proxy lets through without asking: exact names, `*.suffix` for subdomains.
    pub network_allow: Vec<String>,
    /// Hosts the proxy refuses without asking (checked before `network_allow`).
    pub network_deny: Vec<String>,
    pub writable_roots: Vec<PathBuf>,
    pub deny_read: Vec<PathBuf>,
    /// Unix sockets outside the sandbox commands may connect to (paths, `@name` abstract).
    pub allow_unix_sockets: Vec<PathBuf>,
    pub limits: Limits,
    /// Variables commands get although their names look secret (exact names, `PREFIX_*`).
    pub env_keep: Vec<String>,
    /// Variables commands do not get besides those (exact names, `PREFIX_*`).
    pub env_drop: Vec<String>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            mode: SandboxMode::WorkspaceWrite,
            network: NetworkMode::Ask,
            network_allow: Vec::new(),
            network_deny: Vec::new(),
            writable_roots: Vec::new(),
            deny_read: Vec::new(),
            allow_unix_sockets: Vec::new(),
            limits: Default::default(),
            env_keep: Vec::new(),
            env_drop: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    pub mode: ApprovalMode,
    pub(crate) timeout_s: u64,
    pub(crate) allowlist: Vec<String>,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        ApprovalsConfig { mode: ApprovalMode::Auto, timeout_s: 300, allowlist: Vec::new() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct GoalsConfig {
    pub(crate) max_turns: u32,
    pub(crate) gate_timeout_s: u64,
    pub(crate) gate_max_retries: u32,
}

impl Default for GoalsConfig {
    fn default() -> Self {
        GoalsConfig { max_turns: 20, gate_timeout_s: 300, gate_max_retries: 3 }
    }
}

/// `[rewind]` (DESIGN §13): snapshots of the workspace before and after each turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RewindConfig {
    pub(crate) enabled: bool,
    pub(crate) max_file_bytes: u64,
}

impl Default for RewindConfig {
    fn default() -> Self {
        RewindConfig { enabled: true, max_file_bytes: 10 * 1024 * 1024 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NotifyMode {
    #[default]
    Bell,
    Osc9,
    Off,
}

/// `terminal.degraded_mode` (DESIGN §4b): what an unreachable remote backend gives the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DegradedMode {
    /// A `{"status":"degraded",…}` result saying the host is unreachable.
    #[default]
    Warn,
    /// An ordinary error result.
    Fail,
}

/// `ui.theme`: the themes built in (a wrong name is a load error naming them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ThemeName {
    #[default]
    #[serde(alias = "")]
    Default,
}

impl ThemeName {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ThemeName::Default => "default",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct UiConfig {
    pub(crate) theme: ThemeName,
    pub(crate) notify: NotifyMode,
    pub(crate) notify_after_s: u64,
    pub(crate) mouse: bool,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig { theme: ThemeName::Default, notify: NotifyMode::Bell, notify_after_s: 10, mouse: true }
    }
}

/// `[sandbox.limits]`: the limits of one command; 0 means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Tasks (processes and threads) at once.
    pub processes: u64,
    /// Address space per process, MiB.
    pub address_space_mb: u64,
    /// Largest file a process may write, MiB.
    pub file_size_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        // 2048 tasks: `cargo build -j`, `npm install`, a test suite use tens to hundreds
        // (threads count); a fork bomb stops there. No address-space limit: V8, Go and the
        // sanitizers reserve terabytes they never touch.
        Limits { processes: 2048, address_space_mb: 0, file_size_mb: 65_536 }
    }
}

/// `[agents]` in config.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsConfig {
    /// Sub-agents working at once; more queue and start when one ends.
    pub max_parallel: usize,
    /// How deep sub-agents nest: 1 = a sub-agent cannot start one.
    pub max_depth: u32,
    /// Characters of a final answer the parent model is told.
    pub max_result_chars: usize,
    /// Model calls a sub-agent may make in its turn.
    pub max_turns: u32,
    /// Seconds a sub-agent may run before it is killed; 0 = no limit.
    pub max_runtime_s: u64,
    /// This process's own depth: 0 for a talaria the user started, 1 for a sub-agent.
    #[serde(skip)]
    pub depth: u32,
    /// `--model` and `--base-url` of this run: a sub-agent talks to the same model server.
    #[serde(skip)]
    pub run_model: Option<String>,
    #[serde(skip)]
    pub run_base_url: Option<String>,
    /// A sub-agent's pause sentinel (the parent's `/pause`): its turn waits before each
    /// model call while it exists. None for a talaria the user started.
    #[serde(skip)]
    pub pause_file: Option<std::path::PathBuf>,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            max_parallel: 4,
            max_depth: 1,
            max_result_chars: 4000,
            max_turns: 30,
            max_runtime_s: 1800,
            depth: 0,
            run_model: None,
            run_base_url: None,
            pause_file: None,
        }
    }
}

/// `[mcp]`: Model Context Protocol servers whose tools the model may use (DESIGN §12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct McpConfig {
    pub(crate) servers: std::collections::BTreeMap<String, McpServerConfig>,
}

/// `[mcp.servers.<name>]`: a stdio server (`command`) or a streamable-HTTP one (`url`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct McpServerConfig {
    /// stdio: the program to start (looked up in PATH).
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
    /// Extra environment variables for the server process.
    pub(crate) env: std::collections::BTreeMap<String, String>,
    /// Working directory of the server process; empty = the session's directory.
    pub(crate) cwd: String,
    /// Streamable HTTP: the endpoint, e.g. `http://127.0.0.1:8000/mcp`.
    pub(crate) url: String,
    /// Name of the environment variable holding a bearer token for `url`.
    pub(crate) bearer_token_env: String,
    /// Extra HTTP headers sent with every request.
    pub(crate) headers: std::collections::BTreeMap<String, String>,
    pub(crate) enabled: bool,
    pub(crate) startup_timeout_s: f64,
    pub(crate) tool_timeout_s: f64,
    /// Calls to this server's tools never ask for approval.
    pub(crate) trust: bool,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        McpServerConfig {
            command: String::new(),
            args: Vec::new(),
            env: Default::default(),
            cwd: String::new(),
            url: String::new(),
            bearer_token_env: String::new(),
            headers: Default::default(),
            enabled: true,
            startup_timeout_s: 10.0,
            tool_timeout_s: 60.0,
            trust: false,
        }
    }
}

impl McpServerConfig {
    /// The one-line error for a server table that cannot be used, naming the key.
    fn check(&self, name: &str) -> Result<(), (String, String)> {
        let key = |k: &str| format!("mcp.servers.{name}.{k}");
        let err = |k: &str, m: &str| Err((key(k), m.to_string()));
        if name.trim().is_empty() || !name.chars().any(|c| c.is_ascii_alphanumeric()) {
            return Err((format!("mcp.servers.{name:?}"), "a server name needs at least one letter or digit".into()));
        }
        match (self.command.trim().is_empty(), self.url.trim().is_empty()) {
            (true, true) => return err("command", "a server needs `command` (stdio) or `url` (streamable HTTP)"),
            (false, false) => return err("url", "`command` and `url` exclude each other: one server is stdio or HTTP"),
            (false, true) => {
                if !self.bearer_token_env.is_empty() || !self.headers.is_empty() {
                    let k = if self.headers.is_empty() { "bearer_token_env" } else { "headers" };
                    return err(k, "only for HTTP servers (`url`); a stdio server gets `env`");
                }
            }
            (true, false) => {
                if !self.args.is_empty() || !self.env.is_empty() || !self.cwd.is_empty() {
                    let k = if !self.args.is_empty() {
                        "args"
                    } else if !self.env.is_empty() {
                        "env"
                    } else {
                        "cwd"
                    };
                    return err(k, "only for stdio servers (`command`); an HTTP server gets `headers`");
                }
                let url = self.url.trim();
                if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
                    return err("url", "expected an http:// or https:// URL");
                }
                for (h, v) in &self.headers {
                    if reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_err() {
                        return err("headers", &format!("{h:?} is not a valid HTTP header name"));
                    }
                    if reqwest::header::HeaderValue::from_str(v).is_err() {
                        return err("headers", &format!("the value of {h} is not a valid HTTP header value"));
                    }
                }
            }
        }
        for (k, v) in [("startup_timeout_s", self.startup_timeout_s), ("tool_timeout_s", self.tool_timeout_s)] {
            if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
                return err(k, "expected a positive number of seconds (at most 86400)");
            }
        }
        Ok(())
    }
}

/// A config file that could not be used. Displayed as one line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: {message}")]
    Parse { path: PathBuf, line: usize, message: String },
    #[error("{path}: {key}: {message}")]
    Invalid { path: PathBuf, key: String, message: String },
}

impl Config {
    /// Load `path` on top of the defaults. A missing file means all defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::from_toml(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Read { path: path.to_path_buf(), source }),
        }
    }

    /// Parse a config document; `path` is only used in error messages.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let parse_error = |e: toml::de::Error, key: Option<String>| {
            let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
            let mut message = e.message().trim().replace('\n', " ");
            // A wrong value names its key: the path serde took to it (`sandbox.network_allow[2]`,
            // inside inline tables too), else the `key =` on the line it points at.
            if let Some(key) = key.or_else(|| e.span().and_then(|s| key_at(text, s.start))) {
                message = format!("{key}: {message}");
            }
            ConfigError::Parse { path: path.to_path_buf(), line, message }
        };
        let document = toml::Deserializer::parse(text).map_err(|e| parse_error(e, None))?;
        let mut config: Config = serde_path_to_error::deserialize(document).map_err(|e| {
            let key = e.path().to_string();
            parse_error(e.into_inner(), (key != ".").then_some(key))
        })?;
        config.validate(path)?;
        Ok(config)
    }

    /// Semantic checks serde cannot express. Non-finite or negative liveness values fall
    /// back to the defaults with a warning (DESIGN §5); everything else is an error.
    fn validate(&mut self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: &str| ConfigError::Invalid {
            path: path.to_path_buf(),
            key: key.to_string(),
            message: message.to_string(),
        };
        let defaults = TurnLivenessConfig::default();
        let live = &mut self.agent.turn_liveness;
        if !live.timeout_s.is_finite() || live.timeout_s < 0.0 {
            tracing::warn!(value = live.timeout_s, "agent.turn_liveness.timeout_s is not usable; using the default");
            live.timeout_s = defaults.timeout_s;
        }
        if !live.poll_s.is_finite() || live.poll_s <= 0.0 {
            tracing::warn!(value = live.poll_s, "agent.turn_liveness.poll_s is not usable; using the default");
            live.poll_s = defaults.poll_s;
        }
        if !self.terminal.kill_grace_s.is_finite() || self.terminal.kill_grace_s < 0.0 {
            return Err(invalid("terminal.kill_grace_s", "expected a non-negative number of seconds"));
        }
        if !(self.agent.compact_at > 0.0 && self.agent.compact_at <= 1.0) {
            return Err(invalid("agent.compact_at", "expected a fraction between 0 and 1"));
        }
        if self.terminal.timeout_s == 0 {
            return Err(invalid("terminal.timeout_s", "expected a positive number of seconds"));
        }
        if self.tool_output.max_chars < 100 {
            return Err(invalid("tool_output.max_chars", "expected at least 100"));
        }
        if !(self.jobs.orphan_grace_s.is_finite() && self.jobs.orphan_grace_s >= 0.0) {
            return Err(invalid("jobs.orphan_grace_s", "expected a number of seconds, 0 or more"));
        }
        if !(self.jobs.watch_cooldown_s.is_finite() && self.jobs.watch_cooldown_s >= 0.0) {
            return Err(invalid("jobs.watch_cooldown_s", "expected a number of seconds, 0 or more"));
        }
        if self.jobs.watch_max_notices == 0 {
            return Err(invalid("jobs.watch_max_notices", "expected 1 or more"));
        }
        if !(self.jobs.notice_window_s.is_finite() && (0.0..=60.0).contains(&self.jobs.notice_window_s)) {
            return Err(invalid("jobs.notice_window_s", "expected a number of seconds from 0 to 60"));
        }
        if !(0..=19).contains(&self.jobs.nice) {
            return Err(invalid("jobs.nice", "expected a nice value from 0 (the same priority as talaria) to 19"));
        }
        if !(0..=19).contains(&self.jobs.background_nice) {
            return Err(invalid(
                "jobs.background_nice",
                "expected a nice value from 0 (the same priority as talaria) to 19",
            ));
        }
        if self.jobs.max_jobs == 0 {
            return Err(invalid("jobs.max_jobs", "expected at least 1"));
        }
        for (provider, models) in &self.prices.0 {
            for (model, p) in models {
                let given = [p.input, p.output, p.cache_read, p.cache_write, p.cache_write_1h.unwrap_or(0.0)];
                if given.iter().any(|v| !v.is_finite() || *v < 0.0) {
                    return Err(invalid(
                        &format!("prices.{provider}.{model}"),
                        "expected non-negative dollars per million tokens",
                    ));
                }
            }
        }
        if self.terminal.ssh.connect_timeout_s == 0 {
            return Err(invalid("terminal.ssh.connect_timeout_s", "expected a positive number of seconds"));
        }
        if self.terminal.docker.command.trim().is_empty() {
            return Err(invalid("terminal.docker.command", "expected \"docker\", \"podman\" or a path"));
        }
        if self.terminal.shell.trim().is_empty() {
            return Err(invalid("terminal.shell", "expected a shell name such as \"bash\""));
        }
        for p in &self.sandbox.allow_unix_sockets {
            let text = p.to_string_lossy();
            if !(p.is_absolute() || text.starts_with("~/") || (text.starts_with('@') && text.len() > 1)) {
                return Err(invalid(
                    "sandbox.allow_unix_sockets",
                    &format!(
                        "{text:?}: expected an absolute path, one starting with ~/, or @name for an abstract socket"
                    ),
                ));
            }
        }
        for (name, server) in &self.mcp.servers {
            server.check(name).map_err(|(key, message)| invalid(&key, &message))?;
        }
        Ok(())
    }
}

/// The dotted key whose value starts on the line of `offset` (`ui.theme` for `theme = 1`
/// under `[ui]`); None when that line is not a `key = value` line.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    if key.is_empty() || key.starts_with('[') || key.starts_with('#') {
        return None;
    }
    let table = text[..start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_start_matches('[').split(']').next().unwrap_or("").trim().to_string());
    Some(match table {
        Some(table) if !table.is_empty() => format!("{table}.{key}"),
        _ => key.to_string(),
    })
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn sandbox_network_reads_ask_on_off_and_the_old_booleans() {
        let rows = [
            ("", Some(NetworkMode::Ask)),
            ("network = \"ask\"", Some(NetworkMode::Ask)),
            ("network = \"on\"", Some(NetworkMode::On)),
            ("network = \"off\"", Some(NetworkMode::Off)),
            ("network = true", Some(NetworkMode::On)),
            ("network = false", Some(NetworkMode::Off)),
            ("network = \"maybe\"", None),
        ];
        for (line, want) in rows {
            let parsed: Result<Config, _> = toml::from_str(&format!("[sandbox]\n{line}\n"));
            assert_eq!(parsed.ok().map(|c| c.sandbox.network), want, "{line}");
        }
        let c: Config =
            toml::from_str("[sandbox]\nnetwork_allow = [\"*.crates.io\"]\nnetwork_deny = [\"x.io\"]\n").unwrap();
        assert_eq!(
            (c.sandbox.network_allow, c.sandbox.network_deny),
            (vec!["*.crates.io".into()], vec!["x.io".into()])
        );
    }

    #[test]
    fn default_toml_matches_the_typed_defaults() {
        let parsed = Config::from_toml(DEFAULT_TOML, Path::new("default.toml")).expect("default.toml parses");
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn user_file_overrides_only_what_it_names() {
        let c = Config::from_toml("[model]\nname = \"qwen\"\n[jobs]\nmax_jobs = 8\n", Path::new("c.toml")).unwrap();
        assert_eq!(c.model.name, "qwen");
        assert_eq!(c.jobs.max_jobs, 8);
        assert_eq!(c.terminal, TerminalConfig::default());
    }

    #[test]
    fn user_prices_are_added_to_the_built_in_table() {
        let text = "[prices.openai]\n\"my-finetune\" = { input = 1.0, output = 4.0, cache_read = 0.25, cache_write = 1.0 }\n\
                    [prices.anthropic]\n\"claude-sonnet-4\" = { input = 2.0, output = 10.0, cache_read = 0.2, cache_write = 2.5 }\n";
        let c = Config::from_toml(text, Path::new("c.toml")).unwrap();
        assert_eq!(c.prices.find("openai", "my-finetune-v2").map(|p| p.output), Some(4.0));
        assert_eq!(c.prices.find("openai", "gpt-4.1-mini").map(|p| p.input), Some(0.4), "built-ins stay");
        assert_eq!(c.prices.find("anthropic", "claude-sonnet-4-5").map(|p| p.input), Some(2.0), "replaced");
        let err = Config::from_toml(
            "[prices.openai]\nm = { input = -1.0, output = 1.0, cache_read = 1.0, cache_write = 1.0 }\n",
            Path::new("c.toml"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("prices.openai.m"), "{err}");
        let err = Config::from_toml(
            "[prices.anthropic]\nm = { input = 1.0, output = 1.0, cache_read = 1.0, cache_write = 1.0, \
             cache_write_1h = -2.0 }\n",
            Path::new("c.toml"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("prices.anthropic.m"), "{err}");
        let err = Config::from_toml("[model]\nprovider = \"gemini\"\n", Path::new("c.toml")).unwrap_err();
        assert!(err.to_string().contains("model.provider"), "{err}");
    }

    #[test]
    fn the_one_hour_write_price_is_optional_and_twice_the_input_at_anthropic() {
        let text = "[prices.anthropic]\n\
                    \"claude-sonnet-4\" = { input = 2.0, output = 10.0, cache_read = 0.2, cache_write = 2.5 }\n\
                    \"claude-deal\" = { input = 2.0, output = 10.0, cache_read = 0.2, cache_write = 2.5, \
                    cache_write_1h = 3.0 }\n\
                    [prices.openai]\n\
                    \"my-finetune\" = { input = 1.0, output = 4.0, cache_read = 0.25, cache_write = 1.0 }\n";
        let c = Config::from_toml(text, Path::new("c.toml")).unwrap();
        let one_hour = |provider: &str, model: &str| c.prices.find(provider, model).and_then(|p| p.cache_write_1h);
        assert_eq!(one_hour("anthropic", "claude-sonnet-4-5"), Some(4.0), "absent: 2 × input");
        assert_eq!(one_hour("anthropic", "claude-deal"), Some(3.0), "given: kept");
        assert_eq!(one_hour("anthropic", "claude-haiku-4-5"), Some(2.0), "built-in: 2 × input");
        assert_eq!(one_hour("openai", "my-finetune"), None, "one lifetime: cache_write applies");
        // 1,000 writes, 400 of them for an hour: 600 × $2.50 + 400 × $3.00 per million.
        let usage = crate::protocol::usage::Usage {
            prompt_tokens: 1_000,
            completion_tokens: 0,
            cache_read_tokens: 0,
            cache_write_tokens: 1_000,
            cache_write_1h_tokens: 400,
        };
        let cost = c.prices.find("anthropic", "claude-deal").unwrap().cost(&usage);
        assert!((cost - 0.0027).abs() < 1e-12, "{cost}");
        let cost = c.prices.find("openai", "my-finetune").unwrap().cost(&usage);
        assert!((cost - 0.001).abs() < 1e-12, "{cost}");
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let err = Config::from_toml("[model]\nname = \"x\"\nflavour = 3\n", Path::new("/h/config.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("/h/config.toml:3:"), "{err}");
        assert!(err.contains("flavour"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn wrong_type_says_what_was_expected() {
        let err = Config::from_toml("[jobs]\nmax_jobs = \"many\"\n", Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.starts_with("c.toml:2:"), "{err}");
        assert!(err.contains("expected"), "{err}");
        assert!(err.contains("jobs.max_jobs"), "the key is named: {err}");
        let text = "[model]\nname = \"x\"\n[ui]\n# the colours\ntheme = 7\n";
        let err = Config::from_toml(text, Path::new("c.toml"));
        let err = err.unwrap_err().to_string();
        assert!(err.starts_with("c.toml:5:") && err.contains("ui.theme"), "{err}");
    }

    #[test]
    fn an_unknown_theme_is_an_error_at_load() {
        let err = Config::from_toml("[ui]\ntheme = \"neon\"\n", Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.contains("ui.theme") && err.contains("default"), "{err}");
        assert!(Config::from_toml("[ui]\ntheme = \"default\"\n", Path::new("c.toml")).is_ok());
        assert!(Config::from_toml("[ui]\ntheme = \"\"\n", Path::new("c.toml")).is_ok(), "empty means default");
    }

    #[test]
    fn degraded_mode_is_one_of_its_words_and_a_wrong_one_names_file_line_key_and_choices() {
        let c = Config::from_toml("[terminal]\ndegraded_mode = \"fail\"\n", Path::new("c.toml")).unwrap();
        assert_eq!(c.terminal.degraded_mode, DegradedMode::Fail);
        let err = Config::from_toml("[terminal]\nshell = \"bash\"\ndegraded_mode = \"loud\"\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("c.toml:3: terminal.degraded_mode: "), "{err}");
        assert!(err.contains("warn") && err.contains("fail"), "{err}");
    }

    #[test]
    fn a_wrong_type_names_the_nested_key_path_in_arrays_and_inline_tables() {
        let cases = [
            ("[sandbox]\nnetwork_allow = [\"a.io\", \"b.io\", 3]\n", "c.toml:2: sandbox.network_allow[2]: "),
            (
                "[mcp.servers.files]\ncommand = \"x\"\nenv = { A = \"1\", B = 2 }\n",
                "c.toml:3: mcp.servers.files.env.B: ",
            ),
            ("sandbox = { limits = { processes = \"many\" } }\n", "c.toml:1: sandbox.limits.processes: "),
            (
                "[prices.openai]\nm = { input = \"x\", output = 1.0, cache_read = 1.0, cache_write = 1.0 }\n",
                "c.toml:2: prices.openai.m.input: ",
            ),
            ("[agent]\nturn_liveness = { timeout_s = \"long\" }\n", "c.toml:2: agent.turn_liveness.timeout_s: "),
        ];
        for (text, start) in cases {
            let err = Config::from_toml(text, Path::new("c.toml")).unwrap_err().to_string();
            assert!(err.starts_with(start) && !err.contains('\n'), "{text:?}: {err}");
        }
    }

    #[test]
    fn string_values_are_enums_and_a_wrong_one_lists_the_choices() {
        let c = Config::from_toml(
            "[model]\nprovider = \"anthropic\"\n[terminal]\nbackend = \"ssh:box\"\ndegraded_mode = \"fail\"\n[ui]\ntheme = \"default\"\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(
            (c.model.provider, c.terminal.backend, c.terminal.degraded_mode, c.ui.theme),
            (
                ModelProvider::Anthropic,
                crate::protocol::Backend::Ssh("box".into()),
                DegradedMode::Fail,
                ThemeName::Default
            )
        );
        let cases = [
            ("[model]\nprovider = \"gemini\"\n", "c.toml:2: model.provider: ", "`auto`, `openai`, `anthropic`"),
            (
                "[terminal]\nbackend = \"ftp:x\"\n",
                "c.toml:2: terminal.backend: ",
                "\"local\", \"ssh:<host>\" or \"docker:<container>\"",
            ),
            ("[terminal]\nbackend = 7\n", "c.toml:2: terminal.backend: ", "expected a backend: \"local\""),
            (
                "[terminal]\ndegraded_mode = \"loud\"\n",
                "c.toml:2: terminal.degraded_mode: ",
                "expected `warn` or `fail`",
            ),
            ("[ui]\ntheme = \"neon\"\n", "c.toml:2: ui.theme: ", "`default`"),
        ];
        for (text, start, choices) in cases {
            let err = Config::from_toml(text, Path::new("c.toml")).unwrap_err().to_string();
            assert!(err.starts_with(start) && err.contains(choices), "{text:?}: {err}");
        }
    }

    #[test]
    fn syntax_error_is_one_line() {
        let err = Config::from_toml("[model\nname=", Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.starts_with("c.toml:1:"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn background_jobs_take_the_lower_of_the_two_priorities_and_out_of_range_is_an_error() {
        let c = Config::from_toml("[jobs]\nnice = 3\nbackground_nice = 12\n", Path::new("c.toml")).unwrap();
        assert_eq!((c.jobs.nice_for(false), c.jobs.nice_for(true)), (3, 12));
        let c = Config::from_toml("[jobs]\nnice = 5\nbackground_nice = 0\n", Path::new("c.toml")).unwrap();
        assert_eq!((c.jobs.nice_for(false), c.jobs.nice_for(true)), (5, 5));
        assert_eq!((Config::default().jobs.nice_for(false), Config::default().jobs.nice_for(true)), (0, 10));
        let err = Config::from_toml("[jobs]\nbackground_nice = 20\n", Path::new("c.toml")).unwrap_err().to_string();
        assert!(
            err.contains("jobs.background_nice") && err.contains("0 (the same priority as talaria) to 19"),
            "{err}"
        );
    }

    #[test]
    fn bad_busy_mode_is_an_error() {
        let err =
            Config::from_toml("[agent]\nbusy_input_mode = \"shout\"\n", Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.contains("redirect"), "{err}");
    }

    #[test]
    fn mcp_servers_stdio_and_http() {
        let text = "[mcp.servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"srv\"]\nenv = { A = \"1\" }\n\
                    [mcp.servers.remote]\nurl = \"https://example.com/mcp\"\nbearer_token_env = \"TOKEN\"\nheaders = { X-Team = \"a\" }\ntrust = true\ntool_timeout_s = 5\n";
        let c = Config::from_toml(text, Path::new("c.toml")).unwrap();
        let files = &c.mcp.servers["files"];
        assert_eq!((files.command.as_str(), files.args.len(), files.startup_timeout_s), ("npx", 2, 10.0));
        let remote = &c.mcp.servers["remote"];
        assert!(remote.trust && remote.enabled);
        assert_eq!(remote.tool_timeout_s, 5.0);
    }

    #[test]
    fn bad_mcp_servers_are_one_line_errors_naming_the_key() {
        let cases = [
            ("[mcp.servers.a]\nargs = [\"x\"]\n", "mcp.servers.a.command"),
            ("[mcp.servers.a]\ncommand = \"x\"\nurl = \"http://h:1/mcp\"\n", "mcp.servers.a.url"),
            ("[mcp.servers.a]\nurl = \"ftp://h/mcp\"\n", "mcp.servers.a.url"),
            ("[mcp.servers.a]\nurl = \"http://h:1/mcp\"\nargs = [\"x\"]\n", "mcp.servers.a.args"),
            ("[mcp.servers.a]\ncommand = \"x\"\nheaders = { A = \"b\" }\n", "mcp.servers.a.headers"),
            ("[mcp.servers.a]\ncommand = \"x\"\ntool_timeout_s = 0\n", "mcp.servers.a.tool_timeout_s"),
            ("[mcp.servers.a]\ncommand = \"x\"\nstartup_timeout_s = -1\n", "mcp.servers.a.startup_timeout_s"),
            (
                "[mcp.servers.a]\nurl = \"http://h:1/mcp\"\nheaders = { \"bad header\" = \"b\" }\n",
                "mcp.servers.a.headers",
            ),
            ("[mcp.servers.a]\ncommand = \"x\"\ntrust = \"yes\"\n", "mcp.servers.a.trust"),
        ];
        for (text, key) in cases {
            let err = Config::from_toml(text, Path::new("c.toml")).unwrap_err().to_string();
            assert!(err.contains(key) && !err.contains('\n'), "{text:?}: {err}");
        }
        let err = Config::from_toml("[mcp.servers.a]\ncommand = \"x\"\ntimeout = 3\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("c.toml:3:") && err.contains("timeout"), "{err}");
    }

    #[test]
    fn the_documented_mcp_server_keys_are_the_defaults() {
        // The commented `[mcp.servers.<name>]` block of default.toml, uncommented.
        let block: String = DEFAULT_TOML
            .lines()
            .skip_while(|l| !l.starts_with("# [mcp.servers.<name>]"))
            .take_while(|l| l.starts_with('#'))
            .filter(|l| !l.starts_with("# #"))
            .map(|l| l.trim_start_matches('#').trim_start().replace("<name>", "x") + "\n")
            .collect();
        let with_command = block.replace("command = \"\"", "command = \"srv\"");
        let c = Config::from_toml(&with_command, Path::new("default.toml")).expect("the documented block parses");
        let documented = McpServerConfig { command: "srv".into(), ..McpServerConfig::default() };
        assert_eq!(c.mcp.servers["x"], documented);
    }

    #[test]
    fn unusable_liveness_values_fall_back() {
        let c =
            Config::from_toml("[agent.turn_liveness]\ntimeout_s = -5.0\npoll_s = nan\n", Path::new("c.toml")).unwrap();
        assert_eq!(c.agent.turn_liveness, TurnLivenessConfig::default());
        let c = Config::from_toml("[agent.turn_liveness]\ntimeout_s = 0\n", Path::new("c.toml"));
        // An integer where a float is expected is accepted by toml for f64 fields.
        assert!(c.is_ok());
    }
}
