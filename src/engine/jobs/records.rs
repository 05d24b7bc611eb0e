//! Job records on disk: one small JSON file per running job, so a talaria that starts
//! after a crash can find the jobs of a dead one, kill what is left of them and list them
//! as `lost`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::group;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub owner_pid: u32,
    /// Start time of the owner (clock ticks since boot), so a reused pid is not mistaken
    /// for a live owner.
    pub owner_start: Option<u64>,
    pub pgid: i32,
    pub id: String,
    pub command: String,
    pub session_id: String,
    pub cwd: String,
    pub started_at_ms: u64,
}

impl JobRecord {
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        record_path(dir, self.owner_pid, &self.id)
    }

    /// The prefix of every file (logs, cwd file) this job's owner wrote for it.
    pub fn file_base(&self) -> String {
        file_base(self.owner_pid, &self.id)
    }
}

pub fn record_path(dir: &Path, owner_pid: u32, id: &str) -> PathBuf {
    dir.join(format!("record-{owner_pid}-{id}.json"))
}

pub fn file_base(owner_pid: u32, id: &str) -> String {
    format!("{owner_pid}-{id}")
}

pub fn write(dir: &Path, record: &JobRecord) -> std::io::Result<()> {
    let text = serde_json::to_string(record).map_err(std::io::Error::other)?;
    let path = record.path_in(dir);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

/// What a sweep found: records of dead owners (removed from disk) and the pgids that
/// were still alive.
#[derive(Debug, Default)]
pub struct Swept {
    pub lost: Vec<JobRecord>,
    pub alive_groups: Vec<i32>,
}

/// Find records whose owner is dead. Their record files and stale cwd files are removed;
/// their logs are left for the caller (a lost job's log can still be read). Logs of dead
/// owners that no record names are deleted.
pub fn sweep(dir: &Path, my_pid: u32) -> Swept {
    let mut swept = Swept::default();
    let Ok(entries) = std::fs::read_dir(dir) else { return swept };
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        if let Some(name) = entry.file_name().to_str() {
            files.push((name.to_string(), entry.path()));
        }
    }
    let mut dead_owners = std::collections::BTreeSet::new();
    for (name, path) in &files {
        if !(name.starts_with("record-") && name.ends_with(".json")) {
            continue;
        }
        let record: Option<JobRecord> = std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str(&t).ok());
        let Some(record) = record else {
            tracing::warn!(path = %path.display(), "removing an unreadable job record");
            let _ = std::fs::remove_file(path);
            continue;
        };
        if record.owner_pid == my_pid || owner_alive(&record) {
            continue;
        }
        dead_owners.insert(record.owner_pid);
        if group::group_alive(record.pgid) {
            swept.alive_groups.push(record.pgid);
        }
        let _ = std::fs::remove_file(path);
        swept.lost.push(record);
    }
    // Other files of owners that are gone: logs of jobs that had finished, cwd files.
    let lost_bases: Vec<String> = swept.lost.iter().map(|r| format!("{}.", r.file_base())).collect();
    for (name, path) in &files {
        let Some(owner) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if owner == my_pid || name.starts_with("record-") {
            continue;
        }
        let owner_dead = dead_owners.contains(&owner) || !group::process_alive(owner as i32, None);
        let is_lost_log = lost_bases.iter().any(|b| name.starts_with(b.as_str())) && name.ends_with(".log");
        if owner_dead && !is_lost_log {
            let _ = std::fs::remove_file(path);
        }
    }
    swept.lost.sort_by_key(|r| r.started_at_ms);
    swept
}

fn owner_alive(record: &JobRecord) -> bool {
    group::process_alive(record.owner_pid as i32, record.owner_start)
}

/// The log segments a dead owner left for a job, oldest first.
pub fn lost_segments(dir: &Path, record: &JobRecord) -> Vec<PathBuf> {
    let prefix = format!("{}.", record.file_base());
    let mut segs: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let n = name.strip_prefix(&prefix)?.strip_suffix(".log")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    segs.sort();
    segs.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(owner_pid: u32, id: &str) -> JobRecord {
        JobRecord {
            owner_pid,
            owner_start: None,
            pgid: 999_999_999,
            id: id.into(),
            command: "sleep 1".into(),
            session_id: "s".into(),
            cwd: "/".into(),
            started_at_ms: 1,
        }
    }

    #[test]
    fn records_of_dead_owners_are_lost_and_live_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        // A pid that cannot exist (above pid_max).
        let dead = 1u32 << 30;
        write(dir.path(), &record(dead, "job_1")).unwrap();
        write(dir.path(), &record(me, "job_2")).unwrap();
        std::fs::write(dir.path().join(format!("{dead}-job_1.0.log")), "kept").unwrap();
        std::fs::write(dir.path().join(format!("{dead}-job_7.0.log")), "stale").unwrap();
        std::fs::write(dir.path().join(format!("{dead}-job_1.cwd")), "/tmp").unwrap();
        let swept = sweep(dir.path(), me);
        assert_eq!(swept.lost, vec![record(dead, "job_1")]);
        assert!(swept.alive_groups.is_empty());
        let mut names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, vec![format!("{dead}-job_1.0.log"), format!("record-{me}-job_2.json")]);
        assert_eq!(lost_segments(dir.path(), &record(dead, "job_1")).len(), 1);
    }
}
