//! Point-to-point operations matched across ranks, per process group.
//!
//! PyTorch numbers a rank's sends and recvs (`p2p_seq_id`) apart from its collectives, one
//! counter per rank and group whatever the peer, so the numbers of two ranks line up only when
//! they talk to nobody else. What NCCL and gloo match is the order per pair: the k-th send from
//! `a` to `b` meets the k-th recv `b` posted from `a`. So each pair's sends and recvs are paired
//! in order, and a pair must agree on the element count and dtype. A `batch_isend_irecv` (its
//! operations share one p2p number and end in a `coalesced` entry) is one unit: it is shown, and
//! weighed against the rank's history, whole.
//!
//! Two ranks part when a pair disagrees (another size or dtype) or when one side holds a post
//! the other never made. Who parted is read from each rank's own pattern ([`pattern`]): the rank
//! that broke the pattern it repeated at every step before, while its peer kept its own. A post
//! nobody matched that still waits names the peer that never posted it, when the peer is not
//! itself waiting elsewhere. Otherwise both are candidates, never a guess. Streams are matched
//! only where both ranks' buffers still hold their first p2p operation of the group (a buffer
//! that lost its oldest entries cannot say which send a recv answers).

use super::decide::{who, Decision};
use super::lanes::{unit, Group, Unit};
use super::{pattern, view, Clocks};
use coroner_model::{FrDivergence, FrDump, FrEntryView, FrGroupReport, FrOp, FrRule, FrSeq, PgId, Rank};
use std::collections::BTreeMap;

/// What matching one group's point-to-point operations found.
pub struct P2pScan {
    pub report: FrGroupReport,
    pub decision: Option<Decision>,
    /// When the diverging operations were issued (aligned), to order it against other groups.
    pub at: Option<i64>,
    pub notes: Vec<String>,
    /// Ranks that broke the pattern they repeated in the group: the dumps do not show them
    /// doing what they always do.
    pub broke: Vec<Rank>,
}

/// One rank's point-to-point units in a group, and its whole pattern there.
struct RankP2p<'a> {
    units: BTreeMap<u64, Unit<'a>>,
    /// Position of each unit in `items`.
    index: BTreeMap<u64, usize>,
    /// Every unit the rank issued in the group, collectives too, as fingerprints, in order.
    items: Vec<String>,
    /// Where it broke its own pattern, and the pattern's period.
    deviation: Option<(usize, usize)>,
    /// Its newest operation of any group waits.
    blocked: bool,
    /// Its buffer holds its first p2p operation of the group (or it lost none and posted none).
    complete: bool,
}

/// One post of a pair's stream: the unit it belongs to, its element count and dtype.
#[derive(Clone, Copy)]
struct Post<'a> {
    seq: u64,
    numel: i64,
    dtype: &'a str,
}

pub fn scan(pg: &PgId, group: &Group<'_>, dumps: &BTreeMap<Rank, &FrDump>, clocks: &Clocks) -> Option<P2pScan> {
    let members: Vec<Rank> = group.members.iter().copied().collect();
    let ranks: BTreeMap<Rank, RankP2p<'_>> = group.lanes.keys().filter_map(|r| Some((*r, rank_p2p(pg, dumps.get(r)?, &members)))).collect();
    if ranks.values().all(|p| p.units.is_empty()) {
        return None;
    }
    let mut notes = Vec::new();
    let incomplete: Vec<Rank> = ranks.iter().filter(|(_, p)| !p.complete).map(|(r, _)| *r).collect();
    if !incomplete.is_empty() {
        notes.push(format!(
            "process group {pg}: {}'s buffer no longer holds its first point-to-point operation, so its sends and recvs are not paired with its peers'",
            who(&incomplete)
        ));
    }
    let mut matched = 0u64;
    let mut findings: Vec<Finding<'_>> = Vec::new();
    for ((src, dst), (sends, recvs)) in streams(&ranks, &members) {
        if incomplete.contains(&src) || incomplete.contains(&dst) {
            continue;
        }
        let common = sends.len().min(recvs.len());
        let differ = (0..common).find(|k| (sends[*k].numel, sends[*k].dtype) != (recvs[*k].numel, recvs[*k].dtype));
        matched += differ.unwrap_or(common) as u64;
        let k = match differ {
            Some(k) => k,
            None if sends.len() != recvs.len() => common,
            None => continue,
        };
        findings.push(Finding { src, dst, k, send: sends.get(k).copied(), recv: recvs.get(k).copied(), sent: sends.len(), received: recvs.len() });
    }
    let mut decided: Vec<(Decision, Option<i64>, Vec<FrEntryView>)> = findings.iter().filter_map(|f| judge(pg, f, &ranks, clocks)).collect();
    decided.sort_by_key(|(d, at, _)| (d.rule.is_none(), *at));
    let first = decided.into_iter().next();
    let report = FrGroupReport {
        pg: pg.0.clone(),
        desc: format!("{}{}point-to-point", group.desc, if group.desc.is_empty() { "" } else { ", " }),
        ranks: ranks.keys().copied().collect(),
        matched,
        divergence: first.as_ref().map(|(d, _, entries)| FrDivergence {
            seq: d.label.clone(),
            differs: d.differs.to_string(),
            rule: d.rule,
            culprits: d.culprits.clone(),
            confidence: (d.confidence * 100.0).round() / 100.0,
            summary: d.summary.clone(),
            entries: entries.clone(),
        }),
    };
    let (decision, at) = first.map(|(d, at, _)| (Some(d), at)).unwrap_or((None, None));
    let broke = ranks.iter().filter(|(_, p)| p.deviation.is_some()).map(|(r, _)| *r).collect();
    Some(P2pScan { report, decision, at, notes, broke })
}

fn rank_p2p<'a>(pg: &PgId, dump: &'a FrDump, members: &[Rank]) -> RankP2p<'a> {
    let ops: Vec<&'a FrOp> = dump.ops.iter().filter(|o| o.pg == *pg).collect();
    // Consecutive operations with one counter are one unit (a coalesced group, a batch).
    let mut runs: Vec<(FrSeq, Vec<&'a FrOp>)> = Vec::new();
    for o in ops {
        match runs.last_mut() {
            Some((s, v)) if *s == o.seq => v.push(o),
            _ => runs.push((o.seq, vec![o])),
        }
    }
    let mut out = RankP2p { units: BTreeMap::new(), index: BTreeMap::new(), items: Vec::new(), deviation: None, blocked: false, complete: false };
    for (seq, ops) in runs {
        let u = unit(dump, ops);
        match seq {
            FrSeq::P2p(s) => {
                out.items.push(fingerprint(&u, members));
                out.index.insert(s, out.items.len() - 1);
                out.units.insert(s, u);
            }
            FrSeq::Collective(_) => out.items.push(u.what.clone()),
        }
    }
    out.deviation = pattern::deviation(&out.items);
    out.blocked = dump.ops.iter().max_by_key(|o| o.record_id).is_some_and(|o| {
        // A batch's own entries stay scheduled after it ran.
        let batch_ran = o.is_p2p() && o.op != "coalesced" && batch_done(dump, o);
        !(o.done() || batch_ran)
    });
    out.complete = match out.units.keys().next() {
        Some(first) => *first == 1,
        None => dump.dropped == 0,
    };
    out
}

/// A batch's own operations stay `scheduled`; its `coalesced` entry says whether it ran.
fn batch_done(dump: &FrDump, op: &FrOp) -> bool {
    dump.ops.iter().any(|o| o.pg == op.pg && o.seq == op.seq && o.op == "coalesced" && o.done())
}

/// Whether nobody waits in a point-to-point unit any more: its `coalesced` entry when it has one.
fn unit_done(u: &Unit<'_>) -> bool {
    match u.ops.iter().find(|o| o.op == "coalesced") {
        Some(end) => end.done(),
        None => u.done(),
    }
}

/// `recv 1024 Float from 1 + send 1024 Float to 1`.
fn fingerprint(u: &Unit<'_>, members: &[Rank]) -> String {
    let mut parts: Vec<String> = u
        .ops
        .iter()
        .filter_map(|o| {
            direction(o, members).map(|(send, peer)| format!("{} {} {} {} {peer}", o.op, numel(o, send), dtype(o), if send { "to" } else { "from" }))
        })
        .collect();
    parts.sort();
    parts.join(" + ")
}

/// `(true, peer)` for a send, `(false, peer)` for a recv, the peer as a global rank.
fn direction(o: &FrOp, members: &[Rank]) -> Option<(bool, Rank)> {
    let detail = o.detail.as_deref()?;
    let (send, peer) = match o.op.as_str() {
        "send" => (true, detail.split_once("->")?.1),
        "recv" => (false, detail.split_once("<-")?.1),
        _ => return None,
    };
    let local: usize = peer.trim().parse().ok()?;
    // Group-local ranks number the members in order; a group whose members are unknown is the world.
    let global = if members.is_empty() { Rank(local as u32) } else { *members.get(local)? };
    Some((send, global))
}

fn numel(o: &FrOp, send: bool) -> i64 {
    let sizes = if send { &o.input_sizes } else { &o.output_sizes };
    sizes.iter().map(|d| d.iter().product::<i64>()).sum()
}

fn dtype(o: &FrOp) -> &str {
    o.input_dtypes.first().or(o.output_dtypes.first()).map_or("?", String::as_str)
}

/// Each ordered pair's sends and the recvs its receiver posted, in order.
fn streams<'a>(ranks: &BTreeMap<Rank, RankP2p<'a>>, members: &[Rank]) -> BTreeMap<(Rank, Rank), (Vec<Post<'a>>, Vec<Post<'a>>)> {
    let mut out: BTreeMap<(Rank, Rank), (Vec<Post<'a>>, Vec<Post<'a>>)> = BTreeMap::new();
    for (rank, p) in ranks {
        for (seq, u) in &p.units {
            for o in u.ops.iter().copied() {
                let Some((send, peer)) = direction(o, members) else { continue };
                if !ranks.contains_key(&peer) {
                    continue;
                }
                let post = Post { seq: *seq, numel: numel(o, send), dtype: dtype(o) };
                let (pair, side) = if send { ((*rank, peer), 0) } else { ((peer, *rank), 1) };
                let entry = out.entry(pair).or_default();
                if side == 0 {
                    entry.0.push(post);
                } else {
                    entry.1.push(post);
                }
            }
        }
    }
    out
}

/// The first point where a pair parts: at post `k`, both posted and disagree, or only one did.
struct Finding<'a> {
    src: Rank,
    dst: Rank,
    k: usize,
    send: Option<Post<'a>>,
    recv: Option<Post<'a>>,
    sent: usize,
    received: usize,
}

/// Who parted at a finding, with each side's unit for the table.
fn judge(pg: &PgId, f: &Finding<'_>, ranks: &BTreeMap<Rank, RankP2p<'_>>, clocks: &Clocks) -> Option<(Decision, Option<i64>, Vec<FrEntryView>)> {
    let (s, d) = (ranks.get(&f.src)?, ranks.get(&f.dst)?);
    // A rank broke its pattern at or before its post (or, without a post, anywhere).
    let broke = |p: &RankP2p<'_>, post: Option<Post<'_>>| match (p.deviation, post) {
        (Some((dev, _)), Some(post)) => p.index.get(&post.seq).is_some_and(|i| dev <= *i),
        (Some(_), None) => true,
        (None, _) => false,
    };
    let (src_broke, dst_broke) = (broke(s, f.send), broke(d, f.recv));
    let (su, du) = (f.send.and_then(|p| s.units.get(&p.seq)), f.recv.and_then(|p| d.units.get(&p.seq)));
    let pair = format!("rank {} to rank {}", f.src, f.dst);
    let describe = |rank: Rank, u: Option<&Unit<'_>>, p: &RankP2p<'_>| match u {
        Some(u) => format!("rank {rank} posted {} (p2p seq {})", p.items[p.index[&seq_of(u)]], seq_of(u)),
        None => format!("rank {rank} never posted it"),
    };
    let mut decision = Decision {
        pg: pg.clone(),
        seq: 0,
        label: String::new(),
        differs: "p2p sizes",
        rule: None,
        culprits: Vec::new(),
        candidates: vec![f.src, f.dst],
        confidence: 0.0,
        summary: String::new(),
    };
    let (culprit, rule, confidence, why) = match (f.send, f.recv) {
        (Some(a), Some(b)) => {
            decision.differs = if a.numel != b.numel { "p2p sizes" } else { "p2p dtypes" };
            let (c, other) = match (src_broke, dst_broke) {
                (true, false) => (f.src, f.dst),
                (false, true) => (f.dst, f.src),
                _ => (f.src, f.dst),
            };
            if src_broke != dst_broke {
                let why = format!(
                    "rank {c}'s post has no precedent in its own earlier steps ({}), while rank {other} did what it always does (own history)",
                    broken(&ranks[&c])
                );
                (Some(c), Some(FrRule::OwnHistory), 0.75, why)
            } else {
                (None, None, 0.0, "neither rank's own history tells which one changed".to_string())
            }
        }
        (post_s, post_r) => {
            decision.differs = "never posted";
            let (poster, poster_broke, peer, peer_broke, post) =
                if post_s.is_some() { (f.src, src_broke, f.dst, dst_broke, post_s) } else { (f.dst, dst_broke, f.src, src_broke, post_r) };
            let waits = post.and_then(|p| ranks[&poster].units.get(&p.seq)).is_some_and(|u| !unit_done(u));
            let peer_blocked = ranks[&peer].blocked;
            match (poster_broke, peer_broke) {
                (true, false) => (
                    Some(poster),
                    Some(FrRule::OwnHistory),
                    0.7,
                    format!("rank {poster}'s post has no precedent in its own earlier steps ({}), and rank {peer}, keeping its pattern, never matched it (own history)", broken(&ranks[&poster])),
                ),
                (false, true) => (Some(peer), Some(FrRule::OwnHistory), 0.7, format!("rank {peer} left the pattern it kept at every step before: {} (own history)", broken(&ranks[&peer]))),
                (false, false) if waits && !peer_blocked => {
                    (Some(peer), Some(FrRule::NeverIssued), 0.8, format!("rank {poster} waits in it, and rank {peer} never posted the match and waits in nothing (never issued)"))
                }
                // A finished post the peer has not matched yet: its dump may be older.
                (false, false) if !waits => return None,
                _ => (None, None, 0.0, "nothing tells which rank left its pattern".to_string()),
            }
        }
    };
    let counts = match (f.send, f.recv) {
        (Some(_), Some(_)) => String::new(),
        _ => format!(": rank {} sent {} and rank {} posted {} recvs", f.src, f.sent, f.dst, f.received),
    };
    decision.summary = format!(
        "process group {pg}, point-to-point {pair}{counts}; post {} of the pair: {}, {}; {why}",
        f.k + 1,
        describe(f.src, su, s),
        describe(f.dst, du, d)
    );
    if let Some(c) = culprit {
        decision.culprits = vec![c];
        decision.candidates = Vec::new();
        decision.rule = rule;
        decision.confidence = confidence;
    }
    let culprit_unit = match culprit {
        Some(c) if c == f.src => su,
        Some(_) => du,
        None => su.or(du),
    };
    decision.seq = culprit_unit.or(su).or(du).map_or(0, seq_of);
    decision.label = format!("p2p seq {}", decision.seq);
    let at = [(f.src, su), (f.dst, du)].iter().filter_map(|(r, u)| clocks.aligned(*r, u.as_ref()?.created_ns()?)).min();
    let entries = vec![entry(f.src, su, clocks), entry(f.dst, du, clocks)];
    Some((decision, at, entries))
}

/// Where a rank broke its pattern, in words.
fn broken(p: &RankP2p<'_>) -> String {
    match p.deviation {
        Some((i, period)) => format!("its operation {} in the group is {}, where its pattern put {}", i + 1, p.items[i], p.items[i - period]),
        None => "it kept its pattern".to_string(),
    }
}

fn seq_of(u: &Unit<'_>) -> u64 {
    u.ops
        .iter()
        .find_map(|o| match o.seq {
            FrSeq::P2p(s) => Some(s),
            FrSeq::Collective(_) => None,
        })
        .unwrap_or(0)
}

fn entry(rank: Rank, u: Option<&Unit<'_>>, clocks: &Clocks) -> FrEntryView {
    match u {
        Some(u) => {
            let ops: Vec<String> = u.ops.iter().filter(|o| o.op != "coalesced").map(|o| format!("{} {}", o.op, o.detail.as_deref().unwrap_or(""))).collect();
            let label = if ops.len() == 1 { ops[0].trim().to_string() } else { format!("batch({})", ops.join(", ")) };
            let mut e = view::issued(rank, u, label, clocks);
            e.state =
                if unit_done(u) { "completed".into() } else { u.ops.iter().find(|o| o.op == "coalesced").map_or(e.state, |c| c.state.as_str().to_string()) };
            e
        }
        None => view::blank(rank, "never posted"),
    }
}
