//! A job's attempts: the same job started again after a failure (torchrun's `--max-restarts`, a
//! Slurm requeue, a restarted pod). Attempt 0 is the first start; each restart is the next number.
//! The report tells the attempts apart: the one that failed first, and what each later one did.

use crate::{FaultClass, Rank, Verdict};
use serde::{Deserialize, Serialize};

/// What one attempt did, beside the attempt that failed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// Ended cleanly with no earlier failure.
    Succeeded,
    /// The job's first failure.
    FailedFirst,
    /// Ended cleanly after an earlier attempt failed.
    Recovered,
    /// Failed again with the first failure's class on the same rank.
    FailedSame,
    /// Failed again, with another class or on another rank.
    FailedDifferently,
    /// Still running.
    Running,
    /// Ended without a verdict the evidence supports.
    Unknown,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::FailedFirst => "failed first",
            AttemptOutcome::Recovered => "recovered",
            AttemptOutcome::FailedSame => "failed the same way",
            AttemptOutcome::FailedDifferently => "failed differently",
            AttemptOutcome::Running => "still running",
            AttemptOutcome::Unknown => "unknown",
        }
    }
}

/// One attempt of a job, as the report lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptSummary {
    /// 0 for the first start of the job.
    pub attempt: u32,
    /// That attempt's own verdict.
    pub verdict: Verdict,
    pub outcome: AttemptOutcome,
    /// The rank that failed first in this attempt, when one did.
    pub failed_rank: Option<Rank>,
    pub class: Option<FaultClass>,
    /// The first failure's summary, when there was one.
    pub summary: Option<String>,
    /// RFC 3339 on the capturing host's clock: when this attempt's evidence begins.
    pub started: Option<String>,
    /// Ranks with lines or ends in this attempt.
    pub ranks: u32,
}
