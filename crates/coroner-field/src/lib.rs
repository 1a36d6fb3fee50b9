//! The field harness: scores `coroner analyze` on the field corpus (`tests/data/field`, real log
//! excerpts from public bug reports, each `<id>/label.toml` + `<id>/input/`).
//!
//! For each case it runs the product's own offline path ([`coroner_bundle::analyze`]) on
//! `input/` as the owner of the logs would: one file is given as that file, several as the
//! folder. The label is read only here, to score: right means the verdict is the labelled one
//! and, for a failed job, the first failure's class is one of the accepted `classes` and, where
//! the label names a `culprit`, the culprit rank is that one.
//!
//! The corpus is split in two halves by a hash of the case id ([`Half`]): develop against one,
//! check the other now and then, so a fix that only fits the excerpts in view shows up.
//! [`baseline`] is the "first error-looking line plus keywords" script the product must beat.

pub mod baseline;
pub mod cli;
pub mod corpus;
pub mod score;

pub use corpus::{Case, Half, Label};
pub use score::{Got, Outcome, Scores};

use coroner_analysis::RuleSet;
use std::path::{Path, PathBuf};

/// What coroner (or the baseline) concluded on one case.
pub fn run_coroner(case: &Case, rules: &RuleSet) -> Got {
    let paths = case.input_paths();
    match coroner_bundle::analyze(&paths, &case.id, rules) {
        Ok(a) => Got::from_report(&a.report),
        Err(e) => Got::error(e.to_string()),
    }
}

/// Runs every case (or those whose id contains `only`) through coroner and, if asked, the baseline.
pub fn run_all(dir: &Path, only: Option<&str>, with_baseline: bool) -> Result<Vec<Outcome>, corpus::CorpusError> {
    let rules = RuleSet::builtin();
    let cases = corpus::load(dir)?;
    Ok(cases
        .into_iter()
        .filter(|c| only.is_none_or(|o| c.id.contains(o)))
        .map(|case| {
            let got = run_coroner(&case, &rules);
            let base = with_baseline.then(|| baseline::run(&case.input_paths()));
            Outcome::new(case, got, base)
        })
        .collect())
}

/// The corpus folder of this repository (for tests and the default of the command line).
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/field")
}
