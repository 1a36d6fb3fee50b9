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

/// A duration as `30d`, `2w`, `12h`, `90m`, `45s` or a plain number of seconds; `0` is none.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len()));
    let v: f64 = num.parse().map_err(|_| format!("{s:?} is not a duration: use 30d, 12h, 90m, 45s or 0"))?;
    let secs = match unit.trim() {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 7.0 * 86_400.0,
        other => return Err(format!("{s:?}: unknown unit {other:?}; use s, m, h, d or w")),
    };
    Duration::try_from_secs_f64(v * secs).map_err(|e| format!("{s:?} is not a usable duration: {e}"))
}

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
    let named: std::collections::HashSet<String> = jobs.store.snapshot_contents().await?.into_iter().collect();
    let store = snapshots.clone();
    Ok(tokio::task::spawn_blocking(move || store.collect_garbage(&named)).await?)
}

/// Deletes the jobs last seen before now minus `retention`; returns how many.
pub async fn sweep(jobs: &Jobs, retention: Duration) -> Result<usize, crate::error::ServiceError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let cutoff = now.saturating_sub(i64::try_from(retention.as_nanos()).unwrap_or(i64::MAX));
    let gone = jobs.store.expire_jobs(cutoff).await?;
    for id in &gone {
        jobs.forget(id).await?;
    }
    Ok(gone.len())
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("90m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("10y").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("soon").unwrap_err().contains("not a duration"));
    }
}
