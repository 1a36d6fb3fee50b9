//! Job ownership leases (migration 0003): with several coronerd instances on one database, each
//! job is owned by one instance at a time, which renews its lease; when it stops renewing, the
//! lease expires and another instance takes it over.
//!
//! Every time is the database's clock, so the instances' own clocks never decide who owns a job:
//! the SQL computes "now" itself (`NOW_NS` of each backend) and callers pass only a TTL. Each
//! grant to a new owner (or to the same owner after its lease expired) bumps the `epoch`, the
//! fencing token; releasing a lease expires it and keeps the row, so epochs never go back.

use crate::rows::Get;
use crate::StoreError;
use async_trait::async_trait;
use coroner_model::JobId;
use std::time::Duration;

/// A job's lease as the database holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub job_id: String,
    /// The owning instance's id.
    pub owner: String,
    /// Where the owner serves gRPC (agents and gRPC queries are sent there).
    pub grpc_address: String,
    /// Where the owner serves HTTP (the web pages and JSON API redirect there).
    pub http_address: String,
    /// The fencing token: grows with every change of hands.
    pub epoch: i64,
    /// When the lease expires, on the database's clock (ns since the Unix epoch).
    pub expires_ns: i64,
}

/// Who asks for a lease: an instance id and where it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    pub owner: String,
    pub grpc_address: String,
    pub http_address: String,
}

/// The answer to [`LeaseStore::acquire_lease`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseGrant {
    /// The caller owns the job until `expires_ns`.
    Granted(Lease),
    /// Another instance holds a live lease on the job.
    HeldBy(Lease),
}

/// Job ownership among coronerd instances. Part of every [`crate::Metastore`].
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes the job's lease for `who.owner` for `ttl`, atomically, when nobody holds it, its lease
    /// expired, or `who.owner` holds it already (then it is extended and keeps its epoch).
    async fn acquire_lease(&self, job: &JobId, who: &Claimant, ttl: Duration) -> Result<LeaseGrant, StoreError>;
    /// Extends a live lease that `owner` holds at `epoch`; `None` when it is no longer theirs
    /// (expired, or taken over).
    async fn renew_lease(&self, job: &JobId, owner: &str, epoch: i64, ttl: Duration) -> Result<Option<Lease>, StoreError>;
    /// Expires the lease now, if `owner` holds it at `epoch`; `false` when it did not.
    async fn release_lease(&self, job: &JobId, owner: &str, epoch: i64) -> Result<bool, StoreError>;
    /// The live lease on the job, if any.
    async fn lease_holder(&self, job: &JobId) -> Result<Option<Lease>, StoreError>;
}

const LEASE_COLUMNS: &str = "job_id, owner, grpc_address, http_address, epoch, expires_ns";

/// `now` is the backend's SQL expression for its clock in ns.
pub(crate) fn acquire(now: &str) -> String {
    format!(
        "INSERT INTO job_leases (job_id, owner, grpc_address, http_address, epoch, expires_ns)
         VALUES ($1, $2, $3, $4, 1, {now} + $5)
         ON CONFLICT (job_id) DO UPDATE SET
             epoch = CASE WHEN job_leases.owner = excluded.owner AND job_leases.expires_ns > {now}
                          THEN job_leases.epoch ELSE job_leases.epoch + 1 END,
             owner = excluded.owner, grpc_address = excluded.grpc_address,
             http_address = excluded.http_address, expires_ns = excluded.expires_ns
         WHERE job_leases.owner = excluded.owner OR job_leases.expires_ns <= {now}
         RETURNING {LEASE_COLUMNS}"
    )
}

pub(crate) fn renew(now: &str) -> String {
    format!(
        "UPDATE job_leases SET expires_ns = {now} + $4
         WHERE job_id = $1 AND owner = $2 AND epoch = $3 AND expires_ns > {now}
         RETURNING {LEASE_COLUMNS}"
    )
}

pub(crate) fn release(now: &str) -> String {
    format!("UPDATE job_leases SET expires_ns = {now} WHERE job_id = $1 AND owner = $2 AND epoch = $3 AND expires_ns > {now}")
}

pub(crate) fn holder(now: &str) -> String {
    format!("SELECT {LEASE_COLUMNS} FROM job_leases WHERE job_id = $1 AND expires_ns > {now}")
}

pub(crate) fn lease_row(row: &impl Get) -> Result<Lease, StoreError> {
    Ok(Lease {
        job_id: row.get_string("job_id")?,
        owner: row.get_string("owner")?,
        grpc_address: row.get_string("grpc_address")?,
        http_address: row.get_string("http_address")?,
        epoch: row.get_i64("epoch")?,
        expires_ns: row.get_i64("expires_ns")?,
    })
}

/// A TTL as the ns the SQL adds to its clock.
pub(crate) fn ttl_param(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_nanos()).unwrap_or(i64::MAX / 4)
}

/// Implements [`LeaseStore`] for a store type with a `pool: sqlx::Pool<_>` field, given the
/// backend's SQL expression for the current time in ns.
macro_rules! impl_lease_store {
    ($store:ty, $now:expr) => {
        #[async_trait::async_trait]
        impl $crate::leases::LeaseStore for $store {
            async fn acquire_lease(
                &self,
                job: &coroner_model::JobId,
                who: &$crate::leases::Claimant,
                ttl: std::time::Duration,
            ) -> Result<$crate::leases::LeaseGrant, $crate::StoreError> {
                let err = |e| $crate::StoreError::query("take the job's lease", job.as_str(), e);
                // Two attempts: a lease that expired between the insert and the look-up is free
                // on the second; a third miss means the table holds something impossible.
                for _ in 0..2 {
                    let granted = sqlx::query(&$crate::leases::acquire($now))
                        .bind(job.as_str())
                        .bind(&who.owner)
                        .bind(&who.grpc_address)
                        .bind(&who.http_address)
                        .bind($crate::leases::ttl_param(ttl))
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(err)?;
                    if let Some(row) = granted {
                        return Ok($crate::leases::LeaseGrant::Granted($crate::leases::lease_row(&row)?));
                    }
                    if let Some(l) = self.lease_holder(job).await? {
                        return Ok($crate::leases::LeaseGrant::HeldBy(l));
                    }
                }
                Err($crate::StoreError::Corrupt(format!("the lease of job {job} is neither free nor held")))
            }

            async fn renew_lease(
                &self,
                job: &coroner_model::JobId,
                owner: &str,
                epoch: i64,
                ttl: std::time::Duration,
            ) -> Result<Option<$crate::leases::Lease>, $crate::StoreError> {
                let row = sqlx::query(&$crate::leases::renew($now))
                    .bind(job.as_str())
                    .bind(owner)
                    .bind(epoch)
                    .bind($crate::leases::ttl_param(ttl))
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("renew the job's lease", job.as_str(), e))?;
                row.as_ref().map($crate::leases::lease_row).transpose()
            }

            async fn release_lease(&self, job: &coroner_model::JobId, owner: &str, epoch: i64) -> Result<bool, $crate::StoreError> {
                let done = sqlx::query(&$crate::leases::release($now))
                    .bind(job.as_str())
                    .bind(owner)
                    .bind(epoch)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("release the job's lease", job.as_str(), e))?;
                Ok(done.rows_affected() > 0)
            }

            async fn lease_holder(&self, job: &coroner_model::JobId) -> Result<Option<$crate::leases::Lease>, $crate::StoreError> {
                let row = sqlx::query(&$crate::leases::holder($now))
                    .bind(job.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read the job's lease", job.as_str(), e))?;
                row.as_ref().map($crate::leases::lease_row).transpose()
            }
        }
    };
}

pub(crate) use impl_lease_store;
