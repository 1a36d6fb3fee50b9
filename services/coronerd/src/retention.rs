//! Retention: jobs last seen longer ago than `--retention` are deleted (their rows in the store
//! and their index folder). Their failure signatures and hosts stay in the store, so the history
//! behind similar incidents and `coroner suspects` outlives them. Snapshot bytes are content
//! addressed and may be shared between jobs: after a sweep, the contents no remaining job names
//! are deleted. Unfinished snapshot uploads expire after `--partial-ttl`, retention or not.

use crate::jobs::Jobs;
use crate::snapshots::SnapshotStore;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The longest wait between two sweeps.
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// Sweeps now and then every so often until shutdown: expired partial uploads always, expired
/// jobs and the snapshot contents they leave unnamed when `retention` is not zero.
pub fn spawn(jobs: Arc<Jobs>, snapshots: Arc<SnapshotStore>, retention: Duration, shutdown: CancellationToken) {
    let partials = snapshots.clone();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        loop {
            let store = partials.clone();
            match tokio::task::spawn_blocking(move || store.sweep_partials()).await {
                Ok(0) | Err(_) => {}
                Ok(n) => tracing::info!(uploads = n, "deleted unfinished snapshot uploads past --partial-ttl"),
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(partials.sweep_every()) => {}
            }
        }
    });
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
            match collect_snapshots(&jobs, &snapshots).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(contents = n, "deleted snapshot contents no job names any more"),
                Err(e) => tracing::warn!(error = %e, "could not collect unnamed snapshot contents; retrying at the next sweep"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    });
}

/// Deletes the stored snapshot contents no job names; returns how many.
pub async fn collect_snapshots(jobs: &Jobs, snapshots: &Arc<SnapshotStore>) -> Result<usize, crate::error::ServiceError> {
    let named: std::collections::HashSet<String> = jobs.named_snapshot_contents().await?.into_iter().collect();
    let store = snapshots.clone();
    Ok(tokio::task::spawn_blocking(move || store.collect_garbage(&named)).await?)
}

/// Deletes the jobs last seen before now minus `retention`; returns how many.
pub async fn sweep(jobs: &Jobs, retention: Duration) -> Result<usize, crate::error::ServiceError> {
    let now = coroner_model::now_ns();
    let cutoff = now.saturating_sub(i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX));
    jobs.expire(cutoff).await
}
