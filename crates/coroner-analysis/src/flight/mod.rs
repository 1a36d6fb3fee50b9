//! Flight recorder analysis: every rank's dump matched collective by collective, the divergent
//! rank named with the rule that decided, even with dumps missing. Pure.
//!
//! The steps, per process group ([`lanes`]): regroup each rank's operations by collective sequence
//! number (coalesced operations as one unit, point-to-point operations apart); walk the numbers to
//! the first where ranks part, and name who parted ([`decide`]: majority, own history, never
//! issued; never a guess among equals); find where the group stopped and who entered collectives
//! last ([`timing`]); pair each sender's sends with its receiver's recvs, in order ([`p2p`]).
//! Across groups, and between a group's collectives and its point-to-point operations, the
//! earliest decided divergence wins. When every dump agrees,
//! the ranks without a dump are weighed with what the logs say of them: one that died first is
//! the culprit (`died before it dumped`), one killed from outside is unknown, and the answer says so.

mod decide;
mod job;
mod lanes;
mod p2p;
#[cfg(test)]
mod p2p_tests;
mod pattern;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod tests;
pub mod text;
mod timing;
mod view;

pub use job::{diagnosis, from_evidence};

use crate::clock::UNKNOWN_UNCERTAINTY_NS;
use coroner_model::{FlightRecorderReport, FrDump, FrGroupReport, FrVerdict, PgId, Rank};
use decide::{who, Decision};
use std::collections::BTreeMap;

/// What the logs say of a rank, for weighing a missing dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Its own failure is the job's first.
    FailedFirst,
    /// It failed on its own, after another rank.
    Failed,
    /// Killed by a signal from outside (the launcher tearing the job down).
    Killed,
    ExitedCleanly,
    /// Ended with a failure status (a signal of its own, an exit code) and no line saying why.
    EndedBadly,
}

/// Host clocks to the job's aligned clock.
#[derive(Debug, Clone, Default)]
pub struct Clocks {
    /// Per rank: offset to add, and its uncertainty, in ns.
    offsets: BTreeMap<Rank, (i64, i64)>,
    /// Dumps alone: times are compared as each host wrote them.
    raw: bool,
}

impl Clocks {
    pub fn raw() -> Self {
        Clocks { offsets: BTreeMap::new(), raw: true }
    }
    pub fn with_offsets(offsets: BTreeMap<Rank, (i64, i64)>) -> Self {
        Clocks { offsets, raw: false }
    }
    pub fn aligned(&self, rank: Rank, host_ns: i64) -> Option<i64> {
        Some(host_ns.saturating_add(self.offsets.get(&rank).map_or(0, |o| o.0)))
    }
    pub fn uncertainty(&self, rank: Rank) -> i64 {
        if self.raw {
            return 0;
        }
        self.offsets.get(&rank).map_or(UNKNOWN_UNCERTAINTY_NS, |o| o.1)
    }
}

/// The matcher's input: each rank's dump, and what else is known.
#[derive(Debug, Clone, Default)]
pub struct FlightInput<'a> {
    pub dumps: BTreeMap<Rank, &'a FrDump>,
    /// The job's world size, when known: ranks below it belong to the default group.
    pub world: Option<u32>,
    pub fates: BTreeMap<Rank, Fate>,
    pub clocks: Clocks,
}

/// The last stragglers kept in the report.
const MAX_STRAGGLERS: usize = 32;

pub fn analyze(input: &FlightInput<'_>) -> FlightRecorderReport {
    let dumps = &input.dumps;
    let groups = lanes::build(dumps, input.world);
    let mut decided: Vec<(Decision, Option<i64>)> = Vec::new();
    let mut undecided: Vec<Decision> = Vec::new();
    let mut reports = Vec::new();
    let mut stops = Vec::new();
    let mut stragglers = Vec::new();
    let mut matched_total = 0usize;
    let mut notes = Vec::new();
    let mut broke: Vec<Rank> = Vec::new();
    for (pg, group) in &groups {
        let scan = decide::scan(pg, group);
        notes.extend(scan.habitual.clone());
        let stop = timing::stop(pg, group);
        let mut decision = scan.decision.clone();
        if decision.is_none() {
            decision = stop.as_ref().and_then(|(seq, _)| timing::entered_last(pg, group, &input.clocks, *seq));
        }
        let s = timing::stragglers(pg, group, &input.clocks);
        matched_total += group.lanes.values().map(|l| l.units.len()).max().unwrap_or(0);
        stragglers.extend(s);
        if let Some((_, st)) = &stop {
            stops.push(st.clone());
        }
        let divergence = decision.as_ref().map(|d| coroner_model::FrDivergence {
            seq: d.label.clone(),
            differs: d.differs.to_string(),
            rule: d.rule,
            culprits: d.culprits.clone(),
            confidence: round(d.confidence),
            summary: d.summary.clone(),
            entries: view::entries(group, d.seq, if d.culprits.is_empty() { &d.candidates } else { &d.culprits }, &input.clocks),
        });
        reports.push(FrGroupReport {
            pg: pg.0.clone(),
            desc: group.desc.clone(),
            ranks: group.members.iter().copied().collect(),
            matched: scan.matched,
            divergence,
        });
        match decision {
            Some(d) if d.rule.is_some() => {
                let at = when(group, &d, &input.clocks);
                decided.push((d, at));
            }
            Some(d) => undecided.push(d),
            None => {}
        }
        if let Some(p) = p2p::scan(pg, group, dumps, &input.clocks) {
            reports.push(p.report);
            notes.extend(p.notes);
            broke.extend(p.broke);
            match p.decision {
                Some(d) if d.rule.is_some() => decided.push((d, p.at)),
                Some(d) => undecided.push(d),
                None => {}
            }
        }
    }
    let dumped: Vec<Rank> = dumps.keys().copied().collect();
    let mut missing: Vec<Rank> = groups.values().flat_map(|g| g.missing()).collect();
    missing.sort();
    missing.dedup();
    broke.sort();
    broke.dedup();
    let verdict = verdict(decided, undecided, &groups, &missing, &broke, input);
    if verdict.culprits.is_empty() && verdict.candidates.is_empty() && stops.iter().any(|s| s.never_issued.is_empty() && s.unknown.is_empty()) {
        notes.push("every rank issued the collective the dumps end in and none completed it: either the dumps were taken while it ran, or it hung inside the transport rather than in a rank".to_string());
    }
    stragglers.sort_by_key(|s| (s.pg.clone(), s.seq));
    let straggler_summary = timing::summary(&stragglers, matched_total);
    if stragglers.len() > MAX_STRAGGLERS {
        stragglers.drain(..stragglers.len() - MAX_STRAGGLERS);
    }
    FlightRecorderReport {
        dumped,
        cannot_say: cannot_say(dumps, &missing, input, notes),
        missing,
        verdict,
        groups: reports,
        stopped: stops,
        stragglers,
        straggler_summary,
    }
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// When the divergent operations were issued (the earliest entry at that point, aligned).
fn when(group: &lanes::Group<'_>, d: &Decision, clocks: &Clocks) -> Option<i64> {
    group.lanes.iter().filter_map(|(r, l)| clocks.aligned(*r, l.units.get(&d.seq)?.created_ns()?)).min()
}

fn verdict(
    mut decided: Vec<(Decision, Option<i64>)>,
    undecided: Vec<Decision>,
    groups: &BTreeMap<PgId, lanes::Group<'_>>,
    missing: &[Rank],
    broke: &[Rank],
    input: &FlightInput<'_>,
) -> FrVerdict {
    // The earliest divergence in time decides; without times, the surest.
    decided.sort_by(|(a, ta), (b, tb)| match (ta, tb) {
        (Some(x), Some(y)) if x != y => x.cmp(y),
        _ => b.confidence.total_cmp(&a.confidence).then(a.pg.cmp(&b.pg)),
    });
    if let Some((d, _)) = decided.into_iter().next() {
        return FrVerdict {
            culprits: d.culprits,
            candidates: Vec::new(),
            rule: d.rule,
            confidence: round(d.confidence),
            summary: d.summary,
            pg: Some(d.pg.0),
            seq: Some(d.label),
        };
    }
    if let Some(d) = undecided.into_iter().next() {
        return FrVerdict {
            culprits: Vec::new(),
            candidates: d.candidates,
            rule: None,
            confidence: 0.0,
            summary: d.summary,
            pg: Some(d.pg.0),
            seq: Some(d.label),
        };
    }
    job::missing_dump_verdict(groups, missing, broke, input).unwrap_or_else(|| FrVerdict {
        culprits: Vec::new(),
        candidates: Vec::new(),
        rule: None,
        confidence: 0.0,
        summary: if missing.is_empty() {
            "every rank issued the same collectives in the same order (op, sizes, dtypes, call site): no rank diverged".to_string()
        } else {
            format!("the ranks that dumped issued the same collectives in the same order; nothing decides about {}", who(missing))
        },
        pg: None,
        seq: None,
    })
}

/// What the dumps cannot tell.
fn cannot_say(dumps: &BTreeMap<Rank, &FrDump>, missing: &[Rank], input: &FlightInput<'_>, mut out: Vec<String>) -> Vec<String> {
    for r in missing {
        let fate = match input.fates.get(r) {
            Some(Fate::FailedFirst) => " (its log says it failed first)",
            Some(Fate::Failed) => " (its log says it failed)",
            Some(Fate::Killed) => " (it was killed from outside)",
            Some(Fate::ExitedCleanly) => " (it exited 0)",
            Some(Fate::EndedBadly) => " (it ended with a failure status, and its log says no more)",
            None => "",
        };
        out.push(format!("rank {r} left no dump{fate}: what it issued is unknown"));
    }
    let json: Vec<Rank> = dumps.iter().filter(|(_, d)| d.encoding == "json").map(|(r, _)| *r).collect();
    if !json.is_empty() {
        out.push(format!("{} dumped JSON, which carries no call stacks: call sites are not compared there", who(&json)));
    }
    let no_times = dumps.values().flat_map(|d| &d.ops).all(|o| o.started_ns.is_none() && o.completed_ns.is_none());
    if no_times && !dumps.is_empty() {
        out.push("no entry has start or completion times (gloo records none; NCCL only with TORCH_NCCL_ENABLE_TIMING): whether an operation ran is read from its state and retirement".to_string());
    }
    if input.clocks.raw {
        out.push(
            "entry times are compared as each host's clock wrote them (no clock offsets without logs): across hosts, straggler times may be skewed".to_string(),
        );
    }
    let dropped: Vec<Rank> = dumps.iter().filter(|(_, d)| d.dropped > 0).map(|(r, _)| *r).collect();
    if !dropped.is_empty() {
        out.push(format!(
            "{}: older entries were left out (only the newest {} per group are kept), so an earlier divergence would not be seen",
            who(&dropped),
            coroner_model::MAX_OPS_PER_GROUP
        ));
    }
    out
}

/// A rule's confidence threshold for the diagnosis to take it before the generic hang logic.
pub const CONFIDENT: f64 = 0.6;
