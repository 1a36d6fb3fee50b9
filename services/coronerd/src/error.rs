//! One mapping from coronerd's failures to gRPC statuses. Internal details go to the log, not to
//! the caller.

use tonic::Status;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Unavailable(String),
    /// A limit (`limits.rs`) refused the request: retry later or ask for less.
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// Another coronerd instance owns the job: agents reconnect there, queries are proxied there.
    #[error("another coronerd instance owns this job: connect to {}", .0.grpc)]
    Elsewhere(crate::ownership::Owner),
}

/// The metadata key of a redirect: the owner's gRPC address (agents reconnect there).
pub const OWNER_KEY: &str = "coroner-owner";
/// The owner's HTTP address, for web requests.
pub const OWNER_HTTP_KEY: &str = "coroner-owner-http";

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        match e {
            ServiceError::InvalidArgument(m) => Status::invalid_argument(m),
            ServiceError::NotFound(m) => Status::not_found(m),
            ServiceError::FailedPrecondition(m) => Status::failed_precondition(m),
            ServiceError::Unavailable(m) => Status::unavailable(m),
            ServiceError::ResourceExhausted(m) => Status::resource_exhausted(m),
            ServiceError::Internal(m) => {
                tracing::error!(error = %m, "internal error");
                Status::internal("internal error; see the coronerd log")
            }
            e @ ServiceError::Elsewhere(_) => {
                let mut status = Status::failed_precondition(e.to_string());
                if let ServiceError::Elsewhere(owner) = e {
                    for (key, value) in [(OWNER_KEY, owner.grpc), (OWNER_HTTP_KEY, owner.http)] {
                        if let Ok(v) = value.parse() {
                            status.metadata_mut().insert(key, v);
                        }
                    }
                }
                status
            }
        }
    }
}

impl From<crate::ownership::LeaseError> for ServiceError {
    fn from(e: crate::ownership::LeaseError) -> Self {
        match e {
            e @ crate::ownership::LeaseError::Lapsed(_) => ServiceError::Unavailable(e.to_string()),
            crate::ownership::LeaseError::Store(e) => ServiceError::from(e),
        }
    }
}

/// A database that is down, restarting or out of connections is UNAVAILABLE (the caller may
/// retry, and is told what failed); anything else from the store is a bug, INTERNAL.
impl From<coroner_store::StoreError> for ServiceError {
    fn from(e: coroner_store::StoreError) -> Self {
        if let coroner_store::StoreError::ContentBeingDeleted(_) = e {
            ServiceError::Unavailable(e.to_string())
        } else if e.is_unavailable() {
            tracing::warn!(error = %e, "metadata store unavailable");
            ServiceError::Unavailable(format!("the metadata store is unavailable, retry later: {e}"))
        } else {
            ServiceError::Internal(format!("metadata store: {e}"))
        }
    }
}

impl From<coroner_index::IndexError> for ServiceError {
    fn from(e: coroner_index::IndexError) -> Self {
        match e {
            coroner_index::IndexError::BadQuery(m) => ServiceError::InvalidArgument(format!("bad query: {m}")),
            coroner_index::IndexError::QueryRefused(r) => ServiceError::InvalidArgument(r.message),
            coroner_index::IndexError::OverBudget(m) => ServiceError::ResourceExhausted(m),
            e @ coroner_index::IndexError::Cancelled => ServiceError::Unavailable(e.to_string()),
            e @ coroner_index::IndexError::BadCursor(_) => ServiceError::InvalidArgument(e.to_string()),
            e if e.is_unavailable() => {
                tracing::warn!(error = %e, "index unavailable");
                ServiceError::Unavailable(format!("the job's index is unavailable, retry later: {e}"))
            }
            other => ServiceError::Internal(format!("index: {other}")),
        }
    }
}

impl From<tokio::task::JoinError> for ServiceError {
    fn from(e: tokio::task::JoinError) -> Self {
        ServiceError::Internal(format!("background task failed: {e}"))
    }
}
