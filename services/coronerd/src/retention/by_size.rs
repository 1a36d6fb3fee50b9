//! Retention by size (`--retain-max-bytes`): while the job indexes plus the snapshot contents
//! the store counts pass the bound, whole jobs are deleted through `crate::deletion`, the least
//! recently seen finished job first. A running job is never taken, nor one another live
//! instance owns (its deletion answers `Elsewhere` and is skipped); when only those are left the
//! sweep says so and waits for the next one.

use crate::deletion::{Deleter, Why};
use crate::error::ServiceError;
use std::sync::atomic::Ordering::Relaxed;

/// Candidates read per store query.
const BATCH: u32 = 64;

/// Deletes jobs until storage is under `max_bytes`; returns how many.
pub async fn sweep(deleter: &Deleter, max_bytes: u64) -> Result<usize, ServiceError> {
    let store = &deleter.jobs.store();
    let usage = store.storage_usage().await?;
    let mut over = usage.total().saturating_sub(max_bytes);
    let mut deleted = 0;
    let mut skipped = std::collections::HashSet::new();
    while over > 0 {
        let candidates: Vec<_> = store.oldest_finished_jobs(BATCH + skipped.len() as u32).await?.into_iter().filter(|c| !skipped.contains(&c.job_id)).collect();
        if candidates.is_empty() {
            tracing::warn!(
                stored_bytes = usage.total(),
                max_bytes,
                "storage is over --retain-max-bytes and no finished job is left to delete here (the rest run, or other instances own them)"
            );
            break;
        }
        for c in candidates {
            if over == 0 {
                break;
            }
            match deleter.delete(&c.job_id, Why::Size, false).await {
                Ok(d) => {
                    deleted += 1;
                    over = over.saturating_sub(c.index_bytes.saturating_add(d.collected.bytes));
                    tracing::info!(job = %c.job_id, freed_bytes = c.index_bytes + d.collected.bytes, over_bytes = over, max_bytes, "deleted to stay under --retain-max-bytes");
                }
                // Another instance owns it, or it runs again: not this sweep's to take.
                Err(ServiceError::Elsewhere(_) | ServiceError::FailedPrecondition(_) | ServiceError::NotFound(_)) => {
                    skipped.insert(c.job_id);
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(deleted)
}

/// Measures, once, the indexes of jobs written before their sizes were recorded (migration
/// 0008 found them with 0 bytes), so that the bound counts them; returns how many.
pub async fn measure_unsized(deleter: &Deleter) -> Result<usize, ServiceError> {
    let jobs = &deleter.jobs;
    let (mut after, mut measured) = (String::new(), 0);
    loop {
        let page = jobs.store().unsized_jobs(&after, BATCH).await?;
        let Some(last) = page.last() else { return Ok(measured) };
        after = last.as_str().to_string();
        for job in page {
            let dir = jobs.index_dir(&job);
            let bytes = tokio::task::spawn_blocking(move || coroner_index::folder_bytes(&dir)).await?;
            if bytes > 0 {
                jobs.store().set_index_bytes(&job, bytes).await?;
                measured += 1;
            }
        }
    }
}

/// Reads what the store counts into the `coroner_storage_bytes` gauges.
pub async fn record_usage(deleter: &Deleter) {
    match deleter.jobs.store().storage_usage().await {
        Ok(u) => {
            let m = &deleter.jobs.metrics().storage;
            m.index_bytes.store(u.index_bytes, Relaxed);
            m.snapshot_bytes.store(u.snapshot_bytes, Relaxed);
        }
        Err(e) => tracing::warn!(error = %e, "could not read the bytes stored for the storage gauges"),
    }
}
