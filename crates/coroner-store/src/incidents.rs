//! Incident memory: failed jobs' signatures and the hosts every job ran on, kept when the job
//! itself is deleted by retention (migration 0002). Same SQL for both backends, like `sql.rs`.

use crate::rows::Get;
use crate::StoreError;
use async_trait::async_trait;
use coroner_model::{FailureSignature, FaultClass, HostCount, JobHosts, JobId, Rank, RecordedFailure};

/// Which signatures [`IncidentStore::signatures`] returns; every filter that is set must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureFilter {
    pub class: Option<FaultClass>,
    /// Only failures recorded at or after this time.
    pub since_ns: Option<i64>,
    /// The most rows, newest first.
    pub limit: u32,
}

impl Default for SignatureFilter {
    fn default() -> Self {
        SignatureFilter { class: None, since_ns: None, limit: 10_000 }
    }
}

/// The history of failures across jobs. Part of every [`crate::Metastore`].
#[async_trait]
pub trait IncidentStore: Send + Sync {
    /// Records (or updates) a failed job's signature; the first recording time is kept.
    async fn save_signature(&self, job: &JobId, sig: &FailureSignature, now_ns: i64) -> Result<(), StoreError>;
    /// Forgets a job's signature (a job that turned out not to have failed).
    async fn delete_signature(&self, job: &JobId) -> Result<(), StoreError>;
    async fn signature(&self, job: &JobId) -> Result<Option<RecordedFailure>, StoreError>;
    /// Signatures newest first.
    async fn signatures(&self, f: &SignatureFilter) -> Result<Vec<RecordedFailure>, StoreError>;
    /// Records how many of a job's ranks ran on each host, replacing what was recorded for the
    /// job before (the first recording time is kept).
    async fn record_job_hosts(&self, job: &JobId, verdict: &str, hosts: &[HostCount], now_ns: i64) -> Result<(), StoreError>;
    /// Where jobs recorded at or after `since_ns` ran, by job id.
    async fn job_hosts(&self, since_ns: Option<i64>) -> Result<Vec<JobHosts>, StoreError>;
    /// Deletes the jobs last seen before `before_ns` with their sessions, clock samples, ends,
    /// snapshot rows and report; their signatures and hosts stay. Returns the deleted ids.
    async fn expire_jobs(&self, before_ns: i64) -> Result<Vec<JobId>, StoreError>;
}

pub(crate) const SAVE_SIGNATURE: &str = "
INSERT INTO failure_signatures (job_id, recorded_ns, signature_id, class, template, frames_json,
                                rank, host, gpu, collective)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (job_id) DO UPDATE SET
    signature_id = excluded.signature_id, class = excluded.class, template = excluded.template,
    frames_json = excluded.frames_json, rank = excluded.rank, host = excluded.host,
    gpu = excluded.gpu, collective = excluded.collective";

pub(crate) const DELETE_SIGNATURE: &str = "DELETE FROM failure_signatures WHERE job_id = $1";

const SIGNATURE_COLUMNS: &str = "job_id, recorded_ns, signature_id, class, template, frames_json, rank, host, gpu, collective";

pub(crate) fn signature_of() -> String {
    format!("SELECT {SIGNATURE_COLUMNS} FROM failure_signatures WHERE job_id = $1")
}

pub(crate) fn signatures() -> String {
    format!(
        "SELECT {SIGNATURE_COLUMNS} FROM failure_signatures
         WHERE ($1 IS NULL OR class = $1) AND ($2 IS NULL OR recorded_ns >= $2)
         ORDER BY recorded_ns DESC, job_id LIMIT $3"
    )
}

pub(crate) const FIRST_HOSTS_RECORD: &str = "SELECT MIN(recorded_ns) AS first_ns FROM job_hosts WHERE job_id = $1";
pub(crate) const DELETE_JOB_HOSTS: &str = "DELETE FROM job_hosts WHERE job_id = $1";
pub(crate) const ADD_JOB_HOST: &str = "INSERT INTO job_hosts (job_id, host, ranks, verdict, recorded_ns) VALUES ($1, $2, $3, $4, $5)";

pub(crate) const JOB_HOSTS: &str = "
SELECT job_id, host, ranks, verdict, recorded_ns FROM job_hosts
WHERE ($1 IS NULL OR recorded_ns >= $1) ORDER BY job_id, host";

pub(crate) const EXPIRE_JOBS: &str = "DELETE FROM jobs WHERE last_seen_ns < $1 RETURNING job_id";

pub(crate) fn frames_json(sig: &FailureSignature) -> String {
    // A list of strings always serializes.
    serde_json::to_string(&sig.frames).unwrap_or_else(|_| "[]".to_string())
}

pub(crate) fn signature_row(row: &impl Get) -> Result<RecordedFailure, StoreError> {
    let class = row.get_string("class")?;
    let frames = row.get_string("frames_json")?;
    let rank = row.get_opt_i64("rank")?.map(|r| u32::try_from(r).map(Rank).map_err(|_| StoreError::Corrupt(format!("column rank holds {r}")))).transpose()?;
    Ok(RecordedFailure {
        job_id: row.get_string("job_id")?,
        recorded_ns: row.get_i64("recorded_ns")?,
        signature: FailureSignature {
            id: row.get_string("signature_id")?,
            class: FaultClass::parse(&class).ok_or_else(|| StoreError::Corrupt(format!("column class holds the unknown fault class {class:?}")))?,
            template: row.get_string("template")?,
            frames: serde_json::from_str(&frames).map_err(|e| StoreError::Corrupt(format!("column frames_json: {e}")))?,
            rank,
            host: row.get_opt_string("host")?,
            gpu: row.get_opt_string("gpu")?,
            collective: row.get_opt_string("collective")?,
        },
    })
}

/// Folds `(job, host, ranks, verdict, recorded)` rows ordered by job into one entry per job.
pub(crate) fn job_hosts_rows(rows: &[impl Get]) -> Result<Vec<JobHosts>, StoreError> {
    let mut out: Vec<JobHosts> = Vec::new();
    for row in rows {
        let job_id = row.get_string("job_id")?;
        let ranks = row.get_i64("ranks")?;
        let host =
            HostCount { host: row.get_string("host")?, count: u32::try_from(ranks).map_err(|_| StoreError::Corrupt(format!("column ranks holds {ranks}")))? };
        match out.last_mut() {
            Some(last) if last.job_id == job_id => last.hosts.push(host),
            _ => out.push(JobHosts { job_id, recorded_ns: row.get_i64("recorded_ns")?, verdict: row.get_string("verdict")?, hosts: vec![host] }),
        }
    }
    Ok(out)
}

/// Implements [`IncidentStore`] for a store type with a `pool: sqlx::Pool<_>` field.
macro_rules! impl_incident_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::incidents::IncidentStore for $store {
            async fn save_signature(&self, job: &coroner_model::JobId, sig: &coroner_model::FailureSignature, now_ns: i64) -> Result<(), $crate::StoreError> {
                sqlx::query($crate::incidents::SAVE_SIGNATURE)
                    .bind(job.as_str())
                    .bind(now_ns)
                    .bind(&sig.id)
                    .bind(sig.class.as_str())
                    .bind(&sig.template)
                    .bind($crate::incidents::frames_json(sig))
                    .bind(sig.rank.map(|r| i64::from(r.0)))
                    .bind(sig.host.as_deref())
                    .bind(sig.gpu.as_deref())
                    .bind(sig.collective.as_deref())
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("save the failure signature", job.as_str(), e))?;
                Ok(())
            }

            async fn delete_signature(&self, job: &coroner_model::JobId) -> Result<(), $crate::StoreError> {
                sqlx::query($crate::incidents::DELETE_SIGNATURE)
                    .bind(job.as_str())
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("delete the failure signature", job.as_str(), e))?;
                Ok(())
            }

            async fn signature(&self, job: &coroner_model::JobId) -> Result<Option<coroner_model::RecordedFailure>, $crate::StoreError> {
                let row = sqlx::query(&$crate::incidents::signature_of())
                    .bind(job.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read the failure signature", job.as_str(), e))?;
                row.as_ref().map($crate::incidents::signature_row).transpose()
            }

            async fn signatures(&self, f: &$crate::incidents::SignatureFilter) -> Result<Vec<coroner_model::RecordedFailure>, $crate::StoreError> {
                let rows = sqlx::query(&$crate::incidents::signatures())
                    .bind(f.class.map(|c| c.as_str()))
                    .bind(f.since_ns)
                    .bind(i64::from(f.limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read failure signatures", "", e))?;
                rows.iter().map($crate::incidents::signature_row).collect()
            }

            async fn record_job_hosts(
                &self,
                job: &coroner_model::JobId,
                verdict: &str,
                hosts: &[coroner_model::HostCount],
                now_ns: i64,
            ) -> Result<(), $crate::StoreError> {
                use $crate::rows::Get as _;
                let err = |e| $crate::StoreError::query("record the job's hosts", job.as_str(), e);
                let mut tx = self.pool.begin().await.map_err(err)?;
                let first = sqlx::query($crate::incidents::FIRST_HOSTS_RECORD).bind(job.as_str()).fetch_one(&mut *tx).await.map_err(err)?;
                let recorded = first.get_opt_i64("first_ns")?.map_or(now_ns, |t| t.min(now_ns));
                sqlx::query($crate::incidents::DELETE_JOB_HOSTS).bind(job.as_str()).execute(&mut *tx).await.map_err(err)?;
                for h in hosts {
                    sqlx::query($crate::incidents::ADD_JOB_HOST)
                        .bind(job.as_str())
                        .bind(&h.host)
                        .bind(i64::from(h.count))
                        .bind(verdict)
                        .bind(recorded)
                        .execute(&mut *tx)
                        .await
                        .map_err(err)?;
                }
                tx.commit().await.map_err(err)?;
                Ok(())
            }

            async fn job_hosts(&self, since_ns: Option<i64>) -> Result<Vec<coroner_model::JobHosts>, $crate::StoreError> {
                let rows = sqlx::query($crate::incidents::JOB_HOSTS)
                    .bind(since_ns)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read the hosts of jobs", "", e))?;
                $crate::incidents::job_hosts_rows(&rows)
            }

            async fn expire_jobs(&self, before_ns: i64) -> Result<Vec<coroner_model::JobId>, $crate::StoreError> {
                use $crate::rows::Get as _;
                let rows = sqlx::query($crate::incidents::EXPIRE_JOBS)
                    .bind(before_ns)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("delete expired jobs", "", e))?;
                rows.iter()
                    .map(|r| {
                        let id = r.get_string("job_id")?;
                        coroner_model::JobId::parse(&id).map_err(|e| $crate::StoreError::Corrupt(format!("column job_id: {e}")))
                    })
                    .collect()
            }
        }
    };
}

pub(crate) use impl_incident_store;
