//! The rows the store reads and writes, in domain types.

use coroner_model::{JobId, Rank};
use std::collections::BTreeMap;

/// One agent session: a process (a rank, or a launcher) that an agent wraps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub session_id: String,
    pub job_id: JobId,
    pub rank: Option<Rank>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub host: String,
    pub pid: u32,
    pub launcher: String,
    pub agent_instance: String,
    /// Versions of what the session runs (`torch`, `nccl`, `cuda`, the agent).
    pub versions: BTreeMap<String, String>,
    pub opened_ns: i64,
    /// The job's attempt this session belongs to: 0 for its first start (migration 0004).
    pub attempt: u32,
}

/// A job and the summary of its latest report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    pub job_id: JobId,
    pub world_size: Option<u32>,
    pub first_seen_ns: i64,
    pub last_seen_ns: i64,
    /// `"running"` until a report says otherwise.
    pub verdict: String,
    pub culprit_rank: Option<Rank>,
    pub fault_class: Option<String>,
    pub lines: u64,
    pub report_json: Option<String>,
}

/// Which jobs `list_jobs` returns, most recently seen first (then by id); every filter that is
/// set must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    pub verdict: Option<String>,
    pub fault_class: Option<String>,
    /// Only jobs seen at or after this time (`last_seen_ns >= since_ns`).
    pub since_ns: Option<i64>,
    /// Only jobs first seen at or before this time (`first_seen_ns <= until_ns`).
    pub until_ns: Option<i64>,
    /// Only jobs that ran on this host: an agent's session named it (a running job too), or the
    /// finished report recorded it (`job_hosts`, also for jobs imported or analysed without
    /// sessions on that host).
    pub host: Option<String>,
    /// Only jobs after this one in the order (a page's last job: keyset paging).
    pub after: Option<JobPosition>,
    /// At most this many jobs (`None`: all).
    pub limit: Option<u32>,
}

/// Where a job stands in `list_jobs`' order: what the next page continues after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPosition {
    pub last_seen_ns: i64,
    pub job_id: JobId,
}

impl JobRow {
    /// This job's place in `list_jobs`' order.
    pub fn position(&self) -> JobPosition {
        JobPosition { last_seen_ns: self.last_seen_ns, job_id: self.job_id.clone() }
    }
}

/// The metadata of one snapshot (a py-spy dump, an nvidia-smi table, a core file...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRecord {
    pub job_id: JobId,
    pub rank: Option<Rank>,
    pub kind: String,
    pub name: String,
    pub size: u64,
    pub sha256: String,
    pub captured_ns: i64,
    /// May be less than `size` when the stored copy was capped.
    pub stored_bytes: u64,
}
