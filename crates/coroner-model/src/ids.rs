//! Typed identifiers. Ranks, sequence numbers and job ids are never bare integers or strings
//! in signatures, so a local rank cannot be passed where a global rank is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The id of one training job (a torchrun run id, a Slurm job id, or one the user chose).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(String);

/// Why a string cannot be a job id.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JobIdError {
    #[error("job id is empty")]
    Empty,
    #[error("job id is longer than 128 bytes")]
    TooLong,
    #[error("job id {0:?} holds characters other than letters, digits, '.', '_', '-' and ':'")]
    BadCharacter(String),
}

impl JobId {
    /// A job id names folders on disk and appears in URLs, so it is restricted to a safe alphabet.
    pub fn parse(s: &str) -> Result<Self, JobIdError> {
        if s.is_empty() {
            return Err(JobIdError::Empty);
        }
        if s.len() > 128 {
            return Err(JobIdError::TooLong);
        }
        if s.starts_with('.') || !s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':')) {
            return Err(JobIdError::BadCharacter(s.to_string()));
        }
        Ok(JobId(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for JobId {
    type Err = JobIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobId::parse(s)
    }
}

/// A global rank in the job's default process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Rank(pub u32);

/// The largest world size taken as stated (about a million ranks, far past any job today): the
/// analysis goes over every rank below the world size, so a corrupt or hostile one (four
/// billion) must not be believed.
pub const MAX_WORLD_SIZE: u32 = 1 << 20;

/// The first of the ranks that stand for a process whose rank no line tells (one `train.log`
/// from the field, a pasted traceback): far above [`MAX_WORLD_SIZE`], so never a real rank.
const FIRST_UNKNOWN: u32 = u32::MAX - 4095;

impl Rank {
    /// The `i`-th process of unknown rank (one per log that does not say whose it is). The
    /// analysis reasons about it like any rank; the report never shows it as a number.
    pub fn unknown(i: u32) -> Rank {
        Rank(FIRST_UNKNOWN.saturating_add(i.min(4095)))
    }

    /// Whether this stands for a process of unknown rank rather than a real rank.
    pub fn is_unknown(self) -> bool {
        self.0 >= FIRST_UNKNOWN
    }

    /// The rank for a report: `None` for a process of unknown rank.
    pub fn known(self) -> Option<Rank> {
        (!self.is_unknown()).then_some(self)
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.checked_sub(FIRST_UNKNOWN) {
            Some(0) => f.write_str("unknown"),
            Some(i) => write!(f, "unknown #{}", i + 1),
            None => write!(f, "{}", self.0),
        }
    }
}

/// A host name as the rank's agent or its log lines report it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct HostId(pub String);

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A collective sequence number within one process group (PyTorch's `SeqNum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SeqNo(pub u64);

impl fmt::Display for SeqNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A process group, as c10d names it (`0`, `0(default_pg)`, a GUID). The default group is `"0"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PgId(pub String);

impl PgId {
    pub fn default_pg() -> Self {
        PgId("0".to_string())
    }
}

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_of_unknown_processes_are_never_real_ranks_and_print_as_unknown() {
        assert!(Rank::unknown(0).is_unknown() && Rank::unknown(4095).is_unknown());
        assert!(!Rank(MAX_WORLD_SIZE).is_unknown());
        assert_eq!(Rank::unknown(0).to_string(), "unknown");
        assert_eq!(Rank::unknown(1).to_string(), "unknown #2");
        assert_eq!((Rank(3).known(), Rank::unknown(2).known()), (Some(Rank(3)), None));
    }

    #[test]
    fn job_ids_are_restricted_to_a_path_safe_alphabet() {
        assert!(JobId::parse("torchrun_oom-r1:2026.11").is_ok());
        assert_eq!(JobId::parse(""), Err(JobIdError::Empty));
        assert!(matches!(JobId::parse("../etc"), Err(JobIdError::BadCharacter(_))));
        assert!(matches!(JobId::parse("a/b"), Err(JobIdError::BadCharacter(_))));
        assert!(matches!(JobId::parse(".hidden"), Err(JobIdError::BadCharacter(_))));
        assert_eq!(JobId::parse(&"x".repeat(129)), Err(JobIdError::TooLong));
    }
}
