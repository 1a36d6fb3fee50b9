//! c10d's start-up and monitored barriers, which name the ranks they wait for the way Horovod's
//! stall inspector does, so they become the same `Stall` event (who arrived, who did not):
//! - gloo's `monitoredBarrier` on a rank that arrived:
//!   `Rank 6 successfully reached monitoredBarrier, but received errors while waiting for
//!   send/recv from rank 0. Please check rank 0 logs for faulty rank.`;
//! - the same barrier on rank 0, naming the absent ranks:
//!   `Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms` (`Rank 2 failed to pass ...` when it
//!   stops at the first);
//! - `init_process_group`'s store-based barrier while ranks are missing: `Waiting in store based
//!   barrier to initialize process group for rank: 2, key: store_based_barrier_key:2
//!   (world_size=8, worker_count=7, timeout=0:30:00)`. Healthy start-ups print it too until the
//!   last rank arrives (`Completed store-based barrier for key:...`), so the caller keeps it
//!   pending and reports it only if no completion follows.

use crate::util::leading_u64;
use coroner_model::{EventKind, Rank};

/// What a barrier line says.
#[derive(Debug, Clone, PartialEq)]
pub enum Barrier {
    /// A stall that stands as printed (the monitored barrier's verdict).
    Stall(EventKind),
    /// A rank still waiting in the store-based barrier: a stall unless the barrier completes.
    Waiting(EventKind),
    /// The store-based barrier completed: an earlier `Waiting` was only a slow start.
    Completed,
}

const MONITORED: &str = "monitoredBarrier";

pub fn read(t: &str) -> Option<Barrier> {
    if t.contains(MONITORED) {
        return monitored(t).map(Barrier::Stall);
    }
    if t.contains("Completed store-based barrier") {
        return Some(Barrier::Completed);
    }
    let at = t.find("Waiting in store based barrier")?;
    let r = &t[at..];
    let rank = after(r, "for rank: ")?;
    let key = r.find("key: ").map(|i| r[i + 5..].split([',', ' ']).next().unwrap_or("").to_string()).filter(|k| !k.is_empty());
    let world = after(r, "world_size=");
    let arrived = after(r, "worker_count=");
    // Every rank already there: the barrier is about to complete.
    if let (Some(w), Some(a)) = (world, arrived) {
        if a >= w {
            return None;
        }
    }
    let op = key.unwrap_or_else(|| "store_based_barrier".to_string());
    Some(Barrier::Waiting(EventKind::Stall { op, ready: vec![Rank(rank)], missing: Vec::new() }))
}

fn monitored(t: &str) -> Option<EventKind> {
    let op = MONITORED.to_string();
    if let Some(at) = t.find("successfully reached monitoredBarrier") {
        let me = rank_before(&t[..at])?;
        let r = &t[at..];
        let peer = after(r, "send/recv from rank ").or_else(|| after(r, "check rank "))?;
        return Some(EventKind::Stall { op, ready: vec![Rank(me)], missing: vec![Rank(peer)] });
    }
    let at = t.find("failed to pass monitoredBarrier")?;
    let head = t[..at].trim_end();
    let list = head.rsplit_once("Ranks ").or_else(|| head.rsplit_once("Rank ")).map(|(_, l)| l)?;
    let missing: Vec<Rank> = list.split(',').map(|s| s.trim().parse::<u32>().ok().map(Rank)).collect::<Option<_>>()?;
    (!missing.is_empty()).then_some(EventKind::Stall { op, ready: Vec::new(), missing })
}

/// `Rank 6 ` just before the phrase: the rank that arrived.
fn rank_before(head: &str) -> Option<u32> {
    let (_, n) = head.trim_end().rsplit_once("Rank ")?;
    n.trim().parse().ok()
}

fn after(s: &str, key: &str) -> Option<u32> {
    let at = s.find(key)? + key.len();
    leading_u64(&s[at..]).and_then(|n| u32::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stall(b: Option<Barrier>) -> (Vec<u32>, Vec<u32>) {
        match b {
            Some(Barrier::Stall(EventKind::Stall { ready, missing, .. }) | Barrier::Waiting(EventKind::Stall { ready, missing, .. })) => {
                (ready.iter().map(|r| r.0).collect(), missing.iter().map(|r| r.0).collect())
            }
            other => panic!("not a stall: {other:?}"),
        }
    }

    #[test]
    fn an_arrived_rank_names_the_rank_it_waited_for() {
        let line = "[E1203 10:01:02.5 ProcessGroupGloo.cpp:143] Rank 3 successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 11. Please check rank 11 logs for faulty rank.";
        assert_eq!(stall(read(line)), (vec![3], vec![11]));
    }

    #[test]
    fn rank_zero_lists_the_ranks_that_never_arrived() {
        assert_eq!(stall(read("RuntimeError: Ranks 2, 5, 9 failed to pass monitoredBarrier in 60000 ms")), (vec![], vec![2, 5, 9]));
        assert_eq!(stall(read("Rank 4 failed to pass monitoredBarrier in 1000 ms")), (vec![], vec![4]));
        assert_eq!(read("monitoredBarrier timeout set to 30s"), None);
    }

    #[test]
    fn a_store_barrier_short_of_ranks_waits_until_it_completes() {
        let w = "Waiting in store based barrier to initialize process group for rank: 5, key: store_based_barrier_key:1 (world_size=16, worker_count=12, timeout=0:30:00)";
        assert!(matches!(read(w), Some(Barrier::Waiting(EventKind::Stall { ref op, .. })) if op == "store_based_barrier_key:1"));
        assert_eq!(stall(read(w)), (vec![5], vec![]));
        let full = "Waiting in store based barrier to initialize process group for rank: 0, key: store_based_barrier_key:1 (world_size=4, worker_count=4, timeout=0:30:00)";
        assert_eq!(read(full), None);
        assert_eq!(read("Rank 1: Completed store-based barrier for key:store_based_barrier_key:1 with 4 nodes."), Some(Barrier::Completed));
    }
}
