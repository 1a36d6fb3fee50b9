//! Sources on disk for the pipeline: the capture bundle format v1 (see the corpus README), plain
//! per-rank log files, and combined logs whose lines carry rank prefixes.
//!
//! Reading is forgiving: a file it cannot use becomes a warning and the rest is still read. Only
//! a path that does not exist, or input with no lines at all, is an error.

mod bundle;
mod lines;
mod logfile;
mod snapshots;

pub use bundle::{load_paths, LoadSummary};

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

/// The longest line kept whole for analysis; longer ones are cut with a marker.
pub const MAX_LINE_BYTES: usize = 1 << 20;
