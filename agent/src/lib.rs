//! tenantflux-agent: serves the `tenantflux.v1` gRPC API of one tenant cluster. It observes the
//! flux-operator install and the FluxInstance, and authorizes every call against the cluster's
//! own RBAC (TokenReview + SubjectAccessReview).
#![forbid(unsafe_code)]

pub mod admin;
pub mod admission;
pub mod auth;
pub mod backoff;
pub mod bundle;
pub mod bundle_source;
pub mod cli;
pub mod defaults;
pub mod input;
pub mod instance;
pub mod metrics;
pub mod operator;
pub mod policy;
pub mod policy_service;
pub mod runtime;
pub mod server;
pub mod shutdown;
pub mod status;
pub mod upgrade;
pub mod workloads;

pub use cli::Args;
pub use runtime::Error;

/// The one field manager of every write the agent makes (server-side apply).
pub const FIELD_MANAGER: &str = "tenantflux-agent";

/// The agent's version, as reported in `Status.agent.version` and `tenantflux_agent_info`.
pub const VERSION: &str = concat!("v", env!("CARGO_PKG_VERSION"));
