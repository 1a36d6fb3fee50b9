//! Every bound coronerd puts on what one client may cost it, in one place: the flags (each with
//! an environment variable), their defaults with the reason for each, and the names under which
//! refusals are counted (`coroner_limits_refused_total{limit}`, named in `refusal.rs`). docs/SECURITY.md lists them.

use crate::error::ServiceError;
use crate::metrics::Metrics;
use std::time::Duration;

pub use crate::refusal::Limit;

impl Limit {
    /// Counts a refusal and makes the caller's error (`RESOURCE_EXHAUSTED`, HTTP 429).
    pub fn refuse(self, metrics: &Metrics, message: String) -> ServiceError {
        self.count(metrics);
        ServiceError::ResourceExhausted(message)
    }

    /// Counts a refusal whose error the caller makes.
    pub fn count(self, metrics: &Metrics) {
        metrics.limit_refused(self);
    }

    /// The limit behind an index's parse refusal (`query_bytes`, `query_depth`, `query_clauses`).
    pub fn of_query(refused: &coroner_index::QueryRefused) -> Limit {
        Limit::by_name(refused.limit).unwrap_or(Limit::QueryBytes)
    }
}

/// The world size a job is believed to have: what its sessions claim, but at most `slack` times
/// the agents that opened sessions, plus 64 (a job whose agents are still starting). A report
/// enumerates every rank below the world size, so one session claiming 2^20 ranks cost ~550 MB.
pub fn believed_world_size(claimed: u32, agents: usize, slack: u32) -> u32 {
    let seen = u32::try_from(agents).unwrap_or(u32::MAX);
    claimed.min(seen.saturating_mul(slack.max(1)).saturating_add(64))
}

/// Bytes per MiB and GiB, for flags given in those units.
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The limits' flags. Each default is written with its reason; 0 turns a quota off where said.
#[derive(Debug, Clone, clap::Args)]
pub struct LimitsConfig {
    // --- queries ---
    /// Bytes of one search query.
    #[arg(long, env = "CORONER_MAX_QUERY_BYTES", default_value_t = 4096)]
    pub max_query_bytes: usize,
    /// How deep a query may nest parentheses (tantivy's grammar doubles its work per level).
    #[arg(long, env = "CORONER_MAX_QUERY_DEPTH", default_value_t = 8)]
    pub max_query_depth: usize,
    /// Clauses (terms, phrases, groups) in one query.
    #[arg(long, env = "CORONER_MAX_QUERY_CLAUSES", default_value_t = 64)]
    pub max_query_clauses: usize,
    /// Seconds one search may run (less when the client's deadline is nearer).
    #[arg(long, env = "CORONER_MAX_QUERY_TIME", default_value = "10", value_parser = coroner_model::parse_duration)]
    pub max_query_time: Duration,
    /// Matching lines one search may visit.
    #[arg(long, env = "CORONER_MAX_QUERY_LINES", default_value_t = 50_000_000)]
    pub max_query_lines: u64,
    /// Searches running at once over all jobs; more wait their turn (at most --max-query-time).
    #[arg(long, env = "CORONER_MAX_SEARCHES", default_value_t = 16)]
    pub max_searches: usize,
    /// Searches of one job running at once; its others wait, so one job cannot take every slot.
    #[arg(long, env = "CORONER_MAX_SEARCHES_PER_JOB", default_value_t = 2)]
    pub max_searches_per_job: usize,

    // --- jobs and memory ---
    /// Jobs the store may hold; a new job id beyond it is refused (retention makes room).
    #[arg(long, env = "CORONER_MAX_JOBS", default_value_t = 10_000)]
    pub max_jobs: u64,
    /// Jobs held open (an index writer, its threads and the analysis state) at once; the least
    /// recently used idle one is closed to open another, and reopened from disk when asked for.
    #[arg(long, env = "CORONER_MAX_OPEN_JOBS", default_value_t = 64)]
    pub max_open_jobs: usize,
    /// A job's world size is believed up to this many times the agents that opened sessions for it (plus 64).
    #[arg(long, env = "CORONER_WORLD_SIZE_SLACK", default_value_t = 16)]
    pub world_size_slack: u32,
    /// Bytes of a host name, agent instance, launcher, version or note an agent sends.
    #[arg(long, env = "CORONER_MAX_STRING_BYTES", default_value_t = 512)]
    pub max_string_bytes: usize,

    // --- disk ---
    /// GiB of snapshot bytes stored for one job (0: no per-job quota).
    #[arg(long, env = "CORONER_MAX_JOB_SNAPSHOT_GB", default_value_t = 8)]
    pub max_job_snapshot_gb: u64,
    /// GiB of snapshot bytes stored in all (0: no quota).
    #[arg(long, env = "CORONER_MAX_SNAPSHOT_GB", default_value_t = 100)]
    pub max_snapshot_gb: u64,
    /// MiB of unfinished snapshot uploads kept in all; an upload that would pass it is refused.
    #[arg(long, env = "CORONER_MAX_PARTIAL_MB", default_value_t = 4096)]
    pub max_partial_mb: u64,
    /// How long an unfinished upload is kept for its agent to resume it.
    #[arg(long, env = "CORONER_PARTIAL_TTL", default_value = "1h", value_parser = coroner_model::parse_duration)]
    pub partial_ttl: Duration,

    // --- ingest ---
    /// The share of --ingest-buffer-mb one log stream may hold (a divisor: 8 = an eighth).
    #[arg(long, env = "CORONER_INGEST_STREAM_SHARE", default_value_t = 8)]
    pub ingest_stream_share: u64,
    /// The share of --ingest-buffer-mb one job's streams may hold together (2 = a half).
    #[arg(long, env = "CORONER_INGEST_JOB_SHARE", default_value_t = 2)]
    pub ingest_job_share: u64,
    /// Seconds a log stream may send nothing, or leave its acknowledgements unread, before it is closed.
    #[arg(long, env = "CORONER_INGEST_IDLE_TIMEOUT", default_value = "300", value_parser = coroner_model::parse_duration)]
    pub ingest_idle_timeout: Duration,
    /// Seconds an HTTP client may take to send its request headers.
    #[arg(long, env = "CORONER_HTTP_HEADER_TIMEOUT", default_value = "10", value_parser = coroner_model::parse_duration)]
    pub http_header_timeout: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            // A long hand-written query is a few hundred bytes; 4 KiB leaves room for generated ones.
            max_query_bytes: 4096,
            // Depth 8 parses in under 1 ms; 18 took 0.5 s, 22 took 5 s, 100 never ends.
            max_query_depth: 8,
            // 64 ANDed terms over a 1M-line job run in well under a second; 1,000 took 6 s.
            max_query_clauses: 64,
            // A person waits a few seconds; the web page and the CLI give up after 30.
            max_query_time: Duration::from_secs(10),
            // Five times the 10M-line bench job; counting 50M matches takes about a second per core.
            max_query_lines: 50_000_000,
            // Threads are cheap next to a job's memory; 16 keeps a 16-core host busy.
            max_searches: 16,
            // Two running searches of one job leave the other slots to other jobs.
            max_searches_per_job: 2,
            // ~10,000 jobs is months of a busy cluster; each costs SQL rows and an index folder.
            max_jobs: 10_000,
            // An open job costs ~7 index threads and its analysis state (~5-50 MB): 64 of them
            // stay within ~500 threads and a few GB; a cluster rarely runs more jobs at once.
            max_open_jobs: 64,
            // One agent speaks for one rank, or for a node's ranks around a launcher (8-16 GPUs):
            // 16 per agent plus 64 covers both and a job whose agents are still starting, never
            // 2^20 ranks claimed by one session (~550 MB of report).
            world_size_slack: 16,
            // Host names are at most 253 bytes (DNS); an agent instance is a host name, a pid and
            // a start time.
            max_string_bytes: 512,
            max_job_snapshot_gb: 8,
            max_snapshot_gb: 100,
            max_partial_mb: 4096,
            partial_ttl: Duration::from_secs(3600),
            ingest_stream_share: 8,
            ingest_job_share: 2,
            ingest_idle_timeout: Duration::from_secs(300),
            http_header_timeout: Duration::from_secs(10),
        }
    }
}

impl LimitsConfig {
    pub fn query_limits(&self) -> coroner_index::QueryLimits {
        coroner_index::QueryLimits { max_bytes: self.max_query_bytes, max_depth: self.max_query_depth, max_clauses: self.max_query_clauses }
    }

    /// A quota in bytes from a flag in GiB (`None`: off).
    pub fn gib(v: u64) -> Option<u64> {
        (v > 0).then(|| v.saturating_mul(GIB))
    }

    pub fn partial_bytes(&self) -> u64 {
        self.max_partial_mb.saturating_mul(MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        limits: LimitsConfig,
    }

    #[test]
    fn the_flag_defaults_are_the_documented_defaults() {
        let parsed = Only::parse_from(["coronerd"]).limits;
        let d = LimitsConfig::default();
        assert_eq!(format!("{parsed:?}"), format!("{d:?}"));
    }

    #[test]
    fn rule_a_world_size_is_believed_up_to_a_multiple_of_the_ranks_seen() {
        assert_eq!(believed_world_size(8, 1, 16), 8, "a real job's world size stands");
        assert_eq!(believed_world_size(1024, 1, 16), 80, "while its agents start: grows with them");
        assert_eq!(believed_world_size(1024, 64, 16), 1024, "64 launcher agents of 16 ranks each");
        assert_eq!(believed_world_size(1 << 20, 1, 16), 80, "one session cannot claim 2^20 ranks");
        assert_eq!(believed_world_size(u32::MAX, usize::MAX, u32::MAX), u32::MAX);
    }

    #[test]
    fn every_limit_has_a_distinct_name() {
        let names: std::collections::BTreeSet<_> = Limit::ALL.iter().map(|l| l.name()).collect();
        assert_eq!(names.len(), Limit::ALL.len());
        for l in Limit::ALL {
            assert_eq!(Limit::by_name(l.name()), Some(l));
        }
    }
}
