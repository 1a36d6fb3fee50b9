//! A job's reports: the reporter task, which recomputes the report when the evidence changed (at
//! most every [`REPORT_DEBOUNCE`], and, when the change was only routine lines, no sooner than
//! [`routine_spacing`] after the last), saves it, records the failure history, publishes it to
//! watchers and tells the notifier and the alert metrics when the job's standing (verdict,
//! culprit) changed; and [`Published`], the last report out, which readers are served from.
//!
//! Contract:
//! - A report is computed from a copy of the evidence taken under the job's lock
//!   ([`Evidence::report_input`]); the analysis runs after the lock is released, on a blocking
//!   thread, so committed lines are published into the evidence while a report is computed.
//! - A report is published with the evidence version it saw and never replaces one that saw a
//!   newer version; a reader asking for the current report gets the published one only if no
//!   change came after it (readers never see a report older than what was acknowledged to them).

use super::state::Evidence;
use crate::error::ServiceError;
use crate::incidents::Recorder;
use crate::metrics::Metrics;
use crate::notify::{self, Notifier, Standing};
use coroner_analysis::RuleSet;
use coroner_model::{now_ns, JobId, Report, Verdict};
use coroner_pipeline::ReportInput;
use coroner_store::Metastore;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The reporter waits this long after a change, so a burst of batches makes one report.
pub const REPORT_DEBOUNCE: Duration = Duration::from_millis(50);

/// How long the reporter waits after a report that took `took` before it computes the next (a
/// reader asking for the current report meanwhile gets one computed for it): reports take at
/// most a fifth of the time, and a small job's, a few milliseconds, are not held back.
fn report_spacing(took: Duration) -> Duration {
    (took * 4).saturating_sub(REPORT_DEBOUNCE)
}

/// How long routine lines alone (progress, telemetry: `Evidence::news_version`) wait for the next
/// report after one that took `took`: such reports take at most a twentieth of the time. A small
/// job's, a few milliseconds, still follow within a tenth of a second; a 16,384-rank job's, about
/// a second on two cores, every twenty seconds, while news (an error, an exit, a new rank) waits
/// only for [`report_spacing`].
fn routine_spacing(took: Duration) -> Duration {
    took * 19
}

/// The last report published, and the evidence version it saw.
pub struct Published {
    report: watch::Sender<Option<Arc<Report>>>,
    version: AtomicU64,
}

impl Published {
    pub fn new() -> Published {
        Published { report: watch::channel(None).0, version: AtomicU64::new(0) }
    }

    /// The published report, if it saw evidence version `wanted` or a later one.
    pub fn as_of(&self, wanted: u64) -> Option<Arc<Report>> {
        (self.version.load(Ordering::SeqCst) >= wanted).then(|| self.report.borrow().clone()).flatten()
    }

    /// The last report published, whatever evidence came since.
    pub fn latest(&self) -> Option<Arc<Report>> {
        self.report.borrow().clone()
    }

    /// Publishes a report computed at evidence version `seen`, unless a newer one is out;
    /// watchers hear of it only when it differs from the last one.
    pub fn publish(&self, report: Arc<Report>, seen: u64) {
        if self.version.fetch_max(seen, Ordering::SeqCst) > seen {
            return;
        }
        let changed = self.report.borrow().as_deref() != Some(&*report);
        if changed {
            self.report.send_replace(Some(report));
        }
    }

    pub fn watch(&self) -> watch::Receiver<Option<Arc<Report>>> {
        self.report.subscribe()
    }
}

/// A report over the evidence as of now, the input it was computed from, and the version it saw.
pub struct Computed {
    pub report: Report,
    pub input: Arc<ReportInput>,
    pub seen: u64,
}

/// Copies the evidence under its lock, then analyzes the copy without it (on a blocking thread).
pub async fn compute(evidence: &Arc<Evidence>, rules: &Arc<RuleSet>) -> Result<Computed, ServiceError> {
    let (evidence, rules) = (evidence.clone(), rules.clone());
    let computed = tokio::task::spawn_blocking(move || {
        let (input, seen) = evidence.report_input();
        let report = input.report(&rules);
        Computed { report, input: Arc::new(input), seen }
    });
    Ok(computed.await?)
}

/// What the reporter task reads and writes.
pub struct Reporter {
    pub id: JobId,
    pub evidence: Arc<Evidence>,
    pub published: Arc<Published>,
    pub store: Arc<dyn Metastore>,
    pub rules: Arc<RuleSet>,
    pub metrics: Arc<Metrics>,
    pub notifier: Notifier,
    /// Where the job stood at its last report: as stored when it was opened here, then as
    /// reported. Events and the failure count follow its changes, so a job reopened unchanged
    /// raises nothing (the store's claims keep any event from being sent twice besides).
    pub standing: Option<Standing>,
}

impl Reporter {
    /// Runs until `stop` fires (the job's handle was dropped).
    pub fn start(mut self, stop: CancellationToken) {
        tokio::spawn(async move {
            let mut history = Recorder::default();
            // The news the last report saw, when it ended and how long it took.
            let mut reported_news = 0;
            let mut last: Option<(Instant, Duration)> = None;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = self.evidence.changed() => {}
                }
                tokio::time::sleep(REPORT_DEBOUNCE).await;
                if let Some((ended, took)) = last.filter(|_| self.evidence.news_version() <= reported_news) {
                    if !self.wait_for_news(ended + routine_spacing(took), reported_news, &stop).await {
                        return;
                    }
                }
                let began = Instant::now();
                reported_news = self.evidence.news_version();
                self.report_once(&mut history).await;
                let took = began.elapsed();
                last = Some((Instant::now(), took));
                // A large job's report (16,384 ranks: a quarter to half a second on two cores)
                // recomputed after every change would take a core from the ingest it reports on.
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(report_spacing(took)) => {}
                }
            }
        });
    }

    /// Waits until `due`, or until a change after `reported` is news; false when the job's
    /// handle was dropped meanwhile.
    async fn wait_for_news(&self, due: Instant, reported: u64, stop: &CancellationToken) -> bool {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = tokio::time::sleep_until(due.into()) => return true,
                _ = self.evidence.changed() => {
                    if self.evidence.news_version() > reported {
                        return true;
                    }
                }
            }
        }
    }

    async fn report_once(&mut self, history: &mut Recorder) {
        let started = Instant::now();
        let Ok(Computed { report, input, seen }) = compute(&self.evidence, &self.rules).await else { return };
        self.metrics.reports.fetch_add(1, Ordering::Relaxed);
        self.metrics.report_latency.observe(started.elapsed());
        let culprit = report.first_failure.as_ref().and_then(|f| f.rank);
        let class = report.first_failure.as_ref().map(|f| f.class.as_str());
        let json = serde_json::to_string(&report).unwrap_or_default();
        if let Err(e) = self.store.save_report(&self.id, report.verdict.as_str(), culprit, class, &json).await {
            tracing::warn!(job = %self.id, error = %e, "could not save the report");
        }
        if history.record(&self.store, &self.id, &input, &report).await && report.verdict == Verdict::Failed {
            self.notifier.history_changed(&self.id);
        }
        self.standing_changed(Standing::of(&report));
        self.published.publish(Arc::new(report), seen);
    }

    /// Counts a new failure and emits the events a change of standing raises. A running report
    /// changes nothing: a verdict that goes failed, running, failed again is one failure.
    fn standing_changed(&mut self, now: Standing) {
        if now.verdict == Verdict::Running {
            return;
        }
        if now.verdict == Verdict::Failed && self.standing.as_ref().is_none_or(|b| b.verdict != Verdict::Failed) {
            self.metrics.alerting.job_failed(now.class.as_deref().unwrap_or("unknown"));
        }
        self.notifier.emit(notify::on_report(&self.id, self.standing.as_ref(), &now, now_ns()));
        self.standing = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_pipeline::JobPipeline;

    fn report(job: &str) -> Arc<Report> {
        Arc::new(JobPipeline::new(job).report(&RuleSet::builtin()))
    }

    #[test]
    fn a_slow_report_spaces_the_next_and_a_quick_one_does_not() {
        assert_eq!(report_spacing(Duration::from_millis(3)), Duration::ZERO);
        assert_eq!(report_spacing(Duration::from_millis(500)), Duration::from_millis(1_950));
    }

    #[test]
    fn routine_lines_wait_longer_for_a_slow_report_than_news_does() {
        let (small, large) = (Duration::from_millis(3), Duration::from_secs(1));
        assert!(routine_spacing(small) < Duration::from_millis(100), "a small job's progress shows at once");
        assert!(routine_spacing(large) > report_spacing(large) * 4);
    }

    #[test]
    fn a_report_that_saw_older_evidence_never_replaces_a_newer_one() {
        let p = Published::new();
        assert!(p.as_of(1).is_none(), "nothing published yet");
        p.publish(report("new"), 5);
        p.publish(report("old"), 3);
        assert_eq!(p.as_of(5).expect("published").job_id, "new");
        assert!(p.as_of(6).is_none(), "evidence changed after it: computed anew");
    }

    #[tokio::test]
    async fn a_report_is_computed_from_a_copy_while_the_evidence_stays_writable() {
        let evidence = Arc::new(Evidence::new(JobPipeline::new("j")));
        evidence.change(|p| p.add_note("before"));
        let c = compute(&evidence, &Arc::new(RuleSet::builtin())).await.expect("computed");
        evidence.change(|p| p.add_note("after"));
        assert_eq!(c.seen, 2);
        assert!(c.report.notes.iter().any(|n| n == "before") && !c.report.notes.iter().any(|n| n == "after"));
    }
}
