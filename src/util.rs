//! The one place for small things every layer needs: taking a lock, the time now (and as
//! a wall clock), and a duration as a person reads it.

use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lock `m`; a panic elsewhere while it was held does not poison it for everyone else.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Now, in unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

/// A job's runtime as notices and `talaria jobs` show it (`4.2s`, `3m12s`, `2h05m`).
pub(crate) fn format_duration(d: std::time::Duration) -> String {
    format_duration_ms(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `250ms`, `3.2s`, `2m05s`, `2h05m`: how the transcript, the job pane and job notices
/// show a duration.
pub(crate) fn format_duration_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

/// `HH:MM` of a unix-ms time at a UTC offset.
pub fn clock_hhmm(unix_ms: u64, utc_offset_s: i64) -> String {
    let secs = (unix_ms / 1000) as i64 + utc_offset_s;
    let of_day = secs.rem_euclid(86_400);
    format!("{:02}:{:02}", of_day / 3600, (of_day % 3600) / 60)
}

/// The local time zone's offset from UTC at `unix_ms`, in seconds (0 when unknown).
pub fn local_utc_offset_s(unix_ms: u64) -> i64 {
    use chrono::{Offset, TimeZone};
    let secs = i64::try_from(unix_ms / 1000).unwrap_or(i64::MAX);
    match chrono::Local.timestamp_opt(secs, 0) {
        chrono::LocalResult::Single(t) | chrono::LocalResult::Ambiguous(t, _) => {
            i64::from(t.offset().fix().local_minus_utc())
        }
        chrono::LocalResult::None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration_ms(250), "250ms");
        assert_eq!(format_duration_ms(3_200), "3.2s");
        assert_eq!(format_duration_ms(125_000), "2m05s");
        assert_eq!(format_duration_ms(7_500_000), "2h05m");
    }

    #[test]
    fn a_poisoned_lock_still_locks() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison it");
        })
        .join();
        assert_eq!(*lock(&m), 1);
    }
}

/// How far tests have moved the heartbeat's clock ahead (`testkit::clock`); kept in this
/// leaf so the heartbeat reads it without naming the test kit.
#[cfg(any(test, feature = "testkit"))]
pub(crate) mod heartbeat_skew {
    use std::sync::atomic::{AtomicU64, Ordering};

    static SKEW_MS: AtomicU64 = AtomicU64::new(0);

    pub(crate) fn get() -> u64 {
        SKEW_MS.load(Ordering::SeqCst)
    }

    pub(crate) fn advance(ms: u64) {
        SKEW_MS.fetch_add(ms, Ordering::SeqCst);
    }
}
