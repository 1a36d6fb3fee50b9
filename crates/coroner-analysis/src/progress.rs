//! Collective progress per process group and rank, from watchdog, PG-status and dump-signal lines
//! and from flight recorder dumps (`JobEvidence::fr_progress`). From it: who never issued collective k.

use crate::evidence::JobEvidence;
use coroner_model::{CollectiveRow, EventKind, PgId, Rank, SeqNo};
use std::collections::BTreeMap;

/// What one rank said about one process group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgProgress {
    pub last_enqueued: Option<SeqNo>,
    pub last_started: Option<SeqNo>,
    pub last_completed: Option<SeqNo>,
    /// The collective the watchdog timed out on: (seq, op, numel).
    pub timed_out: Option<(SeqNo, String, Option<u64>)>,
}

/// Progress for every (process group, rank) the evidence reports.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub groups: BTreeMap<PgId, BTreeMap<Rank, PgProgress>>,
}

fn raise(slot: &mut Option<SeqNo>, value: Option<SeqNo>) {
    if let Some(v) = value {
        *slot = Some(slot.map_or(v, |old| old.max(v)));
    }
}

/// `0(default_pg)` and `0` name the same group.
pub fn normalize_pg(pg: &PgId) -> PgId {
    PgId(pg.0.split('(').next().unwrap_or(&pg.0).trim().to_string())
}

/// How one event moves a process group's progress.
type Update = Box<dyn Fn(&mut PgProgress)>;

/// Reads every progress-bearing event.
pub fn collect(evidence: &JobEvidence) -> Progress {
    let mut progress = Progress::default();
    for (rank, ev) in &evidence.ranks {
        for e in &ev.events {
            let (pg, update): (Option<&PgId>, Update) = match &e.kind {
                EventKind::WatchdogTimeout { pg, seq: Some(seq), op, numel_in, .. } => {
                    // A watchdog line without its group (`[Rank 1] Watchdog caught ...`: the rank
                    // in a subgroup) takes it from the status line that names the same failing
                    // work (`[PG ID 3 ... Rank 1] failure detected by watchdog at work sequence
                    // id: 1438`); only then is it not read as the default group's.
                    let pg = pg.as_ref().or_else(|| group_failing_at(&ev.events, *seq));
                    let (seq, op, numel) = (*seq, op.clone(), *numel_in);
                    (
                        pg,
                        Box::new(move |p: &mut PgProgress| {
                            raise(&mut p.last_enqueued, Some(seq));
                            p.timed_out = Some((seq, op.clone(), numel));
                        }),
                    )
                }
                EventKind::PgStatus { pg, last_enqueued, last_started, last_completed, .. } => {
                    let (en, st, co) = (*last_enqueued, *last_started, *last_completed);
                    (
                        pg.as_ref(),
                        Box::new(move |p: &mut PgProgress| {
                            raise(&mut p.last_enqueued, en);
                            raise(&mut p.last_started, st);
                            raise(&mut p.last_completed, co);
                        }),
                    )
                }
                EventKind::DumpSignal { pg, last_enqueued, last_completed, .. } => {
                    let (en, co) = (*last_enqueued, *last_completed);
                    (
                        pg.as_ref(),
                        Box::new(move |p: &mut PgProgress| {
                            raise(&mut p.last_enqueued, en);
                            raise(&mut p.last_completed, co);
                        }),
                    )
                }
                _ => continue,
            };
            let pg = pg.map(normalize_pg).unwrap_or_else(PgId::default_pg);
            let entry = progress.groups.entry(pg).or_default().entry(*rank).or_default();
            update(entry);
        }
    }
    for (rank, pg, en, st, co) in &evidence.fr_progress {
        let p = progress.groups.entry(normalize_pg(pg)).or_default().entry(*rank).or_default();
        raise(&mut p.last_enqueued, *en);
        raise(&mut p.last_started, *st);
        raise(&mut p.last_completed, *co);
    }
    progress
}

/// The group a rank's watchdog status line names as failing at `seq`, if one does.
fn group_failing_at(events: &[coroner_model::Event], seq: SeqNo) -> Option<&PgId> {
    events.iter().find_map(|e| match &e.kind {
        EventKind::PgStatus { pg: Some(pg), failing_seq: Some(s), .. } if *s == seq => Some(pg),
        _ => None,
    })
}

impl Progress {
    /// Ranks stuck *before* a collective others wait on: in some group, a rank whose last enqueued
    /// collective is below the one another rank timed out on. Returns (rank, its last enqueued,
    /// the awaited seq, the group).
    pub fn laggards(&self) -> Vec<(Rank, Option<SeqNo>, SeqNo, PgId)> {
        let mut out = Vec::new();
        for (pg, ranks) in &self.groups {
            let Some(awaited) = ranks.values().filter_map(|p| p.timed_out.as_ref().map(|t| t.0)).max() else {
                continue;
            };
            for (rank, p) in ranks {
                if p.last_enqueued.is_some_and(|e| e < awaited) {
                    out.push((*rank, p.last_enqueued, awaited, pg.clone()));
                }
            }
        }
        out.sort_by_key(|(rank, enq, _, _)| (*enq, *rank));
        out
    }

    /// Rows for the report's collective table.
    pub fn rows(&self) -> Vec<CollectiveRow> {
        let mut rows = Vec::new();
        for (pg, ranks) in &self.groups {
            for (rank, p) in ranks {
                rows.push(CollectiveRow {
                    pg: pg.0.clone(),
                    rank: *rank,
                    last_enqueued: p.last_enqueued.map(|s| s.0),
                    last_started: p.last_started.map(|s| s.0),
                    last_completed: p.last_completed.map(|s| s.0),
                    pending: p.timed_out.as_ref().map(|(seq, op, numel)| match numel {
                        Some(n) => format!("{op} seq {seq} ({n} elements)"),
                        None => format!("{op} seq {seq}"),
                    }),
                });
            }
        }
        rows
    }
}
