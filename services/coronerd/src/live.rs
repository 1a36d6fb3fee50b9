//! Live hang suspicion on the server: per job, a ticker asks the pipeline's live monitor (fed by
//! the committer with every line) which ranks it suspects, every [`TICK`], because silence grows
//! without any new line. When the set of suspects changes, the running report carries the new
//! findings (so WatchJob sends it at once) and drops them when the rank speaks again.
//!
//! The `Liveness` gRPC service takes agents' heartbeats (CPU time, GPU utilisation) into the
//! monitor and, once per suspicion, asks the suspected rank's agent for a stack dump.

use crate::error::ServiceError;
use crate::job::Job;
use crate::jobs::Jobs;
use coroner_analysis::live::LiveConfig;
use coroner_model::{JobId, Rank, SuspectedHang};
use coroner_proto::v1::{self, liveness_server::Liveness};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tonic::{Request, Response, Status};

/// How often each running job is re-evaluated.
pub const TICK: Duration = Duration::from_millis(250);

static CONFIG: OnceLock<LiveConfig> = OnceLock::new();

/// Sets the thresholds for every job of this process (once, at start-up).
pub fn configure(step_multiple: f64, floor: Duration) {
    let floor_ns = i64::try_from(floor.as_nanos()).unwrap_or(i64::MAX);
    let _ = CONFIG.set(LiveConfig { step_multiple, floor_ns, ..LiveConfig::default() });
}

fn config() -> LiveConfig {
    CONFIG.get().cloned().unwrap_or_default()
}

/// Switches the job's live monitor on and starts its ticker.
pub fn start(job: &Arc<Job>) {
    if let Ok(mut p) = job.pipeline.lock() {
        p.enable_live(config());
    }
    tokio::spawn(ticker(Arc::downgrade(job)));
}

use coroner_model::now_ns;

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

async fn ticker(job: Weak<Job>) {
    // Each suspect as first raised: the report changes when the set of suspects does, not at
    // every tick while a silence grows.
    let mut raised: BTreeMap<Rank, SuspectedHang> = BTreeMap::new();
    let lag = Arc::new(Mutex::new(Lag::default()));
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(j) = job.upgrade() else { return };
        let pipeline = j.pipeline.clone();
        let now = now_ns();
        let lag = lag.clone();
        let found = tokio::task::spawn_blocking(move || {
            let p = pipeline.lock().ok()?;
            if p.is_finished() {
                // Every process ended: nothing can hang any more (and the verdict is not running).
                return Some(Vec::new());
            }
            let m = p.live()?;
            let behind = lag.lock().map(|mut l| l.observe(now, m.latest_capture())).unwrap_or(0);
            Some(m.evaluate(now - behind))
        })
        .await;
        let Ok(Some(found)) = found else { continue };
        let before = raised.len();
        raised.retain(|r, _| found.iter().any(|f| f.rank == *r));
        let mut changed = raised.len() != before;
        for f in found {
            if let std::collections::btree_map::Entry::Vacant(e) = raised.entry(f.rank) {
                tracing::warn!(job = %j.id, rank = %f.rank, "suspected hang: {}", f.summary);
                e.insert(f);
                changed = true;
            }
        }
        if changed {
            let list: Vec<SuspectedHang> = raised.values().cloned().collect();
            j.update(|p| p.set_live_findings(list));
        }
    }
}

/// The `coroner.v1.Liveness` service.
pub struct LivenessService {
    jobs: Arc<Jobs>,
    /// (job, rank, raised_at) whose agent was already asked for a stack dump.
    asked: Mutex<HashSet<(JobId, Rank, String)>>,
}

impl LivenessService {
    pub fn new(jobs: Arc<Jobs>) -> Self {
        LivenessService { jobs, asked: Mutex::new(HashSet::new()) }
    }
}

#[tonic::async_trait]
impl Liveness for LivenessService {
    async fn heartbeat(&self, req: Request<v1::HeartbeatRequest>) -> Result<Response<v1::HeartbeatResponse>, Status> {
        let r = req.into_inner();
        let id = JobId::parse(&r.job_id).map_err(|e| ServiceError::InvalidArgument(format!("job id: {e}")))?;
        let job = self.jobs.get(&id, false).await?;
        let rank = Rank(r.rank);
        let pipeline = job.pipeline.clone();
        let suspected = tokio::task::spawn_blocking(move || {
            let mut p = pipeline.lock().map_err(|_| ServiceError::Internal("pipeline lock poisoned".into()))?;
            if let Some(m) = p.live_mut() {
                m.push_liveness(rank, r.at_ns, r.cpu_ns, r.io_bytes, r.gpu_util_pct);
            }
            Ok::<_, ServiceError>(p.live_findings().iter().find(|f| f.rank == rank).map(|f| f.raised_at.clone()))
        })
        .await
        .map_err(|e| ServiceError::Internal(format!("heartbeat task: {e}")))??;
        let dump_stack = match suspected {
            Some(raised_at) => self.asked.lock().map(|mut a| a.insert((id, rank, raised_at))).unwrap_or(false),
            None => false,
        };
        if dump_stack {
            tracing::info!(job = %job.id, rank = %rank, "asking the suspected rank's agent for a stack dump");
        }
        Ok(Response::new(v1::HeartbeatResponse { dump_stack }))
    }
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
