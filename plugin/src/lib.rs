//! kubectl-tenantflux: the tenant's view of Flux, through the tenantflux-agent in its cluster.
//! A library so that both binaries (the plugin and kubectl's completion helper) share it.

#![forbid(unsafe_code)]

pub mod age;
pub mod channel;
pub mod cli;
pub mod commands;
pub mod complete;
pub mod connect;
pub mod context;
pub mod exit;
pub mod flux_cli;
pub mod grammar;
pub mod output;
pub mod state;
pub mod timings;
pub mod views;
pub mod web;
