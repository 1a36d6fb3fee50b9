//! What the analysis reads: a job's typed events, process ends, clock samples and snapshot facts.
//! Built by the pipeline (offline from files, online from agents); the analysis never sees lines.

use crate::steps::{StepLog, StepMark};
use coroner_model::{ClockSample, Event, EventKind, FrDump, Nanos, PgId, ProcessEnd, Rank, SeqNo, SnapshotSummary};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One row of a flight recorder dump's progress: the rank, the process group, and its last
/// enqueued, started and completed collective.
pub type FrRow = (Rank, PgId, Option<SeqNo>, Option<SeqNo>, Option<SeqNo>);

/// Everything known about one job at one moment.
#[derive(Debug, Clone, Default)]
pub struct JobEvidence {
    pub job_id: String,
    pub world_size: Option<u32>,
    /// Per global rank, shared: a copy of the evidence (what a report is computed from) shares
    /// every rank with the pipeline's, and the pipeline's next line to a rank copies that rank
    /// alone (`rank_mut`), so a report of a 16,384-rank job copies only the ranks that changed
    /// since the last one instead of every event.
    pub ranks: BTreeMap<Rank, Arc<RankEvidence>>,
    /// Events from lines no rank owns (a launcher's own output, a kernel log).
    pub unowned: Vec<Event>,
    /// Hardware lines read from snapshots (a kernel log's Xid, ECC and OOM-killer lines,
    /// `nvidia-smi`'s memory faults), on stream `file`. `rank` is the snapshot's rank when it had
    /// one. Such a line's only time is the one printed in it (`printed_ns`); `capture_ns` is that
    /// time too, or 0 when the line carries none.
    pub hardware: Vec<Event>,
    /// Sorted by rank, one per rank.
    pub ends: Vec<ProcessEnd>,
    pub clock_samples: Vec<ClockSample>,
    pub snapshots: Vec<SnapshotSummary>,
    /// Collective progress read from flight recorder dumps: (rank, process group, last enqueued,
    /// last started, last completed). A rank without a dump simply has no rows here.
    pub fr_progress: Vec<FrRow>,
    /// Each rank's newest flight recorder dump, bounded (`coroner_model::MAX_OPS_PER_GROUP`), for
    /// matching collectives across ranks (`flight/`).
    pub fr_dumps: BTreeMap<Rank, FrDump>,
    /// True when no more evidence is expected (an offline bundle, or every agent reported its end).
    pub finished: bool,
    /// Problems the pipeline met in its input, passed through to the report's notes.
    pub notes: Vec<String>,
    /// The input is plain log files (no capture bundle): nothing records how processes ended
    /// but the lines themselves.
    pub plain_logs: bool,
    /// The processes of unknown rank ([`Rank::unknown`]) and the log each one's lines came from.
    pub unknown_sources: BTreeMap<Rank, String>,
}

/// One rank's share of the evidence.
#[derive(Debug, Clone, Default)]
pub struct RankEvidence {
    pub host: Option<String>,
    /// In capture order ((capture time, sequence number), as [`RankEvidence::push`] keeps
    /// them); progress lines are kept apart, in `steps`.
    pub events: Vec<Event>,
    /// The progress lines, compact and bounded (`steps.rs`): most of a long job's events are
    /// steps, and the analysis needs only each step's first times (the clock alignment, the pace),
    /// the highest step and the last one's text.
    pub steps: StepLog,
    /// The latest progress line, whole, for the report's evidence.
    pub last_step: Option<Event>,
    pub lines: u64,
    pub first_capture_ns: Option<Nanos>,
    pub last_capture_ns: Option<Nanos>,
}

impl RankEvidence {
    /// Files an event: a step among the steps, anything else among the events, in capture order
    /// (after those of the same time and number: the order a stable sort of the pushes gives).
    pub fn push(&mut self, e: Event) {
        let EventKind::Step { step } = e.kind else {
            let key = (e.capture_ns, e.line.seq);
            // Nearly always at the end: lines arrive in capture order.
            let at = if self.events.last().is_none_or(|l| (l.capture_ns, l.line.seq) <= key) {
                self.events.len()
            } else {
                self.events.partition_point(|l| (l.capture_ns, l.line.seq) <= key)
            };
            self.events.insert(at, e);
            return;
        };
        self.steps.push(StepMark { step, capture_ns: e.capture_ns, printed_ns: e.printed_ns });
        let later = self.last_step.as_ref().is_none_or(|l| (l.capture_ns, l.line.seq) <= (e.capture_ns, e.line.seq));
        if later {
            self.last_step = Some(e);
        }
    }

    /// The highest step this rank reported.
    pub fn max_step(&self) -> Option<u64> {
        self.steps.max_step()
    }
}

impl JobEvidence {
    /// One rank's evidence to change: copied first when a copy of the evidence shares it.
    pub fn rank_mut(&mut self, rank: Rank) -> &mut RankEvidence {
        Arc::make_mut(self.ranks.entry(rank).or_default())
    }

    /// Sets one rank's evidence (for evidence built by hand).
    pub fn insert_rank(&mut self, rank: Rank, evidence: RankEvidence) {
        self.ranks.insert(rank, Arc::new(evidence));
    }

    /// Every rank the evidence mentions: those with lines, those with ends, and all below the world size.
    pub fn all_ranks(&self) -> Vec<Rank> {
        let mut set: std::collections::BTreeSet<Rank> = self.ranks.keys().copied().collect();
        set.extend(self.ends.iter().map(|e| e.rank));
        if let Some(n) = self.world_size {
            set.extend((0..n).map(Rank));
        }
        set.into_iter().collect()
    }

    /// How `rank` ended. `ends` is kept sorted by rank (the pipeline builds it from a map), so
    /// this is a binary search: the analysis asks for every rank of 16,384-rank jobs.
    pub fn end_of(&self, rank: Rank) -> Option<&ProcessEnd> {
        match self.ends.binary_search_by_key(&rank, |e| e.rank) {
            Ok(i) => self.ends.get(i),
            Err(_) => None,
        }
    }

    /// Restores the order [`JobEvidence::end_of`] relies on, for evidence built by hand.
    pub fn sort_ends(&mut self) {
        self.ends.sort_by_key(|e| e.rank);
        self.ends.dedup_by_key(|e| e.rank);
    }
}
