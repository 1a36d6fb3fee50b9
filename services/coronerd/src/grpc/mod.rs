//! The gRPC services, as thin adapters from the wire to the server: Ingest (`ingest.rs`), Query
//! (`query.rs`, its lists paged by `paging.rs`), Liveness (`liveness.rs`), Admin (`admin.rs`:
//! deleting jobs) and the OTLP logs receiver (`otlp.rs`). Each reaches
//! jobs through the registry (`crate::jobs::Jobs`) and each job's methods only; none holds job
//! state of its own beyond its sessions. Errors go out through `crate::error`'s one mapping.

pub mod admin;
pub mod ingest;
pub mod liveness;
pub mod otlp;
pub mod paging;
pub mod query;
