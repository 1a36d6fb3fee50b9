//! Bundle import: the fuzz input's `==> name <==` sections are written as the files of a bundle
//! folder (lines.jsonl, exits.json, raw logs, snapshots) and loaded through
//! `coroner_bundle::load_paths` into a `JobPipeline`, as `coroner analyze` does; then the report is
//! made, rendered as text and as JSON.
//!
//! Checked: no panic; loading fails only for input without lines; the lines loaded are bounded by
//! the input's line ends; the report is for this job, in the current format, and its JSON reads
//! back as a report.

#![no_main]

use coroner_analysis::RuleSet;
use coroner_bundle::{load_paths, BundleError};
use coroner_fuzz::bundle_sections;
use coroner_model::{Report, REPORT_FORMAT_VERSION};
use coroner_pipeline::JobPipeline;
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

/// One scratch folder per fuzzing process (TMPDIR picks where; scripts/fuzz.sh uses /dev/shm).
fn scratch() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::Builder::new().prefix("coroner-fuzz-bundle").tempdir().expect("create a scratch folder"))
}

fn rules() -> &'static RuleSet {
    static RULES: OnceLock<RuleSet> = OnceLock::new();
    RULES.get_or_init(RuleSet::builtin)
}

fuzz_target!(|data: &[u8]| {
    let sections = bundle_sections(data);
    let dir: PathBuf = scratch().path().join("job");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the bundle folder");
    for (name, body) in &sections {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create a bundle subfolder");
        }
        std::fs::write(&path, body).expect("write a bundle file");
    }
    // Every loaded line comes from one line of one file.
    let max_lines: u64 = sections.iter().map(|(_, b)| b.iter().filter(|c| **c == b'\n').count() as u64 + 1).sum();

    let mut pipeline = JobPipeline::new("fuzz");
    match load_paths(std::slice::from_ref(&dir), &mut pipeline) {
        Ok(summary) => {
            assert!(summary.lines > 0);
            assert!(summary.lines <= max_lines, "{} lines from input with {max_lines} line ends", summary.lines);
            assert!(summary.files <= sections.len());
            assert!(pipeline.lines_seen() <= summary.lines);
        }
        Err(BundleError::Empty { .. }) => return,
        Err(e) => panic!("loading a readable folder failed: {e}"),
    }
    let report = pipeline.report(rules());
    assert_eq!(report.job_id, "fuzz");
    assert_eq!(report.format_version, REPORT_FORMAT_VERSION);
    let text = coroner_analysis::text::render(&report);
    assert!(!text.is_empty());
    let json = serde_json::to_string(&report).expect("a report serializes");
    let back: Report = serde_json::from_str(&json).unwrap_or_else(|e| panic!("a report's JSON does not read back ({e}): {json}"));
    assert_eq!(back.job_id, report.job_id);
});
