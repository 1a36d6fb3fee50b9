//! Sources on disk for the pipeline: the capture bundle format v1 (see the corpus README), plain
//! per-rank log files, and combined logs whose lines carry rank prefixes.
//!
//! Reading is forgiving: a file it cannot use becomes a warning and the rest is still read. Only
//! a path that does not exist, or input with no lines at all, is an error.
//!
//! Memory is bounded whatever the input's size: logs are streamed line by line into the sink
//! (`plain_log.rs`, `line_reader.rs`: a line is cut at [`MAX_LINE_BYTES`] as it is read), never
//! read whole; only small files (a bundle's JSON, snapshots, flight recorder dumps) are.

mod analyze;
#[cfg(test)]
mod bounded_tests;
mod bundle;
pub mod dumps;
mod line_reader;
mod lines;
mod logfile;
mod plain_log;
mod progress;
pub mod snapshots;
mod walk;

pub use analyze::{analyze, analyze_with_progress, Analysis};
pub use bundle::{load_paths, rank_from_name, LoadSummary};
pub use coroner_pipeline::LogSurvey;
/// What the snapshot readers make of a file, as a [`Sink`] receives it.
pub use coroner_snapshot::Facts as SnapshotFacts;
pub use progress::Progress;

use coroner_model::{LogLine, ProcessEnd, SnapshotSummary};
use coroner_pipeline::JobPipeline;
use std::path::Path;

/// Where loaded evidence goes: the pipeline (offline analysis) or a server (import).
pub trait Sink {
    fn line(&mut self, line: LogLine);
    /// A whole log no session or file name owns (one `train.log`, `dmesg`, standard input),
    /// named `source`, begins: `survey` has seen all its lines (a first pass), which then come
    /// through [`Sink::log_line`], then [`Sink::end_log`]. By default its lines are given one by
    /// one to [`Sink::line`], filed by their prefixes.
    fn begin_log(&mut self, _source: &str, _survey: &LogSurvey) {}
    fn log_line(&mut self, line: LogLine) {
        self.line(line);
    }
    fn end_log(&mut self) {}
    fn end(&mut self, end: ProcessEnd);
    fn world_size(&mut self, n: u32);
    /// A snapshot file, found in `bundle_dir` under `summary.name` (`summary` without highlights),
    /// and what its readers made of it (a sink that keeps the file itself, like an import to a
    /// server that reads it there, can ignore `facts`).
    fn snapshot(&mut self, summary: SnapshotSummary, facts: SnapshotFacts, bundle_dir: &Path);
    fn note(&mut self, note: String);
    /// The input is plain logs, not a capture bundle: nothing but the lines tells how processes ended.
    fn plain_logs(&mut self) {}
    /// A per-node launcher's own exit status (`launcher.exit.json`).
    fn launcher_end(&mut self, _exit_code: Option<i32>) {}
    fn finished(&mut self);
    /// How far the load has come (every [`progress::STEP_BYTES`] of a log, and per file).
    fn progress(&mut self, _progress: &Progress) {}
}

impl Sink for JobPipeline {
    fn line(&mut self, line: LogLine) {
        self.push_line(line);
    }
    fn begin_log(&mut self, source: &str, survey: &LogSurvey) {
        JobPipeline::begin_log(self, source, survey);
    }
    fn log_line(&mut self, line: LogLine) {
        self.push_log_line(line);
    }
    fn end_log(&mut self) {
        JobPipeline::end_log(self);
    }
    fn end(&mut self, end: ProcessEnd) {
        self.add_end(end);
    }
    fn world_size(&mut self, n: u32) {
        self.set_world_size(n);
    }
    fn snapshot(&mut self, summary: SnapshotSummary, facts: SnapshotFacts, _bundle_dir: &Path) {
        self.add_snapshot_facts(summary, facts);
    }
    fn note(&mut self, note: String) {
        self.add_note(note);
    }
    fn plain_logs(&mut self) {
        self.set_plain_logs();
    }
    fn launcher_end(&mut self, exit_code: Option<i32>) {
        self.add_launcher_end(exit_code, None);
    }
    fn finished(&mut self) {
        self.set_finished(true);
    }
}

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} does not exist")]
    Missing { path: PathBuf },
    #[error("no log lines found in {paths} (expected a capture bundle folder, rank*.log files or a combined log)")]
    Empty { paths: String },
}

/// The longest line kept whole for analysis; longer ones are cut with a marker (the same limit
/// as the agent's and the server's).
pub use coroner_model::MAX_LINE_BYTES;
