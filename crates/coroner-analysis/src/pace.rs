//! The job's pace: when the time per step changes for good part-way through a job (a straggler,
//! a throttled GPU, a slow filesystem), the report says from which step and by how much.
//!
//! In synchronous data-parallel training every rank waits for the slowest in each collective, so
//! all ranks slow down together and step lines alone cannot name the slow one; the note says so
//! rather than guess.

use crate::evidence::JobEvidence;
use coroner_model::Nanos;

/// Fewer step intervals than this on either side of a change decide nothing.
const MIN_INTERVALS: usize = 3;
/// A change smaller than this factor is ordinary variation.
const MIN_FACTOR: f64 = 4.0;
/// How many ranks the pace is read from.
const SAMPLED_RANKS: usize = 32;
/// Steps faster than this after the change are not worth a note.
const MIN_SLOW_NS: i64 = 100_000_000;

/// Per step number, the median over ranks of the time from that step's line to the next one's,
/// and the widest stride the ranks' steps were kept at (`steps.rs`; 1 below the cap). A rank
/// whose steps were thinned to every `s`th tells the mean time per step over each `s` steps.
fn job_intervals(evidence: &JobEvidence) -> (Vec<(u64, Nanos)>, u64) {
    let mut per_step: std::collections::BTreeMap<u64, Vec<Nanos>> = std::collections::BTreeMap::new();
    let mut widest = 1;
    // Ranks move in lockstep: a few spread over the job tell the pace as well as all of them.
    let every = (evidence.ranks.len() / SAMPLED_RANKS).max(1);
    for ev in evidence.ranks.values().step_by(every) {
        let stride = ev.steps.stride();
        widest = widest.max(stride);
        let per = i64::try_from(stride).unwrap_or(i64::MAX);
        for w in ev.steps.times().windows(2) {
            if w[0].step.checked_add(stride) == Some(w[1].step) {
                // Times come from the wire or a file: the difference saturates.
                per_step.entry(w[0].step).or_default().push(w[1].first_printed_ns.saturating_sub(w[0].first_printed_ns) / per);
            }
        }
    }
    let intervals = per_step
        .into_iter()
        .map(|(step, mut v)| {
            v.sort_unstable();
            (step, v[v.len() / 2])
        })
        .collect();
    (intervals, widest)
}

fn median(v: &[Nanos]) -> Nanos {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

/// `out[i]` is [`median`] of the first `i` values (`out[0]` unused), in O(n log n): two heaps,
/// the lower half and the rest, so a job of 200,000 steps is not sorted 200,000 times.
fn prefix_medians(v: impl Iterator<Item = Nanos>) -> Vec<Nanos> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let (mut low, mut high) = (BinaryHeap::new(), BinaryHeap::<Reverse<Nanos>>::new());
    let mut out = vec![0];
    for x in v {
        if low.peek().is_some_and(|m| x < *m) {
            low.push(x);
        } else {
            high.push(Reverse(x));
        }
        let want = out.len() / 2;
        while low.len() > want {
            high.push(Reverse(low.pop().expect("not empty")));
        }
        while low.len() < want {
            low.push(high.pop().expect("not empty").0);
        }
        out.push(high.peek().expect("not empty").0);
    }
    out
}

/// A note when the job's step time changed for good, or None.
pub fn slowdown_note(evidence: &JobEvidence) -> Option<String> {
    let (intervals, stride) = job_intervals(evidence);
    if intervals.len() < 2 * MIN_INTERVALS {
        return None;
    }
    let times: Vec<Nanos> = intervals.iter().map(|(_, t)| *t).collect();
    // The split with the largest ratio of the medians after and before it.
    let n = times.len();
    let before_split = prefix_medians(times.iter().copied());
    let after_split = prefix_medians(times.iter().rev().copied());
    let (split, before, after) =
        (MIN_INTERVALS..=n - MIN_INTERVALS).map(|i| (i, before_split[i], after_split[n - i])).max_by(|a, b| ratio(a.2, a.1).total_cmp(&ratio(b.2, b.1)))?;
    if ratio(after, before) < MIN_FACTOR || after < MIN_SLOW_NS {
        return None;
    }
    // The split needs a few intervals before it to be measured; the change itself may come
    // earlier: walk back over intervals that are already slow.
    let slow = ((before as f64) * (after as f64)).sqrt() as Nanos;
    let mut split = split;
    while split > 1 && times[split - 1] > slow {
        split -= 1;
    }
    let (before, after) = (median(&times[..split]), median(&times[split..]));
    // The interval after step s ends at step s + 1: that is the first slow step. In a job long
    // enough for its steps to be thinned, the change lies within the stride after it.
    let first_slow = intervals[split].0 + 1;
    let at = if stride > 1 { format!("about step {first_slow} (within {stride} steps)") } else { format!("step {first_slow}") };
    Some(format!(
        "steps slowed down from {at} on: {} per step before, {} after, on every rank alike; in synchronous training every rank waits for the slowest, so the step lines do not name it - compare the ranks' compute time (flight recorder timings, py-spy, GPU utilisation)",
        human(before),
        human(after)
    ))
}

fn ratio(after: Nanos, before: Nanos) -> f64 {
    after as f64 / before.max(1) as f64
}

fn human(ns: Nanos) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else {
        format!("{} ms", ns / 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::StepMark;
    use coroner_model::Rank;

    fn job(intervals_ms: &[i64]) -> JobEvidence {
        let mut ev = JobEvidence::default();
        for r in 0..4 {
            let rank = ev.rank_mut(Rank(r));
            let mut t = 1_000_000_000_000i64;
            for (step, ms) in std::iter::once(&0).chain(intervals_ms).enumerate() {
                t += ms * 1_000_000;
                rank.steps.push(StepMark { step: step as u64, capture_ns: t, printed_ns: None });
            }
        }
        ev
    }

    #[test]
    fn a_lasting_slowdown_is_noted_from_its_first_slow_step() {
        let note = slowdown_note(&job(&[2, 3, 2, 1500, 1500, 1500, 1500, 1500])).expect("a note");
        assert!(note.starts_with("steps slowed down from step 4 on: 2 ms per step before, 1.50 s after"), "{note}");
        // Only two fast intervals before the change: still found, from the right step.
        let note = slowdown_note(&job(&[2, 3, 1500, 1500, 1500, 1500, 1500])).expect("a note");
        assert!(note.starts_with("steps slowed down from step 3 on"), "{note}");
    }

    #[test]
    fn running_medians_are_the_medians_of_every_prefix() {
        let v: Vec<Nanos> = vec![5, 1, 9, 3, 3, 8, 2, 7, 7, 0, 4];
        let m = prefix_medians(v.iter().copied());
        for i in 1..=v.len() {
            assert_eq!(m[i], median(&v[..i]), "prefix {i}");
        }
    }

    #[test]
    fn a_job_of_many_steps_is_read_at_once() {
        let mut intervals = vec![100i64; 100_000];
        intervals.extend(vec![900i64; 100_000]);
        let started = std::time::Instant::now();
        let note = slowdown_note(&job(&intervals)).expect("a note");
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
        // 200,000 steps are kept every 256th (`steps.rs`): the note says how close it is, and
        // the first slow step, 100001, lies within that.
        let about = note.strip_prefix("steps slowed down from about step ").expect("an approximate step");
        let (step, rest) = about.split_once(" (within ").expect("the stride");
        let (step, stride): (u64, u64) = (step.parse().unwrap(), rest.split_once(' ').unwrap().0.parse().unwrap());
        assert_eq!(stride, 256, "{note}");
        assert!(step <= 100_001 && 100_001 < step + stride, "{note}");
        assert!(note.contains("100 ms per step before, 900 ms after"), "{note}");
    }

    #[test]
    fn steady_or_noisy_jobs_get_no_note() {
        assert_eq!(slowdown_note(&job(&[100, 110, 95, 120, 100, 105, 98, 101])), None);
        assert_eq!(slowdown_note(&job(&[2, 3, 2, 9, 12, 10, 11, 9])), None, "slower, but still fast");
        // One slow step (a checkpoint save) is not a slowdown.
        assert_eq!(slowdown_note(&job(&[500, 510, 505, 9000, 500, 502, 499, 501])), None);
        assert_eq!(slowdown_note(&job(&[2, 2])), None);
    }

    /// Found by fuzzing the ingest messages: step lines at opposite ends of the time range
    /// (capture times come from the wire) overflowed the step interval (a panic in debug builds).
    #[test]
    fn step_times_at_the_ends_of_the_range_do_not_overflow() {
        let mut ev = JobEvidence::default();
        for step in 0..8u64 {
            let at = if step % 2 == 0 { i64::MIN } else { i64::MAX };
            ev.rank_mut(Rank(0)).steps.push(StepMark { step, capture_ns: at, printed_ns: None });
        }
        assert_eq!(slowdown_note(&ev), None);
    }
}
