//! Talaria: a full-screen terminal AI agent you never wait for.
//!
//! Module map: front ends and engine import `protocol`, never each other; below it, imports point down.
//! ```text
//! main, exec, tui, acp  front ends: parse args / draw / print; speak only `protocol` (Op out, Event in);
//!   + present       the plain text they share for data events (/jobs, /sessions, heartbeat, goal)
//! protocol          Op, Event, slash commands, usage, EngineHandle: the types both sides share
//! engine::session   the engine task: receives Op, performs the scheduler's effects, emits Event
//! engine::scheduler pure: what runs next, what a busy message does, what is refused (no I/O)
//! engine::turn      one turn: model -> tools -> model; compaction, history (rows <-> messages)
//! engine::tools     the model's tools; they start processes only through engine::jobs
//! engine::jobs      every spawned process: job registry, process groups, logs, notices
//! engine::{llm, store, approval, goal, heartbeat}  providers, SQLite, approvals, standing work
//! config, paths, text, util, logging, loopback, memory  leaves used by all above (loopback: the demo
//!                   model's HTTP; memory: giving back pages start-up touched once)
//! testkit           tests only (`testkit` feature): the scripted model server, built on loopback
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
