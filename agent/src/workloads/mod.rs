//! Local control of Flux objects: the catalog of Flux kinds, the rows read from objects and the
//! patches that change them (all pure), the caches of what the cluster serves, and the calls
//! over them (`service`); `server::workloads` serves those as `tenantflux.v1.Workloads`.

pub mod access;
pub mod cache;
pub mod catalog;
pub mod error;
pub mod model;
pub mod patches;
pub mod rows;
pub mod service;

pub use cache::Caches;
pub use error::WorkloadsError;
pub use service::Workloads;
