//! OTLP logs in: one mapping (`mapping.rs`, pure), one rule for retries (`retry.rs`, pure) and
//! one receiver (`receiver.rs`) behind both OTLP/gRPC (`grpc/otlp.rs`) and OTLP/HTTP
//! (`http/otlp.rs`). The attribute order and the exporters' configurations: docs/OTLP.md.

pub mod mapping;
mod receiver;
pub mod retry;

pub use receiver::OtlpReceiver;
