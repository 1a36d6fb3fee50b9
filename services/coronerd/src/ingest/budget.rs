//! The ingest memory budget: one bound, for the whole server, on the bytes of log batches that
//! have been received and not yet committed and acknowledged.
//!
//! A `ShipLogs` stream reserves a batch's bytes before it queues the batch for commit and gives
//! them back when the batch is answered. While the budget is spent, streams stop reading: the
//! HTTP/2 flow-control windows fill, agents' sends wait, and their spools hold the lines (the
//! agents never block the training job). So a thousand agents bursting at once cost at most the
//! budget, plus one decoded batch and one flow-control window per stream, instead of every
//! batch every stream could queue.

use crate::metrics::Metrics;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget's unit: a reservation is rounded up to whole KiB.
const UNIT: u64 = 1024;

pub struct IngestBudget {
    permits: Arc<Semaphore>,
    total_units: u32,
    /// Bytes reserved now and reservations that had to wait, as metrics.
    metrics: Arc<Metrics>,
}

/// Bytes of one batch held against the budget until dropped.
pub struct Reservation {
    _permit: OwnedSemaphorePermit,
    bytes: i64,
    metrics: Arc<Metrics>,
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
        IngestBudget { permits: Arc::new(Semaphore::new(total_units as usize)), total_units, metrics }
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
        Reservation { _permit: permit, bytes, metrics: self.metrics.clone() }
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
    async fn a_batch_larger_than_the_budget_goes_through_alone() {
        let budget = IngestBudget::new(1 << 20, Arc::default());
        let big = budget.reserve(64 << 20).await;
        assert_eq!(budget.reserved_bytes(), budget.capacity_bytes());
        drop(big);
        assert_eq!(budget.reserved_bytes(), 0);
    }
}
