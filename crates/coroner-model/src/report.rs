//! The report: what coroner concludes about a job. A pure function of the job's evidence, so it is
//! deterministic (ordered maps and vectors only) and can be compared byte for byte in golden tests.

use crate::{FaultClass, Rank, Verdict};
use serde::{Deserialize, Serialize};

/// Bumped whenever a field's meaning changes; readers refuse versions they do not know.
pub const REPORT_FORMAT_VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub format_version: u32,
    pub job_id: String,
    pub verdict: Verdict,
    /// Null when the job succeeded or is still running without a failure.
    pub first_failure: Option<FirstFailure>,
    /// Who failed because of whom, culprit first.
    pub cascade: Vec<CascadeLink>,
    /// Collective progress per process group and rank.
    pub collectives: Vec<CollectiveRow>,
    pub ranks: Vec<RankSummary>,
    pub advice: Vec<String>,
    pub snapshots: Vec<SnapshotSummary>,
    /// Things the analysis noticed about its own input (missing ranks, unparsable files).
    pub notes: Vec<String>,
    /// While the job runs: ranks the live monitor suspects of hanging (attached by the server).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live_findings: Vec<crate::SuspectedHang>,
    /// Earlier failed jobs with the same or a close signature (attached by whoever holds the
    /// history: coronerd, or `coroner analyze --history`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similar_incidents: Option<crate::SimilarIncidents>,
    /// What matching the ranks' flight recorder dumps found, when there were any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flight_recorder: Option<crate::FlightRecorderReport>,
    /// A job started more than once (torchrun restarts, a Slurm requeue): every attempt, in order.
    /// The verdict is the last attempt's; `first_failure`, the cascade, the collectives and the
    /// ranks are those of the attempt that failed first. Empty for a job of one attempt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<crate::AttemptSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstFailure {
    /// The global rank that failed first, or null when the evidence cannot tell.
    pub rank: Option<Rank>,
    pub class: FaultClass,
    /// RFC 3339 on the aligned clock.
    pub time: Option<String>,
    pub host: Option<String>,
    /// 0..1: how sure the analysis is of the rank and class.
    pub confidence: f64,
    pub summary: String,
    /// The id of the rule that classified the root cause.
    pub rule: Option<String>,
    pub evidence: Vec<EvidenceLine>,
    /// When `rank` is null: the ranks that could be the culprit.
    pub candidates: Vec<Rank>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceLine {
    pub rank: Option<Rank>,
    /// RFC 3339 on the aligned clock.
    pub time: String,
    pub stream: String,
    pub line: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CascadeLink {
    pub rank: Rank,
    /// The rank whose failure this rank's failure follows from (the culprit, or an intermediate):
    /// the parent in the cascade tree. The list is the tree in depth-first order.
    pub caused_by: Option<Rank>,
    pub how: String,
    pub time: Option<String>,
    /// 1 for a rank that failed because of the culprit directly, 2 for one that failed because of
    /// such a rank, and so on.
    #[serde(default = "one")]
    pub depth: u32,
    /// The collective this rank gave up waiting in, e.g. `ALLREDUCE seq 11 of process group 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<String>,
    /// Why this parent: `named peer`, `never issued the collective`, `same host's launcher`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveRow {
    pub pg: String,
    pub rank: Rank,
    pub last_enqueued: Option<u64>,
    pub last_started: Option<u64>,
    pub last_completed: Option<u64>,
    /// The collective this rank was stuck in or failed on, e.g. `ALLREDUCE seq 11 (1153 elements)`.
    pub pending: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    pub rank: Rank,
    pub host: Option<String>,
    /// How the process ended, in words (`exited 1`, `killed by SIGKILL (9)`), or null if unknown.
    pub ended: Option<String>,
    pub last_step: Option<u64>,
    pub lines: u64,
    pub role: String,
    pub clock: ClockEstimate,
    /// The rank's GPU memory over the agent's samples, when it sampled: first, peak and last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory: Option<GpuMemory>,
}

/// A rank's GPU memory as the agent sampled it while the job ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuMemory {
    /// PCI bus id of the rank's GPU.
    pub bus: String,
    pub samples: u32,
    pub first_mib: u64,
    pub peak_mib: u64,
    pub last_mib: u64,
    pub total_mib: u64,
    /// RFC 3339 on the aligned clock: the first and the last sample.
    pub from: String,
    pub to: String,
    /// Utilisation in percent at the last sample, where the driver reports it.
    pub last_util_pct: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockEstimate {
    /// Add to this rank's host times to get aligned time.
    pub offset_ns: i64,
    /// The offset is known to within plus or minus this much.
    pub uncertainty_ns: i64,
    /// Where the estimate came from: `ntp`, `causality`, `steps`, `none`.
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotSummary {
    pub rank: Option<Rank>,
    pub kind: String,
    pub name: String,
    pub size: u64,
    pub sha256: String,
    pub highlights: Vec<String>,
}
