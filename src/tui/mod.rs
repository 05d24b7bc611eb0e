//! The ratatui front end. SKELETON — the TUI helper replaces this.
