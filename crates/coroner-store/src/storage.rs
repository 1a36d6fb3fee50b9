//! Bounded storage (migration 0008): deleting a job, the bytes jobs and snapshots hold, the jobs
//! retention by size removes first, the job tally `/metrics` reads, and the rows behind snapshot
//! garbage collection. Same SQL for both backends, like `sql.rs`.
//!
//! **Snapshot contents and their references.** A `snapshot_contents` row stands for one stored
//! content; every `snapshots` row naming its sha256 is a reference. Filing a reference
//! ([`crate::Metastore::add_snapshot`]) registers the content in the same transaction: it creates
//! the row or bumps its `generation`, and is refused ([`StoreError::ContentBeingDeleted`]) while a
//! sweep is deleting it. A sweep deletes a content in three steps: [`StorageStore::mark_deleting`]
//! (only while it is live, unreferenced, and at the generation [`StorageStore::unreferenced_contents`]
//! read, so a reference filed in between wins), then the caller removes the file, then
//! [`StorageStore::forget_content`]. On PostgreSQL a concurrent reference holds the content row's
//! lock, so the mark waits and then sees the new generation; on SQLite writes are serialized.

use crate::StoreError;
use async_trait::async_trait;
use coroner_model::JobId;

/// Bytes on disk, as the store counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageUsage {
    /// Every job's index, as its owner last measured it.
    pub index_bytes: u64,
    /// Every registered snapshot content (each counted once, however many jobs name it).
    pub snapshot_bytes: u64,
}

impl StorageUsage {
    pub fn total(&self) -> u64 {
        self.index_bytes.saturating_add(self.snapshot_bytes)
    }
}

/// A finished job and the bytes of its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSize {
    pub job_id: JobId,
    pub last_seen_ns: i64,
    pub index_bytes: u64,
}

/// How many jobs hold one verdict and fault class (`None`: no class).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TallyRow {
    pub verdict: String,
    pub fault_class: Option<String>,
    pub jobs: u64,
}

/// A stored content no job names, as a sweep found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentRef {
    pub sha256: String,
    pub stored_bytes: u64,
    /// The generation read: the mark succeeds only if no reference bumped it since.
    pub generation: i64,
}

/// Deleting jobs and the rows behind storage bounds. Part of every [`crate::Metastore`].
#[async_trait]
pub trait StorageStore: Send + Sync {
    /// Deletes a job's row with its sessions, clock samples, ends, snapshot references and report;
    /// its failure signature and hosts stay. `false` when the store did not hold it.
    async fn delete_job(&self, job: &JobId) -> Result<bool, StoreError>;
    /// Records the bytes of a job's index on disk.
    async fn set_index_bytes(&self, job: &JobId, bytes: u64) -> Result<(), StoreError>;
    /// The bytes every index and every registered snapshot content hold.
    async fn storage_usage(&self) -> Result<StorageUsage, StoreError>;
    /// Jobs whose verdict is no longer `running`, least recently seen first, at most `limit`.
    async fn oldest_finished_jobs(&self, limit: u32) -> Result<Vec<JobSize>, StoreError>;
    /// How many jobs hold each verdict and fault class (kept by triggers: a handful of rows).
    async fn job_tally(&self) -> Result<Vec<TallyRow>, StoreError>;
    /// Live contents no snapshot row names: the one given, or any (at most `limit`).
    async fn unreferenced_contents(&self, only: Option<&str>, limit: u32) -> Result<Vec<ContentRef>, StoreError>;
    /// Marks a content as being deleted, if it is still live, unreferenced and at the generation
    /// read; `true` when this caller may now remove its file (then [`StorageStore::forget_content`]).
    async fn mark_deleting(&self, c: &ContentRef, now_ns: i64) -> Result<bool, StoreError>;
    /// Drops the row of a content whose file was removed.
    async fn forget_content(&self, sha256: &str) -> Result<(), StoreError>;
    /// Claims a file on disk that no row stands for (an upload stored it and died before filing
    /// it): `true` when no row existed and one now says 'deleting' (remove the file, then forget it).
    async fn claim_orphan(&self, sha256: &str, now_ns: i64) -> Result<bool, StoreError>;
    /// Every content with a row, live or being deleted.
    async fn registered_contents(&self) -> Result<Vec<String>, StoreError>;
    /// Makes deletions marked before `before_ns` and never finished (their sweeper died) live
    /// again, so the next sweep decides them afresh; returns how many.
    async fn revive_abandoned_deletions(&self, before_ns: i64) -> Result<u64, StoreError>;
    /// Jobs with lines and no index size recorded (written before migration 0008), by id after
    /// `after`, at most `limit`: their sizes are measured once when retention by size starts.
    async fn unsized_jobs(&self, after: &str, limit: u32) -> Result<Vec<JobId>, StoreError>;
    /// Removes one snapshot reference (filed for content that turned out to be gone).
    async fn remove_snapshot(&self, s: &crate::SnapshotRecord) -> Result<(), StoreError>;
}

pub(crate) const REGISTER_CONTENT: &str = "
INSERT INTO snapshot_contents (sha256, stored_bytes, state, generation) VALUES ($1, $2, 'live', 0)
ON CONFLICT (sha256) DO UPDATE SET
    generation = snapshot_contents.generation + 1,
    stored_bytes = CASE WHEN excluded.stored_bytes > snapshot_contents.stored_bytes
                        THEN excluded.stored_bytes ELSE snapshot_contents.stored_bytes END
WHERE snapshot_contents.state = 'live'";

pub(crate) const DELETE_JOB: &str = "DELETE FROM jobs WHERE job_id = $1";
pub(crate) const SET_INDEX_BYTES: &str = "UPDATE jobs SET index_bytes = $2 WHERE job_id = $1";
pub(crate) const STORAGE_USAGE: &str = "
SELECT CAST(COALESCE((SELECT SUM(index_bytes) FROM jobs), 0) AS BIGINT) AS index_bytes,
       CAST(COALESCE((SELECT SUM(stored_bytes) FROM snapshot_contents), 0) AS BIGINT) AS snapshot_bytes";
pub(crate) const OLDEST_FINISHED: &str = "
SELECT job_id, last_seen_ns, index_bytes FROM jobs WHERE verdict <> 'running'
ORDER BY last_seen_ns, job_id LIMIT $1";
pub(crate) const JOB_TALLY: &str = "SELECT verdict, fault_class, jobs FROM job_tally WHERE jobs > 0 ORDER BY verdict, fault_class";
pub(crate) const UNREFERENCED: &str = "
SELECT sha256, stored_bytes, generation FROM snapshot_contents c
WHERE state = 'live' AND ($1 IS NULL OR sha256 = $1)
  AND NOT EXISTS (SELECT 1 FROM snapshots s WHERE s.sha256 = c.sha256)
ORDER BY sha256 LIMIT $2";
pub(crate) const MARK_DELETING: &str = "
UPDATE snapshot_contents SET state = 'deleting', marked_ns = $3
WHERE sha256 = $1 AND state = 'live' AND generation = $2
  AND NOT EXISTS (SELECT 1 FROM snapshots s WHERE s.sha256 = $1)";
pub(crate) const FORGET_CONTENT: &str = "DELETE FROM snapshot_contents WHERE sha256 = $1 AND state = 'deleting'";
pub(crate) const CLAIM_ORPHAN: &str = "
INSERT INTO snapshot_contents (sha256, stored_bytes, state, generation, marked_ns) VALUES ($1, 0, 'deleting', 0, $2)
ON CONFLICT (sha256) DO NOTHING";
pub(crate) const REGISTERED: &str = "SELECT sha256 FROM snapshot_contents";
pub(crate) const REVIVE: &str = "
UPDATE snapshot_contents SET state = 'live', generation = generation + 1, marked_ns = NULL
WHERE state = 'deleting' AND marked_ns < $1";
pub(crate) const UNSIZED_JOBS: &str = "
SELECT job_id FROM jobs WHERE index_bytes = 0 AND lines > 0 AND job_id > $1 ORDER BY job_id LIMIT $2";
pub(crate) const REMOVE_SNAPSHOT: &str = "DELETE FROM snapshots WHERE job_id = $1 AND sha256 = $2 AND rank_key = $3 AND name = $4";

/// Implements [`StorageStore`] for a store type with a `pool: sqlx::Pool<_>` field.
macro_rules! impl_storage_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::storage::StorageStore for $store {
            async fn delete_job(&self, job: &coroner_model::JobId) -> Result<bool, $crate::StoreError> {
                let done = sqlx::query($crate::storage::DELETE_JOB)
                    .bind(job.as_str())
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("delete the job", job.as_str(), e))?;
                Ok(done.rows_affected() > 0)
            }

            async fn set_index_bytes(&self, job: &coroner_model::JobId, bytes: u64) -> Result<(), $crate::StoreError> {
                sqlx::query($crate::storage::SET_INDEX_BYTES)
                    .bind(job.as_str())
                    .bind($crate::rows::u64_to_db(bytes))
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("record the index size", job.as_str(), e))?;
                Ok(())
            }

            async fn storage_usage(&self) -> Result<$crate::StorageUsage, $crate::StoreError> {
                use $crate::rows::Get as _;
                let row = sqlx::query($crate::storage::STORAGE_USAGE)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("add up the bytes stored", "", e))?;
                Ok($crate::StorageUsage {
                    index_bytes: $crate::rows::to_u64("index_bytes", row.get_i64("index_bytes")?)?,
                    snapshot_bytes: $crate::rows::to_u64("snapshot_bytes", row.get_i64("snapshot_bytes")?)?,
                })
            }

            async fn oldest_finished_jobs(&self, limit: u32) -> Result<Vec<$crate::JobSize>, $crate::StoreError> {
                use $crate::rows::Get as _;
                let rows = sqlx::query($crate::storage::OLDEST_FINISHED)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("list the oldest finished jobs", "", e))?;
                rows.iter()
                    .map(|r| {
                        Ok($crate::JobSize {
                            job_id: $crate::rows::job_id(r)?,
                            last_seen_ns: r.get_i64("last_seen_ns")?,
                            index_bytes: $crate::rows::to_u64("index_bytes", r.get_i64("index_bytes")?)?,
                        })
                    })
                    .collect()
            }

            async fn job_tally(&self) -> Result<Vec<$crate::TallyRow>, $crate::StoreError> {
                use $crate::rows::Get as _;
                let rows =
                    sqlx::query($crate::storage::JOB_TALLY).fetch_all(&self.pool).await.map_err(|e| $crate::StoreError::query("read the job tally", "", e))?;
                rows.iter()
                    .map(|r| {
                        let class = r.get_string("fault_class")?;
                        Ok($crate::TallyRow {
                            verdict: r.get_string("verdict")?,
                            fault_class: (!class.is_empty()).then_some(class),
                            jobs: $crate::rows::to_u64("jobs", r.get_i64("jobs")?)?,
                        })
                    })
                    .collect()
            }

            async fn unreferenced_contents(&self, only: Option<&str>, limit: u32) -> Result<Vec<$crate::ContentRef>, $crate::StoreError> {
                use $crate::rows::Get as _;
                let rows = sqlx::query($crate::storage::UNREFERENCED)
                    .bind(only)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("find snapshot contents no job names", "", e))?;
                rows.iter()
                    .map(|r| {
                        Ok($crate::ContentRef {
                            sha256: r.get_string("sha256")?,
                            stored_bytes: $crate::rows::to_u64("stored_bytes", r.get_i64("stored_bytes")?)?,
                            generation: r.get_i64("generation")?,
                        })
                    })
                    .collect()
            }

            async fn mark_deleting(&self, c: &$crate::ContentRef, now_ns: i64) -> Result<bool, $crate::StoreError> {
                let done = sqlx::query($crate::storage::MARK_DELETING)
                    .bind(&c.sha256)
                    .bind(c.generation)
                    .bind(now_ns)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("mark a snapshot content for deletion", "", e))?;
                Ok(done.rows_affected() == 1)
            }

            async fn forget_content(&self, sha256: &str) -> Result<(), $crate::StoreError> {
                sqlx::query($crate::storage::FORGET_CONTENT)
                    .bind(sha256)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("forget a deleted snapshot content", "", e))?;
                Ok(())
            }

            async fn claim_orphan(&self, sha256: &str, now_ns: i64) -> Result<bool, $crate::StoreError> {
                let done = sqlx::query($crate::storage::CLAIM_ORPHAN)
                    .bind(sha256)
                    .bind(now_ns)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("claim an unfiled snapshot content", "", e))?;
                Ok(done.rows_affected() == 1)
            }

            async fn registered_contents(&self) -> Result<Vec<String>, $crate::StoreError> {
                use $crate::rows::Get as _;
                let rows = sqlx::query($crate::storage::REGISTERED)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("list the registered snapshot contents", "", e))?;
                rows.iter().map(|r| r.get_string("sha256")).collect()
            }

            async fn revive_abandoned_deletions(&self, before_ns: i64) -> Result<u64, $crate::StoreError> {
                let done = sqlx::query($crate::storage::REVIVE)
                    .bind(before_ns)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("revive abandoned snapshot deletions", "", e))?;
                Ok(done.rows_affected())
            }

            async fn unsized_jobs(&self, after: &str, limit: u32) -> Result<Vec<coroner_model::JobId>, $crate::StoreError> {
                let rows = sqlx::query($crate::storage::UNSIZED_JOBS)
                    .bind(after)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("list jobs without an index size", "", e))?;
                rows.iter().map($crate::rows::job_id).collect()
            }

            async fn remove_snapshot(&self, s: &$crate::SnapshotRecord) -> Result<(), $crate::StoreError> {
                sqlx::query($crate::storage::REMOVE_SNAPSHOT)
                    .bind(s.job_id.as_str())
                    .bind(&s.sha256)
                    .bind($crate::rows::rank_key(s.rank))
                    .bind(&s.name)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("remove a snapshot reference", s.job_id.as_str(), e))?;
                Ok(())
            }
        }
    };
}

pub(crate) use impl_storage_store;
