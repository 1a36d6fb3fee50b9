//! Prometheus metrics, named `coroner_<subsystem>_<name>_<unit>`, updated per batch.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::collections::BTreeMap;

#[derive(Default)]
pub struct Metrics {
    pub lines_ingested: AtomicU64,
    pub bytes_ingested: AtomicU64,
    pub duplicate_lines: AtomicU64,
    pub batches: AtomicU64,
    pub agents_connected: AtomicI64,
    pub commits: AtomicU64,
    pub commit_seconds_sum_us: AtomicU64,
    pub reports: AtomicU64,
    pub report_seconds_sum_us: AtomicU64,
    pub snapshots: AtomicU64,
    pub dropped_lines_reported: AtomicU64,
    pub failures_by_class: Mutex<BTreeMap<String, u64>>,
}

impl Metrics {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, kind: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        counter("coroner_ingest_lines_total", "Log lines committed.", "counter", self.lines_ingested.load(Relaxed).to_string());
        counter("coroner_ingest_bytes_total", "Log line bytes committed.", "counter", self.bytes_ingested.load(Relaxed).to_string());
        counter("coroner_ingest_duplicate_lines_total", "Redelivered lines dropped as duplicates.", "counter", self.duplicate_lines.load(Relaxed).to_string());
        counter("coroner_ingest_batches_total", "Log batches acknowledged.", "counter", self.batches.load(Relaxed).to_string());
        counter("coroner_ingest_agents_connected", "Agents with an open log stream.", "gauge", self.agents_connected.load(Relaxed).to_string());
        counter("coroner_agent_dropped_lines_total", "Lines agents reported dropping (spool full).", "counter", self.dropped_lines_reported.load(Relaxed).to_string());
        counter("coroner_index_commits_total", "Index commits.", "counter", self.commits.load(Relaxed).to_string());
        counter("coroner_index_commit_seconds_sum", "Time spent in index commits.", "counter", format!("{:.6}", self.commit_seconds_sum_us.load(Relaxed) as f64 / 1e6));
        counter("coroner_report_builds_total", "Reports computed.", "counter", self.reports.load(Relaxed).to_string());
        counter("coroner_report_seconds_sum", "Time spent computing reports.", "counter", format!("{:.6}", self.report_seconds_sum_us.load(Relaxed) as f64 / 1e6));
        counter("coroner_snapshots_stored_total", "Snapshots stored.", "counter", self.snapshots.load(Relaxed).to_string());
        let _ = writeln!(out, "# HELP coroner_jobs_failures_total Failed jobs by fault class.\n# TYPE coroner_jobs_failures_total gauge");
        if let Ok(map) = self.failures_by_class.lock() {
            for (class, n) in map.iter() {
                let _ = writeln!(out, "coroner_jobs_failures_total{{class=\"{class}\"}} {n}");
            }
        }
        out
    }
}
