//! What agents' arrivals write to the metadata store, grouped so that a start-up burst does not
//! queue one transaction per rank on SQLite's one writer: 16,384 agents opening sessions at
//! once were admitted at ~13 per second when every OpenSession wrote its session row, and
//! touched its job row twice, each in a transaction of its own (docs/LOAD.md).
//!
//! - [`GroupWriter`]: every row queued while the previous group was being written is written in
//!   one transaction (as the committer groups batches); a group the store refuses is written
//!   again row by row, so one bad row (a job deleted meanwhile) fails alone. Session rows
//!   ([`SessionWriter`]) and process ends ([`ExitWriter`]: a job's ranks all end within a second
//!   or two, and 16,384 exits written one transaction each took minutes).
//! - [`RecentTouches`]: a job row touched (or being touched) less than [`TOUCH_EVERY`] ago with no
//!   larger world size is not written again: `last_seen_ns` may lag by that much, and nothing
//!   else changes. Of thousands of agents arriving at once, one writes.

use crate::error::ServiceError;
use coroner_model::{JobId, Nanos, ProcessEnd};
use coroner_store::{Metastore, SessionRecord, StoreError};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// At most this many rows in one transaction.
const GROUP: usize = 512;
/// Rows waiting for the writer; past this, the RPC waits (backpressure, nothing dropped).
const QUEUE: usize = 16_384;
/// A job row is written at most this often when nothing but its `last_seen_ns` would change.
pub const TOUCH_EVERY: Duration = Duration::from_millis(500);

/// A row that arrives with one agent's call and is written in a group with the others.
pub trait Grouped: Send + Sync + Sized + 'static {
    /// Writes `rows` in one transaction, all or none.
    fn write<'a>(store: &'a dyn Metastore, rows: &'a [Self]) -> impl Future<Output = Result<(), StoreError>> + Send + 'a;
}

impl Grouped for SessionRecord {
    fn write<'a>(store: &'a dyn Metastore, rows: &'a [Self]) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        store.open_sessions(rows)
    }
}

/// A rank's end, of its job.
impl Grouped for (JobId, ProcessEnd) {
    fn write<'a>(store: &'a dyn Metastore, rows: &'a [Self]) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        store.record_exits(rows)
    }
}

struct Pending<T> {
    row: T,
    done: oneshot::Sender<Result<(), ServiceError>>,
}

/// Writes rows of one kind in groups: every row queued while the previous group was written goes
/// in the next transaction. The writer task starts with the first row (inside the server's
/// runtime) and ends when this is dropped.
pub struct GroupWriter<T> {
    store: Arc<dyn Metastore>,
    queue: OnceLock<mpsc::Sender<Pending<T>>>,
}

/// Session rows (OpenSession).
pub type SessionWriter = GroupWriter<SessionRecord>;
/// Process ends (ReportExit).
pub type ExitWriter = GroupWriter<(JobId, ProcessEnd)>;

impl<T: Grouped> GroupWriter<T> {
    pub fn new(store: Arc<dyn Metastore>) -> GroupWriter<T> {
        GroupWriter { store, queue: OnceLock::new() }
    }

    /// Writes `row`; returns once it is committed.
    pub async fn write(&self, row: T) -> Result<(), ServiceError> {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            tokio::spawn(write_groups(self.store.clone(), rx));
            tx
        });
        let (done, written) = oneshot::channel();
        let stopped = || ServiceError::Unavailable("the server is stopping: its store writer has ended; retry".into());
        queue.send(Pending { row, done }).await.map_err(|_| stopped())?;
        written.await.map_err(|_| stopped())?
    }
}

async fn write_groups<T: Grouped>(store: Arc<dyn Metastore>, mut queue: mpsc::Receiver<Pending<T>>) {
    let mut group = Vec::with_capacity(GROUP);
    while queue.recv_many(&mut group, GROUP).await > 0 {
        let (rows, answers): (Vec<T>, Vec<_>) = group.drain(..).map(|p| (p.row, p.done)).unzip();
        match T::write(&*store, &rows).await {
            Ok(()) => answers.into_iter().for_each(|a| drop(a.send(Ok(())))),
            Err(e) if rows.len() == 1 => {
                if let Some(answer) = answers.into_iter().next() {
                    let _ = answer.send(Err(e.into()));
                }
            }
            Err(e) => {
                // One bad row (a job deleted meanwhile) fails alone.
                tracing::debug!(error = %e, rows = rows.len(), "a group was refused; writing its rows one by one");
                for (row, answer) in rows.iter().zip(answers) {
                    let _ = answer.send(T::write(&*store, std::slice::from_ref(row)).await.map_err(ServiceError::from));
                }
            }
        }
    }
}

/// When each job row was last written by a touch, and the largest world size written.
#[derive(Default)]
pub struct RecentTouches {
    jobs: Mutex<HashMap<JobId, (Nanos, Option<u32>)>>,
}

impl RecentTouches {
    /// Whether a touch of `job` at `now` with `world` is to be written: not when one was written
    /// (or is being written) less than [`TOUCH_EVERY`] before with no smaller world. When it is,
    /// it counts as written from now on, so the arrivals meanwhile skip it instead of all writing
    /// the same row at once; a write that fails is [`forget`](Self::forget)-ten.
    pub fn to_write(&self, job: &JobId, world: Option<u32>, now: Nanos) -> bool {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&(at, written)) = jobs.get(job) {
            let fresh = now >= at && now - at < TOUCH_EVERY.as_nanos() as Nanos;
            let no_wider = match (world, written) {
                (None, _) => true,
                (Some(w), Some(had)) => w <= had,
                (Some(_), None) => false,
            };
            if fresh && no_wider {
                return false;
            }
        }
        let entry = jobs.entry(job.clone()).or_insert((now, world));
        entry.0 = now;
        entry.1 = entry.1.max(world);
        true
    }

    /// The job's row is gone (deleted), or its touch failed: its next touch writes.
    pub fn forget(&self, job: &JobId) {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).remove(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn a_touch_is_skipped_only_while_fresh_and_no_wider() {
        let t = RecentTouches::default();
        let j = JobId::parse("j").unwrap();
        assert!(t.to_write(&j, Some(8), 1_000 * MS), "never written: write");
        assert!(!t.to_write(&j, None, 1_100 * MS), "being written or just written: skip");
        assert!(!t.to_write(&j, Some(8), 1_100 * MS));
        assert!(!t.to_write(&j, Some(4), 1_100 * MS), "a smaller world changes nothing in the row");
        assert!(t.to_write(&j, Some(16), 1_100 * MS), "a wider world is written at once");
        assert!(!t.to_write(&j, Some(16), 1_200 * MS), "and then counts as written");
        assert!(t.to_write(&j, None, 1_100 * MS + TOUCH_EVERY.as_nanos() as Nanos), "stale: last_seen is written again");
        assert!(t.to_write(&j, None, 900 * MS), "a clock that went back writes");
        t.forget(&j);
        assert!(t.to_write(&j, None, 1_000 * MS), "a deleted job's row (or a failed write) is written again");
    }

    #[test]
    fn of_many_arrivals_at_once_one_writes() {
        let t = RecentTouches::default();
        let j = JobId::parse("j").unwrap();
        let writers = (0..1_000).filter(|i| t.to_write(&j, Some(16_384), 5_000 * MS + i)).count();
        assert_eq!(writers, 1);
    }
}
