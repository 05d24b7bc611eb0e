//! The agent: owns the session, receives `Op`, emits `Event`. Never draws.

pub(crate) mod activity;
pub mod agents;
pub mod api;
pub mod approval;
pub mod args;
pub mod backend;
pub mod bang;
pub(crate) mod cadence;
pub mod compaction;
pub mod context;
pub mod estop;
#[cfg(any(test, feature = "testkit"))]
pub mod fuzz;
pub mod goal;
pub mod heartbeat;
pub mod instructions;
pub mod jobs;
pub mod llm;
pub mod mcp;
pub(crate) mod mentions;
pub mod netproxy;
pub mod process;
pub mod rewind;
pub mod sandbox;
pub(crate) mod scheduler;
pub(crate) mod signals;
pub mod store;
pub mod tools;

use tokio::sync::mpsc;

use crate::protocol::Event;

/// Where the engine (and its tools and jobs) send events. Never blocks.
#[derive(Clone, Debug)]
pub struct EventSink(mpsc::UnboundedSender<Event>);

impl EventSink {
    /// A sink and the receiving end (tests, exec).
    pub fn channel() -> (EventSink, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventSink(tx), rx)
    }

    /// Send, ignoring a closed receiver (the front end is gone; nothing to tell).
    pub(crate) fn send(&self, event: Event) {
        let _ = self.0.send(event);
    }
}

pub mod history;
pub mod session;
pub mod turn;

pub use session::{start, EngineOptions, SessionChoice};
