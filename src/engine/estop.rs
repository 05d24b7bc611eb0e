//! The pause sentinel (DESIGN §5): while `$TALARIA_HOME/ESTOP` exists no heartbeat fires,
//! no goal continues and queued work waits; nothing in flight is killed. The file holds
//! `{"reason": …, "at": <unix seconds>}`, but its mere existence is what counts: an empty
//! or corrupt file (or a `touch ESTOP`) still pauses — fail safe.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// What a pause file says. Both fields are None for an empty or unreadable file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct EstopInfo {
    #[serde(default)]
    pub(crate) reason: Option<String>,
    /// Unix seconds.
    #[serde(default)]
    pub(crate) at: Option<u64>,
}

impl EstopInfo {
    /// One line for a banner or notice: `paused: lunch (since 12:03)` style text is up to
    /// the caller; this gives `paused — <reason>` or `paused`.
    #[cfg(test)]
    pub(crate) fn describe(&self) -> String {
        match self.reason.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
            Some(reason) => format!("paused — {reason}"),
            None => "paused".to_string(),
        }
    }
}

/// True while the sentinel exists (one stat; a dangling symlink counts too).
pub(crate) fn is_paused(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The sentinel's contents, or None when not paused.
pub(crate) fn read(path: &Path) -> Option<EstopInfo> {
    if !is_paused(path) {
        return None;
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    Some(serde_json::from_str(&text).unwrap_or_default())
}

/// Engage the pause. Written to a temporary file and renamed, so a watcher never sees
/// a half-written file (it would still count as paused, but without its reason).
pub fn pause(path: &Path, reason: Option<&str>) -> io::Result<EstopInfo> {
    let info = EstopInfo {
        reason: reason.map(str::trim).filter(|r| !r.is_empty()).map(str::to_string),
        at: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_secs()),
    };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
    let tmp = tmp_path(path);
    let json = serde_json::to_string(&info).map_err(io::Error::other)?;
    std::fs::write(&tmp, json + "\n")
        .map_err(|e| io::Error::new(e.kind(), format!("cannot write {}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display()))
    })?;
    Ok(info)
}

/// Lift the pause. Returns whether it was paused.
pub fn unpause(path: &Path) -> io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io::Error::new(e.kind(), format!("cannot remove {}: {e}", path.display()))),
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "ESTOP".into());
    name.push(format!(".tmp{}", std::process::id()));
    path.with_file_name(name)
}

/// How often the watcher looks.
pub(crate) const WATCH_PERIOD: Duration = Duration::from_secs(1);

/// Watch the sentinel: a task stats it once a second and publishes the paused state on
/// the returned channel only when it changes. The task ends when every receiver is gone.
pub(crate) fn watch(path: PathBuf) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(is_paused(&path));
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(WATCH_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = tx.closed() => return,
            }
            let now = is_paused(&path);
            tx.send_if_modified(|paused| {
                let changed = *paused != now;
                *paused = now;
                changed
            });
        }
    });
    (rx, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn pause_read_unpause() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("home").join("ESTOP");
        assert!(!is_paused(&path));
        assert_eq!(read(&path), None);
        let info = pause(&path, Some("  lunch ")).unwrap();
        assert!(is_paused(&path));
        assert_eq!(info.reason.as_deref(), Some("lunch"));
        assert!(info.at.is_some());
        assert_eq!(read(&path), Some(info.clone()));
        assert_eq!(info.describe(), "paused — lunch");
        assert_eq!(unpause(&path).unwrap(), true);
        assert!(!is_paused(&path));
        assert_eq!(unpause(&path).unwrap(), false);
        let no_reason = pause(&path, None).unwrap();
        assert_eq!(no_reason.reason, None);
        assert_eq!(no_reason.describe(), "paused");
    }

    #[test]
    fn empty_or_corrupt_file_still_pauses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ESTOP");
        std::fs::write(&path, "").unwrap();
        assert!(is_paused(&path));
        assert_eq!(read(&path), Some(EstopInfo::default()));
        std::fs::write(&path, "{not json").unwrap();
        assert!(is_paused(&path));
        assert_eq!(read(&path), Some(EstopInfo::default()));
        std::fs::write(&path, r#"{"reason": 5}"#).unwrap();
        assert_eq!(read(&path), Some(EstopInfo::default()));
        std::fs::write(&path, r#"{"reason":"deploy","at":17,"extra":true}"#).unwrap();
        assert_eq!(read(&path), Some(EstopInfo { reason: Some("deploy".into()), at: Some(17) }));
    }

    #[tokio::test(start_paused = true)]
    async fn watcher_reports_changes_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ESTOP");
        let (mut rx, task) = watch(path.clone());
        assert!(!*rx.borrow_and_update());

        std::fs::write(&path, "").unwrap();
        tokio::time::timeout(Duration::from_secs(10), rx.changed()).await.unwrap().unwrap();
        assert!(*rx.borrow_and_update());

        // Ticks with no change publish nothing.
        for _ in 0..5 {
            tokio::time::advance(WATCH_PERIOD).await;
            tokio::task::yield_now().await;
        }
        assert!(!rx.has_changed().unwrap());

        unpause(&path).unwrap();
        tokio::time::timeout(Duration::from_secs(10), rx.changed()).await.unwrap().unwrap();
        assert!(!*rx.borrow_and_update());

        drop(rx);
        tokio::time::timeout(Duration::from_secs(10), task).await.unwrap().unwrap();
    }
}
