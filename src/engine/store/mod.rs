//! The session database (DESIGN §7). SKELETON — the store helper replaces the bodies;
//! the signatures are the contract.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::engine::llm::ToolCall;

/// A message row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    pub role: String,
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    /// How the UI shows it when it is not plain: e.g. "oob" (delivered mid-turn),
    /// "heartbeat", "goal", "job_notice", "tool:<summary>", "compaction".
    pub display_kind: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub id: String,
    pub title: Option<String>,
    pub model: String,
    pub cwd: String,
    pub started_at: i64,
    pub updated_at: i64,
    pub message_count: u64,
    pub first_line: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    pub session_id: String,
    pub title: Option<String>,
    pub role: String,
    pub snippet: String,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

/// A cloneable handle; all SQL runs on one thread off the UI.
#[derive(Clone)]
pub struct Store {}

impl Store {
    pub fn open(_path: &Path) -> Result<Store, StoreError> {
        todo!()
    }
    pub async fn create_session(&self, _model: &str, _cwd: &str, _parent: Option<&str>) -> Result<String, StoreError> {
        todo!()
    }
    pub async fn append_message(&self, _session_id: &str, _msg: StoredMessage) -> Result<i64, StoreError> {
        todo!()
    }
    /// Active messages in order.
    pub async fn load_messages(&self, _session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        todo!()
    }
    pub async fn session(&self, _id: &str) -> Result<Option<SessionSummary>, StoreError> {
        todo!()
    }
    /// By exact id, id prefix, or title (latest match).
    pub async fn find_session(&self, _id_or_title: &str) -> Result<Option<SessionSummary>, StoreError> {
        todo!()
    }
    pub async fn latest_in_cwd(&self, _cwd: &str) -> Result<Option<SessionSummary>, StoreError> {
        todo!()
    }
    pub async fn list_sessions(&self, _limit: usize) -> Result<Vec<SessionSummary>, StoreError> {
        todo!()
    }
    pub async fn set_title(&self, _session_id: &str, _title: &str) -> Result<(), StoreError> {
        todo!()
    }
    pub async fn search(&self, _query: &str, _limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        todo!()
    }
    /// Mark the last `n` exchanges (a user message and everything after it) inactive.
    /// Returns the text of the earliest user message deactivated.
    pub async fn deactivate_last_exchanges(&self, _session_id: &str, _n: usize) -> Result<Option<String>, StoreError> {
        todo!()
    }
    pub async fn meta_get(&self, _key: &str) -> Result<Option<String>, StoreError> {
        todo!()
    }
    pub async fn meta_set(&self, _key: &str, _value: &str) -> Result<(), StoreError> {
        todo!()
    }
    pub async fn meta_delete(&self, _key: &str) -> Result<(), StoreError> {
        todo!()
    }
    pub async fn add_usage(&self, _session_id: &str, _prompt: u64, _completion: u64) -> Result<(), StoreError> {
        todo!()
    }
}
