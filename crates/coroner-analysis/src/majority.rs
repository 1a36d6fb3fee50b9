//! Ranks that issued a different collective from the majority at the same point: with every
//! rank stuck or timed out and nobody failing first-hand, the odd ones out are the culprits.
//! Two sources, each keyed by where in the sequence of collectives the processes were:
//! - c10d's watchdog: each rank's timed-out `WorkNCCL(SeqNum=s, OpType=..., NumelIn=...)`, keyed
//!   by (process group, s);
//! - NCCL's collective trace (`NCCL_DEBUG_SUBSYS=COLL`): each process's last `opCount` with its
//!   op, count and datatype, keyed by (opCount, nranks); a process is named by host and pid
//!   when no rank owns its lines.
//!
//! A fingerprint held by a strict majority of three or more participants is the group's; the
//! others deviate.

use crate::classified::ClassifiedJob;
use crate::progress::normalize_pg;
use coroner_model::{Event, EventKind, PgId, Rank};
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct MajorityFinding<'a> {
    pub rank: Option<Rank>,
    pub candidates: Vec<Rank>,
    pub confidence: f64,
    pub summary: String,
    pub events: Vec<&'a Event>,
}

/// Who took part: a rank, or a process known only by host and pid.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Rank(Rank),
    Process(String, u32),
}

impl Who {
    fn describe(&self) -> String {
        match self {
            Who::Rank(r) => format!("rank {r}"),
            Who::Process(h, p) => format!("process {p} on {h}"),
        }
    }
}

type Key = (String, u64);
type Print = (String, Option<u64>, Option<u32>);

pub fn find<'a>(job: &ClassifiedJob<'a>) -> Option<MajorityFinding<'a>> {
    let mut at: BTreeMap<Key, BTreeMap<Who, (Print, &'a Event)>> = BTreeMap::new();
    for (rank, evs) in &job.ranks {
        for c in evs {
            match &c.event.kind {
                EventKind::WatchdogTimeout { pg, seq, op, numel_in, .. } if !op.is_empty() => {
                    let pg = pg.as_ref().map(normalize_pg).unwrap_or_else(PgId::default_pg);
                    let who = if rank.is_unknown() { continue } else { Who::Rank(*rank) };
                    // Without sequence numbers (PyTorch before 1.13), the collectives the ranks
                    // timed out in are compared as one point: each rank's last.
                    let key = match seq {
                        Some(seq) => (format!("seq {seq} of process group {pg}"), seq.0),
                        None => (format!("the collective each rank timed out in (process group {pg}; no sequence numbers in these logs)"), u64::MAX),
                    };
                    at.entry(key).or_default().insert(who, ((op.clone(), *numel_in, None), c.event));
                }
                EventKind::NcclCollective { host, pid, op, op_count, count, datatype, nranks } => {
                    let who = if rank.is_unknown() { Who::Process(host.clone(), *pid) } else { Who::Rank(*rank) };
                    let group = format!("opCount {op_count} of a communicator of {} ranks", nranks.map_or("?".to_string(), |n| n.to_string()));
                    at.entry((group, *op_count)).or_default().insert(who, ((op.clone(), Some(*count), Some(*datatype)), c.event));
                }
                _ => {}
            }
        }
    }
    for ((place, _), who) in &at {
        if who.len() < 3 {
            continue;
        }
        let mut counts: BTreeMap<&Print, usize> = BTreeMap::new();
        for (print, _) in who.values() {
            *counts.entry(print).or_default() += 1;
        }
        let (usual, n) = counts.iter().max_by_key(|(_, n)| **n).map(|(p, n)| (*p, *n))?;
        if n * 2 <= who.len() || n == who.len() {
            continue;
        }
        let odd: Vec<(&Who, &(Print, &'a Event))> = who.iter().filter(|(_, (p, _))| p != usual).collect();
        let ranks: Vec<Rank> = odd
            .iter()
            .filter_map(|(w, _)| match w {
                Who::Rank(r) => Some(*r),
                _ => None,
            })
            .collect();
        let names: Vec<String> = odd.iter().map(|(w, (p, _))| format!("{} ({})", w.describe(), describe(p))).collect();
        let mut events: Vec<&'a Event> = odd.iter().map(|(_, (_, e))| *e).collect();
        events.extend(who.values().filter(|(p, _)| p == usual).map(|(_, e)| *e).take(1));
        let rank = match (ranks.as_slice(), odd.len()) {
            ([one], 1) => Some(*one),
            _ => None,
        };
        return Some(MajorityFinding {
            rank,
            candidates: ranks.clone(),
            confidence: if odd.len() == 1 { 0.75 } else { 0.5 },
            summary: format!(
                "at {place}, {} issued a different collective from the other {n} ({}): {}",
                if odd.len() == 1 { "one participant".to_string() } else { format!("{} participants", odd.len()) },
                describe(usual),
                names.join(", ")
            ),
            events,
        });
    }
    None
}

fn describe((op, size, dtype): &Print) -> String {
    let mut s = op.clone();
    if let Some(n) = size {
        s.push_str(&format!(", {n} elements"));
    }
    if let Some(d) = dtype {
        s.push_str(&format!(", datatype {d}"));
    }
    s
}
