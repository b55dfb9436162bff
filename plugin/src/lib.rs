//! kubectl-tenantflux: the tenant's view of Flux, through the tenantflux-agent in its cluster.
//! A library so that both binaries (the plugin and kubectl's completion helper) share it.

#![forbid(unsafe_code)]

pub mod channel;
pub mod cli;
pub mod complete;
pub mod connect;
pub mod exit;
pub mod fleet;
pub mod grammar;
pub mod instance;
pub mod output;
pub mod policy;
pub mod status;
pub mod timings;
pub mod upgrade;
pub mod version;
pub mod workloads;
