//! What every job of one server shares: its data dir, store, rules, metrics, the open writers'
//! LRU, the limits, the live-hang thresholds and the notifier. Passed as a value from `Config` down, so two
//! servers in one process (tests) each keep their own.

use crate::limits::LimitsConfig;
use crate::metrics::Metrics;
use crate::notify::Notifier;
use crate::writers::Writers;
use coroner_analysis::live::LiveConfig;
use coroner_analysis::RuleSet;
use coroner_model::JobId;
use coroner_store::Metastore;
use std::path::PathBuf;
use std::sync::Arc;

pub struct Shared {
    pub data_dir: PathBuf,
    pub store: Arc<dyn Metastore>,
    pub rules: Arc<RuleSet>,
    pub metrics: Arc<Metrics>,
    pub writers: Arc<Writers>,
    pub limits: Arc<LimitsConfig>,
    /// When a running job's silent rank is suspected of hanging (`--hang-step-multiple`, `--hang-floor`).
    pub live: LiveConfig,
    /// Where the job tasks hand the events they raise (`notify/`).
    pub notifier: Notifier,
}

impl Shared {
    /// Where a job's files live: `<data dir>/jobs/<id>`.
    pub fn job_dir(&self, job: &JobId) -> PathBuf {
        self.data_dir.join("jobs").join(job.as_str())
    }

    /// Where a job's index lives.
    pub fn index_dir(&self, job: &JobId) -> PathBuf {
        self.job_dir(job).join("index")
    }
}
