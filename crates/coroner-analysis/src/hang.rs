//! Hangs: nobody failed first-hand, so the culprit is the rank that stopped making progress.
//!
//! First by collective sequence numbers (the rank that never issued the collective others wait
//! on), then by silence (the rank that reported no failure while its peers timed out waiting).

use crate::classified::ClassifiedJob;
use crate::evidence::JobEvidence;
use crate::progress::Progress;
use coroner_model::{Event, EventKind, PgId, Rank, Role, SeqNo};

#[derive(Debug, Clone)]
pub struct HangFinding<'a> {
    /// The stuck rank, or None when several are equally suspect.
    pub rank: Option<Rank>,
    pub candidates: Vec<Rank>,
    pub confidence: f64,
    pub summary: String,
    pub events: Vec<&'a Event>,
}

pub fn find<'a>(evidence: &'a JobEvidence, job: &ClassifiedJob<'a>, progress: &Progress) -> Option<HangFinding<'a>> {
    by_sequence(evidence, job, progress).or_else(|| left_early(evidence, job, progress)).or_else(|| by_silence(evidence, job))
}

/// A rank that ended cleanly (exit 0) while its peers were still in collectives with it: it left
/// the training loop early (an uneven number of batches, a rank-dependent `break`), and its peers
/// waited for a collective it would never issue.
fn left_early<'a>(evidence: &'a JobEvidence, job: &ClassifiedJob<'a>, progress: &Progress) -> Option<HangFinding<'a>> {
    let ranks = evidence.all_ranks();
    let waiting: Vec<Rank> = ranks.iter().copied().filter(|r| job.events(*r).iter().any(|c| c.is_wait_timeout())).collect();
    if waiting.is_empty() {
        return None;
    }
    let gone: Vec<Rank> = ranks
        .iter()
        .copied()
        .filter(|r| waiting.binary_search(r).is_err())
        .filter(|r| evidence.end_of(*r).is_some_and(|e| e.succeeded()))
        .filter(|r| job.with_role(*r, Role::Root).next().is_none())
        .collect();
    let rank = match gone.as_slice() {
        [one] => *one,
        _ => return None,
    };
    // What the peers waited in, and how far the one that left got, where the evidence says.
    let awaited = progress.groups.iter().find_map(|(pg, by_rank)| {
        let (seq, op, _) = waiting.iter().find_map(|w| by_rank.get(w)?.timed_out.clone())?;
        Some((pg.clone(), seq, op, by_rank.get(&rank).and_then(|p| p.last_enqueued)))
    });
    let counts = match &awaited {
        Some((pg, seq, op, Some(mine))) => format!("issued {mine} collectives of process group {pg}, its peers {seq} (they waited in {op} seq {seq})"),
        Some((pg, seq, op, None)) => format!("its peers waited in {op} seq {seq} of process group {pg}"),
        None => "its peers timed out waiting in a collective".to_string(),
    };
    Some(HangFinding {
        rank: Some(rank),
        candidates: vec![rank],
        confidence: 0.75,
        summary: format!(
            "rank {rank} left early: it exited 0 while rank{} {} still waited for it; {counts}",
            if waiting.len() == 1 { "" } else { "s" },
            join(&waiting)
        ),
        events: telling_events(evidence, job, rank),
    })
}

fn by_sequence<'a>(evidence: &'a JobEvidence, job: &ClassifiedJob<'a>, progress: &Progress) -> Option<HangFinding<'a>> {
    let laggards = progress.laggards();
    let (rank, enqueued, awaited, pg) = laggards.first()?.clone();
    let lowest: Vec<Rank> = laggards.iter().filter(|l| l.1 == enqueued).map(|l| l.0).collect();
    let waiting = waiters(progress, &pg, awaited);
    let op = op_of(progress, &pg, awaited).unwrap_or_else(|| "collective".to_string());
    let enq = enqueued.map(|s| s.to_string()).unwrap_or_else(|| "?".into());
    let events = telling_events(evidence, job, rank);
    if lowest.len() > 1 {
        return Some(HangFinding {
            rank: None,
            candidates: lowest.clone(),
            confidence: 0.5,
            summary: format!(
                "ranks {} never issued {op} seq {awaited} of process group {pg} (last enqueued {enq}); {} waited on it",
                join(&lowest),
                join(&waiting)
            ),
            events,
        });
    }
    Some(HangFinding {
        rank: Some(rank),
        candidates: vec![rank],
        confidence: 0.85,
        summary: format!(
            "rank {rank} stopped before issuing {op} seq {awaited} of process group {pg} (its last enqueued: {enq}) while rank{} {} waited on it",
            if waiting.len() == 1 { "" } else { "s" },
            join(&waiting)
        ),
        events,
    })
}

fn by_silence<'a>(evidence: &'a JobEvidence, job: &ClassifiedJob<'a>) -> Option<HangFinding<'a>> {
    let ranks = evidence.all_ranks();
    let waiting: Vec<Rank> = ranks.iter().copied().filter(|r| job.events(*r).iter().any(|c| c.is_wait_timeout())).collect();
    if waiting.is_empty() {
        return None;
    }
    // A rank with no line and no recorded end is not silent: its log is missing (plain logs of
    // part of a job); the partial verdict says so instead.
    let captured = |r: &Rank| evidence.ranks.get(r).is_some_and(|e| e.lines > 0) || evidence.end_of(*r).is_some();
    // A process of unknown rank is not a rank the others wait for: in a combined log it is the
    // lines no prefix owns (a launcher's, a stack dump pasted without its rank's prefix).
    let silent: Vec<Rank> = ranks
        .iter()
        .copied()
        .filter(|r| !r.is_unknown() && waiting.binary_search(r).is_err() && captured(r))
        .filter(|r| job.events(*r).iter().all(|c| !matches!(c.role, Role::Root | Role::Symptom)) && !evidence.end_of(*r).is_some_and(|e| e.succeeded()))
        .collect();
    match silent.as_slice() {
        [] => None,
        [rank] => Some(HangFinding {
            rank: Some(*rank),
            candidates: vec![*rank],
            confidence: 0.75,
            summary: format!(
                "rank {rank} went silent without an error while rank{} {} timed out waiting for peers",
                if waiting.len() == 1 { "" } else { "s" },
                join(&waiting)
            ),
            events: telling_events(evidence, job, *rank),
        }),
        many => Some(HangFinding {
            rank: None,
            candidates: many.to_vec(),
            confidence: 0.4,
            summary: format!(
                "ranks {} went silent while ranks {} timed out waiting; the evidence does not tell which stalled first",
                join(many),
                join(&waiting)
            ),
            events: Vec::new(),
        }),
    }
}

/// The culprit's most telling lines: where its stack was, what it last reported.
fn telling_events<'a>(evidence: &'a JobEvidence, job: &ClassifiedJob<'a>, rank: Rank) -> Vec<&'a Event> {
    let evs = job.events(rank);
    let mut out: Vec<&'a Event> = Vec::new();
    if let Some(dump) = evs.iter().rev().find(|c| matches!(c.event.kind, EventKind::DumpSignal { .. })) {
        out.push(dump.event);
    }
    if let Some(stack) = evs.iter().find(|c| matches!(c.event.kind, EventKind::StackDump { .. })) {
        out.push(stack.event);
    }
    if let Some(step) = evidence.ranks.get(&rank).and_then(|ev| ev.last_step.as_ref()) {
        out.push(step);
    }
    out
}

fn waiters(progress: &Progress, pg: &PgId, awaited: SeqNo) -> Vec<Rank> {
    progress
        .groups
        .get(pg)
        .map_or_else(Vec::new, |ranks| ranks.iter().filter(|(_, p)| p.last_enqueued.is_some_and(|e| e >= awaited)).map(|(r, _)| *r).collect())
}

fn op_of(progress: &Progress, pg: &PgId, awaited: SeqNo) -> Option<String> {
    progress.groups.get(pg)?.values().find_map(|p| p.timed_out.as_ref().filter(|t| t.0 == awaited).map(|t| t.1.clone()))
}

pub fn join(ranks: &[Rank]) -> String {
    const SHOWN: usize = 8;
    let mut s: Vec<String> = ranks.iter().take(SHOWN).map(|r| r.to_string()).collect();
    if ranks.len() > SHOWN {
        s.push(format!("and {} more", ranks.len() - SHOWN));
    }
    s.join(", ")
}
