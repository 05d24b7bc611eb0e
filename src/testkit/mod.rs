//! What tests, benches and examples use to drive Talaria (compiled for the crate's own
//! tests and with the `testkit` feature, which the dev-dependency on itself turns on; a
//! release build has none of it).

pub mod clock;
pub mod fuzz;
pub mod rng;
pub mod scripted;
