//! One job on the server: its index, its pipeline, and two tasks.
//!
//! The committer is the job's only writer: it takes batches from a bounded queue (backpressure for
//! agents), drops lines it already has (dedup by rank, stream and sequence number), adds the rest
//! to the index, commits, and only then acknowledges. The reporter recomputes the report when new
//! evidence arrived (at most every [`REPORT_DEBOUNCE`]) and publishes it to watchers.

use crate::error::ServiceError;
use crate::metrics::Metrics;
use coroner_analysis::RuleSet;
use coroner_index::{IndexedLine, JobIndex};
use coroner_model::{JobId, LogLine, Rank, Report, Stream};
use coroner_pipeline::JobPipeline;
use coroner_store::Metastore;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch, Notify};

pub const REPORT_DEBOUNCE: Duration = Duration::from_millis(50);
const COMMIT_QUEUE: usize = 256;

/// Lines to commit, and where to say when they are durable.
pub struct CommitRequest {
    pub lines: Vec<LogLine>,
    pub host: String,
    pub done: oneshot::Sender<Result<u32, ServiceError>>,
}

type Positions = BTreeMap<(Option<u32>, Stream), u64>;

pub struct Job {
    pub id: JobId,
    pub index: Arc<JobIndex>,
    pub pipeline: Arc<Mutex<JobPipeline>>,
    positions: Mutex<Positions>,
    commits: mpsc::Sender<CommitRequest>,
    dirty: Arc<Notify>,
    /// Bumped whenever the evidence changes; a published report carries the version it saw.
    version: Arc<AtomicU64>,
    report: watch::Sender<Option<Arc<Report>>>,
    published_version: AtomicU64,
}

impl Job {
    /// Starts a job's tasks over an open index and a pipeline already holding what was committed.
    pub fn start(
        id: JobId,
        index: Arc<JobIndex>,
        pipeline: JobPipeline,
        positions: Positions,
        store: Arc<dyn Metastore>,
        rules: Arc<RuleSet>,
        metrics: Arc<Metrics>,
    ) -> Arc<Job> {
        let (commits, rx) = mpsc::channel(COMMIT_QUEUE);
        let (report, _) = watch::channel(None);
        let job = Arc::new(Job {
            id,
            index,
            pipeline: Arc::new(Mutex::new(pipeline)),
            positions: Mutex::new(positions),
            commits,
            dirty: Arc::new(Notify::new()),
            version: Arc::new(AtomicU64::new(1)),
            report,
            published_version: AtomicU64::new(0),
        });
        tokio::spawn(committer(job.clone(), rx, store.clone(), metrics.clone()));
        tokio::spawn(reporter(Arc::downgrade(&job), store, rules, metrics));
        crate::live::start(&job);
        job.dirty.notify_one();
        job
    }

    /// Queues lines and waits until they are durable; returns how many were duplicates.
    pub async fn commit(&self, lines: Vec<LogLine>, host: String) -> Result<u32, ServiceError> {
        let (done, wait) = oneshot::channel();
        self.commits
            .send(CommitRequest { lines, host, done })
            .await
            .map_err(|_| ServiceError::Unavailable("the job is shutting down; retry".into()))?;
        wait.await.map_err(|_| ServiceError::Unavailable("the commit was interrupted; retry".into()))?
    }

    /// Where each (rank, stream) resumes: the next sequence number the server expects.
    pub fn positions(&self) -> Positions {
        self.positions.lock().map(|p| p.clone()).unwrap_or_default()
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
            pipeline
                .lock()
                .map(|p| (p.report(&rules), version.load(Ordering::SeqCst)))
                .map_err(|_| ServiceError::Internal("pipeline lock poisoned".into()))
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

    /// Waits for queued commits to finish (used at shutdown).
    pub async fn drain(&self) {
        let _ = self.commits.reserve_many(COMMIT_QUEUE).await;
    }
}

async fn committer(job: Arc<Job>, mut rx: mpsc::Receiver<CommitRequest>, store: Arc<dyn Metastore>, metrics: Arc<Metrics>) {
    while let Some(first) = rx.recv().await {
        let mut requests = vec![first];
        while requests.len() < 64 {
            match rx.try_recv() {
                Ok(r) => requests.push(r),
                Err(_) => break,
            }
        }
        let started = Instant::now();
        let (fresh, duplicates) = job.dedup(&requests);
        let lines: Vec<LogLine> = fresh.iter().flatten().cloned().collect();
        let hosts: Vec<String> = requests.iter().map(|r| r.host.clone()).collect();
        let index = job.index.clone();
        let to_index: Vec<IndexedLine> = fresh
            .iter()
            .zip(&hosts)
            .flat_map(|(ls, host)| ls.iter().map(move |l| indexed(l, host)))
            .collect();
        let result = tokio::task::spawn_blocking(move || {
            index.add(&to_index)?;
            index.commit()
        })
        .await;
        let outcome: Result<(), ServiceError> = match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(e.into()),
        };
        if outcome.is_ok() {
            job.advance(&lines);
            metrics.commits.fetch_add(1, Ordering::Relaxed);
            metrics.commit_latency.observe(started.elapsed());
            metrics.duplicate_lines.fetch_add(duplicates.iter().map(|d| u64::from(*d)).sum(), Ordering::Relaxed);
            metrics.lines_ingested.fetch_add(lines.len() as u64, Ordering::Relaxed);
            metrics.bytes_ingested.fetch_add(lines.iter().map(|l| l.bytes.len() as u64).sum(), Ordering::Relaxed);
            metrics.batches.fetch_add(requests.len() as u64, Ordering::Relaxed);
            let n = lines.len() as u64;
            if let Err(e) = store.add_lines_count(&job.id, n).await {
                tracing::warn!(job = %job.id, error = %e, "could not update the line count");
            }
            let pipeline = job.pipeline.clone();
            let version = job.version.clone();
            let _ = tokio::task::spawn_blocking(move || {
                if let Ok(mut p) = pipeline.lock() {
                    for l in lines {
                        p.push_line(l);
                    }
                    version.fetch_add(1, Ordering::SeqCst);
                }
            })
            .await;
            job.dirty.notify_one();
        }
        for (req, dups) in requests.into_iter().zip(duplicates) {
            let reply = match &outcome {
                Ok(()) => Ok(dups),
                Err(e) => Err(ServiceError::Unavailable(format!("commit failed: {e}; retry"))),
            };
            let _ = req.done.send(reply);
        }
    }
}

impl Job {
    /// Splits requests into lines not yet committed and counts of duplicates, per request.
    fn dedup(&self, requests: &[CommitRequest]) -> (Vec<Vec<LogLine>>, Vec<u32>) {
        let mut next = self.positions();
        let mut fresh = Vec::with_capacity(requests.len());
        let mut dups = Vec::with_capacity(requests.len());
        for r in requests {
            let mut keep = Vec::with_capacity(r.lines.len());
            let mut d = 0;
            for l in &r.lines {
                let key = (l.rank.map(|r| r.0), l.stream);
                let expected = next.entry(key).or_insert(0);
                if l.seq < *expected {
                    d += 1;
                } else {
                    *expected = l.seq + 1;
                    keep.push(l.clone());
                }
            }
            fresh.push(keep);
            dups.push(d);
        }
        (fresh, dups)
    }

    fn advance(&self, lines: &[LogLine]) {
        if let Ok(mut pos) = self.positions.lock() {
            for l in lines {
                let e = pos.entry((l.rank.map(|r| r.0), l.stream)).or_insert(0);
                *e = (*e).max(l.seq + 1);
            }
        }
    }
}

fn indexed(l: &LogLine, host: &str) -> IndexedLine {
    IndexedLine {
        rank: l.rank.map(|r: Rank| r.0),
        stream: l.stream,
        seq: l.seq,
        capture_ns: l.capture_ns,
        printed_ns: None,
        host: host.to_string(),
        kind: "line".to_string(),
        severity: severity(&l.bytes).to_string(),
        bytes: l.bytes.clone(),
    }
}

/// A cheap severity for search filters; the typed events carry the real meaning.
fn severity(bytes: &[u8]) -> &'static str {
    let head = &bytes[..bytes.len().min(160)];
    let has = |n: &[u8]| head.windows(n.len()).any(|w| w == n);
    if has(b"Error") || has(b"ERROR") || has(b"[E") || has(b"[F") || has(b"Traceback") || has(b"Fatal") {
        "error"
    } else if has(b"WARN") || has(b"Warning") || has(b"[W") {
        "warning"
    } else {
        "info"
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
        let computed = tokio::task::spawn_blocking(move || {
            pipeline.lock().ok().map(|p| (p.report(&rules2), version.load(Ordering::SeqCst)))
        })
        .await;
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
