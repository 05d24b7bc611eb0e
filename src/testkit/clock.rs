//! The heartbeat's clock, moved forward by tests: a 30-minute heartbeat can tick ten times
//! in a test that takes seconds. Only the heartbeat (and the engine's wake-ups, which share
//! its clock) read it; every other time in talaria stays the real one.

/// How far the heartbeat's clock runs ahead of the real one.
pub fn skew_ms() -> u64 {
    crate::util::heartbeat_skew::get()
}

/// Move the heartbeat's clock `ms` forward (for every engine in this process). The engine
/// looks again after its next op or event; send it one to make a heartbeat due now fire.
pub fn advance_heartbeat_clock(ms: u64) {
    crate::util::heartbeat_skew::advance(ms);
}
