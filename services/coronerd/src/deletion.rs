//! Deleting a job, the one way for every caller: `coroner delete` (gRPC `Admin.DeleteJob`,
//! `grpc/admin.rs`) and retention by size (`retention/by_size.rs`). The job's rows, report and
//! index go (`Jobs::remove`: under this instance's lease, a running job only when forced), then
//! the snapshot contents no other job names (`snapshots/gc.rs`); its failure signature and hosts
//! stay, as history. Each deletion is logged once and counted in
//! `coroner_jobs_deleted_total{reason}`.

use crate::error::ServiceError;
use crate::jobs::Jobs;
use crate::snapshots::gc::{Collected, Contents};
use coroner_model::JobId;
use std::sync::Arc;

/// Why a job was deleted: the label of `coroner_jobs_deleted_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// `--retention`: last seen too long ago.
    Age,
    /// `--retain-max-bytes`: storage over its bound, oldest finished job first.
    Size,
    /// `coroner delete`.
    Request,
}

impl Why {
    pub const ALL: [Why; 3] = [Why::Age, Why::Size, Why::Request];

    pub fn name(self) -> &'static str {
        match self {
            Why::Age => "age",
            Why::Size => "size",
            Why::Request => "request",
        }
    }
}

/// What one deletion freed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deleted {
    pub verdict: String,
    pub lines: u64,
    pub index_bytes: u64,
    pub collected: Collected,
}

/// Deletes jobs and what only they named.
#[derive(Clone)]
pub struct Deleter {
    pub jobs: Arc<Jobs>,
    pub contents: Contents,
}

impl Deleter {
    /// Deletes one job (see the module's doc); `force` deletes a running one too.
    pub async fn delete(&self, job: &JobId, why: Why, force: bool) -> Result<Deleted, ServiceError> {
        let removed = self.jobs.remove(job, force).await?;
        // The job is gone; its contents are collected now, or by the next sweep if this fails.
        let collected = match self.contents.collect_these(removed.snapshot_contents).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(job = %job, error = %e, "could not collect the deleted job's snapshot contents; the next sweep will");
                Collected::default()
            }
        };
        self.jobs.metrics().storage.job_deleted(why);
        tracing::info!(
            job = %job,
            reason = why.name(),
            verdict = %removed.verdict,
            lines = removed.lines,
            index_bytes = removed.index_bytes,
            snapshot_contents = collected.contents,
            snapshot_bytes = collected.bytes,
            "deleted the job (its failure signature stays)"
        );
        Ok(Deleted { verdict: removed.verdict, lines: removed.lines, index_bytes: removed.index_bytes, collected })
    }
}
