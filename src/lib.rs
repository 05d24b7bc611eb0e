//! Talaria: a full-screen terminal AI agent you never wait for.
//!
//! Module map. Imports point one way: down this list, never up or across a line's
//! neighbours (`tests/module_graph.rs` builds the graph of the shipped code and fails on a
//! cycle; unit tests may use what is above them, e.g. the scripted model server). Outside
//! `src/engine/` only `main.rs` names `engine::`; `acp` and `subagent` go through
//! `engine::api`, and nothing else names the engine at all (the same test).
//! ```text
//! main              CLI (clap): parse, load config, init logging, pick a mode, start engines
//! testkit           tests only (`testkit` feature): scripted model server, non-engine fuzz bodies
//! acp, subagent     front ends that open sessions: the editor protocol; a sub-agent's stdin/stdout
//! engine::api       the engine as those front ends see it (sessions, a sub-agent's hello, policy)
//! engine::session   the engine task: receives Op, performs the scheduler's effects, emits Event
//! engine::turn      one turn: model -> tools -> model
//! engine::compaction  summarising older turns
//! engine::history   stored rows <-> model messages and transcript items
//! engine::{mcp, mentions, fuzz}  MCP servers (their tools join the registry as a ToolSource)
//! engine::{goal, tools}  goals and gates; the model's tools (processes only through jobs)
//! engine::jobs      every spawned process: job registry, supervisors, logs, watches, notices
//! engine::{agents, approval, rewind}  sub-agents, the approval flow, workspace snapshots
//! engine::{backend, store, netproxy, context}  local/ssh/docker; SQLite; the proxy; ctx meter
//! engine::cadence  when the next request is expected: the cache lifetime a turn asks for
//! engine::{llm, sandbox, activity}  providers and the token estimate; containment; liveness
//! engine::{scheduler, heartbeat, bang}, engine  pure cores; `engine` itself is the EventSink
//! exec, tui         front ends that speak only `protocol` (Op out, Event in) and `present`
//! config, present   typed config (its own types); the plain text shared for data events
//! protocol          Op, Event, slash commands, Backend, usage, proxy connections: both sides' types
//! engine::{process, args, estop, signals, instructions}  leaves: shell quoting and process
//!                   groups, tool-argument helpers, the pause file, signals, AGENTS.md files
//! text, util, paths, logging, loopback, memory, emulate, secrets, config_edit  leaves
//! ```

// A failure that can happen is handled; tests may unwrap (as in codex-rs).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod acp;
pub mod config;
pub(crate) mod config_edit;
pub mod emulate;
pub mod engine;
pub mod exec;
pub mod logging;
pub(crate) mod loopback;
pub(crate) mod memory;
pub use memory::one_malloc_arena;
pub mod paths;
pub mod present;
pub mod protocol;
pub mod secrets;
pub mod subagent;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod text;
pub mod tui;
pub(crate) mod util;
