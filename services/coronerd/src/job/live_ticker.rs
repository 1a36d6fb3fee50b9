//! Live hang suspicion for one job: every [`TICK`] the ticker asks the live monitor (fed by the
//! committer with every line, and by heartbeats) which ranks it suspects, because silence grows
//! without any new line.
//!
//! Contract: the report changes when the *set* of suspects does, not at every tick while a
//! silence grows: a new suspect becomes a finding of the running report (so WatchJob sends it at
//! once), and the finding goes when the rank speaks again. The thresholds come from the server's
//! configuration (`LiveConfig`, set on the pipeline when the job opens); nothing here is global.
//! Each suspicion raised and withdrawn is also an event for the notifier (`hang`, `hang_over`)
//! and moves `coroner_suspected_hangs`.

use super::state::Evidence;
use crate::metrics::Metrics;
use crate::notify::{self, Notifier};
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
    /// Takes what the monitor found now; answers the suspicions it raised and the ones that ended.
    fn update(&mut self, job: &JobId, found: Vec<SuspectedHang>) -> Change {
        let (kept, ended): (BTreeMap<Rank, SuspectedHang>, BTreeMap<Rank, SuspectedHang>) =
            std::mem::take(&mut self.0).into_iter().partition(|(r, _)| found.iter().any(|f| f.rank == *r));
        self.0 = kept;
        let mut change = Change { raised: Vec::new(), ended: ended.into_values().collect() };
        for f in found {
            if let std::collections::btree_map::Entry::Vacant(e) = self.0.entry(f.rank) {
                tracing::warn!(job = %job, rank = %f.rank, "suspected hang: {}", f.summary);
                change.raised.push(f.clone());
                e.insert(f);
            }
        }
        change
    }

    fn findings(&self) -> Vec<SuspectedHang> {
        self.0.values().cloned().collect()
    }
}

/// What one evaluation changed in the set of suspects.
struct Change {
    raised: Vec<SuspectedHang>,
    ended: Vec<SuspectedHang>,
}

impl Change {
    fn is_empty(&self) -> bool {
        self.raised.is_empty() && self.ended.is_empty()
    }

    /// The notifier's events for it; `finished`: every process of the job ended.
    fn events(&self, job: &JobId, finished: bool) -> Vec<notify::Event> {
        let now = now_ns();
        let why = if finished { "every process of the job ended" } else { "it printed again, or the others stopped too" };
        let raised = self.raised.iter().map(|f| notify::hang(job, f, now));
        raised.chain(self.ended.iter().map(|f| notify::hang_over(job, f, now, why))).collect()
    }
}

/// Keeps `coroner_suspected_hangs` true for one job: moved with every change, and the job's
/// share taken back when its ticker stops.
struct Gauge {
    metrics: Arc<Metrics>,
    mine: i64,
}

impl Gauge {
    fn set(&mut self, n: usize) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.metrics.alerting.suspected_hangs.fetch_add(n - self.mine, std::sync::atomic::Ordering::Relaxed);
        self.mine = n;
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// Starts the ticker of a job whose pipeline has its live monitor on; it runs until `stop` fires.
pub fn start(id: JobId, evidence: Arc<Evidence>, notifier: Notifier, metrics: Arc<Metrics>, stop: CancellationToken) {
    tokio::spawn(async move {
        let mut raised = Raised::default();
        let mut gauge = Gauge { metrics, mine: 0 };
        let lag = Arc::new(Mutex::new(Lag::default()));
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let (evidence2, lag) = (evidence.clone(), lag.clone());
            let began = std::time::Instant::now();
            let evaluated = tokio::task::spawn_blocking(move || suspects(&evidence2, &lag)).await;
            // The evaluation reads under the job's lock: however large the job and loaded the
            // server, it takes at most a fifth of the time.
            let spacing = extra_pause(began.elapsed());
            if !spacing.is_zero() {
                tokio::time::sleep(spacing).await;
            }
            let Ok(Some((found, finished))) = evaluated else { continue };
            let change = raised.update(&id, found);
            if !change.is_empty() {
                let list = raised.findings();
                gauge.set(list.len());
                evidence.change(|p| p.set_live_findings(list));
                notifier.emit(change.events(&id, finished));
            }
        }
    });
}

/// How much longer than [`TICK`] to wait before the next evaluation after one that took `took`,
/// so that evaluations (which hold the job's lock) take at most a fifth of the time.
fn extra_pause(took: Duration) -> Duration {
    (took * 5).saturating_sub(TICK)
}

/// The ranks the monitor suspects now (none once every process ended), and whether every
/// process ended; `None` without a monitor.
fn suspects(evidence: &Evidence, lag: &Mutex<Lag>) -> Option<(Vec<SuspectedHang>, bool)> {
    let now = now_ns();
    evidence.read(|p| {
        if p.is_finished() {
            // Every process ended: nothing can hang any more (and the verdict is not running).
            return Some((Vec::new(), true));
        }
        let m = p.live()?;
        let behind = lag.lock().map(|mut l| l.observe(now, m.latest_capture())).unwrap_or(0);
        Some((m.evaluate(now - behind), false))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(rank: u32) -> SuspectedHang {
        crate::notify::finding(rank, None, &format!("rank {rank} is silent"), None, "t")
    }

    #[test]
    fn each_suspicion_is_raised_once_and_ends_when_the_monitor_drops_it() {
        let job = JobId::parse("j").expect("id");
        let mut raised = Raised::default();
        let first = raised.update(&job, vec![finding(3)]);
        assert_eq!((first.raised.len(), first.ended.len()), (1, 0));
        assert!(raised.update(&job, vec![finding(3)]).is_empty(), "still silent: nothing new");
        let next = raised.update(&job, vec![finding(5)]);
        assert_eq!((next.raised[0].rank, next.ended[0].rank), (Rank(5), Rank(3)));
        let events = next.events(&job, false);
        assert_eq!(events.iter().map(|e| (e.kind, e.rank)).collect::<Vec<_>>(), [(notify::Kind::Hang, Some(5)), (notify::Kind::HangOver, Some(3))]);
    }

    #[test]
    fn the_gauge_gives_back_its_share_when_the_ticker_stops() {
        let metrics = Arc::new(Metrics::default());
        metrics.alerting.suspected_hangs.store(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut g = Gauge { metrics: metrics.clone(), mine: 0 };
            g.set(3);
            assert_eq!(metrics.alerting.suspected_hangs.load(std::sync::atomic::Ordering::Relaxed), 4);
            g.set(2);
        }
        assert_eq!(metrics.alerting.suspected_hangs.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn a_slow_evaluation_spaces_the_next_ones() {
        assert_eq!(extra_pause(Duration::from_millis(10)), Duration::ZERO, "cheap: every tick");
        assert_eq!(extra_pause(Duration::from_millis(50)), Duration::ZERO);
        assert_eq!(extra_pause(Duration::from_millis(200)), Duration::from_millis(750), "200 ms in every second");
    }

    #[test]
    fn a_capture_time_from_the_far_past_or_future_is_a_bounded_lag() {
        // Capture times come from the wire: the extremes must not overflow the subtraction.
        let mut lag = Lag::default();
        assert_eq!(lag.observe(1_000, Some(i64::MIN)), LAG_MAX);
        let mut lag = Lag::default();
        assert_eq!(lag.observe(i64::MIN + 5, Some(i64::MAX)), 0);
    }
}
