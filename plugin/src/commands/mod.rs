//! One folder per command group, each with its clap arguments, its calls to the agent, and the
//! views it prints. They share [`crate::context`], [`crate::connect`], [`crate::output`] and
//! [`crate::flux_cli`]; [`crate::cli`] dispatches to them and none of them knows it. No group
//! imports another: what several show alike (a cluster's status, a Flux object) is in
//! [`crate::views`], so a page and a table never disagree.

pub mod adopt;
pub mod dashboard;
pub mod fleet;
pub mod flux;
pub mod inspect;
pub mod instance;
pub mod logs;
pub mod operator;
pub mod policy;
pub mod status;
pub mod upgrade;
pub mod version;
pub mod workloads;
