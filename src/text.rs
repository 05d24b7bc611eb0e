//! Text utilities shared by the engine and the TUI: sanitising terminal output,
//! truncation for the model. SKELETON — the files helper replaces this.
