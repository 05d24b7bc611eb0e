//! The environment commands get (DESIGN §6): the user's, minus what looks like a secret —
//! names containing KEY, SECRET, TOKEN, PASSWORD, PASSWD or CREDENTIAL, or AUTH as part of
//! a word other than AUTHOR (GIT_AUTHOR_NAME passes; HTTP_AUTHORIZATION, XAUTHORITY and
//! SSH_AUTH_SOCK do not) — and minus the provider's key variable. `sandbox.env_keep` brings
//! names back, `sandbox.env_drop` removes more (a trailing `*` matches a prefix). Only
//! names are ever shown, never values.

const SECRET_WORDS: &[&str] = &["KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// What the filter is told by the config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvFilter {
    pub keep: Vec<String>,
    pub drop: Vec<String>,
    /// The provider's key variables (`model.api_key_env` and the known ones).
    pub provider_keys: Vec<String>,
}

/// Provider key variables talaria knows besides `model.api_key_env`.
const PROVIDER_KEYS: &[&str] = &["OPENAI_API_KEY", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY"];

impl EnvFilter {
    /// The filter the config asks for.
    pub fn from_config(config: &crate::config::Config) -> EnvFilter {
        let mut provider_keys: Vec<String> = PROVIDER_KEYS.iter().map(|k| k.to_string()).collect();
        let key_env = config.model.api_key_env.trim();
        if !key_env.is_empty() {
            provider_keys.push(key_env.to_string());
        }
        EnvFilter { keep: config.sandbox.env_keep.clone(), drop: config.sandbox.env_drop.clone(), provider_keys }
    }

    /// One line for `/permissions`: the names dropped here (never values).
    pub fn describe(&self) -> String {
        let dropped = self.dropped_here();
        if dropped.is_empty() {
            return "environment: commands get yours; nothing in it looks secret".into();
        }
        format!(
            "environment: commands do not get {} (names with KEY, SECRET, TOKEN, PASSWORD, PASSWD, CREDENTIAL, AUTH, \
             the provider's key, sandbox.env_drop); sandbox.env_keep brings one back",
            dropped.join(", ")
        )
    }

    /// Is `name` kept from commands?
    pub fn drops(&self, name: &str) -> bool {
        if self.provider_keys.iter().any(|k| k == name) {
            return true;
        }
        if self.keep.iter().any(|p| matches(p, name)) {
            return false;
        }
        self.drop.iter().any(|p| matches(p, name)) || looks_secret(name)
    }

    /// The names in `names` commands do not get, sorted.
    pub fn dropped<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut out: Vec<String> = names.into_iter().filter(|n| self.drops(n)).map(str::to_string).collect();
        out.sort();
        out.dedup();
        out
    }

    /// The names of this process's environment commands do not get.
    pub fn dropped_here(&self) -> Vec<String> {
        let names: Vec<String> = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect();
        self.dropped(names.iter().map(String::as_str))
    }
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Does the name of a variable say it holds a secret?
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if SECRET_WORDS.iter().any(|w| upper.contains(w)) {
        return true;
    }
    upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|part| part.contains("AUTH") && part != "AUTHOR" && part != "AUTHORS")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn secrets_are_dropped_and_authors_kept() {
        #[rustfmt::skip]
        let secret = [
            "GITHUB_TOKEN", "NPM_TOKEN", "AWS_SECRET_ACCESS_KEY", "AZURE_CLIENT_SECRET", "PGPASSWORD", "HF_TOKEN",
            "MY_SERVICE_API_KEY", "mysql_pwd_password", "GOOGLE_APPLICATION_CREDENTIALS", "SSH_AUTH_SOCK",
            "HTTP_AUTHORIZATION", "XAUTHORITY", "OAUTH_CLIENT", "REDIS_PASSWD", "api_key",
        ];
        for name in secret {
            assert!(looks_secret(name), "{name}");
        }
        #[rustfmt::skip]
        let plain = [
            "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "HOME", "PATH", "LANG", "CARGO_HOME",
            "AUTHORS_FILE", "TERM",
        ];
        for name in plain {
            assert!(!looks_secret(name), "{name}");
        }
    }

    #[test]
    fn keep_and_drop_adjust_and_the_provider_key_always_goes() {
        let filter = EnvFilter {
            keep: vec!["HF_TOKEN".into(), "MY_PROVIDER_KEY".into()],
            drop: vec!["CORP_*".into(), "INTERNAL_URL".into()],
            provider_keys: vec!["MY_PROVIDER_KEY".into()],
        };
        let names = ["HF_TOKEN", "NPM_TOKEN", "CORP_VPN", "INTERNAL_URL", "MY_PROVIDER_KEY", "PATH", "GIT_AUTHOR_NAME"];
        assert_eq!(filter.dropped(names), vec!["CORP_VPN", "INTERNAL_URL", "MY_PROVIDER_KEY", "NPM_TOKEN"]);
    }
}
