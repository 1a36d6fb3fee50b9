//! Time in the dumps: where each group stopped, who entered each collective last (the straggler),
//! and a rank that entered the collective the job stopped in so late that the others had given up.
//! Entry times (`time_created_ns`) are host clocks; they are put on the job's aligned clock with
//! each rank's offset, and a lag counts only beyond both ranks' uncertainty.

use super::decide::{group_op, seq_word, who, Decision};
use super::lanes::Group;
use super::Clocks;
use coroner_model::{FrRule, FrStop, FrStraggler, PgId, Rank};

/// A lag shorter than this is noise even on one host.
const MIN_LAG_NS: i64 = 1_000_000;

/// The first sequence number some rank issued and did not get past, and that no rank completed
/// (a collective completed on one rank was joined by all; a rank whose dump shows it pending
/// dumped before it completed).
pub fn stop(pg: &PgId, group: &Group<'_>) -> Option<(u64, FrStop)> {
    let seqs: std::collections::BTreeSet<u64> = group.lanes.values().flat_map(|l| l.units.keys().copied()).collect();
    let seq = seqs.into_iter().find(|s| {
        let units = || group.lanes.values().filter_map(|l| l.units.get(s));
        units().any(|u| !u.done()) && !units().any(|u| u.done())
    })?;
    let mut stop =
        FrStop { pg: pg.0.clone(), seq: seq_word(seq), op: group_op(group, seq), waiting: Vec::new(), never_issued: Vec::new(), unknown: Vec::new() };
    for r in &group.members {
        match group.lanes.get(r) {
            Some(l) if l.units.get(&seq).is_some_and(|u| !u.done()) => stop.waiting.push(*r),
            Some(l) if l.units.contains_key(&seq) => {}
            Some(l) if l.never_issued(seq) => stop.never_issued.push(*r),
            _ => stop.unknown.push(*r),
        }
    }
    Some((seq, stop))
}

/// Per collective every rank issued alike: the rank that entered it last, when it did so later
/// than the clocks can blur.
pub fn stragglers(pg: &PgId, group: &Group<'_>, clocks: &Clocks) -> Vec<FrStraggler> {
    let seqs: std::collections::BTreeSet<u64> = group.lanes.values().flat_map(|l| l.units.keys().copied()).collect();
    seqs.into_iter().filter_map(|seq| straggler_at(pg, group, clocks, seq)).map(|(s, _)| s).collect()
}

/// The straggler at one sequence number, and the first rank to enter it.
fn straggler_at(pg: &PgId, group: &Group<'_>, clocks: &Clocks, seq: u64) -> Option<(FrStraggler, Rank)> {
    let entries: Vec<(Rank, i64, &str)> = group
        .lanes
        .iter()
        .filter_map(|(r, l)| l.units.get(&seq).map(|u| (*r, u)))
        .filter_map(|(r, u)| Some((r, clocks.aligned(r, u.created_ns()?)?, u.what.as_str())))
        .collect();
    if entries.len() < 2 || entries.iter().any(|e| e.2 != entries[0].2) {
        return None;
    }
    let (first, t0, _) = *entries.iter().min_by_key(|e| (e.1, e.0))?;
    let (last, t1, _) = *entries.iter().max_by_key(|e| (e.1, std::cmp::Reverse(e.0)))?;
    let lag = t1 - t0;
    let blur = MIN_LAG_NS.saturating_add(clocks.uncertainty(first)).saturating_add(clocks.uncertainty(last));
    (last != first && lag > blur).then(|| (FrStraggler { pg: pg.0.clone(), seq, rank: last, lag_ms: lag as f64 / 1e6 }, first))
}

/// Every rank issued the collective the group stopped in, alike, and one entered it after the
/// others' timeout had run out: they gave up waiting for it (`entered last`).
pub fn entered_last(pg: &PgId, group: &Group<'_>, clocks: &Clocks, seq: u64) -> Option<Decision> {
    if group.lanes.values().any(|l| l.never_issued(seq)) {
        return None;
    }
    let (s, first) = straggler_at(pg, group, clocks, seq)?;
    // The ranks that waited gave up after their own timeout: the shortest one.
    let timeout_ms = group.lanes.values().filter_map(|l| l.units.get(&seq)?.timeout_ms()).min()?;
    if s.lag_ms <= timeout_ms as f64 {
        return None;
    }
    Some(Decision {
        pg: pg.clone(),
        seq,
        label: seq_word(seq),
        differs: "timing",
        rule: Some(FrRule::EnteredLast),
        culprits: vec![s.rank],
        candidates: Vec::new(),
        confidence: 0.7,
        summary: format!(
            "{} of process group {pg}: every rank issued {}, but rank {} entered it {:.1} s after {}, past its {:.1} s timeout (entered last)",
            seq_word(seq),
            group_op(group, seq),
            s.rank,
            s.lag_ms / 1e3,
            who(&[first]),
            timeout_ms as f64 / 1e3
        ),
    })
}

/// Over all stragglers: the rank that entered last most often, in words.
pub fn summary(all: &[FrStraggler], matched: usize) -> Option<String> {
    let mut count: std::collections::BTreeMap<Rank, Vec<f64>> = std::collections::BTreeMap::new();
    for s in all {
        count.entry(s.rank).or_default().push(s.lag_ms);
    }
    let (rank, lags) = count.iter().max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(a.0)))?;
    let mut sorted = lags.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    Some(format!(
        "rank {rank} entered last in {} of {matched} collectives whose entry times differ beyond the clocks' uncertainty (median {median:.1} ms after the first rank)",
        lags.len()
    ))
}
