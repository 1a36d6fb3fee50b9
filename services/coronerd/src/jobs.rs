//! The registry of jobs this server holds in memory, opening (and recovering, `job/recovery.rs`)
//! a job on first use. The rest of the server reaches a job only through [`Jobs::get`] and the
//! job's methods.
//!
//! Ownership: a job is opened here only under this instance's lease (`ownership.rs`); when
//! another live instance holds it, [`Jobs::get`] answers [`ServiceError::Elsewhere`]. Several
//! instances share one data dir, so a new owner recovers a job exactly as a restarted server does.

use crate::error::ServiceError;
use crate::job::{Job, Shared};
use crate::metrics::Metrics;
use crate::ownership::{self, Claim, Fence, Instance};
use coroner_analysis::RuleSet;
use coroner_model::JobId;
use coroner_store::Metastore;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// What [`Jobs::remove`] deleted.
#[derive(Debug)]
pub struct Removed {
    pub verdict: String,
    pub lines: u64,
    /// The bytes its index folder held.
    pub index_bytes: u64,
    /// The contents its snapshots named (collected after, if no other job names them).
    pub snapshot_contents: Vec<String>,
}

pub struct Jobs {
    pub store: Arc<dyn Metastore>,
    pub rules: Arc<RuleSet>,
    pub metrics: Arc<Metrics>,
    pub limits: Arc<crate::limits::LimitsConfig>,
    pub shutdown: CancellationToken,
    /// What every job opened here shares.
    shared: Shared,
    open: Mutex<HashMap<JobId, Arc<Job>>>,
    me: Arc<Instance>,
    /// The lease of every job open here, and what stops its renewals.
    fences: std::sync::Mutex<HashMap<JobId, (Arc<Fence>, CancellationToken)>>,
    /// Stops the lease renewals, once the jobs are drained at shutdown.
    keepers: CancellationToken,
    /// How many jobs the store holds, counted once and then kept (`--max-jobs`).
    known_jobs: tokio::sync::Mutex<Option<u64>>,
}

impl Jobs {
    pub fn new(shared: Shared, shutdown: CancellationToken, me: Instance) -> Jobs {
        Jobs {
            store: shared.store.clone(),
            rules: shared.rules.clone(),
            metrics: shared.metrics.clone(),
            limits: shared.limits.clone(),
            shutdown,
            shared,
            open: Mutex::new(HashMap::new()),
            me: Arc::new(me),
            fences: std::sync::Mutex::new(HashMap::new()),
            keepers: CancellationToken::new(),
            known_jobs: tokio::sync::Mutex::new(None),
        }
    }

    /// Where a job's index lives.
    pub fn index_dir(&self, job: &JobId) -> std::path::PathBuf {
        self.shared.index_dir(job)
    }

    /// The lease under which a job open here is written.
    pub fn fence(&self, job: &JobId) -> Option<Arc<Fence>> {
        self.fences.lock().unwrap_or_else(|p| p.into_inner()).get(job).map(|(f, _)| f.clone())
    }

    /// The job, opened (and recovered) if needed. With `create` false, a job the store does not
    /// know is not found.
    pub async fn get(&self, job: &JobId, create: bool) -> Result<Arc<Job>, ServiceError> {
        let mut open = self.open.lock().await;
        if let Some(j) = open.get(job) {
            return Ok(j.clone());
        }
        if !create && self.store.get_job(job).await?.is_none() {
            return Err(ServiceError::NotFound(format!("no job {:?} on this server (list them with `coroner jobs`)", job.as_str())));
        }
        let fence = match ownership::claim(&self.store, &self.me, job).await? {
            Claim::Mine(f) => f,
            Claim::Elsewhere(owner) => return Err(ServiceError::Elsewhere(owner)),
        };
        let j = match Job::open(job, &self.shared).await {
            Ok(j) => j,
            Err(e) => {
                ownership::release(&self.store, &self.me, job, &fence).await;
                return Err(e);
            }
        };
        open.insert(job.clone(), j.clone());
        let stop = self.keepers.child_token();
        self.fences.lock().unwrap_or_else(|p| p.into_inner()).insert(job.clone(), (fence.clone(), stop.clone()));
        ownership::keep(self.store.clone(), self.me.clone(), job.clone(), fence.clone(), stop);
        tracing::info!(job = %job, epoch = fence.epoch(), "job opened here (this instance owns it)");
        Ok(j)
    }

    /// Refuses a job id the store does not hold yet once it holds `--max-jobs` (retention makes
    /// room); a job it holds is always admitted.
    pub async fn admit_new(&self, job: &JobId) -> Result<(), ServiceError> {
        let mut known = self.known_jobs.lock().await;
        if self.store.get_job(job).await?.is_some() {
            return Ok(());
        }
        let count = match *known {
            Some(n) => n,
            None => self.store.job_tally().await?.iter().map(|t| t.jobs).sum(),
        };
        if count >= self.limits.max_jobs {
            *known = Some(count);
            return Err(crate::limits::Limit::Jobs.refuse(
                &self.metrics,
                format!("this server holds {count} jobs, its limit (--max-jobs): job {job} was not created; delete old jobs (--retention) or raise the limit"),
            ));
        }
        *known = Some(count + 1);
        Ok(())
    }

    /// Deletes a job's rows (report, sessions, snapshot references) and its index, under this
    /// instance's lease so that no other instance opens it meanwhile. Refuses a running job
    /// unless `force`; a job another live instance owns answers [`ServiceError::Elsewhere`].
    /// Callers go through `crate::deletion`, which also collects the job's snapshot contents.
    pub async fn remove(&self, job: &JobId, force: bool) -> Result<Removed, ServiceError> {
        let row = self
            .store
            .get_job(job)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no job {:?} on this server (list them with `coroner jobs`)", job.as_str())))?;
        if row.verdict == coroner_store::VERDICT_RUNNING && !force {
            return Err(ServiceError::FailedPrecondition(format!(
                "job {job} is running (no report has ended it): wait until it ends, or delete it anyway with --force (agents still shipping would create it again)"
            )));
        }
        let borrowed = match self.fence(job) {
            Some(_) => None,
            None => match ownership::claim(&self.store, &self.me, job).await? {
                Claim::Mine(f) => Some(f),
                Claim::Elsewhere(owner) => return Err(ServiceError::Elsewhere(owner)),
            },
        };
        let named = self.store.snapshots(job).await?.into_iter().map(|s| s.sha256).collect();
        let deleted = self.store.delete_job(job).await;
        let index_bytes = match &deleted {
            Ok(_) => self.forget(job).await,
            Err(_) => Ok(0),
        };
        if let Some(fence) = borrowed {
            ownership::release(&self.store, &self.me, job, &fence).await;
        }
        deleted?;
        Ok(Removed { verdict: row.verdict, lines: row.lines, index_bytes: index_bytes?, snapshot_contents: named })
    }

    /// Closes a job the store no longer holds (deleted) and deletes its index; returns the bytes
    /// its index folder held.
    pub async fn forget(&self, job: &JobId) -> Result<u64, ServiceError> {
        if let Some(n) = self.known_jobs.lock().await.as_mut() {
            *n = n.saturating_sub(1);
        }
        let was_open = self.open.lock().await.remove(job);
        let lease = self.fences.lock().unwrap_or_else(|p| p.into_inner()).remove(job);
        if let Some((fence, stop)) = lease {
            stop.cancel();
            ownership::release(&self.store, &self.me, job, &fence).await;
        }
        let (dir, index_dir) = (self.shared.job_dir(job), self.shared.index_dir(job));
        tokio::task::spawn_blocking(move || {
            // Its writer's threads stop before the folder goes.
            if let Some(open) = was_open {
                if let Err(e) = open.index().close_writer() {
                    tracing::warn!(error = %e, "closing the deleted job's index writer failed; deleting its folder anyway");
                }
            }
            let bytes = coroner_index::folder_bytes(&index_dir);
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(ServiceError::Internal(format!("delete the index of a deleted job at {}: {e}", dir.display())))
                }
                _ => Ok(bytes),
            }
        })
        .await?
    }

    pub async fn open_jobs(&self) -> Vec<Arc<Job>> {
        self.open.lock().await.values().cloned().collect()
    }

    /// Lets every job finish its queued commits, then gives up their leases so that another
    /// instance takes them over at once.
    pub async fn shutdown(&self) {
        for job in self.open_jobs().await {
            job.drain().await;
        }
        self.keepers.cancel();
        let fences: Vec<_> = self.fences.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
        for (job, (fence, _)) in fences {
            ownership::release(&self.store, &self.me, &job, &fence).await;
        }
    }
}
