//! Where searches run, and for how long: one red-team query must not pin a core, and one job's
//! searches must not hold every other job's up.
//!
//! - **Parse budget** ([`Searches::check`]): a query is checked (length, nesting, clauses) before
//!   anything else is done for it, and refused with `INVALID_ARGUMENT` in microseconds.
//! - **Run budget**: each search gets a deadline (`--max-query-time`) and a number of matching
//!   lines (`--max-query-lines`), checked by the index as it goes, and a stop flag raised when the
//!   caller's future is dropped (the client went away, its gRPC deadline passed) or the server
//!   stops. So no search outlives its caller by more than a few thousand matches, and shutdown
//!   never waits on one.
//! - **Fair slots**: a search first takes one of its job's slots (`--max-searches-per-job`), then
//!   one of the server's (`--max-searches`, first come first served). A job's extra searches wait
//!   behind its own, never in front of another job's. A search runs on its own blocking thread; it
//!   spreads over the shared search threads only when it is the only one running (then it has
//!   them to itself), so a cheap search never queues behind an expensive one's segments.

use crate::error::ServiceError;
use crate::limits::{Limit, LimitsConfig};
use crate::metrics::Metrics;
use coroner_index::{Budget, IndexError, QueryLimits};
use coroner_model::JobId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub struct Searches {
    limits: QueryLimits,
    max_time: Duration,
    max_lines: u64,
    per_job: usize,
    slots: Arc<Semaphore>,
    jobs: Mutex<HashMap<JobId, Arc<Semaphore>>>,
    /// Raised at shutdown: every running search stops at its next check.
    stopping: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
}

/// Raises a search's stop flag when its caller's future is dropped before it finished.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Searches {
    pub fn new(config: &LimitsConfig, metrics: Arc<Metrics>, shutdown: CancellationToken) -> Arc<Searches> {
        let stopping = Arc::new(AtomicBool::new(false));
        let flag = stopping.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            flag.store(true, Ordering::Relaxed);
        });
        Arc::new(Searches {
            limits: config.query_limits(),
            max_time: config.max_query_time,
            max_lines: config.max_query_lines,
            per_job: config.max_searches_per_job.max(1),
            slots: Arc::new(Semaphore::new(config.max_searches.max(1))),
            jobs: Mutex::default(),
            stopping,
            metrics,
        })
    }

    /// How many matching lines one search may visit (`--max-query-lines`): also what a query
    /// answered in several searches (the Loki API's filtered pages) may scan in all.
    pub fn max_lines(&self) -> u64 {
        self.max_lines
    }

    /// The parse budget: refuses a query the grammar could spend long on, before anything else.
    pub fn check(&self, query: &str) -> Result<(), ServiceError> {
        coroner_index::check_query(query, &self.limits).map_err(|r| {
            Limit::of_query(&r).count(&self.metrics);
            ServiceError::InvalidArgument(r.message)
        })
    }

    fn job_slots(&self, job: &JobId) -> Arc<Semaphore> {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        // Forget the slots of jobs nobody searches now (the map stays as small as the searches).
        if jobs.len() > 64 {
            let per_job = self.per_job;
            jobs.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < per_job);
        }
        jobs.entry(job.clone()).or_insert_with(|| Arc::new(Semaphore::new(self.per_job))).clone()
    }

    /// Runs `search` (blocking index work) for `job` within a budget, once a slot is free. Waits
    /// at most `--max-query-time` for the slot.
    pub async fn run<T: Send + 'static>(
        &self,
        job: &JobId,
        search: impl FnOnce(&Budget, bool) -> Result<T, IndexError> + Send + 'static,
    ) -> Result<T, ServiceError> {
        let busy = |what: &str| {
            Limit::Searches
                .refuse(&self.metrics, format!("{what} searches are running and none finished within {:.0} s; retry later", self.max_time.as_secs_f64()))
        };
        let job_slots = self.job_slots(job);
        let wait = tokio::time::timeout(self.max_time, async {
            let mine = job_slots.acquire_owned().await;
            let any = self.slots.clone().acquire_owned().await;
            (mine, any)
        });
        let (Ok(mine), Ok(any)) = wait.await.map_err(|_| busy(&format!("job {job}'s or the server's")))? else {
            return Err(ServiceError::Unavailable("the server is stopping".into()));
        };
        let stop = Arc::new(AtomicBool::new(self.stopping.load(Ordering::Relaxed)));
        let _stop_on_drop = StopOnDrop(stop.clone());
        let stopping = self.stopping.clone();
        let budget = Budget::new(self.limits, Some(self.max_time), self.max_lines, stop.clone());
        // The shared search threads only for a search that has them to itself.
        let alone = self.metrics.searches_running.fetch_add(1, Ordering::Relaxed) == 0;
        let metrics = self.metrics.clone();
        let result = tokio::task::spawn_blocking(move || {
            let _slots = (mine, any);
            // Shutdown that began while this one waited.
            if stopping.load(Ordering::Relaxed) {
                stop.store(true, Ordering::Relaxed);
            }
            let r = search(&budget, alone);
            metrics.searches_running.fetch_sub(1, Ordering::Relaxed);
            r
        })
        .await?;
        result.map_err(|e| match e {
            IndexError::OverBudget(m) => {
                let limit = if m.contains("out of time") { Limit::QueryTime } else { Limit::QueryLines };
                limit.refuse(&self.metrics, m)
            }
            IndexError::QueryRefused(r) => {
                Limit::of_query(&r).count(&self.metrics);
                ServiceError::InvalidArgument(r.message)
            }
            other => other.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn searches(per_job: usize, slots: usize, time: Duration) -> Arc<Searches> {
        let config = LimitsConfig { max_searches: slots, max_searches_per_job: per_job, max_query_time: time, ..LimitsConfig::default() };
        Searches::new(&config, Arc::default(), CancellationToken::new())
    }

    fn job(s: &str) -> JobId {
        JobId::parse(s).expect("job id")
    }

    /// A search that takes 300 ms.
    fn spin(_: &Budget, _alone: bool) -> Result<(), IndexError> {
        std::thread::sleep(Duration::from_millis(300));
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rule_a_job_holds_at_most_its_share_of_the_slots() {
        let s = searches(1, 4, Duration::from_secs(5));
        let a = job("a");
        let (s1, a1) = (s.clone(), a.clone());
        let first = tokio::spawn(async move { s1.run(&a1, spin).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Job b is not behind job a's running search.
        let started = std::time::Instant::now();
        s.run(&job("b"), |_, _| Ok(())).await.expect("b runs");
        assert!(started.elapsed() < Duration::from_millis(200), "{:?}", started.elapsed());
        // Job a's second search waits for its first.
        let started = std::time::Instant::now();
        s.run(&a, |_, _| Ok(())).await.expect("a's second runs");
        assert!(started.elapsed() >= Duration::from_millis(150), "{:?}", started.elapsed());
        first.await.expect("join").expect("first");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rule_a_search_waits_for_a_slot_at_most_the_query_time() {
        let s = searches(1, 1, Duration::from_millis(100));
        let s1 = s.clone();
        let busy = tokio::spawn(async move { s1.run(&job("a"), spin).await });
        tokio::time::sleep(Duration::from_millis(30)).await;
        let e = s.run(&job("b"), |_, _| Ok(())).await.unwrap_err();
        assert!(matches!(e, ServiceError::ResourceExhausted(ref m) if m.contains("retry later")), "{e}");
        assert_eq!(s.metrics.refused(Limit::Searches), 1);
        busy.await.expect("join").expect("busy");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rule_a_dropped_caller_stops_its_search() {
        let s = searches(2, 2, Duration::from_secs(30));
        let (tx, rx) = std::sync::mpsc::channel();
        let s1 = s.clone();
        let caller = tokio::spawn(async move {
            s1.run(&job("a"), move |b, _| {
                let started = std::time::Instant::now();
                while started.elapsed() < Duration::from_secs(10) {
                    if b.stopped() {
                        let _ = tx.send(true);
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                let _ = tx.send(false);
                Ok(())
            })
            .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        caller.abort();
        let stopped = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(15))).await.expect("join");
        assert_eq!(stopped, Ok(true), "the search did not see its caller go");
    }

    #[test]
    fn rule_the_parse_budget_is_checked_first_and_counted() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let s = rt.block_on(async { searches(2, 2, Duration::from_secs(1)) });
        let e = s.check(&format!("{}foo{}", "(".repeat(100), ")".repeat(100))).unwrap_err();
        assert!(matches!(e, ServiceError::InvalidArgument(ref m) if m.contains("100 deep")), "{e}");
        assert_eq!(s.metrics.refused(Limit::QueryDepth), 1);
        assert!(s.check("NCCL WARN").is_ok());
    }
}
