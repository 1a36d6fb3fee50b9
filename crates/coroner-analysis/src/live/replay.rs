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

/// A liveness sample as an agent sends it: rank, time, CPU ns, IO bytes, GPU utilisation.
pub type Liveness = (Rank, Nanos, Option<u64>, Option<u64>, Option<u32>);

/// What a replay feeds the monitor; every list in any order.
#[derive(Debug, Clone, Default)]
pub struct Feed {
    /// (rank, capture time, text)
    pub lines: Vec<(Rank, Nanos, String)>,
    /// (rank, time the process ended)
    pub ends: Vec<(Rank, Nanos)>,
    pub liveness: Vec<Liveness>,
}

/// Feeds everything in time order, evaluating every `tick` from the first line to `until`.
pub fn replay(feed: &Feed, config: LiveConfig, tick: Nanos, until: Nanos) -> Vec<Raised> {
    let lines = &feed.lines;
    let mut order: Vec<usize> = (0..lines.len()).collect();
    order.sort_by_key(|&i| (lines[i].1, lines[i].0));
    let mut ends = feed.ends.clone();
    ends.sort_by_key(|e| (e.1, e.0));
    let mut live = feed.liveness.clone();
    live.sort_by_key(|l| (l.1, l.0));
    let Some(&first) = order.first() else { return Vec::new() };
    let mut m = LiveMonitor::new(config);
    let (mut li, mut ei, mut vi) = (0, 0, 0);
    let mut out: Vec<Raised> = Vec::new();
    let mut now = lines[first].1;
    while now <= until {
        while li < order.len() && lines[order[li]].1 <= now {
            let (rank, at, text) = &lines[order[li]];
            m.push_line(*rank, *at, text);
            li += 1;
        }
        while vi < live.len() && live[vi].1 <= now {
            let (rank, at, cpu, io, gpu) = live[vi];
            m.push_liveness(rank, at, cpu, io, gpu);
            vi += 1;
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
