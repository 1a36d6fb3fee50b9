//! Retention: what the server keeps, swept every `--retention-interval` (and every quarter of
//! `--retention` when that is sooner) until shutdown. docs/RETENTION.md is the operator's view.
//!
//! - **By age** (`--retention`): jobs last seen longer ago are deleted, running or not (a job
//!   silent that long is over).
//! - **By size** (`--retain-max-bytes`, `retention/by_size.rs`): while indexes plus snapshots
//!   pass the bound, whole jobs are deleted, the least recently seen finished job first.
//! - **Snapshot contents** no job names any more are deleted (`snapshots/gc.rs`), and once an
//!   hour the files no row stands for; unfinished uploads expire after `--partial-ttl`.
//!
//! Failure signatures and hosts outlive their jobs, so the history behind similar incidents and
//! `coroner suspects` stays. Sizes are read from the store (each job's index bytes, recorded by
//! its owner after commits; each content's bytes), never by walking folders.

mod by_size;

use crate::deletion::{Deleter, Why};
use crate::snapshots::SnapshotStore;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The longest wait between two sweeps.
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(3600);
/// How often the snapshot folders are listed for files no row stands for.
const ORPHAN_SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// What to keep, from the flags.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// `--retention`; zero keeps jobs whatever their age.
    pub max_age: Duration,
    /// `--retain-max-bytes`; zero sets no bound.
    pub max_bytes: u64,
    /// `--retention-interval`.
    pub every: Duration,
}

impl Policy {
    pub fn from_config(c: &crate::Config) -> Policy {
        Policy { max_age: c.retention, max_bytes: c.retain_max_bytes, every: c.retention_interval }
    }

    /// The wait between sweeps.
    fn interval(&self) -> Duration {
        let every = self.every.clamp(Duration::from_millis(100), MAX_SWEEP_INTERVAL);
        if self.max_age.is_zero() {
            every
        } else {
            every.min((self.max_age / 4).clamp(Duration::from_secs(1), MAX_SWEEP_INTERVAL))
        }
    }
}

/// Sweeps expired partial uploads on their own schedule, and everything else every
/// [`Policy::interval`], until shutdown.
pub fn spawn(deleter: Deleter, snapshots: Arc<SnapshotStore>, policy: Policy, shutdown: CancellationToken) {
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
    deleter.jobs.metrics().storage.max_bytes.store(policy.max_bytes, Relaxed);
    tokio::spawn(async move {
        if policy.max_bytes > 0 {
            match by_size::measure_unsized(&deleter).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(jobs = n, "measured the indexes of jobs written before their sizes were recorded"),
                Err(e) => tracing::warn!(error = %e, "could not measure the indexes of older jobs; --retain-max-bytes counts them from their next commit"),
            }
        }
        let mut orphans_due = Instant::now();
        loop {
            sweep(&deleter, &policy, &mut orphans_due).await;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(policy.interval()) => {}
            }
        }
    });
}

/// One sweep; each part logs its own failure and the next sweep tries again.
async fn sweep(deleter: &Deleter, policy: &Policy, orphans_due: &mut Instant) {
    if !policy.max_age.is_zero() {
        match by_age(deleter, policy.max_age).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, retention_s = policy.max_age.as_secs(), "deleted jobs past --retention; their failure signatures are kept"),
            Err(e) => tracing::warn!(error = %e, "could not delete expired jobs; retrying at the next sweep"),
        }
    }
    if policy.max_bytes > 0 {
        if let Err(e) = by_size::sweep(deleter, policy.max_bytes).await {
            tracing::warn!(error = %e, "could not bring storage under --retain-max-bytes; retrying at the next sweep");
        }
    }
    match deleter.contents.collect_all().await {
        Ok(c) if c.contents > 0 => tracing::info!(contents = c.contents, bytes = c.bytes, "deleted snapshot contents no job names any more"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not collect unnamed snapshot contents; retrying at the next sweep"),
    }
    if Instant::now() >= *orphans_due {
        *orphans_due = Instant::now() + ORPHAN_SWEEP_INTERVAL;
        match deleter.contents.collect_orphans().await {
            Ok(c) if c.contents > 0 => tracing::info!(contents = c.contents, bytes = c.bytes, "deleted snapshot files an upload stored and never filed"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "could not look for unfiled snapshot files; retrying in an hour"),
        }
    }
    by_size::record_usage(deleter).await;
}

/// Deletes the jobs last seen before now minus `max_age`; returns how many.
pub async fn by_age(deleter: &Deleter, max_age: Duration) -> Result<usize, crate::error::ServiceError> {
    let jobs = &deleter.jobs;
    let now = coroner_model::now_ns();
    let cutoff = now.saturating_sub(i64::try_from(max_age.as_nanos()).unwrap_or(i64::MAX));
    let gone = jobs.store().expire_jobs(cutoff).await?;
    for id in &gone {
        jobs.forget(id).await?;
        jobs.metrics().storage.job_deleted(Why::Age);
    }
    Ok(gone.len())
}
