//! `/heartbeat` (DESIGN §5): one recurring instruction per session, fired only when the
//! session is idle. Pure: the engine passes the time in (unix milliseconds) and performs
//! what comes back — injecting the turn, saving the state under `heartbeat:<session_id>`.

use serde::{Deserialize, Serialize};

use crate::protocol::commands::{format_interval, HeartbeatCmd, HEARTBEAT_FLOOR_S};
use crate::protocol::HeartbeatInfo;

/// `state_meta` key of a session's heartbeat.
pub(crate) fn state_key(session_id: &str) -> String {
    format!("heartbeat:{session_id}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum HeartbeatStatus {
    Active,
    Paused,
}

/// A session's heartbeat. Times are unix milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Heartbeat {
    pub(crate) prompt: String,
    pub(crate) interval_s: u64,
    pub(crate) status: HeartbeatStatus,
    /// When it was last set, resumed or fired: the next fire is `anchor + interval`.
    pub(crate) anchor_ms: u64,
    #[serde(default)]
    pub(crate) last_fired_at: Option<u64>,
    #[serde(default)]
    pub(crate) fire_count: u64,
}

/// What applying a `/heartbeat` command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeartbeatReply {
    /// The session's heartbeat afterwards (None: there is none; delete the state key).
    pub(crate) state: Option<Heartbeat>,
    /// One line to show the user.
    pub(crate) message: String,
    /// The state changed and should be saved.
    pub(crate) changed: bool,
    /// True when the command was refused (show as an error).
    pub(crate) error: bool,
}

/// Apply a `/heartbeat` command at `now_ms`. `utc_offset_s` turns times into the user's
/// wall-clock `HH:MM` (see [`local_utc_offset_s`]).
pub(crate) fn apply(current: Option<&Heartbeat>, cmd: &HeartbeatCmd, now_ms: u64, utc_offset_s: i64) -> HeartbeatReply {
    let keep =
        |message: String, error: bool| HeartbeatReply { state: current.cloned(), message, changed: false, error };
    const NONE: &str = "no heartbeat; set one with /heartbeat every <interval> <prompt>";
    match cmd {
        HeartbeatCmd::Set { interval_s, prompt } => {
            if *interval_s < HEARTBEAT_FLOOR_S {
                return keep(
                    format!(
                        "interval {} is too short: the minimum is {}",
                        format_interval(*interval_s),
                        format_interval(HEARTBEAT_FLOOR_S)
                    ),
                    true,
                );
            }
            let prompt = prompt.trim();
            if prompt.is_empty() {
                return keep("a heartbeat needs a prompt".into(), true);
            }
            let hb = Heartbeat {
                prompt: prompt.to_string(),
                interval_s: *interval_s,
                status: HeartbeatStatus::Active,
                anchor_ms: now_ms,
                last_fired_at: None,
                fire_count: 0,
            };
            let verb = if current.is_some() { "replaced" } else { "set" };
            let message = format!(
                "♥ heartbeat {verb}: every {} — first at {}",
                format_interval(hb.interval_s),
                clock_hhmm(hb.next_fire_ms(), utc_offset_s)
            );
            HeartbeatReply { state: Some(hb), message, changed: true, error: false }
        }
        // Nothing changes; the engine sends the heartbeat itself (`info`) for the front end to show.
        HeartbeatCmd::Status => keep(String::new(), false),
        HeartbeatCmd::Pause => match current {
            None => keep(NONE.into(), true),
            Some(hb) if hb.status == HeartbeatStatus::Paused => keep("♥ heartbeat is already paused".into(), false),
            Some(hb) => {
                let mut hb = hb.clone();
                hb.status = HeartbeatStatus::Paused;
                HeartbeatReply {
                    state: Some(hb),
                    message: "♥ heartbeat paused; /heartbeat resume to restart it".into(),
                    changed: true,
                    error: false,
                }
            }
        },
        HeartbeatCmd::Resume => match current {
            None => keep(NONE.into(), true),
            Some(hb) if hb.status == HeartbeatStatus::Active => keep("♥ heartbeat is already active".into(), false),
            Some(hb) => {
                // Resuming restarts the interval: a pause must not end in an immediate fire.
                let mut hb = hb.clone();
                hb.status = HeartbeatStatus::Active;
                hb.anchor_ms = now_ms;
                let message = format!(
                    "♥ heartbeat resumed: every {} — next at {}",
                    format_interval(hb.interval_s),
                    clock_hhmm(hb.next_fire_ms(), utc_offset_s)
                );
                HeartbeatReply { state: Some(hb), message, changed: true, error: false }
            }
        },
        HeartbeatCmd::Clear => match current {
            None => keep("no heartbeat to clear".into(), false),
            Some(_) => {
                HeartbeatReply { state: None, message: "♥ heartbeat cleared".into(), changed: true, error: false }
            }
        },
    }
}

impl Heartbeat {
    pub(crate) fn to_json(&self) -> String {
        // A struct of plain fields always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }

    pub(crate) fn from_json(text: &str) -> Result<Heartbeat, String> {
        let hb: Heartbeat = serde_json::from_str(text).map_err(|e| format!("stored heartbeat is unreadable: {e}"))?;
        if hb.interval_s < HEARTBEAT_FLOOR_S {
            return Err(format!(
                "stored heartbeat interval {}s is below the {}s minimum",
                hb.interval_s, HEARTBEAT_FLOOR_S
            ));
        }
        Ok(hb)
    }

    fn interval_ms(&self) -> u64 {
        self.interval_s.max(HEARTBEAT_FLOOR_S).saturating_mul(1000)
    }

    fn next_fire_ms(&self) -> u64 {
        self.anchor_ms.saturating_add(self.interval_ms())
    }

    /// The interval while active (None while paused): how far off its next turn is.
    pub(crate) fn active_interval_s(&self) -> Option<u64> {
        (self.status == HeartbeatStatus::Active).then(|| self.interval_s.max(HEARTBEAT_FLOOR_S))
    }

    /// When the engine's timer should next look (None while paused). A due heartbeat
    /// that is waiting for the session to go idle returns a time in the past.
    pub(crate) fn next_due_at(&self) -> Option<u64> {
        (self.status == HeartbeatStatus::Active).then(|| self.next_fire_ms())
    }

    /// Fire now? Only when active, the interval has passed since the anchor, and the
    /// session is idle (a real user message always wins).
    pub(crate) fn due(&self, now_ms: u64, idle: bool) -> bool {
        idle && self.status == HeartbeatStatus::Active && now_ms >= self.next_fire_ms()
    }

    /// Record a fire at `now_ms` and return the user turn to inject. However many ticks
    /// were missed, the anchor moves to now: one fire, never a backlog.
    pub(crate) fn fire(&mut self, now_ms: u64) -> String {
        self.anchor_ms = now_ms;
        self.last_fired_at = Some(now_ms);
        self.fire_count += 1;
        self.injected_text()
    }

    /// The injected user turn of DESIGN §5.
    pub(crate) fn injected_text(&self) -> String {
        format!(
            "[Heartbeat — recurring instruction, fires every {}]\n{}{INJECTED_TAIL}",
            format_interval(self.interval_s),
            self.prompt
        )
    }

    /// The heartbeat as the front ends show it, as of `now_ms`.
    pub(crate) fn info(&self, now_ms: u64) -> HeartbeatInfo {
        let paused = self.status == HeartbeatStatus::Paused;
        HeartbeatInfo {
            prompt: self.prompt.clone(),
            interval_s: self.interval_s,
            paused,
            next_in_ms: (!paused).then(|| self.next_fire_ms().saturating_sub(now_ms)),
            fire_count: self.fire_count,
            last_fired_at_ms: self.last_fired_at,
        }
    }

    /// When the status-line row (`present::heartbeat_row`, whole minutes rounded up) may next
    /// read differently (None: not until the state changes). The engine schedules one wake-up
    /// to resend the heartbeat then, instead of polling.
    pub(crate) fn next_change_at(&self, now_ms: u64) -> Option<u64> {
        if self.status == HeartbeatStatus::Paused {
            return None;
        }
        let next = self.next_fire_ms();
        if now_ms >= next {
            return None;
        }
        // The shown minute count m = ceil(rem / 1 min) drops when rem reaches (m-1) min.
        let minutes = (next - now_ms).div_ceil(60_000);
        Some(next - (minutes - 1) * 60_000)
    }
}

pub use crate::util::{clock_hhmm, local_utc_offset_s};

/// Unix milliseconds as the heartbeat reads them: the real clock (tests move it forward with
/// `testkit::clock::advance_heartbeat_clock`).
pub fn now_ms() -> u64 {
    crate::util::now_ms().saturating_add(skew_ms())
}

#[cfg(any(test, feature = "testkit"))]
fn skew_ms() -> u64 {
    crate::util::heartbeat_skew::get()
}

#[cfg(not(any(test, feature = "testkit")))]
fn skew_ms() -> u64 {
    0
}

/// What follows the instruction in an injected heartbeat turn.
const INJECTED_TAIL: &str = "\n\nIf there is nothing meaningful to do or report for this instruction right now, reply briefly that nothing has changed and stop — do not invent work.";

/// The instruction inside an injected heartbeat turn (`injected_text`): what a transcript
/// shows of it. Read only from a row stored as a heartbeat (its origin says so).
pub(crate) fn instruction_of(injected: &str) -> &str {
    let Some((_, rest)) = injected.split_once('\n') else { return injected };
    let end = rest.find("\n\nIf there is nothing meaningful").unwrap_or(rest.len());
    rest[..end].trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const MIN: u64 = 60_000;
    // 2024-01-01 17:30:00 UTC
    const T0: u64 = 1_704_130_200_000;

    fn set(interval_s: u64, prompt: &str) -> HeartbeatCmd {
        HeartbeatCmd::Set { interval_s, prompt: prompt.into() }
    }

    /// The status-line row the front ends draw at `now`.
    fn row(hb: &Heartbeat, now: u64) -> String {
        crate::present::heartbeat_row(&hb.info(now))
    }

    fn active(interval_s: u64) -> Heartbeat {
        apply(None, &set(interval_s, "check the build"), T0, 0).state.unwrap()
    }

    #[test]
    fn set_message_names_canonical_interval_and_first_fire() {
        let r = apply(None, &set(600, "check the build"), T0, 0);
        assert_eq!(r.message, "♥ heartbeat set: every 10m — first at 17:40");
        assert!(r.changed && !r.error);
        let again = apply(r.state.as_ref(), &set(3600, "other"), T0, 3600);
        assert_eq!(again.message, "♥ heartbeat replaced: every 1h — first at 19:30");
        assert_eq!(again.state.unwrap().prompt, "other");
    }

    #[test]
    fn floor_is_enforced_by_the_state_machine_too() {
        let r = apply(None, &set(30, "x"), T0, 0);
        assert!(r.error);
        assert_eq!(r.state, None);
        assert!(r.message.contains("minimum is 1m"), "{}", r.message);
        let stored = r#"{"prompt":"x","interval_s":5,"status":"active","anchor_ms":0}"#;
        assert!(Heartbeat::from_json(stored).unwrap_err().contains("minimum"));
    }

    #[test]
    fn an_interval_of_exactly_the_floor_is_accepted() {
        let r = apply(None, &set(HEARTBEAT_FLOOR_S, "x"), T0, 0);
        assert!(!r.error, "{}", r.message);
        assert_eq!(r.state.map(|hb| hb.interval_s), Some(HEARTBEAT_FLOOR_S));
        let stored = format!(r#"{{"prompt":"x","interval_s":{HEARTBEAT_FLOOR_S},"status":"active","anchor_ms":0}}"#);
        assert_eq!(Heartbeat::from_json(&stored).map(|hb| hb.interval_s), Ok(HEARTBEAT_FLOOR_S));
    }

    #[test]
    fn pausing_a_paused_or_resuming_an_active_heartbeat_changes_nothing() {
        let hb = active(600);
        let r = apply(Some(&hb), &HeartbeatCmd::Resume, T0 + 5 * MIN, 0);
        assert_eq!((r.state.as_ref(), r.changed, r.error), (Some(&hb), false, false));
        assert_eq!(r.message, "♥ heartbeat is already active");
        let paused = apply(Some(&hb), &HeartbeatCmd::Pause, T0 + MIN, 0).state.unwrap();
        let r = apply(Some(&paused), &HeartbeatCmd::Pause, T0 + 5 * MIN, 0);
        assert_eq!((r.state.as_ref(), r.changed, r.error), (Some(&paused), false, false));
        assert_eq!(r.message, "♥ heartbeat is already paused");
        assert!(apply(None, &HeartbeatCmd::Resume, T0, 0).error);
        let none = apply(None, &HeartbeatCmd::Clear, T0, 0);
        assert_eq!((none.state, none.changed, none.error), (None, false, false));
    }

    #[test]
    fn first_fire_is_at_set_time_plus_interval() {
        let hb = active(600);
        assert_eq!(hb.next_due_at(), Some(T0 + 10 * MIN));
        assert!(!hb.due(T0 + 10 * MIN - 1, true));
        assert!(hb.due(T0 + 10 * MIN, true));
    }

    #[test]
    fn fires_only_when_idle_and_user_wins() {
        let hb = active(600);
        let later = T0 + 15 * MIN;
        assert!(!hb.due(later, false), "a busy session never gets a heartbeat");
        assert!(hb.due(later, true));
        let mut paused = hb.clone();
        paused.status = HeartbeatStatus::Paused;
        assert!(!paused.due(later, true));
        assert_eq!(paused.next_due_at(), None);
    }

    #[test]
    fn missed_ticks_coalesce_and_the_anchor_resets() {
        let mut hb = active(600);
        // Busy for an hour and a half: nine ticks missed, one fire.
        let now = T0 + 95 * MIN;
        assert!(hb.due(now, true));
        let text = hb.fire(now);
        assert!(text.starts_with("[Heartbeat — recurring instruction, fires every 10m]\ncheck the build\n\n"));
        assert!(!hb.due(now, true));
        assert!(!hb.due(now + 10 * MIN - 1, true));
        assert!(hb.due(now + 10 * MIN, true));
        assert_eq!((hb.fire_count, hb.last_fired_at, hb.anchor_ms), (1, Some(now), now));
    }

    #[test]
    fn injected_text_is_exact() {
        let mut hb = active(5400);
        assert_eq!(
            hb.fire(T0 + 90 * MIN),
            "[Heartbeat — recurring instruction, fires every 90m]\ncheck the build\n\nIf there is nothing meaningful to do or report for this instruction right now, reply briefly that nothing has changed and stop — do not invent work."
        );
    }

    #[test]
    fn a_transcript_shows_the_instruction_of_an_injected_turn() {
        let mut hb = active(600);
        assert_eq!(instruction_of(&hb.fire(T0 + 10 * MIN)), "check the build");
        // A row cut short still shows its instruction; text without the header stays whole.
        assert_eq!(
            instruction_of("[Heartbeat — every 1h]\nwater the plants\n\nIf there is nothing meaningful"),
            "water the plants"
        );
        assert_eq!(instruction_of("no header"), "no header");
    }

    #[test]
    fn after_restart_a_due_heartbeat_fires_once() {
        let hb = active(600);
        let stored = hb.to_json();
        // Talaria was down for three hours.
        let mut loaded = Heartbeat::from_json(&stored).unwrap();
        assert_eq!(loaded, hb);
        let now = T0 + 180 * MIN;
        assert!(loaded.due(now, true));
        loaded.fire(now);
        assert!(!loaded.due(now + 1000, true));
    }

    #[test]
    fn status_text_is_coarse_and_says_when_it_changes() {
        let hb = active(600);
        assert_eq!(row(&hb, T0), "♥ every 10m · next in 10m");
        assert_eq!(row(&hb, T0 + 1), "♥ every 10m · next in 10m");
        assert_eq!(hb.next_change_at(T0 + 1), Some(T0 + MIN));
        assert_eq!(row(&hb, T0 + MIN), "♥ every 10m · next in 9m");
        assert_eq!(row(&hb, T0 + 6 * MIN + 30_000), "♥ every 10m · next in 4m");
        assert_eq!(row(&hb, T0 + 9 * MIN + 59_999), "♥ every 10m · next in 1m");
        assert_eq!(hb.next_change_at(T0 + 9 * MIN + 1), Some(T0 + 10 * MIN));
        assert_eq!(row(&hb, T0 + 10 * MIN), "♥ every 10m · due");
        assert_eq!(hb.next_change_at(T0 + 10 * MIN), None);
        // Between two change points the text is constant.
        let mut t = T0;
        while let Some(next) = hb.next_change_at(t) {
            assert_eq!(row(&hb, t), row(&hb, next - 1));
            assert_ne!(row(&hb, t), row(&hb, next));
            t = next;
        }
        assert_eq!(row(&active(7200), T0 + 30 * MIN), "♥ every 2h · next in 1h 30m");
        assert_eq!(row(&active(2 * 86_400), T0), "♥ every 2d · next in 2d");
    }

    #[test]
    fn pause_resume_clear() {
        let hb = active(600);
        let p = apply(Some(&hb), &HeartbeatCmd::Pause, T0 + MIN, 0);
        let paused = p.state.clone().unwrap();
        assert_eq!(paused.status, HeartbeatStatus::Paused);
        assert_eq!(row(&paused, T0 + 30 * MIN), "♥ every 10m · paused");
        assert!(!paused.due(T0 + 30 * MIN, true));
        let r = apply(Some(&paused), &HeartbeatCmd::Resume, T0 + 30 * MIN, 0);
        let resumed = r.state.unwrap();
        assert_eq!(r.message, "♥ heartbeat resumed: every 10m — next at 18:10");
        assert!(!resumed.due(T0 + 30 * MIN, true), "resuming does not fire at once");
        assert!(resumed.due(T0 + 40 * MIN, true));
        let c = apply(Some(&resumed), &HeartbeatCmd::Clear, T0, 0);
        assert_eq!((c.state, c.changed), (None, true));
        assert!(apply(None, &HeartbeatCmd::Pause, T0, 0).error);
    }

    #[test]
    fn status_command_changes_nothing_and_info_reports_fires() {
        let mut hb = active(600);
        hb.fire(T0 + 10 * MIN);
        let r = apply(Some(&hb), &HeartbeatCmd::Status, T0 + 14 * MIN, 0);
        assert_eq!((r.state.as_ref(), r.changed, r.error), (Some(&hb), false, false));
        let info = hb.info(T0 + 14 * MIN);
        assert_eq!((info.next_in_ms, info.fire_count, info.last_fired_at_ms), (Some(6 * MIN), 1, Some(T0 + 10 * MIN)));
        assert_eq!(
            crate::present::heartbeat_status(Some(&info), 0),
            "♥ every 10m · next in 6m, fired 1× (last at 17:40) — check the build"
        );
    }

    #[test]
    fn persistence_round_trip() {
        let mut hb = active(600);
        hb.fire(T0 + 11 * MIN);
        hb.status = HeartbeatStatus::Paused;
        let json = hb.to_json();
        assert!(json.contains(r#""status":"paused""#), "{json}");
        assert_eq!(Heartbeat::from_json(&json).unwrap(), hb);
        assert_eq!(state_key("s1"), "heartbeat:s1");
        assert!(Heartbeat::from_json("{").is_err());
    }

    #[test]
    fn clock_formatting() {
        assert_eq!(clock_hhmm(T0, 0), "17:30");
        assert_eq!(clock_hhmm(T0, -18 * 3600), "23:30");
        assert_eq!(clock_hhmm(T0, 7 * 3600), "00:30");
    }
}
