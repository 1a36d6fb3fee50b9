//! The rows a job writes to the store beside its lines: clock samples, process ends and snapshot
//! records. Each is stored before the evidence hears of it, so a job opened again (`recovery.rs`)
//! reads back what its reports were made of.

use super::Job;
use crate::error::ServiceError;
use coroner_model::{ClockSample, ProcessEnd};
use coroner_store::SnapshotRecord;

impl Job {
    /// Stores an agent's clock samples, then adds them to the evidence.
    pub async fn add_clock_samples(&self, samples: Vec<ClockSample>) -> Result<(), ServiceError> {
        self.store.add_clock_samples(&self.id, &samples).await?;
        self.update(|p| p.add_clock_samples(samples));
        Ok(())
    }

    /// Stores a rank's end; answers how many ends the job has stored (the caller adds it to the
    /// evidence with what it knows of the world).
    pub async fn record_end(&self, end: &ProcessEnd) -> Result<u32, ServiceError> {
        self.store.record_exit(&self.id, end).await?;
        Ok(self.store.process_ends(&self.id).await?.len() as u32)
    }

    /// The snapshots filed under this job.
    pub async fn snapshots(&self) -> Result<Vec<SnapshotRecord>, ServiceError> {
        Ok(self.store.snapshots(&self.id).await?)
    }
}
