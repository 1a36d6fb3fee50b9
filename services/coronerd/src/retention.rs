//! Retention: jobs last seen longer ago than `--retention` are deleted (their rows in the store
//! and their index folder). Their failure signatures and hosts stay in the store, so the history
//! behind similar incidents and `coroner suspects` outlives them. Snapshot bytes are content
//! addressed and may be shared between jobs; they are kept.

use crate::jobs::Jobs;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The longest wait between two sweeps.
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// Sweeps now and then every so often until shutdown; does nothing when `retention` is zero.
pub fn spawn(jobs: Arc<Jobs>, retention: Duration, shutdown: CancellationToken) {
    if retention.is_zero() {
        return;
    }
    let every = (retention / 4).clamp(Duration::from_secs(1), MAX_SWEEP_INTERVAL);
    tokio::spawn(async move {
        loop {
            match sweep(&jobs, retention).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(jobs = n, retention_s = retention.as_secs(), "deleted expired jobs; their failure signatures are kept"),
                Err(e) => tracing::warn!(error = %e, "could not delete expired jobs; retrying at the next sweep"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    });
}

/// Deletes the jobs last seen before now minus `retention`; returns how many.
pub async fn sweep(jobs: &Jobs, retention: Duration) -> Result<usize, crate::error::ServiceError> {
    let now = coroner_model::now_ns();
    let cutoff = now.saturating_sub(i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX));
    let gone = jobs.store.expire_jobs(cutoff).await?;
    for id in &gone {
        jobs.forget(id).await?;
    }
    Ok(gone.len())
}
