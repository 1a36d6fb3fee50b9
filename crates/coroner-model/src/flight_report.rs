//! The report's `flight_recorder` section: what matching every rank's flight recorder dump found.
//! Written by `coroner-analysis` (`flight/`), shown by the report text, `coroner fr` and the job page.

use crate::Rank;
use serde::{Deserialize, Serialize};

/// The rule that named the divergent rank(s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrRule {
    /// At the first sequence number where ranks disagree, a strict majority of the group's ranks
    /// (counting those without a dump against it) issued one thing; the others issued another.
    MajorityAtSeq,
    /// Only the minority issued an operation the majority never issued.
    OnlyRankIssuedIt,
    /// The rank(s) never issued an operation every other rank issued and waits in.
    NeverIssued,
    /// No majority (two ranks, or a tie): the rank whose operation has no precedent in its own
    /// earlier entries, while the others' is one they issued before.
    OwnHistory,
    /// Same operation and sizes, issued from a line of code the rank never issued it from before,
    /// where the others issued it from their usual line.
    CallSite,
    /// Every rank that dumped agrees and waits; the one rank without a dump died first (its log says).
    DiedBeforeItDumped,
    /// Every rank that dumped agrees and waits; exactly one member left no dump, and nothing says
    /// it was killed from outside.
    OnlyRankWithoutADump,
    /// Every rank issued the same operation, one of them later than the others by more than the
    /// operation's timeout: the others gave up waiting for it.
    EnteredLast,
}

impl FrRule {
    pub fn as_str(self) -> &'static str {
        match self {
            FrRule::MajorityAtSeq => "majority at seq",
            FrRule::OnlyRankIssuedIt => "only rank issued it",
            FrRule::NeverIssued => "never issued",
            FrRule::OwnHistory => "own history",
            FrRule::CallSite => "call site",
            FrRule::DiedBeforeItDumped => "died before it dumped",
            FrRule::OnlyRankWithoutADump => "only rank without a dump",
            FrRule::EnteredLast => "entered last",
        }
    }
}

impl std::fmt::Display for FrRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlightRecorderReport {
    /// Ranks whose dump was read.
    pub dumped: Vec<Rank>,
    /// Members of a dumped process group (or ranks below the world size) that left no dump.
    pub missing: Vec<Rank>,
    pub verdict: FrVerdict,
    /// Per process group: how far the ranks agree, and the first point where they do not.
    pub groups: Vec<FrGroupReport>,
    /// Per process group: the operation where the job stopped.
    pub stopped: Vec<FrStop>,
    /// The rank that entered each of the last matched collectives last, and by how much.
    pub stragglers: Vec<FrStraggler>,
    /// Over all matched collectives: which rank entered last most often, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub straggler_summary: Option<String>,
    /// What the dumps cannot tell (missing dumps, no clocks, no stacks), in words.
    pub cannot_say: Vec<String>,
}

/// The answer: who diverged first, by which rule, how sure; or why it is not known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrVerdict {
    /// Empty when unknown (then `candidates` says who it could be).
    pub culprits: Vec<Rank>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Rank>,
    pub rule: Option<FrRule>,
    /// 0..1.
    pub confidence: f64,
    pub summary: String,
    /// Where: the process group and sequence number (`seq 6`, `p2p seq 3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrGroupReport {
    pub pg: String,
    pub desc: String,
    pub ranks: Vec<Rank>,
    /// Sequence numbers every rank that dumped issued identically (op, sizes, dtypes, call site).
    pub matched: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence: Option<FrDivergence>,
}

/// The first point where a group's ranks part, each rank's entry side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrDivergence {
    pub seq: String,
    /// What differs: `op`, `sizes`, `dtypes`, `call site`, `never issued`, `timing`.
    pub differs: String,
    pub rule: Option<FrRule>,
    pub culprits: Vec<Rank>,
    pub confidence: f64,
    pub summary: String,
    pub entries: Vec<FrEntryView>,
}

/// One rank's entry at a point of divergence, for a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrEntryView {
    pub rank: Rank,
    /// `issued`, `never issued`, `no dump`, `not in its buffer`.
    pub status: String,
    pub op: String,
    pub input_sizes: String,
    pub output_sizes: String,
    pub dtypes: String,
    pub state: String,
    /// RFC 3339 on the aligned clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_site: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrStop {
    pub pg: String,
    pub seq: String,
    pub op: String,
    /// Issued it and did not get past it.
    pub waiting: Vec<Rank>,
    /// Dumped, and never issued it.
    pub never_issued: Vec<Rank>,
    /// No dump, or no entry that far back.
    pub unknown: Vec<Rank>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrStraggler {
    pub pg: String,
    pub seq: u64,
    pub rank: Rank,
    /// How long after the first rank it entered, on the aligned clock.
    pub lag_ms: f64,
}
