//! One folder per command group, each with its clap arguments, its calls to the agent, and the
//! views it prints. They share only [`crate::context`], [`crate::connect`] and
//! [`crate::output`]; [`crate::cli`] dispatches to them and none of them knows it.

pub mod fleet;
pub mod instance;
pub mod policy;
pub mod status;
pub mod upgrade;
pub mod version;
pub mod workloads;
