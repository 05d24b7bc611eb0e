//! Where a session's commands run (DESIGN §4b): `terminal.backend`, `--backend`, `/backend`
//! and the agent tool's `backend` all name one with the label [`Backend::parse`] reads.

use serde::{Deserialize, Serialize};

/// Where a session's commands run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(into = "String")]
pub enum Backend {
    #[default]
    Local,
    Ssh(String),
    Docker(String),
}

impl Backend {
    /// `local`, `ssh:<host>` or `docker:<container>` (also `ssh <host>`, as `/backend` takes it).
    pub fn parse(text: &str) -> Result<Backend, String> {
        let text = text.trim();
        if text.is_empty() || text == "local" {
            return Ok(Backend::Local);
        }
        let (kind, rest) = text.split_once(':').or_else(|| text.split_once(char::is_whitespace)).ok_or_else(|| {
            format!("unknown backend '{text}': expected \"local\", \"ssh:<host>\" or \"docker:<container>\"")
        })?;
        let name = rest.trim();
        let valid = !name.is_empty()
            && !name.starts_with('-')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-@:[]%".contains(c));
        match kind.trim() {
            "ssh" if valid => Ok(Backend::Ssh(name.to_string())),
            "docker" | "podman" if valid => Ok(Backend::Docker(name.to_string())),
            "ssh" | "docker" | "podman" => Err(format!(
                "'{name}' is not a usable host or container name (letters, digits, . _ - @ : only, not starting with -)"
            )),
            other => Err(format!(
                "unknown backend kind '{other}': expected \"local\", \"ssh:<host>\" or \"docker:<container>\""
            )),
        }
    }

    pub(crate) fn is_remote(&self) -> bool {
        !matches!(self, Backend::Local)
    }

    /// `local`, `ssh:box`, `docker:ci`.
    pub fn label(&self) -> String {
        match self {
            Backend::Local => "local".into(),
            Backend::Ssh(h) => format!("ssh:{h}"),
            Backend::Docker(c) => format!("docker:{c}"),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

/// A backend is read from its label (config, `/backend`, job records), or from the tagged
/// form job records of earlier versions have (`{"Ssh":"box"}`, `"Local"`).
impl<'de> Deserialize<'de> for Backend {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Backend, D::Error> {
        struct Written;
        impl<'de> serde::de::Visitor<'de> for Written {
            type Value = Backend;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a backend: \"local\", \"ssh:<host>\" or \"docker:<container>\"")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Backend, E> {
                match text {
                    "Local" => Ok(Backend::Local),
                    text => Backend::parse(text).map_err(E::custom),
                }
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Backend, A::Error> {
                #[derive(Deserialize)]
                enum Tagged {
                    Ssh(String),
                    Docker(String),
                }
                Ok(match Tagged::deserialize(serde::de::value::MapAccessDeserializer::new(map))? {
                    Tagged::Ssh(host) => Backend::Ssh(host),
                    Tagged::Docker(container) => Backend::Docker(container),
                })
            }
        }
        deserializer.deserialize_any(Written)
    }
}

impl From<Backend> for String {
    fn from(backend: Backend) -> String {
        backend.label()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn parses_backends() {
        assert_eq!(Backend::parse("local"), Ok(Backend::Local));
        assert_eq!(Backend::parse(""), Ok(Backend::Local));
        assert_eq!(Backend::parse("ssh:box"), Ok(Backend::Ssh("box".into())));
        assert_eq!(Backend::parse("ssh build@box.lan"), Ok(Backend::Ssh("build@box.lan".into())));
        assert_eq!(Backend::parse("docker:ci"), Ok(Backend::Docker("ci".into())));
        assert!(Backend::parse("ssh:-oProxyCommand=x").is_err());
        assert!(Backend::parse("ssh:a b").is_err());
        assert!(Backend::parse("ftp:x").is_err());
        assert_eq!(Backend::Ssh("box".into()).label(), "ssh:box");
    }

    #[test]
    fn a_backend_is_written_as_its_label_and_read_in_both_forms() {
        let ssh = Backend::Ssh("box".into());
        assert_eq!(serde_json::to_string(&ssh).unwrap(), r#""ssh:box""#);
        for (text, want) in [
            (r#""ssh:box""#, Ok(ssh.clone())),
            (r#"{"Ssh":"box"}"#, Ok(ssh)),
            (r#"{"Docker":"ci"}"#, Ok(Backend::Docker("ci".into()))),
            (r#""Local""#, Ok(Backend::Local)),
            (r#""local""#, Ok(Backend::Local)),
        ] {
            assert_eq!(serde_json::from_str::<Backend>(text).map_err(|e| e.to_string()), want, "{text}");
        }
        let err = serde_json::from_str::<Backend>(r#""ftp:x""#).unwrap_err().to_string();
        assert!(err.contains("unknown backend kind 'ftp'"), "{err}");
    }
}
