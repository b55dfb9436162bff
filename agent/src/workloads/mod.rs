//! Local control of Flux objects: the catalog of Flux kinds (pure) and the caches of what the
//! cluster serves; `server::workloads` serves them as `tenantflux.v1.Workloads`.

pub mod cache;
pub mod catalog;

pub use cache::Caches;
