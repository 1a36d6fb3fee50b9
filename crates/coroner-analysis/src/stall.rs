//! Horovod's stall inspector names the ranks a collective waits for, which no other framework
//! prints: every rank but the missing ones submitted the op. From the stalled ops of a job:
//! - ranks listed as missing (or, with `ready` lists only, the ranks of the job outside every
//!   ready list) never submitted it: they are stuck before the collective (a hang);
//! - two ops stalled at once whose ready ranks do not overlap mean the ranks submitted different
//!   collectives: the smaller side deviates (a collective mismatch), as `mismatch.rs` reads c10d.

use crate::classified::ClassifiedJob;
use crate::hang::join;
use coroner_model::{Event, EventKind, FaultClass, Rank};
use std::collections::BTreeSet;

#[derive(Debug, Clone)]
pub struct StallFinding<'a> {
    pub rank: Option<Rank>,
    pub candidates: Vec<Rank>,
    pub class: FaultClass,
    pub confidence: f64,
    pub summary: String,
    pub events: Vec<&'a Event>,
}

pub fn find<'a>(job: &ClassifiedJob<'a>, world_size: Option<u32>) -> Option<StallFinding<'a>> {
    let stalls: Vec<(&'a Event, &str, &[Rank], &[Rank])> = job
        .ranks
        .values()
        .flatten()
        .filter_map(|c| match &c.event.kind {
            EventKind::Stall { op, ready, missing } => Some((c.event, op.as_str(), ready.as_slice(), missing.as_slice())),
            _ => None,
        })
        .collect();
    let first = stalls.first()?.0;
    let source = reporter(stalls.iter().map(|s| s.1));
    let missing: BTreeSet<Rank> = stalls.iter().flat_map(|s| s.3.iter().copied()).collect();
    if !missing.is_empty() {
        let ops: BTreeSet<&str> = stalls.iter().filter(|s| !s.3.is_empty()).map(|s| s.1).collect();
        return Some(stuck(missing.into_iter().collect(), ops.len(), first, 0.8, source));
    }
    let ready_sets: Vec<BTreeSet<Rank>> = {
        let mut v: Vec<BTreeSet<Rank>> = stalls.iter().map(|s| s.2.iter().copied().collect()).collect();
        v.sort();
        v.dedup();
        v
    };
    if let [a, b, ..] = ready_sets.as_slice() {
        if a.is_disjoint(b) {
            let (small, big) = if a.len() <= b.len() { (a, b) } else { (b, a) };
            let small: Vec<Rank> = small.iter().copied().collect();
            let big: Vec<Rank> = big.iter().copied().collect();
            let rank = if small.len() == 1 && big.len() > 1 { Some(small[0]) } else { None };
            return Some(StallFinding {
                rank,
                candidates: small.clone(),
                class: FaultClass::CollectiveMismatch,
                confidence: if rank.is_some() { 0.7 } else { 0.4 },
                summary: format!(
                    "ranks submitted different collectives: rank{} {} waited in one op while rank{} {} waited in another (Horovod stall inspector)",
                    if small.len() == 1 { "" } else { "s" },
                    join(&small),
                    if big.len() == 1 { "" } else { "s" },
                    join(&big)
                ),
                events: vec![first],
            });
        }
    }
    let ready: BTreeSet<Rank> = ready_sets.iter().flatten().copied().collect();
    let absent: Vec<Rank> = world_size.map(|n| (0..n).map(Rank).filter(|r| !ready.contains(r)).collect()).unwrap_or_default();
    if !absent.is_empty() {
        return Some(stuck(absent, stalls.len(), first, 0.6, source));
    }
    let ready: Vec<Rank> = ready.into_iter().collect();
    Some(StallFinding {
        rank: None,
        candidates: Vec::new(),
        class: FaultClass::Hang,
        confidence: 0.5,
        summary: format!(
            "the culprit is not in these logs: collectives stalled with only ranks {} ready; the ranks that never submitted them are the others (the world size is not in these logs; {source})",
            join(&ready)
        ),
        events: vec![first],
    })
}

/// Who reported the stalls: c10d's barriers (`coroner_parse::barrier`), ProcessGroupNCCL's desync
/// report (`coroner_parse::desync`, [`coroner_model::DESYNC_REPORT_OP`]) or Horovod's stall inspector.
fn reporter<'o>(mut ops: impl Iterator<Item = &'o str>) -> &'static str {
    let Some(first) = ops.next() else { return "Horovod stall inspector" };
    let of = |op: &str| {
        if op == "monitoredBarrier" || op.starts_with("store_based_barrier") {
            "c10d barrier"
        } else if op.starts_with(coroner_model::DESYNC_REPORT_OP) {
            "ProcessGroupNCCL's desync report"
        } else {
            "Horovod stall inspector"
        }
    };
    let source = of(first);
    if ops.all(|op| of(op) == source) {
        source
    } else {
        "stall reports"
    }
}

fn stuck<'a>(ranks: Vec<Rank>, ops: usize, first: &'a Event, confidence: f64, source: &str) -> StallFinding<'a> {
    let rank = if ranks.len() == 1 { Some(ranks[0]) } else { None };
    StallFinding {
        rank,
        candidates: ranks.clone(),
        class: FaultClass::Hang,
        confidence: if rank.is_some() { confidence } else { confidence * 0.6 },
        summary: format!(
            "rank{} {} never submitted {ops} collective{} the other ranks waited in ({source})",
            if ranks.len() == 1 { "" } else { "s" },
            join(&ranks),
            if ops == 1 { "" } else { "s" }
        ),
        events: vec![first],
    }
}
