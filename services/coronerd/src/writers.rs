//! Open index writers, least recently used first: each costs ~7 threads and its buffers, and
//! 800 job ids sent in two OTLP requests made 5,663 threads. Past `--max-open-jobs` writers, the
//! least recently used one is committed and closed; its job stays searchable and its next lines
//! open the writer again (`coroner_index::JobIndex::close_writer`).

use coroner_index::JobIndex;
use coroner_model::JobId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

pub struct Writers {
    max: usize,
    /// Job to (its index, when it last wrote): the writers that may be open.
    open: Mutex<HashMap<JobId, (Weak<JobIndex>, u64)>>,
    clock: std::sync::atomic::AtomicU64,
    metrics: Arc<crate::metrics::Metrics>,
}

impl Writers {
    pub fn new(max: usize, metrics: Arc<crate::metrics::Metrics>) -> Writers {
        Writers { max: max.max(1), open: Mutex::default(), clock: Default::default(), metrics }
    }

    /// `job` writes now (its writer is or will be open): closes the least recently used writers
    /// past the limit. Blocking (a commit): call from a blocking thread.
    pub fn used(&self, job: &JobId, index: &Arc<JobIndex>) {
        let now = self.clock.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let victims: Vec<(JobId, Arc<JobIndex>)> = {
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            open.insert(job.clone(), (Arc::downgrade(index), now));
            open.retain(|_, (w, _)| w.upgrade().is_some_and(|i| i.has_writer()));
            let excess = open.len().saturating_sub(self.max);
            let mut by_age: Vec<(u64, JobId)> = open.iter().filter(|(id, _)| *id != job).map(|(id, (_, t))| (*t, id.clone())).collect();
            by_age.sort();
            by_age.into_iter().take(excess).filter_map(|(_, id)| open.remove(&id).and_then(|(w, _)| w.upgrade()).map(|i| (id, i))).collect()
        };
        for (id, index) in victims {
            crate::limits::Limit::OpenJobs.count(&self.metrics);
            match index.close_writer() {
                Ok(()) => tracing::debug!(job = %id, "closed the index writer of the least recently used job"),
                Err(e) => tracing::warn!(job = %id, error = %e, "could not close an idle job's index writer"),
            }
        }
        let n = self.open.lock().map(|o| o.len()).unwrap_or(0);
        self.metrics.jobs_open.store(n as i64, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_past_the_limit_the_least_recently_used_writer_is_closed() {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
        let idx: Vec<Arc<JobIndex>> = dirs.iter().map(|d| Arc::new(JobIndex::open_or_create(d.path()).expect("open"))).collect();
        let ids: Vec<JobId> = ["a", "b", "c"].iter().map(|s| JobId::parse(s).expect("id")).collect();
        let w = Writers::new(2, Arc::default());
        w.used(&ids[0], &idx[0]);
        w.used(&ids[1], &idx[1]);
        w.used(&ids[0], &idx[0]);
        w.used(&ids[2], &idx[2]);
        assert!(idx[0].has_writer() && !idx[1].has_writer() && idx[2].has_writer(), "b was the least recently used");
        // b writes again: its writer reopens when it adds, and the oldest other one goes.
        idx[1].add(&[]).expect("reopen");
        w.used(&ids[1], &idx[1]);
        assert!(!idx[0].has_writer() && idx[1].has_writer() && idx[2].has_writer());
    }
}
