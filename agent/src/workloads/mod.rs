//! Local control of Flux objects: the catalog of Flux kinds, the rows read from objects and the
//! patches that change them (all pure), and the caches of what the cluster serves; `server::workloads` serves them as `tenantflux.v1.Workloads`.

pub mod cache;
pub mod catalog;
pub mod patches;
pub mod rows;

pub use cache::Caches;
