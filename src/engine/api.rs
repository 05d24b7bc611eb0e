//! The engine as the front ends other than `main.rs` see it (`exec`, `acp`, `subagent`): the
//! few types they name besides `protocol`'s. Nothing inside the engine imports this module.

pub use super::agents::{Hello, Inbound, APPROVAL_ANSWERED, ARG as AGENT_ARG};
pub use super::sandbox::Policy;
pub use super::session::SessionChoice;
pub use super::store::Store;
