//! Watch patterns (DESIGN §4c): a regex on a job's output, matched against each line as a
//! terminal shows it (`emulate::LineFeed`), never against raw bytes with escapes in them.
//! A match becomes a notice — to the model (a user message, delivered like an exit notice)
//! or, for a watch the user set in the log view, to the user. A [`Limiter`] per watch keeps
//! a noisy job from flooding the conversation: one notice per cooldown, matches inside it
//! counted and reported with the next notice ("+12 more"), and a cap of notices, after
//! which the watch ends. Pure apart from the regex: time comes in as milliseconds.

use regex::{Regex, RegexBuilder};

use crate::emulate::LineFeed;

/// Watches one job can have at once.
pub(crate) const MAX_WATCHES: usize = 8;
/// Characters a pattern may have.
const PATTERN_MAX: usize = 500;
/// Characters of the matching line a notice carries.
const LINE_MAX: usize = 500;
/// A line still being written (no line feed yet: a prompt, a bar) is matched once the job
/// has been quiet this long.
pub(crate) const PARTIAL_QUIET_MS: u64 = 300;

/// Who set a watch, and so who is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchOwner {
    /// `process(action='watch')`: the model gets a notice.
    Model,
    /// `w` in the log view: the user is told (transcript notice, bell / OSC 9).
    User,
}

impl WatchOwner {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            WatchOwner::Model => "model",
            WatchOwner::User => "user",
        }
    }
}

/// `jobs.watch_cooldown_s` and `jobs.watch_max_notices`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub cooldown_ms: u64,
    pub max_notices: u32,
}

/// A notice a watch sends: the line it shows, how many other matches it stands for, and
/// whether it is the last one the watch may send (the cap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fire {
    pub(crate) line: String,
    pub(crate) more: u64,
    pub(crate) last: bool,
}

/// The rate limit of one watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limiter {
    limits: Limits,
    sent: u32,
    last_sent_ms: Option<u64>,
    /// Matches since the last notice (inside the cooldown), and the first of them.
    folded: u64,
    folded_line: Option<String>,
    /// Every match, notified or not.
    pub(crate) matches: u64,
}

impl Limiter {
    pub(crate) fn new(limits: Limits) -> Limiter {
        Limiter { limits, sent: 0, last_sent_ms: None, folded: 0, folded_line: None, matches: 0 }
    }

    pub(crate) fn sent(&self) -> u32 {
        self.sent
    }

    /// The cap was reached: the watch ends.
    pub(crate) fn exhausted(&self) -> bool {
        self.sent >= self.limits.max_notices.max(1)
    }

    fn cooled(&self, now_ms: u64) -> bool {
        self.last_sent_ms.is_none_or(|at| now_ms.saturating_sub(at) >= self.limits.cooldown_ms)
    }

    fn send(&mut self, now_ms: u64, line: String, more: u64) -> Fire {
        self.sent += 1;
        self.last_sent_ms = Some(now_ms);
        self.folded = 0;
        self.folded_line = None;
        Fire { line, more, last: self.exhausted() }
    }

    /// A line matched: a notice now, or counted for the next one.
    pub(crate) fn on_match(&mut self, now_ms: u64, line: &str) -> Option<Fire> {
        self.matches += 1;
        if self.exhausted() {
            return None;
        }
        if self.cooled(now_ms) {
            // Matches folded earlier and not yet reported go with this one.
            return Some(match self.folded_line.take() {
                Some(first) => {
                    let more = self.folded;
                    self.send(now_ms, first, more)
                }
                None => self.send(now_ms, line.to_string(), 0),
            });
        }
        self.folded += 1;
        if self.folded_line.is_none() {
            self.folded_line = Some(line.to_string());
        }
        None
    }

    /// Time passed: when the cooldown is over, the matches it held back go out as one
    /// notice (the first of them, "+N more").
    pub(crate) fn tick(&mut self, now_ms: u64) -> Option<Fire> {
        if self.folded == 0 || self.exhausted() || !self.cooled(now_ms) {
            return None;
        }
        let line = self.folded_line.take().unwrap_or_default();
        let more = self.folded - 1;
        Some(self.send(now_ms, line, more))
    }

    /// The job ended: what the cooldown still holds goes out now.
    pub(crate) fn flush(&mut self, now_ms: u64) -> Option<Fire> {
        if self.folded == 0 || self.exhausted() {
            return None;
        }
        let line = self.folded_line.take().unwrap_or_default();
        let more = self.folded - 1;
        Some(self.send(now_ms, line, more))
    }
}

/// One pattern on one job.
#[derive(Debug)]
pub(crate) struct Watch {
    pub(crate) pattern: String,
    regex: Regex,
    pub(crate) owner: WatchOwner,
    pub(crate) limiter: Limiter,
}

/// What `process(action='watch')` lists about a watch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct WatchInfo {
    pub(crate) pattern: String,
    pub(crate) set_by: &'static str,
    pub(crate) matches: u64,
    pub(crate) notices: u32,
    pub(crate) max_notices: u32,
}

/// A notice to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub(crate) owner: WatchOwner,
    pub(crate) pattern: String,
    pub(crate) fire: Fire,
}

/// Compile a pattern as a watch uses it; the error says what is wrong in words.
pub(crate) fn compile(pattern: &str) -> Result<Regex, String> {
    if pattern.chars().count() > PATTERN_MAX {
        return Err(format!("the pattern is longer than {PATTERN_MAX} characters"));
    }
    RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| format!("bad pattern /{pattern}/: {e}"))
}

/// The watches of one job and the line feed they read.
#[derive(Default)]
pub struct Watches {
    list: Vec<Watch>,
    lines: Option<LineFeed>,
    /// The unfinished line last matched (it is not matched again when it is finished as is).
    partial_seen: Option<String>,
    last_output_ms: u64,
}

/// Why a watch could not be added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddError {
    BadPattern(String),
    TooMany,
}

impl Watches {
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(crate) fn infos(&self) -> Vec<WatchInfo> {
        self.list
            .iter()
            .map(|w| WatchInfo {
                pattern: w.pattern.clone(),
                set_by: w.owner.as_str(),
                matches: w.limiter.matches,
                notices: w.limiter.sent(),
                max_notices: w.limiter.limits.max_notices.max(1),
            })
            .collect()
    }

    /// The patterns set by `owner`.
    pub(crate) fn patterns(&self, owner: WatchOwner) -> Vec<String> {
        self.list.iter().filter(|w| w.owner == owner).map(|w| w.pattern.clone()).collect()
    }

    /// Add a watch (the same pattern by the same owner starts again). `partial` is the
    /// job's unfinished last line, so a line half written before the watch is matched whole.
    /// Returns whether it replaced one.
    pub fn add(&mut self, pattern: &str, owner: WatchOwner, limits: Limits, partial: &str) -> Result<bool, AddError> {
        let regex = compile(pattern).map_err(AddError::BadPattern)?;
        let replaced = self.remove(owner, Some(pattern)) > 0;
        if self.list.len() >= MAX_WATCHES {
            return Err(AddError::TooMany);
        }
        if self.lines.is_none() {
            let mut feed = LineFeed::new();
            feed.feed(partial);
            self.lines = Some(feed);
        }
        self.list.push(Watch { pattern: pattern.to_string(), regex, owner, limiter: Limiter::new(limits) });
        Ok(replaced)
    }

    /// Remove `owner`'s watch with `pattern`, or all of `owner`'s; how many went.
    pub(crate) fn remove(&mut self, owner: WatchOwner, pattern: Option<&str>) -> usize {
        let before = self.list.len();
        self.list.retain(|w| w.owner != owner || pattern.is_some_and(|p| p != w.pattern));
        if self.list.is_empty() {
            self.lines = None;
            self.partial_seen = None;
        }
        before - self.list.len()
    }

    /// New output arrived.
    pub fn feed(&mut self, text: &str, now_ms: u64) -> Vec<Hit> {
        let Some(feed) = self.lines.as_mut() else { return Vec::new() };
        if text.is_empty() {
            return Vec::new();
        }
        self.last_output_ms = now_ms;
        let lines = feed.feed(text);
        let mut hits = Vec::new();
        for line in lines {
            if self.partial_seen.take().is_some_and(|seen| seen == line) {
                continue;
            }
            self.match_line(&line, now_ms, &mut hits);
        }
        self.drop_exhausted();
        hits
    }

    /// No new output: cooldowns that ended release what they held back, and a line left
    /// unfinished for a while (a prompt) is matched.
    pub(crate) fn quiet(&mut self, now_ms: u64) -> Vec<Hit> {
        let mut hits = Vec::new();
        if self.list.is_empty() {
            return hits;
        }
        if now_ms.saturating_sub(self.last_output_ms) >= PARTIAL_QUIET_MS {
            self.match_partial(now_ms, &mut hits);
        }
        for w in &mut self.list {
            if let Some(fire) = w.limiter.tick(now_ms) {
                hits.push(Hit { owner: w.owner, pattern: w.pattern.clone(), fire });
            }
        }
        self.drop_exhausted();
        hits
    }

    /// The job ended (all its output was fed): the unfinished last line is matched, held
    /// back matches go out, and the watches end with the job.
    pub(crate) fn end(&mut self, now_ms: u64) -> Vec<Hit> {
        let mut hits = Vec::new();
        self.match_partial(now_ms, &mut hits);
        for w in &mut self.list {
            if let Some(fire) = w.limiter.flush(now_ms) {
                hits.push(Hit { owner: w.owner, pattern: w.pattern.clone(), fire });
            }
        }
        self.list.clear();
        self.lines = None;
        hits
    }

    fn match_partial(&mut self, now_ms: u64, hits: &mut Vec<Hit>) {
        let Some(feed) = self.lines.as_ref() else { return };
        let line = feed.pending();
        if line.is_empty() || self.partial_seen.as_deref() == Some(line.as_str()) {
            return;
        }
        let before = hits.len();
        self.match_line(&line, now_ms, hits);
        // Only a line that matched is remembered, so its finished form is not told twice.
        if hits.len() > before || self.list.iter().any(|w| w.regex.is_match(&line)) {
            self.partial_seen = Some(line);
        }
    }

    fn match_line(&mut self, line: &str, now_ms: u64, hits: &mut Vec<Hit>) {
        for w in &mut self.list {
            if w.limiter.exhausted() || !w.regex.is_match(line) {
                continue;
            }
            let shown = crate::text::truncate_for_model(line, LINE_MAX);
            if let Some(fire) = w.limiter.on_match(now_ms, &shown) {
                hits.push(Hit { owner: w.owner, pattern: w.pattern.clone(), fire });
            }
        }
    }

    fn drop_exhausted(&mut self) {
        self.list.retain(|w| !w.limiter.exhausted());
        if self.list.is_empty() {
            self.lines = None;
            self.partial_seen = None;
        }
    }
}

/// The notice the model gets (DESIGN §4c): `[Job <id> matched /<pattern>/: <line>]`, with
/// the matches folded into it and, on the last one, that the watch has ended.
pub(crate) fn notice_text(id: &str, pattern: &str, fire: &Fire, max_notices: u32) -> String {
    let more = if fire.more > 0 { format!(" (+{} more)", fire.more) } else { String::new() };
    let end = if fire.last {
        format!(
            ". This watch has sent its {max_notices} notices (jobs.watch_max_notices) and has ended; \
             process(action='watch') sets it again"
        )
    } else {
        String::new()
    };
    format!("[Job {id} matched /{pattern}/: {}{more}{end}]", fire.line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const LIMITS: Limits = Limits { cooldown_ms: 10_000, max_notices: 3 };

    fn fire(line: &str, more: u64, last: bool) -> Option<Fire> {
        Some(Fire { line: line.to_string(), more, last })
    }

    #[test]
    fn the_first_match_goes_out_at_once_and_the_cooldown_folds_the_rest() {
        let mut l = Limiter::new(LIMITS);
        assert_eq!(l.on_match(1_000, "error: a"), fire("error: a", 0, false));
        for (i, t) in (1_100..1_100 + 12).enumerate() {
            assert_eq!(l.on_match(t, &format!("error: b{i}")), None);
        }
        assert_eq!(l.tick(10_999), None, "still cooling down");
        // The cooldown ends: the first held-back match, with the count of the others.
        assert_eq!(l.tick(11_000), fire("error: b0", 11, false));
        assert_eq!(l.tick(30_000), None, "nothing held back");
        assert_eq!(l.matches, 13);
    }

    #[test]
    fn a_match_after_the_cooldown_carries_what_was_held_back() {
        let mut l = Limiter::new(LIMITS);
        l.on_match(0, "x1");
        l.on_match(5, "x2");
        l.on_match(6, "x3");
        // No tick came in between (a busy follower): the next match reports them.
        assert_eq!(l.on_match(20_000, "x4"), fire("x2", 2, false));
    }

    #[test]
    fn the_cap_ends_the_watch() {
        let mut l = Limiter::new(LIMITS);
        let mut fires = Vec::new();
        let mut now = 0;
        // A flood: 10,000 matches, one every millisecond, with ticks as the follower does.
        for i in 0..10_000u64 {
            now = i;
            fires.extend(l.on_match(now, "boom"));
            fires.extend(l.tick(now));
        }
        fires.extend(l.flush(now));
        assert_eq!(
            fires,
            vec![
                Fire { line: "boom".into(), more: 0, last: false },
                Fire { line: "boom".into(), more: 9_998, last: false }
            ],
            "the cooldown is longer than the flood: one at once, the rest at the end"
        );
        let mut l = Limiter::new(Limits { cooldown_ms: 1_000, max_notices: 3 });
        let mut fires = Vec::new();
        for i in 0..10_000u64 {
            fires.extend(l.on_match(i, &format!("boom {i}")));
            fires.extend(l.tick(i));
        }
        fires.extend(l.flush(10_000));
        assert_eq!(
            fires,
            vec![
                Fire { line: "boom 0".into(), more: 0, last: false },
                Fire { line: "boom 1".into(), more: 999, last: false },
                Fire { line: "boom 1001".into(), more: 999, last: true },
            ]
        );
        assert!(l.exhausted());
        assert_eq!(l.matches, 10_000);
    }

    #[test]
    fn a_job_end_flushes_what_the_cooldown_holds() {
        let mut l = Limiter::new(LIMITS);
        l.on_match(0, "READY a");
        l.on_match(10, "READY b");
        l.on_match(20, "READY c");
        assert_eq!(l.flush(30), fire("READY b", 1, false));
        assert_eq!(l.flush(40), None);
    }

    #[test]
    fn a_zero_cooldown_sends_every_match_up_to_the_cap() {
        let mut l = Limiter::new(Limits { cooldown_ms: 0, max_notices: 2 });
        assert_eq!(l.on_match(0, "a"), fire("a", 0, false));
        assert_eq!(l.on_match(0, "b"), fire("b", 0, true));
        assert_eq!(l.on_match(0, "c"), None);
    }

    #[test]
    fn watches_match_lines_as_a_terminal_shows_them() {
        let mut w = Watches::default();
        w.add("^READY on", WatchOwner::Model, LIMITS, "").unwrap();
        // Colours and a rewrite in the raw bytes: the emulated line matches.
        let hits = w.feed("booting\r\x1b[K\x1b[1mREADY\x1b[0m on :8080\nREADY on again\n", 0);
        assert_eq!(
            hits,
            vec![Hit {
                owner: WatchOwner::Model,
                pattern: "^READY on".into(),
                fire: Fire { line: "READY on :8080".into(), more: 0, last: false },
            }]
        );
        // The raw bytes with escapes would not match a plain pattern.
        let mut w = Watches::default();
        w.add("READY on", WatchOwner::User, LIMITS, "").unwrap();
        assert!(w.feed("\x1b[1mREADY\x1b[0m on\n", 0).len() == 1);
    }

    #[test]
    fn an_unfinished_line_is_matched_when_the_job_goes_quiet_and_only_once() {
        let mut w = Watches::default();
        w.add("Password:", WatchOwner::Model, Limits { cooldown_ms: 0, max_notices: 5 }, "").unwrap();
        assert!(w.feed("Password:", 1_000).is_empty());
        assert!(w.quiet(1_100).is_empty(), "not quiet long enough");
        assert_eq!(w.quiet(1_000 + PARTIAL_QUIET_MS).len(), 1);
        assert!(w.quiet(5_000).is_empty(), "told once");
        assert!(w.feed("\n", 6_000).is_empty(), "its finished form is the same line");
        assert_eq!(w.feed("Password:\n", 7_000).len(), 1, "a new prompt is a new match");
    }

    #[test]
    fn a_line_half_written_before_the_watch_is_matched_whole() {
        let mut w = Watches::default();
        w.add("server READY", WatchOwner::Model, LIMITS, "server RE").unwrap();
        assert_eq!(w.feed("ADY\n", 0).len(), 1);
    }

    #[test]
    fn the_end_of_the_job_ends_its_watches() {
        let mut w = Watches::default();
        w.add("x", WatchOwner::Model, LIMITS, "").unwrap();
        w.feed("x1\nx2\nx3\nlast x", 0);
        let hits = w.end(100);
        let lines: Vec<(String, u64)> = hits.into_iter().map(|h| (h.fire.line, h.fire.more)).collect();
        // The unfinished last line counts too; the held-back matches go out as one.
        assert_eq!(lines, vec![("x2".to_string(), 2)]);
        assert!(w.is_empty());
    }

    #[test]
    fn bad_patterns_and_too_many_watches_are_refused() {
        let mut w = Watches::default();
        match w.add("(unclosed", WatchOwner::Model, LIMITS, "") {
            Err(AddError::BadPattern(e)) => assert!(e.starts_with("bad pattern /(unclosed/:"), "{e}"),
            other => panic!("{other:?}"),
        }
        for i in 0..MAX_WATCHES {
            w.add(&format!("p{i}"), WatchOwner::Model, LIMITS, "").unwrap();
        }
        assert_eq!(w.add("one more", WatchOwner::Model, LIMITS, ""), Err(AddError::TooMany));
        assert_eq!(w.add("p3", WatchOwner::Model, LIMITS, ""), Ok(true), "the same pattern starts again");
        assert_eq!(w.remove(WatchOwner::User, None), 0, "the user's watches only");
        assert_eq!(w.remove(WatchOwner::Model, Some("p1")), 1);
        assert_eq!(w.remove(WatchOwner::Model, None), MAX_WATCHES - 1);
        assert!(w.is_empty());
    }

    #[test]
    fn notice_texts() {
        let f = Fire { line: "READY on :8080".into(), more: 0, last: false };
        assert_eq!(notice_text("job_3", "READY", &f, 5), "[Job job_3 matched /READY/: READY on :8080]");
        let f = Fire { line: "error: x".into(), more: 12, last: true };
        assert_eq!(
            notice_text("job_3", "error", &f, 5),
            "[Job job_3 matched /error/: error: x (+12 more). This watch has sent its 5 notices \
             (jobs.watch_max_notices) and has ended; process(action='watch') sets it again]"
        );
    }
}
