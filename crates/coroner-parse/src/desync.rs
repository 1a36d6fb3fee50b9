//! ProcessGroupNCCL's desync report (`TORCH_NCCL_DESYNC_DEBUG=1`, or `TORCH_DISTRIBUTED_DEBUG`
//! at INFO and above): on a timeout the watchdog reads every rank's last collective from the store
//! and names the ranks that held the others back, one per indented line under the report's head
//! (`Rank 0` / `- [0] Timeout at collective: ALLREDUCE, #315`):
//! - `[7] finished collective #182, but didn't join collective #183 (count from 1)`: rank 7 never
//!   issued the next collective;
//! - `[7] joined but didn't finish collective #183 (count from 1)`: rank 7 is stuck inside it;
//! - `the ranks [1, 2] are the lagging ranks that caused this timeout. They never joined any
//!   collectives`: those ranks issued none at all.
//!
//! Each becomes the `Stall` event the barriers and Horovod's stall inspector give (who held the
//! collective up), named `desync report: collective #N` so the analysis can say where it read it.
//! The snapshot lines below (`[0, 1, 2] started ALLREDUCE`) only restate where the others wait.

use crate::util::leading_u64;
use coroner_model::{EventKind, Rank, DESYNC_REPORT_OP};

pub fn read(t: &str) -> Option<EventKind> {
    let s = t.trim_start();
    if let Some(rest) = s.strip_prefix('[') {
        if let Some(k) = one_lagging_rank(rest) {
            return Some(k);
        }
    }
    never_joined(s)
}

/// `[7] finished collective #182, but didn't join collective #183 ...` or
/// `[7] joined but didn't finish collective #183 ...` (the `[` already taken).
fn one_lagging_rank(rest: &str) -> Option<EventKind> {
    let (rank, tail) = rest.split_once("] ")?;
    let rank: u32 = rank.trim().parse().ok()?;
    let seq = if tail.starts_with("finished collective #") {
        after(tail, "but didn't join collective #")?
    } else if tail.starts_with("joined but didn't finish collective #") {
        after(tail, "collective #")?
    } else {
        return None;
    };
    Some(stall(seq.to_string(), vec![Rank(rank)]))
}

/// `... the ranks [1, 2] are the lagging ranks that caused this timeout. They never joined any
/// collectives`.
fn never_joined(s: &str) -> Option<EventKind> {
    let at = s.find("are the lagging ranks that caused this timeout")?;
    let head = &s[..at];
    let open = head.rfind('[')?;
    let close = open + head[open..].find(']')?;
    let ranks: Vec<Rank> = head[open + 1..close].split(',').map(|r| r.trim().parse::<u32>().ok().map(Rank)).collect::<Option<_>>()?;
    (!ranks.is_empty()).then(|| stall("any".to_string(), ranks))
}

fn stall(collective: String, missing: Vec<Rank>) -> EventKind {
    EventKind::Stall { op: format!("{DESYNC_REPORT_OP}: collective #{collective}"), ready: Vec::new(), missing }
}

fn after(s: &str, key: &str) -> Option<u64> {
    let at = s.find(key)? + key.len();
    leading_u64(&s[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing(t: &str) -> Option<(String, Vec<u32>)> {
        match read(t)? {
            EventKind::Stall { op, missing, .. } => Some((op, missing.iter().map(|r| r.0).collect())),
            _ => None,
        }
    }

    #[test]
    fn a_rank_that_finished_one_collective_and_never_joined_the_next_is_named() {
        let line = "                 [12] finished collective #40, but didn't join collective #41 (count from 1)";
        assert_eq!(missing(line), Some(("desync report: collective #41".to_string(), vec![12])));
    }

    #[test]
    fn a_rank_stuck_inside_a_collective_is_named() {
        assert_eq!(missing("\t[3] joined but didn't finish collective #9 (count from 1)"), Some(("desync report: collective #9".to_string(), vec![3])));
    }

    #[test]
    fn ranks_that_never_joined_any_collective_are_named() {
        let line = "\t - To our best knowledge, the ranks [4, 5] are the lagging ranks that caused this timeout. They never joined any collectives";
        assert_eq!(missing(line), Some(("desync report: collective #any".to_string(), vec![4, 5])));
    }

    #[test]
    fn the_snapshot_and_the_head_name_no_one() {
        assert_eq!(missing("             [0, 1, 2] started ALLREDUCE"), None);
        assert_eq!(missing("         - [0] Timeout at collective: ALLREDUCE, #315"), None);
        assert_eq!(missing("           #182 finished ranks:"), None);
        assert_eq!(missing("[rank0]: RuntimeError: [2] is setting up NCCL communicator"), None);
    }
}
