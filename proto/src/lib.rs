//! The tenantflux.v1 gRPC API shared by `tenantflux-agent` and `kubectl-tenantflux`.

pub mod v1 {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("tenantflux.v1");
}

/// The encoded `FileDescriptorSet` of every tenantflux.v1 file, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tenantflux_descriptor.bin"));
