//! Activity clock and turn-liveness watchdog (DESIGN §5 "Turn liveness").
//!
//! The clock is stamped by stream bytes, tool output and tool completion, and held alive
//! while a tool is inside its own deadline or an approval waits. A turn with no activity
//! for the timeout is force-interrupted by cancelling its interrupt token — but only after
//! re-checking the clock under the same lock that stamps it, so a turn that made progress
//! after the watchdog looked is never killed.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::TurnLivenessConfig;

#[derive(Debug)]
struct Clock {
    last: Instant,
    /// Bumped by every stamp, hold and release: an observed stall is only acted on if
    /// nothing happened since.
    generation: u64,
    holds: usize,
}

/// A turn's activity clock. Cheap to clone; all clones share one clock.
#[derive(Debug, Clone)]
pub(crate) struct Activity {
    clock: Arc<Mutex<Clock>>,
    abort: CancellationToken,
}

/// A stall the watchdog observed: no activity for `idle`, at clock generation `generation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stall {
    generation: u64,
    pub(crate) idle: Duration,
}

/// Keeps the turn alive while it exists (a tool inside its own deadline, an approval
/// waiting). Dropping it stamps the clock, so the timeout counts from the release.
#[derive(Debug)]
#[must_use = "the turn is only kept alive while the hold exists"]
pub(crate) struct ActivityHold {
    activity: Activity,
}

impl Drop for ActivityHold {
    fn drop(&mut self) {
        let mut c = self.activity.lock();
        c.holds = c.holds.saturating_sub(1);
        c.generation += 1;
        c.last = c.last.max(Instant::now());
    }
}

impl Activity {
    /// A clock stamped now. `abort` is the token the watchdog cancels (the turn's interrupt).
    pub(crate) fn new(abort: CancellationToken) -> Activity {
        Activity::starting_at(abort, Instant::now())
    }

    pub(crate) fn starting_at(abort: CancellationToken, at: Instant) -> Activity {
        Activity { clock: Arc::new(Mutex::new(Clock { last: at, generation: 0, holds: 0 })), abort }
    }

    fn lock(&self) -> MutexGuard<'_, Clock> {
        // The clock is plain data; a panic elsewhere cannot leave it inconsistent.
        crate::util::lock(&self.clock)
    }

    /// Record activity now.
    pub(crate) fn stamp(&self) {
        self.stamp_at(Instant::now());
    }

    /// Record activity at `at` (never moves the clock backwards).
    pub(crate) fn stamp_at(&self, at: Instant) {
        let mut c = self.lock();
        c.generation += 1;
        c.last = c.last.max(at);
    }

    /// Keep the turn alive until the guard drops.
    pub(crate) fn hold(&self) -> ActivityHold {
        let mut c = self.lock();
        c.holds += 1;
        c.generation += 1;
        c.last = c.last.max(Instant::now());
        drop(c);
        ActivityHold { activity: self.clone() }
    }

    pub(crate) fn last_activity(&self) -> Instant {
        self.lock().last
    }

    #[cfg(test)]
    pub(crate) fn is_held(&self) -> bool {
        self.lock().holds > 0
    }

    /// The token the watchdog cancels.
    #[cfg(test)]
    pub(crate) fn abort_token(&self) -> &CancellationToken {
        &self.abort
    }

    /// A stall, if the turn has had no activity for `timeout` at `now` and nothing holds
    /// it. `timeout` zero never stalls (the watchdog is off).
    pub(crate) fn observe(&self, now: Instant, timeout: Duration) -> Option<Stall> {
        let c = self.lock();
        stall_of(&c, now, timeout)
    }

    /// Act on an observed stall: cancel the abort token, unless any activity happened
    /// since `stall` was observed. The check and the cancel happen under the clock's lock,
    /// so a stamp either lands before (and vetoes) or after (the turn is already aborting).
    pub(crate) fn commit_abort(&self, stall: &Stall) -> bool {
        let c = self.lock();
        if c.generation != stall.generation || c.holds > 0 || self.abort.is_cancelled() {
            return false;
        }
        self.abort.cancel();
        true
    }

    /// Observe and commit in one step under one lock: true when the turn was aborted.
    #[cfg(test)]
    pub(crate) fn check_and_abort(&self, now: Instant, timeout: Duration) -> bool {
        let c = self.lock();
        if stall_of(&c, now, timeout).is_none() || self.abort.is_cancelled() {
            return false;
        }
        self.abort.cancel();
        true
    }
}

fn stall_of(c: &Clock, now: Instant, timeout: Duration) -> Option<Stall> {
    if timeout.is_zero() || c.holds > 0 {
        return None;
    }
    let idle = now.saturating_duration_since(c.last);
    (idle >= timeout).then_some(Stall { generation: c.generation, idle })
}

/// The configured timeout; None when disabled (`timeout_s = 0`). Values that are not
/// usable (NaN, infinite, negative) fall back to the default.
pub(crate) fn liveness_timeout(cfg: &TurnLivenessConfig) -> Option<Duration> {
    let default = TurnLivenessConfig::default();
    let secs = if cfg.timeout_s.is_finite() && cfg.timeout_s >= 0.0 { cfg.timeout_s } else { default.timeout_s };
    (secs > 0.0).then(|| Duration::from_secs_f64(secs))
}

/// How often the watchdog looks (a usable positive value, else the default).
pub(crate) fn liveness_poll(cfg: &TurnLivenessConfig) -> Duration {
    let secs =
        if cfg.poll_s.is_finite() && cfg.poll_s > 0.0 { cfg.poll_s } else { TurnLivenessConfig::default().poll_s };
    Duration::from_secs_f64(secs)
}

/// Watch a turn until it stalls or its abort token is cancelled by someone else. Returns
/// the idle time when the watchdog aborted the turn (the engine then says so loudly), or
/// None when the turn ended another way. Run it as a task and abort it when the turn ends.
pub(crate) async fn watchdog(activity: Activity, timeout: Duration, poll: Duration) -> Option<Duration> {
    if timeout.is_zero() {
        activity.abort.cancelled().await;
        return None;
    }
    let poll = poll.max(Duration::from_millis(10));
    loop {
        let now = Instant::now();
        if let Some(stall) = activity.observe(now, timeout) {
            if activity.commit_abort(&stall) {
                return Some(stall.idle);
            }
        }
        // Wake at the earlier of the next poll and the moment the turn would stall.
        let stall_at = activity.last_activity() + timeout;
        let wake = if stall_at > now { stall_at.min(now + poll) } else { now + poll };
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = activity.abort.cancelled() => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(600);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[tokio::test(start_paused = true)]
    async fn stalls_only_after_the_timeout() {
        let t0 = Instant::now();
        let a = Activity::starting_at(CancellationToken::new(), t0);
        assert!(!a.check_and_abort(t0 + secs(599), TIMEOUT));
        assert!(!a.abort_token().is_cancelled());
        a.stamp_at(t0 + secs(500));
        assert!(!a.check_and_abort(t0 + secs(1099), TIMEOUT));
        assert!(a.check_and_abort(t0 + secs(1100), TIMEOUT));
        assert!(a.abort_token().is_cancelled());
        assert!(!a.check_and_abort(t0 + secs(2000), TIMEOUT), "an abort happens once");
    }

    #[tokio::test(start_paused = true)]
    async fn activity_after_the_check_vetoes_the_abort() {
        let t0 = Instant::now();
        let a = Activity::starting_at(CancellationToken::new(), t0);
        let stall = a.observe(t0 + secs(700), TIMEOUT).expect("stalled");
        assert_eq!(stall.idle, secs(700));
        // Stream bytes arrive between the watchdog's look and its abort …
        a.clone().stamp_at(t0 + secs(700));
        // … so the abort is declined and the turn goes on.
        assert!(!a.commit_abort(&stall));
        assert!(!a.abort_token().is_cancelled());
        // A fresh observation later, with no activity in between, does abort.
        let stall = a.observe(t0 + secs(1300), TIMEOUT).expect("stalled again");
        assert!(a.commit_abort(&stall));
        assert!(a.abort_token().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_taken_after_the_check_vetoes_the_abort() {
        let t0 = Instant::now();
        let a = Activity::starting_at(CancellationToken::new(), t0);
        let stall = a.observe(t0 + secs(601), TIMEOUT).expect("stalled");
        let hold = a.hold();
        assert!(!a.commit_abort(&stall));
        drop(hold);
        assert!(!a.abort_token().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_keeps_the_turn_alive_and_its_release_restarts_the_clock() {
        let a = Activity::new(CancellationToken::new());
        let hold = a.hold();
        assert!(a.is_held());
        tokio::time::advance(secs(5000)).await;
        assert!(!a.check_and_abort(Instant::now(), TIMEOUT), "an approval may wait");
        drop(hold);
        assert!(!a.is_held());
        let released = Instant::now();
        assert_eq!(a.last_activity(), released);
        assert!(!a.check_and_abort(released + secs(599), TIMEOUT));
        assert!(a.check_and_abort(released + secs(600), TIMEOUT));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_timeout_disables() {
        let t0 = Instant::now();
        let a = Activity::starting_at(CancellationToken::new(), t0);
        assert!(a.observe(t0 + secs(1_000_000), Duration::ZERO).is_none());
        assert!(!a.check_and_abort(t0 + secs(1_000_000), Duration::ZERO));
        let off = TurnLivenessConfig { timeout_s: 0.0, poll_s: 15.0 };
        assert_eq!(liveness_timeout(&off), None);
        let bad = TurnLivenessConfig { timeout_s: f64::NAN, poll_s: f64::INFINITY };
        assert_eq!(liveness_timeout(&bad), Some(secs(600)));
        assert_eq!(liveness_poll(&bad), secs(15));
        let neg = TurnLivenessConfig { timeout_s: -1.0, poll_s: -1.0 };
        assert_eq!(liveness_timeout(&neg), Some(secs(600)));
    }

    #[tokio::test(start_paused = true)]
    async fn watchdog_aborts_a_silent_turn() {
        let a = Activity::new(CancellationToken::new());
        let start = Instant::now();
        let idle = tokio::time::timeout(secs(10_000), watchdog(a.clone(), TIMEOUT, secs(15))).await.unwrap();
        assert_eq!(idle, Some(TIMEOUT));
        assert_eq!(Instant::now() - start, TIMEOUT);
        assert!(a.abort_token().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn watchdog_spares_a_turn_that_keeps_making_progress() {
        let a = Activity::new(CancellationToken::new());
        let dog = tokio::spawn(watchdog(a.clone(), TIMEOUT, secs(15)));
        for _ in 0..30 {
            tokio::time::sleep(secs(300)).await;
            a.stamp();
        }
        assert!(!a.abort_token().is_cancelled());
        // The turn ends by an ordinary interrupt: the watchdog stops without claiming it.
        a.abort_token().cancel();
        assert_eq!(tokio::time::timeout(secs(10), dog).await.unwrap().unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn disabled_watchdog_waits_for_the_turn_to_end() {
        let a = Activity::new(CancellationToken::new());
        let dog = tokio::spawn(watchdog(a.clone(), Duration::ZERO, secs(15)));
        tokio::time::sleep(secs(100_000)).await;
        assert!(!a.abort_token().is_cancelled());
        a.abort_token().cancel();
        assert_eq!(dog.await.unwrap(), None);
    }
}
