//! `coroner analyze`, in process: paths in, report out. The CLI and the field harness
//! (`coroner-field`) call this one function, so what the harness scores is what a user gets.

use crate::{load_paths, BundleError, LoadSummary, LogSurvey, Progress, Sink, SnapshotFacts};
use coroner_analysis::RuleSet;
use coroner_model::{LogLine, ProcessEnd, Report, SnapshotSummary};
use coroner_pipeline::JobPipeline;
use std::path::{Path, PathBuf};

/// A finished offline analysis: the report, what was read, and the pipeline (for its evidence).
pub struct Analysis {
    pub report: Report,
    pub summary: LoadSummary,
    pub pipeline: JobPipeline,
}

/// Reads `paths` (bundles, folders, log files, `-` for stdin) as job `job` and writes its report.
pub fn analyze(paths: &[PathBuf], job: &str, rules: &RuleSet) -> Result<Analysis, BundleError> {
    analyze_with_progress(paths, job, rules, &mut |_| {})
}

/// [`analyze`], telling `progress` how far the reading has come (for a progress bar).
pub fn analyze_with_progress(paths: &[PathBuf], job: &str, rules: &RuleSet, progress: &mut dyn FnMut(&Progress)) -> Result<Analysis, BundleError> {
    let mut pipeline = JobPipeline::new(job);
    let summary = load_paths(paths, &mut Watched { pipeline: &mut pipeline, progress })?;
    // Offline, what a launcher said of the world size (its rendezvous result) is the best there is.
    if let Some(n) = pipeline.said_world_size() {
        pipeline.set_world_size(n);
    }
    let report = pipeline.report(rules);
    Ok(Analysis { report, summary, pipeline })
}

/// The pipeline as a sink, with the load's progress going to a callback.
struct Watched<'a> {
    pipeline: &'a mut JobPipeline,
    progress: &'a mut dyn FnMut(&Progress),
}

impl Sink for Watched<'_> {
    fn line(&mut self, line: LogLine) {
        self.pipeline.line(line);
    }
    fn begin_log(&mut self, source: &str, survey: &LogSurvey) {
        Sink::begin_log(self.pipeline, source, survey);
    }
    fn log_line(&mut self, line: LogLine) {
        self.pipeline.log_line(line);
    }
    fn end_log(&mut self) {
        Sink::end_log(self.pipeline);
    }
    fn end(&mut self, end: ProcessEnd) {
        self.pipeline.end(end);
    }
    fn world_size(&mut self, n: u32) {
        Sink::world_size(self.pipeline, n);
    }
    fn snapshot(&mut self, summary: SnapshotSummary, facts: SnapshotFacts, bundle_dir: &Path) {
        self.pipeline.snapshot(summary, facts, bundle_dir);
    }
    fn note(&mut self, note: String) {
        self.pipeline.note(note);
    }
    fn plain_logs(&mut self) {
        self.pipeline.plain_logs();
    }
    fn launcher_end(&mut self, exit_code: Option<i32>) {
        self.pipeline.launcher_end(exit_code);
    }
    fn finished(&mut self) {
        self.pipeline.finished();
    }
    fn progress(&mut self, progress: &Progress) {
        (self.progress)(progress);
    }
}
