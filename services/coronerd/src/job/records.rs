//! The rows a job writes to the store beside its lines: clock samples and snapshot records
//! (process ends are written in groups, `arrivals.rs`). Each is stored before the evidence hears
//! of it, so a job opened again (`recovery.rs`) reads back what its reports were made of.

use super::Job;
use crate::error::ServiceError;
use coroner_model::ClockSample;
use coroner_store::SnapshotRecord;

impl Job {
    /// Stores an agent's clock samples, then adds them to the evidence. Every agent sends some
    /// every few seconds; they refine the order of what is there, so they are routine (the next
    /// report takes them) rather than news that calls for one.
    pub async fn add_clock_samples(&self, samples: Vec<ClockSample>) -> Result<(), ServiceError> {
        self.store.add_clock_samples(&self.id, &samples).await?;
        self.evidence.change_routine(|p| {
            p.add_clock_samples(samples);
            false
        });
        Ok(())
    }

    /// The snapshots filed under this job.
    pub async fn snapshots(&self) -> Result<Vec<SnapshotRecord>, ServiceError> {
        Ok(self.store.snapshots(&self.id).await?)
    }
}
