//! Connections through the network proxy (DESIGN §6b) as `/network`, the status line and
//! `exec --json` show them.

use serde::{Deserialize, Serialize};

/// How a connection was decided, for `/network` and `exec --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Let through by a rule (listed, this session, the session's own server).
    Allowed,
    /// The user (or `--yes`) said yes when asked.
    Asked,
    Denied,
}

/// One connection through the proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connection {
    /// Milliseconds since the epoch when it was asked for.
    pub at_ms: u64,
    pub job: String,
    pub host: String,
    pub port: u16,
    /// Bytes from the job to the host, and back.
    pub sent: u64,
    pub received: u64,
    pub verdict: Verdict,
    /// Why it was let through or refused, in a few words.
    pub reason: String,
    /// The relay is over (bytes are final).
    pub done: bool,
}
