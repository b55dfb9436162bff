//! `kubectl tenantflux policy ...`: the platform's policy. keygen, sign and verify need no
//! cluster; push and show go to the agent, publish to an OCI registry.

mod args;
mod local;
mod remote;

pub use self::{
    args::{KeyringCommand, PolicyCommand},
    local::run_local,
    remote::run_remote,
};
