//! SKELETON — the llm helper replaces this.
