//! Replays a finished job's lines through a [`LiveMonitor`] as if it were running: what the live
//! monitor would have raised, and when. For tests and the figures in docs/LIVE.md.

use super::{LiveConfig, LiveMonitor};
use coroner_model::{Nanos, Rank, SuspectedHang};

/// A suspicion as raised during a replay: first raised at `at`, withdrawn at `until` (None: still
/// held at the end of the replay).
#[derive(Debug, Clone, PartialEq)]
pub struct Raised {
    pub at: Nanos,
    pub until: Option<Nanos>,
    pub finding: SuspectedHang,
}

/// Feeds `lines` (rank, capture time, text; any order) and `ends` (rank, time the process ended)
/// in time order, evaluating every `tick` from the first line to `until`.
pub fn replay(lines: &[(Rank, Nanos, String)], ends: &[(Rank, Nanos)], config: LiveConfig, tick: Nanos, until: Nanos) -> Vec<Raised> {
    let mut order: Vec<usize> = (0..lines.len()).collect();
    order.sort_by_key(|&i| (lines[i].1, lines[i].0));
    let mut ends = ends.to_vec();
    ends.sort_by_key(|e| (e.1, e.0));
    let Some(&first) = order.first() else { return Vec::new() };
    let mut m = LiveMonitor::new(config);
    let (mut li, mut ei) = (0, 0);
    let mut out: Vec<Raised> = Vec::new();
    let mut now = lines[first].1;
    while now <= until {
        while li < order.len() && lines[order[li]].1 <= now {
            let (rank, at, text) = &lines[order[li]];
            m.push_line(*rank, *at, text);
            li += 1;
        }
        while ei < ends.len() && ends[ei].1 <= now {
            m.push_end(ends[ei].0);
            ei += 1;
        }
        let found = m.evaluate(now);
        for r in out.iter_mut().filter(|r| r.until.is_none()) {
            if !found.iter().any(|f| f.rank == r.finding.rank) {
                r.until = Some(now);
            }
        }
        for f in found {
            if !out.iter().any(|r| r.until.is_none() && r.finding.rank == f.rank) {
                out.push(Raised { at: now, until: None, finding: f });
            }
        }
        now += tick.max(1);
    }
    out
}
