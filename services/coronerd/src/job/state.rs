//! A job's evidence on the server: its pipeline behind one lock, the evidence version, and the
//! signal that the evidence changed.
//!
//! Contract:
//! - The only ways to change the pipeline are [`Evidence::change`] and [`Evidence::change_routine`],
//!   which bump the version under the same lock and then wake the reporter. So "a report stamped
//!   with version v holds every change made before v was read" is kept here, once, not by each
//!   caller.
//! - A change is news unless it only added routine input (progress and telemetry lines:
//!   [`JobPipeline::push_line`] says which; clock samples); [`Evidence::news_version`] is the version of the last
//!   change that was news, so the reporter can let routine lines wait for a later report.
//! - A report is computed from a [`ReportInput`] copied under the lock ([`Evidence::report_input`]);
//!   the analysis itself runs after the lock is released, so lines are never kept waiting by it.
//! - Heartbeats feed the live monitor ([`Evidence::push_liveness`]) without changing the evidence
//!   (no version bump): the ticker decides when what the monitor sees becomes a finding.
//!
//! Blocking: every method but [`Evidence::changed`] takes the lock and may parse or copy a whole
//! job's evidence; call them from blocking threads.

use coroner_analysis::live::LiveMonitor;
use coroner_analysis::JobEvidence;
use coroner_model::Rank;
use coroner_pipeline::{JobPipeline, ReportInput};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

pub struct Evidence {
    pipeline: Mutex<JobPipeline>,
    /// Bumped by every change of the pipeline; a published report carries the version it saw.
    version: AtomicU64,
    /// The version of the last change that was news (more than routine lines).
    news: AtomicU64,
    changed: Notify,
}

/// One heartbeat of a rank's agent, as the live monitor takes it.
#[derive(Debug, Clone, Copy)]
pub struct Liveness {
    pub rank: Rank,
    pub at_ns: i64,
    pub cpu_ns: Option<u64>,
    pub io_bytes: Option<u64>,
    pub gpu_util_pct: Option<u32>,
}

impl Evidence {
    /// Evidence over a pipeline already holding what was recovered: version 1, marked changed so
    /// that the first report is computed at once.
    pub fn new(pipeline: JobPipeline) -> Evidence {
        let evidence = Evidence { pipeline: Mutex::new(pipeline), version: AtomicU64::new(1), news: AtomicU64::new(1), changed: Notify::new() };
        evidence.changed.notify_one();
        evidence
    }

    /// The pipeline. A panic while it was held (the pipeline never panics on input) leaves it as
    /// it was: the evidence stays readable rather than the job dead.
    fn lock(&self) -> MutexGuard<'_, JobPipeline> {
        self.pipeline.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the evidence; the change is news.
    pub fn change<R>(&self, f: impl FnOnce(&mut JobPipeline) -> R) -> R {
        self.change_as(|p| (f(p), true))
    }

    /// Changes the evidence with routine input (lines, clock samples); `f` answers whether any of
    /// it was news after all (for lines, [`JobPipeline::push_line`]'s answer).
    pub fn change_routine(&self, f: impl FnOnce(&mut JobPipeline) -> bool) {
        self.change_as(|p| ((), f(p)));
    }

    /// The one place the version is bumped.
    fn change_as<R>(&self, f: impl FnOnce(&mut JobPipeline) -> (R, bool)) -> R {
        let out = {
            let mut p = self.lock();
            let (out, news) = f(&mut p);
            let version = self.version.fetch_add(1, Ordering::SeqCst) + 1;
            if news {
                self.news.store(version, Ordering::SeqCst);
            }
            out
        };
        self.changed.notify_one();
        out
    }

    /// Reads the pipeline (whether it finished, what the live monitor sees) without changing it.
    pub fn read<R>(&self, f: impl FnOnce(&JobPipeline) -> R) -> R {
        f(&self.lock())
    }

    /// A copy of the evidence as of now, for views that read events (search filters, timeline).
    pub fn copy(&self) -> JobEvidence {
        self.lock().evidence()
    }

    /// What a report as of now is computed from, and the version it holds.
    pub fn report_input(&self) -> (ReportInput, u64) {
        let p = self.lock();
        (p.report_input(), self.version.load(Ordering::SeqCst))
    }

    /// Feeds a heartbeat to the live monitor; answers when the rank is a shown suspect (the
    /// finding's `raised_at`, which names the suspicion).
    pub fn push_liveness(&self, h: Liveness) -> Option<String> {
        let mut p = self.lock();
        if let Some(m) = p.live_mut() {
            push(m, h);
        }
        p.live_findings().iter().find(|f| f.rank == h.rank).map(|f| f.raised_at.clone())
    }

    /// The evidence version now.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// The version of the last change that was news: a report that saw this version or a later
    /// one is behind the evidence by routine lines at most.
    pub fn news_version(&self) -> u64 {
        self.news.load(Ordering::SeqCst)
    }

    /// Waits until the evidence changed since the last wait returned.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

fn push(m: &mut LiveMonitor, h: Liveness) {
    m.push_liveness(h.rank, h.at_ns, h.cpu_ns, h.io_bytes, h.gpu_util_pct);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_bumps_the_version_once_and_reads_do_not() {
        let e = Evidence::new(JobPipeline::new("j"));
        assert_eq!(e.version(), 1);
        e.change(|p| p.add_note("a note"));
        e.change(|p| p.set_finished(true));
        assert_eq!(e.version(), 3);
        assert!(e.read(|p| p.is_finished()));
        let (input, seen) = e.report_input();
        assert_eq!(seen, 3);
        assert!(input.evidence.notes.iter().any(|n| n == "a note"));
        assert_eq!(e.version(), 3, "reading and copying change nothing");
    }

    #[test]
    fn routine_lines_bump_the_version_but_not_the_news() {
        let e = Evidence::new(JobPipeline::new("j"));
        e.change_routine(|_| false);
        assert_eq!((e.version(), e.news_version()), (2, 1));
        e.change_routine(|_| true);
        assert_eq!((e.version(), e.news_version()), (3, 3));
        e.change(|p| p.add_note("n"));
        assert_eq!((e.version(), e.news_version()), (4, 4), "any other change is news");
    }

    #[test]
    fn a_heartbeat_feeds_the_monitor_without_changing_the_evidence() {
        let mut p = JobPipeline::new("j");
        p.enable_live(Default::default());
        let e = Evidence::new(p);
        let h = Liveness { rank: Rank(0), at_ns: 1, cpu_ns: Some(5), io_bytes: None, gpu_util_pct: None };
        assert_eq!(e.push_liveness(h), None, "no suspect shown yet");
        assert_eq!(e.version(), 1);
    }

    #[tokio::test]
    async fn a_new_evidence_and_each_change_wake_the_waiter() {
        let e = Evidence::new(JobPipeline::new("j"));
        tokio::time::timeout(std::time::Duration::from_secs(1), e.changed()).await.expect("the first report is due at once");
        e.change(|p| p.add_note("n"));
        tokio::time::timeout(std::time::Duration::from_secs(1), e.changed()).await.expect("a change wakes the reporter");
    }
}
