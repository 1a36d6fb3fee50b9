//! What a report is computed from, copied out of the pipeline so that the analysis can run
//! without holding it: coronerd takes a [`ReportInput`] under the job's lock, lets the lock go,
//! and analyzes the copy, so new lines are never kept waiting by a report.

use coroner_analysis::{JobEvidence, RuleSet};
use coroner_model::{Report, SuspectedHang, Verdict};

/// The evidence as of one moment (open blocks closed on copies) and the live findings to show.
#[derive(Debug, Clone)]
pub struct ReportInput {
    pub evidence: JobEvidence,
    /// What the live monitor's owner last decided to show; attached only to a running verdict.
    pub live_findings: Vec<SuspectedHang>,
    /// A job started more than once: each attempt's share of the evidence, in order (empty for
    /// a job of one attempt).
    pub attempts: Vec<(u32, JobEvidence)>,
}

impl ReportInput {
    /// The report over this evidence: a pure function of it and the rules.
    pub fn report(&self, rules: &RuleSet) -> Report {
        let report = if self.attempts.is_empty() {
            coroner_analysis::analyze(&self.evidence, rules)
        } else {
            coroner_analysis::attempts::analyze_attempts(&self.evidence, &self.attempts, rules)
        };
        with_live_findings(report, &self.live_findings)
    }
}

/// The live findings go with a running verdict only (a finished job has no suspects).
fn with_live_findings(mut report: Report, findings: &[SuspectedHang]) -> Report {
    if report.verdict == Verdict::Running {
        report.live_findings = findings.to_vec();
    }
    report
}
