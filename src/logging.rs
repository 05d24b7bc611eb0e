//! Logging to a daily-rolling file under `logs/`; never to the terminal the TUI owns.

use std::path::Path;

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

/// Start file logging. Keep the guard alive until exit so buffered lines are flushed.
/// `TALARIA_LOG` sets the filter (default `info`).
pub fn init(logs_dir: &Path) -> anyhow::Result<WorkerGuard> {
    let appender = tracing_appender::rolling::daily(logs_dir, "talaria.log");
    let (writer, guard) = tracing_appender::non_blocking(appender);
    let filter = EnvFilter::try_from_env("TALARIA_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot start logging: {e}"))?;
    Ok(guard)
}
