//! Shared harness of the machine tests: event builders, a hand-driven rig,
//! a fake server made of data, and a seeded fault-injecting simulation.

pub mod events;
pub mod paging;
pub mod rig;
pub mod server;
pub mod sim;
pub mod sim_io;
