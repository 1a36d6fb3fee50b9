//! Opening a job: its index (waiting a little for a previous owner's lock), and a fresh pipeline
//! that replays what the job holds.
//!
//! Contract: a job's committed lines are in its index; its sessions, ends, clock samples and
//! snapshots are in the store (snapshot facts are read again from the stored bytes). Replaying
//! both gives the pipeline and positions a restarted server, or a new owner, had acknowledged:
//! it reports exactly what was reported before. The store's line count is brought up to the
//! index's (an owner may die between its commit and counting the lines).

use super::positions::{self, Positions};
use super::shared::Shared;
use crate::error::ServiceError;
use coroner_index::JobIndex;
use coroner_model::{JobId, LogLine, Rank, SnapshotSummary};
use coroner_pipeline::JobPipeline;
use coroner_store::SnapshotRecord;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long opening a job waits for its previous owner's index lock (a process still exiting).
const INDEX_LOCK_WAIT: Duration = Duration::from_secs(5);

/// A job as recovered: its open index, the pipeline holding all it held, and where each lane resumes.
pub struct Recovered {
    pub index: Arc<JobIndex>,
    pub pipeline: JobPipeline,
    pub positions: Positions,
    /// What the job was last reported as (its stored verdict and culprit), if it was.
    pub standing: Option<crate::notify::Standing>,
}

pub async fn recover(job: &JobId, shared: &Shared) -> Result<Recovered, ServiceError> {
    let index = Arc::new(open_index(shared.index_dir(job)).await?);
    let (pipeline, ranks_ended) = replay_rows(job, shared).await?;
    let (mut pipeline, positions, index_lines) = replay_index(pipeline, index.clone()).await?;
    let row = shared.store.get_job(job).await?;
    if row.as_ref().and_then(|r| r.world_size).is_some_and(|w| ranks_ended >= w) {
        pipeline.set_finished(true);
    }
    let standing = row.as_ref().and_then(|r| crate::notify::Standing::stored(&r.verdict, r.culprit_rank.map(|r| r.0), r.fault_class.as_deref()));
    // A previous owner that died between its index commit and counting the lines left the
    // count short: the index is the truth.
    if let Some(row) = row {
        let short = index_lines.saturating_sub(row.lines);
        if short > 0 {
            shared.store.add_lines_count(job, short).await?;
        }
    }
    Ok(Recovered { index, pipeline, positions, standing })
}

/// Opens the index at `dir`, waiting a little for a previous owner's lock to go.
async fn open_index(dir: PathBuf) -> Result<JobIndex, ServiceError> {
    let started = Instant::now();
    loop {
        let dir = dir.clone();
        let opened = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir).map_err(|e| ServiceError::Internal(format!("create {}: {e}", dir.display())))?;
            JobIndex::open_or_create(&dir).map_err(|e| match e {
                coroner_index::IndexError::Locked(_) => ServiceError::Unavailable(format!("{e}: the job's previous owner still holds its index; retry")),
                e => ServiceError::from(e),
            })
        })
        .await?;
        match opened {
            Err(ServiceError::Unavailable(_)) if started.elapsed() < INDEX_LOCK_WAIT => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// A pipeline holding the store's rows of the job: world size, hosts, ends, clock samples and
/// snapshot facts. Also returns how many ranks ended.
async fn replay_rows(job: &JobId, shared: &Shared) -> Result<(JobPipeline, u32), ServiceError> {
    let store = &shared.store;
    let mut pipeline = JobPipeline::new(job.as_str());
    let sessions = store.sessions(job).await?;
    // A world size is believed in proportion to the agents seen (`limits.rs`).
    let agents = sessions.iter().map(|s| (s.rank, s.agent_instance.as_str())).collect::<HashSet<_>>().len();
    let believe = |w: u32| crate::limits::believed_world_size(w, agents, shared.limits.world_size_slack);
    if let Some(w) = store.get_job(job).await?.and_then(|row| row.world_size) {
        pipeline.set_world_size(believe(w));
    }
    for s in sessions {
        if let Some(r) = s.rank {
            pipeline.set_host(r, &s.host);
        }
        if let Some(w) = s.world_size {
            pipeline.set_world_size(believe(w));
        }
        // Each later attempt began when its first session opened.
        pipeline.mark_attempt(s.attempt, s.opened_ns);
    }
    let ends = store.process_ends(job).await?;
    let ranks_ended = ends.len() as u32;
    for e in ends {
        pipeline.add_end(e);
    }
    pipeline.add_clock_samples(store.clock_samples(job).await?);
    for (s, facts) in read_snapshots(store.snapshots(job).await?, shared.data_dir.join("snapshots")).await {
        pipeline
            .add_snapshot_facts(SnapshotSummary { rank: s.rank, kind: s.kind, name: s.name, size: s.size, sha256: s.sha256, highlights: Vec::new() }, facts);
    }
    Ok((pipeline, ranks_ended))
}

/// Snapshot highlights and flight recorder progress, read again from the stored bytes (none for
/// bytes not kept).
async fn read_snapshots(rows: Vec<SnapshotRecord>, root: PathBuf) -> Vec<(SnapshotRecord, coroner_snapshot::Facts)> {
    tokio::task::spawn_blocking(move || {
        rows.into_iter()
            .map(|s| {
                let path = crate::snapshots::content_path(&root, &s.sha256);
                let facts = crate::snapshots::stored_facts(path.as_deref(), &s.kind, &s.name, s.size);
                (s, facts)
            })
            .collect()
    })
    .await
    .unwrap_or_default()
}

/// Pushes every line of the index into the pipeline (on a blocking thread): the pipeline, where
/// each (rank, stream, lane) resumes, and how many lines the index holds.
async fn replay_index(mut pipeline: JobPipeline, index: Arc<JobIndex>) -> Result<(JobPipeline, Positions, u64), ServiceError> {
    tokio::task::spawn_blocking(move || {
        let mut positions = Positions::new();
        index.for_each_line(|l| {
            positions::record(&mut positions, l.rank, l.stream, l.seq);
            pipeline.push_line_from(LogLine { rank: l.rank.map(Rank), stream: l.stream, seq: l.seq, capture_ns: l.capture_ns, bytes: l.bytes }, &l.host);
        })?;
        Ok((pipeline, positions, index.num_lines()))
    })
    .await?
}
