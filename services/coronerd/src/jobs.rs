//! The registry of jobs this server holds in memory, opening (and recovering) a job on first use.
//!
//! Recovery: a job's committed lines are in its index; its ends, clock samples, sessions and
//! snapshots are in the store. Opening a job replays both into a fresh pipeline, so a restarted
//! server reports exactly what it acknowledged before.
//!
//! Ownership: a job is opened here only under this instance's lease (`ownership.rs`); when
//! another live instance holds it, [`Jobs::get`] answers [`ServiceError::Elsewhere`]. Several
//! instances share one data dir, so a new owner recovers a job exactly as a restarted server does.

use crate::error::ServiceError;
use crate::job::claims::lane_of;
use crate::job::Job;
use crate::metrics::Metrics;
use crate::ownership::{self, Claim, Fence, Instance};
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
    me: Arc<Instance>,
    /// The lease of every job open here, and what stops its renewals.
    fences: std::sync::Mutex<HashMap<JobId, (Arc<Fence>, CancellationToken)>>,
    /// Stops the lease renewals, once the jobs are drained at shutdown.
    keepers: CancellationToken,
    pub limits: Arc<crate::limits::LimitsConfig>,
    /// The open index writers, least recently used first (`writers.rs`).
    writers: Arc<crate::writers::Writers>,
    /// How many jobs the store holds, counted once and then kept (`--max-jobs`).
    known_jobs: tokio::sync::Mutex<Option<u64>>,
}

/// How long opening a job waits for its previous owner's index lock (a process still exiting).
const INDEX_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Jobs {
    pub fn new(
        data_dir: PathBuf,
        store: Arc<dyn Metastore>,
        rules: RuleSet,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
        me: Instance,
        limits: Arc<crate::limits::LimitsConfig>,
    ) -> Jobs {
        let writers = Arc::new(crate::writers::Writers::new(limits.max_open_jobs, metrics.clone()));
        Jobs {
            limits,
            writers,
            known_jobs: tokio::sync::Mutex::new(None),
            data_dir,
            store,
            rules: Arc::new(rules),
            metrics,
            shutdown,
            open: Mutex::new(HashMap::new()),
            me: Arc::new(me),
            fences: std::sync::Mutex::new(HashMap::new()),
            keepers: CancellationToken::new(),
        }
    }

    /// The lease under which a job open here is written.
    pub fn fence(&self, job: &JobId) -> Option<Arc<Fence>> {
        self.fences.lock().unwrap_or_else(|p| p.into_inner()).get(job).map(|(f, _)| f.clone())
    }

    /// Opens the job's index, waiting a little for a previous owner's lock to go.
    async fn open_index(&self, job: &JobId) -> Result<JobIndex, ServiceError> {
        let started = std::time::Instant::now();
        loop {
            let dir = self.index_dir(job);
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
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
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
        let fence = match ownership::claim(&self.store, &self.me, job).await? {
            Claim::Mine(f) => f,
            Claim::Elsewhere(owner) => return Err(ServiceError::Elsewhere(owner)),
        };
        let opened = async {
            let index = Arc::new(self.open_index(job).await?);
            let (pipeline, positions) = self.recover(job, index.clone()).await?;
            Ok::<_, ServiceError>((index, pipeline, positions))
        }
        .await;
        let (index, pipeline, positions) = match opened {
            Ok(o) => o,
            Err(e) => {
                ownership::release(&self.store, &self.me, job, &fence).await;
                return Err(e);
            }
        };
        // Its writer is open now: past --max-open-jobs, the least recently used one closes.
        let (writers, opened, id) = (self.writers.clone(), index.clone(), job.clone());
        let _ = tokio::task::spawn_blocking(move || writers.used(&id, &opened)).await;
        let j = Job::start(job.clone(), index, pipeline, positions, self.store.clone(), self.rules.clone(), self.metrics.clone(), self.writers.clone());
        open.insert(job.clone(), j.clone());
        let stop = self.keepers.child_token();
        self.fences.lock().unwrap_or_else(|p| p.into_inner()).insert(job.clone(), (fence.clone(), stop.clone()));
        ownership::keep(self.store.clone(), self.me.clone(), job.clone(), fence.clone(), stop);
        tracing::info!(job = %job, epoch = fence.epoch(), "job opened here (this instance owns it)");
        Ok(j)
    }

    /// Refuses a job id the store does not hold yet once it holds `--max-jobs` (retention makes
    /// room); a job it holds is always admitted.
    pub async fn admit_new(&self, job: &JobId) -> Result<(), ServiceError> {
        let mut known = self.known_jobs.lock().await;
        if self.store.get_job(job).await?.is_some() {
            return Ok(());
        }
        let count = match *known {
            Some(n) => n,
            None => self.store.list_jobs(&Default::default()).await?.len() as u64,
        };
        if count >= self.limits.max_jobs {
            *known = Some(count);
            return Err(crate::limits::Limit::Jobs.refuse(
                &self.metrics,
                format!("this server holds {count} jobs, its limit (--max-jobs): job {job} was not created; delete old jobs (--retention) or raise the limit"),
            ));
        }
        *known = Some(count + 1);
        Ok(())
    }

    async fn recover(&self, job: &JobId, index: Arc<JobIndex>) -> Result<(JobPipeline, crate::job::Positions), ServiceError> {
        let mut pipeline = JobPipeline::new(job.as_str());
        let sessions = self.store.sessions(job).await?;
        // A world size is believed in proportion to the agents seen (`limits.rs`).
        let agents = sessions.iter().map(|s| (s.rank, s.agent_instance.as_str())).collect::<std::collections::HashSet<_>>().len();
        let believe = |w: u32| crate::limits::believed_world_size(w, agents, self.limits.world_size_slack);
        if let Some(row) = self.store.get_job(job).await? {
            if let Some(w) = row.world_size {
                pipeline.set_world_size(believe(w));
            }
        }
        for s in sessions {
            if let Some(r) = s.rank {
                pipeline.set_host(r, &s.host);
            }
            if let Some(w) = s.world_size {
                pipeline.set_world_size(believe(w));
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
            pipeline.add_snapshot_facts(
                SnapshotSummary { rank: s.rank, kind: s.kind, name: s.name, size: s.size, sha256: s.sha256, highlights: Vec::new() },
                facts,
            );
        }
        let (pipeline, positions, index_lines) = tokio::task::spawn_blocking(move || {
            let mut pipeline = pipeline;
            // Where each (rank, stream, lane) stands: each lane is deduplicated on its own.
            let mut positions = crate::job::Positions::new();
            index.for_each_line(|l| {
                let next = positions.entry((l.rank, l.stream, lane_of(l.seq))).or_insert(0);
                *next = (*next).max(l.seq.saturating_add(1));
                pipeline.push_line(LogLine { rank: l.rank.map(Rank), stream: l.stream, seq: l.seq, capture_ns: l.capture_ns, bytes: l.bytes });
            })?;
            Ok::<_, ServiceError>((pipeline, positions, index.num_lines()))
        })
        .await??;
        let mut pipeline = pipeline;
        let row = self.store.get_job(job).await?;
        if row.as_ref().and_then(|r| r.world_size).is_some_and(|w| ranks_ended >= w) {
            pipeline.set_finished(true);
        }
        // A previous owner that died between its index commit and counting the lines left the
        // count short: the index is the truth.
        if let Some(row) = row {
            let short = index_lines.saturating_sub(row.lines);
            if short > 0 {
                self.store.add_lines_count(job, short).await?;
            }
        }
        Ok((pipeline, positions))
    }

    /// Closes a job the store no longer holds (deleted by retention) and deletes its index.
    pub async fn forget(&self, job: &JobId) -> Result<(), ServiceError> {
        if let Some(n) = self.known_jobs.lock().await.as_mut() {
            *n = n.saturating_sub(1);
        }
        self.open.lock().await.remove(job);
        let lease = self.fences.lock().unwrap_or_else(|p| p.into_inner()).remove(job);
        if let Some((fence, stop)) = lease {
            stop.cancel();
            ownership::release(&self.store, &self.me, job, &fence).await;
        }
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

    /// Lets every job finish its queued commits, then gives up their leases so that another
    /// instance takes them over at once.
    pub async fn shutdown(&self) {
        for job in self.open_jobs().await {
            job.drain().await;
        }
        self.keepers.cancel();
        let fences: Vec<_> = self.fences.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
        for (job, (fence, _)) in fences {
            ownership::release(&self.store, &self.me, &job, &fence).await;
        }
    }
}
