//! The first point where a group's ranks part, and who parted.
//!
//! Sequence numbers are walked in order. At each one the ranks whose buffer still covers it fall
//! into classes: one per fingerprint issued, and one for the ranks that never got that far. One
//! class: they agree (the call sites are compared next, and a difference there counts only when it
//! is new in a rank's own history: ranks that always call from different lines are not diverging).
//! Several classes: this is the divergence, and the rules, in order:
//! 1. **majority**: one class holds a strict majority of the group's members, counting every member
//!    without a dump (or without that entry) as if it sided with the others; the rest are the
//!    culprits (`majority at seq`, `never issued` when they never issued it, `only rank issued it`
//!    when only they did, `call site` when only the line differs). Needs three members or more.
//! 2. **own history**: exactly one class did something without precedent in its own earlier entries
//!    (at the same place in its repeating pattern, or anywhere before), the others did what they
//!    always do: that class (`own history`). Against ranks that never issued it: when those that did
//!    issued their usual operation, the others are the culprits (`never issued`).
//! 3. otherwise nobody is named: all involved ranks are candidates, and the missing dumps that
//!    would decide are named. Never a guess among equals.

use super::lanes::{precedent, Group, Lane, Precedent, Unit};
use coroner_model::{FrRule, PgId, Rank};
use std::collections::BTreeMap;

/// Who parted at a group's first divergence, and by which rule.
#[derive(Debug, Clone)]
pub struct Decision {
    pub pg: PgId,
    pub seq: u64,
    /// Where, in words: `seq 6`, `p2p seq 3`.
    pub label: String,
    /// `op`, `sizes`, `dtypes`, `call site`, `never issued`.
    pub differs: &'static str,
    pub rule: Option<FrRule>,
    pub culprits: Vec<Rank>,
    /// When nobody is named: who it could be.
    pub candidates: Vec<Rank>,
    pub confidence: f64,
    pub summary: String,
}

#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Sequence numbers every covering rank issued alike before the divergence.
    pub matched: u64,
    pub decision: Option<Decision>,
    /// Call sites that differ between ranks at every step, which is not divergence.
    pub habitual: Option<String>,
}

/// A class of ranks at one sequence number: `Some(key)` issued `key`, `None` never issued it.
type Classes = BTreeMap<Option<String>, Vec<Rank>>;

pub fn scan(pg: &PgId, group: &Group<'_>) -> Scan {
    let mut out = Scan::default();
    let seqs: std::collections::BTreeSet<u64> = group.lanes.values().flat_map(|l| l.units.keys().copied()).collect();
    for seq in seqs {
        let covering: Vec<(&Rank, &Lane<'_>)> = group.lanes.iter().filter(|(_, l)| l.covers(seq)).collect();
        let mut by_what: Classes = BTreeMap::new();
        for (rank, lane) in &covering {
            let key = lane.units.get(&seq).map(|u| u.what.clone());
            if key.is_none() && !lane.never_issued(seq) {
                continue;
            }
            by_what.entry(key).or_default().push(**rank);
        }
        if by_what.len() > 1 {
            // Ranks behind while the others have finished the collective: their dumps are older.
            let absent_only = by_what.len() == 2 && by_what.contains_key(&None);
            let waited = covering.iter().filter_map(|(_, l)| l.units.get(&seq)).any(|u| !u.done());
            if absent_only && !waited {
                continue;
            }
            out.decision = Some(decide(pg, group, seq, &by_what, differs(group, seq, &by_what), |u| Some(u.what.clone())));
            return out;
        }
        let sites: Option<Classes> = covering
            .iter()
            .filter_map(|(r, l)| l.units.get(&seq).map(|u| (**r, u)))
            .map(|(r, u)| u.site.clone().map(|s| (r, s)))
            .collect::<Option<Vec<_>>>()
            .map(|v| {
                v.into_iter().fold(BTreeMap::new(), |mut m: Classes, (r, s)| {
                    m.entry(Some(s)).or_default().push(r);
                    m
                })
            });
        if let Some(sites) = sites.filter(|s| s.len() > 1) {
            let key = |u: &Unit<'_>| u.site.clone().map(|s| format!("{}@{s}", u.what));
            let d = decide(pg, group, seq, &sites, "call site", key);
            if d.rule.is_some() {
                out.decision = Some(d);
                return out;
            }
            out.habitual.get_or_insert_with(|| {
                format!("process group {pg}: from {} on, ranks call {} from different lines, each from a line it used before or with no history to tell (not counted as divergence)", seq_word(seq), group_op(group, seq))
            });
        }
        out.matched += 1;
    }
    out
}

fn decide(pg: &PgId, group: &Group<'_>, seq: u64, classes: &Classes, differs: &'static str, key: impl Fn(&Unit<'_>) -> Option<String> + Copy) -> Decision {
    let mut d = decide_here(pg, group, seq, classes, differs, key);
    // Ranks that never issued it because they wait in another group's collective are not stuck
    // here: that group decides.
    let blocked: Vec<String> =
        d.culprits.iter().filter_map(|r| group.lanes.get(r)?.blocked_in.as_ref()).map(|(g, s)| format!("{} of process group {g}", seq_word(*s))).collect();
    if d.rule == Some(FrRule::NeverIssued) && !blocked.is_empty() && blocked.len() == d.culprits.len() {
        let mut places = blocked;
        places.sort();
        places.dedup();
        d.summary = format!(
            "{} of process group {pg}: {} never issued it, but wait{} in {} (blocked there)",
            seq_word(seq),
            who(&d.culprits),
            if d.culprits.len() == 1 { "s" } else { "" },
            places.join(", ")
        );
        d.rule = None;
        d.candidates = std::mem::take(&mut d.culprits);
        d.confidence = 0.0;
    }
    d
}

fn decide_here(pg: &PgId, group: &Group<'_>, seq: u64, classes: &Classes, differs: &'static str, key: impl Fn(&Unit<'_>) -> Option<String> + Copy) -> Decision {
    let involved: Vec<Rank> = classes.values().flatten().copied().collect();
    let unknown: Vec<Rank> = group.members.iter().copied().filter(|r| !involved.contains(r)).collect();
    let total = involved.len() + unknown.len();
    let (big_key, big) = classes.iter().max_by_key(|(_, v)| v.len()).map(|(k, v)| (k.clone(), v.len())).unwrap_or((None, 0));
    let unique = classes.values().filter(|v| v.len() == big).count() == 1;
    let mut d = Decision {
        pg: pg.clone(),
        seq,
        label: seq_word(seq),
        differs,
        rule: None,
        culprits: Vec::new(),
        candidates: Vec::new(),
        confidence: 0.0,
        summary: String::new(),
    };
    let rest: Vec<Rank> = classes.iter().filter(|(k, _)| **k != big_key).flat_map(|(_, v)| v.iter().copied()).collect();
    let op = group_op(group, seq);
    // 1. A strict majority of all members, even if every unknown one sided with the rest.
    if total >= 3 && unique && big > total - big {
        let minority_absent = classes.iter().filter(|(k, _)| **k != big_key).all(|(k, _)| k.is_none());
        let (rule, base) = if minority_absent {
            (FrRule::NeverIssued, 0.85)
        } else if big_key.is_none() {
            (FrRule::OnlyRankIssuedIt, 0.8)
        } else if differs == "call site" {
            // A different line only counts when it is new for the rank that used it.
            let new = rest.iter().all(|r| group.lanes.get(r).is_some_and(|l| precedent(l, seq, key) == Precedent::Novel));
            if !new {
                return d;
            }
            (FrRule::CallSite, 0.75)
        } else {
            (FrRule::MajorityAtSeq, 0.9)
        };
        d.rule = Some(rule);
        d.confidence = base * if rest.len() > 1 { 0.9 } else { 1.0 } * if unknown.is_empty() { 1.0 } else { 0.95 };
        d.summary = format!(
            "{} of process group {pg}: {} {} ({rule}; {big} of {total} ranks {})",
            seq_word(seq),
            who(&rest),
            minority_words(rule, &op),
            if big_key.is_none() { "never issued it" } else { "agree" },
        );
        d.culprits = rest;
        return d;
    }
    // 2. Own history: exactly one class without precedent, every other one familiar.
    let mut novel = Vec::new();
    let mut familiar = Vec::new();
    for (k, ranks) in classes {
        if k.is_none() {
            continue;
        }
        let p: Vec<Precedent> = ranks.iter().filter_map(|r| group.lanes.get(r)).map(|l| precedent(l, seq, key)).collect();
        if p.iter().all(|p| *p == Precedent::Novel) {
            novel.push(ranks.clone());
        } else if p.iter().all(|p| *p == Precedent::Familiar) {
            familiar.push(ranks.clone());
        }
    }
    let present_classes = classes.keys().filter(|k| k.is_some()).count();
    let absent: Vec<Rank> = classes.get(&None).cloned().unwrap_or_default();
    if novel.len() == 1 && familiar.len() + 1 == present_classes {
        let culprits = novel.remove(0);
        d.rule = Some(FrRule::OwnHistory);
        d.confidence = if unknown.is_empty() { 0.75 } else { 0.65 };
        d.summary = format!(
            "{} of process group {pg}: {} issued {} with no precedent in {} own earlier entries, while {} issued what {} always issue{} there (own history)",
            seq_word(seq),
            who(&culprits),
            describe(group, seq, &culprits),
            if culprits.len() == 1 { "its" } else { "their" },
            who(&involved.iter().copied().filter(|r| !culprits.contains(r)).collect::<Vec<_>>()),
            if involved.len() - culprits.len() == 1 { "it" } else { "they" },
            if involved.len() - culprits.len() == 1 { "s" } else { "" },
        );
        d.culprits = culprits;
        return d;
    }
    if !absent.is_empty() && novel.is_empty() && familiar.len() == present_classes && present_classes == 1 {
        d.rule = Some(FrRule::NeverIssued);
        d.confidence = if unknown.is_empty() { 0.8 } else { 0.7 };
        let waiting: Vec<Rank> = familiar.concat();
        d.summary = format!(
            "{} of process group {pg}: {} never issued {op}, which {} issued as at every step before and wait{} in (never issued)",
            seq_word(seq),
            who(&absent),
            who(&waiting),
            if waiting.len() == 1 { "s" } else { "" },
        );
        d.culprits = absent;
        return d;
    }
    // 3. Nobody named.
    d.candidates = involved.iter().chain(&unknown).copied().collect();
    d.summary = format!(
        "{} of process group {pg}: the ranks part ({differs}: {}), and no rule decides who{}",
        seq_word(seq),
        classes
            .iter()
            .map(|(k, v)| format!("{} {}", who(v), if k.is_none() { "never issued it".to_string() } else { describe(group, seq, v) }))
            .collect::<Vec<_>>()
            .join("; "),
        if unknown.is_empty() { String::new() } else { format!("; the dumps of {} would decide", who(&unknown)) },
    );
    d
}

/// What differs between the classes: the op, else the sizes, else the dtypes.
fn differs(group: &Group<'_>, seq: u64, classes: &Classes) -> &'static str {
    let units: Vec<&Unit<'_>> = classes.values().filter_map(|v| v.first()).filter_map(|r| group.lanes.get(r)?.units.get(&seq)).collect();
    if units.len() < 2 {
        return "never issued";
    }
    let all = |f: &dyn Fn(&Unit<'_>) -> String| units.iter().all(|u| f(u) == f(units[0]));
    if !all(&|u| u.op()) {
        "op"
    } else if !all(&|u| u.ops.iter().map(|o| format!("{:?}{:?}", o.input_sizes, o.output_sizes)).collect()) {
        "sizes"
    } else {
        "dtypes"
    }
}

fn minority_words(rule: FrRule, op: &str) -> String {
    match rule {
        FrRule::NeverIssued => format!("never issued {op}"),
        FrRule::OnlyRankIssuedIt => "issued a collective no other rank issued".to_string(),
        FrRule::CallSite => "issued it from a line of code it never issued it from before".to_string(),
        _ => "issued a different collective".to_string(),
    }
}

/// `seq 6`.
pub fn seq_word(seq: u64) -> String {
    format!("seq {seq}")
}

/// The op most ranks issued at `seq`.
pub fn group_op(group: &Group<'_>, seq: u64) -> String {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for u in group.lanes.values().filter_map(|l| l.units.get(&seq)) {
        *count.entry(u.op()).or_default() += 1;
    }
    count.into_iter().max_by_key(|(_, n)| *n).map(|(op, _)| op).unwrap_or_else(|| "a collective".into())
}

fn describe(group: &Group<'_>, seq: u64, ranks: &[Rank]) -> String {
    let Some(u) = ranks.first().and_then(|r| group.lanes.get(r)?.units.get(&seq)) else { return "nothing".into() };
    match &u.site_label {
        Some(site) => format!("{} from {site}", u.what),
        None => u.what.clone(),
    }
}

/// `rank 1`, `ranks 0, 2`.
pub fn who(ranks: &[Rank]) -> String {
    match ranks {
        [one] => format!("rank {one}"),
        many => format!("ranks {}", crate::hang::join(many)),
    }
}
