//! One test per rule, on hand-built dumps (the real fixtures run through `coroner fr` and
//! `coroner analyze` in the CLI's and the bundle's tests).

use super::*;
use coroner_model::{FrFrame, FrGroup, FrOp, FrRule, FrSeq, FrState, SeqNo};

/// One collective: (seq, op, elements, line of the call, done).
pub type Spec = (u64, &'static str, i64, u32, bool);

pub fn op(pg: &str, (seq, name, n, _line, done): Spec, stack: u32, created_ns: i64) -> FrOp {
    FrOp {
        record_id: Some(seq),
        pg: PgId(pg.into()),
        seq: FrSeq::Collective(seq),
        op_id: Some(seq),
        backend: "nccl".into(),
        op: name.into(),
        detail: None,
        input_sizes: vec![vec![n]],
        output_sizes: vec![vec![n]],
        input_dtypes: vec!["Float".into()],
        output_dtypes: vec!["Float".into()],
        state: if done { FrState::Completed } else { FrState::Scheduled },
        retired: done,
        created_ns: Some(created_ns),
        started_ns: None,
        completed_ns: None,
        duration_ms: None,
        timeout_ms: Some(600_000),
        stack: Some(stack),
    }
}

/// A dump of group "0" of `world` ranks holding `specs`; each seq created 100 ms apart.
pub fn dump(world: u32, specs: &[Spec]) -> FrDump {
    let mut d = FrDump { version: "2.10".into(), encoding: "pickle".into(), ..Default::default() };
    for s in specs {
        let frame = vec![FrFrame { name: "train".into(), file: "/job/train.py".into(), line: s.3 }];
        let stack = match d.stacks.iter().position(|f| *f == frame) {
            Some(i) => i as u32,
            None => {
                d.stacks.push(frame);
                d.stacks.len() as u32 - 1
            }
        };
        d.ops.push(op("0", *s, stack, 1_000_000_000_000 + s.0 as i64 * 100_000_000));
    }
    let last = specs.iter().map(|s| s.0).max();
    d.groups.insert(PgId("0".into()), FrGroup { desc: "default_pg".into(), ranks: (0..world).collect(), last_enqueued: last.map(SeqNo), ..Default::default() });
    d
}

/// The usual step: all_reduce of 1024 elements from line 40, `n` times, all done, then `last`.
pub fn steps(n: u64, last: &[Spec]) -> Vec<Spec> {
    let mut v: Vec<Spec> = (1..=n).map(|s| (s, "all_reduce", 1024, 40, true)).collect();
    v.extend_from_slice(last);
    v
}

pub fn run(dumps: &BTreeMap<Rank, FrDump>, world: u32, fates: BTreeMap<Rank, Fate>) -> FlightRecorderReport {
    analyze(&FlightInput { dumps: dumps.iter().map(|(r, d)| (*r, d)).collect(), world: Some(world), fates, clocks: Clocks::raw() })
}

fn ranks(v: &[u32]) -> Vec<Rank> {
    v.iter().map(|r| Rank(*r)).collect()
}

fn four(odd: u32, odd_last: &[Spec], usual: &[Spec]) -> BTreeMap<Rank, FrDump> {
    (0..4).map(|r| (Rank(r), dump(4, &steps(5, if r == odd { odd_last } else { usual })))).collect()
}

fn two(odd_last: &[Spec], usual: &[Spec]) -> BTreeMap<Rank, FrDump> {
    [(Rank(0), dump(2, &steps(5, usual))), (Rank(1), dump(2, &steps(5, odd_last)))].into_iter().collect()
}

const USUAL: Spec = (6, "all_reduce", 1024, 40, false);

fn verdict(r: &FlightRecorderReport) -> (Vec<Rank>, Option<FrRule>) {
    (r.verdict.culprits.clone(), r.verdict.rule)
}

#[test]
fn majority_at_seq_names_the_rank_with_another_size() {
    let r = run(&four(2, &[(6, "all_reduce", 512, 40, false)], &[USUAL]), 4, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[2]), Some(FrRule::MajorityAtSeq)), "{r:#?}");
    let d = r.groups[0].divergence.as_ref().unwrap();
    assert_eq!((d.seq.as_str(), d.differs.as_str(), r.groups[0].matched), ("seq 6", "sizes", 5));
    assert_eq!(d.entries.iter().map(|e| e.input_sizes.as_str()).collect::<Vec<_>>(), vec!["[[1024]]", "[[1024]]", "[[512]]", "[[1024]]"]);
}

#[test]
fn majority_names_a_different_op() {
    let r = run(&four(0, &[(6, "broadcast", 1024, 40, false)], &[USUAL]), 4, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[0]), Some(FrRule::MajorityAtSeq)));
    assert_eq!(r.groups[0].divergence.as_ref().unwrap().differs, "op");
}

#[test]
fn only_rank_issued_it() {
    let r = run(&four(3, &[(6, "all_reduce", 1024, 40, false)], &[]), 4, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[3]), Some(FrRule::OnlyRankIssuedIt)), "{r:#?}");
}

#[test]
fn never_issued_by_majority() {
    let r = run(&four(1, &[], &[USUAL]), 4, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::NeverIssued)));
    assert_eq!((r.stopped[0].waiting.clone(), r.stopped[0].never_issued.clone()), (ranks(&[0, 2, 3]), ranks(&[1])));
}

#[test]
fn two_ranks_own_history_names_the_novel_size() {
    let r = run(&two(&[(6, "all_reduce", 512, 41, false)], &[USUAL]), 2, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::OwnHistory)), "{r:#?}");
}

#[test]
fn two_ranks_the_one_that_never_issued_its_usual_collective() {
    let r = run(&two(&[], &[USUAL]), 2, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::NeverIssued)));
}

#[test]
fn two_ranks_an_extra_novel_collective_is_the_culprit_not_the_one_that_did_not_follow() {
    let r = run(&two(&[(6, "all_reduce", 512, 33, false)], &[]), 2, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::OwnHistory)));
}

#[test]
fn call_site_names_a_line_never_used_before() {
    let r = run(&four(1, &[(6, "all_reduce", 1024, 33, false)], &[USUAL]), 4, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::CallSite)));
    assert_eq!(r.groups[0].divergence.as_ref().unwrap().differs, "call site");
    let r = run(&two(&[(6, "all_reduce", 1024, 33, false)], &[USUAL]), 2, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::OwnHistory)));
}

#[test]
fn lines_that_always_differ_are_habit_not_divergence() {
    // Rank 0 calls from line 50 at every step; the others from 40; rank 3 then skips seq 6.
    let mut dumps = four(3, &[], &[USUAL]);
    dumps.insert(Rank(0), dump(4, &(1..=6).map(|s| (s, "all_reduce", 1024, 50, s < 6)).collect::<Vec<_>>()));
    let r = run(&dumps, 4, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[3]), Some(FrRule::NeverIssued)), "{r:#?}");
    assert!(r.cannot_say.iter().any(|c| c.contains("from different lines")), "{:?}", r.cannot_say);
}

#[test]
fn never_a_guess_among_equals() {
    let r = run(&two(&[(6, "all_reduce", 512, 40, false)], &[(6, "all_reduce", 256, 40, false)]), 2, BTreeMap::new());
    assert_eq!(verdict(&r), (Vec::new(), None));
    assert_eq!(r.verdict.candidates, ranks(&[0, 1]));
}

#[test]
fn a_missing_dump_counts_against_the_majority_and_history_decides() {
    let mut dumps = four(1, &[(6, "all_reduce", 512, 40, false)], &[USUAL]);
    dumps.remove(&Rank(3));
    let r = run(&dumps, 4, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::OwnHistory)), "{r:#?}");
    assert_eq!(r.missing, ranks(&[3]));
    assert!(r.cannot_say.iter().any(|c| c.starts_with("rank 3 left no dump")));
}

#[test]
fn only_rank_without_a_dump_and_what_its_log_says() {
    let mut dumps = four(0, &[USUAL], &[USUAL]);
    dumps.remove(&Rank(1));
    let r = run(&dumps, 4, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::OnlyRankWithoutADump)), "{r:#?}");
    let r = run(&dumps, 4, [(Rank(1), Fate::FailedFirst)].into());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::DiedBeforeItDumped)));
    let r = run(&dumps, 4, [(Rank(1), Fate::Killed)].into());
    assert_eq!((verdict(&r), r.verdict.candidates.clone()), ((Vec::new(), None), ranks(&[1])));
    assert!(r.verdict.summary.contains("killed from outside"), "{}", r.verdict.summary);
    dumps.remove(&Rank(2));
    let r = run(&dumps, 4, BTreeMap::new());
    assert_eq!((verdict(&r), r.verdict.candidates.clone()), ((Vec::new(), None), ranks(&[1, 2])));
}

#[test]
fn entered_last_past_the_timeout() {
    let mut dumps = two(&[USUAL], &[USUAL]);
    for o in &mut dumps.get_mut(&Rank(0)).unwrap().ops {
        o.timeout_ms = Some(6000);
    }
    let late = dumps.get_mut(&Rank(1)).unwrap().ops.last_mut().unwrap();
    late.created_ns = late.created_ns.map(|t| t + 24_000_000_000);
    let r = run(&dumps, 2, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::EnteredLast)), "{r:#?}");
    assert_eq!(r.stragglers.last().map(|s| (s.rank, s.seq)), Some((Rank(1), 6)));
    assert!(r.straggler_summary.as_ref().unwrap().starts_with("rank 1 entered last in 1 of 6"));
}

#[test]
fn dumps_taken_at_different_moments_are_not_a_divergence() {
    // Rank 2's dump is one collective older, and the others completed that collective.
    let done: Spec = (6, "all_reduce", 1024, 40, true);
    let r = run(&four(2, &[], &[done]), 4, BTreeMap::new());
    assert_eq!(verdict(&r), (Vec::new(), None));
    assert!(r.groups[0].divergence.is_none());
}

#[test]
fn coalesced_operations_are_one_unit() {
    let mut dumps = four(1, &[USUAL], &[USUAL]);
    for (r, d) in &mut dumps {
        let mut second = d.ops.last().unwrap().clone();
        second.input_sizes = vec![vec![if *r == Rank(1) { 64 } else { 128 }]];
        d.ops.push(second);
    }
    let r = run(&dumps, 4, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[1]), Some(FrRule::MajorityAtSeq)));
    assert_eq!(r.groups[0].divergence.as_ref().unwrap().entries[1].op, "coalesced(all_reduce; 2 ops)");
}

#[test]
fn p2p_operations_stay_out_of_the_collective_order() {
    let mut dumps = four(2, &[(6, "all_reduce", 512, 40, false)], &[USUAL]);
    let mut send = dumps[&Rank(0)].ops[2].clone();
    send.seq = FrSeq::P2p(6);
    send.op = "send".into();
    dumps.get_mut(&Rank(0)).unwrap().ops.insert(3, send);
    let r = run(&dumps, 4, BTreeMap::new());
    assert_eq!(verdict(&r), (ranks(&[2]), Some(FrRule::MajorityAtSeq)));
}

#[test]
fn the_earliest_divergence_across_groups_wins() {
    // Group "1" of ranks 0 and 1 parts at its seq 2, before group "0" parts at seq 6.
    let mut dumps = four(3, &[(6, "all_reduce", 512, 40, false)], &[USUAL]);
    for r in [0u32, 1] {
        let d = dumps.get_mut(&Rank(r)).unwrap();
        let mut a = op("1", (1, "all_reduce", 8, 40, true), 0, 1_000_000_000_000);
        let mut b = op("1", (2, "all_reduce", if r == 1 { 4 } else { 8 }, 40, false), 0, 1_000_000_000_001);
        a.timeout_ms = None;
        b.timeout_ms = None;
        d.ops.extend([a, b]);
        d.groups.insert(PgId("1".into()), FrGroup { ranks: vec![0, 1], ..Default::default() });
    }
    let r = run(&dumps, 4, BTreeMap::new());
    assert_eq!((r.verdict.pg.as_deref(), verdict(&r)), (Some("1"), (ranks(&[1]), Some(FrRule::OwnHistory))), "{r:#?}");
    assert_eq!(r.groups[0].divergence.as_ref().unwrap().culprits, ranks(&[3]), "group 0's own divergence is still shown");
}

/// A 2-rank job with one dump: the dump may be older than its rank's last step (it died before
/// its last dump reached the disk), so it clears nobody; the logs can still decide.
#[test]
fn one_dump_alone_clears_nobody() {
    let dumps: BTreeMap<Rank, FrDump> = [(Rank(1), dump(2, &steps(5, &[USUAL])))].into();
    let r = run(&dumps, 2, BTreeMap::new());
    assert_eq!((verdict(&r), r.verdict.candidates.clone()), ((Vec::new(), None), ranks(&[0])));
    let r = run(&dumps, 2, [(Rank(0), Fate::FailedFirst)].into());
    assert_eq!(verdict(&r), (ranks(&[0]), Some(FrRule::DiedBeforeItDumped)));
}
