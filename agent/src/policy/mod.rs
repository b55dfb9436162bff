//! The platform's policy in the cluster: the store of the verified signed policy (`store`),
//! pulling it from a channel in an OCI registry (`pull`), and
//! its enforcement by the API server itself (`admission`: a ValidatingAdmissionPolicy kept in
//! step with it), proven at an interval (`enforcement`: a canary the API server must refuse).
//! What a policy says and allows is `tenantflux_core::policy`.

pub mod admission;
pub mod enforcement;
pub mod pull;
pub mod store;
