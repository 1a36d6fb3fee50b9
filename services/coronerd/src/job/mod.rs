//! One job on the server, as the rest of the server sees it: a handle ([`Job`]) whose methods are
//! the only way in. Its state is private to this folder, and each of its tasks has a file:
//!
//! - `state.rs`: the evidence (the pipeline behind one lock) and its version, bumped in one place;
//! - `positions.rs`: where each (rank, stream, lane) resumes, and the dedup rule;
//! - `claims.rs`: which agents speak for which rank, and their lanes of sequence numbers;
//! - `committer.rs`: the only writer of the index: group commit, then the evidence, then the acks;
//! - `index_size.rs`: the index's bytes on disk, measured after commits and recorded in the store;
//! - `reporter.rs`: the report, recomputed after changes on a copy of the evidence, and published;
//! - `tail.rs`: the lines just committed, for the web page's live tail (bounded, never waited on);
//! - `live_ticker.rs`: live hang suspicion while the job runs;
//! - `recovery.rs`: opening a job again from its index and the store's rows;
//! - `records.rs`: the rows a job writes beside its lines (clock samples, process ends, snapshots);
//! - `shared.rs`: what every job of one server shares (store, rules, limits, live thresholds).
//!
//! The tasks hold only the pieces they work on, never the handle; they stop when the last handle
//! is dropped (the committer when its queue's only sender goes, the others by a drop guard).

mod claims;
mod committer;
mod index_size;
mod live_ticker;
mod positions;
mod records;
mod recovery;
mod reporter;
mod shared;
mod state;
mod tail;
#[cfg(test)]
pub(crate) mod tests;

pub use claims::{Granted, Opening};
pub use committer::Reply;
pub use positions::Positions;
pub use shared::Shared;
pub use state::Liveness;
pub use tail::{Tail, TailBatch, Watcher, MAX_WATCHERS as MAX_TAIL_WATCHERS};

use crate::error::ServiceError;
use claims::Claims;
use committer::{CommitRequest, Committer, COMMIT_QUEUE};
use coroner_analysis::{JobEvidence, RuleSet};
use coroner_index::JobIndex;
use coroner_model::{JobId, LogLine, Report};
use coroner_store::Metastore;
use positions::Committed;
use reporter::{Published, Reporter};
use state::Evidence;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::{CancellationToken, DropGuard};

pub struct Job {
    id: JobId,
    index: Arc<JobIndex>,
    evidence: Arc<Evidence>,
    /// The next sequence number expected per (rank, stream, lane): advanced by the committer only.
    positions: Arc<Committed>,
    claims: Mutex<Claims>,
    commits: mpsc::Sender<CommitRequest>,
    published: Arc<Published>,
    tail: Arc<Tail>,
    rules: Arc<RuleSet>,
    /// Where the job's rows live beside its index (`records.rs`).
    store: Arc<dyn Metastore>,
    /// Stops the reporter and the live ticker when the last handle goes.
    _tasks: DropGuard,
}

impl Job {
    /// Opens a job here: recovers it from its index and the store, then starts its tasks.
    pub async fn open(id: &JobId, shared: &Shared) -> Result<Arc<Job>, ServiceError> {
        let recovery::Recovered { index, mut pipeline, positions, standing } = recovery::recover(id, shared).await?;
        // Its writer is open now: past --max-open-jobs, the least recently used one closes.
        let (writers, opened, job) = (shared.writers.clone(), index.clone(), id.clone());
        let _ = tokio::task::spawn_blocking(move || writers.used(&job, &opened)).await;
        // After the replay: recovered lines are history, not silence to watch.
        pipeline.enable_live(shared.live.clone());
        Ok(Job::start(id.clone(), index, Arc::new(Evidence::new(pipeline)), Committed::new(positions), standing, shared))
    }

    fn start(
        id: JobId,
        index: Arc<JobIndex>,
        evidence: Arc<Evidence>,
        positions: Committed,
        standing: Option<crate::notify::Standing>,
        shared: &Shared,
    ) -> Arc<Job> {
        let (commits, queue) = mpsc::channel(COMMIT_QUEUE);
        let positions = Arc::new(positions);
        let published = Arc::new(Published::new());
        let stop = CancellationToken::new();
        let tail = Arc::new(Tail::new());
        Committer {
            id: id.clone(),
            index: index.clone(),
            positions: positions.clone(),
            evidence: evidence.clone(),
            store: shared.store.clone(),
            metrics: shared.metrics.clone(),
            writers: shared.writers.clone(),
            tail: tail.clone(),
        }
        .start(queue);
        Reporter {
            id: id.clone(),
            evidence: evidence.clone(),
            published: published.clone(),
            store: shared.store.clone(),
            rules: shared.rules.clone(),
            metrics: shared.metrics.clone(),
            notifier: shared.notifier.clone(),
            standing,
        }
        .start(stop.child_token());
        live_ticker::start(id.clone(), evidence.clone(), shared.notifier.clone(), shared.metrics.clone(), stop.child_token());
        let claims = Mutex::default();
        let (rules, store) = (shared.rules.clone(), shared.store.clone());
        Arc::new(Job { id, index, evidence, positions, claims, commits, published, tail, rules, store, _tasks: stop.drop_guard() })
    }

    pub fn id(&self) -> &JobId {
        &self.id
    }

    /// The job's index, for searches (blocking API: call it from blocking threads).
    pub fn index(&self) -> &Arc<JobIndex> {
        &self.index
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

    /// Waits for queued commits to finish (used at shutdown): an empty request is answered
    /// after every request queued before it.
    pub async fn drain(&self) {
        let _ = self.commit(Vec::new(), String::new()).await;
    }

    /// Where each (rank, stream, lane) resumes: the next sequence number the server expects.
    pub fn positions(&self) -> Positions {
        self.positions.get()
    }

    fn claims(&self) -> MutexGuard<'_, Claims> {
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a session's claim on its rank: its lane, where it resumes, and a note for the
    /// report when another agent of that rank has not ended (see `claims.rs`).
    pub fn claim(&self, opening: &Opening<'_>) -> Granted {
        let positions = self.positions.for_opening(opening.rank);
        let granted = self.claims().open(opening, &positions);
        if let Some(note) = &granted.note {
            tracing::warn!(job = %self.id, "{note}");
            self.update(|p| p.add_note(note.clone()));
        }
        granted
    }

    /// The attempt an opening session belongs to: what its agent said (`declared`), or, for a
    /// rank started again after its process ended (`restarted`, from the claims), the attempt after
    /// the one that end was in. Marks the attempt as begun at `now`.
    pub fn attempt_of_opening(&self, rank: Option<coroner_model::Rank>, declared: u32, restarted: bool, now: i64) -> u32 {
        let ended_in = rank.filter(|_| restarted).and_then(|r| self.evidence.read(|p| p.ended_in_attempt(r)));
        let attempt = ended_in.map_or(declared, |a| declared.max(a.saturating_add(1)));
        if attempt > 0 {
            self.update(|p| p.mark_attempt(attempt, now));
        }
        attempt
    }

    /// How many agents opened sessions for this job since it was opened here.
    pub fn speakers(&self) -> usize {
        self.claims().speakers()
    }

    /// Takes the world size a launcher's lines stated (`JobPipeline::said_world_size`) into the
    /// evidence, believed as far as the agents seen warrant (`limits::believed_world_size`), when it
    /// is larger than the one known: a per-node agent around torchrun knows no world size when it
    /// opens its session, its launcher says it later. Answers the new world size.
    pub fn adopt_said_world_size(&self, slack: u32) -> Option<u32> {
        let (said, known) = self.evidence.read(|p| (p.said_world_size(), p.world_size()));
        let believed = crate::limits::believed_world_size(said?, self.speakers(), slack);
        if known.is_some_and(|k| k >= believed) {
            return None;
        }
        self.update(|p| p.set_world_size(believed));
        Some(believed)
    }

    /// The process a session spoke for ended: its claim no longer conflicts with a new one.
    pub fn end_claim(&self, session_id: &str) {
        self.claims().end(session_id);
    }

    /// Updates the evidence outside of lines (ends, clock samples, snapshots, notes) and
    /// schedules a report.
    pub fn update(&self, f: impl FnOnce(&mut coroner_pipeline::JobPipeline)) {
        self.evidence.change(f);
    }

    /// Feeds an agent's heartbeat to the live monitor; answers the suspicion's `raised_at` when
    /// the rank is a shown suspect.
    pub async fn heartbeat(&self, h: Liveness) -> Result<Option<String>, ServiceError> {
        let evidence = self.evidence.clone();
        Ok(tokio::task::spawn_blocking(move || evidence.push_liveness(h)).await?)
    }

    /// Runs `f` on a copy of the evidence as of now, on a blocking thread (the job's lock is held
    /// only while copying).
    pub async fn with_evidence<R: Send + 'static>(&self, f: impl FnOnce(&JobEvidence) -> R + Send + 'static) -> Result<R, ServiceError> {
        let evidence = self.evidence.clone();
        Ok(tokio::task::spawn_blocking(move || f(&evidence.copy())).await?)
    }

    /// The live tail of committed lines (`tail.rs`).
    pub fn tail(&self) -> &Arc<Tail> {
        &self.tail
    }

    pub fn watch(&self) -> watch::Receiver<Option<Arc<Report>>> {
        self.published.watch()
    }

    /// A report for what searches read from it, each rank's clock alignment: the last one out,
    /// however many lines came since, else one computed now. Hits come from the index, never
    /// from the report, and the alignment moves slowly (clock samples every few seconds), so a
    /// search of a 16,384-rank job does not pay for a whole report (a second of CPU on two
    /// cores; it did, once per search).
    pub async fn recent_report(&self) -> Result<Arc<Report>, ServiceError> {
        match self.published.latest() {
            Some(r) => Ok(r),
            None => self.current_report().await,
        }
    }

    /// The report over all evidence committed so far: the published one if it is current,
    /// else computed now (a reader never sees a report older than what was acknowledged to it).
    pub async fn current_report(&self) -> Result<Arc<Report>, ServiceError> {
        if let Some(r) = self.published.as_of(self.evidence.version()) {
            return Ok(r);
        }
        let computed = reporter::compute(&self.evidence, &self.rules).await?;
        let report = Arc::new(computed.report);
        self.published.publish(report.clone(), computed.seen);
        Ok(report)
    }
}
