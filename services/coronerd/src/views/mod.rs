//! What the Query service and the web page show, computed once for both: aligned search (and
//! the lines around its hits, `context.rs`; around one line on its rank and others, `around.rs`),
//! matches per rank and time bucket (`histogram.rs`), the live tail's filter (`tail_filter.rs`),
//! the timeline, and the few lookups both make (a job id, a snapshot's stored file).

pub mod around;
pub mod context;
pub mod histogram;
pub mod search;
pub mod tail_filter;
pub mod timeline;

use crate::error::ServiceError;
use crate::jobs::Jobs;
use crate::snapshots::SnapshotStore;
use coroner_model::JobId;

/// A job id from a request, or the reason it is not one.
pub fn job_id(s: &str) -> Result<JobId, ServiceError> {
    JobId::parse(s).map_err(|e| ServiceError::InvalidArgument(format!("job id: {e}")))
}

/// The stored file of snapshot `sha256` of `job`, or not found (unknown job, a snapshot of
/// another job, bytes not kept).
pub async fn snapshot_file(
    jobs: &Jobs,
    store: &SnapshotStore,
    job: &str,
    sha256: &str,
) -> Result<(coroner_store::SnapshotRecord, std::path::PathBuf), ServiceError> {
    let id = job_id(job)?;
    let job = jobs.get(&id, false).await?;
    let sha = sha256.trim().to_ascii_lowercase();
    let path = store.path_of(&sha).ok_or_else(|| ServiceError::InvalidArgument(format!("{sha256:?} is not a sha256 (64 hex digits)")))?;
    let record = job
        .snapshots()
        .await?
        .into_iter()
        .find(|s| s.sha256 == sha)
        .ok_or_else(|| ServiceError::NotFound(format!("job {id} has no snapshot {sha} (list them with `coroner snapshot list {id}`)")))?;
    if !tokio::fs::try_exists(&path).await.unwrap_or(false) {
        return Err(ServiceError::NotFound(format!("snapshot {sha} of job {id}: its bytes were not kept on this server")));
    }
    Ok((record, path))
}
