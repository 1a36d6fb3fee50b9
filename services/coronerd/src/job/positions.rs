//! Where each (rank, stream, lane) of a job resumes: the next sequence number the server expects.
//!
//! Contract:
//! - Deduplication is by (rank, stream, sequence number), each lane of 2^40 numbers on its own
//!   (why lanes: `claims.rs`). A line whose number its lane already passed is a resent one.
//! - [`keep_fresh`] is the rule, pure; [`Committed`] holds the positions of what is durable and
//!   moves only forward, only after an index commit ([`Committed::advance`]), so a failed commit
//!   leaves the lines to be sent again.

use coroner_model::{LogLine, Stream};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

/// Bits of a sequence number within its lane (the rule lives in the model).
pub const LANE_BITS: u32 = coroner_model::SEQ_LANE_BITS;

/// The lane of a sequence number.
pub fn lane_of(seq: u64) -> u32 {
    coroner_model::seq_lane(seq)
}

/// The first sequence number of a lane.
pub fn lane_start(lane: u32) -> u64 {
    u64::from(lane) << LANE_BITS
}

/// A (rank, stream, lane) whose next expected sequence number a job tracks.
pub type StreamLane = (Option<u32>, Stream, u32);

/// The next sequence number the server expects per (rank, stream, lane).
pub type Positions = BTreeMap<StreamLane, u64>;

/// What a group of batches advances over the committed positions, before it is durable.
pub type Advance = HashMap<StreamLane, u64>;

/// Counts a line as held: its lane resumes after it at least.
pub fn record(positions: &mut Positions, rank: Option<u32>, stream: Stream, seq: u64) {
    let next = positions.entry((rank, stream, lane_of(seq))).or_insert(0);
    *next = (*next).max(seq.saturating_add(1));
}

/// Drops from `lines` those already held (by `held`, or earlier in this group, `next`) and
/// records in `next` where each lane now resumes. Returns how many were dropped.
pub fn keep_fresh(lines: &mut Vec<LogLine>, held: &Positions, next: &mut Advance) -> usize {
    let before = lines.len();
    // A batch's lines mostly share one stream: look the position up when the key changes.
    let mut current: Option<(StreamLane, u64)> = None;
    lines.retain(|l| {
        let key = (l.rank.map(|r| r.0), l.stream, lane_of(l.seq));
        let expected = match &mut current {
            Some((k, e)) if *k == key => e,
            _ => {
                if let Some((k, e)) = current.take() {
                    next.insert(k, e);
                }
                let e = next.get(&key).or_else(|| held.get(&key)).copied().unwrap_or(0);
                &mut current.insert((key, e)).1
            }
        };
        if l.seq < *expected {
            false
        } else {
            // Admission leaves out u64::MAX (`grpc/ingest/admit.rs`); never wrap regardless.
            *expected = l.seq.saturating_add(1);
            true
        }
    });
    if let Some((k, e)) = current {
        next.insert(k, e);
    }
    before - lines.len()
}

/// The positions of what the job's index holds durably.
pub struct Committed(Mutex<Positions>);

impl Committed {
    pub fn new(positions: Positions) -> Committed {
        Committed(Mutex::new(positions))
    }

    fn lock(&self) -> MutexGuard<'_, Positions> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of the positions now.
    pub fn get(&self) -> Positions {
        self.lock().clone()
    }

    /// The positions an opening session of `rank` needs: its own rank's (a range of the ordered
    /// map), or every one for a session without a rank (a launcher's agent files lines under
    /// many ranks). Copying the whole map per rank made 16,384 openings quadratic.
    pub fn for_opening(&self, rank: Option<u32>) -> Positions {
        let all = self.lock();
        match rank {
            None => all.clone(),
            Some(r) => all.range((Some(r), Stream::Stdout, 0)..=(Some(r), Stream::File, u32::MAX)).map(|(k, v)| (*k, *v)).collect(),
        }
    }

    /// Reads the positions in place (the committer's dedup, without a copy).
    pub fn with<R>(&self, f: impl FnOnce(&Positions) -> R) -> R {
        f(&self.lock())
    }

    /// A group was committed: its lanes resume after it (never earlier than they did).
    pub fn advance(&self, next: Advance) {
        let mut held = self.lock();
        for (key, n) in next {
            let e = held.entry(key).or_insert(0);
            *e = (*e).max(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::Rank;

    #[test]
    fn an_opening_rank_sees_only_its_own_streams_and_a_rankless_one_all() {
        let mut p = Positions::new();
        for (rank, stream, seq) in
            [(Some(1), Stream::Stdout, 4), (Some(1), Stream::File, 7), (Some(2), Stream::Stderr, 9), (None, Stream::Stdout, 3), (Some(0), Stream::Stdout, 1)]
        {
            record(&mut p, rank, stream, seq);
        }
        let c = Committed::new(p.clone());
        let own: Vec<StreamLane> = c.for_opening(Some(1)).into_keys().collect();
        assert_eq!(own, vec![(Some(1), Stream::Stdout, 0), (Some(1), Stream::File, 0)]);
        assert!(c.for_opening(Some(7)).is_empty());
        assert_eq!(c.for_opening(None), p);
    }

    fn line(rank: u32, seq: u64) -> LogLine {
        LogLine { rank: Some(Rank(rank)), stream: Stream::Stdout, seq, capture_ns: 0, bytes: b"x".to_vec() }
    }

    fn seqs(lines: &[LogLine]) -> Vec<u64> {
        lines.iter().map(|l| l.seq).collect()
    }

    #[test]
    fn rule_a_line_its_lane_already_passed_is_dropped() {
        let mut held = Positions::new();
        record(&mut held, Some(0), Stream::Stdout, 4);
        let mut lines = vec![line(0, 3), line(0, 4), line(0, 5), line(1, 0)];
        let mut next = Advance::new();
        assert_eq!(keep_fresh(&mut lines, &held, &mut next), 2);
        assert_eq!(seqs(&lines), [5, 0]);
        assert_eq!(next[&(Some(0), Stream::Stdout, 0)], 6);
        assert_eq!(next[&(Some(1), Stream::Stdout, 0)], 1);
    }

    #[test]
    fn rule_each_lane_is_deduplicated_on_its_own() {
        let mut held = Positions::new();
        record(&mut held, Some(0), Stream::Stdout, 100);
        let mut lines = vec![line(0, lane_start(1)), line(0, 7), line(0, lane_start(1) + 1)];
        let mut next = Advance::new();
        assert_eq!(keep_fresh(&mut lines, &held, &mut next), 1, "only lane 0's 7 was held");
        assert_eq!(seqs(&lines), [lane_start(1), lane_start(1) + 1]);
    }

    #[test]
    fn rule_a_line_sent_twice_in_one_group_is_kept_once() {
        let held = Positions::new();
        let mut next = Advance::new();
        let mut first = vec![line(0, 0), line(0, 1)];
        let mut again = vec![line(0, 1), line(0, 2)];
        keep_fresh(&mut first, &held, &mut next);
        assert_eq!(keep_fresh(&mut again, &held, &mut next), 1);
        assert_eq!(seqs(&again), [2]);
    }

    #[test]
    fn rule_positions_only_move_forward() {
        let c = Committed::new(Positions::new());
        c.advance(Advance::from([((Some(0), Stream::Stdout, 0), 9)]));
        c.advance(Advance::from([((Some(0), Stream::Stdout, 0), 4)]));
        assert_eq!(c.get()[&(Some(0), Stream::Stdout, 0)], 9);
    }

    #[test]
    fn the_last_number_of_the_space_does_not_wrap() {
        let mut held = Positions::new();
        record(&mut held, None, Stream::Stderr, u64::MAX);
        assert_eq!(held[&(None, Stream::Stderr, lane_of(u64::MAX))], u64::MAX);
    }
}
