//! The registry of jobs this server holds in memory, opening (and recovering) a job on first use.
//!
//! Recovery: a job's committed lines are in its index; its ends, clock samples, sessions and
//! snapshots are in the store. Opening a job replays both into a fresh pipeline, so a restarted
//! server reports exactly what it acknowledged before.

use crate::error::ServiceError;
use crate::job::Job;
use crate::metrics::Metrics;
use coroner_analysis::RuleSet;
use coroner_index::JobIndex;
use coroner_model::{JobId, LogLine, Rank, SnapshotSummary};
use coroner_pipeline::JobPipeline;
use coroner_store::Metastore;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

pub struct Jobs {
    data_dir: PathBuf,
    pub store: Arc<dyn Metastore>,
    pub rules: Arc<RuleSet>,
    pub metrics: Arc<Metrics>,
    pub shutdown: CancellationToken,
    open: Mutex<HashMap<JobId, Arc<Job>>>,
}

impl Jobs {
    pub fn new(data_dir: PathBuf, store: Arc<dyn Metastore>, rules: RuleSet, metrics: Arc<Metrics>, shutdown: CancellationToken) -> Jobs {
        Jobs { data_dir, store, rules: Arc::new(rules), metrics, shutdown, open: Mutex::new(HashMap::new()) }
    }

    fn index_dir(&self, job: &JobId) -> PathBuf {
        self.data_dir.join("jobs").join(job.as_str()).join("index")
    }

    /// The job, opened (and recovered) if needed. With `create` false, a job the store does not
    /// know is not found.
    pub async fn get(&self, job: &JobId, create: bool) -> Result<Arc<Job>, ServiceError> {
        let mut open = self.open.lock().await;
        if let Some(j) = open.get(job) {
            return Ok(j.clone());
        }
        if !create && self.store.get_job(job).await?.is_none() {
            return Err(ServiceError::NotFound(format!("no job {job:?} on this server (list them with `coroner jobs`)")));
        }
        let dir = self.index_dir(job);
        let index = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir).map_err(|e| ServiceError::Internal(format!("create {}: {e}", dir.display())))?;
            JobIndex::open_or_create(&dir).map_err(ServiceError::from)
        })
        .await??;
        let index = Arc::new(index);
        let (pipeline, positions) = self.recover(job, index.clone()).await?;
        let j = Job::start(job.clone(), index, pipeline, positions, self.store.clone(), self.rules.clone(), self.metrics.clone());
        open.insert(job.clone(), j.clone());
        Ok(j)
    }

    async fn recover(
        &self,
        job: &JobId,
        index: Arc<JobIndex>,
    ) -> Result<(JobPipeline, std::collections::BTreeMap<(Option<u32>, coroner_model::Stream), u64>), ServiceError> {
        let mut pipeline = JobPipeline::new(job.as_str());
        if let Some(row) = self.store.get_job(job).await? {
            if let Some(w) = row.world_size {
                pipeline.set_world_size(w);
            }
        }
        for s in self.store.sessions(job).await? {
            if let Some(r) = s.rank {
                pipeline.set_host(r, &s.host);
            }
            if let Some(w) = s.world_size {
                pipeline.set_world_size(w);
            }
        }
        let ends = self.store.process_ends(job).await?;
        let ranks_ended = ends.len() as u32;
        for e in ends {
            pipeline.add_end(e);
        }
        pipeline.add_clock_samples(self.store.clock_samples(job).await?);
        // Snapshot highlights and flight recorder progress are read again from the stored bytes.
        let rows = self.store.snapshots(job).await?;
        let root = self.data_dir.join("snapshots");
        let read = tokio::task::spawn_blocking(move || {
            rows.into_iter()
                .map(|s| {
                    let valid = s.sha256.len() == 64 && s.sha256.bytes().all(|b| b.is_ascii_hexdigit());
                    let facts = match valid.then(|| std::fs::read(root.join(&s.sha256[..2]).join(&s.sha256))) {
                        Some(Ok(bytes)) => coroner_snapshot::facts(&s.kind, &s.name, &bytes, s.size),
                        _ => coroner_snapshot::Facts::default(),
                    };
                    (s, facts)
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (s, facts) in read {
            if let Some(rank) = s.rank {
                pipeline.add_fr_progress(rank, facts.fr_progress.into_iter().map(|f| (f.pg, f.last_enqueued, f.last_started, f.last_completed)));
            }
            pipeline.add_hardware_lines(s.rank, facts.hardware);
            pipeline.add_snapshot(SnapshotSummary {
                rank: s.rank,
                kind: s.kind,
                name: s.name,
                size: s.size,
                sha256: s.sha256,
                highlights: facts.highlights,
            });
        }
        let (pipeline, positions) = tokio::task::spawn_blocking(move || {
            let mut pipeline = pipeline;
            index.for_each_line(|l| {
                pipeline.push_line(LogLine {
                    rank: l.rank.map(Rank),
                    stream: l.stream,
                    seq: l.seq,
                    capture_ns: l.capture_ns,
                    bytes: l.bytes,
                })
            })?;
            let positions = index.stream_positions()?;
            Ok::<_, ServiceError>((pipeline, positions))
        })
        .await??;
        let mut pipeline = pipeline;
        if self.store.get_job(job).await?.and_then(|r| r.world_size).is_some_and(|w| ranks_ended >= w) {
            pipeline.set_finished(true);
        }
        Ok((pipeline, positions))
    }

    /// Closes a job the store no longer holds (deleted by retention) and deletes its index.
    pub async fn forget(&self, job: &JobId) -> Result<(), ServiceError> {
        self.open.lock().await.remove(job);
        let dir = self.data_dir.join("jobs").join(job.as_str());
        tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(ServiceError::Internal(format!("delete the index of an expired job at {}: {e}", dir.display())))
            }
            _ => Ok(()),
        })
        .await?
    }

    pub async fn open_jobs(&self) -> Vec<Arc<Job>> {
        self.open.lock().await.values().cloned().collect()
    }

    /// Lets every job finish its queued commits.
    pub async fn shutdown(&self) {
        for job in self.open_jobs().await {
            job.drain().await;
        }
    }
}
