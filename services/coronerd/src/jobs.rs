//! The registry of jobs this server holds in memory, opening (and recovering, `job/recovery.rs`)
//! a job on first use. The rest of the server reaches a job only through [`Jobs::get`] and the
//! job's methods, and the store's job catalogue only through the methods below: the adapters
//! (`grpc/`, `http/`, `views/`) never hold the store, the rules or the shutdown token.
//!
//! Ownership: a job is opened here only under this instance's lease (`ownership.rs`); when
//! another live instance holds it, [`Jobs::get`] answers [`ServiceError::Elsewhere`]. Several
//! instances share one data dir, so a new owner recovers a job exactly as a restarted server does.

use crate::arrivals::{ExitWriter, RecentTouches, SessionWriter};
use crate::error::ServiceError;
use crate::job::{Job, Shared};
use crate::metrics::Metrics;
use crate::ownership::{self, Claim, Fence, Instance};
use coroner_analysis::RuleSet;
use coroner_model::{JobId, Nanos, ProcessEnd, Report, Suspect};
use coroner_store::{JobFilter, JobRow, Metastore, SessionRecord};
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
    store: Arc<dyn Metastore>,
    rules: Arc<RuleSet>,
    metrics: Arc<Metrics>,
    limits: Arc<crate::limits::LimitsConfig>,
    /// Cancelled when the server stops (ends the watch streams).
    stopping: CancellationToken,
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
    /// Session rows, written in groups (`arrivals.rs`).
    sessions: SessionWriter,
    /// Process ends, written in groups (`arrivals.rs`).
    exits: ExitWriter,
    /// Held while a writer's job that is not open here is admitted and opened (`heard_from`).
    admitting: Mutex<()>,
    /// Job rows touched lately (`arrivals.rs`): a burst of agents writes each job row twice a second at most.
    touches: RecentTouches,
}

impl Jobs {
    pub fn new(shared: Shared, shutdown: CancellationToken, me: Instance) -> Jobs {
        let sessions = SessionWriter::new(shared.store.clone());
        let exits = ExitWriter::new(shared.store.clone());
        Jobs {
            store: shared.store.clone(),
            rules: shared.rules.clone(),
            metrics: shared.metrics.clone(),
            limits: shared.limits.clone(),
            stopping: shutdown,
            shared,
            open: Mutex::new(HashMap::new()),
            me: Arc::new(me),
            fences: std::sync::Mutex::new(HashMap::new()),
            keepers: CancellationToken::new(),
            known_jobs: tokio::sync::Mutex::new(None),
            sessions,
            exits,
            admitting: Mutex::new(()),
            touches: RecentTouches::default(),
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

    /// A writer (an agent's session, an OTLP export) speaks for `job` at `now`: a new job is
    /// admitted against `--max-jobs`, the store records when it was last heard from (and the
    /// world size believed, if any), and it is opened here.
    pub async fn heard_from(&self, job: &JobId, world: Option<u32>, now: Nanos) -> Result<Arc<Job>, ServiceError> {
        // A job open here is in the store: only a new one is counted against `--max-jobs` (and
        // reading its row, a 16,384-rank report among it, per arriving agent is what a burst
        // cannot afford).
        // Bound first, so the map's lock is not held across the touch.
        let open = self.open.lock().await.get(job).cloned();
        if let Some(open) = open {
            self.touch(job, world, now).await?;
            return Ok(open);
        }
        // The first of a job's agents opens it; the thousands arriving meanwhile wait for it here
        // instead of each reading and writing the job's row (which starved the store's pool,
        // and with it the lease renewals, when 16,384 agents arrived at once).
        let _admitting = self.admitting.lock().await;
        if !self.open.lock().await.contains_key(job) {
            self.admit_new(job).await?;
        }
        self.touch(job, world, now).await?;
        self.get(job, true).await
    }

    /// A job a reader waits on, maybe before its agents start: created empty when the store does
    /// not hold it, counted against `--max-jobs` like any other (a read token cannot open
    /// unbounded jobs); a job it holds is not touched (watching is not activity).
    pub async fn watched(&self, job: &JobId) -> Result<Arc<Job>, ServiceError> {
        if self.store.get_job(job).await?.is_none() {
            self.admit_new(job).await?;
            self.touch(job, None, coroner_model::now_ns()).await?;
        }
        self.get(job, true).await
    }

    /// Records that `job` was heard from at `now`, with the world size believed, if any.
    pub async fn touch(&self, job: &JobId, world: Option<u32>, now: Nanos) -> Result<(), ServiceError> {
        if !self.touches.to_write(job, world, now) {
            return Ok(());
        }
        if let Err(e) = self.store.touch_job(job, world, now).await {
            self.touches.forget(job);
            return Err(e.into());
        }
        Ok(())
    }

    /// A claimed world size, believed in proportion to the ranks heard from (`limits.rs`).
    pub fn believed_world_size(&self, claimed: u32, speakers: usize) -> u32 {
        crate::limits::believed_world_size(claimed, speakers, self.limits.world_size_slack)
    }

    /// Records an agent's session.
    pub async fn open_session(&self, session: SessionRecord) -> Result<(), ServiceError> {
        self.sessions.write(session).await
    }

    /// Records how a rank's process ended.
    pub async fn record_end(&self, job: &JobId, end: &ProcessEnd) -> Result<(), ServiceError> {
        self.exits.write((job.clone(), end.clone())).await
    }

    /// The jobs the store holds, filtered.
    pub async fn list(&self, filter: &JobFilter) -> Result<Vec<JobRow>, ServiceError> {
        Ok(self.store.list_jobs(filter).await?)
    }

    /// How many sessions of `job` spoke for a rank.
    pub async fn ranked_sessions(&self, job: &JobId) -> Result<u32, ServiceError> {
        Ok(self.store.sessions(job).await?.iter().filter(|s| s.rank.is_some()).count() as u32)
    }

    /// A failed report with what past failures say of it (`incidents.rs`).
    pub async fn with_history(&self, report: Arc<Report>) -> Arc<Report> {
        crate::incidents::with_history(&self.store, report).await
    }

    /// The hosts past failures point at (`incidents.rs`).
    pub async fn suspects(&self, since_ns: Option<Nanos>, all: bool) -> Result<Vec<Suspect>, ServiceError> {
        Ok(crate::incidents::suspects(&self.store, since_ns, all).await?)
    }

    /// A job's row (its stored report among it), if the job is known.
    pub async fn row(&self, job: &JobId) -> Result<Option<JobRow>, ServiceError> {
        Ok(self.store.get_job(job).await?)
    }

    /// The notification delivery log, newest first (docs/NOTIFY.md).
    pub async fn deliveries(&self, f: &coroner_store::DeliveryFilter) -> Result<Vec<coroner_store::Delivery>, ServiceError> {
        Ok(self.store.deliveries(f).await?)
    }

    /// The metadata store, for the storage services that delete and collect (`deletion.rs`,
    /// `retention/`, `snapshots/gc.rs`, a snapshot upload's reference); the adapters use the
    /// narrow methods above.
    pub(crate) fn store(&self) -> &Arc<dyn Metastore> {
        &self.store
    }

    /// The server's metrics, for the same storage services.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// How many jobs the store holds, per verdict and failure class (`/metrics`).
    pub async fn tally(&self) -> Result<Vec<coroner_store::TallyRow>, ServiceError> {
        Ok(self.store.job_tally().await?)
    }

    /// The rules every report is analysed with.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.clone()
    }

    /// Cancelled when the server stops: streams that would outlive it end on it.
    pub fn stopping(&self) -> CancellationToken {
        self.stopping.clone()
    }

    /// Refuses a job id the store does not hold yet once it holds `--max-jobs` (retention makes
    /// room); a job it holds is always admitted.
    async fn admit_new(&self, job: &JobId) -> Result<(), ServiceError> {
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
        self.touches.forget(job);
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

    async fn open_jobs(&self) -> Vec<Arc<Job>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn jobs(dir: &std::path::Path, max_jobs: u64) -> Jobs {
        let mut shared = crate::job::tests::shared(dir, Default::default()).await;
        shared.limits = Arc::new(crate::limits::LimitsConfig { max_jobs, ..Default::default() });
        let claimant = coroner_store::Claimant { owner: "test".into(), grpc_address: "http://127.0.0.1:1".into(), http_address: "http://127.0.0.1:2".into() };
        Jobs::new(shared, CancellationToken::new(), Instance { claimant, ttl: Duration::from_secs(10) })
    }

    async fn last_seen(jobs: &Jobs, id: &JobId) -> Option<i64> {
        jobs.list(&JobFilter::default()).await.expect("list the jobs").into_iter().find(|r| &r.job_id == id).map(|r| r.last_seen_ns)
    }

    #[tokio::test]
    async fn a_writer_creates_and_touches_a_job_and_a_watcher_only_creates_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let jobs = jobs(dir.path(), 10).await;
        let (written, watched) = (JobId::parse("written").expect("an id"), JobId::parse("watched").expect("an id"));
        jobs.heard_from(&written, Some(2), 1_000).await.expect("heard from");
        jobs.heard_from(&written, None, 2_000).await.expect("heard from again");
        assert_eq!(last_seen(&jobs, &written).await, Some(1_000), "a touch within TOUCH_EVERY of the last is not written");
        let later = 1_000 + crate::arrivals::TOUCH_EVERY.as_nanos() as i64;
        jobs.heard_from(&written, None, later).await.expect("heard from later");
        assert_eq!(last_seen(&jobs, &written).await, Some(later));
        jobs.watched(&written).await.expect("watched");
        assert_eq!(last_seen(&jobs, &written).await, Some(later), "watching a job is not activity");
        assert_eq!(last_seen(&jobs, &watched).await, None);
        jobs.watched(&watched).await.expect("a job watched before its agents start");
        assert!(last_seen(&jobs, &watched).await.is_some(), "created empty");
        jobs.shutdown().await;
    }

    #[tokio::test]
    async fn past_max_jobs_a_new_job_is_refused_and_a_known_one_admitted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let jobs = jobs(dir.path(), 1).await;
        let (first, second) = (JobId::parse("first").expect("an id"), JobId::parse("second").expect("an id"));
        jobs.heard_from(&first, None, 1_000).await.expect("the first job");
        let refused = jobs.heard_from(&second, None, 1_000).await.err();
        assert!(matches!(&refused, Some(ServiceError::ResourceExhausted(m)) if m.contains("--max-jobs")), "{refused:?}");
        assert!(matches!(jobs.watched(&second).await, Err(ServiceError::ResourceExhausted(_))), "a reader cannot open jobs past the limit either");
        jobs.heard_from(&first, None, 2_000).await.expect("a known job is always admitted");
        assert_eq!(jobs.list(&JobFilter::default()).await.expect("list").len(), 1);
        jobs.shutdown().await;
    }
}
