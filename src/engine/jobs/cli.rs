//! `talaria jobs [list|log <id> [--follow]|kill <id>] [--json]`: the job records of
//! every session from any shell. Records are brought up to date first (an exit recorded
//! while no talaria was alive is folded in; a job whose supervisor vanished is `lost`).

use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

use serde_json::json;

use super::jobdir::{IndexFile, JobDir};
use super::log::{read_lines, LogIndex, Segment};
use super::output::memchr_count;
use super::records::{end_from_exit, group_is_ours, kill_remains, lost_end, supervisor_alive};
use super::{group, jobdir, now_ms};
use crate::config::Config;
use crate::engine::store::jobs::{JobRow, RecordStatus};
use crate::engine::store::Store;
use crate::paths::Paths;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobsCli {
    List { limit: usize },
    Log { id: String, lines: usize, follow: bool },
    Kill { id: String },
}

/// Run one `talaria jobs` command; returns the exit code. On a terminal, what jobs
/// printed and the commands they ran are shown without escape sequences, C1 or bidi
/// controls (a job's OSC 52 must not reach the clipboard, nor a title the window);
/// `raw` (`--raw`) or a pipe gets the bytes as they are, `json` is never touched.
pub async fn run(
    paths: &Paths,
    config: &Config,
    store: &Store,
    action: JobsCli,
    json: bool,
    raw: bool,
) -> anyhow::Result<i32> {
    use std::io::IsTerminal;
    let sanitise = !raw && !json && std::io::stdout().is_terminal();
    let shown = |text: &str| if sanitise { crate::text::for_terminal(text) } else { text.to_string() };
    let grace = Duration::from_secs_f64(config.terminal.kill_grace_s.max(0.0));
    refresh(paths, store, grace).await?;
    match action {
        JobsCli::List { limit } => {
            let rows = store.jobs_recent(None, limit).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else if rows.is_empty() {
                println!("no jobs");
            } else {
                // On a terminal a row also fits its width: one line per job, whatever it runs.
                use std::io::IsTerminal;
                let width = std::io::stdout()
                    .is_terminal()
                    .then(|| crossterm::terminal::size().ok().map(|(w, _)| usize::from(w)))
                    .flatten();
                for row in &rows {
                    println!("{}", shown(&list_line(row, width)));
                }
            }
            Ok(0)
        }
        JobsCli::Log { id, lines, follow } => {
            let Some(row) = find(store, &id).await? else { return not_found(&id) };
            let jd = JobDir::new(&paths.jobs_dir, &row.id());
            let index = disk_index(&jd);
            let view = read_lines(&index, None, lines.max(1));
            let following = follow && row.status == RecordStatus::Running;
            if json {
                let value = json!({
                    "session_id": row.id(), "status": row.status, "output": view.text,
                    "first_line": view.first_line, "from": view.from, "to": view.to,
                });
                println!("{value}");
            } else if !view.text.is_empty() {
                // Following a line the job has not finished: the rest comes next, on it.
                let unfinished = following && ends_mid_line(&index);
                print!("{}{}", shown(&view.text), if unfinished { "" } else { "\n" });
                std::io::stdout().flush()?;
            }
            if following && !follow_log(&jd, &index, &row, sanitise)? {
                eprintln!("talaria: {}'s supervisor is gone without recording an exit: the job is lost", row.id());
                return Ok(1);
            }
            Ok(0)
        }
        JobsCli::Kill { id } => {
            let Some(row) = find(store, &id).await? else { return not_found(&id) };
            let killed = row.status == RecordStatus::Running && kill_row(paths, store, &row, grace).await?;
            let status = store.job_get(row.num).await?.map(|r| r.status.as_str()).unwrap_or_default();
            if json {
                println!("{}", json!({ "session_id": row.id(), "killed": killed, "status": status }));
            } else if killed {
                println!("{}: killed", row.id());
            } else {
                println!("{}: not running ({status})", row.id());
            }
            Ok(0)
        }
    }
}

fn not_found(id: &str) -> anyhow::Result<i32> {
    eprintln!("talaria: no job with id {id}; `talaria jobs list` shows them");
    Ok(1)
}

async fn find(store: &Store, id: &str) -> anyhow::Result<Option<JobRow>> {
    let id = id.trim();
    let Ok(num) = id.strip_prefix("job_").unwrap_or(id).parse::<i64>() else { return Ok(None) };
    Ok(store.job_get(num).await?)
}

/// One row of `jobs list`; `width`: the terminal's, which the row then fits.
fn list_line(row: &JobRow, width: Option<usize>) -> String {
    let end = row.ended_at.unwrap_or(now_ms() as i64);
    let runtime = super::format_duration(Duration::from_millis((end - row.started_at).max(0) as u64));
    let status = match (row.status.as_str(), row.exit_code, row.reason.as_deref()) {
        ("exited", Some(code), _) => format!("exited {code}"),
        (s, _, Some(reason)) => format!("{s} ({reason})"),
        (s, _, _) => s.to_string(),
    };
    let full = format!("{:<8} {:<22} {:>8}  {}  ", row.id(), status, runtime, row.session_id);
    // A narrow terminal gets the command rather than the session column.
    let head = match width {
        Some(w) if full.chars().count() + 20 > w => format!("{:<8} {:<16} {:>8}  ", row.id(), status, runtime),
        _ => full,
    };
    let room =
        width.map_or(LIST_COMMAND_CHARS, |w| w.saturating_sub(head.chars().count()).clamp(12, LIST_COMMAND_CHARS));
    format!("{head}{}", one_line(&row.command, room))
}

/// Characters of a command a `jobs list` row shows.
const LIST_COMMAND_CHARS: usize = 60;

/// `text` on one line (whitespace runs, newlines too, as one space), cut with `…` after
/// `max` characters: a row of `jobs list` is one line whatever the command.
fn one_line(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Fold what supervisors recorded into the rows still marked running.
async fn refresh(paths: &Paths, store: &Store, grace: Duration) -> anyhow::Result<()> {
    let boot = jobdir::boot_id();
    for row in store.jobs_running().await? {
        let jd = JobDir::new(&paths.jobs_dir, &row.id());
        if row.boot_id != boot {
            store.job_finish(row.num, lost_end()).await?;
        } else if let Some(exit) = jd.read_exit() {
            store.job_finish(row.num, end_from_exit(&paths.jobs_dir, &row, &exit)).await?;
        } else if row.supervisor_pid.is_some() && !supervisor_alive(&row) {
            if let (Some(pgid), Some(start)) = (row.pgid, row.leader_start) {
                kill_remains(pgid as i32, start as u64, grace).await;
            }
            store.job_finish(row.num, lost_end()).await?;
        }
    }
    Ok(())
}

/// Kill a running job's group (identity checked) and wait for its exit record.
async fn kill_row(paths: &Paths, store: &Store, row: &JobRow, grace: Duration) -> anyhow::Result<bool> {
    let (Some(pgid), Some(start)) = (row.pgid, row.leader_start) else { return Ok(false) };
    let pgid = pgid as i32;
    if !group_is_ours(pgid, start as u64) || !supervisor_alive(row) {
        return Ok(false);
    }
    let jd = JobDir::new(&paths.jobs_dir, &row.id());
    jd.write_kill("")?;
    group::kill_group(pgid, grace).await;
    let deadline = std::time::Instant::now() + grace + Duration::from_secs(10);
    while jd.read_exit().is_none() && std::time::Instant::now() < deadline && supervisor_alive(row) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match jd.read_exit() {
        Some(exit) => {
            let mut end = end_from_exit(&paths.jobs_dir, row, &exit);
            // Killed from a shell on purpose: nobody needs telling.
            end.notified = true;
            store.job_finish(row.num, end).await?;
        }
        None => {
            store.job_finish(row.num, lost_end()).await?;
        }
    }
    Ok(true)
}

/// The kept log as it is on disk now (the last line counted, not the whole log).
pub(super) fn disk_index(jd: &JobDir) -> LogIndex {
    let saved: IndexFile = jobdir::read_json(&jd.index()).unwrap_or_default();
    let mut segments: Vec<Segment> = saved
        .segments
        .iter()
        .map(|s| {
            let path = jd.segment(s.n);
            let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            Segment { path, start_line: s.start_line, bytes, mid_line: s.mid_line }
        })
        .collect();
    if segments.is_empty() {
        let path = jd.segment(0);
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        segments.push(Segment { path, start_line: 1, bytes, mid_line: false });
    }
    let mut end_line = 0;
    if let Some(last) = segments.last() {
        let (newlines, ends_nl) = count_newlines(&last.path, last.bytes);
        end_line = last.start_line - 1 + newlines + u64::from(last.bytes > 0 && !ends_nl);
    }
    LogIndex { segments, dropped_bytes: saved.dropped_bytes, end_line }
}

/// The log's last byte is not a newline: its last line is not finished yet.
fn ends_mid_line(index: &LogIndex) -> bool {
    let Some(last) = index.segments.iter().rev().find(|s| s.bytes > 0) else { return false };
    let Ok(mut file) = super::jobdir::open_read(&last.path) else { return false };
    let mut byte = [0u8; 1];
    file.seek(SeekFrom::Start(last.bytes - 1)).is_ok() && file.read_exact(&mut byte).is_ok() && byte[0] != b'\n'
}

fn count_newlines(path: &std::path::Path, bytes: u64) -> (u64, bool) {
    let Ok(file) = super::jobdir::open_read(path) else { return (0, true) };
    let mut reader = file.take(bytes);
    let mut buf = vec![0u8; 256 * 1024];
    let (mut n, mut last) = (0, b'\n');
    while let Ok(got) = reader.read(&mut buf) {
        if got == 0 {
            break;
        }
        n += memchr_count(&buf[..got], b'\n');
        last = buf[got - 1];
    }
    (n, last == b'\n')
}

/// Print what the job writes from the end of `index` on, until its exit record appears
/// (true), or until its supervisor is gone without one (false: nothing will ever end it).
fn follow_log(jd: &JobDir, index: &LogIndex, row: &JobRow, sanitise: bool) -> anyhow::Result<bool> {
    let mut n: u64 = index
        .segments
        .last()
        .and_then(|s| s.path.file_name()?.to_str()?.strip_prefix("out.")?.strip_suffix(".log")?.parse().ok())
        .unwrap_or(0);
    let mut offset = index.segments.last().map(|s| s.bytes).unwrap_or(0);
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    // Sanitised output goes out a whole line at a time: an escape sequence may span reads.
    let mut pending: Vec<u8> = Vec::new();
    let mut emit = |out: &mut std::io::StdoutLock, bytes: &[u8], last: bool| -> std::io::Result<()> {
        if !sanitise {
            return out.write_all(bytes);
        }
        pending.extend_from_slice(bytes);
        let cut = if last { pending.len() } else { pending.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1) };
        let text = String::from_utf8_lossy(&pending[..cut]).into_owned();
        pending.drain(..cut);
        out.write_all(crate::text::for_terminal(&text).as_bytes())
    };
    loop {
        let exited = jd.exit().exists();
        let mut got_any = false;
        if let Ok(mut file) = super::jobdir::open_read(&jd.segment(n)) {
            file.seek(SeekFrom::Start(offset))?;
            loop {
                let got = file.read(&mut buf)?;
                if got == 0 {
                    break;
                }
                emit(&mut out, &buf[..got], false)?;
                offset += got as u64;
                got_any = true;
            }
            out.flush()?;
        }
        if jd.segment(n + 1).exists() {
            n += 1;
            offset = 0;
            continue;
        }
        if exited && !got_any {
            emit(&mut out, &[], true)?;
            out.flush()?;
            return Ok(true);
        }
        // The supervisor records the exit before it exits: gone with none on disk, lost.
        let gone = row.supervisor_pid.is_some() && !supervisor_alive(row);
        if !exited && !got_any && gone && !jd.exit().exists() {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn row(command: &str) -> JobRow {
        JobRow {
            num: 7,
            session_id: "20261201-120000-abcd".into(),
            command: command.into(),
            cwd: "/w".into(),
            backend: "local".into(),
            background: true,
            has_stdin: false,
            pgid: None,
            leader_start: None,
            supervisor_pid: None,
            supervisor_start: None,
            boot_id: "b".into(),
            status: RecordStatus::Exited,
            exit_code: Some(0),
            signal: None,
            reason: None,
            started_at: 1_000,
            ended_at: Some(6_000),
            notice: None,
            notified: true,
        }
    }

    /// A long command used to be cut with the model's marker, which put the row over five
    /// lines (`... [OUTPUT TRUNCATED - 5 chars omitted out of 65 total] ...`).
    #[test]
    fn a_list_row_is_one_line_with_the_command_cut_by_an_ellipsis() {
        let command = format!("for i in $(seq 1 120); do\n  echo \"tick $i\"; sleep 1; done # {}", "x".repeat(40));
        let line = list_line(&row(&command), None);
        assert_eq!(line.lines().count(), 1, "{line:?}");
        assert!(!line.contains("TRUNCATED"), "{line}");
        assert!(line.ends_with("for i in $(seq 1 120); do echo \"tick $i\"; sleep 1; done # x…"), "{line}");
        assert_eq!(line.split("  ").last().map(|c| c.chars().count()), Some(LIST_COMMAND_CHARS));
        let short = list_line(&row("make test"), None);
        assert!(short.starts_with("job_7    exited 0") && short.ends_with("  make test"), "{short}");
        // On a 70-column terminal the row is cut to 70 columns.
        let narrow = list_line(&row(&command), Some(70));
        assert_eq!(narrow.chars().count(), 70, "{narrow}");
        assert!(narrow.ends_with('…'), "{narrow}");
    }
}
