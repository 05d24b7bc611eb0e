//! Talaria follows a job instead of owning its pipes: it tails the log segments the
//! supervisor writes, and finishes the job when `exit.json` appears — or marks it `lost`
//! when its supervisor is gone without one. An inotify watch on the job directory wakes the
//! follower when anything there changes (output, rotation, exit record), so a quiet job
//! costs nothing but a supervisor check twice a second; where inotify is unavailable it
//! polls every few milliseconds instead. Either way output reaches the screen well under
//! 50 ms after the job wrote it.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

use super::jobdir::{self, ExitRecord, IndexFile, JobDir, LeaderExit};
use super::log::{LogIndex, Segment};
use super::output::{memchr_count, Utf8Decoder};
use super::{group, ExitInfo, Job, Registry};
use crate::engine::EventSink;
use crate::protocol::Event;

/// Poll intervals: short right after output, longer when the job is quiet.
const POLL_MIN: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(20);
/// At most one UI update per job per this interval (~20/s).
const EMIT_EVERY: Duration = Duration::from_millis(50);
/// How often the supervisor is checked for life (when no pidfd tells us it exited).
const SUPERVISOR_POLL: Duration = Duration::from_millis(500);
/// With a pidfd the check is a safety net only.
const SUPERVISOR_SAFETY_NET: Duration = Duration::from_secs(5);
/// Characters of tail an `Event::JobUpdated` carries.
const UPDATE_TAIL: usize = 2000;
/// Characters a coalesced `Event::ToolOutput` chunk carries at most.
const CHUNK_MAX: usize = 4000;
/// Bytes read per turn at most.
const READ_MAX: usize = 1 << 20;

/// An inotify instance watching one job directory.
struct Watched(Inotify);

impl AsRawFd for Watched {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// A pidfd: readable once its process has exited.
struct PidFd(OwnedFd);

impl AsRawFd for PidFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// What woke the follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woke {
    /// Something in the job directory changed (or the wait timed out).
    Directory,
    /// The supervisor exited: check it now.
    Supervisor,
}

/// Wakes the follower when the job directory changes (inotify: a log segment grows or
/// appears, `leader.json` / `exit.json` is written) or the supervisor exits (pidfd), so a
/// quiet job costs no polling.
pub(super) struct DirWatch {
    dir: AsyncFd<Watched>,
    supervisor: Option<AsyncFd<PidFd>>,
}

impl DirWatch {
    /// None where inotify cannot be used (no instances left, no such directory): the
    /// follower then polls. Without a pidfd for the supervisor (old kernel, already gone)
    /// its life is checked every [`SUPERVISOR_POLL`].
    pub(super) fn new(dir: &Path, supervisor: (i32, u64)) -> Option<DirWatch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        let mask = AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_DELETE_SELF;
        inotify.add_watch(dir, mask).ok()?;
        // SAFETY: `Watched` owns the inotify descriptor; nothing else closes or replaces it
        // while the `AsyncFd` holds it.
        let dir = unsafe { AsyncFd::register(Watched(inotify)) }.ok()?;
        Some(DirWatch { dir, supervisor: pidfd(supervisor.0, supervisor.1) })
    }

    /// How long the follower may sleep before it checks the supervisor itself.
    fn supervisor_poll(&self) -> Duration {
        if self.supervisor.is_some() {
            SUPERVISOR_SAFETY_NET
        } else {
            SUPERVISOR_POLL
        }
    }

    /// Until something in the directory changed since the last wait, the supervisor
    /// exited, or `timeout`.
    async fn wait(&self, timeout: Duration) -> Woke {
        let changed = async {
            loop {
                let Ok(mut guard) = self.dir.readable().await else { return };
                // Drain what is queued; readiness is cleared only once a read would block,
                // so a change that lands meanwhile still wakes the next wait.
                match guard.try_io(|fd| fd.get_ref().0.read_events().map_err(std::io::Error::from)) {
                    Ok(_) => return,
                    Err(_would_block) => continue,
                }
            }
        };
        let exited = async {
            match &self.supervisor {
                Some(fd) => {
                    let _ = fd.readable().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = changed => Woke::Directory,
            _ = exited => Woke::Supervisor,
            _ = tokio::time::sleep(timeout) => Woke::Directory,
        }
    }
}

/// A pidfd for `pid`, if it is still the process that started at `start` (clock ticks).
fn pidfd(pid: i32, start: u64) -> Option<AsyncFd<PidFd>> {
    if pid <= 0 {
        return None;
    }
    // SAFETY: a raw syscall with integer arguments; on success it returns a new descriptor
    // that we own from here on.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` is a descriptor pidfd_open just gave us and nobody else holds.
    let fd = PidFd(unsafe { OwnedFd::from_raw_fd(raw as RawFd) });
    // The pid might have been reused before it was opened: it must still be the supervisor.
    if !group::process_alive(pid, Some(start)) {
        return None;
    }
    // SAFETY: `PidFd` owns the descriptor; nothing else closes or replaces it.
    unsafe { AsyncFd::register(fd) }.ok()
}

/// Reads the segments in order as they grow, and keeps the index of what it has read.
/// Public for the performance guard's ingest workload (`examples/perf_guard.rs`).
pub struct LogReader {
    jd: JobDir,
    n: u64,
    file: Option<File>,
    decoder: Utf8Decoder,
    newlines: u64,
    at_line_start: bool,
    pub(super) index: LogIndex,
    buf: Vec<u8>,
}

impl LogReader {
    /// Start at the oldest kept segment (`index.json` says where it starts).
    pub fn open(jd: &JobDir) -> LogReader {
        let saved: IndexFile = jobdir::read_json(&jd.index()).unwrap_or_default();
        let (n, start_line, mid_line) =
            saved.segments.first().map(|s| (s.n, s.start_line, s.mid_line)).unwrap_or((0, 1, false));
        let mut reader = LogReader {
            jd: jd.clone(),
            n,
            file: None,
            decoder: Utf8Decoder::default(),
            newlines: start_line.saturating_sub(1),
            at_line_start: !mid_line,
            index: LogIndex { segments: Vec::new(), dropped_bytes: saved.dropped_bytes, end_line: 0 },
            buf: vec![0u8; 64 * 1024],
        };
        reader.try_open_current();
        reader
    }

    fn try_open_current(&mut self) -> bool {
        if self.file.is_some() {
            return true;
        }
        let path = self.jd.segment(self.n);
        match jobdir::open_read(&path) {
            Ok(f) => {
                self.file = Some(f);
                let mid_line = !self.at_line_start;
                self.index.segments.push(Segment { path, start_line: self.newlines + 1, bytes: 0, mid_line });
                if self.index.segments.len() > 2 {
                    let old = self.index.segments.remove(0);
                    self.index.dropped_bytes += old.bytes;
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Decoded text that arrived since the last call ("" when nothing new).
    pub fn read_some(&mut self) -> String {
        let mut out = String::new();
        let mut total = 0;
        loop {
            if !self.try_open_current() && !self.catch_up() {
                return out;
            }
            let Some(file) = self.file.as_mut() else { return out };
            let n = file.read(&mut self.buf).unwrap_or(0);
            if n > 0 {
                let bytes = &self.buf[..n];
                self.newlines += memchr_count(bytes, b'\n');
                self.at_line_start = bytes.last() == Some(&b'\n');
                if let Some(seg) = self.index.segments.last_mut() {
                    seg.bytes += n as u64;
                }
                self.index.end_line = self.newlines + u64::from(!self.at_line_start);
                out.push_str(&self.decoder.decode(bytes));
                total += n;
                if total >= READ_MAX {
                    return out;
                }
                continue;
            }
            // End of this segment: the supervisor starts the next one only once this one
            // is complete, so move on if it exists (or a later one, if we fell behind).
            if !self.next_segment() {
                return out;
            }
        }
    }

    fn next_segment(&mut self) -> bool {
        if self.jd.segment(self.n + 1).exists() {
            self.n += 1;
            self.file = None;
            return true;
        }
        self.catch_up()
    }

    /// Fell behind rotation: the segment we wanted is gone; go on at the oldest kept one.
    fn catch_up(&mut self) -> bool {
        let saved: IndexFile = jobdir::read_json(&self.jd.index()).unwrap_or_default();
        let wanted = if self.file.is_some() { self.n + 1 } else { self.n };
        if let Some(seg) = saved.segments.iter().find(|s| s.n > wanted && self.jd.segment(s.n).exists()) {
            self.n = seg.n;
            self.file = None;
            self.newlines = seg.start_line.saturating_sub(1);
            self.at_line_start = !seg.mid_line;
            self.index.segments.clear();
            self.index.dropped_bytes = saved.dropped_bytes;
            return self.try_open_current();
        }
        false
    }

    pub(super) fn finish(&mut self) -> String {
        self.decoder.finish()
    }
}

/// Follow a job until it ends: output into memory and events, then its exit.
pub(super) async fn follow(
    reg: Arc<Registry>,
    job: Arc<Job>,
    mut reader: LogReader,
    mut exit_tx: Option<oneshot::Sender<ExitInfo>>,
) {
    let jd = job.dir.clone();
    let events = reg.events.clone();
    let mut chunk = String::new();
    let mut dirty = false;
    let mut last_emit = Instant::now().checked_sub(EMIT_EVERY).unwrap_or_else(Instant::now);
    let mut interval = POLL_MIN;
    let mut last_supervisor_check = Instant::now();
    let mut leftover = false;
    let watch = DirWatch::new(&jd.path, job.supervisor);
    let supervisor_poll = watch.as_ref().map_or(SUPERVISOR_POLL, DirWatch::supervisor_poll);
    let mut check_supervisor = false;
    let exit = loop {
        if job.forgotten.is_cancelled() {
            return;
        }
        let text = reader.read_some();
        if !text.is_empty() {
            take_text(&job, &reader, &mut chunk, &text);
            reg.feed_watches(&job, &text);
            dirty = true;
            interval = POLL_MIN;
        } else {
            reg.quiet_watches(&job);
        }
        if dirty && last_emit.elapsed() >= EMIT_EVERY {
            emit(&job, &events, &mut chunk);
            last_emit = Instant::now();
            dirty = false;
        }
        if !text.is_empty() {
            tokio::task::yield_now().await;
            continue;
        }
        if job.remote.is_some() {
            reg.track_remote_link(&job);
        }
        // Nothing new in the log: has the job ended?
        if let Some(record) = jd.read_exit() {
            break ended(&reg, &job, &mut reader, &mut chunk, record, leftover);
        }
        if !leftover {
            leftover = leader_exited(&reg, &job, &mut exit_tx);
        }
        if check_supervisor || last_supervisor_check.elapsed() >= supervisor_poll {
            check_supervisor = false;
            last_supervisor_check = Instant::now();
            if !group::process_alive(job.supervisor.0, Some(job.supervisor.1)) && jd.read_exit().is_none() {
                // SIGKILLed supervisor: its leader died with it; the rest of the group
                // (identity checked) goes too, and the job is lost.
                super::records::kill_remains(job.pgid, job.leader_start, reg.kill_grace()).await;
                let rest = reader.read_some();
                take_text(&job, &reader, &mut chunk, &rest);
                reg.feed_watches(&job, &rest);
                break ExitInfo::lost();
            }
        }
        // A background job's output is shown at most once per EMIT_EVERY: while it is
        // chatty, the follower sleeps out the rest of that slot instead of waking for every
        // write the supervisor makes, and reads what piled up in one go (fewer wakeups, and
        // bigger reads are cheaper per byte). A foreground command's output and end are
        // not held back: a turn is waiting for them.
        let pace = job.state().background && job.remote.is_none();
        let rest_of_slot = EMIT_EVERY.saturating_sub(last_emit.elapsed());
        if dirty && (!pace || rest_of_slot.is_zero()) {
            emit(&job, &events, &mut chunk);
            last_emit = Instant::now();
            dirty = false;
        }
        let rest_of_slot = EMIT_EVERY.saturating_sub(last_emit.elapsed());
        match &watch {
            Some(_) if pace && !rest_of_slot.is_zero() => {
                tokio::time::sleep(rest_of_slot.min(supervisor_poll.saturating_sub(last_supervisor_check.elapsed())))
                    .await;
            }
            // Until the directory changes; the supervisor check still runs on time.
            Some(watch) => {
                let woke = watch.wait(supervisor_poll.saturating_sub(last_supervisor_check.elapsed())).await;
                check_supervisor = woke == Woke::Supervisor;
            }
            None => {
                tokio::time::sleep(interval).await;
                interval = (interval * 2).min(POLL_MAX);
            }
        }
    };
    if dirty || !chunk.is_empty() {
        emit(&job, &events, &mut chunk);
    }
    let mut exit = exit;
    exit.cwd = jd.read_cwd();
    // Watch notices come before the exit notice, in the order things happened.
    reg.end_watches(&job);
    reg.finish(&job, exit.clone()).await;
    if reg.agent_info(&job).is_some() {
        reg.start_queued_agents().await;
    }
    if let Some(tx) = exit_tx {
        let _ = tx.send(exit);
    }
}

/// The job wrote its exit record: everything was written before it, so read the rest, then
/// say how it ended.
fn ended(
    reg: &Registry,
    job: &Job,
    reader: &mut LogReader,
    chunk: &mut String,
    record: ExitRecord,
    leftover: bool,
) -> ExitInfo {
    loop {
        let text = reader.read_some();
        if text.is_empty() {
            break;
        }
        take_text(job, reader, chunk, &text);
        reg.feed_watches(job, &text);
    }
    let rest = reader.finish();
    take_text(job, reader, chunk, &rest);
    reg.feed_watches(job, &rest);
    let totals = record.output;
    job.state().output.settle_totals(totals.chars, totals.bytes, totals.lines);
    let killed = record.killed || job.kill_requested.load(Ordering::SeqCst);
    // A remote job its transport gave up on: lost, with why — never its exit 255.
    let gave_up = job.remote.as_ref().and_then(|_| super::run::remote_lost(&job.dir)).filter(|_| !killed);
    ExitInfo {
        code: record.code,
        signal: record.signal,
        killed,
        leftover,
        cwd: None,
        lost: gave_up.is_some(),
        reason: gave_up.or(record.reason),
    }
}

/// `cmd &`: the leader is done, its children are not. They go on as a background job under
/// the same id; the foreground call returns now. True once the leader has exited.
fn leader_exited(reg: &Registry, job: &Job, exit_tx: &mut Option<oneshot::Sender<ExitInfo>>) -> bool {
    let jd = &job.dir;
    let Some(leader) = jobdir::read_json::<LeaderExit>(&jd.leader()) else { return false };
    if !job.kill_requested.load(Ordering::SeqCst) {
        reg.make_background(job);
        if let Some(tx) = exit_tx.take() {
            let exit = ExitInfo {
                code: leader.code,
                signal: leader.signal,
                killed: false,
                leftover: true,
                cwd: jd.read_cwd(),
                reason: None,
                lost: false,
            };
            let _ = tx.send(exit);
        }
    }
    true
}

fn take_text(job: &Job, reader: &LogReader, chunk: &mut String, text: &str) {
    let mut st = job.state();
    if st.log != reader.index {
        st.log = reader.index.clone();
    }
    if text.is_empty() {
        return;
    }
    st.output.push(text);
    if st.call_id.is_some() && !st.background {
        chunk.push_str(text);
        if chunk.len() > 2 * CHUNK_MAX {
            let keep = crate::text::tail_chars(chunk, CHUNK_MAX).to_string();
            *chunk = keep;
        }
    }
}

fn emit(job: &Job, events: &EventSink, chunk: &mut String) {
    let event = {
        let st = job.state();
        if st.background {
            chunk.clear();
            if !st.announced {
                return;
            }
            Event::JobUpdated {
                id: job.id.clone(),
                status: st.status.clone(),
                tail: crate::text::tail_chars(st.output.tail(), UPDATE_TAIL).to_string(),
            }
        } else {
            let Some(call_id) = st.call_id.clone() else { return };
            if chunk.is_empty() {
                return;
            }
            let text = std::mem::take(chunk);
            Event::ToolOutput { call_id, chunk: crate::text::tail_chars(&text, CHUNK_MAX).to_string() }
        }
    };
    events.send(event);
}
