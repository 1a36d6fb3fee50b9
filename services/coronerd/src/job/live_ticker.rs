//! Live hang suspicion for one job: every [`TICK`] the ticker asks the live monitor (fed by the
//! committer with every line, and by heartbeats) which ranks it suspects, because silence grows
//! without any new line.
//!
//! Contract: the report changes when the *set* of suspects does, not at every tick while a
//! silence grows: a new suspect becomes a finding of the running report (so WatchJob sends it at
//! once), and the finding goes when the rank speaks again. The thresholds come from the server's
//! configuration (`LiveConfig`, set on the pipeline when the job opens); nothing here is global.

use super::state::Evidence;
use coroner_model::{now_ns, JobId, Rank, SuspectedHang};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often each running job is re-evaluated.
pub const TICK: Duration = Duration::from_millis(250);

/// How far behind the server's clock the lines arrive (agent batching, commit, clock skew): the
/// age of the newest line each time a newer one has arrived, the median over [`LAG_WINDOW`].
/// Silence is measured at `now - lag`, so lines on their way as usual do not look like silence
/// (the floor of the threshold absorbs the jitter around it).
#[derive(Default)]
struct Lag {
    samples: VecDeque<(i64, i64)>,
    newest: Option<i64>,
}

const LAG_WINDOW: i64 = 30_000_000_000;
const LAG_MAX: i64 = 10_000_000_000;

impl Lag {
    fn observe(&mut self, now: i64, latest_capture: Option<i64>) -> i64 {
        if let Some(latest) = latest_capture {
            if self.newest.is_none_or(|n| latest > n) {
                self.newest = Some(latest);
                self.samples.push_back((now, now.saturating_sub(latest).clamp(0, LAG_MAX)));
            }
        }
        while self.samples.front().is_some_and(|(t, _)| now - t > LAG_WINDOW) {
            self.samples.pop_front();
        }
        let mut ages: Vec<i64> = self.samples.iter().map(|s| s.1).collect();
        ages.sort_unstable();
        ages.get(ages.len() / 2).copied().unwrap_or(0)
    }
}

/// Each suspect as first raised.
#[derive(Default)]
struct Raised(BTreeMap<Rank, SuspectedHang>);

impl Raised {
    /// Takes what the monitor found now; answers whether the set of suspects changed.
    fn update(&mut self, job: &JobId, found: Vec<SuspectedHang>) -> bool {
        let before = self.0.len();
        self.0.retain(|r, _| found.iter().any(|f| f.rank == *r));
        let mut changed = self.0.len() != before;
        for f in found {
            if let std::collections::btree_map::Entry::Vacant(e) = self.0.entry(f.rank) {
                tracing::warn!(job = %job, rank = %f.rank, "suspected hang: {}", f.summary);
                e.insert(f);
                changed = true;
            }
        }
        changed
    }

    fn findings(&self) -> Vec<SuspectedHang> {
        self.0.values().cloned().collect()
    }
}

/// Starts the ticker of a job whose pipeline has its live monitor on; it runs until `stop` fires.
pub fn start(id: JobId, evidence: Arc<Evidence>, stop: CancellationToken) {
    tokio::spawn(async move {
        let mut raised = Raised::default();
        let lag = Arc::new(Mutex::new(Lag::default()));
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let (evidence2, lag) = (evidence.clone(), lag.clone());
            let Ok(Some(found)) = tokio::task::spawn_blocking(move || suspects(&evidence2, &lag)).await else { continue };
            if raised.update(&id, found) {
                let list = raised.findings();
                evidence.change(|p| p.set_live_findings(list));
            }
        }
    });
}

/// The ranks the monitor suspects now (none once every process ended); `None` without a monitor.
fn suspects(evidence: &Evidence, lag: &Mutex<Lag>) -> Option<Vec<SuspectedHang>> {
    let now = now_ns();
    evidence.read(|p| {
        if p.is_finished() {
            // Every process ended: nothing can hang any more (and the verdict is not running).
            return Some(Vec::new());
        }
        let m = p.live()?;
        let behind = lag.lock().map(|mut l| l.observe(now, m.latest_capture())).unwrap_or(0);
        Some(m.evaluate(now - behind))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_time_from_the_far_past_or_future_is_a_bounded_lag() {
        // Capture times come from the wire: the extremes must not overflow the subtraction.
        let mut lag = Lag::default();
        assert_eq!(lag.observe(1_000, Some(i64::MIN)), LAG_MAX);
        let mut lag = Lag::default();
        assert_eq!(lag.observe(i64::MIN + 5, Some(i64::MAX)), 0);
    }
}
