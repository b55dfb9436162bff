//! Compiles tenantflux/v1/*.proto with protox (pure Rust), so no system protoc is needed, and
//! keeps the encoded descriptor set for the agent's server reflection.

use std::{env, fs, path::PathBuf};

use prost::Message;

const PROTOS: &[&str] = &[
    "tenantflux/v1/agent.proto",
    "tenantflux/v1/workloads.proto",
    "tenantflux/v1/policy.proto",
    "tenantflux/v1/instance.proto",
    "tenantflux/v1/upgrade.proto",
    "tenantflux/v1/adopt.proto",
    "tenantflux/v1/inspect.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=tenantflux");
    let descriptors = protox::compile(PROTOS, ["."])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out.join("tenantflux_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
