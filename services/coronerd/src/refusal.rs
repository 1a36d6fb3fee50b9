//! The limits a refusal is counted under (`coroner_limits_refused_total{limit}`): a fixed set, so
//! the metric's cardinality is bounded. The flags and what each refusal does are in `limits.rs`;
//! the counters are in `metrics.rs`, which needs only these names.

/// The limits a refusal is counted under: a fixed set, so the metric's cardinality is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    QueryBytes,
    QueryDepth,
    QueryClauses,
    QueryTime,
    QueryLines,
    Searches,
    Jobs,
    OpenJobs,
    WorldSize,
    StringLength,
    SnapshotQuota,
    PartialQuota,
    IdleStream,
    ClaimByHash,
}

impl Limit {
    pub const ALL: [Limit; 14] = [
        Limit::QueryBytes,
        Limit::QueryDepth,
        Limit::QueryClauses,
        Limit::QueryTime,
        Limit::QueryLines,
        Limit::Searches,
        Limit::Jobs,
        Limit::OpenJobs,
        Limit::WorldSize,
        Limit::StringLength,
        Limit::SnapshotQuota,
        Limit::PartialQuota,
        Limit::IdleStream,
        Limit::ClaimByHash,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Limit::QueryBytes => "query_bytes",
            Limit::QueryDepth => "query_depth",
            Limit::QueryClauses => "query_clauses",
            Limit::QueryTime => "query_time",
            Limit::QueryLines => "query_lines",
            Limit::Searches => "searches",
            Limit::Jobs => "jobs",
            Limit::OpenJobs => "open_jobs",
            Limit::WorldSize => "world_size",
            Limit::StringLength => "string_length",
            Limit::SnapshotQuota => "snapshot_quota",
            Limit::PartialQuota => "partial_quota",
            Limit::IdleStream => "idle_stream",
            Limit::ClaimByHash => "claim_by_hash",
        }
    }

    pub fn by_name(name: &str) -> Option<Limit> {
        Limit::ALL.into_iter().find(|l| l.name() == name)
    }
}
