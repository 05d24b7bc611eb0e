//! The signals a running tool (and a `process wait` inside the job registry) listens to.
//! Shared by `turn`, `tools` and `jobs`, so none of them imports another for it.

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Signals a running tool listens to.
#[derive(Clone)]
pub struct ToolSignals {
    /// Cancelled when the turn is interrupted: kill foreground work, return at once.
    pub interrupt: CancellationToken,
    /// Bumped each time the user asks running tools to yield (redirect, Ctrl+B). A tool
    /// compares against the value it saw when its work started.
    pub yield_gen: watch::Receiver<u64>,
    /// Bumped when a message arrives that should release a `process wait` early (any mode).
    pub release_gen: watch::Receiver<u64>,
}

impl ToolSignals {
    /// Signals that never fire (tests, headless helpers).
    pub fn inert() -> ToolSignals {
        let (_, yield_gen) = watch::channel(0);
        let (_, release_gen) = watch::channel(0);
        ToolSignals { interrupt: CancellationToken::new(), yield_gen, release_gen }
    }
}
