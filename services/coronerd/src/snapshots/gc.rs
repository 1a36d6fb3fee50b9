//! Snapshot garbage collection by reference. A stored content has a row in the store
//! (`snapshot_contents`) and is referenced by every snapshot row naming its sha256; when a job is
//! deleted its references go, and a content no reference names is deleted here.
//!
//! **The race with an upload of the same content.** An upload stores the file (or finds it
//! stored) and then files a reference. A sweep that found the content unreferenced must not
//! delete the file under a reference filed meanwhile, and an upload must not file a reference to
//! a file being deleted. The store orders both on the content's row (`coroner-store`'s
//! `storage.rs`): the sweep marks the row 'deleting' only if it is still live, unreferenced and at
//! the generation it read; filing a reference bumps that generation in the same transaction as
//! the reference, and is refused while the row says 'deleting' (the agent retries, and uploads the
//! bytes again once the file is gone). Only the sweep that marked a row removes its file, and it
//! forgets the row after. One case is left to the uploader: a sweep may finish entirely between
//! its check that the file is stored and its reference (then the reference creates a fresh row for
//! a file that is gone), so [`Contents::file_reference`] checks the file after filing and
//! withdraws the reference when it is missing.
//!
//! **Orphans.** A file with no row (an upload died between storing and filing) is claimed with a
//! 'deleting' row first, by the same rule, once it is older than an hour. A sweeper that died
//! after marking leaves its rows 'deleting'; an hour later they are made live again and decided
//! afresh.

use super::SnapshotStore;
use crate::error::ServiceError;
use crate::metrics::Metrics;
use coroner_store::{ContentRef, Metastore, SnapshotRecord};
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Contents decided per store query when sweeping them all.
const BATCH: u32 = 256;
/// A deletion marked this long ago and never finished was abandoned (its sweeper died).
const ABANDONED_NS: i64 = 3_600_000_000_000;

/// What a collection deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    pub contents: u64,
    pub bytes: u64,
}

impl std::ops::AddAssign for Collected {
    fn add_assign(&mut self, o: Collected) {
        self.contents += o.contents;
        self.bytes += o.bytes;
    }
}

/// Stored contents: the store's rows and the files they stand for; the one way references are
/// filed while the server runs and contents deleted.
#[derive(Clone)]
pub struct Contents {
    pub store: Arc<dyn Metastore>,
    pub snapshots: Arc<SnapshotStore>,
    pub metrics: Arc<Metrics>,
}

impl Contents {
    /// Files a snapshot row, a reference to its content, whose file the caller found stored;
    /// `false` when the job had it already. When a sweep deleted the file between the caller's
    /// check and the reference, the reference is withdrawn and the caller told to upload again.
    pub async fn file_reference(&self, record: &SnapshotRecord) -> Result<bool, ServiceError> {
        let fresh = self.store.add_snapshot(record).await?;
        if fresh && self.snapshots.stored_len(&record.sha256).is_none() {
            self.store.remove_snapshot(record).await?;
            return Err(ServiceError::Unavailable(format!("snapshot {:?} was deleted by a storage sweep while it was filed; upload it again", record.name)));
        }
        Ok(fresh)
    }

    /// Deletes the given contents if no job names them any more (after a job's deletion).
    pub async fn collect_these(&self, shas: impl IntoIterator<Item = String>) -> Result<Collected, ServiceError> {
        let mut done = Collected::default();
        let unique: HashSet<String> = shas.into_iter().collect();
        for sha in unique {
            for c in self.store.unreferenced_contents(Some(&sha), 1).await? {
                done += self.delete(&c).await?;
            }
        }
        Ok(done)
    }

    /// Deletes every content no job names.
    pub async fn collect_all(&self) -> Result<Collected, ServiceError> {
        let mut done = Collected::default();
        loop {
            let found = self.store.unreferenced_contents(None, BATCH).await?;
            let mut progressed = false;
            for c in &found {
                let one = self.delete(c).await?;
                progressed |= one.contents > 0;
                done += one;
            }
            // Contents another sweep or a new reference took stay out of this one.
            if found.len() < BATCH as usize || !progressed {
                return Ok(done);
            }
        }
    }

    /// Revives abandoned deletions, then deletes the old files no row stands for.
    pub async fn collect_orphans(&self) -> Result<Collected, ServiceError> {
        let now = coroner_model::now_ns();
        let revived = self.store.revive_abandoned_deletions(now.saturating_sub(ABANDONED_NS)).await?;
        if revived > 0 {
            tracing::info!(contents = revived, "snapshot deletions abandoned an hour ago are decided again");
        }
        let listed: HashSet<String> = self.store.registered_contents().await?.into_iter().collect();
        let snapshots = self.snapshots.clone();
        let unlisted = tokio::task::spawn_blocking(move || snapshots.unlisted_contents(&listed, super::disk::GRACE)).await?;
        let mut done = Collected::default();
        for sha in unlisted {
            if self.store.claim_orphan(&sha, coroner_model::now_ns()).await? {
                done += self.remove_and_forget(&sha).await?;
            }
        }
        Ok(done)
    }

    /// One content: marked (if nothing took it meanwhile), its file removed, its row forgotten.
    async fn delete(&self, c: &ContentRef) -> Result<Collected, ServiceError> {
        if !self.store.mark_deleting(c, coroner_model::now_ns()).await? {
            return Ok(Collected::default());
        }
        self.remove_and_forget(&c.sha256).await
    }

    async fn remove_and_forget(&self, sha: &str) -> Result<Collected, ServiceError> {
        let (snapshots, name) = (self.snapshots.clone(), sha.to_string());
        let removed = tokio::task::spawn_blocking(move || snapshots.remove_content(&name)).await??;
        self.store.forget_content(sha).await?;
        self.metrics.storage.contents_deleted.fetch_add(1, Relaxed);
        Ok(Collected { contents: 1, bytes: removed.unwrap_or(0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::{JobId, Rank};
    use coroner_store::StoreError;
    use sha2::{Digest, Sha256};

    struct Fixture {
        _dir: tempfile::TempDir,
        gc: Contents,
    }

    async fn fixture() -> anyhow::Result<Fixture> {
        let dir = tempfile::tempdir()?;
        let store = coroner_store::connect(&format!("sqlite:{}", dir.path().join("meta.db").display())).await?;
        let metrics = Arc::new(Metrics::default());
        let snapshots = Arc::new(SnapshotStore::new(dir.path().join("snapshots"), 1 << 20, Default::default(), metrics.clone())?);
        Ok(Fixture { _dir: dir, gc: Contents { store, snapshots, metrics } })
    }

    /// Stores `bytes` as a content file and files it for `job`, as a finished upload does.
    async fn upload(gc: &Contents, job: &JobId, bytes: &[u8]) -> anyhow::Result<String> {
        let sha = hex::encode(Sha256::digest(bytes));
        let path = gc.snapshots.path_of(&sha).expect("a sha256");
        std::fs::create_dir_all(path.parent().expect("a folder"))?;
        std::fs::write(&path, bytes)?;
        gc.store.touch_job(job, None, 1).await?;
        gc.file_reference(&record(job, &sha, bytes.len() as u64)).await?;
        Ok(sha)
    }

    fn record(job: &JobId, sha: &str, len: u64) -> SnapshotRecord {
        SnapshotRecord {
            job_id: job.clone(),
            rank: Some(Rank(0)),
            kind: "stack".into(),
            name: "rank0.stack.txt".into(),
            size: len,
            sha256: sha.into(),
            captured_ns: 1,
            stored_bytes: len,
        }
    }

    #[tokio::test]
    async fn a_content_goes_with_the_last_job_that_names_it() -> anyhow::Result<()> {
        let f = fixture().await?;
        let (a, b) = (JobId::parse("gc-a")?, JobId::parse("gc-b")?);
        let shared = upload(&f.gc, &a, b"shared stack").await?;
        upload(&f.gc, &b, b"shared stack").await?;
        let own = upload(&f.gc, &a, b"a's own stack").await?;
        f.gc.store.delete_job(&a).await?;
        let done = f.gc.collect_these([shared.clone(), own.clone()]).await?;
        assert_eq!(done, Collected { contents: 1, bytes: 13 });
        assert!(f.gc.snapshots.stored_len(&own).is_none(), "a's own content is gone");
        assert!(f.gc.snapshots.stored_len(&shared).is_some(), "b still names the shared one");
        f.gc.store.delete_job(&b).await?;
        assert_eq!(f.gc.collect_all().await?.contents, 1);
        assert!(f.gc.snapshots.stored_len(&shared).is_none());
        assert_eq!(f.gc.metrics.storage.contents_deleted.load(Relaxed), 2);
        Ok(())
    }

    #[tokio::test]
    async fn an_upload_filing_the_content_during_a_sweep_keeps_it_or_is_told_to_upload_again() -> anyhow::Result<()> {
        let f = fixture().await?;
        let (a, b) = (JobId::parse("race-a")?, JobId::parse("race-b")?);
        let sha = upload(&f.gc, &a, b"contested bytes").await?;
        f.gc.store.delete_job(&a).await?;
        f.gc.store.touch_job(&b, None, 1).await?;
        // The sweep found it unreferenced; the upload files it before the sweep marks it.
        let found = f.gc.store.unreferenced_contents(Some(&sha), 1).await?;
        assert!(f.gc.store.add_snapshot(&record(&b, &sha, 15)).await?);
        assert_eq!(f.gc.delete(&found[0]).await?, Collected::default(), "the sweep lost: the file stays");
        assert!(f.gc.snapshots.stored_len(&sha).is_some());
        // The other order: the sweep marks first; the upload's reference is refused until the
        // file is gone, and the agent's retry stores it anew.
        f.gc.store.delete_job(&b).await?;
        let found = f.gc.store.unreferenced_contents(Some(&sha), 1).await?;
        assert!(f.gc.store.mark_deleting(&found[0], 1).await?);
        f.gc.store.touch_job(&b, None, 2).await?;
        let refused = f.gc.store.add_snapshot(&record(&b, &sha, 15)).await;
        assert!(matches!(refused, Err(StoreError::ContentBeingDeleted(_))), "{refused:?}");
        f.gc.remove_and_forget(&sha).await?;
        assert!(f.gc.snapshots.stored_len(&sha).is_none());
        upload(&f.gc, &b, b"contested bytes").await?;
        assert!(f.gc.snapshots.stored_len(&sha).is_some());
        assert!(f.gc.collect_all().await?.contents == 0, "b names it again");
        Ok(())
    }

    #[tokio::test]
    async fn sweeps_racing_uploads_never_delete_a_named_file() -> anyhow::Result<()> {
        let f = fixture().await?;
        let bytes = b"the same content, uploaded again and again";
        for round in 0..30 {
            let (a, b) = (JobId::parse(&format!("r{round}-a"))?, JobId::parse(&format!("r{round}-b"))?);
            let sha = upload(&f.gc, &a, bytes).await?;
            f.gc.store.delete_job(&a).await?;
            f.gc.store.touch_job(&b, None, 1).await?;
            let sweeper = f.gc.clone();
            let sweep = tokio::spawn(async move { sweeper.collect_all().await });
            let filed = f.gc.file_reference(&record(&b, &sha, bytes.len() as u64)).await;
            sweep.await??;
            match filed {
                // Filed: the file must be there, now and after any later sweep.
                Ok(fresh) => {
                    assert!(fresh);
                    assert!(f.gc.collect_all().await?.contents == 0);
                    assert!(f.gc.snapshots.stored_len(&sha).is_some(), "round {round}: a named content lost its file");
                }
                // Refused (the sweep had marked it) or withdrawn (the sweep had finished): no row names it.
                Err(ServiceError::Unavailable(_)) => assert!(f.gc.store.snapshots(&b).await?.is_empty(), "round {round}"),
                Err(e) => return Err(e.into()),
            }
            f.gc.store.delete_job(&b).await?;
            f.gc.collect_all().await?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn old_files_without_a_row_are_orphans_and_recent_ones_are_spared() -> anyhow::Result<()> {
        let f = fixture().await?;
        let sha = hex::encode(Sha256::digest(b"never filed"));
        let path = f.gc.snapshots.path_of(&sha).expect("sha");
        std::fs::create_dir_all(path.parent().expect("folder"))?;
        std::fs::write(&path, b"never filed")?;
        assert_eq!(f.gc.collect_orphans().await?.contents, 0, "its upload may be filing it now");
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        std::fs::File::options().write(true).open(&path)?.set_modified(past)?;
        assert_eq!(f.gc.collect_orphans().await?, Collected { contents: 1, bytes: 11 });
        assert!(!path.exists());
        assert!(f.gc.store.registered_contents().await?.is_empty());
        Ok(())
    }
}
