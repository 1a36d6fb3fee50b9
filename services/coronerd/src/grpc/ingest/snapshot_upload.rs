//! Filing a stored snapshot under its job: the metadata row, then (once per content and job) the
//! readers' facts into the job's pipeline. Shared by an upload that completes and by
//! `SnapshotStatus` finding the content already stored (the bytes came with another job, or an
//! earlier agent of this one).
//!
//! Filing by hash, without the bytes, is allowed only to the agent that uploaded the content or
//! for a job that already holds it: anyone else could otherwise file another job's snapshot under
//! their own by naming its sha256 (and pick the reader by the kind they name). The size recorded
//! is the stored file's, never the header's claim. The row is a reference to the content, filed
//! through `snapshots/gc.rs` so that a storage sweep deleting the same content never wins over it.

use super::sessions::Session;
use super::IngestService;
use crate::error::ServiceError;
use crate::snapshots::Holding;
use coroner_model::{Rank, SnapshotSummary};
use coroner_proto::v1;
use std::sync::atomic::Ordering::Relaxed;
use tonic::Status;

impl IngestService {
    /// Records `header` (whose content is stored, `stored_bytes` of it kept) for the session's job.
    /// Returns whether this job did not have it yet.
    pub(super) async fn file_snapshot(&self, session: &Session, header: &v1::SnapshotHeader, stored_bytes: u64) -> Result<bool, Status> {
        let record = coroner_store::SnapshotRecord {
            job_id: session.job.id().clone(),
            rank: header.rank.map(Rank).or(session.rank),
            kind: header.kind.clone(),
            name: header.name.clone(),
            size: header.original_size.unwrap_or(header.size).max(header.size),
            sha256: header.sha256.clone(),
            captured_ns: header.captured_ns,
            stored_bytes,
        };
        let contents = crate::snapshots::gc::Contents { store: self.jobs.store().clone(), snapshots: self.snapshots.clone(), metrics: self.metrics.clone() };
        let fresh = contents.file_reference(&record).await?;
        if !fresh {
            return Ok(false);
        }
        self.metrics.snapshots.fetch_add(1, Relaxed);
        // Reading a snapshot (a pickle, a zip, XML) is parsing work: off the runtime.
        let path = self.snapshots.path_of(&record.sha256);
        let (kind, name, size) = (record.kind.clone(), record.name.clone(), record.size);
        let facts = tokio::task::spawn_blocking(move || crate::snapshots::stored_facts(path.as_deref(), &kind, &name, size)).await.unwrap_or_default();
        session.job.update(|p| {
            let summary = SnapshotSummary {
                rank: record.rank,
                kind: record.kind.clone(),
                name: record.name.clone(),
                size: record.size,
                sha256: record.sha256.clone(),
                highlights: Vec::new(),
            };
            p.add_snapshot_facts(summary, facts);
        });
        Ok(true)
    }

    pub(super) async fn snapshot_status_of(&self, req: v1::SnapshotStatusRequest) -> Result<v1::SnapshotStatusResponse, Status> {
        let session = self.session(&req.session_id)?;
        let mut header = req.header.ok_or_else(|| ServiceError::InvalidArgument("SnapshotStatus needs the snapshot's header".into()))?;
        // Filed under this name at once when the content is already stored: checked like an upload's.
        crate::snapshots::check_name(&header.name)?;
        crate::snapshots::check_kind(&header.kind)?;
        match self.snapshots.status(&header.sha256)? {
            Holding::Stored => {
                let held = session.job.snapshots().await?;
                let mine = held.iter().any(|s| s.sha256 == header.sha256) || self.snapshots.uploaded_by(&header.sha256, &session.uploader);
                if !mine {
                    // Not this agent's content: it proves it holds the content by sending it.
                    crate::limits::Limit::ClaimByHash.count(&self.metrics);
                    return Ok(v1::SnapshotStatusResponse { stored: false, resume_offset: 0 });
                }
                let kept = self.snapshots.stored_len(&header.sha256).unwrap_or(0);
                // The content's size: the stored file's when the cap did not cut it.
                if kept < self.snapshots.cap() {
                    header.size = kept;
                    header.original_size = None;
                }
                self.check_job_quota(&session, &header).await?;
                self.file_snapshot(&session, &header, kept).await?;
                Ok(v1::SnapshotStatusResponse { stored: true, resume_offset: 0 })
            }
            Holding::ResumeAt(offset) => Ok(v1::SnapshotStatusResponse { stored: false, resume_offset: offset.min(header.size) }),
        }
    }

    /// Refuses a snapshot that would take the job past its snapshot quota (`--max-job-snapshot-gb`).
    pub(super) async fn check_job_quota(&self, session: &Session, header: &v1::SnapshotHeader) -> Result<(), ServiceError> {
        let Some(quota) = self.snapshots.per_job_quota() else { return Ok(()) };
        let held: u64 = session.job.snapshots().await?.iter().map(|s| s.stored_bytes).sum();
        if held.saturating_add(header.size.min(self.snapshots.cap())) > quota {
            return Err(crate::limits::Limit::SnapshotQuota.refuse(
                &self.metrics,
                format!(
                    "job {} holds {held} bytes of snapshots, and {:?} would pass its quota of {quota} (--max-job-snapshot-gb)",
                    session.job.id(),
                    header.name
                ),
            ));
        }
        Ok(())
    }
}
