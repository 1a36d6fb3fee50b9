//! A job's index size on disk, recorded in the store (`jobs.index_bytes`) so that retention by
//! size (`retention/by_size.rs`) adds up rows instead of walking folders.
//!
//! Measured by listing the index folder (`JobIndex::disk_bytes`), on the trailing edge: a commit
//! makes the size due [`SETTLE`] later, and further commits before then ride along; so a job that
//! writes all the time is measured once per [`SETTLE`], and its last commit is always measured.

use coroner_index::JobIndex;
use coroner_model::JobId;
use coroner_store::Metastore;
use std::sync::Arc;
use tokio::time::{Duration, Instant};

/// How long after a commit its size is measured: tantivy's merges settle meanwhile, and a busy
/// job's commits (several a second) cost one folder listing between them.
pub const SETTLE: Duration = Duration::from_secs(1);

/// When the size is due and what the store holds.
#[derive(Debug, Default)]
pub struct IndexSize {
    due: Option<Instant>,
    recorded: Option<u64>,
}

impl IndexSize {
    /// A commit happened: the size is due [`SETTLE`] from now unless it is due already.
    pub fn committed(&mut self) {
        self.due.get_or_insert_with(|| Instant::now() + SETTLE);
    }

    /// When to measure next, if anything changed.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Measures (on a blocking thread) and records the size when it changed.
    pub async fn measure(&mut self, id: &JobId, index: &Arc<JobIndex>, store: &Arc<dyn Metastore>) {
        self.due = None;
        let index = index.clone();
        let Ok(bytes) = tokio::task::spawn_blocking(move || index.disk_bytes()).await else { return };
        if self.recorded == Some(bytes) {
            return;
        }
        match store.set_index_bytes(id, bytes).await {
            Ok(()) => self.recorded = Some(bytes),
            Err(e) => tracing::warn!(job = %id, error = %e, "could not record the index size; retention by size counts the last one"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_make_the_size_due_once_until_it_is_measured() {
        let mut size = IndexSize::default();
        assert_eq!(size.due(), None, "nothing committed, nothing to measure");
        let before = Instant::now();
        size.committed();
        let first = size.due().expect("due after a commit");
        assert!(first >= before + SETTLE);
        std::thread::sleep(Duration::from_millis(20));
        size.committed();
        assert_eq!(size.due(), Some(first), "a later commit rides along with the first one's measurement");
    }

    #[tokio::test]
    async fn the_measured_size_reaches_the_store_and_the_next_commit_makes_it_due_again() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = coroner_store::connect("sqlite::memory:").await?;
        let id = JobId::parse("sized")?;
        store.touch_job(&id, None, 1).await?;
        let index = Arc::new(JobIndex::open_or_create(&dir.path().join("index"))?);
        let mut size = IndexSize::default();
        size.committed();
        size.measure(&id, &index, &store).await;
        assert_eq!(size.due(), None);
        let recorded = store.storage_usage().await?.index_bytes;
        assert!(recorded > 0 && recorded == index.disk_bytes(), "{recorded} bytes recorded");
        size.committed();
        assert!(size.due().is_some());
        Ok(())
    }
}
