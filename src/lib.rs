//! Talaria: a full-screen terminal AI agent you never wait for.

pub mod config;
pub mod config_edit;
pub mod engine;
pub mod exec;
pub mod logging;
pub mod paths;
pub mod protocol;
pub mod text;
pub mod tui;
