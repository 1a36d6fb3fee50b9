//! Prometheus metrics, named `coroner_<subsystem>_<name>_<unit>`, updated per batch; labels have
//! bounded cardinality (fault classes and verdicts, never job ids or ranks).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the latency buckets, seconds.
const BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// A latency histogram with fixed buckets.
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| s <= *b) {
            self.counts[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, c) in BUCKETS.iter().zip(&self.counts) {
            cumulative += c.load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let count = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {:.6}", self.sum_us.load(Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

#[derive(Default)]
pub struct Metrics {
    pub lines_ingested: AtomicU64,
    pub bytes_ingested: AtomicU64,
    pub duplicate_lines: AtomicU64,
    pub batches: AtomicU64,
    pub agents_connected: AtomicI64,
    /// Sessions held in the ingest's table (forgotten once their process ended and no stream uses them).
    pub ingest_sessions: AtomicI64,
    /// Sum over connected agents of the spool bytes they last reported as not yet acknowledged.
    pub spool_backlog_bytes: AtomicI64,
    /// Bytes of received batches not yet answered, held against the ingest budget.
    pub ingest_buffered_bytes: AtomicI64,
    pub ingest_budget_bytes: AtomicU64,
    /// Batches that waited for room in the ingest budget (backpressure applied).
    pub ingest_budget_waits: AtomicU64,
    pub commits: AtomicU64,
    pub commit_latency: Histogram,
    pub reports: AtomicU64,
    pub report_latency: Histogram,
    pub snapshots: AtomicU64,
    pub dropped_lines_reported: AtomicU64,
    pub otlp_records: AtomicU64,
    pub otlp_rejected: AtomicU64,
    /// Requests refused by each limit (`limits.rs`), in `Limit::ALL` order.
    refused: [AtomicU64; crate::refusal::Limit::ALL.len()],
    /// Searches running now, and jobs open now.
    pub searches_running: AtomicI64,
    pub jobs_open: AtomicI64,

    /// The metrics to alert on (`alert_metrics.rs`).
    pub alerting: crate::alert_metrics::AlertMetrics,
    /// Bounded storage: see [`StorageMetrics`].
    pub storage: StorageMetrics,
}

/// Bounded storage (`retention.rs`, `deletion.rs`, `snapshots/gc.rs`): updated when jobs and
/// contents are deleted and at each retention sweep, never computed when scraped.
#[derive(Default)]
pub struct StorageMetrics {
    /// Jobs deleted, by why (`crate::deletion::Why::ALL` order).
    jobs_deleted: [AtomicU64; crate::deletion::Why::ALL.len()],
    pub contents_deleted: AtomicU64,
    /// Bytes of indexes and of snapshot contents, as the last sweep read them from the store.
    pub index_bytes: AtomicU64,
    pub snapshot_bytes: AtomicU64,
    /// `--retain-max-bytes` (0: no bound).
    pub max_bytes: AtomicU64,
}

impl StorageMetrics {
    pub fn job_deleted(&self, why: crate::deletion::Why) {
        if let Some(i) = crate::deletion::Why::ALL.iter().position(|w| *w == why) {
            self.jobs_deleted[i].fetch_add(1, Relaxed);
        }
    }

    pub fn jobs_deleted(&self, why: crate::deletion::Why) -> u64 {
        crate::deletion::Why::ALL.iter().position(|w| *w == why).map_or(0, |i| self.jobs_deleted[i].load(Relaxed))
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP coroner_jobs_deleted_total Jobs deleted, by why (age: --retention, size: --retain-max-bytes, request: coroner delete).\n# TYPE coroner_jobs_deleted_total counter");
        for (why, n) in crate::deletion::Why::ALL.iter().zip(&self.jobs_deleted) {
            let _ = writeln!(out, "coroner_jobs_deleted_total{{reason=\"{}\"}} {}", why.name(), n.load(Relaxed));
        }
        let _ = writeln!(
            out,
            "# HELP coroner_snapshot_contents_deleted_total Snapshot contents deleted once no job named them.\n# TYPE coroner_snapshot_contents_deleted_total counter\ncoroner_snapshot_contents_deleted_total {}",
            self.contents_deleted.load(Relaxed)
        );
        let _ =
            writeln!(out, "# HELP coroner_storage_bytes Bytes on disk as the last retention sweep counted them, by kind.\n# TYPE coroner_storage_bytes gauge");
        let _ = writeln!(out, "coroner_storage_bytes{{kind=\"index\"}} {}", self.index_bytes.load(Relaxed));
        let _ = writeln!(out, "coroner_storage_bytes{{kind=\"snapshots\"}} {}", self.snapshot_bytes.load(Relaxed));
        let _ = writeln!(
            out,
            "# HELP coroner_storage_max_bytes The bound on indexes plus snapshots (--retain-max-bytes; 0: none).\n# TYPE coroner_storage_max_bytes gauge\ncoroner_storage_max_bytes {}",
            self.max_bytes.load(Relaxed)
        );
    }
}

/// Jobs by verdict and failed jobs by fault class, from the store's job tally (kept by triggers
/// as jobs change: a handful of rows whatever the number of jobs).
#[derive(Default)]
pub struct JobCounts {
    pub by_verdict: BTreeMap<String, u64>,
    pub failed_by_class: BTreeMap<String, u64>,
}

fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', " ")
}

impl JobCounts {
    /// The counts from the store's tally rows.
    pub fn from_tally(rows: &[coroner_store::TallyRow]) -> JobCounts {
        let mut counts = JobCounts::default();
        for r in rows {
            *counts.by_verdict.entry(r.verdict.clone()).or_default() += r.jobs;
            if r.verdict == "failed" {
                *counts.failed_by_class.entry(r.fault_class.clone().unwrap_or_else(|| "unknown".into())).or_default() += r.jobs;
            }
        }
        counts
    }
}

impl Metrics {
    pub fn limit_refused(&self, limit: crate::refusal::Limit) {
        if let Some(i) = crate::refusal::Limit::ALL.iter().position(|l| *l == limit) {
            self.refused[i].fetch_add(1, Relaxed);
        }
    }

    pub fn refused(&self, limit: crate::refusal::Limit) -> u64 {
        crate::refusal::Limit::ALL.iter().position(|l| *l == limit).map_or(0, |i| self.refused[i].load(Relaxed))
    }

    pub fn render(&self, jobs: &JobCounts) -> String {
        let mut out = String::new();
        let mut one = |name: &str, help: &str, kind: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        one("coroner_ingest_lines_total", "Log lines committed.", "counter", self.lines_ingested.load(Relaxed).to_string());
        one("coroner_ingest_bytes_total", "Log line bytes committed.", "counter", self.bytes_ingested.load(Relaxed).to_string());
        one("coroner_ingest_duplicate_lines_total", "Redelivered lines dropped as duplicates.", "counter", self.duplicate_lines.load(Relaxed).to_string());
        one("coroner_ingest_batches_total", "Log batches acknowledged.", "counter", self.batches.load(Relaxed).to_string());
        let streams = self.agents_connected.load(Relaxed).max(0);
        let buffered = self.ingest_buffered_bytes.load(Relaxed).max(0);
        one("coroner_ingest_agents_connected", "Agents with an open log stream (the same count as coroner_ingest_streams).", "gauge", streams.to_string());
        one("coroner_ingest_streams", "Open ShipLogs streams (one per connected agent).", "gauge", streams.to_string());
        one(
            "coroner_ingest_sessions",
            "Agent sessions held (forgotten once their process ended and no log stream uses them).",
            "gauge",
            self.ingest_sessions.load(Relaxed).max(0).to_string(),
        );
        one(
            "coroner_ingest_stream_buffered_bytes",
            "Ingest budget bytes held per open log stream, on average (coroner_ingest_buffered_bytes / coroner_ingest_streams).",
            "gauge",
            buffered.checked_div(streams).unwrap_or(0).to_string(),
        );
        one(
            "coroner_ingest_stream_window_bytes",
            "The most bytes one log stream may have sent beyond the ingest budget (its HTTP/2 window).",
            "gauge",
            crate::STREAM_WINDOW.to_string(),
        );
        one(
            "coroner_ingest_buffered_bytes",
            "Bytes of received log batches not yet committed and acknowledged.",
            "gauge",
            self.ingest_buffered_bytes.load(Relaxed).max(0).to_string(),
        );
        one(
            "coroner_ingest_budget_bytes",
            "The most bytes of log batches held before streams stop reading (--ingest-buffer-mb).",
            "gauge",
            self.ingest_budget_bytes.load(Relaxed).to_string(),
        );
        one(
            "coroner_ingest_budget_waits_total",
            "Log batches that waited for room in the ingest budget (backpressure).",
            "counter",
            self.ingest_budget_waits.load(Relaxed).to_string(),
        );
        one(
            "coroner_agent_spool_backlog_bytes",
            "Spool bytes connected agents hold unacknowledged, as they last reported.",
            "gauge",
            self.spool_backlog_bytes.load(Relaxed).max(0).to_string(),
        );
        one(
            "coroner_agent_dropped_lines_total",
            "Lines agents reported dropping (spool full).",
            "counter",
            self.dropped_lines_reported.load(Relaxed).to_string(),
        );
        one("coroner_otlp_log_records_total", "OTLP log records accepted.", "counter", self.otlp_records.load(Relaxed).to_string());
        one("coroner_otlp_rejected_log_records_total", "OTLP log records rejected (no job id).", "counter", self.otlp_rejected.load(Relaxed).to_string());
        one("coroner_index_commits_total", "Index commits.", "counter", self.commits.load(Relaxed).to_string());
        one("coroner_report_builds_total", "Reports computed.", "counter", self.reports.load(Relaxed).to_string());
        one("coroner_snapshots_stored_total", "Snapshots stored.", "counter", self.snapshots.load(Relaxed).to_string());
        one("coroner_searches_running", "Searches running now.", "gauge", self.searches_running.load(Relaxed).max(0).to_string());
        one(
            "coroner_jobs_open",
            "Jobs held open here (an index writer and the analysis state each).",
            "gauge",
            self.jobs_open.load(Relaxed).max(0).to_string(),
        );
        let _ =
            writeln!(out, "# HELP coroner_limits_refused_total Requests refused by a limit (docs/SECURITY.md).\n# TYPE coroner_limits_refused_total counter");
        for (l, n) in crate::refusal::Limit::ALL.iter().zip(&self.refused) {
            let _ = writeln!(out, "coroner_limits_refused_total{{limit=\"{}\"}} {}", l.name(), n.load(Relaxed));
        }
        self.commit_latency.render(&mut out, "coroner_index_commit_duration_seconds", "Index commit latency (add, commit, reader reload).");
        self.report_latency.render(&mut out, "coroner_report_duration_seconds", "Time to compute a job's report.");
        self.storage.render(&mut out);
        let _ = writeln!(out, "# HELP coroner_jobs Jobs the store holds, by verdict.\n# TYPE coroner_jobs gauge");
        for (v, n) in &jobs.by_verdict {
            let _ = writeln!(out, "coroner_jobs{{verdict=\"{}\"}} {n}", label(v));
        }
        let _ = writeln!(out, "# HELP coroner_jobs_failed Failed jobs by the fault class of their first failure.\n# TYPE coroner_jobs_failed gauge");
        for (c, n) in &jobs.failed_by_class {
            let _ = writeln!(out, "coroner_jobs_failed{{class=\"{}\"}} {n}", label(c));
        }
        self.alerting.render(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.commit_latency.observe(Duration::from_micros(500));
        m.commit_latency.observe(Duration::from_millis(30));
        let text = m.render(&JobCounts::default());
        assert!(text.contains("coroner_index_commit_duration_seconds_bucket{le=\"0.001\"} 1"), "{text}");
        assert!(text.contains("coroner_index_commit_duration_seconds_bucket{le=\"0.05\"} 2"), "{text}");
        assert!(text.contains("coroner_index_commit_duration_seconds_count 2"), "{text}");
    }

    #[test]
    fn job_counts_come_from_the_tally_and_failed_jobs_without_a_class_are_unknown() {
        let row = |verdict: &str, class: Option<&str>, jobs| coroner_store::TallyRow { verdict: verdict.into(), fault_class: class.map(Into::into), jobs };
        let counts = JobCounts::from_tally(&[row("failed", Some("nccl_error"), 3), row("failed", None, 1), row("succeeded", None, 7)]);
        let text = Metrics::default().render(&counts);
        for want in [
            "coroner_jobs{verdict=\"failed\"} 4",
            "coroner_jobs{verdict=\"succeeded\"} 7",
            "coroner_jobs_failed{class=\"nccl_error\"} 3",
            "coroner_jobs_failed{class=\"unknown\"} 1",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
    }

    #[test]
    fn deletions_are_counted_by_why() {
        let m = Metrics::default();
        m.storage.job_deleted(crate::deletion::Why::Size);
        m.storage.job_deleted(crate::deletion::Why::Size);
        let text = m.render(&JobCounts::default());
        assert!(text.contains("coroner_jobs_deleted_total{reason=\"size\"} 2"), "{text}");
        assert!(text.contains("coroner_jobs_deleted_total{reason=\"request\"} 0"), "{text}");
    }
}
