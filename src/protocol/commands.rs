//! Slash commands (DESIGN §5): the types both sides share, and the pure parser.
//!
//! `parse` turns text into a [`Command`]: either a [`UiCommand`] the front end handles by
//! itself (quit, help, mouse, copy) or a [`SlashCommand`] it sends to the engine as
//! `Op::Command`. Nothing here touches the engine's state.

use serde::{Deserialize, Serialize};

use crate::protocol::{ApprovalMode, BusyMode};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeartbeatCmd {
    Set { interval_s: u64, prompt: String },
    Status,
    Pause,
    Resume,
    Clear,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GateCmd {
    List,
    Add(String),
    Remove(usize),
    Clear,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GoalCmd {
    Set(String),
    Status,
    Pause,
    Resume,
    Clear,
    Gate(GateCmd),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobsCmd {
    List,
    Log(String),
    Poll(String),
    Kill(String),
}

/// A command the engine carries out (`Op::Command`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SlashCommand {
    New,
    Resume(Option<String>),
    Sessions,
    Title(String),
    Retry,
    Undo(usize),
    Stop,
    Busy(Option<BusyMode>),
    Jobs(JobsCmd),
    Model(Option<String>),
    Heartbeat(HeartbeatCmd),
    Goal(GoalCmd),
    Pause(Option<String>),
    Unpause,
    /// Summarise older turns; the optional text says what to focus on.
    Compact(Option<String>),
    Usage,
    /// `/permissions` (or `/sandbox`): the sandbox mode, writable roots, approvals mode.
    Permissions,
    /// `/network`: this session's connections through the network proxy (DESIGN §6b).
    Network,
    /// `/approvals [auto|prompt|off]`: show or switch what asks, for this session.
    Approvals(Option<ApprovalMode>),
    /// `/backend [local|ssh <host>|docker <container>]`: show or switch where commands run.
    Backend(Option<crate::protocol::Backend>),
    Mcp(McpCmd),
    /// `/rewind`: the picker, or a rewind to before entry n (DESIGN §13).
    Rewind(super::rewind::RewindCmd),
    /// `/diff [n|session]`: what a turn changed, as a unified diff.
    Diff(super::rewind::DiffTarget),
}

/// `/mcp`: the MCP servers (DESIGN §12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpCmd {
    /// Every server: state, tool count, last error.
    List,
    Restart(String),
    /// One server's tools, or every server's.
    Tools(Option<String>),
}

/// A command only the front end acts on; the engine never sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UiCommand {
    Help,
    Quit,
    /// Toggle mouse capture (so the terminal's own selection works).
    Mouse,
    /// Copy the last answer to the clipboard (OSC 52).
    Copy,
}

/// What a slash command line parses to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    Ui(UiCommand),
    Engine(SlashCommand),
}

impl From<SlashCommand> for Command {
    fn from(c: SlashCommand) -> Command {
        Command::Engine(c)
    }
}

impl From<UiCommand> for Command {
    fn from(c: UiCommand) -> Command {
        Command::Ui(c)
    }
}

/// One entry of the command list shown by `/help` and the completion popup.
pub(crate) struct CommandHelp {
    pub(crate) usage: &'static str,
    pub(crate) help: &'static str,
}

/// Every command with its usage and one-line help: the single source for `/help`,
/// completion, and usage errors.
pub(crate) const COMMANDS: &[CommandHelp] = &[
    CommandHelp { usage: "/help", help: "list keys and commands" },
    CommandHelp { usage: "/new", help: "start a fresh session" },
    CommandHelp { usage: "/resume [id|title]", help: "resume a session" },
    CommandHelp { usage: "/sessions", help: "list sessions" },
    CommandHelp { usage: "/title <text>", help: "name this session" },
    CommandHelp { usage: "/retry", help: "re-send the last message" },
    CommandHelp { usage: "/undo [n]", help: "remove the last n exchanges" },
    CommandHelp {
        usage: "/rewind [n] [code|conversation|both] [--all]",
        help: "go back to before a turn: files the agent changed and/or the conversation (Esc Esc)",
    },
    CommandHelp {
        usage: "/diff [n|all]",
        help: "what the last turn (turn n, or all the session) changed, as a coloured diff to scroll",
    },
    CommandHelp { usage: "/stop", help: "interrupt the running turn" },
    CommandHelp { usage: "/quit", help: "leave Talaria" },
    CommandHelp { usage: "/busy [redirect|steer|queue]", help: "what typing while busy does" },
    CommandHelp { usage: "/approvals [auto|prompt|off]", help: "what asks before it runs, for this session" },
    CommandHelp { usage: "/jobs [log|poll|kill <id>]", help: "background jobs" },
    CommandHelp { usage: "/model [name]", help: "list or switch models" },
    CommandHelp {
        usage: "/heartbeat every <interval> <prompt>",
        help: "recurring idle instruction (also status|pause|resume|clear, off|stop = clear; alias /hb)",
    },
    CommandHelp { usage: "/goal <text>", help: "standing goal (also status|pause|resume|clear)" },
    CommandHelp { usage: "/goal gate [list|add <cmd>|remove <n>|clear]", help: "shell quality gates for the goal" },
    CommandHelp { usage: "/pause [reason]", help: "pause all autonomous work" },
    CommandHelp { usage: "/unpause", help: "lift the pause" },
    CommandHelp { usage: "/compact [focus]", help: "summarise older turns to free context" },
    CommandHelp { usage: "/usage", help: "tokens and cost: the session over every run, this run, the last turn" },
    CommandHelp { usage: "/permissions", help: "the sandbox: mode, writable roots, approvals (alias /sandbox)" },
    CommandHelp { usage: "/network", help: "connections through talaria's network proxy: job, host, bytes, verdict" },
    CommandHelp { usage: "/backend [local|ssh <host>|docker <name>]", help: "where commands run: show or switch" },
    CommandHelp { usage: "/mcp [restart <name>|tools [name]]", help: "MCP servers: state, tools, restart one" },
    CommandHelp { usage: "/mouse", help: "toggle mouse capture (off: select text with the mouse)" },
    CommandHelp { usage: "/copy", help: "copy the last answer to the clipboard" },
];

/// Minimum heartbeat interval (DESIGN §5).
pub(crate) const HEARTBEAT_FLOOR_S: u64 = 60;

fn usage_of(prefix: &str) -> String {
    let found: Vec<&str> =
        COMMANDS.iter().filter(|c| c.usage.split_whitespace().next() == Some(prefix)).map(|c| c.usage).collect();
    if found.is_empty() {
        format!("usage: {prefix}")
    } else {
        format!("usage: {}", found.join(" · "))
    }
}

/// True when `text` is meant as a slash command (not a path like `/etc/hosts is…`).
pub(crate) fn is_command(text: &str) -> bool {
    let t = text.trim_start();
    if !t.starts_with('/') {
        return false;
    }
    let word = t[1..].split_whitespace().next().unwrap_or("");
    !word.is_empty() && !word.contains('/')
}

/// Parse one slash command. The error is a one-line message with the correct usage.
pub(crate) fn parse(text: &str) -> Result<Command, String> {
    let t = text.trim();
    let (head, rest) = match t.find(char::is_whitespace) {
        Some(i) => (&t[..i], t[i..].trim()),
        None => (t, ""),
    };
    let args: Vec<&str> = rest.split_whitespace().collect();
    let no_args = |cmd: Command| {
        if args.is_empty() {
            Ok(cmd)
        } else {
            Err(format!("{head} takes no arguments; {}", usage_of(head)))
        }
    };
    match head {
        "/help" | "/?" => no_args(UiCommand::Help.into()),
        "/new" => no_args(SlashCommand::New.into()),
        "/resume" => Ok(Command::Engine(SlashCommand::Resume((!rest.is_empty()).then(|| rest.to_string())))),
        "/sessions" => no_args(SlashCommand::Sessions.into()),
        "/title" => {
            if rest.is_empty() {
                Err(usage_of("/title"))
            } else {
                Ok(Command::Engine(SlashCommand::Title(rest.to_string())))
            }
        }
        "/retry" => no_args(SlashCommand::Retry.into()),
        "/undo" => match args.as_slice() {
            [] => Ok(Command::Engine(SlashCommand::Undo(1))),
            [n] => match n.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Command::Engine(SlashCommand::Undo(n))),
                _ => Err(format!("not a positive number: {n}; {}", usage_of("/undo"))),
            },
            _ => Err(usage_of("/undo")),
        },
        "/rewind" => parse_rewind(&args).map(|c| Command::Engine(SlashCommand::Rewind(c))),
        "/diff" => match args.as_slice() {
            [] => Ok(Command::Engine(SlashCommand::Diff(super::rewind::DiffTarget::Last))),
            ["all" | "session"] => Ok(Command::Engine(SlashCommand::Diff(super::rewind::DiffTarget::Session))),
            [n] => match n.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Command::Engine(SlashCommand::Diff(super::rewind::DiffTarget::Turn(n)))),
                _ => Err(usage_of("/diff")),
            },
            _ => Err(usage_of("/diff")),
        },
        "/stop" => no_args(SlashCommand::Stop.into()),
        "/quit" | "/exit" | "/q" => no_args(UiCommand::Quit.into()),
        "/approvals" => match args.as_slice() {
            [] => Ok(Command::Engine(SlashCommand::Approvals(None))),
            [m] => ApprovalMode::parse(m)
                .map(|m| SlashCommand::Approvals(Some(m)).into())
                .ok_or_else(|| format!("unknown mode '{m}'; {}", usage_of("/approvals"))),
            _ => Err(usage_of("/approvals")),
        },
        "/busy" => match args.as_slice() {
            [] => Ok(Command::Engine(SlashCommand::Busy(None))),
            [m] => BusyMode::parse(m)
                .map(|m| SlashCommand::Busy(Some(m)).into())
                .ok_or_else(|| format!("unknown mode '{m}'; {}", usage_of("/busy"))),
            _ => Err(usage_of("/busy")),
        },
        "/jobs" => match args.as_slice() {
            [] | ["list"] => Ok(Command::Engine(SlashCommand::Jobs(JobsCmd::List))),
            ["log", id] => Ok(Command::Engine(SlashCommand::Jobs(JobsCmd::Log(job_id(id))))),
            ["poll", id] => Ok(Command::Engine(SlashCommand::Jobs(JobsCmd::Poll(job_id(id))))),
            ["kill", id] => Ok(Command::Engine(SlashCommand::Jobs(JobsCmd::Kill(job_id(id))))),
            _ => Err(usage_of("/jobs")),
        },
        "/model" => match args.as_slice() {
            [] => Ok(Command::Engine(SlashCommand::Model(None))),
            [m] => Ok(Command::Engine(SlashCommand::Model(Some(m.to_string())))),
            _ => Err(usage_of("/model")),
        },
        "/heartbeat" | "/hb" => parse_heartbeat(rest).map(|c| SlashCommand::Heartbeat(c).into()),
        "/goal" => parse_goal(rest).map(|c| SlashCommand::Goal(c).into()),
        "/pause" => Ok(Command::Engine(SlashCommand::Pause((!rest.is_empty()).then(|| rest.to_string())))),
        "/unpause" => no_args(SlashCommand::Unpause.into()),
        "/compact" => Ok(Command::Engine(SlashCommand::Compact((!rest.is_empty()).then(|| rest.to_string())))),
        "/usage" => no_args(SlashCommand::Usage.into()),
        "/permissions" | "/sandbox" => no_args(SlashCommand::Permissions.into()),
        "/network" => no_args(SlashCommand::Network.into()),
        "/backend" => match crate::protocol::Backend::parse(rest) {
            _ if rest.is_empty() => Ok(Command::Engine(SlashCommand::Backend(None))),
            Ok(b) => Ok(Command::Engine(SlashCommand::Backend(Some(b)))),
            Err(e) => Err(format!("{e}; {}", usage_of("/backend"))),
        },
        "/mcp" => match args.as_slice() {
            [] | ["list"] => Ok(Command::Engine(SlashCommand::Mcp(McpCmd::List))),
            ["restart", name] => Ok(Command::Engine(SlashCommand::Mcp(McpCmd::Restart(name.to_string())))),
            ["tools"] => Ok(Command::Engine(SlashCommand::Mcp(McpCmd::Tools(None)))),
            ["tools", name] => Ok(Command::Engine(SlashCommand::Mcp(McpCmd::Tools(Some(name.to_string()))))),
            _ => Err(usage_of("/mcp")),
        },
        "/mouse" => no_args(UiCommand::Mouse.into()),
        "/copy" => no_args(UiCommand::Copy.into()),
        _ => Err(format!("unknown command {head}; type /help for the list")),
    }
}

/// Accept `3` as shorthand for `job_3`.
fn job_id(s: &str) -> String {
    if s.chars().all(|c| c.is_ascii_digit()) {
        format!("job_{s}")
    } else {
        s.to_string()
    }
}

fn parse_heartbeat(rest: &str) -> Result<HeartbeatCmd, String> {
    let usage = || usage_of("/heartbeat") + " · /heartbeat [status|pause|resume|clear|off|stop]";
    let mut words = rest.split_whitespace();
    match words.next() {
        None | Some("status") if rest.split_whitespace().count() <= 1 => Ok(HeartbeatCmd::Status),
        Some("pause") if words.next().is_none() => Ok(HeartbeatCmd::Pause),
        Some("resume") if words.next().is_none() => Ok(HeartbeatCmd::Resume),
        // `off` and `stop` are what people type first; they mean clear.
        Some("clear" | "off" | "stop") if words.next().is_none() => Ok(HeartbeatCmd::Clear),
        Some("every") => {
            let after: Vec<&str> = words.collect();
            let (interval_s, used) = parse_interval_words(&after).ok_or_else(|| {
                format!("could not read an interval (e.g. 90s, 10m, 2h, 1d, 90 minutes); {}", usage())
            })?;
            if interval_s < HEARTBEAT_FLOOR_S {
                return Err(format!(
                    "interval {} is too short: the minimum is {}",
                    format_interval(interval_s),
                    format_interval(HEARTBEAT_FLOOR_S)
                ));
            }
            let prompt = after[used..].join(" ");
            if prompt.trim().is_empty() {
                return Err(format!("a heartbeat needs a prompt; {}", usage()));
            }
            Ok(HeartbeatCmd::Set { interval_s, prompt })
        }
        _ => Err(usage()),
    }
}

/// Read an interval from the start of `words`: `90s`, `10m`, `2h`, `1d`, or `90 minutes`.
/// Returns the seconds and how many words it used.
/// `/rewind [n] [code|conversation|both] [--yes] [--all]`.
fn parse_rewind(args: &[&str]) -> Result<super::rewind::RewindCmd, String> {
    use super::rewind::{RewindCmd, RewindMode};
    let mut cmd = RewindCmd { target: None, mode: RewindMode::Both, yes: false, include_user: false };
    for word in args {
        match *word {
            "--yes" => cmd.yes = true,
            "--all" => cmd.include_user = true,
            w => match (w.parse::<usize>(), RewindMode::parse(w)) {
                (Ok(n), _) if n >= 1 && cmd.target.is_none() => cmd.target = Some(n),
                (_, Some(mode)) => cmd.mode = mode,
                _ => return Err(usage_of("/rewind")),
            },
        }
    }
    Ok(cmd)
}

pub(crate) fn parse_interval_words(words: &[&str]) -> Option<(u64, usize)> {
    let first = words.first()?;
    let digits: String = first.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.is_empty() {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let unit_inline = &first[digits.len()..];
    let (unit, used) = if unit_inline.is_empty() { (*words.get(1)?, 2) } else { (unit_inline, 1) };
    let mult = match unit.to_ascii_lowercase().as_str() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        _ => return None,
    };
    Some((n.checked_mul(mult)?, used))
}

/// Canonical form of an interval: the largest whole unit (`90s`, `10m`, `2h`, `1d`).
pub(crate) fn format_interval(secs: u64) -> String {
    if secs > 0 && secs % 86_400 == 0 {
        format!("{}d", secs / 86_400)
    } else if secs > 0 && secs % 3600 == 0 {
        format!("{}h", secs / 3600)
    } else if secs > 0 && secs % 60 == 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

fn parse_goal(rest: &str) -> Result<GoalCmd, String> {
    let mut words = rest.split_whitespace();
    let first = words.next();
    let single = rest.split_whitespace().count() == 1;
    match first {
        None => Ok(GoalCmd::Status),
        Some("status") if single => Ok(GoalCmd::Status),
        Some("pause") if single => Ok(GoalCmd::Pause),
        Some("resume") if single => Ok(GoalCmd::Resume),
        Some("clear") if single => Ok(GoalCmd::Clear),
        Some("gate") => {
            let gate_usage = || usage_of("/goal").replace("/goal <text> · ", "");
            let sub = words.next();
            let tail = rest.trim_start().strip_prefix("gate").unwrap_or("").trim_start();
            match sub {
                None | Some("list") if words.next().is_none() => Ok(GoalCmd::Gate(GateCmd::List)),
                Some("clear") if words.next().is_none() => Ok(GoalCmd::Gate(GateCmd::Clear)),
                Some("add") => {
                    let cmd = tail.strip_prefix("add").unwrap_or("").trim();
                    if cmd.is_empty() {
                        Err(format!("a gate needs a command; {}", gate_usage()))
                    } else {
                        Ok(GoalCmd::Gate(GateCmd::Add(cmd.to_string())))
                    }
                }
                Some("remove") => match (words.next(), words.next()) {
                    (Some(n), None) => match n.parse::<usize>() {
                        Ok(n) if n >= 1 => Ok(GoalCmd::Gate(GateCmd::Remove(n))),
                        _ => Err(format!("not a gate number: {n}; {}", gate_usage())),
                    },
                    _ => Err(gate_usage()),
                },
                _ => Err(gate_usage()),
            }
        }
        Some(_) => Ok(GoalCmd::Set(rest.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn simple_commands() {
        assert_eq!(parse("/help"), Ok(Command::Ui(UiCommand::Help)));
        assert_eq!(parse("/new"), Ok(Command::Engine(SlashCommand::New)));
        assert_eq!(parse("/quit"), Ok(Command::Ui(UiCommand::Quit)));
        assert_eq!(parse("/stop"), Ok(Command::Engine(SlashCommand::Stop)));
        assert_eq!(parse("/retry"), Ok(Command::Engine(SlashCommand::Retry)));
        assert_eq!(parse("/undo"), Ok(Command::Engine(SlashCommand::Undo(1))));
        use crate::protocol::rewind::{DiffTarget, RewindCmd, RewindMode};
        let rewind = |target, mode, yes, include_user| {
            Ok(Command::Engine(SlashCommand::Rewind(RewindCmd { target, mode, yes, include_user })))
        };
        assert_eq!(parse("/rewind"), rewind(None, RewindMode::Both, false, false));
        assert_eq!(parse("/rewind 2 code"), rewind(Some(2), RewindMode::Code, false, false));
        assert_eq!(parse("/rewind 3 conversation --yes --all"), rewind(Some(3), RewindMode::Conversation, true, true));
        assert!(parse("/rewind 2 sideways").unwrap_err().contains("usage: /rewind"));
        assert_eq!(parse("/diff"), Ok(Command::Engine(SlashCommand::Diff(DiffTarget::Last))));
        assert_eq!(parse("/diff 4"), Ok(Command::Engine(SlashCommand::Diff(DiffTarget::Turn(4)))));
        assert_eq!(parse("/diff session"), Ok(Command::Engine(SlashCommand::Diff(DiffTarget::Session))));
        assert_eq!(parse("/diff all"), Ok(Command::Engine(SlashCommand::Diff(DiffTarget::Session))));
        assert_eq!(parse("/undo 3"), Ok(Command::Engine(SlashCommand::Undo(3))));
        assert!(parse("/undo zero").unwrap_err().contains("usage: /undo [n]"));
        assert!(parse("/new now").unwrap_err().contains("takes no arguments"));
        assert_eq!(parse("/resume"), Ok(Command::Engine(SlashCommand::Resume(None))));
        assert_eq!(parse("/resume my title"), Ok(Command::Engine(SlashCommand::Resume(Some("my title".into())))));
        assert_eq!(parse("/title  Fix the build "), Ok(Command::Engine(SlashCommand::Title("Fix the build".into()))));
        assert!(parse("/title").is_err());
    }

    #[test]
    fn busy_and_jobs() {
        assert_eq!(parse("/busy"), Ok(Command::Engine(SlashCommand::Busy(None))));
        assert_eq!(parse("/busy steer"), Ok(Command::Engine(SlashCommand::Busy(Some(BusyMode::Steer)))));
        assert!(parse("/busy sideways").unwrap_err().contains("redirect|steer|queue"));
        assert_eq!(parse("/approvals"), Ok(Command::Engine(SlashCommand::Approvals(None))));
        assert_eq!(
            parse("/approvals Prompt"),
            Ok(Command::Engine(SlashCommand::Approvals(Some(ApprovalMode::Prompt))))
        );
        assert!(parse("/approvals never").unwrap_err().contains("auto|prompt|off"));
        assert_eq!(parse("/jobs"), Ok(Command::Engine(SlashCommand::Jobs(JobsCmd::List))));
        assert_eq!(parse("/jobs kill 3"), Ok(Command::Engine(SlashCommand::Jobs(JobsCmd::Kill("job_3".into())))));
        assert_eq!(parse("/jobs log job_2"), Ok(Command::Engine(SlashCommand::Jobs(JobsCmd::Log("job_2".into())))));
        assert!(parse("/jobs frob").is_err());
    }

    #[test]
    fn mcp_commands() {
        let mcp = |c| Ok(Command::Engine(SlashCommand::Mcp(c)));
        assert_eq!(parse("/mcp"), mcp(McpCmd::List));
        assert_eq!(parse("/mcp restart files"), mcp(McpCmd::Restart("files".into())));
        assert_eq!(parse("/mcp tools"), mcp(McpCmd::Tools(None)));
        assert_eq!(parse("/mcp tools files"), mcp(McpCmd::Tools(Some("files".into()))));
        assert!(parse("/mcp restart").unwrap_err().contains("usage: /mcp [restart <name>|tools [name]]"));
        assert!(parse("/mcp frob").is_err());
    }

    #[test]
    fn unknown_command_is_an_error() {
        assert!(parse("/frobnicate").unwrap_err().contains("unknown command /frobnicate"));
        assert!(is_command("/help"));
        assert!(!is_command("/etc/hosts is broken"));
        assert!(!is_command("hello"));
    }

    #[test]
    fn heartbeat_intervals() {
        assert_eq!(
            parse("/heartbeat every 10m check the build"),
            Ok(Command::Engine(SlashCommand::Heartbeat(HeartbeatCmd::Set {
                interval_s: 600,
                prompt: "check the build".into()
            })))
        );
        assert_eq!(
            parse("/hb every 90 minutes look"),
            Ok(Command::Engine(SlashCommand::Heartbeat(HeartbeatCmd::Set { interval_s: 5400, prompt: "look".into() })))
        );
        assert_eq!(
            parse("/hb every 2h x"),
            Ok(Command::Engine(SlashCommand::Heartbeat(HeartbeatCmd::Set { interval_s: 7200, prompt: "x".into() })))
        );
        assert_eq!(
            parse("/hb every 1d x"),
            Ok(Command::Engine(SlashCommand::Heartbeat(HeartbeatCmd::Set { interval_s: 86400, prompt: "x".into() })))
        );
        let err = parse("/hb every 30s x").unwrap_err();
        assert!(err.contains("minimum is 1m"), "{err}");
        assert!(parse("/hb every 10m").unwrap_err().contains("needs a prompt"));
        assert!(parse("/hb every soon x").is_err());
        assert_eq!(parse("/hb"), Ok(Command::Engine(SlashCommand::Heartbeat(HeartbeatCmd::Status))));
        let usage = parse("/heartbeat sometimes").unwrap_err();
        assert!(usage.contains("off|stop"), "the usage names the aliases: {usage}");
        assert!(COMMANDS.iter().any(|c| c.usage.starts_with("/heartbeat") && c.help.contains("off|stop")));
        for alias in ["/heartbeat off", "/hb stop", "/heartbeat clear"] {
            assert_eq!(parse(alias), Ok(Command::Engine(SlashCommand::Heartbeat(HeartbeatCmd::Clear))), "{alias}");
        }
        assert_eq!(parse("/heartbeat pause"), Ok(Command::Engine(SlashCommand::Heartbeat(HeartbeatCmd::Pause))));
        assert_eq!(parse("/heartbeat clear"), Ok(Command::Engine(SlashCommand::Heartbeat(HeartbeatCmd::Clear))));
        assert_eq!(format_interval(90), "90s");
        assert_eq!(format_interval(600), "10m");
        assert_eq!(format_interval(5400), "90m");
        assert_eq!(format_interval(7200), "2h");
    }

    #[test]
    fn goals_and_gates() {
        assert_eq!(parse("/goal"), Ok(Command::Engine(SlashCommand::Goal(GoalCmd::Status))));
        assert_eq!(
            parse("/goal make the tests pass"),
            Ok(Command::Engine(SlashCommand::Goal(GoalCmd::Set("make the tests pass".into()))))
        );
        assert_eq!(parse("/goal pause"), Ok(Command::Engine(SlashCommand::Goal(GoalCmd::Pause))));
        assert_eq!(parse("/goal gate"), Ok(Command::Engine(SlashCommand::Goal(GoalCmd::Gate(GateCmd::List)))));
        assert_eq!(
            parse("/goal gate add cargo test  --quiet"),
            Ok(Command::Engine(SlashCommand::Goal(GoalCmd::Gate(GateCmd::Add("cargo test  --quiet".into())))))
        );
        assert_eq!(
            parse("/goal gate remove 2"),
            Ok(Command::Engine(SlashCommand::Goal(GoalCmd::Gate(GateCmd::Remove(2)))))
        );
        assert!(parse("/goal gate remove x").is_err());
        assert!(parse("/goal gate add").unwrap_err().contains("needs a command"));
        assert_eq!(parse("/pause lunch"), Ok(Command::Engine(SlashCommand::Pause(Some("lunch".into())))));
        assert_eq!(parse("/unpause"), Ok(Command::Engine(SlashCommand::Unpause)));
        assert_eq!(parse("/compact"), Ok(Command::Engine(SlashCommand::Compact(None))));
        assert_eq!(
            parse("/compact the db schema"),
            Ok(Command::Engine(SlashCommand::Compact(Some("the db schema".into()))))
        );
        assert_eq!(parse("/usage"), Ok(Command::Engine(SlashCommand::Usage)));
        assert_eq!(parse("/permissions"), Ok(Command::Engine(SlashCommand::Permissions)));
        assert_eq!(parse("/network"), Ok(Command::Engine(SlashCommand::Network)));
        assert_eq!(parse("/backend"), Ok(Command::Engine(SlashCommand::Backend(None))));
        use crate::protocol::Backend;
        assert_eq!(
            parse("/backend ssh box"),
            Ok(Command::Engine(SlashCommand::Backend(Some(Backend::Ssh("box".into())))))
        );
        assert_eq!(
            parse("/backend docker:ci"),
            Ok(Command::Engine(SlashCommand::Backend(Some(Backend::Docker("ci".into())))))
        );
        assert_eq!(parse("/backend local"), Ok(Command::Engine(SlashCommand::Backend(Some(Backend::Local)))));
        assert!(parse("/backend ftp x").unwrap_err().contains("/backend"));
        assert_eq!(parse("/sandbox"), Ok(Command::Engine(SlashCommand::Permissions)));
    }

    #[test]
    fn every_listed_command_parses() {
        for c in COMMANDS {
            let head = c.usage.split_whitespace().next().unwrap();
            if let Err(e) = parse(head) {
                assert!(!e.contains("unknown command"), "{head} is listed but not parsed: {e}");
            }
        }
    }
}
