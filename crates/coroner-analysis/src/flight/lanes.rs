//! The dumps regrouped for matching: per process group, per rank, the units the rank issued keyed
//! by their collective sequence number. A unit is what one sequence number stands for: one
//! operation, or all the operations of a coalesced group (they share the number). Its fingerprint
//! (`what`) is the op with its sizes and dtypes, less the sizes an op lets differ between ranks;
//! its `site` is the training script's call stack (absent in JSON dumps).

use coroner_model::{FrDump, FrOp, FrSeq, PgId, Rank};
use std::collections::{BTreeMap, BTreeSet};

/// What one rank issued at one sequence number of one group.
#[derive(Debug, Clone)]
pub struct Unit<'a> {
    pub ops: Vec<&'a FrOp>,
    pub what: String,
    pub site: Option<String>,
    /// The innermost two user frames, for people.
    pub site_label: Option<String>,
}

impl Unit<'_> {
    /// Nobody waits in it any more (every op completed or retired).
    pub fn done(&self) -> bool {
        self.ops.iter().all(|o| o.done())
    }
    pub fn created_ns(&self) -> Option<i64> {
        self.ops.iter().filter_map(|o| o.created_ns).min()
    }
    pub fn timeout_ms(&self) -> Option<u64> {
        self.ops.iter().filter_map(|o| o.timeout_ms).max()
    }
    pub fn op(&self) -> String {
        let names: BTreeSet<&str> = self.ops.iter().map(|o| o.op.as_str()).filter(|o| *o != "coalesced").collect();
        let names: Vec<&str> = names.into_iter().collect();
        match (names.as_slice(), self.ops.len()) {
            ([one], 1) => one.to_string(),
            ([], _) => "coalesced".to_string(),
            (_, n) => format!("coalesced({}; {n} ops)", names.join(", ")),
        }
    }
}

/// One rank's collectives in one group.
#[derive(Debug, Clone, Default)]
pub struct Lane<'a> {
    pub units: BTreeMap<u64, Unit<'a>>,
    /// The highest collective this rank enqueued in the group (entries or `pg_status`).
    pub hi: u64,
    /// The lowest one its buffer still holds (1 when it holds them all).
    pub lo: u64,
    /// The rank's newest operation is a collective of another group it has not got past: it is
    /// blocked there, so what it never issued here is explained there.
    pub blocked_in: Option<(PgId, u64)>,
}

impl Lane<'_> {
    /// Whether the rank's dump can say what it did at `seq`.
    pub fn covers(&self, seq: u64) -> bool {
        seq >= self.lo
    }
    pub fn never_issued(&self, seq: u64) -> bool {
        seq > self.hi
    }
}

/// One process group across ranks.
#[derive(Debug, Clone, Default)]
pub struct Group<'a> {
    pub desc: String,
    /// Every rank that belongs to it, as far as any dump or the world size says.
    pub members: BTreeSet<Rank>,
    pub lanes: BTreeMap<Rank, Lane<'a>>,
}

impl Group<'_> {
    pub fn missing(&self) -> Vec<Rank> {
        self.members.iter().copied().filter(|r| !self.lanes.contains_key(r)).collect()
    }
}

/// Every group of every dump. `world` adds ranks 0..world to the default group (`"0"`).
pub fn build<'a>(dumps: &BTreeMap<Rank, &'a FrDump>, world: Option<u32>) -> BTreeMap<PgId, Group<'a>> {
    let mut groups: BTreeMap<PgId, Group<'a>> = BTreeMap::new();
    for (rank, dump) in dumps {
        let dump: &'a FrDump = dump;
        let mut by_seq: BTreeMap<(&PgId, u64), Vec<&'a FrOp>> = BTreeMap::new();
        for op in &dump.ops {
            if let FrSeq::Collective(s) = op.seq {
                by_seq.entry((&op.pg, s)).or_default().push(op);
            }
        }
        for (pg, g) in &dump.groups {
            let group = groups.entry(pg.clone()).or_default();
            if group.desc.is_empty() {
                group.desc = g.desc.clone();
            }
            group.members.extend(g.ranks.iter().map(|r| Rank(*r)));
            group.members.insert(*rank);
            let lane = group.lanes.entry(*rank).or_default();
            // PyTorch writes the last enqueued work's number, which is its p2p number when that
            // work was a send, a recv or a batch: then only the entries say how far it got.
            let newest = dump.ops.iter().filter(|o| o.pg == *pg).max_by_key(|o| o.record_id);
            lane.hi = if newest.is_some_and(|o| o.is_p2p()) { 0 } else { g.last_enqueued.map_or(0, |s| s.0) };
        }
        let newest = dump.ops.iter().filter(|o| matches!(o.seq, FrSeq::Collective(_))).max_by_key(|o| o.record_id);
        let blocked = newest.filter(|o| !o.done()).and_then(|o| match o.seq {
            FrSeq::Collective(s) => Some((o.pg.clone(), s)),
            FrSeq::P2p(_) => None,
        });
        for ((pg, seq), ops) in by_seq {
            let group = groups.entry(pg.clone()).or_default();
            group.members.insert(*rank);
            let lane = group.lanes.entry(*rank).or_default();
            lane.hi = lane.hi.max(seq);
            lane.units.insert(seq, unit(dump, ops));
        }
        for (pg, group) in &mut groups {
            if let (Some(lane), Some(b)) = (group.lanes.get_mut(rank), &blocked) {
                lane.blocked_in = (b.0 != *pg).then(|| b.clone());
            }
        }
    }
    for (pg, group) in &mut groups {
        if pg.0 == "0" || group.desc == "default_pg" {
            group.members.extend((0..world.unwrap_or(0)).map(Rank));
        }
        for lane in group.lanes.values_mut() {
            lane.lo = match lane.units.keys().next() {
                // A buffer that still holds seq 1 holds everything; otherwise older ones are gone.
                Some(first) if *first > 1 => *first,
                Some(_) => 1,
                None => lane.hi + 1,
            };
        }
    }
    groups
}

pub fn unit<'a>(dump: &'a FrDump, ops: Vec<&'a FrOp>) -> Unit<'a> {
    let what = ops.iter().map(|o| what(o)).collect::<Vec<_>>().join("; ");
    let stack = ops.first().map(|o| dump.stack_of(o)).unwrap_or(&[]);
    let site = (!stack.is_empty()).then(|| stack.iter().map(|f| format!("{}:{}:{}", f.file, f.line, f.name)).collect::<Vec<_>>().join("|"));
    let site_label = (!stack.is_empty()).then(|| stack.iter().take(2).rev().map(|f| f.to_string()).collect::<Vec<_>>().join(" > "));
    Unit { ops, what, site, site_label }
}

/// The op and the sizes and dtypes every rank must agree on for it.
pub fn what(op: &FrOp) -> String {
    let name = op.op.as_str();
    // Sizes these ops let differ between ranks (PyTorch's own matcher skips the same ones).
    let free_in = name.starts_with("all_to_all") || name.starts_with("scatter") || name.ends_with("_v");
    let free_out = name.starts_with("all_to_all") || name.starts_with("gather") || name.ends_with("_v");
    let mut s = name.to_string();
    if !free_in {
        s.push_str(&format!(" in {}", sizes(&op.input_sizes)));
    }
    if !free_out {
        s.push_str(&format!(" out {}", sizes(&op.output_sizes)));
    }
    let dtypes: BTreeSet<&str> = op.input_dtypes.iter().chain(&op.output_dtypes).map(String::as_str).collect();
    if !dtypes.is_empty() {
        s.push_str(&format!(" {}", dtypes.into_iter().collect::<Vec<_>>().join("/")));
    }
    s
}

pub fn sizes(s: &[Vec<i64>]) -> String {
    format!("[{}]", s.iter().map(|d| format!("[{}]", d.iter().map(i64::to_string).collect::<Vec<_>>().join(", "))).collect::<Vec<_>>().join(", "))
}

/// How a rank's unit at `seq` compares with its own earlier units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precedent {
    /// It issued this before (at the same place in its repeating pattern, when it has one).
    Familiar,
    /// Nothing like it before, or not what its repeating pattern puts here.
    Novel,
    /// Too little history to tell.
    NoHistory,
}

/// Whether the rank's unit at `seq` has a precedent in its own history. `key` picks what is
/// compared: the fingerprint, or the fingerprint and the call site.
pub fn precedent(lane: &Lane<'_>, seq: u64, key: impl Fn(&Unit<'_>) -> Option<String>) -> Precedent {
    let Some(k) = lane.units.get(&seq).and_then(&key) else { return Precedent::NoHistory };
    let history: Vec<(u64, String)> = lane.units.range(..seq).filter_map(|(s, u)| key(u).map(|k| (*s, k))).collect();
    if history.is_empty() {
        return Precedent::NoHistory;
    }
    // The same position in earlier steps: the shortest period the recent history repeats with.
    if let Some(p) = period(&history) {
        let earlier = history.iter().find(|(s, _)| *s + p == seq).map(|(_, k)| k);
        if let Some(e) = earlier {
            return if *e == k { Precedent::Familiar } else { Precedent::Novel };
        }
    }
    if history.iter().any(|(_, h)| *h == k) {
        Precedent::Familiar
    } else {
        Precedent::Novel
    }
}

/// The smallest period (in sequence numbers, at most 64) the whole contiguous recent history
/// repeats with, over two periods at least. The whole run, not its last two periods: two equal
/// neighbours inside a longer step are not a period of one.
fn period(history: &[(u64, String)]) -> Option<u64> {
    let by_seq: BTreeMap<u64, &String> = history.iter().map(|(s, k)| (*s, k)).collect();
    let last = *by_seq.keys().next_back()?;
    let mut first = last;
    while first > 1 && by_seq.contains_key(&(first - 1)) {
        first -= 1;
    }
    let run = last - first + 1;
    (1..=64u64).filter(|p| run >= 2 * p).find(|p| (first + p..=last).all(|s| by_seq.get(&s) == by_seq.get(&(s - p))))
}
