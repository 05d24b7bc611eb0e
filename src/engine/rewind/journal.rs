//! A session's rewind journal: one JSON line per event (a turn started, a turn ended, a
//! rewind), appended as it happens, so a `kill -9` loses at most the line being written.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::git::Skipped;

pub use crate::protocol::rewind::RewindMode;

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// A turn is about to start; `tree` is the workspace before it.
    Start {
        id: u64,
        trigger: String,
        text: String,
        /// The sequence number its first message gets (the conversation goes back to it).
        seq: i64,
        tree: String,
        at_ms: u64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skipped: Vec<Skipped>,
    },
    /// The turn `id` ended; `tree` is the workspace after it.
    End { id: u64, tree: String },
    /// A rewind to before entry `target`: the workspace went from `before` to `after`.
    Rewind { id: u64, target: usize, mode: RewindMode, before: String, after: String, at_ms: u64 },
}

/// What an entry of the list is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryKind {
    Turn { trigger: String, text: String },
    Rewind { target: usize, mode: RewindMode },
}

/// A turn or a rewind, as `talaria rewind list` numbers them (from 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub number: usize,
    #[serde(skip)]
    pub id: u64,
    #[serde(flatten)]
    pub kind: EntryKind,
    #[serde(skip)]
    pub seq: Option<i64>,
    pub start: String,
    /// None when talaria stopped before the turn ended (the next snapshot stands in).
    pub end: Option<String>,
    pub at_ms: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// Fold the records into entries.
pub fn entries(records: &[Record]) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for record in records {
        match record {
            Record::Start { id, trigger, text, seq, tree, at_ms, skipped } => out.push(Entry {
                number: out.len() + 1,
                id: *id,
                kind: EntryKind::Turn { trigger: trigger.clone(), text: text.clone() },
                seq: Some(*seq),
                start: tree.clone(),
                end: None,
                at_ms: *at_ms,
                skipped: skipped.clone(),
            }),
            Record::End { id, tree } => {
                if let Some(e) = out.iter_mut().rev().find(|e| e.id == *id) {
                    e.end = Some(tree.clone());
                }
            }
            Record::Rewind { id, target, mode, before, after, at_ms } => out.push(Entry {
                number: out.len() + 1,
                id: *id,
                kind: EntryKind::Rewind { target: *target, mode: *mode },
                seq: None,
                start: before.clone(),
                end: Some(after.clone()),
                at_ms: *at_ms,
                skipped: Vec::new(),
            }),
        }
    }
    out
}

/// The journal file of one session.
#[derive(Debug, Clone)]
pub struct Journal {
    path: PathBuf,
}

impl Journal {
    pub fn new(dir: &Path, session_id: &str) -> Journal {
        let name: String = session_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        Journal { path: dir.join(format!("{name}.jsonl")) }
    }

    pub fn append(&self, record: &Record) -> std::io::Result<()> {
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut line = serde_json::to_string(record).map_err(std::io::Error::other)?;
        line.push('\n');
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        file.write_all(line.as_bytes())?;
        file.sync_data()
    }

    /// Every record; a torn last line (a crash while writing it) is left out.
    pub fn load(&self) -> std::io::Result<Vec<Record>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(id: u64, tree: &str) -> Record {
        Record::Start {
            id,
            trigger: "user".into(),
            text: format!("m{id}"),
            seq: id as i64 * 2,
            tree: tree.into(),
            at_ms: id,
            skipped: vec![],
        }
    }

    #[test]
    fn records_fold_into_numbered_entries_and_a_missing_end_stays_none() {
        let records = vec![
            start(1, "t0"),
            Record::End { id: 1, tree: "t1".into() },
            start(2, "t1u"),
            Record::Rewind {
                id: 3,
                target: 1,
                mode: RewindMode::Code,
                before: "t2".into(),
                after: "t0".into(),
                at_ms: 9,
            },
        ];
        let e = entries(&records);
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].number, e[0].end.as_deref()), (1, Some("t1")));
        assert_eq!((e[1].number, e[1].end.as_deref(), e[1].seq), (2, None, Some(4)));
        assert_eq!(e[2].kind, EntryKind::Rewind { target: 1, mode: RewindMode::Code });
    }

    #[test]
    fn a_torn_last_line_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(dir.path(), "s/1");
        j.append(&start(1, "a")).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("s_1.jsonl"))
            .unwrap()
            .write_all(b"{\"record\":\"end\",\"id")
            .unwrap();
        assert_eq!(j.load().unwrap(), vec![start(1, "a")]);
    }
}
