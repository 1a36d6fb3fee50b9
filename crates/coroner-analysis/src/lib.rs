//! The heart of coroner: from a job's evidence to its report. Pure: no IO, no clocks of its own,
//! the same evidence always gives the same report.
//!
//! The steps: align the ranks' clocks ([`clock`]), classify every event by the rules ([`rules`]),
//! read collective progress ([`progress`]), find each rank's first-hand failure, decide the first
//! failing rank (or the stuck one, or the deviating one; [`flight`] matches flight recorder dumps
//! across ranks), and write the [`Report`].

pub mod attempts;
mod cancel;
mod cascade;
pub mod causality;
mod classified;
pub mod clock;
mod diagnose;
mod diagnosis;
pub mod evidence;
mod findings;
pub mod flight;
mod gpu_memory;
mod hang;
mod hardware;
pub mod history;
mod launcher_stop;
pub mod live;
mod majority;
#[cfg(test)]
mod mechanism_tests;
mod mismatch;
mod never_issued;
mod pace;
mod partial;
pub mod progress;
mod report;
pub mod rules;
pub mod signature;
mod stall;
pub mod steps;
pub mod text;

pub use evidence::{FrRow, JobEvidence, RankEvidence};
pub use rules::{RuleSet, RulesError};
pub use steps::{StepLog, StepMark, StepTime, MAX_STEPS_PER_RANK};

use coroner_model::Report;

/// Analyses a job. The same evidence and rules always give the same report.
pub fn analyze(evidence: &JobEvidence, rules: &RuleSet) -> Report {
    if !evidence.ends.is_sorted_by_key(|e| e.rank) {
        let mut sorted = evidence.clone();
        sorted.sort_ends();
        return analyze(&sorted, rules);
    }
    let clock = clock::align(evidence);
    let job = classified::classify(evidence, rules, &clock);
    let progress = progress::collect(evidence);
    let flight = flight::from_evidence(evidence, &job, &clock);
    let diagnosis = diagnose::diagnose(evidence, &job, rules, &clock, &progress, flight.as_ref());
    let mut report = report::build(evidence, rules, &job, &clock, &progress, &diagnosis);
    report.flight_recorder = flight;
    report
}
