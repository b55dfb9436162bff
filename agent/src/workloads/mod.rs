//! Local control of Flux objects: the catalog of Flux kinds (pure), the caches of what the
//! cluster serves, and the `tenantflux.v1.Workloads` gRPC service.

pub mod cache;
pub mod catalog;
pub mod service;

pub use cache::Caches;
pub use service::WorkloadsService;
