//! A flight recorder dump as the analysis reads it: one rank's recent collective and
//! point-to-point operations per process group, typed (`coroner-snapshot` reads the pickle or JSON
//! PyTorch writes; `coroner-analysis` matches the dumps of all ranks).
//!
//! The rank is not in the dump (PyTorch puts it in the file name), so a dump is always held beside
//! its rank. What is kept is bounded: at most [`MAX_OPS_PER_GROUP`] of the newest operations of each
//! process group, each call stack once per dump ([`FrDump::stacks`]), its user frames only.

use crate::{PgId, SeqNo};
use std::collections::BTreeMap;

/// The newest operations of each process group a dump keeps. A training step issues one to a few
/// hundred collectives; 128 covers the point where ranks parted and several steps of each rank's
/// history before it in data-parallel jobs, at about 30 KiB per group and rank.
pub const MAX_OPS_PER_GROUP: usize = 128;

/// The frames of a call stack a dump keeps (innermost user frames).
pub const MAX_FRAMES: usize = 6;

/// The counter that orders an operation within its process group: collectives (coalesced groups
/// share one number) and point-to-point operations are numbered apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrSeq {
    Collective(u64),
    P2p(u64),
}

impl std::fmt::Display for FrSeq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrSeq::Collective(s) => write!(f, "seq {s}"),
            FrSeq::P2p(s) => write!(f, "p2p seq {s}"),
        }
    }
}

/// How far an operation got, as its rank's watchdog last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FrState {
    Scheduled,
    Started,
    Completed,
}

impl FrState {
    pub fn as_str(self) -> &'static str {
        match self {
            FrState::Scheduled => "scheduled",
            FrState::Started => "started",
            FrState::Completed => "completed",
        }
    }
}

/// One Python frame of the call that issued an operation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FrFrame {
    pub name: String,
    pub file: String,
    pub line: u32,
}

impl std::fmt::Display for FrFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = self.file.rsplit('/').next().unwrap_or(&self.file);
        write!(f, "{} ({file}:{})", self.name, self.line)
    }
}

/// One recorded operation.
#[derive(Debug, Clone, PartialEq)]
pub struct FrOp {
    pub record_id: Option<u64>,
    /// The process group's name (`"0"`), as the entry's `process_group` says.
    pub pg: PgId,
    pub seq: FrSeq,
    pub op_id: Option<u64>,
    /// `nccl`, `gloo`, `xccl`, `ncclx`: the part of the profiling name before `:`.
    pub backend: String,
    /// `all_reduce`, `broadcast`, `send`, `coalesced`, `allreduce_coalesced`.
    pub op: String,
    /// What follows the op in the profiling name: `1->2` for a send from group rank 1 to 2.
    pub detail: Option<String>,
    pub input_sizes: Vec<Vec<i64>>,
    pub output_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<String>,
    pub output_dtypes: Vec<String>,
    pub state: FrState,
    /// The work is over (gloo never marks an entry completed; it retires it).
    pub retired: bool,
    /// On the rank's host clock, ns since the epoch.
    pub created_ns: Option<i64>,
    pub started_ns: Option<i64>,
    pub completed_ns: Option<i64>,
    pub duration_ms: Option<f64>,
    pub timeout_ms: Option<u64>,
    /// Index into [`FrDump::stacks`].
    pub stack: Option<u32>,
}

impl FrOp {
    pub fn is_p2p(&self) -> bool {
        matches!(self.seq, FrSeq::P2p(_))
    }

    /// Completed, or retired (gloo): nobody waits in it any more.
    pub fn done(&self) -> bool {
        self.state == FrState::Completed || self.retired
    }
}

/// What a dump says about one process group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrGroup {
    pub desc: String,
    /// Global ranks, when `pg_config` lists them (gloo's subgroups list none).
    pub ranks: Vec<u32>,
    pub last_enqueued: Option<SeqNo>,
    pub last_started: Option<SeqNo>,
    pub last_completed: Option<SeqNo>,
}

/// One rank's dump, bounded (see the module header).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrDump {
    /// The dump format's version (`2.10`).
    pub version: String,
    /// `pickle` or `json`.
    pub encoding: String,
    pub groups: BTreeMap<PgId, FrGroup>,
    /// Oldest first.
    pub ops: Vec<FrOp>,
    pub stacks: Vec<Vec<FrFrame>>,
    /// Entries left out: older than the newest [`MAX_OPS_PER_GROUP`] of their group.
    pub dropped: u64,
}

impl FrDump {
    pub fn stack_of(&self, op: &FrOp) -> &[FrFrame] {
        op.stack.and_then(|i| self.stacks.get(i as usize)).map_or(&[], Vec::as_slice)
    }

    /// The newer of two dumps of one rank: the one whose newest operation is newer.
    pub fn newest_record(&self) -> Option<u64> {
        self.ops.iter().filter_map(|o| o.record_id).max()
    }
}
