//! The metrics to alert on (docs/NOTIFY.md, `deploy/prometheus/alerts.yml`), kept apart from the
//! ingest and query metrics of `metrics.rs`. Each is updated where its fact changes, never
//! computed at scrape time: a failure when a job's report turns failed (`job/reporter.rs`), a
//! suspected hang when the live ticker raises or withdraws one (`job/live_ticker.rs`), the
//! suspect hosts when a failure changes the history (`notify/`), a delivery when it ends.
//! Labels are bounded: fault classes, configured sink names, outcomes.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// The build's version and commit (`build.rs`: the `CORONER_COMMIT` variable at build time,
/// else `git rev-parse`, else `unknown`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const COMMIT: &str = env!("CORONER_COMMIT");

/// How a delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Delivered,
    /// An attempt failed and another follows.
    Retried,
    /// Given up.
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Retried => "retried",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Default)]
pub struct AlertMetrics {
    failures: Mutex<BTreeMap<String, u64>>,
    /// Ranks the live monitor suspects of hanging now, over the jobs open here.
    pub suspected_hangs: AtomicI64,
    /// Hosts `coroner suspects` flags now.
    pub suspect_hosts: AtomicI64,
    notifications: Mutex<BTreeMap<(String, Outcome), u64>>,
    /// Events dropped because the notifier's queue was full.
    pub notifications_dropped: AtomicU64,
}

impl AlertMetrics {
    /// A job's verdict turned failed, its first failure of `class`.
    pub fn job_failed(&self, class: &str) {
        *self.failures.lock().unwrap_or_else(|p| p.into_inner()).entry(class.to_string()).or_default() += 1;
    }

    pub fn notified(&self, sink: &str, outcome: Outcome) {
        *self.notifications.lock().unwrap_or_else(|p| p.into_inner()).entry((sink.to_string(), outcome)).or_default() += 1;
    }

    pub fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP coroner_build_info The running coronerd's version and commit.\n# TYPE coroner_build_info gauge");
        let _ = writeln!(out, "coroner_build_info{{version=\"{}\",commit=\"{}\"}} 1", label(VERSION), label(COMMIT));
        let _ = writeln!(out, "# HELP coroner_job_failures_total Jobs whose verdict turned failed, by the fault class of their first failure.\n# TYPE coroner_job_failures_total counter");
        for (class, n) in self.failures.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "coroner_job_failures_total{{class=\"{}\"}} {n}", label(class));
        }
        let gauges = [
            ("coroner_suspected_hangs", "Ranks suspected of hanging now, over the running jobs this instance owns.", &self.suspected_hangs),
            ("coroner_suspect_hosts", "Hosts the failure history flags to drain now (coroner suspects).", &self.suspect_hosts),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}", v.load(Relaxed).max(0));
        }
        let _ = writeln!(out, "# HELP coroner_notifications_total Notification deliveries by sink and outcome (delivered, retried, failed).\n# TYPE coroner_notifications_total counter");
        for ((sink, outcome), n) in self.notifications.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "coroner_notifications_total{{sink=\"{}\",outcome=\"{}\"}} {n}", label(sink), outcome.as_str());
        }
        let _ = writeln!(
            out,
            "# HELP coroner_notifications_dropped_total Events dropped because the notifier's queue was full.\n# TYPE coroner_notifications_dropped_total counter\ncoroner_notifications_dropped_total {}",
            self.notifications_dropped.load(Relaxed)
        );
    }
}

fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_the_shipped_alert_rules_name_is_exported() {
        let rules = include_str!("../../../deploy/prometheus/alerts.yml");
        let text = crate::metrics::Metrics::default().render(&crate::metrics::JobCounts::default());
        let named: std::collections::BTreeSet<&str> =
            rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("coroner_")).collect();
        assert!(named.len() >= 4, "the rules name coronerd's metrics: {named:?}");
        for name in named {
            assert!(text.contains(&format!("# TYPE {name} ")), "deploy/prometheus/alerts.yml names {name}, which coronerd does not export");
        }
    }

    #[test]
    fn each_metric_renders_with_its_labels() {
        let m = AlertMetrics::default();
        m.job_failed("nccl_error");
        m.job_failed("nccl_error");
        m.job_failed("cuda_oom");
        m.suspected_hangs.store(2, Relaxed);
        m.notified("oncall", Outcome::Retried);
        m.notified("oncall", Outcome::Delivered);
        let mut text = String::new();
        m.render(&mut text);
        for want in [
            "coroner_job_failures_total{class=\"nccl_error\"} 2",
            "coroner_job_failures_total{class=\"cuda_oom\"} 1",
            "coroner_suspected_hangs 2",
            "coroner_suspect_hosts 0",
            "coroner_notifications_total{sink=\"oncall\",outcome=\"delivered\"} 1",
            "coroner_notifications_total{sink=\"oncall\",outcome=\"retried\"} 1",
            "coroner_build_info{version=\"",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
    }
}
