//! tenantflux's domain, shared by the agent and the kubectl plugin: what a policy allows, what
//! Flux releases exist and serve, how selectors and durations read. Pure: no Kubernetes client,
//! no gRPC, no I/O, so every rule here is unit-tested without a cluster and neither binary
//! depends on the other to reuse it.
#![forbid(unsafe_code)]

pub mod digest;
pub mod duration;
pub mod flux;
pub mod identity;
pub mod kinds;
pub mod names;
pub mod operator;
pub mod policy;
pub mod releases;
pub mod review;
pub mod selector;
pub mod text;
pub mod yaml;

/// The one field manager of every write the agent makes (server-side apply), and the value of
/// [`MANAGED_BY_LABEL`] on what it creates.
pub const FIELD_MANAGER: &str = "tenantflux-agent";

/// The label every object the agent creates carries, so pruning touches only its own objects;
/// its value is [`FIELD_MANAGER`].
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
