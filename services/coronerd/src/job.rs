//! One job on the server: its index, its pipeline, and its tasks.
//!
//! The committer (`committer.rs`) is the job's only writer: it takes batches from a bounded queue
//! (backpressure for agents), drops lines it already has, indexes and commits the rest, feeds
//! them to the pipeline, and only then acknowledges. The reporter recomputes the report when new
//! evidence arrived (at most every [`REPORT_DEBOUNCE`]) and publishes it to watchers.

use crate::committer::{self, CommitRequest, Reply, COMMIT_QUEUE};
use crate::error::ServiceError;
use crate::metrics::Metrics;
use coroner_analysis::RuleSet;
use coroner_index::JobIndex;
use coroner_model::{JobId, LogLine, Report};
use coroner_pipeline::JobPipeline;
use coroner_store::Metastore;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch, Notify};

pub const REPORT_DEBOUNCE: Duration = Duration::from_millis(50);

pub(crate) mod claims;
pub(crate) use claims::Positions;

pub struct Job {
    pub id: JobId,
    pub index: Arc<JobIndex>,
    pub pipeline: Arc<Mutex<JobPipeline>>,
    /// The next sequence number expected per (rank, stream, lane): advanced by the committer only.
    pub(crate) positions: Mutex<Positions>,
    /// Which agent instances speak for which rank, and their lanes (`claims.rs`).
    pub(crate) claims: Mutex<claims::Claims>,
    commits: mpsc::Sender<CommitRequest>,
    pub(crate) dirty: Arc<Notify>,
    /// Bumped whenever the evidence changes; a published report carries the version it saw.
    pub(crate) version: Arc<AtomicU64>,
    report: watch::Sender<Option<Arc<Report>>>,
    published_version: AtomicU64,
}

impl Job {
    /// Starts a job's tasks over an open index and a pipeline already holding what was committed.
    // Eight: the writers' LRU joined the shared services; the job module's coming refactor
    // gathers them in one context.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        id: JobId,
        index: Arc<JobIndex>,
        pipeline: JobPipeline,
        positions: Positions,
        store: Arc<dyn Metastore>,
        rules: Arc<RuleSet>,
        metrics: Arc<Metrics>,
        writers: Arc<crate::writers::Writers>,
    ) -> Arc<Job> {
        let (commits, rx) = mpsc::channel(COMMIT_QUEUE);
        let (report, _) = watch::channel(None);
        let job = Arc::new(Job {
            id,
            index,
            pipeline: Arc::new(Mutex::new(pipeline)),
            positions: Mutex::new(positions),
            claims: Mutex::default(),
            commits,
            dirty: Arc::new(Notify::new()),
            version: Arc::new(AtomicU64::new(1)),
            report,
            published_version: AtomicU64::new(0),
        });
        committer::start(&job, rx, store.clone(), metrics.clone(), writers);
        tokio::spawn(reporter(Arc::downgrade(&job), store, rules, metrics));
        crate::live::start(&job);
        job.dirty.notify_one();
        job
    }

    /// Queues lines and waits until they are durable; returns how many were duplicates.
    pub async fn commit(&self, lines: Vec<LogLine>, host: String) -> Result<u32, ServiceError> {
        let wait = self.submit(lines, host).await?;
        Self::committed(wait).await
    }

    /// Queues lines (waiting while the queue is full) without waiting for their commit, so one
    /// stream can have several batches in flight; pass the receiver to [`Job::committed`].
    pub async fn submit(&self, lines: Vec<LogLine>, host: String) -> Result<oneshot::Receiver<Reply>, ServiceError> {
        let (done, wait) = oneshot::channel();
        self.commits.send(CommitRequest { lines, host, done }).await.map_err(|_| ServiceError::Unavailable("the job is shutting down; retry".into()))?;
        Ok(wait)
    }

    /// Waits for a submitted batch: how many of its lines were duplicates.
    pub async fn committed(wait: oneshot::Receiver<Reply>) -> Result<u32, ServiceError> {
        wait.await.map_err(|_| ServiceError::Unavailable("the commit was interrupted; retry".into()))?
    }

    /// Where each (rank, stream, lane) resumes: the next sequence number the server expects.
    pub fn positions(&self) -> Positions {
        self.positions.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Registers a session's claim on its rank: its lane, where it resumes, and a note for the
    /// report when another agent of that rank has not ended (see `claims.rs`).
    pub fn claim(&self, opening: &claims::Opening<'_>) -> claims::Granted {
        let positions = self.positions();
        let granted = self.claims.lock().unwrap_or_else(|p| p.into_inner()).open(opening, &positions);
        if let Some(note) = &granted.note {
            tracing::warn!(job = %self.id, "{note}");
            self.update(|p| p.add_note(note.clone()));
        }
        granted
    }

    /// How many agents opened sessions for this job since it was opened here.
    pub fn speakers(&self) -> usize {
        self.claims.lock().unwrap_or_else(|p| p.into_inner()).speakers()
    }

    /// The process a session spoke for ended: its claim no longer conflicts with a new one.
    pub fn end_claim(&self, session_id: &str) {
        self.claims.lock().unwrap_or_else(|p| p.into_inner()).end(session_id);
    }

    /// Updates the evidence outside of lines (ends, clock samples, snapshots) and schedules a report.
    pub fn update(&self, f: impl FnOnce(&mut JobPipeline)) {
        if let Ok(mut p) = self.pipeline.lock() {
            f(&mut p);
            self.version.fetch_add(1, Ordering::SeqCst);
        }
        self.dirty.notify_one();
    }

    pub fn watch(&self) -> watch::Receiver<Option<Arc<Report>>> {
        self.report.subscribe()
    }

    /// The report over all evidence committed so far: the published one if it is current,
    /// else computed now (a reader never sees a report older than what was acknowledged to it).
    pub async fn current_report(&self, rules: &Arc<RuleSet>) -> Result<Arc<Report>, ServiceError> {
        let wanted = self.version.load(Ordering::SeqCst);
        if self.published_version.load(Ordering::SeqCst) >= wanted {
            if let Some(r) = self.report.borrow().clone() {
                return Ok(r);
            }
        }
        let pipeline = self.pipeline.clone();
        let rules = rules.clone();
        let version = self.version.clone();
        let (report, seen) = tokio::task::spawn_blocking(move || {
            pipeline.lock().map(|p| (p.report(&rules), version.load(Ordering::SeqCst))).map_err(|_| ServiceError::Internal("pipeline lock poisoned".into()))
        })
        .await??;
        let report = Arc::new(report);
        self.publish(report.clone(), seen);
        Ok(report)
    }

    /// Publishes a report computed at evidence version `seen`, unless a newer one is out.
    fn publish(&self, report: Arc<Report>, seen: u64) {
        if self.published_version.fetch_max(seen, Ordering::SeqCst) > seen {
            return;
        }
        let changed = self.report.borrow().as_deref() != Some(&*report);
        if changed {
            self.report.send_replace(Some(report));
        }
    }

    /// Waits for queued commits to finish (used at shutdown): an empty request is answered
    /// after every request queued before it.
    pub async fn drain(&self) {
        let _ = self.commit(Vec::new(), String::new()).await;
    }
}

async fn reporter(job: std::sync::Weak<Job>, store: Arc<dyn Metastore>, rules: Arc<RuleSet>, metrics: Arc<Metrics>) {
    let mut history = crate::incidents::Recorder::default();
    loop {
        let (dirty, pipeline, version, id) = match job.upgrade() {
            Some(j) => (j.dirty.clone(), j.pipeline.clone(), j.version.clone(), j.id.clone()),
            None => return,
        };
        dirty.notified().await;
        tokio::time::sleep(REPORT_DEBOUNCE).await;
        let started = Instant::now();
        let rules2 = rules.clone();
        let computed = tokio::task::spawn_blocking(move || pipeline.lock().ok().map(|p| (p.report(&rules2), version.load(Ordering::SeqCst)))).await;
        let Ok(Some((report, seen))) = computed else { continue };
        metrics.reports.fetch_add(1, Ordering::Relaxed);
        metrics.report_latency.observe(started.elapsed());
        let culprit = report.first_failure.as_ref().and_then(|f| f.rank);
        let class = report.first_failure.as_ref().map(|f| f.class.as_str());
        let json = serde_json::to_string(&report).unwrap_or_default();
        if let Err(e) = store.save_report(&id, report.verdict.as_str(), culprit, class, &json).await {
            tracing::warn!(job = %id, error = %e, "could not save the report");
        }
        let Some(job) = job.upgrade() else { return };
        history.record(&store, &id, &job.pipeline, &report).await;
        job.publish(Arc::new(report), seen);
    }
}
