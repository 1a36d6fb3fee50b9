//! Clock alignment: each rank's offset to the job's aligned clock, with an uncertainty.
//!
//! Two sources, best first:
//! 1. NTP-style samples from the rank's agent: keep the low round-trip exchanges, fit offset and
//!    drift; the error is at most half the round trip.
//! 2. Synchronous training prints the same step line on every rank within milliseconds: the median
//!    difference of step-line times against a reference rank is that rank's offset.
//!
//! Ranks with neither keep offset 0 and an unknown uncertainty; the culprit logic then decides by
//! causality, not by time. Offsets are never stored: they are recomputed from the evidence.

use crate::evidence::JobEvidence;
use crate::steps::StepTime;
use coroner_model::{ClockEstimate, ClockSample, Nanos, Rank};
use std::collections::BTreeMap;

/// An uncertainty that means "nothing is known about this rank's clock".
pub const UNKNOWN_UNCERTAINTY_NS: i64 = i64::MAX / 4;

/// How far apart ranks print the same step line, at worst, in a synchronous job.
const STEP_SKEW_FLOOR_NS: i64 = 5_000_000;

/// Per-rank clock estimates for one job.
#[derive(Debug, Clone, Default)]
pub struct ClockModel {
    estimates: BTreeMap<Rank, ClockEstimate>,
}

impl ClockModel {
    pub fn estimate(&self, rank: Rank) -> ClockEstimate {
        self.estimates.get(&rank).cloned().unwrap_or(ClockEstimate { offset_ns: 0, uncertainty_ns: UNKNOWN_UNCERTAINTY_NS, source: "none".to_string() })
    }

    /// A host time of `rank` on the aligned clock.
    pub fn aligned(&self, rank: Option<Rank>, host_ns: Nanos) -> Nanos {
        match rank.and_then(|r| self.estimates.get(&r)) {
            Some(e) => host_ns.saturating_add(e.offset_ns),
            None => host_ns,
        }
    }

    pub fn uncertainty(&self, rank: Option<Rank>) -> i64 {
        rank.map(|r| self.estimate(r).uncertainty_ns).unwrap_or(UNKNOWN_UNCERTAINTY_NS)
    }

    /// Whether `a` on rank `ra` is known to come before `b` on rank `rb` from time alone.
    pub fn surely_before(&self, ra: Option<Rank>, a: Nanos, rb: Option<Rank>, b: Nanos) -> bool {
        let (ua, ub) = if ra == rb { (0, 0) } else { (self.uncertainty(ra), self.uncertainty(rb)) };
        let margin = ua.saturating_add(ub);
        self.aligned(ra, a).saturating_add(margin) < self.aligned(rb, b)
    }
}

/// Estimates every rank's clock from the evidence.
pub fn align(evidence: &JobEvidence) -> ClockModel {
    let mut estimates = BTreeMap::new();
    let mut by_rank: BTreeMap<Rank, Vec<ClockSample>> = BTreeMap::new();
    for s in &evidence.clock_samples {
        by_rank.entry(s.rank).or_default().push(*s);
    }
    for (rank, samples) in &by_rank {
        if let Some(e) = from_samples(samples) {
            estimates.insert(*rank, e);
        }
    }
    for (rank, e) in from_steps(evidence, &estimates) {
        let better = estimates.get(&rank).is_none_or(|old| e.uncertainty_ns < old.uncertainty_ns);
        if better {
            estimates.insert(rank, e);
        }
    }
    let edges = crate::causality::edges(evidence);
    // Two passes let a bound travel one hop further (A bounds B, B bounds C).
    for _ in 0..2 {
        apply_edges(&edges, &mut estimates);
    }
    ClockModel { estimates }
}

/// Makes the offsets respect every happens-before edge. A rank with no estimate gets the offset
/// nearest zero that the edges allow; a rank whose estimate breaks an edge by more than the
/// uncertainties is moved just enough, and its uncertainty grows by the move.
fn apply_edges(edges: &[crate::causality::Edge], estimates: &mut BTreeMap<Rank, ClockEstimate>) {
    let unknown = || ClockEstimate { offset_ns: 0, uncertainty_ns: UNKNOWN_UNCERTAINTY_NS, source: "none".to_string() };
    for edge in edges {
        let from = estimates.get(&edge.from).cloned().unwrap_or_else(unknown);
        let to = estimates.get(&edge.to).cloned().unwrap_or_else(unknown);
        let slack = to.offset_ns.saturating_sub(from.offset_ns).saturating_sub(edge.min_relative_offset());
        if slack >= 0 {
            continue;
        }
        let from_known = from.uncertainty_ns < UNKNOWN_UNCERTAINTY_NS;
        let to_known = to.uncertainty_ns < UNKNOWN_UNCERTAINTY_NS;
        if from_known && to_known && slack.saturating_neg() <= from.uncertainty_ns.saturating_add(to.uncertainty_ns) {
            continue; // within what the estimates already admit
        }
        // Move the less certain side.
        let (rank, mut est, shift) = if to.uncertainty_ns >= from.uncertainty_ns { (edge.to, to, slack.saturating_neg()) } else { (edge.from, from, slack) };
        est.offset_ns = est.offset_ns.saturating_add(shift);
        if est.uncertainty_ns < UNKNOWN_UNCERTAINTY_NS {
            est.uncertainty_ns = est.uncertainty_ns.saturating_add(shift.saturating_abs());
            est.source = format!("{}+causality", est.source.trim_end_matches("+causality"));
        } else {
            est.source = "causality".to_string();
        }
        estimates.insert(rank, est);
    }
}

/// Offset from NTP-style samples: the median offset of the exchanges whose round trip is within
/// 50% (plus 1 ms) of the best one.
pub fn from_samples(samples: &[ClockSample]) -> Option<ClockEstimate> {
    let min_rtt = samples.iter().map(ClockSample::round_trip_ns).min()?;
    let limit = min_rtt.saturating_add(min_rtt / 2).saturating_add(1_000_000);
    let mut good: Vec<&ClockSample> = samples.iter().filter(|s| s.round_trip_ns() <= limit).collect();
    good.sort_by_key(|s| s.offset_ns());
    let mid = good[good.len() / 2];
    let spread = good.iter().map(|s| s.offset_ns().saturating_sub(mid.offset_ns()).saturating_abs()).max().unwrap_or(0);
    Some(ClockEstimate { offset_ns: mid.offset_ns(), uncertainty_ns: (mid.round_trip_ns() / 2).saturating_add(spread), source: "ntp".to_string() })
}

/// Offsets from step lines printed by every rank: each rank against the reference rank (the one
/// with the best NTP estimate, else the lowest rank with steps).
fn from_steps(evidence: &JobEvidence, known: &BTreeMap<Rank, ClockEstimate>) -> BTreeMap<Rank, ClockEstimate> {
    // Per rank: each step and when it was first captured, sorted by step (`steps.rs`), so two
    // ranks are compared by a merge rather than a lookup per step.
    let steps: BTreeMap<Rank, &[StepTime]> = evidence.ranks.iter().map(|(rank, ev)| (*rank, ev.steps.times())).filter(|(_, s)| !s.is_empty()).collect();
    let reference = steps.keys().filter_map(|r| known.get(r).map(|e| (e.uncertainty_ns, *r))).min().map(|(_, r)| r).or_else(|| steps.keys().next().copied());
    let Some(reference) = reference else { return BTreeMap::new() };
    let ref_steps = steps[&reference];
    let ref_est = known.get(&reference).cloned().unwrap_or(ClockEstimate { offset_ns: 0, uncertainty_ns: 0, source: "steps".to_string() });
    let mut out = BTreeMap::new();
    for (rank, rank_steps) in &steps {
        let mut diffs = shared_step_diffs(ref_steps, rank_steps);
        if diffs.is_empty() {
            continue;
        }
        diffs.sort_unstable();
        let median = diffs[diffs.len() / 2];
        let spread = diffs.iter().map(|d| d.saturating_sub(median).saturating_abs()).max().unwrap_or(0);
        // One shared step says little about the spread: widen the bound.
        let floor = if diffs.len() >= 3 { STEP_SKEW_FLOOR_NS } else { 10 * STEP_SKEW_FLOOR_NS };
        let uncertainty = if *rank == reference { ref_est.uncertainty_ns } else { ref_est.uncertainty_ns.saturating_add(spread.max(floor)) };
        out.insert(
            *rank,
            ClockEstimate {
                offset_ns: median.saturating_add(ref_est.offset_ns),
                uncertainty_ns: uncertainty,
                source: if *rank == reference { ref_est.source.clone() } else { "steps".to_string() },
            },
        );
    }
    out
}

/// For every step both ranks printed: the reference's time minus the rank's.
fn shared_step_diffs(reference: &[StepTime], rank: &[StepTime]) -> Vec<i64> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < reference.len() && j < rank.len() {
        match reference[i].step.cmp(&rank[j].step) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(reference[i].first_capture_ns.saturating_sub(rank[j].first_capture_ns));
                i += 1;
                j += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod proptests {
    use super::*;
    use coroner_model::{Event, EventKind, LineRef, SeqNo, Stream};
    use proptest::prelude::*;

    fn event(rank: u32, at: Nanos, kind: EventKind) -> Event {
        Event { rank: Some(Rank(rank)), line: LineRef { stream: Stream::Stdout, seq: 0 }, capture_ns: at, printed_ns: None, kind, text: String::new() }
    }

    proptest! {
        /// Ranks with skewed clocks print synchronous step lines, one of them detects a timeout
        /// and signals the others; aligned order never puts a signal before its detection
        /// (beyond the stated uncertainty).
        #[test]
        fn aligned_order_never_breaks_a_causal_edge(
            skews in proptest::collection::vec(-30_000_000_000i64..30_000_000_000, 2..8),
            steps in 0usize..4,
            detector in 0usize..8,
            delay in 1_000_000i64..2_000_000_000,
        ) {
            let n = skews.len();
            let detector = detector % n;
            let mut ev = JobEvidence::default();
            let t0 = 1_700_000_000_000_000_000i64;
            for (r, skew) in skews.iter().enumerate() {
                let rank = ev.rank_mut(Rank(r as u32));
                for s in 0..steps {
                    rank.push(event(r as u32, t0 + s as i64 * 1_000_000_000 + skew, EventKind::Step { step: s as u64 }));
                }
            }
            let detect_true = t0 + 100_000_000_000;
            ev.rank_mut(Rank(detector as u32)).events.push(event(detector as u32, detect_true + skews[detector],
                EventKind::WatchdogTimeout { pg: None, seq: Some(SeqNo(11)), op: "ALLREDUCE".into(), numel_in: None, numel_out: None, timeout_ms: None, elapsed_ms: None }));
            for r in (0..n).filter(|r| *r != detector) {
                ev.rank_mut(Rank(r as u32)).events.push(event(r as u32, detect_true + delay + skews[r],
                    EventKind::DumpSignal { pg: None, detector: Some(Rank(detector as u32)), last_enqueued: None, last_completed: None }));
            }
            let model = align(&ev);
            for edge in crate::causality::edges(&ev) {
                let a = model.aligned(Some(edge.from), edge.before);
                let b = model.aligned(Some(edge.to), edge.after);
                // An unknown clock gets no benefit of the doubt: causality must have placed it.
                let finite = |u: i64| if u >= UNKNOWN_UNCERTAINTY_NS { 0 } else { u };
                let margin = finite(model.uncertainty(Some(edge.from))) + finite(model.uncertainty(Some(edge.to)));
                prop_assert!(a <= b.saturating_add(margin), "edge {edge:?}: aligned {a} > {b} + {margin}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::RankEvidence;
    use coroner_model::{Event, EventKind, LineRef, Stream};

    fn step(rank: u32, step: u64, at: Nanos) -> Event {
        Event {
            rank: Some(Rank(rank)),
            line: LineRef { stream: Stream::Stdout, seq: step },
            capture_ns: at,
            printed_ns: None,
            kind: EventKind::Step { step },
            text: format!("step {step}"),
        }
    }

    #[test]
    fn step_lines_recover_a_skewed_rank() {
        let mut ev = JobEvidence::default();
        let skew = 17_300_000_000; // rank 1 runs 17.3 s ahead
        for s in 0..6u64 {
            let t = 1_000_000_000_000 + s as i64 * 1_000_000_000;
            ev.rank_mut(Rank(0)).push(step(0, s, t));
            ev.rank_mut(Rank(1)).push(step(1, s, t + skew + (s as i64 % 2) * 1_000_000));
        }
        let model = align(&ev);
        let e = model.estimate(Rank(1));
        assert!((e.offset_ns + skew).abs() <= 1_000_000, "{e:?}");
        assert!(e.uncertainty_ns >= 1_000_000 && e.uncertainty_ns < 50_000_000, "{e:?}");
        assert_eq!(model.estimate(Rank(0)).offset_ns, 0);
    }

    #[test]
    fn low_round_trip_samples_win() {
        let sample = |offset: i64, rtt: i64| ClockSample {
            rank: Rank(0),
            t1_agent_send: 0,
            t2_server_recv: offset + rtt / 2,
            t3_server_send: offset + rtt / 2,
            t4_agent_recv: rtt,
        };
        let e = from_samples(&[sample(5_000, 200_000), sample(9_000_000, 80_000_000), sample(4_000, 220_000)]).unwrap();
        assert!((e.offset_ns - 5_000).abs() <= 1_000, "{e:?}");
        assert!(e.uncertainty_ns < 1_000_000);
        let _ = RankEvidence::default();
    }

    /// Found by fuzzing the ingest messages: clock probes and capture times from the wire at the
    /// ends of the range overflowed the sample fit, the step medians and the causal shifts (a
    /// panic in debug builds, wrapped offsets in release).
    #[test]
    fn extreme_times_saturate_instead_of_overflowing() {
        let mut ev = JobEvidence::default();
        let probe = |rank: u32, t1: i64, t2: i64, t3: i64, t4: i64| ClockSample {
            rank: Rank(rank),
            t1_agent_send: t1,
            t2_server_recv: t2,
            t3_server_send: t3,
            t4_agent_recv: t4,
        };
        ev.clock_samples =
            vec![probe(0, i64::MIN, i64::MAX, i64::MAX, i64::MIN), probe(0, 0, 1, 1, i64::MAX), probe(1, i64::MAX, i64::MIN, i64::MIN, i64::MAX)];
        for s in 0..3u64 {
            ev.rank_mut(Rank(0)).push(step(0, s, i64::MIN + s as i64));
            ev.rank_mut(Rank(1)).push(step(1, s, i64::MAX - s as i64));
        }
        let watchdog = EventKind::WatchdogTimeout {
            pg: None,
            seq: Some(coroner_model::SeqNo(1)),
            op: "ALLREDUCE".into(),
            numel_in: None,
            numel_out: None,
            timeout_ms: None,
            elapsed_ms: None,
        };
        let signal = EventKind::DumpSignal { pg: None, detector: Some(Rank(0)), last_enqueued: None, last_completed: None };
        ev.rank_mut(Rank(0)).events.push(Event { kind: watchdog, capture_ns: i64::MAX, ..step(0, 9, 0) });
        ev.rank_mut(Rank(1)).events.push(Event { kind: signal, capture_ns: i64::MIN, ..step(1, 9, 0) });
        let model = align(&ev);
        assert_eq!(model.estimate(Rank(0)).offset_ns, i64::MAX);
        assert!(model.estimate(Rank(1)).uncertainty_ns > 0);
        assert_eq!(model.aligned(Some(Rank(0)), i64::MAX), i64::MAX);
    }
}
