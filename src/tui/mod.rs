//! The ratatui front end.

pub mod app;
pub mod frame;
pub mod keymap;
pub mod markdown;
pub mod sanitize;
pub mod theme;
pub mod transcript;
pub mod view;
pub mod wrap;
