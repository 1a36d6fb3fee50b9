//! coroner's metadata store: jobs, agent sessions, clock samples, process ends, snapshot
//! metadata and report summaries, behind the [`Metastore`] trait.
//!
//! Two backends share one implementation (see `backend.rs`) and one conformance suite:
//! [`SqliteStore`], the embedded default, and [`PostgresStore`], for deployments where several
//! servers or tools share the metadata. [`connect`] picks one from the URL and applies the
//! schema migrations in `migrations/{sqlite,postgres}/` (embedded at compile time).
//! Queries are checked at run time; every time is i64 nanoseconds since the Unix epoch.
//! Log lines are not stored here: they live in the per-job tantivy index (`coroner-index`).

mod backend;
mod error;
mod incidents;
mod leases;
mod notifications;
mod postgres;
mod records;
mod rows;
mod sql;
mod sqlite;
mod storage;

pub use error::StoreError;
pub use incidents::{IncidentStore, SignatureFilter};
pub use leases::{Claimant, Lease, LeaseGrant, LeaseStore};
pub use notifications::{Delivery, DeliveryFilter, DeliveryState, DeliveryUpdate, NotificationEvent, NotificationStore};
pub use postgres::PostgresStore;
pub use records::{JobFilter, JobPosition, JobRow, SessionRecord, SnapshotRecord};
pub use sqlite::SqliteStore;
pub use storage::{ContentRef, JobSize, StorageStore, StorageUsage, TallyRow};

use async_trait::async_trait;
use coroner_model::{ClockSample, JobId, ProcessEnd, Rank};
use std::sync::Arc;

/// The verdict of a job that no report has judged yet.
pub const VERDICT_RUNNING: &str = "running";

/// Where coroner keeps what it knows about jobs, apart from their lines.
///
/// Every operation that names a job other than [`Metastore::touch_job`] expects the job to
/// have been touched first, and fails with [`StoreError::UnknownJob`] otherwise. The history of
/// failures across jobs ([`IncidentStore`]), job ownership leases ([`LeaseStore`]), the
/// notification log ([`NotificationStore`]) and the rows behind bounded storage
/// ([`StorageStore`]) come with every metastore.
#[async_trait]
pub trait Metastore: IncidentStore + LeaseStore + NotificationStore + StorageStore + Send + Sync {
    /// Records a job, or updates it: `last_seen_ns` and `world_size` only grow,
    /// `first_seen_ns` only shrinks.
    async fn touch_job(&self, job: &JobId, world_size: Option<u32>, now_ns: i64) -> Result<(), StoreError>;
    /// Records an agent session; opening the same `session_id` again replaces it.
    async fn open_session(&self, s: &SessionRecord) -> Result<(), StoreError>;
    /// Records several sessions in one transaction (what a start-up burst of thousands of agents
    /// needs: one commit for every session opened meanwhile); all or none are recorded.
    async fn open_sessions(&self, sessions: &[SessionRecord]) -> Result<(), StoreError>;
    /// The job's sessions, oldest first.
    async fn sessions(&self, job: &JobId) -> Result<Vec<SessionRecord>, StoreError>;
    async fn add_clock_samples(&self, job: &JobId, samples: &[ClockSample]) -> Result<(), StoreError>;
    /// The job's clock samples by rank, each rank's in the order they were added.
    async fn clock_samples(&self, job: &JobId) -> Result<Vec<ClockSample>, StoreError>;
    /// Records how a rank's process ended; a later end of the same rank replaces it.
    async fn record_exit(&self, job: &JobId, end: &ProcessEnd) -> Result<(), StoreError>;
    /// Records several process ends, of any jobs, in one transaction (a job's ranks all ending
    /// within a second or two: one commit for every end reported meanwhile); all or none.
    async fn record_exits(&self, ends: &[(JobId, ProcessEnd)]) -> Result<(), StoreError>;
    /// The job's process ends by rank.
    async fn process_ends(&self, job: &JobId) -> Result<Vec<ProcessEnd>, StoreError>;
    /// Adds `n` to the job's count of indexed lines.
    async fn add_lines_count(&self, job: &JobId, n: u64) -> Result<(), StoreError>;
    /// Stores the latest report and its summary (verdict, culprit, fault class).
    async fn save_report(&self, job: &JobId, verdict: &str, culprit: Option<Rank>, class: Option<&str>, report_json: &str) -> Result<(), StoreError>;
    async fn get_job(&self, job: &JobId) -> Result<Option<JobRow>, StoreError>;
    /// The jobs that pass the filter, most recently seen first.
    async fn list_jobs(&self, f: &JobFilter) -> Result<Vec<JobRow>, StoreError>;
    /// Records a snapshot, a reference to its content (registered in the same transaction);
    /// `false` when one with the same (job, sha256, rank, name) exists (then nothing changes).
    /// [`StoreError::ContentBeingDeleted`] while a sweep deletes that content: upload it again later.
    async fn add_snapshot(&self, s: &SnapshotRecord) -> Result<bool, StoreError>;
    /// The job's snapshots by capture time.
    async fn snapshots(&self, job: &JobId) -> Result<Vec<SnapshotRecord>, StoreError>;
    /// The sha256 of every content some job's snapshot names: what snapshot storage must keep.
    async fn snapshot_contents(&self) -> Result<Vec<String>, StoreError>;
}

/// Opens the store a URL names and brings its schema up to date:
/// `sqlite:PATH`, `sqlite://PATH?mode=rwc` (the file is created when missing unless the URL
/// sets a `mode`), `sqlite::memory:`, or `postgres://` / `postgresql://`.
pub async fn connect(url: &str) -> Result<Arc<dyn Metastore>, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteStore::connect(url).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresStore::connect(url).await?))
    } else {
        Err(StoreError::BadUrl(error::redact_url(url)))
    }
}
