//! Logging to a daily file under `logs/` (`talaria.log.YYYY-MM-DD`), created 0600 like
//! `state.db`: it may hold commands, paths and provider errors. Never to the terminal the
//! TUI owns.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

/// Log lines waiting for the writer thread at most.
const LOG_QUEUE_LINES: usize = 8_192;

/// Start file logging. Keep the guard alive until exit so buffered lines are flushed.
/// `TALARIA_LOG` sets the filter (default `info`).
pub fn init(logs_dir: &Path) -> anyhow::Result<WorkerGuard> {
    let file = PrivateDailyFile { dir: logs_dir.to_path_buf(), day: None, file: None };
    // The default queue (128,000 lines) is a channel whose slots are all written when it is
    // made: 4 MiB of resident memory for a log of a few lines a minute. 8,192 lines take 256
    // KiB; a burst beyond them while the file is slow is dropped (lossy), never waited for.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .lossy(true)
        .finish(file);
    let filter = EnvFilter::try_from_env("TALARIA_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot start logging: {e}"))?;
    Ok(guard)
}

/// `kill -USR1 <talaria>` writes the async runtime's counters to the log (alive tasks,
/// workers): what a long-running talaria holds, for a leak hunt or the soak benchmark
/// (`benches/soak.rs`). Nothing runs until the signal comes.
pub async fn runtime_counters_on_usr1() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut usr1) = signal(SignalKind::user_defined1()) else { return };
    while usr1.recv().await.is_some() {
        let metrics = tokio::runtime::Handle::current().metrics();
        tracing::info!(
            alive_tasks = metrics.num_alive_tasks(),
            workers = metrics.num_workers(),
            global_queue = metrics.global_queue_depth(),
            "runtime counters"
        );
    }
}

/// Appends to `<dir>/talaria.log.<UTC date>`, opening the next day's file (mode 0600) when
/// the date changes.
struct PrivateDailyFile {
    dir: PathBuf,
    day: Option<String>,
    file: Option<File>,
}

impl PrivateDailyFile {
    fn current(&mut self) -> std::io::Result<&mut File> {
        let today = utc_date(SystemTime::now());
        if self.day.as_deref() != Some(today.as_str()) || self.file.is_none() {
            let path = self.dir.join(format!("talaria.log.{today}"));
            let file = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&path)?;
            self.file = Some(file);
            self.day = Some(today);
        }
        self.file.as_mut().ok_or_else(|| std::io::Error::other("no log file"))
    }
}

impl Write for PrivateDailyFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.current()?.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

/// `YYYY-MM-DD` in UTC (civil-from-days, H. Hinnant).
fn utc_date(t: SystemTime) -> String {
    let days = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs() / 86_400).unwrap_or(0) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    #[test]
    fn dates_and_a_private_file() {
        assert_eq!(utc_date(UNIX_EPOCH), "1970-01-01");
        assert_eq!(utc_date(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29");
        assert_eq!(utc_date(UNIX_EPOCH + Duration::from_secs(1_796_083_200)), "2026-12-01");
        let dir = tempfile::tempdir().unwrap();
        let mut log = PrivateDailyFile { dir: dir.path().to_path_buf(), day: None, file: None };
        log.write_all(b"a line\n").unwrap();
        let path = dir.path().join(format!("talaria.log.{}", utc_date(SystemTime::now())));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a line\n");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
