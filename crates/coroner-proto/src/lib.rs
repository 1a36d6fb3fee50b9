//! The `coroner.v1` protocol. Generated types live in [`v1`]; [`convert`] turns them into the
//! model's types and back, validating on the way in: the analysis never sees a prost type;
//! [`report`] projects a report onto its message and the verdict and class enums.

pub mod auth;
pub mod convert;
pub mod report;

/// Generated code for package `coroner.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("coroner.v1");
}

/// The encoded file descriptor set, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/coroner_v1_descriptor.bin"));
