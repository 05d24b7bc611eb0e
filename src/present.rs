//! Plain-text forms of what the engine reports as data (`protocol::info`, `JobInfo`): the
//! `/jobs`, `/sessions`, `/heartbeat status` and `/goal status` replies and the status-line
//! rows of the heartbeat and the goal. Shared by the front ends (the TUI draws them,
//! `talaria exec` prints them); the engine never formats these.

use crate::protocol::commands::format_interval;
use crate::protocol::{GoalInfo, GoalState, HeartbeatInfo, JobInfo, McpServerInfo, SessionInfo};
use crate::util::clock_hhmm;

/// Characters of goal text in the status-line row.
const GOAL_ROW_CHARS: usize = 40;
const NO_GOAL: &str = "no goal; set one with /goal <text>";

/// `/jobs`: one line per job.
pub(crate) fn job_list(jobs: &[JobInfo]) -> String {
    if jobs.is_empty() {
        return "no background jobs".to_string();
    }
    let lines: Vec<String> =
        jobs.iter().map(|j| format!("{}  {:<10} {}  {}", j.id, j.status.label(), j.command, j.last_line)).collect();
    lines.join("\n")
}

/// `/mcp` and `talaria mcp list`: one line per server (state, tool count, transport, last
/// error), and with `tools` each of its tools as the model sees it.
pub fn mcp_status(servers: &[McpServerInfo], tools: bool) -> String {
    if servers.is_empty() {
        return "no MCP servers configured; add [mcp.servers.<name>] to config.toml (see the README)".into();
    }
    let mut out = Vec::new();
    for s in servers {
        let mut line = format!("{} · {} · {} tools · {}", s.name, s.state.label(), s.tools.len(), s.transport);
        if let Some(e) = &s.last_error {
            line.push_str(&format!(" · last error: {e}"));
        }
        out.push(line);
        if tools {
            for t in &s.tools {
                out.push(format!("  {}  {}", t.exposed, t.description.lines().next().unwrap_or("")));
            }
        }
    }
    out.join("\n")
}

/// `/sessions` (`matching`: None), or the sessions several `/resume <words>` matched.
pub(crate) fn session_list(sessions: &[SessionInfo], matching: Option<&str>) -> String {
    let lines: Vec<String> = sessions.iter().map(session_line).collect();
    match matching {
        _ if sessions.is_empty() && matching.is_none() => "no sessions yet".to_string(),
        None => format!("{}\n/resume <id|title> to open one", lines.join("\n")),
        Some(key) if sessions.is_empty() => format!("no session matches '{key}'; /sessions lists them"),
        Some(key) => {
            format!("{} sessions match '{key}':\n{}\n/resume <id> opens one", sessions.len(), lines.join("\n"))
        }
    }
}

/// One session in a list: id, title, size, first line.
fn session_line(s: &SessionInfo) -> String {
    format!(
        "{}  {:<30} {:>4} msgs  {}",
        s.id,
        s.title.as_deref().unwrap_or("(untitled)"),
        s.message_count,
        s.first_line
    )
}

/// The status-line row: `♥ every 10m · next in 4m`, `♥ every 10m · due`, `♥ every 10m · paused`.
/// Minutes are rounded up (the engine resends the heartbeat when the count drops).
pub fn heartbeat_row(hb: &HeartbeatInfo) -> String {
    let every = format!("♥ every {}", format_interval(hb.interval_s));
    match hb.next_in_ms {
        _ if hb.paused => format!("{every} · paused"),
        None | Some(0) => format!("{every} · due"),
        Some(ms) => format!("{every} · next in {}", format_minutes(ms.div_ceil(60_000))),
    }
}

/// `/heartbeat status`; times are wall-clock `HH:MM` at `utc_offset_s`.
pub(crate) fn heartbeat_status(hb: Option<&HeartbeatInfo>, utc_offset_s: i64) -> String {
    let Some(hb) = hb else { return "no heartbeat; set one with /heartbeat every <interval> <prompt>".to_string() };
    let fired = match hb.last_fired_at_ms {
        Some(at) => format!(", fired {}× (last at {})", hb.fire_count, clock_hhmm(at, utc_offset_s)),
        None => ", not fired yet".to_string(),
    };
    format!("{}{fired} — {}", heartbeat_row(hb), hb.prompt)
}

fn format_minutes(minutes: u64) -> String {
    match minutes {
        m if m < 60 => format!("{m}m"),
        m if m < 24 * 60 => match m % 60 {
            0 => format!("{}h", m / 60),
            r => format!("{}h {r}m", m / 60),
        },
        m => match (m / 60) % 24 {
            0 => format!("{}d", m / 1440),
            h => format!("{}d {h}h", m / 1440),
        },
    }
}

/// The status-line row: `goal 3/20 · gate 1/2 ✗ · fix the flaky…`; None without a goal.
pub fn goal_row(g: &GoalInfo) -> Option<String> {
    let head = match g.state {
        GoalState::Active => format!("goal {}/{}", g.turns_used, g.max_turns),
        GoalState::Paused => format!("goal paused {}/{}", g.turns_used, g.max_turns),
        GoalState::Achieved => "goal ✓".to_string(),
        GoalState::Unset => return None,
    };
    let mut parts = vec![head];
    if let Some(gates) = gates_summary(g) {
        parts.push(gates);
    }
    let text: String = g.text.split_whitespace().collect::<Vec<_>>().join(" ");
    let short = if text.chars().count() > GOAL_ROW_CHARS {
        format!("{}…", text.chars().take(GOAL_ROW_CHARS - 1).collect::<String>().trim_end())
    } else {
        text
    };
    parts.push(short);
    Some(parts.join(" · "))
}

fn gates_summary(g: &GoalInfo) -> Option<String> {
    let n = g.gates.len();
    if n == 0 {
        return None;
    }
    if let Some(pos) = g.running_gate.filter(|&i| i < n) {
        return Some(format!("gate {}/{n} …", pos + 1));
    }
    if let Some(pos) = g.gates.iter().position(|gate| gate.last.is_some_and(|l| !l.passed)) {
        return Some(format!("gate {}/{n} ✗", pos + 1));
    }
    if g.gates.iter().all(|gate| gate.last.is_some_and(|l| l.passed)) {
        return Some("gate ✓".to_string());
    }
    Some(format!("{n} gate{}", if n == 1 { "" } else { "s" }))
}

/// `/goal status`: the goal, its turns, why it paused, the judge's last word, its gates.
pub(crate) fn goal_status(goal: Option<&GoalInfo>) -> String {
    let Some(g) = goal.filter(|g| g.state != GoalState::Unset) else { return NO_GOAL.to_string() };
    let mut lines = vec![format!("◎ goal ({}): {}", goal_state_word(g.state), g.text)];
    lines.push(format!("  turns {}/{}", g.turns_used, g.max_turns));
    if let Some(reason) = &g.pause_reason {
        lines.push(format!("  paused because {reason} — /goal resume continues it"));
    }
    if let Some(v) = &g.last_verdict {
        lines.push(format!("  last judge verdict: {v}"));
    }
    lines.push(gate_list(Some(g)));
    lines.join("\n")
}

/// `/goal gate list`: the gates and how each last ran (or that they wait for a goal).
pub(crate) fn gate_list(goal: Option<&GoalInfo>) -> String {
    let Some(g) = goal.filter(|g| !g.gates.is_empty() || g.state != GoalState::Unset) else {
        return "no goal and no gates; /goal gate add <cmd> adds one before the goal is set".to_string();
    };
    if g.state == GoalState::Unset {
        let list: Vec<String> =
            g.gates.iter().enumerate().map(|(i, gate)| format!("    {}. $ {}", i + 1, gate.cmd)).collect();
        return format!("  no goal yet; they apply to the next /goal <text>:\n{}", list.join("\n"));
    }
    if g.gates.is_empty() {
        return "  no gates; add one with /goal gate add <cmd>".to_string();
    }
    let max = g.gate_max_retries;
    let mut lines = vec!["  gates:".to_string()];
    for (i, gate) in g.gates.iter().enumerate() {
        let state = match &gate.last {
            None => "not run yet".to_string(),
            Some(l) if l.passed => "✓ passed".to_string(),
            Some(l) if l.timed_out => format!("✗ timed out (attempt {}/{max})", gate.attempts),
            Some(l) => format!("✗ exit {} (attempt {}/{max})", l.exit_code, gate.attempts),
        };
        lines.push(format!("    {}. $ {} — {state}", i + 1, gate.cmd));
    }
    lines.join("\n")
}

/// `/goal gate list` on its own: the lines `/goal status` shows indented under the goal,
/// without that indent (a notice `ℹ   no goal yet` had stray spaces).
pub(crate) fn gate_list_alone(goal: Option<&GoalInfo>) -> String {
    gate_list(goal).lines().map(|l| l.strip_prefix("  ").unwrap_or(l)).collect::<Vec<_>>().join("\n")
}

pub(crate) fn goal_state_word(s: GoalState) -> &'static str {
    match s {
        GoalState::Active => "active",
        GoalState::Paused => "paused",
        GoalState::Achieved => "achieved",
        GoalState::Unset => "not set",
    }
}

/// Bytes in a few characters: `512 B`, `3.4 kB`, `200.0 MB`.
fn bytes(n: u64) -> String {
    match n {
        0..1_000 => format!("{n} B"),
        1_000..1_000_000 => format!("{:.1} kB", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", n as f64 / 1e6),
        _ => format!("{:.2} GB", n as f64 / 1e9),
    }
}

/// One connection through the network proxy (exec's stderr, a `/network` row).
pub(crate) fn network_line(c: &crate::protocol::network::Connection) -> String {
    use crate::protocol::network::Verdict;
    let verdict = match c.verdict {
        Verdict::Allowed => "allowed",
        Verdict::Asked => "asked, allowed",
        Verdict::Denied => "DENIED",
    };
    let host = if c.host.contains(':') { format!("[{}]:{}", c.host, c.port) } else { format!("{}:{}", c.host, c.port) };
    let open = if c.done || c.verdict == Verdict::Denied { "" } else { ", open" };
    format!("{}  {host}  {verdict} ({})  ↑{} ↓{}{open}", c.job, c.reason, bytes(c.sent), bytes(c.received))
}

/// `/network`: this session's connections through the proxy, one line each, oldest first.
pub(crate) fn network_list(connections: &[crate::protocol::network::Connection], utc_offset_s: i64) -> String {
    if connections.is_empty() {
        return "no connections through talaria's network proxy in this session".into();
    }
    let lines: Vec<String> =
        connections.iter().map(|c| format!("{}  {}", clock_hhmm(c.at_ms, utc_offset_s), network_line(c))).collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{GateInfo, GateRun, JobStatus};
    use pretty_assertions::assert_eq;

    fn hb(next_in_ms: Option<u64>, paused: bool) -> HeartbeatInfo {
        HeartbeatInfo {
            prompt: "check the build".into(),
            interval_s: 600,
            paused,
            next_in_ms,
            fire_count: 0,
            last_fired_at_ms: None,
        }
    }

    #[test]
    fn heartbeat_row_rounds_minutes_up() {
        assert_eq!(heartbeat_row(&hb(Some(600_000), false)), "♥ every 10m · next in 10m");
        assert_eq!(heartbeat_row(&hb(Some(599_999), false)), "♥ every 10m · next in 10m");
        assert_eq!(heartbeat_row(&hb(Some(210_000), false)), "♥ every 10m · next in 4m");
        assert_eq!(heartbeat_row(&hb(Some(1), false)), "♥ every 10m · next in 1m");
        assert_eq!(heartbeat_row(&hb(Some(0), false)), "♥ every 10m · due");
        assert_eq!(heartbeat_row(&hb(None, true)), "♥ every 10m · paused");
        let long = HeartbeatInfo { interval_s: 7200, ..hb(Some(90 * 60_000), false) };
        assert_eq!(heartbeat_row(&long), "♥ every 2h · next in 1h 30m");
        let days = HeartbeatInfo { interval_s: 2 * 86_400, ..hb(Some(2 * 86_400_000), false) };
        assert_eq!(heartbeat_row(&days), "♥ every 2d · next in 2d");
    }

    #[test]
    fn heartbeat_status_says_when_it_fired() {
        // 2024-01-01 17:40:00 UTC
        let fired =
            HeartbeatInfo { fire_count: 1, last_fired_at_ms: Some(1_704_130_800_000), ..hb(Some(360_000), false) };
        assert_eq!(
            heartbeat_status(Some(&fired), 0),
            "♥ every 10m · next in 6m, fired 1× (last at 17:40) — check the build"
        );
        assert!(heartbeat_status(None, 0).starts_with("no heartbeat"));
    }

    #[test]
    fn jobs_and_sessions_list_one_line_each() {
        assert_eq!(job_list(&[]), "no background jobs");
        let job = JobInfo {
            id: "job_1".into(),
            command: "make".into(),
            pid: 1,
            cwd: "/w".into(),
            started_at_ms: 0,
            status: JobStatus::Exited(2),
            background: true,
            has_stdin: false,
            last_line: "error".into(),
            agent: None,
        };
        assert_eq!(job_list(&[job]), "job_1  exited 2   make  error");
        assert_eq!(session_list(&[], None), "no sessions yet");
        let s =
            SessionInfo { id: "abc".into(), title: None, message_count: 3, first_line: "hi".into(), updated_at_ms: 0 };
        let line = "abc  (untitled)                        3 msgs  hi";
        assert_eq!(session_list(std::slice::from_ref(&s), None), format!("{line}\n/resume <id|title> to open one"));
        assert_eq!(
            session_list(&[s.clone(), s], Some("fix")),
            format!("2 sessions match 'fix':\n{line}\n{line}\n/resume <id> opens one")
        );
    }

    fn goal(state: GoalState, gates: Vec<GateInfo>) -> GoalInfo {
        GoalInfo {
            text: "make tests pass".into(),
            state,
            turns_used: 2,
            max_turns: 20,
            pause_reason: None,
            last_verdict: None,
            gates,
            gate_max_retries: 3,
            running_gate: None,
        }
    }

    fn gate(last: Option<GateRun>) -> GateInfo {
        GateInfo { cmd: "t".into(), attempts: 1, last }
    }

    #[test]
    fn a_gate_list_on_its_own_starts_at_the_margin() {
        let waiting = goal(GoalState::Unset, vec![gate(None)]);
        assert_eq!(gate_list_alone(Some(&waiting)), "no goal yet; they apply to the next /goal <text>:\n  1. $ t");
        assert_eq!(
            gate_list_alone(Some(&goal(GoalState::Active, vec![]))),
            "no gates; add one with /goal gate add <cmd>"
        );
    }

    #[test]
    fn goal_rows_and_gate_lists() {
        let failed = Some(GateRun { passed: false, timed_out: false, exit_code: 4 });
        let passed = Some(GateRun { passed: true, timed_out: false, exit_code: 0 });
        assert_eq!(goal_row(&goal(GoalState::Active, vec![])).unwrap(), "goal 2/20 · make tests pass");
        assert_eq!(goal_row(&goal(GoalState::Unset, vec![gate(None)])), None);
        let g = goal(GoalState::Active, vec![gate(passed), gate(failed)]);
        assert_eq!(goal_row(&g).unwrap(), "goal 2/20 · gate 2/2 ✗ · make tests pass");
        let running = GoalInfo { running_gate: Some(0), ..g.clone() };
        assert_eq!(goal_row(&running).unwrap(), "goal 2/20 · gate 1/2 … · make tests pass");
        let paused =
            GoalInfo { pause_reason: Some("you paused it".into()), ..goal(GoalState::Paused, vec![gate(failed)]) };
        assert_eq!(
            goal_status(Some(&paused)),
            "◎ goal (paused): make tests pass\n  turns 2/20\n  paused because you paused it — /goal resume continues it\n  gates:\n    1. $ t — ✗ exit 4 (attempt 1/3)"
        );
        assert_eq!(goal_status(None), NO_GOAL);
        assert_eq!(goal_status(Some(&goal(GoalState::Unset, vec![]))), NO_GOAL);
        assert_eq!(
            gate_list(Some(&goal(GoalState::Unset, vec![gate(None)]))),
            "  no goal yet; they apply to the next /goal <text>:\n    1. $ t"
        );
        assert!(gate_list(None).starts_with("no goal and no gates"));
    }

    #[test]
    fn a_network_row_says_job_host_verdict_and_bytes() {
        use crate::protocol::network::{Connection, Verdict};
        let c = Connection {
            at_ms: 0,
            job: "job_4".into(),
            host: "registry.npmjs.org".into(),
            port: 443,
            sent: 1_200,
            received: 3_400_000,
            verdict: Verdict::Asked,
            reason: "allowed once when asked".into(),
            done: true,
        };
        assert_eq!(
            super::network_list(&[c], 0),
            "00:00  job_4  registry.npmjs.org:443  asked, allowed (allowed once when asked)  ↑1.2 kB ↓3.4 MB"
        );
        assert_eq!(super::network_list(&[], 0), "no connections through talaria's network proxy in this session");
    }
}
