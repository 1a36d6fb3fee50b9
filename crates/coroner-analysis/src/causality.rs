//! Happens-before edges between ranks, read from what the lines say about each other, and the
//! clock bounds they imply.
//!
//! - A dump signal "from rank X" reaches rank Y after X detected the timeout.
//! - A connection closed "by rank X" (or by X's local rank on the same host) is seen after X's
//!   last line.
//!
//! An edge (a on rank A) -> (b on rank B) says `a + off_A <= b + off_B`, so
//! `off_B - off_A >= a - b`: a lower bound on B's offset relative to A's.

use crate::evidence::JobEvidence;
use coroner_model::{EventKind, Nanos, PeerRef, Rank};

/// `before` (on `from`) happened before `after` (on `to`), both on their hosts' clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub from: Rank,
    pub before: Nanos,
    pub to: Rank,
    pub after: Nanos,
}

impl Edge {
    /// The least `off_to - off_from` consistent with the edge.
    pub fn min_relative_offset(&self) -> i64 {
        self.before.saturating_sub(self.after)
    }
}

/// Every edge the evidence shows.
pub fn edges(evidence: &JobEvidence) -> Vec<Edge> {
    let mut out = Vec::new();
    let detected = |rank: Rank| -> Option<Nanos> {
        evidence.ranks.get(&rank)?.events.iter().find_map(|e| match &e.kind {
            EventKind::WatchdogTimeout { .. } | EventKind::DumpSignal { detector: None, .. } => Some(e.capture_ns),
            _ => None,
        })
    };
    let last_line = |rank: Rank| evidence.ranks.get(&rank).and_then(|r| r.last_capture_ns);
    for (rank, ev) in &evidence.ranks {
        for e in &ev.events {
            match &e.kind {
                EventKind::DumpSignal { detector: Some(x), .. } if x != rank => {
                    if let Some(t) = detected(*x) {
                        out.push(Edge { from: *x, before: t, to: *rank, after: e.capture_ns });
                    }
                }
                EventKind::ConnectionClosed { peer: Some(PeerRef::Rank(x)), .. } if x != rank => {
                    if let Some(t) = last_line(*x) {
                        // The peer's last line was printed before it went away.
                        out.push(Edge { from: *x, before: t, to: *rank, after: e.capture_ns });
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::RankEvidence;
    use coroner_model::{Event, LineRef, SeqNo, Stream};

    fn event(rank: u32, at: Nanos, kind: EventKind) -> Event {
        Event { rank: Some(Rank(rank)), line: LineRef { stream: Stream::Stderr, seq: 0 }, capture_ns: at, printed_ns: None, kind, text: String::new() }
    }

    #[test]
    fn a_dump_signal_follows_its_detection() {
        let mut ev = JobEvidence::default();
        ev.insert_rank(
            Rank(0),
            RankEvidence {
                events: vec![event(
                    0,
                    100,
                    EventKind::WatchdogTimeout {
                        pg: None,
                        seq: Some(SeqNo(11)),
                        op: "ALLREDUCE".into(),
                        numel_in: None,
                        numel_out: None,
                        timeout_ms: None,
                        elapsed_ms: None,
                    },
                )],
                ..Default::default()
            },
        );
        ev.insert_rank(
            Rank(1),
            RankEvidence {
                events: vec![event(1, 40, EventKind::DumpSignal { pg: None, detector: Some(Rank(0)), last_enqueued: None, last_completed: None })],
                ..Default::default()
            },
        );
        let e = edges(&ev);
        assert_eq!(e, vec![Edge { from: Rank(0), before: 100, to: Rank(1), after: 40 }]);
        // Rank 1's clock must be at least 60 ns ahead of rank 0's to put the signal after the detection.
        assert_eq!(e[0].min_relative_offset(), 60);
    }
}
