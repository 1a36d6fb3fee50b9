//! `coroner analyze`, in process: paths in, report out. The CLI and the field harness
//! (`coroner-field`) call this one function, so what the harness scores is what a user gets.

use crate::{load_paths, BundleError, LoadSummary};
use coroner_analysis::RuleSet;
use coroner_model::Report;
use coroner_pipeline::JobPipeline;
use std::path::PathBuf;

/// A finished offline analysis: the report, what was read, and the pipeline (for its evidence).
pub struct Analysis {
    pub report: Report,
    pub summary: LoadSummary,
    pub pipeline: JobPipeline,
}

/// Reads `paths` (bundles, folders, log files, `-` for stdin) as job `job` and writes its report.
pub fn analyze(paths: &[PathBuf], job: &str, rules: &RuleSet) -> Result<Analysis, BundleError> {
    let mut pipeline = JobPipeline::new(job);
    let summary = load_paths(paths, &mut pipeline)?;
    // Offline, what a launcher said of the world size (its rendezvous result) is the best there is.
    if let Some(n) = pipeline.said_world_size() {
        pipeline.set_world_size(n);
    }
    let report = pipeline.report(rules);
    Ok(Analysis { report, summary, pipeline })
}
