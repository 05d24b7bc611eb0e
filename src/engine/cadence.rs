//! When the next model request is expected, and so how long the provider's prompt cache
//! should keep this one's prefix (Anthropic: 5 minutes, or 1 hour at twice the write price).
//! Pure: the engine passes in what it knows at the start of a turn and at each request.

use crate::engine::llm::CacheLifetime;
use crate::protocol::TurnTrigger;

/// The default cache lifetime; a request expected to be followed later than this should
/// ask for the longer one, or the next request pays a cold cache.
pub(crate) const SHORT_LIFETIME_S: u64 = 5 * 60;

/// What stands behind a turn: the autonomous work that brings the next request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Standing {
    /// The interval of an active (not paused) heartbeat.
    pub(crate) heartbeat_interval_s: Option<u64>,
    /// A goal is being worked on.
    pub(crate) goal_active: bool,
}

/// The lifetime this turn's request should ask for. The next request after a heartbeat's
/// turn is its next tick, one interval later; a goal's turn that leaves a background job
/// running waits for that job's end notice (builds, test suites: minutes). A turn someone
/// typed keeps the short lifetime: a person at the keyboard answers within minutes, and the
/// long one costs 2× instead of 1.25× per token written.
pub(crate) fn cache_lifetime(
    standing: Standing,
    trigger: &TurnTrigger,
    background_jobs_running: usize,
) -> CacheLifetime {
    let slow_heartbeat = standing.heartbeat_interval_s.is_some_and(|s| s > SHORT_LIFETIME_S);
    let long = match trigger {
        TurnTrigger::Heartbeat => slow_heartbeat,
        TurnTrigger::Goal | TurnTrigger::JobNotification => standing.goal_active && background_jobs_running > 0,
        TurnTrigger::User | TurnTrigger::Queued | TurnTrigger::Retry => false,
    };
    if long {
        CacheLifetime::OneHour
    } else {
        CacheLifetime::FiveMinutes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const HOUR: CacheLifetime = CacheLifetime::OneHour;
    const FIVE: CacheLifetime = CacheLifetime::FiveMinutes;

    fn heartbeat(interval_s: u64) -> Standing {
        Standing { heartbeat_interval_s: Some(interval_s), goal_active: false }
    }

    #[test]
    fn a_heartbeat_slower_than_the_cache_asks_for_the_hour() {
        assert_eq!(cache_lifetime(heartbeat(30 * 60), &TurnTrigger::Heartbeat, 0), HOUR);
        assert_eq!(cache_lifetime(heartbeat(301), &TurnTrigger::Heartbeat, 0), HOUR);
    }

    #[test]
    fn a_heartbeat_within_five_minutes_keeps_the_short_lifetime() {
        // Its next tick comes while the 5-minute entry still lives (and refreshes it).
        assert_eq!(cache_lifetime(heartbeat(5 * 60), &TurnTrigger::Heartbeat, 0), FIVE);
        assert_eq!(cache_lifetime(heartbeat(60), &TurnTrigger::Heartbeat, 3), FIVE);
    }

    #[test]
    fn typed_turns_keep_the_short_lifetime_whatever_stands_behind_them() {
        let busy = Standing { heartbeat_interval_s: Some(3600), goal_active: true };
        for trigger in [TurnTrigger::User, TurnTrigger::Queued, TurnTrigger::Retry] {
            assert_eq!(cache_lifetime(busy, &trigger, 2), FIVE, "{trigger:?}");
        }
    }

    #[test]
    fn a_goal_waiting_on_a_job_asks_for_the_hour() {
        let goal = Standing { heartbeat_interval_s: None, goal_active: true };
        assert_eq!(cache_lifetime(goal, &TurnTrigger::Goal, 1), HOUR);
        assert_eq!(cache_lifetime(goal, &TurnTrigger::JobNotification, 2), HOUR);
        // No job to wait for: the goal's next turn follows at once.
        assert_eq!(cache_lifetime(goal, &TurnTrigger::Goal, 0), FIVE);
        // A job notice without a goal: nothing says when the next request comes.
        assert_eq!(cache_lifetime(Standing::default(), &TurnTrigger::JobNotification, 2), FIVE);
    }

    #[test]
    fn no_heartbeat_and_no_goal_is_the_short_lifetime() {
        assert_eq!(cache_lifetime(Standing::default(), &TurnTrigger::Heartbeat, 0), FIVE);
    }
}
