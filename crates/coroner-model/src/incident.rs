//! Incident memory across jobs: the signature of a failed job, the earlier jobs that failed the
//! same way, and the hosts and GPUs whose failures stand out.
//!
//! A signature is computed from one job's report (in `coroner-analysis`); the links to earlier
//! jobs and the suspect list depend on history, so they are attached by whoever holds the
//! history (coronerd's store), never by the analysis of one job.

use crate::{FaultClass, Rank};
use serde::{Deserialize, Serialize};

/// What identifies a failure across jobs, with the numbers, addresses, paths and names that vary
/// from run to run masked out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureSignature {
    /// A stable hash (16 hex digits) of the class, the template and the top frames: two jobs
    /// with the same id failed the same way.
    pub id: String,
    pub class: FaultClass,
    /// The root cause's message with variable parts masked (`<num>`, `<hex>`, `<path>`,
    /// `<addr>`, `<host>`, `<uuid>`, `<pci>`, `<shape>`).
    pub template: String,
    /// The innermost frames of the root cause's stack, innermost first, as `function (file)`
    /// with the file's base name and no line number.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<String>,
    /// The culprit rank and where it ran: context, not part of the id.
    pub rank: Option<Rank>,
    pub host: Option<String>,
    /// The GPU the root cause names or the rank used: a PCI bus id or a `GPU-` UUID.
    pub gpu: Option<String>,
    /// The collective the culprit was in or failed on (`ALLREDUCE`), when known.
    pub collective: Option<String>,
}

/// Earlier jobs whose signature is the same as, or close to, this job's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimilarIncidents {
    /// This job's signature id and template.
    pub signature: String,
    pub template: String,
    /// How many earlier jobs had exactly this signature, and how many a close one.
    pub same: u32,
    pub close: u32,
    /// RFC 3339: the earliest and the latest of those jobs.
    pub first_seen: Option<String>,
    pub last_seen: Option<String>,
    /// Where those jobs' root causes ran, most often first.
    pub hosts: Vec<HostCount>,
    /// The most recent of those jobs, newest first (at most a few dozen).
    pub jobs: Vec<PastIncident>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCount {
    pub host: String,
    pub count: u32,
}

/// One earlier failed job like this one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PastIncident {
    pub job_id: String,
    /// RFC 3339: when the failure was recorded.
    pub time: String,
    pub class: FaultClass,
    /// True for the same signature, false for a close one.
    pub same: bool,
    /// 0..1: how alike the two messages are (1 for the same signature).
    pub similarity: f64,
    pub rank: Option<Rank>,
    pub host: Option<String>,
    pub gpu: Option<String>,
}

/// A host or GPU whose failures stand out, with the evidence for a scheduler's drain logic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    pub host: String,
    /// Absent for a host; the PCI bus id or UUID for one of its GPUs.
    pub gpu: Option<String>,
    /// Root-cause failures here, weighted by class (hardware weighs most).
    pub score: f64,
    /// Its share: what the score would be if failures fell on hosts in proportion to the work
    /// they did (rank slots, ranks times jobs, over every recorded job). For a GPU: 0.
    pub expected: f64,
    /// Jobs whose root cause ran here, and how many of those were hardware faults.
    pub failures: u32,
    pub hardware_failures: u32,
    /// Jobs that ran at least one rank here (for a host).
    pub jobs_seen: u32,
    /// True when the evidence says to drain it; the list also holds hosts close to the line.
    pub flagged: bool,
    /// Why, in words.
    pub reason: String,
    /// The failures, newest first (at most a few dozen).
    pub incidents: Vec<PastIncident>,
}

/// A failed job's signature as the history holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedFailure {
    pub job_id: String,
    /// When the failure was first recorded, ns since the epoch (the recording server's clock).
    pub recorded_ns: i64,
    pub signature: FailureSignature,
}

/// Where a job's ranks ran: the denominator of "more than their share".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHosts {
    pub job_id: String,
    pub recorded_ns: i64,
    /// The job's verdict when recorded (`failed`, `succeeded`).
    pub verdict: String,
    /// Per host, how many of the job's ranks ran there.
    pub hosts: Vec<HostCount>,
}
