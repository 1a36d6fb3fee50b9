//! The cascade as a tree: who gave up because of whom, and on which collective.
//!
//! Every rank that did not fail first-hand is a victim of some other rank. Its parent is read from
//! the mechanism of its first symptom, most specific first:
//! - a transport that names the peer that hung up (`Connection closed by localRank 1`, a peer
//!   address) points at that peer;
//! - a watchdog timeout on collective k of a process group points at the ranks of that group that
//!   never issued k (the culprit when it is one of them);
//! - a launcher's SIGTERM points at the rank on the same host whose failure made the launcher stop
//!   its workers;
//! - otherwise the culprit.
//!
//! A parent must have failed no later than its child (within the clocks' uncertainty) and a link
//! may never close a loop; a link that would is re-pointed at the culprit.

use crate::classified::{Classified, ClassifiedJob};
use crate::clock::ClockModel;
use crate::evidence::JobEvidence;
use crate::never_issued::NeverIssued;
use crate::progress::{normalize_pg, Progress};
use crate::rules::RuleSet;
use coroner_model::{format_rfc3339_ns, CascadeLink, EventKind, Nanos, PeerRef, PgId, ProcessEndCause, Rank, Role};
use std::collections::{BTreeMap, HashMap};

const SIGTERM: i32 = 15;

/// One victim before it is placed in the tree.
struct Victim {
    rank: Rank,
    aligned_ns: Nanos,
    how: String,
    parent: Option<(Rank, &'static str)>,
    collective: Option<String>,
}

/// Where each rank runs, for resolving peers named by host or local rank.
struct Placement<'e> {
    host_of: HashMap<Rank, &'e str>,
    /// Ranks per host, ascending: torchrun gives a node's workers consecutive global ranks, so the
    /// n-th rank of a host is its local rank n.
    ranks_on: BTreeMap<&'e str, Vec<Rank>>,
}

impl<'e> Placement<'e> {
    fn new(evidence: &'e JobEvidence) -> Self {
        let mut host_of = HashMap::new();
        let mut ranks_on: BTreeMap<&str, Vec<Rank>> = BTreeMap::new();
        for (rank, ev) in &evidence.ranks {
            let host = ev.host.as_deref().or_else(|| {
                ev.events.iter().find_map(|e| match &e.kind {
                    EventKind::NcclInit { host, .. } => Some(host.as_str()),
                    _ => None,
                })
            });
            if let Some(h) = host {
                host_of.insert(*rank, h);
                ranks_on.entry(h).or_default().push(*rank);
            }
        }
        Placement { host_of, ranks_on }
    }

    fn same_host(&self, rank: Rank) -> &[Rank] {
        self.host_of.get(&rank).and_then(|h| self.ranks_on.get(h)).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The ranks a peer reference can mean, as seen from `from`.
    fn resolve(&self, from: Rank, peer: &PeerRef) -> Vec<Rank> {
        match peer {
            PeerRef::Rank(r) => vec![*r],
            PeerRef::LocalRank(n) => self.same_host(from).get(*n as usize).copied().into_iter().collect(),
            PeerRef::Address(addr) => {
                let host = address_host(addr);
                self.ranks_on.iter().filter(|(h, _)| host_matches(h, host)).flat_map(|(_, ranks)| ranks.iter().copied()).collect()
            }
        }
    }
}

/// `[10.0.0.5]:29500`, `10.0.0.5:29500`, `node-3:1234` -> the host part.
fn address_host(addr: &str) -> &str {
    let addr = addr.trim();
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match addr.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !host.contains(':') => host,
        _ => addr,
    }
}

/// A host name matches an address's host when equal, or when one is the other's first label
/// (`node-3` and `node-3.cluster.local`).
fn host_matches(host: &str, addr_host: &str) -> bool {
    host == addr_host || host.split('.').next() == Some(addr_host) || addr_host.split('.').next() == Some(host)
}

pub fn build(
    evidence: &JobEvidence,
    job: &ClassifiedJob<'_>,
    rules: &RuleSet,
    clock: &ClockModel,
    progress: &Progress,
    culprit: Option<Rank>,
    culprit_ns: Option<Nanos>,
) -> Vec<CascadeLink> {
    let Some(culprit) = culprit else { return Vec::new() };
    let placement = Placement::new(evidence);
    let never_issued = NeverIssued::new(progress);
    let mut victims: Vec<Victim> = evidence
        .all_ranks()
        .into_iter()
        .filter(|r| *r != culprit)
        .filter_map(|r| victim(r, evidence, job, rules, clock, &never_issued, &placement, culprit))
        .collect();
    victims.sort_by_key(|v| (v.aligned_ns, v.rank));

    let failed_at: HashMap<Rank, Nanos> =
        victims.iter().map(|v| (v.rank, v.aligned_ns)).chain(std::iter::once((culprit, culprit_ns.unwrap_or(Nanos::MIN)))).collect();
    let mut parent: HashMap<Rank, (Rank, &'static str)> = HashMap::new();
    for v in &victims {
        let chosen = v
            .parent
            .filter(|(p, _)| *p != v.rank)
            .filter(|(p, _)| *p == culprit || failed_at.get(p).is_some_and(|t| !clock.surely_before(Some(v.rank), v.aligned_ns, Some(*p), *t)))
            .filter(|(p, _)| !reaches(&parent, *p, v.rank));
        parent.insert(v.rank, chosen.unwrap_or((culprit, "failed after the culprit")));
    }
    tree_order(culprit, victims, &parent)
}

/// True when following parents from `from` arrives at `target` (a link to `from` would close a loop).
fn reaches(parent: &HashMap<Rank, (Rank, &'static str)>, from: Rank, target: Rank) -> bool {
    let mut at = from;
    for _ in 0..=parent.len() {
        if at == target {
            return true;
        }
        match parent.get(&at) {
            Some((p, _)) => at = *p,
            None => return false,
        }
    }
    true
}

/// The victims in depth-first order from the culprit, children by time.
fn tree_order(culprit: Rank, victims: Vec<Victim>, parent: &HashMap<Rank, (Rank, &'static str)>) -> Vec<CascadeLink> {
    let mut children: HashMap<Rank, Vec<usize>> = HashMap::new();
    for (i, v) in victims.iter().enumerate() {
        if let Some((p, _)) = parent.get(&v.rank) {
            children.entry(*p).or_default().push(i);
        }
    }
    let mut slots: Vec<Option<Victim>> = victims.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    let mut stack: Vec<(usize, u32)> = children.get(&culprit).map(|c| c.iter().rev().map(|i| (*i, 1)).collect()).unwrap_or_default();
    while let Some((i, depth)) = stack.pop() {
        let Some(v) = slots[i].take() else { continue };
        if let Some(kids) = children.get(&v.rank) {
            stack.extend(kids.iter().rev().map(|k| (*k, depth + 1)));
        }
        let (by, link) = parent.get(&v.rank).copied().unwrap_or((culprit, "failed after the culprit"));
        out.push(CascadeLink {
            rank: v.rank,
            caused_by: Some(by),
            how: v.how,
            time: Some(format_rfc3339_ns(v.aligned_ns)),
            depth,
            collective: v.collective,
            link: Some(link.to_string()),
        });
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn victim(
    rank: Rank,
    evidence: &JobEvidence,
    job: &ClassifiedJob<'_>,
    rules: &RuleSet,
    clock: &ClockModel,
    never_issued: &NeverIssued<'_>,
    placement: &Placement<'_>,
    culprit: Rank,
) -> Option<Victim> {
    if let Some(s) = job.first_symptom(rank) {
        let how = s.rule.and_then(|rule| rule.summary.clone()).unwrap_or_else(|| s.event.kind.name().replace('_', " "));
        let (parent, collective) = parent_of_symptom(rank, s, job, never_issued, placement, culprit);
        return Some(Victim {
            rank,
            aligned_ns: s.aligned_ns,
            how: format!("{how}: {}", s.event.text.chars().take(200).collect::<String>()),
            parent,
            collective,
        });
    }
    // No symptom line: a process that was stopped from outside after the failure.
    let end = evidence.end_of(rank)?;
    if rules.classify_end(end).role != Role::Symptom {
        return None;
    }
    let host_ns = end.at_ns.or_else(|| evidence.ranks.get(&rank).and_then(|r| r.last_capture_ns))?;
    let parent = if end.cause() == ProcessEndCause::Signal(SIGTERM) {
        first_failed_on_host(rank, job, placement, culprit).map(|p| (p, "same host's launcher stopped it"))
    } else {
        None
    };
    Some(Victim { rank, aligned_ns: clock.aligned(Some(rank), host_ns), how: format!("the process {}", end.cause().describe()), parent, collective: None })
}

fn parent_of_symptom(
    rank: Rank,
    s: &Classified<'_>,
    job: &ClassifiedJob<'_>,
    never_issued: &NeverIssued<'_>,
    placement: &Placement<'_>,
    culprit: Rank,
) -> (Option<(Rank, &'static str)>, Option<String>) {
    match &s.event.kind {
        EventKind::ConnectionClosed { peer: Some(peer), .. } => {
            let named = placement.resolve(rank, peer);
            let pick = if named.contains(&culprit) { Some(culprit) } else { named.first().copied() };
            (pick.map(|p| (p, "named the peer that hung up")), None)
        }
        EventKind::WatchdogTimeout { pg, seq: Some(seq), op, numel_in, .. } => {
            let pg = pg.as_ref().map(normalize_pg).unwrap_or_else(PgId::default_pg);
            let collective = Some(match numel_in {
                Some(n) => format!("{op} seq {seq} of process group {pg} ({n} elements)"),
                None => format!("{op} seq {seq} of process group {pg}"),
            });
            let pick = never_issued.parent(&pg, *seq, rank, culprit);
            (pick.map(|p| (p, "never issued the collective it waited in")), collective)
        }
        EventKind::LauncherSignal { .. } => (first_failed_on_host(rank, job, placement, culprit).map(|p| (p, "same host's launcher stopped it")), None),
        _ => (None, None),
    }
}

/// The rank on `rank`'s host that failed first (the culprit when it runs there): the worker whose
/// failure made the host's launcher stop the others.
fn first_failed_on_host(rank: Rank, job: &ClassifiedJob<'_>, placement: &Placement<'_>, culprit: Rank) -> Option<Rank> {
    let local = placement.same_host(rank);
    if local.contains(&culprit) {
        return Some(culprit);
    }
    local
        .iter()
        .filter(|r| **r != rank)
        .filter_map(|r| {
            let first = job
                .events(*r)
                .iter()
                .filter(|c| matches!(c.role, Role::Root | Role::Symptom))
                .filter(|c| !matches!(c.event.kind, EventKind::LauncherSignal { .. }))
                .map(|c| c.aligned_ns)
                .min()?;
            Some((first, *r))
        })
        .min()
        .map(|(_, r)| r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::RankEvidence;
    use coroner_model::{ClockSample, Event, LineRef, ProcessEnd, Report, SeqNo, Stream};

    const T0: Nanos = 1_790_000_000_000_000_000;

    fn event(rank: u32, at_s: i64, kind: EventKind, text: &str) -> Event {
        Event {
            rank: Some(Rank(rank)),
            line: LineRef { stream: Stream::Stderr, seq: at_s as u64 },
            capture_ns: T0 + at_s * 1_000_000_000,
            printed_ns: None,
            kind,
            text: text.to_string(),
        }
    }

    fn rank_on(host: &str, events: Vec<Event>) -> RankEvidence {
        RankEvidence { host: Some(host.to_string()), events, lines: 10, ..Default::default() }
    }

    /// With every rank's clock known to a millisecond, as agents' NTP samples give it.
    fn analyze(mut evidence: JobEvidence) -> Report {
        for r in evidence.all_ranks() {
            let t = T0 - 5_000_000_000;
            evidence.clock_samples.push(ClockSample {
                rank: r,
                t1_agent_send: t,
                t2_server_recv: t + 500_000,
                t3_server_send: t + 600_000,
                t4_agent_recv: t + 1_100_000,
            });
        }
        for ev in evidence.ranks.values_mut() {
            std::sync::Arc::make_mut(ev).events.sort_by_key(|e| e.capture_ns);
        }
        crate::analyze(&evidence, &RuleSet::builtin())
    }

    fn link(report: &Report, rank: u32) -> &CascadeLink {
        report.cascade.iter().find(|l| l.rank == Rank(rank)).unwrap_or_else(|| panic!("rank {rank} not in {:?}", report.cascade))
    }

    fn timeout(rank: u32, at_s: i64, seq: u64) -> Event {
        event(
            rank,
            at_s,
            EventKind::WatchdogTimeout {
                pg: None,
                seq: Some(SeqNo(seq)),
                op: "ALLREDUCE".into(),
                numel_in: Some(1153),
                numel_out: Some(1153),
                timeout_ms: Some(600_000),
                elapsed_ms: None,
            },
            "Watchdog caught collective operation timeout",
        )
    }

    fn status(rank: u32, at_s: i64, enqueued: u64, completed: u64) -> Event {
        event(
            rank,
            at_s,
            EventKind::PgStatus {
                pg: None,
                failing_seq: None,
                last_enqueued: Some(SeqNo(enqueued)),
                last_started: None,
                last_completed: Some(SeqNo(completed)),
            },
            "PG status",
        )
    }

    #[test]
    fn a_peer_that_hung_up_is_the_parent_and_the_tree_is_depth_first() {
        // Rank 3 runs out of memory; rank 2 (same host) sees local rank 1 (= rank 3) hang up;
        // rank 0 then sees rank 2 hang up; rank 1 times out in a collective rank 3 never issued.
        let oom = EventKind::Exception {
            exc_type: "torch.OutOfMemoryError".into(),
            message: "CUDA out of memory. Tried to allocate 2.00 GiB".into(),
            frames: Vec::new(),
        };
        let closed = |peer: PeerRef| EventKind::ConnectionClosed { peer: Some(peer), transport: "nccl".into() };
        let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(4), finished: true, ..Default::default() };
        ev.insert_rank(Rank(0), rank_on("a", vec![status(0, 31, 11, 10), event(0, 30, closed(PeerRef::Rank(Rank(2))), "Connection closed by rank 2")]));
        ev.insert_rank(Rank(1), rank_on("a", vec![timeout(1, 40, 11), status(1, 41, 11, 10)]));
        ev.insert_rank(Rank(2), rank_on("b", vec![status(2, 21, 11, 10), event(2, 20, closed(PeerRef::LocalRank(1)), "Connection closed by localRank 1")]));
        ev.insert_rank(Rank(3), rank_on("b", vec![status(3, 11, 10, 10), event(3, 10, oom, "torch.OutOfMemoryError: CUDA out of memory.")]));
        for r in 0..4 {
            ev.ends.push(ProcessEnd { rank: Rank(r), exit_code: Some(1), signal: None, at_ns: None });
        }
        let report = analyze(ev);
        assert_eq!(report.first_failure.as_ref().and_then(|f| f.rank), Some(Rank(3)));
        let order: Vec<(u32, Option<u32>, u32)> = report.cascade.iter().map(|l| (l.rank.0, l.caused_by.map(|r| r.0), l.depth)).collect();
        assert_eq!(order, vec![(2, Some(3), 1), (0, Some(2), 2), (1, Some(3), 1)], "{:#?}", report.cascade);
        assert_eq!(link(&report, 1).collective.as_deref(), Some("ALLREDUCE seq 11 of process group 0 (1153 elements)"));
        assert_eq!(link(&report, 0).link.as_deref(), Some("named the peer that hung up"));
    }

    #[test]
    fn a_parent_that_failed_later_than_its_child_is_not_taken() {
        // Rank 0 names rank 2 as the peer that hung up, but rank 2 only failed later: rank 0's
        // failure follows from the culprit, not from rank 2.
        let oom = EventKind::Exception { exc_type: "torch.OutOfMemoryError".into(), message: "CUDA out of memory.".into(), frames: Vec::new() };
        let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(3), finished: true, ..Default::default() };
        ev.insert_rank(
            Rank(0),
            rank_on("a", vec![event(0, 20, EventKind::ConnectionClosed { peer: Some(PeerRef::Rank(Rank(2))), transport: "nccl".into() }, "closed")]),
        );
        ev.insert_rank(Rank(1), rank_on("a", vec![event(1, 10, oom, "torch.OutOfMemoryError: CUDA out of memory.")]));
        ev.insert_rank(Rank(2), rank_on("b", vec![timeout(2, 60, 11)]));
        let report = analyze(ev);
        assert_eq!(link(&report, 0).caused_by, Some(Rank(1)));
        assert_eq!(link(&report, 0).depth, 1);
    }

    #[test]
    fn a_launcher_sigterm_points_at_the_rank_that_failed_on_the_same_host() {
        let oom = EventKind::Exception { exc_type: "torch.OutOfMemoryError".into(), message: "CUDA out of memory.".into(), frames: Vec::new() };
        let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(4), finished: true, ..Default::default() };
        ev.insert_rank(Rank(0), rank_on("a", vec![event(0, 10, oom, "torch.OutOfMemoryError: CUDA out of memory.")]));
        ev.insert_rank(Rank(1), rank_on("a", vec![]));
        // Host b: rank 2 loses its peer, then b's launcher stops rank 3.
        ev.insert_rank(
            Rank(2),
            rank_on(
                "b",
                vec![event(
                    2,
                    12,
                    EventKind::ConnectionClosed { peer: Some(PeerRef::Address("a:29500".into())), transport: "gloo".into() },
                    "Connection closed by peer [a]:29500",
                )],
            ),
        );
        ev.insert_rank(Rank(3), rank_on("b", vec![]));
        ev.ends = (0..4)
            .map(|r| ProcessEnd { rank: Rank(r), exit_code: None, signal: if r == 0 || r == 2 { None } else { Some(15) }, at_ns: Some(T0 + 15_000_000_000) })
            .collect();
        ev.ends[0].exit_code = Some(1);
        ev.ends[2].exit_code = Some(1);
        let report = analyze(ev);
        assert_eq!(link(&report, 1).caused_by, Some(Rank(0)));
        assert_eq!(link(&report, 2).caused_by, Some(Rank(0)), "an address on host a names rank 0, the culprit there");
        assert_eq!(link(&report, 3).caused_by, Some(Rank(2)));
        assert_eq!(link(&report, 3).link.as_deref(), Some("same host's launcher stopped it"));
    }

    #[test]
    fn reads_the_host_of_every_address_form() {
        assert_eq!(address_host("[10.0.0.5]:29500"), "10.0.0.5");
        assert_eq!(address_host("10.0.0.5:29500"), "10.0.0.5");
        assert_eq!(address_host("node-3:1234"), "node-3");
        assert_eq!(address_host("node-3"), "node-3");
        assert_eq!(address_host("[fe80::1]:80"), "fe80::1");
        assert!(host_matches("node-3.cluster.local", "node-3"));
        assert!(!host_matches("node-31", "node-3"));
    }
}
