//! Session ids, timestamps and titles: small pure helpers for the store.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Titles derived from the first user message are cut to this many characters.
pub(crate) const TITLE_MAX_CHARS: usize = 60;

/// Unix time in milliseconds, as SQLite stores it.
pub(crate) fn now_ms() -> i64 {
    i64::try_from(crate::util::now_ms()).unwrap_or(i64::MAX)
}

/// A short, sortable session id: UTC time to the second plus four hex digits,
/// e.g. `20261129-173000-3f2a`. Ids sort in creation order (to the second).
pub(crate) fn session_id_at(ms: i64, suffix: u16) -> String {
    let (y, mo, d, h, mi, s) = utc_parts(ms);
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}-{suffix:04x}")
}

/// Four hex digits that differ between calls, processes and runs: a randomly keyed
/// hash of the time in nanoseconds, the pid and a per-process counter.
pub(crate) fn random_suffix() -> u16 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (h.finish() & 0xffff) as u16
}

/// `YYYY-MM-DD HH:MM` in UTC.
pub(crate) fn format_utc_minute(ms: i64) -> String {
    let (y, mo, d, h, mi, _) = utc_parts(ms);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}")
}

/// (year, month, day, hour, minute, second) in UTC for Unix milliseconds.
fn utc_parts(ms: i64) -> (i64, u32, u32, u32, u32, u32) {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    (y, mo, d, (rem / 3600) as u32, (rem % 3600 / 60) as u32, (rem % 60) as u32)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The first non-empty line of `text` without escape sequences, trimmed and cut to
/// `max_chars` (with `…`).
pub(crate) fn first_line(text: &str, max_chars: usize) -> String {
    let text = crate::text::strip_ansi(text);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if line.chars().count() <= max_chars {
        return line.to_string();
    }
    let mut cut: String = line.chars().take(max_chars.saturating_sub(1)).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// The title a session gets from its first user message, if that message has any text.
pub(crate) fn derive_title(first_user_message: &str) -> Option<String> {
    let title = first_line(first_user_message, TITLE_MAX_CHARS);
    (!title.is_empty()).then_some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_utc_time_and_four_hex_digits() {
        // 2026-11-29 17:30:00 UTC
        let ms = 1_795_973_400_000;
        assert_eq!(session_id_at(ms, 0x3f2a), "20261129-173000-3f2a");
        assert_eq!(session_id_at(0, 0), "19700101-000000-0000");
        assert_eq!(format_utc_minute(ms + 59_999), "2026-11-29 17:30");
    }

    #[test]
    fn leap_days_and_year_ends_are_right() {
        assert_eq!(format_utc_minute(951_782_400_000), "2000-02-29 00:00");
        assert_eq!(format_utc_minute(1_704_067_199_000), "2023-12-31 23:59");
    }

    #[test]
    fn suffixes_vary() {
        let a: Vec<u16> = (0..16).map(|_| random_suffix()).collect();
        assert!(a.iter().any(|s| *s != a[0]), "{a:?}");
    }

    #[test]
    fn titles_are_the_first_line_cut_short() {
        assert_eq!(derive_title("\n  fix the build \nmore"), Some("fix the build".to_string()));
        assert_eq!(derive_title("   \n "), None);
        assert_eq!(derive_title("\x1b[1mbold\x1b[0m move"), Some("bold move".to_string()));
        let long = "word ".repeat(30);
        let t = derive_title(&long).unwrap();
        assert_eq!(t.chars().count(), TITLE_MAX_CHARS);
        assert!(t.ends_with("word…"), "{t}");
    }
}
