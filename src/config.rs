//! Typed configuration. Every key and its default lives in `config/default.toml`
//! (embedded); the user's `config.toml` is read on top of those defaults. A bad file is a
//! one-line error naming the file, the line, the key and what was expected.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::protocol::BusyMode;

/// The documented defaults, shipped inside the binary.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub model: ModelConfig,
    pub agent: AgentConfig,
    pub terminal: TerminalConfig,
    pub tool_output: ToolOutputConfig,
    pub jobs: JobsConfig,
    pub approvals: ApprovalsConfig,
    pub goals: GoalsConfig,
    pub ui: UiConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    pub base_url: String,
    pub name: String,
    pub api_key_env: String,
    pub context_window: u64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            base_url: String::new(),
            name: String::new(),
            api_key_env: String::new(),
            context_window: 128_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub busy_input_mode: BusyMode,
    pub max_iterations: u32,
    pub api_max_retries: u32,
    pub connect_timeout_s: u64,
    pub idle_read_timeout_s: u64,
    pub compact_at: f64,
    pub system_prompt_extra: String,
    pub turn_liveness: TurnLivenessConfig,
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
pub struct TurnLivenessConfig {
    pub timeout_s: f64,
    pub poll_s: f64,
}

impl Default for TurnLivenessConfig {
    fn default() -> Self {
        TurnLivenessConfig { timeout_s: 600.0, poll_s: 15.0 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TerminalConfig {
    pub shell: String,
    pub login_shell: bool,
    pub timeout_s: u64,
    pub max_foreground_timeout_s: u64,
    pub kill_grace_s: f64,
}

impl Default for TerminalConfig {
    fn default() -> Self {
        TerminalConfig {
            shell: "bash".into(),
            login_shell: false,
            timeout_s: 180,
            max_foreground_timeout_s: 600,
            kill_grace_s: 1.0,
        }
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
    pub notify_starts_turn: bool,
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig { log_max_bytes: 64 * 1024 * 1024, max_jobs: 64, notify_starts_turn: true }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    #[default]
    Prompt,
    Off,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    pub mode: ApprovalMode,
    pub timeout_s: u64,
    pub allowlist: Vec<String>,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        ApprovalsConfig { mode: ApprovalMode::Prompt, timeout_s: 300, allowlist: Vec::new() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GoalsConfig {
    pub max_turns: u32,
    pub gate_timeout_s: u64,
    pub gate_max_retries: u32,
}

impl Default for GoalsConfig {
    fn default() -> Self {
        GoalsConfig { max_turns: 20, gate_timeout_s: 300, gate_max_retries: 3 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum NotifyMode {
    #[default]
    Bell,
    Osc9,
    Off,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UiConfig {
    pub theme: String,
    pub notify: NotifyMode,
    pub notify_after_s: u64,
    pub mouse: bool,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig { theme: "default".into(), notify: NotifyMode::Bell, notify_after_s: 10, mouse: true }
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
        let mut config: Config = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
            let message = e.message().trim().replace('\n', " ");
            ConfigError::Parse { path: path.to_path_buf(), line, message }
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
        if self.jobs.max_jobs == 0 {
            return Err(invalid("jobs.max_jobs", "expected at least 1"));
        }
        if self.terminal.shell.trim().is_empty() {
            return Err(invalid("terminal.shell", "expected a shell name such as \"bash\""));
        }
        Ok(())
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

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
    }

    #[test]
    fn syntax_error_is_one_line() {
        let err = Config::from_toml("[model\nname=", Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.starts_with("c.toml:1:"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn bad_busy_mode_is_an_error() {
        let err =
            Config::from_toml("[agent]\nbusy_input_mode = \"shout\"\n", Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.contains("redirect"), "{err}");
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
