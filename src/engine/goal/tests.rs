use pretty_assertions::assert_eq;

use super::*;

fn limits(max_turns: u32, gate_max_retries: u32) -> GoalsConfig {
    GoalsConfig { max_turns, gate_timeout_s: 300, gate_max_retries }
}

fn machine() -> GoalMachine {
    GoalMachine::new(limits(20, 3))
}

fn set(m: &mut GoalMachine, text: &str, idle: bool) -> Vec<GoalEffect> {
    m.command(&GoalCmd::Set(text.into()), idle)
}

fn add_gate(m: &mut GoalMachine, cmd: &str) -> Vec<GoalEffect> {
    m.command(&GoalCmd::Gate(GateCmd::Add(cmd.into())), true)
}

fn fail(code: i32, out: &str) -> GateOutcome {
    GateOutcome { exit_code: code, output_tail: out.into(), timed_out: false }
}

fn pass() -> GateOutcome {
    GateOutcome { exit_code: 0, output_tail: "ok\n".into(), timed_out: false }
}

fn notices(fx: &[GoalEffect]) -> Vec<String> {
    fx.iter()
        .filter_map(|e| match e {
            GoalEffect::Notice { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

fn continued(fx: &[GoalEffect]) -> Option<String> {
    fx.iter().find_map(|e| match e {
        GoalEffect::Continue { prompt } => Some(prompt.clone()),
        _ => None,
    })
}

fn paused(fx: &[GoalEffect]) -> Option<String> {
    fx.iter().find_map(|e| match e {
        GoalEffect::Paused { message, .. } => Some(message.clone()),
        _ => None,
    })
}

fn is_judge(fx: &[GoalEffect]) -> bool {
    fx.iter().any(|e| matches!(e, GoalEffect::Judge { .. }))
}

/// The front end's forms of the machine's `info()`.
impl GoalMachine {
    fn row(&self) -> Option<String> {
        self.info().as_ref().and_then(crate::present::goal_row)
    }

    fn status_text(&self) -> String {
        assert_eq!(self.clone().command(&GoalCmd::Status, true), vec![GoalEffect::ShowStatus { gates_only: false }]);
        crate::present::goal_status(self.info().as_ref())
    }
}

/// `/goal gate list` as the front end shows it.
fn gate_list(m: &mut GoalMachine) -> String {
    assert_eq!(m.command(&GoalCmd::Gate(GateCmd::List), true), vec![GoalEffect::ShowStatus { gates_only: true }]);
    crate::present::gate_list(m.info().as_ref())
}

const CONTINUE: &str = r#"{"verdict":"continue","reason":"more to do"}"#;

#[test]
fn set_while_idle_starts_turn_one_at_once() {
    let mut m = machine();
    let fx = set(&mut m, "make the tests pass", true);
    assert_eq!(
        fx,
        vec![
            info("◎ goal set: make the tests pass (budget 20 turns)"),
            GoalEffect::Save,
            GoalEffect::Continue { prompt: kickoff_prompt("make the tests pass") },
        ]
    );
    assert_eq!(m.row().unwrap(), "goal 1/20 · make the tests pass");
    assert_eq!(m.goal().unwrap().turns_used, 1);
}

#[test]
fn set_while_busy_starts_when_the_turn_ends() {
    let mut m = machine();
    let fx = set(&mut m, "ship it", false);
    assert_eq!(continued(&fx), None);
    assert_eq!(m.row().unwrap(), "goal 0/20 · ship it");
    let fx = m.on_turn_end(TurnOutcome::Completed, "unrelated answer");
    assert_eq!(continued(&fx), Some(kickoff_prompt("ship it")));
    assert_eq!(m.goal().unwrap().turns_used, 1);
}

#[test]
fn replacing_keeps_the_gates_and_says_so() {
    let mut m = machine();
    set(&mut m, "first", true);
    add_gate(&mut m, "cargo test");
    add_gate(&mut m, "cargo clippy");
    let fx = set(&mut m, "second", false);
    assert_eq!(notices(&fx)[0], "◎ goal replaced — keeping its 2 gates: second (budget 20 turns)");
    let g = m.goal().unwrap();
    assert_eq!(g.text, "second");
    assert_eq!(g.gates.iter().map(|g| g.cmd.as_str()).collect::<Vec<_>>(), vec!["cargo test", "cargo clippy"]);
    assert_eq!(g.turns_used, 0);
}

#[test]
fn gate_commands() {
    let mut m = machine();
    set(&mut m, "g", true);
    assert_eq!(add_gate(&mut m, "cargo test"), vec![info("◎ gate 1 added: $ cargo test"), GoalEffect::Save]);
    add_gate(&mut m, "cargo fmt --check");
    let list = gate_list(&mut m);
    assert_eq!(list, "  gates:\n    1. $ cargo test — not run yet\n    2. $ cargo fmt --check — not run yet");
    let fx = m.command(&GoalCmd::Gate(GateCmd::Remove(3)), true);
    assert_eq!(fx, vec![error("no gate 3: there are 2 gates")]);
    let fx = m.command(&GoalCmd::Gate(GateCmd::Remove(1)), true);
    assert_eq!(fx, vec![info("◎ gate 1 removed: $ cargo test"), GoalEffect::Save]);
    let fx = m.command(&GoalCmd::Gate(GateCmd::Clear), true);
    assert_eq!(fx, vec![info("◎ 1 gate removed"), GoalEffect::Save]);
    assert!(m.goal().unwrap().gates.is_empty());
    // Clearing the goal takes its gates with it; one added afterwards waits for the next goal.
    add_gate(&mut m, "true");
    assert_eq!(notices(&m.command(&GoalCmd::Clear, true)), vec!["◎ goal cleared and its gate"]);
    assert_eq!(m.row(), None);
    assert!(notices(&add_gate(&mut m, "true"))[0].contains("applies to the next /goal"));
    assert_eq!(m.row(), None);
}

#[test]
fn without_gates_the_judge_decides() {
    let mut m = machine();
    set(&mut m, "write docs", true);
    let fx = m.on_turn_end(TurnOutcome::Completed, "I wrote README.md.");
    let GoalEffect::Judge { system, prompt } = &fx[0] else { panic!("{fx:?}") };
    assert_eq!(system, JUDGE_SYSTEM);
    assert!(prompt.contains("Goal: write docs") && prompt.contains("I wrote README.md."), "{prompt}");
    assert!(m.in_boundary());
    let fx = m.on_judge_reply(CONTINUE);
    assert_eq!(continued(&fx), Some(continue_prompt("write docs")));
    assert!(!m.in_boundary());
    m.on_turn_end(TurnOutcome::Completed, "done now");
    let fx = m.on_judge_reply("```json\n{\"verdict\":\"done\",\"reason\":\"README covers it\"}\n```");
    assert_eq!(
        fx,
        vec![GoalEffect::Done { message: "✓ goal achieved: write docs — README covers it".into() }, GoalEffect::Save]
    );
    assert_eq!(m.goal().unwrap().status, GoalStatus::Achieved);
    assert_eq!(m.row().unwrap(), "goal ✓ · write docs");
    // An achieved goal does nothing more at turn ends.
    assert_eq!(m.on_turn_end(TurnOutcome::Completed, ""), vec![]);
}

#[test]
fn kickoff_prompt_is_exact() {
    assert_eq!(
        kickoff_prompt("fix it"),
        "[Standing goal set by the user]\nGoal: fix it\n\nWork toward this goal. Take the next concrete step. If you believe the goal is complete, state so explicitly and stop. If you are blocked and need input from the user, say so clearly and stop."
    );
}

#[test]
fn continue_prompt_is_exact() {
    assert_eq!(
        continue_prompt("fix it"),
        "[Continuing toward your standing goal]\nGoal: fix it\n\nContinue working toward this goal. Take the next concrete step. If you believe the goal is complete, state so explicitly and stop. If you are blocked and need input from the user, say so clearly and stop."
    );
}

#[test]
fn turn_budget_pauses_and_resume_grants_a_fresh_one() {
    let mut m = GoalMachine::new(limits(3, 3));
    set(&mut m, "g", true); // turn 1
    for expected in [2, 3] {
        m.on_turn_end(TurnOutcome::Completed, "");
        let fx = m.on_judge_reply(CONTINUE);
        assert!(continued(&fx).is_some());
        assert_eq!(m.goal().unwrap().turns_used, expected);
    }
    m.on_turn_end(TurnOutcome::Completed, "");
    let fx = m.on_judge_reply(CONTINUE);
    assert_eq!(continued(&fx), None);
    assert_eq!(
        paused(&fx).unwrap(),
        "◎ goal paused: its turn budget is spent (3/3). When ready, /goal resume continues it."
    );
    assert_eq!(m.row().unwrap(), "goal paused 3/3 · g");
    let fx = m.command(&GoalCmd::Resume, true);
    assert_eq!(notices(&fx), vec!["◎ goal resumed (3 more turns)"]);
    assert_eq!(continued(&fx), Some(continue_prompt("g")));
    assert_eq!(m.row().unwrap(), "goal 4/6 · g");
}

#[test]
fn gate_failure_prompt_is_exact_and_skips_the_judge() {
    let mut m = machine();
    set(&mut m, "make tests pass", true);
    add_gate(&mut m, "cargo test");
    add_gate(&mut m, "cargo clippy");
    assert_eq!(m.on_turn_end(TurnOutcome::Completed, "done?"), vec![GoalEffect::RunGates]);
    assert_eq!(m.start_gates(Some("fp1".into())), vec![GoalEffect::RunGate { idx: 0, cmd: "cargo test".into() }]);
    assert_eq!(m.row().unwrap(), "goal 1/20 · gate 1/2 … · make tests pass");
    let fx = m.on_gate_result(0, &pass());
    assert_eq!(fx, vec![info("gate 1/2 ✓ $ cargo test"), GoalEffect::RunGate { idx: 1, cmd: "cargo clippy".into() }]);
    let fx = m.on_gate_result(1, &fail(101, "error: unused variable\n"));
    assert!(!is_judge(&fx));
    assert_eq!(
        continued(&fx).unwrap(),
        "[Continuing toward your standing goal — a quality gate failed]\nGoal: make tests pass\nThe quality gate below must pass (attempt 1/3):\n  $ cargo clippy\nExit code: 101\nOutput (tail):\nerror: unused variable\n"
    );
    assert_eq!(notices(&fx), vec!["gate 2/2 ✗ $ cargo clippy — exit 101"]);
    assert_eq!(m.row().unwrap(), "goal 2/20 · gate 2/2 ✗ · make tests pass");
}

#[test]
fn gate_output_in_the_prompt_is_the_last_3000_chars() {
    let out: String = (0..5000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let prompt = gate_failed_prompt("g", "c", 1, 3, 1, &out);
    let (_, tail) = prompt.split_once("Output (tail):\n").unwrap();
    assert_eq!(tail.chars().count(), 3000);
    assert!(out.ends_with(tail));
}

#[test]
fn retries_are_per_gate_exhaustion_pauses_and_a_pass_resets() {
    let mut m = machine();
    set(&mut m, "g", true);
    add_gate(&mut m, "make");
    let boundary = |m: &mut GoalMachine, fp: &str, outcome: GateOutcome| {
        m.on_turn_end(TurnOutcome::Completed, "");
        m.start_gates(Some(fp.into()));
        m.on_gate_result(0, &outcome)
    };
    let fx = boundary(&mut m, "a", fail(2, "x"));
    assert!(continued(&fx).unwrap().contains("(attempt 1/3)"));
    // A pass resets the count.
    let fx = boundary(&mut m, "b", pass());
    assert!(is_judge(&fx));
    assert_eq!(m.goal().unwrap().gates[0].attempts, 0);
    m.on_judge_reply(CONTINUE);
    let fx = boundary(&mut m, "c", fail(2, "x"));
    assert!(continued(&fx).unwrap().contains("(attempt 1/3)"));
    let fx = boundary(&mut m, "d", fail(2, "x"));
    assert!(continued(&fx).unwrap().contains("(attempt 2/3)"));
    let fx = boundary(&mut m, "e", fail(2, "x"));
    assert_eq!(continued(&fx), None);
    assert_eq!(
        paused(&fx).unwrap(),
        "◎ goal paused: gate 1 failed 3 times: $ make. When ready, /goal resume continues it."
    );
    // Resuming gives the exhausted gate its retries back.
    let fx = m.command(&GoalCmd::Resume, false);
    assert_eq!(notices(&fx), vec!["◎ goal resumed (retries reset for $ make)"]);
    assert_eq!(m.goal().unwrap().gates[0].attempts, 0);
}

#[test]
fn unchanged_workspace_replays_the_failure_and_a_change_reruns() {
    let mut m = machine();
    set(&mut m, "g", true);
    add_gate(&mut m, "cargo test");
    m.on_turn_end(TurnOutcome::Completed, "");
    m.start_gates(Some("same".into()));
    m.on_gate_result(0, &fail(1, "test foo failed\n"));
    // The model changed nothing: the gate is not re-run, the failure replays.
    m.on_turn_end(TurnOutcome::Completed, "");
    let fx = m.start_gates(Some("same".into()));
    assert!(!fx.iter().any(|e| matches!(e, GoalEffect::RunGate { .. })), "{fx:?}");
    assert_eq!(
        notices(&fx),
        vec!["gate 1/1 ✗ $ cargo test — not re-run: the workspace has not changed since it failed"]
    );
    let prompt = continued(&fx).unwrap();
    assert!(prompt.contains("(attempt 2/3)") && prompt.ends_with("Exit code: 1\nOutput (tail):\ntest foo failed\n"));
    // Content changed: it runs again.
    m.on_turn_end(TurnOutcome::Completed, "");
    let fx = m.start_gates(Some("changed".into()));
    assert_eq!(fx, vec![GoalEffect::RunGate { idx: 0, cmd: "cargo test".into() }]);
}

/// One run of `false` used to pause the goal "after 3 failures": the two turns that changed
/// nothing counted as failed runs although the gate never ran again.
#[test]
fn a_gate_not_rerun_is_not_a_failed_run_and_the_pause_says_what_happened() {
    let mut m = machine();
    set(&mut m, "g", true);
    add_gate(&mut m, "false");
    m.on_turn_end(TurnOutcome::Completed, "");
    m.start_gates(Some("same".into()));
    let fx = m.on_gate_result(0, &fail(1, ""));
    let prompt = continued(&fx).unwrap();
    assert!(prompt.ends_with("Exit code: 1\nOutput: (none)"), "no empty Output (tail) heading: {prompt:?}");
    for turn in 2..=3 {
        m.on_turn_end(TurnOutcome::Completed, "");
        let fx = m.start_gates(Some("same".into()));
        assert_eq!(m.goal().unwrap().gates[0].attempts, 1, "turn {turn}: still one failed run");
        if turn == 3 {
            let why = paused(&fx).unwrap_or_default();
            assert!(
                why.contains("gate 1 failed once, then 2 turns changed nothing in the workspace: $ false"),
                "{why}"
            );
        }
    }
    // Resuming gives the gate its retries back, the unchanged turns included.
    m.command(&GoalCmd::Resume, false);
    assert_eq!((m.goal().unwrap().gates[0].attempts, m.goal().unwrap().gates[0].unchanged), (0, 0));
}

#[test]
fn without_a_fingerprint_gates_always_rerun() {
    let mut m = machine();
    set(&mut m, "g", true);
    add_gate(&mut m, "t");
    for _ in 0..2 {
        m.on_turn_end(TurnOutcome::Completed, "");
        assert_eq!(m.start_gates(None), vec![GoalEffect::RunGate { idx: 0, cmd: "t".into() }]);
        m.on_gate_result(0, &fail(1, ""));
    }
}

#[test]
fn a_passed_gate_is_never_replayed() {
    let mut m = machine();
    set(&mut m, "g", true);
    add_gate(&mut m, "t");
    m.on_turn_end(TurnOutcome::Completed, "");
    m.start_gates(Some("fp".into()));
    m.on_gate_result(0, &pass());
    m.on_judge_reply(CONTINUE);
    m.on_turn_end(TurnOutcome::Completed, "");
    assert_eq!(m.start_gates(Some("fp".into())), vec![GoalEffect::RunGate { idx: 0, cmd: "t".into() }]);
}

#[test]
fn a_timed_out_gate_is_a_failure() {
    let mut m = machine();
    set(&mut m, "g", true);
    add_gate(&mut m, "sleep 999");
    m.on_turn_end(TurnOutcome::Completed, "");
    m.start_gates(None);
    let out = GateOutcome { exit_code: 124, output_tail: "[gate timed out after 300s]".into(), timed_out: true };
    let fx = m.on_gate_result(0, &out);
    assert_eq!(notices(&fx), vec!["gate 1/1 ✗ $ sleep 999 — timed out"]);
    assert!(continued(&fx).unwrap().ends_with("Exit code: 124\nOutput (tail):\n[gate timed out after 300s]"));
}

#[test]
fn judge_garbage_three_times_in_a_row_pauses() {
    let mut m = machine();
    set(&mut m, "g", true);
    for n in 1..=2 {
        m.on_turn_end(TurnOutcome::Completed, "");
        let fx = m.on_judge_reply("I think you are nearly there!");
        assert_eq!(notices(&fx), vec![format!("judge: the judge's reply had no readable verdict ({n}/3); continuing")]);
        assert!(continued(&fx).is_some());
    }
    // A readable reply in between resets the streak.
    m.on_turn_end(TurnOutcome::Completed, "");
    m.on_judge_reply(&format!("Sure. {CONTINUE}"));
    assert_eq!(m.goal().unwrap().judge_failures, 0);
    for _ in 0..2 {
        m.on_turn_end(TurnOutcome::Completed, "");
        m.on_judge_reply("{broken");
    }
    m.on_turn_end(TurnOutcome::Completed, "");
    let fx = m.on_judge_error("connection refused");
    assert!(paused(&fx).unwrap().contains("3 judge replies in a row had no readable verdict"), "{fx:?}");
    assert_eq!(m.goal().unwrap().status, GoalStatus::Paused);
}

#[test]
fn blocked_pauses_with_the_reason() {
    let mut m = machine();
    set(&mut m, "deploy", true);
    m.on_turn_end(TurnOutcome::Completed, "");
    let fx =
        m.on_judge_reply(r#"The agent asked for credentials. {"verdict":"blocked","reason":"needs the deploy key"}"#);
    assert_eq!(
        fx,
        vec![
            GoalEffect::Paused {
                reason: "the agent is blocked — needs the deploy key".into(),
                message:
                    "◎ goal paused: the agent is blocked — needs the deploy key. When ready, /goal resume continues it."
                        .into(),
            },
            GoalEffect::Save,
        ]
    );
}

#[test]
fn interrupted_or_failed_turns_pause_and_say_how_to_resume() {
    for (outcome, why) in [
        (TurnOutcome::Interrupted, "the turn was interrupted"),
        (TurnOutcome::Failed, "the turn failed"),
        (TurnOutcome::BudgetExhausted, "the turn used up its model calls"),
    ] {
        let mut m = machine();
        set(&mut m, "g", true);
        let msg = paused(&m.on_turn_end(outcome, "")).unwrap();
        assert!(msg.contains(why) && msg.contains("/goal resume"), "{msg}");
    }
    let mut m = machine();
    set(&mut m, "g", true);
    add_gate(&mut m, "t");
    m.on_turn_end(TurnOutcome::Completed, "");
    m.start_gates(None);
    assert!(paused(&m.on_interrupt()).unwrap().contains("you interrupted it"));
    // A gate result that arrives after the interrupt is ignored.
    assert_eq!(m.on_gate_result(0, &pass()), vec![]);
}

#[test]
fn a_resumed_session_brings_an_active_goal_back_paused() {
    let mut m = machine();
    set(&mut m, "g", true);
    let json = m.to_json().unwrap();
    let mut restored = GoalMachine::from_json(limits(20, 3), &json).unwrap();
    let fx = restored.on_session_resumed();
    assert!(paused(&fx).unwrap().contains("the session was resumed"));
    assert_eq!(restored.goal().unwrap().status, GoalStatus::Paused);
    // Nothing happens at turn ends until it is resumed.
    assert_eq!(restored.on_turn_end(TurnOutcome::Completed, ""), vec![]);
    let fx = restored.command(&GoalCmd::Resume, true);
    assert_eq!(continued(&fx), Some(continue_prompt("g")));
    // A paused goal stays paused quietly on resume.
    restored.command(&GoalCmd::Pause, true);
    assert_eq!(restored.on_session_resumed(), vec![]);
}

#[test]
fn persistence_round_trip() {
    let mut m = machine();
    set(&mut m, "make tests pass", true);
    add_gate(&mut m, "cargo test");
    m.on_turn_end(TurnOutcome::Completed, "");
    m.start_gates(Some("abc".into()));
    m.on_gate_result(0, &fail(1, "boom"));
    m.on_turn_end(TurnOutcome::Completed, "");
    m.start_gates(Some("def".into()));
    m.on_gate_result(0, &pass());
    m.on_judge_reply("garbage");
    m.command(&GoalCmd::Pause, true);
    let json = m.to_json().unwrap();
    let back = GoalMachine::from_json(limits(20, 3), &json).unwrap();
    assert_eq!(back.goal(), m.goal());
    assert_eq!(
        back.goal().unwrap(),
        &Goal {
            text: "make tests pass".into(),
            status: GoalStatus::Paused,
            turns_used: 3,
            max_turns: 20,
            gate_max_retries: Some(3),
            gates: vec![Gate {
                cmd: "cargo test".into(),
                attempts: 0,
                unchanged: 0,
                last: Some(GateRecord {
                    passed: true,
                    exit_code: 0,
                    output_tail: "ok\n".into(),
                    timed_out: false,
                    fingerprint: Some("def".into()),
                }),
            }],
            judge_failures: 1,
            pause_reason: Some("you paused it".into()),
            last_verdict: None,
        }
    );
    // A row saved before gates existed still loads.
    let old = r#"{"text":"t","status":"active","turns_used":2,"max_turns":20}"#;
    let old = GoalMachine::from_json(limits(20, 3), old).unwrap();
    assert_eq!(old.row().unwrap(), "goal 2/20 · t");
    assert!(GoalMachine::from_json(limits(20, 3), "{").is_err());
    assert_eq!(state_key("s1"), "goal:s1");
}

#[test]
fn gates_edited_while_one_runs() {
    let mut m = machine();
    set(&mut m, "g", true);
    add_gate(&mut m, "first");
    add_gate(&mut m, "second");
    m.on_turn_end(TurnOutcome::Completed, "");
    m.start_gates(None);
    // The user removes the running gate: its result is dropped and the next one runs.
    m.command(&GoalCmd::Gate(GateCmd::Remove(1)), true);
    let fx = m.on_gate_result(0, &fail(1, ""));
    assert_eq!(fx, vec![GoalEffect::RunGate { idx: 0, cmd: "second".into() }]);
    // A gate added while the last one runs is run too.
    add_gate(&mut m, "third");
    let fx = m.on_gate_result(0, &pass());
    assert_eq!(fx[1], GoalEffect::RunGate { idx: 1, cmd: "third".into() });
}

#[test]
fn commands_during_boundary_work_abandon_it() {
    let mut m = machine();
    set(&mut m, "old", true);
    add_gate(&mut m, "t");
    m.on_turn_end(TurnOutcome::Completed, "");
    m.start_gates(None);
    let fx = set(&mut m, "new", false);
    assert_eq!(fx[0], GoalEffect::Abandon);
    // No turn is running, so the new goal starts now rather than waiting for one.
    assert_eq!(continued(&fx), Some(kickoff_prompt("new")));
    assert_eq!(m.on_gate_result(0, &fail(1, "")), vec![]);
}

#[test]
fn status_text_lists_everything() {
    let mut m = machine();
    assert_eq!(m.status_text(), "no goal; set one with /goal <text>");
    set(&mut m, "g", true);
    add_gate(&mut m, "t");
    m.on_turn_end(TurnOutcome::Completed, "");
    m.start_gates(None);
    m.on_gate_result(0, &fail(4, ""));
    m.command(&GoalCmd::Pause, true);
    assert_eq!(
        m.status_text(),
        "◎ goal (paused): g\n  turns 2/20\n  paused because you paused it — /goal resume continues it\n  gates:\n    1. $ t — ✗ exit 4 (attempt 1/3)"
    );
}

#[test]
fn row_truncates_long_goal_text() {
    let mut m = machine();
    set(&mut m, "refactor the whole storage layer so that every query goes through one pool", true);
    assert_eq!(m.row().unwrap(), "goal 1/20 · refactor the whole storage layer so tha…");
}

#[test]
fn gates_added_before_a_goal_wait_for_it_and_survive_a_save() {
    let mut m = machine();
    let fx = add_gate(&mut m, "cargo test");
    assert_eq!(
        fx,
        vec![info("◎ gate 1 added: $ cargo test — no goal yet: it applies to the next /goal <text>"), GoalEffect::Save]
    );
    assert!(m.row().is_none(), "no goal in the status line yet");
    let listed = gate_list(&mut m);
    assert!(listed.contains("1. $ cargo test"), "{listed}");
    let mut m = GoalMachine::from_json(limits(20, 3), &m.to_json().unwrap()).unwrap();
    let fx = set(&mut m, "make the tests pass", true);
    assert!(notices(&fx)[0].contains("with the gate added before it"), "{fx:?}");
    assert_eq!(m.goal().unwrap().gates.len(), 1);
    assert_eq!(m.goal().unwrap().status, GoalStatus::Active);
}

#[test]
fn removing_the_last_gate_by_its_number_works() {
    let mut m = machine();
    set(&mut m, "g", true);
    add_gate(&mut m, "a");
    add_gate(&mut m, "b");
    let fx = m.command(&GoalCmd::Gate(GateCmd::Remove(2)), true);
    assert_eq!(fx, vec![info("◎ gate 2 removed: $ b"), GoalEffect::Save]);
    let fx = m.command(&GoalCmd::Gate(GateCmd::Remove(0)), true);
    assert_eq!(fx, vec![error("no gate 0: there is 1 gate")]);
}

#[test]
fn gates_waiting_for_a_goal_are_removed_by_their_number() {
    let mut m = machine();
    add_gate(&mut m, "a");
    add_gate(&mut m, "b");
    add_gate(&mut m, "c");
    let remove = |m: &mut GoalMachine, n: usize| m.command(&GoalCmd::Gate(GateCmd::Remove(n)), true);
    assert_eq!(remove(&mut m, 0), vec![error("no gate 0: 3 gates are waiting for a goal")]);
    assert_eq!(remove(&mut m, 4), vec![error("no gate 4: 3 gates are waiting for a goal")]);
    assert_eq!(remove(&mut m, 3), vec![info("◎ gate 3 removed: $ c"), GoalEffect::Save]);
    assert_eq!(remove(&mut m, 1), vec![info("◎ gate 1 removed: $ a"), GoalEffect::Save]);
    assert_eq!(remove(&mut m, 2), vec![error("no gate 2: 1 gate is waiting for a goal")]);
    assert_eq!(remove(&mut m, 1), vec![info("◎ gate 1 removed: $ b"), GoalEffect::Save]);
    assert_eq!(remove(&mut m, 1), vec![error("no gate 1: no gates are waiting for a goal")]);
}

#[test]
fn pausing_a_goal_that_is_not_active_changes_nothing() {
    let mut m = machine();
    set(&mut m, "g", true);
    assert!(paused(&m.command(&GoalCmd::Pause, true)).is_some());
    let before = m.clone();
    assert_eq!(m.command(&GoalCmd::Pause, true), vec![info("the goal is paused, not active")]);
    assert_eq!(m.to_json().unwrap(), before.to_json().unwrap());
}

#[test]
fn a_gate_result_for_another_gate_or_a_goal_no_longer_active_is_dropped() {
    let mut m = machine();
    set(&mut m, "g", true);
    add_gate(&mut m, "a");
    add_gate(&mut m, "b");
    m.on_turn_end(TurnOutcome::Completed, "");
    assert_eq!(m.start_gates(None), vec![GoalEffect::RunGate { idx: 0, cmd: "a".into() }]);
    // A late answer for a gate that is not the one running changes nothing…
    assert_eq!(m.on_gate_result(1, &fail(1, "late")), vec![]);
    assert!(m.goal().unwrap().gates[1].last.is_none());
    // …and the running gate's own result still counts.
    let fx = m.on_gate_result(0, &pass());
    assert_eq!(fx, vec![info("gate 1/2 ✓ $ a"), GoalEffect::RunGate { idx: 1, cmd: "b".into() }]);
    // The goal stopped being active while its gate ran: the result is dropped.
    m.goal.as_mut().unwrap().status = GoalStatus::Paused;
    assert_eq!(m.on_gate_result(1, &fail(1, "x")), vec![]);
    assert!(m.goal().unwrap().gates[1].last.is_none());
}
