//! The ingest memory budget: one bound, for the whole server, on the bytes of log batches that
//! have been received and not yet committed and acknowledged.
//!
//! A `ShipLogs` stream reserves a batch's bytes before it queues the batch for commit and gives
//! them back when the batch is answered. While the budget is spent, streams stop reading: the
//! HTTP/2 flow-control windows fill, agents' sends wait, and their spools hold the lines (the
//! agents never block the training job). So a thousand agents bursting at once cost at most the
//! budget, plus one flow-control window per stream, instead of every batch every stream could
//! queue. The reservation is made before a batch is decoded (`prepaid.rs`).
//!
//! **Shares:** one stream may hold at most a share of the budget (`--ingest-stream-share`, an
//! eighth), and one job's streams together another (`--ingest-job-share`, a half), so a client
//! that stops reading its acknowledgements, or one job's burst, slows only itself. A reservation
//! takes the job's share, the stream's, then the server's, always in that order.

use crate::metrics::Metrics;
use coroner_model::JobId;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget's unit: a reservation is rounded up to whole KiB.
const UNIT: u64 = 1024;

pub struct IngestBudget {
    permits: Arc<Semaphore>,
    total_units: u32,
    /// Units one stream, and one job's streams, may hold.
    stream_units: u32,
    job_units: u32,
    /// Each job's share, while some stream of it holds one.
    jobs: Mutex<HashMap<JobId, Weak<Semaphore>>>,
    /// Bytes reserved now and reservations that had to wait, as metrics.
    metrics: Arc<Metrics>,
}

/// A stream's or a job's share of the budget.
#[derive(Clone)]
pub struct Share(Arc<Semaphore>, u32);

/// Bytes of one batch held against the budget until dropped.
pub struct Reservation {
    _permits: Vec<OwnedSemaphorePermit>,
    bytes: i64,
    metrics: Arc<Metrics>,
}

impl Reservation {
    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes.max(0) as u64
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.metrics.ingest_buffered_bytes.fetch_sub(self.bytes, Relaxed);
    }
}

impl IngestBudget {
    /// A budget of `bytes` (at least 1 MiB).
    pub fn new(bytes: u64, metrics: Arc<Metrics>) -> IngestBudget {
        let total_units = (bytes.max(1 << 20) / UNIT).min(u64::from(u32::MAX >> 3)) as u32;
        metrics.ingest_budget_bytes.store(u64::from(total_units) * UNIT, Relaxed);
        IngestBudget {
            permits: Arc::new(Semaphore::new(total_units as usize)),
            total_units,
            stream_units: total_units,
            job_units: total_units,
            jobs: Mutex::default(),
            metrics,
        }
    }

    /// The budget with shares: a stream may hold `1/stream` of it, a job's streams `1/job`
    /// (each at least 1 MiB, so one batch of the agent's size always fits).
    pub fn with_shares(mut self, stream: u64, job: u64) -> IngestBudget {
        let share = |div: u64| (u64::from(self.total_units) / div.max(1)).max((1 << 20) / UNIT).min(u64::from(self.total_units)) as u32;
        self.stream_units = share(stream);
        self.job_units = share(job);
        self
    }

    /// A new stream's share.
    pub fn stream_share(&self) -> Share {
        Share(Arc::new(Semaphore::new(self.stream_units as usize)), self.stream_units)
    }

    /// `job`'s share, the same for all its streams while any holds it.
    pub fn job_share(&self, job: &JobId) -> Share {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = jobs.get(job).and_then(Weak::upgrade) {
            return Share(s, self.job_units);
        }
        jobs.retain(|_, w| w.strong_count() > 0);
        let s = Arc::new(Semaphore::new(self.job_units as usize));
        jobs.insert(job.clone(), Arc::downgrade(&s));
        Share(s, self.job_units)
    }

    /// Holds `bytes` of the server's budget if they are free now (never waits).
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        let units = bytes.div_ceil(UNIT).clamp(1, u64::from(self.total_units)) as u32;
        let permit = self.permits.clone().try_acquire_many_owned(units).ok()?;
        let bytes = i64::from(units) * UNIT as i64;
        self.metrics.ingest_buffered_bytes.fetch_add(bytes, Relaxed);
        Some(Reservation { _permits: vec![permit], bytes, metrics: self.metrics.clone() })
    }

    /// Waits until `bytes` fit the job's share (if given), the stream's and the server's budget,
    /// then holds them. A batch larger than a share waits for the whole share.
    pub async fn reserve_in(&self, job: Option<&Share>, stream: &Share, bytes: u64) -> Reservation {
        let want = bytes.div_ceil(UNIT).max(1);
        let mut permits = Vec::with_capacity(3);
        let mut waited = false;
        for share in job.into_iter().chain(std::iter::once(stream)) {
            let units = want.min(u64::from(share.1)) as u32;
            let permit = match share.0.clone().try_acquire_many_owned(units) {
                Ok(p) => p,
                Err(_) => {
                    waited = true;
                    share.0.clone().acquire_many_owned(units).await.expect("a share's semaphore is never closed")
                }
            };
            permits.push(permit);
        }
        let mut r = self.reserve(bytes).await;
        if waited {
            self.metrics.ingest_budget_waits.fetch_add(1, Relaxed);
        }
        permits.append(&mut r._permits);
        r._permits = permits;
        r
    }

    /// Waits until `bytes` fit, then holds them. A batch larger than the whole budget waits for
    /// the whole budget (it is let through alone rather than refused).
    pub async fn reserve(&self, bytes: u64) -> Reservation {
        let units = bytes.div_ceil(UNIT).clamp(1, u64::from(self.total_units)) as u32;
        let permit = match self.permits.clone().try_acquire_many_owned(units) {
            Ok(p) => p,
            Err(_) => {
                self.metrics.ingest_budget_waits.fetch_add(1, Relaxed);
                self.permits.clone().acquire_many_owned(units).await.expect("the budget's semaphore is never closed")
            }
        };
        let bytes = i64::from(units) * UNIT as i64;
        self.metrics.ingest_buffered_bytes.fetch_add(bytes, Relaxed);
        Reservation { _permits: vec![permit], bytes, metrics: self.metrics.clone() }
    }
}

#[cfg(test)]
impl IngestBudget {
    fn capacity_bytes(&self) -> u64 {
        u64::from(self.total_units) * UNIT
    }

    fn reserved_bytes(&self) -> u64 {
        self.metrics.ingest_buffered_bytes.load(Relaxed).max(0) as u64
    }

    fn waits(&self) -> u64 {
        self.metrics.ingest_budget_waits.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_full_budget_holds_the_next_batch_until_one_is_answered() {
        let budget = Arc::new(IngestBudget::new(2 << 20, Arc::default()));
        let first = budget.reserve(1 << 20).await;
        let _second = budget.reserve(1 << 20).await;
        assert_eq!(budget.reserved_bytes(), 2 << 20);
        let b = budget.clone();
        let third = tokio::spawn(async move { b.reserve(10).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!third.is_finished(), "a third batch got in beyond the budget");
        assert_eq!(budget.waits(), 1);
        drop(first);
        let third = tokio::time::timeout(Duration::from_secs(5), third).await.expect("room was given back").unwrap();
        assert_eq!(budget.reserved_bytes(), (1 << 20) + 1024);
        drop(third);
        assert_eq!(budget.reserved_bytes(), 1 << 20);
    }

    #[tokio::test]
    async fn a_stream_holds_at_most_its_share_and_another_stream_still_gets_in() {
        let budget = Arc::new(IngestBudget::new(8 << 20, Arc::default()).with_shares(4, 2));
        let (stalled, other) = (budget.stream_share(), budget.stream_share());
        let _a = budget.reserve_in(None, &stalled, 1 << 20).await;
        let _b = budget.reserve_in(None, &stalled, 1 << 20).await;
        // The stalled stream's share (2 MiB) is spent: its next batch waits...
        let (b2, s2) = (budget.clone(), stalled.clone());
        let third = tokio::spawn(async move { b2.reserve_in(None, &s2, 1 << 20).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!third.is_finished(), "a stream got past its share");
        // ...while another stream's batch goes in at once.
        let got = tokio::time::timeout(Duration::from_millis(500), budget.reserve_in(None, &other, 1 << 20)).await;
        assert!(got.is_ok(), "another stream waited behind a stalled one");
        third.abort();
    }

    #[tokio::test]
    async fn a_job_holds_at_most_its_share_over_all_its_streams() {
        let budget = Arc::new(IngestBudget::new(8 << 20, Arc::default()).with_shares(1, 4));
        let job = JobId::parse("busy").expect("id");
        let share = budget.job_share(&job);
        let _a = budget.reserve_in(Some(&share), &budget.stream_share(), 2 << 20).await;
        let (b2, s2) = (budget.clone(), budget.job_share(&job));
        let more = tokio::spawn(async move { b2.reserve_in(Some(&s2), &b2.stream_share(), 1 << 20).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!more.is_finished(), "a job got past its share on another stream");
        let other = budget.job_share(&JobId::parse("quiet").expect("id"));
        let got = tokio::time::timeout(Duration::from_millis(500), budget.reserve_in(Some(&other), &budget.stream_share(), 1 << 20)).await;
        assert!(got.is_ok(), "another job waited behind a busy one");
        more.abort();
    }

    #[tokio::test]
    async fn a_batch_larger_than_the_budget_goes_through_alone() {
        let budget = IngestBudget::new(1 << 20, Arc::default());
        let big = budget.reserve(64 << 20).await;
        assert_eq!(budget.reserved_bytes(), budget.capacity_bytes());
        drop(big);
        assert_eq!(budget.reserved_bytes(), 0);
    }
}
