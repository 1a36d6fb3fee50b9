//! Which coronerd instance owns a job: a lease in the metastore (`job_leases`), taken when the
//! job is first opened here, renewed every third of its TTL, released at shutdown.
//!
//! - Another instance's live lease means the job is [`Claim::Elsewhere`]: agents are redirected
//!   there and queries proxied (see `proxy.rs`).
//! - The owner writes a job (index commits) only while its [`Fence`] holds: until the TTL
//!   counted from the moment it last *asked* for a renewal, minus a margin, so it stops before the
//!   database could consider the lease expired, whatever the database's latency.
//! - A renewal that finds the lease gone re-takes it when nobody held it in between (the epoch
//!   moved by exactly one: a pause or a slow database, not a takeover). When another instance
//!   took it, this process exits: the job's index writer and in-memory state are stale, and
//!   exiting releases the index lock for the new owner; the other jobs it owned are taken over
//!   like after a crash (agents replay what was not acknowledged).

use coroner_model::JobId;
use coroner_store::{Claimant, LeaseGrant, Metastore, StoreError};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What went wrong with a lease; `error.rs` maps it to the callers' statuses.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The fence's deadline passed: writes stop until a renewal extends it.
    #[error("this coronerd's lease on job {0} lapsed (it could not renew it in time); reconnect")]
    Lapsed(JobId),
    #[error("the job's lease: {0}")]
    Store(#[from] StoreError),
}

/// This instance: its id, where it serves, and the lease TTL it asks for.
#[derive(Debug, Clone)]
pub struct Instance {
    pub claimant: Claimant,
    pub ttl: Duration,
}

/// Where the owner of a job serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub grpc: String,
    pub http: String,
}

/// Permission to write one job, valid until a local deadline.
#[derive(Debug)]
pub struct Fence {
    epoch: AtomicI64,
    valid_until: Mutex<Instant>,
}

impl Fence {
    fn new(epoch: i64, asked: Instant, ttl: Duration) -> Fence {
        Fence { epoch: AtomicI64::new(epoch), valid_until: Mutex::new(deadline(asked, ttl)) }
    }

    pub fn epoch(&self) -> i64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Whether this instance may still write the job.
    pub fn holds(&self) -> bool {
        Instant::now() < *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Refuses a write once the lease may have lapsed; the agent reconnects and is sent to the owner.
    pub fn check(&self, job: &JobId) -> Result<(), LeaseError> {
        if self.holds() {
            Ok(())
        } else {
            Err(LeaseError::Lapsed(job.clone()))
        }
    }

    fn extend(&self, asked: Instant, ttl: Duration) {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner()) = deadline(asked, ttl);
    }
}

/// A write is allowed until the TTL minus a tenth (clock rate drift, scheduling) after asking.
fn deadline(asked: Instant, ttl: Duration) -> Instant {
    asked + ttl - ttl / 10
}

pub enum Claim {
    Mine(Arc<Fence>),
    Elsewhere(Owner),
}

/// Takes (or confirms) this instance's lease on a job.
pub async fn claim(store: &Arc<dyn Metastore>, me: &Instance, job: &JobId) -> Result<Claim, LeaseError> {
    let asked = Instant::now();
    match store.acquire_lease(job, &me.claimant, me.ttl).await? {
        LeaseGrant::Granted(l) => Ok(Claim::Mine(Arc::new(Fence::new(l.epoch, asked, me.ttl)))),
        LeaseGrant::HeldBy(l) => Ok(Claim::Elsewhere(Owner { grpc: l.grpc_address, http: l.http_address })),
    }
}

/// Gives the lease up (at shutdown, or when the job could not be opened here).
pub async fn release(store: &Arc<dyn Metastore>, me: &Instance, job: &JobId, fence: &Fence) {
    if let Err(e) = store.release_lease(job, &me.claimant.owner, fence.epoch()).await {
        tracing::warn!(job = %job, error = %e, "could not release the job's lease; it expires on its own");
    }
}

/// Renews the lease every third of the TTL until `stop` fires.
pub fn keep(store: Arc<dyn Metastore>, me: Arc<Instance>, job: JobId, fence: Arc<Fence>, stop: CancellationToken) {
    tokio::spawn(async move {
        let every = me.ttl / 3;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let asked = Instant::now();
            match store.renew_lease(&job, &me.claimant.owner, fence.epoch(), me.ttl).await {
                Ok(Some(_)) => fence.extend(asked, me.ttl),
                Ok(None) => retake(&store, &me, &job, &fence, asked).await,
                // The fence lapses at its deadline on its own: writes stop, renewals go on.
                Err(e) => tracing::warn!(job = %job, error = %e, "could not renew the job's lease; retrying"),
            }
        }
    });
}

async fn retake(store: &Arc<dyn Metastore>, me: &Instance, job: &JobId, fence: &Fence, asked: Instant) {
    let was = fence.epoch();
    match store.acquire_lease(job, &me.claimant, me.ttl).await {
        Ok(LeaseGrant::Granted(l)) if l.epoch == was + 1 => {
            tracing::warn!(job = %job, "the job's lease had lapsed and nobody took it; taken again");
            fence.epoch.store(l.epoch, Ordering::SeqCst);
            fence.extend(asked, me.ttl);
        }
        Ok(LeaseGrant::Granted(_)) | Ok(LeaseGrant::HeldBy(_)) => {
            tracing::error!(
                job = %job,
                "another coronerd took over this job while this one could not renew its lease; \
                 exiting so that the new owner can open the job's index (agents replay what was not acknowledged)"
            );
            std::process::exit(75);
        }
        Err(e) => tracing::warn!(job = %job, error = %e, "could not re-take the job's lease; retrying"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_holds_until_its_deadline_and_is_extended_by_a_renewal() {
        let ttl = Duration::from_millis(100);
        let f = Fence::new(3, Instant::now(), ttl);
        assert!(f.holds());
        assert!(f.check(&JobId::parse("j").unwrap()).is_ok());
        std::thread::sleep(Duration::from_millis(95));
        assert!(!f.holds(), "the margin stops writes before the database's expiry");
        let err = f.check(&JobId::parse("j").unwrap()).unwrap_err();
        assert!(err.to_string().contains("lease on job j lapsed"), "{err}");
        f.extend(Instant::now(), ttl);
        assert!(f.holds());
        assert_eq!(f.epoch(), 3);
    }
}
