//! Point-to-point matching on hand-built dumps numbered the way PyTorch numbers them (one
//! collective counter and one p2p counter per rank and group; a batch shares one p2p number and
//! ends in a `coalesced` entry). The real NCCL fixtures run through `coroner fr` in the CLI's tests.

use super::tests::run;
use super::*;
use coroner_model::{FrGroup, FrOp, FrRule, FrSeq, FrState, SeqNo};

/// One thing a rank does: an all_reduce of `n` elements, a send or recv of `n` to or from a
/// group-local peer, or a batch of sends and recvs. `done` says whether it completed.
#[derive(Clone)]
enum Do {
    AllReduce(i64),
    Send(u32, i64),
    Recv(u32, i64),
    Batch(Vec<Do>),
}

/// A dump of group `pg` (members `ranks`) for the rank at group index `me`: `steps` in order,
/// all completed but the last `pending` ones.
fn dump(pg: &str, ranks: &[u32], me: u32, steps: &[Do], pending: usize) -> FrDump {
    let mut d = FrDump { version: "2.10".into(), encoding: "pickle".into(), ..Default::default() };
    let (mut coll, mut p2p, mut record) = (0u64, 0u64, 0u64);
    for (i, step) in steps.iter().enumerate() {
        let done = i + pending < steps.len();
        let mut push = |op: &str, detail: Option<String>, n: i64, seq: FrSeq, done: bool| {
            d.ops.push(FrOp {
                record_id: Some(record),
                pg: PgId(pg.into()),
                seq,
                op_id: Some(record),
                backend: "nccl".into(),
                op: op.into(),
                detail,
                input_sizes: if n > 0 { vec![vec![n]] } else { Vec::new() },
                output_sizes: if n > 0 { vec![vec![n]] } else { Vec::new() },
                input_dtypes: if n > 0 { vec!["Float".into()] } else { Vec::new() },
                output_dtypes: if n > 0 { vec!["Float".into()] } else { Vec::new() },
                state: if done { FrState::Completed } else { FrState::Scheduled },
                retired: done,
                created_ns: Some(1_000_000_000_000 + record as i64 * 1_000_000),
                started_ns: None,
                completed_ns: None,
                duration_ms: None,
                timeout_ms: Some(600_000),
                stack: None,
            });
            record += 1;
        };
        let one = |x: &Do| match x {
            Do::Send(peer, n) => ("send", format!("{me}->{peer}"), *n),
            Do::Recv(peer, n) => ("recv", format!("{me}<-{peer}"), *n),
            _ => unreachable!("not point-to-point"),
        };
        match step {
            Do::AllReduce(n) => {
                coll += 1;
                push("all_reduce", None, *n, FrSeq::Collective(coll), done);
            }
            Do::Batch(ops) => {
                p2p += 1;
                for x in ops {
                    let (op, detail, n) = one(x);
                    // A batch's own entries stay scheduled; its `coalesced` entry tells.
                    push(op, Some(detail), n, FrSeq::P2p(p2p), false);
                }
                push("coalesced", None, 0, FrSeq::P2p(p2p), done);
            }
            x => {
                p2p += 1;
                let (op, detail, n) = one(x);
                push(op, Some(detail), n, FrSeq::P2p(p2p), done);
            }
        }
    }
    d.groups
        .insert(PgId(pg.into()), FrGroup { desc: "pp".into(), ranks: ranks.to_vec(), last_enqueued: (coll > 0).then_some(SeqNo(coll)), ..Default::default() });
    d
}

/// `n` steps of `step`, then `last`.
fn steps(n: usize, step: &[Do], last: &[Do]) -> Vec<Do> {
    let mut v: Vec<Do> = (0..n).flat_map(|_| step.iter().cloned()).collect();
    v.extend_from_slice(last);
    v
}

fn pair(d0: FrDump, d1: FrDump) -> FlightRecorderReport {
    run(&[(Rank(0), d0), (Rank(1), d1)].into(), 2, BTreeMap::new())
}

fn p2p_group(r: &FlightRecorderReport) -> &coroner_model::FrGroupReport {
    r.groups.iter().find(|g| g.desc.ends_with("point-to-point")).expect("a point-to-point group report")
}

const N: i64 = 1024;

#[test]
fn a_recv_of_another_size_names_the_rank_that_changed() {
    let d0 = dump("0", &[0, 1], 0, &steps(5, &[Do::Send(1, N), Do::AllReduce(N)], &[Do::Send(1, N), Do::AllReduce(N)]), 1);
    let d1 = dump("0", &[0, 1], 1, &steps(5, &[Do::Recv(0, N), Do::AllReduce(N)], &[Do::Recv(0, N / 2)]), 1);
    let r = pair(d0, d1);
    assert_eq!((r.verdict.culprits.clone(), r.verdict.rule, r.verdict.seq.as_deref()), (vec![Rank(1)], Some(FrRule::OwnHistory), Some("p2p seq 6")), "{r:#?}");
    let g = p2p_group(&r);
    let d = g.divergence.as_ref().unwrap();
    assert_eq!((g.matched, d.differs.as_str()), (5, "p2p sizes"));
    assert_eq!((d.entries[0].op.as_str(), d.entries[1].op.as_str(), d.entries[1].output_sizes.as_str()), ("send 0->1", "recv 1<-0", "[[512]]"));
    assert!(r.verdict.summary.contains("rank 1 posted recv 512 Float from 0 (p2p seq 6)"), "{}", r.verdict.summary);
}

#[test]
fn a_recv_of_another_dtype_is_a_divergence() {
    let d0 = dump("0", &[0, 1], 0, &steps(5, &[Do::Send(1, N), Do::AllReduce(N)], &[Do::Send(1, N), Do::AllReduce(N)]), 1);
    let mut d1 = dump("0", &[0, 1], 1, &steps(5, &[Do::Recv(0, N), Do::AllReduce(N)], &[Do::Recv(0, N)]), 1);
    let last = d1.ops.last_mut().unwrap();
    (last.input_dtypes, last.output_dtypes) = (vec!["BFloat16".into()], vec!["BFloat16".into()]);
    let r = pair(d0, d1);
    assert_eq!((r.verdict.culprits.clone(), r.verdict.rule), (vec![Rank(1)], Some(FrRule::OwnHistory)), "{r:#?}");
    assert_eq!(p2p_group(&r).divergence.as_ref().unwrap().differs, "p2p dtypes");
}

#[test]
fn a_send_of_another_size_names_the_sender() {
    let d0 = dump("0", &[0, 1], 0, &steps(5, &[Do::Send(1, N), Do::AllReduce(N)], &[Do::Send(1, 7)]), 1);
    let d1 = dump("0", &[0, 1], 1, &steps(5, &[Do::Recv(0, N), Do::AllReduce(N)], &[Do::Recv(0, N)]), 1);
    let r = pair(d0, d1);
    assert_eq!((r.verdict.culprits.clone(), r.verdict.rule), (vec![Rank(0)], Some(FrRule::OwnHistory)));
}

/// The sends completed without their recvs (small messages go eagerly): nothing hangs, one
/// send was never received, and the rank that skipped its recv broke its own pattern there.
#[test]
fn a_skipped_recv_is_found_though_nothing_waits() {
    let d0 = dump("0", &[0, 1], 0, &steps(8, &[Do::Send(1, N), Do::AllReduce(N)], &[]), 0);
    let mut s1 = steps(5, &[Do::Recv(0, N), Do::AllReduce(N)], &[Do::AllReduce(N)]);
    s1.extend(steps(2, &[Do::Recv(0, N), Do::AllReduce(N)], &[]));
    let r = pair(d0, dump("0", &[0, 1], 1, &s1, 0));
    assert_eq!((r.verdict.culprits.clone(), r.verdict.rule), (vec![Rank(1)], Some(FrRule::OwnHistory)), "{r:#?}");
    assert!(r.verdict.summary.contains("rank 0 sent 8 and rank 1 posted 7 recvs"), "{}", r.verdict.summary);
}

/// Two dumps taken at different moments: the receiver's is older, it kept its pattern, and the
/// sends it has not matched yet completed. Nobody is named.
#[test]
fn an_older_dump_is_not_a_skipped_recv() {
    let d0 = dump("0", &[0, 1], 0, &steps(8, &[Do::Send(1, N), Do::AllReduce(N)], &[]), 0);
    let d1 = dump("0", &[0, 1], 1, &steps(6, &[Do::Recv(0, N), Do::AllReduce(N)], &[]), 0);
    let r = pair(d0, d1);
    assert!(r.verdict.culprits.is_empty() && r.verdict.candidates.is_empty(), "{r:#?}");
    assert!(p2p_group(&r).divergence.is_none());
}

/// A send that waits, and a peer that waits in nothing and never posted the recv.
#[test]
fn a_waiting_send_nobody_received_names_the_peer() {
    let d0 = dump("0", &[0, 1], 0, &[Do::Send(1, N)], 1);
    let d1 = dump("0", &[0, 1], 1, &[Do::AllReduce(N)], 0);
    let r = pair(d0, d1);
    assert_eq!((r.verdict.culprits.clone(), r.verdict.rule), (vec![Rank(1)], Some(FrRule::NeverIssued)), "{r:#?}");
    // The same, with the peer itself waiting elsewhere: either could have started it.
    let d0 = dump("0", &[0, 1], 0, &[Do::Send(1, N)], 1);
    let d1 = dump("0", &[0, 1], 1, &[Do::AllReduce(N)], 1);
    let r = pair(d0, d1);
    let p = p2p_group(&r).divergence.as_ref().unwrap();
    assert_eq!((p.culprits.clone(), p.rule), (Vec::new(), None));
}

#[test]
fn a_batch_is_one_unit_and_matched_by_pair() {
    let usual0 = Do::Batch(vec![Do::Send(1, N), Do::Recv(1, N)]);
    let usual1 = Do::Batch(vec![Do::Send(0, N), Do::Recv(0, N)]);
    let odd1 = Do::Batch(vec![Do::Send(0, N), Do::Recv(0, N / 2)]);
    let d0 = dump("0", &[0, 1], 0, &steps(5, &[usual0.clone(), Do::AllReduce(N)], &[usual0.clone(), Do::AllReduce(N)]), 1);
    let d1 = dump("0", &[0, 1], 1, &steps(5, &[usual1.clone(), Do::AllReduce(N)], &[odd1]), 1);
    let r = pair(d0, d1);
    assert_eq!((r.verdict.culprits.clone(), r.verdict.rule, r.verdict.seq.as_deref()), (vec![Rank(1)], Some(FrRule::OwnHistory), Some("p2p seq 6")), "{r:#?}");
    let d = p2p_group(&r).divergence.as_ref().unwrap();
    assert_eq!((d.entries[1].op.as_str(), d.entries[1].state.as_str()), ("batch(send 1->0, recv 1<-0)", "scheduled"));
    assert_eq!(d.entries[0].state, "completed", "a batch's state is its coalesced entry's");
    // The same batches, all alike: nothing to say.
    let d0 = dump("0", &[0, 1], 0, &steps(6, &[usual0, Do::AllReduce(N)], &[]), 0);
    let d1 = dump("0", &[0, 1], 1, &steps(6, &[usual1, Do::AllReduce(N)], &[]), 0);
    let r = pair(d0, d1);
    assert!(r.verdict.culprits.is_empty() && p2p_group(&r).divergence.is_none(), "{r:#?}");
    assert_eq!(p2p_group(&r).matched, 12);
}

/// Group-local peers are the group's members in order: in a group of ranks 2 and 3, `0->1` is
/// rank 2 sending to rank 3.
#[test]
fn peers_are_group_ranks() {
    let d2 = dump("5", &[2, 3], 0, &steps(5, &[Do::Send(1, N), Do::AllReduce(N)], &[Do::Send(1, N)]), 1);
    let d3 = dump("5", &[2, 3], 1, &steps(5, &[Do::Recv(0, N), Do::AllReduce(N)], &[Do::Recv(0, 3)]), 1);
    let r = run(&[(Rank(2), d2), (Rank(3), d3)].into(), 4, BTreeMap::new());
    assert_eq!((r.verdict.culprits.clone(), r.verdict.pg.as_deref()), (vec![Rank(3)], Some("5")), "{r:#?}");
}

/// A buffer that lost its first p2p operations cannot say which send a recv answers.
#[test]
fn a_truncated_buffer_is_not_paired() {
    let d0 = dump("0", &[0, 1], 0, &steps(5, &[Do::Send(1, N), Do::AllReduce(N)], &[Do::Send(1, N)]), 1);
    let mut d1 = dump("0", &[0, 1], 1, &steps(5, &[Do::Recv(0, N), Do::AllReduce(N)], &[Do::Recv(0, 8)]), 1);
    d1.ops.drain(..2);
    let r = pair(d0, d1);
    assert!(p2p_group(&r).divergence.is_none(), "{r:#?}");
    assert!(r.cannot_say.iter().any(|c| c.contains("rank 1's buffer no longer holds its first point-to-point operation")), "{:?}", r.cannot_say);
}

/// Property tests: a pipeline of 2 to 5 ranks (each step rank i receives from i-1, sends to
/// i+1, as plain operations or one batch, then all ranks all-reduce), 3 to 5 steps, then one rank
/// changes a send's or a recv's size or skips it in the last step, where every rank stops.
mod props {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, Copy)]
    enum Injected {
        SendSize,
        RecvSize,
        SkipSend,
        SkipRecv,
    }

    #[derive(Debug, Clone)]
    struct Case {
        world: u32,
        steps: usize,
        batch: bool,
        culprit: u32,
        how: Injected,
    }

    fn case() -> impl Strategy<Value = Case> {
        (2u32..=5, 3usize..=5, any::<bool>(), any::<prop::sample::Index>(), 0usize..4).prop_map(|(world, steps, batch, culprit, how)| Case {
            world,
            steps,
            batch,
            culprit: culprit.index(world as usize) as u32,
            how: [Injected::SendSize, Injected::RecvSize, Injected::SkipSend, Injected::SkipRecv][how],
        })
    }

    /// Rank `r`'s step; `odd` applies the injection (to the other direction when the rank has
    /// no operation of the kind asked: the first rank receives nothing, the last sends nothing).
    fn step(c: &Case, r: u32, odd: bool) -> Vec<Do> {
        let (has_recv, has_send) = (r > 0, r + 1 < c.world);
        let how = match c.how {
            Injected::SendSize if !has_send => Injected::RecvSize,
            Injected::SkipSend if !has_send => Injected::SkipRecv,
            Injected::RecvSize if !has_recv => Injected::SendSize,
            Injected::SkipRecv if !has_recv => Injected::SkipSend,
            how => how,
        };
        let mut p2p = Vec::new();
        if has_recv && !(odd && matches!(how, Injected::SkipRecv)) {
            p2p.push(Do::Recv(r - 1, if odd && matches!(how, Injected::RecvSize) { 7 } else { N }));
        }
        if has_send && !(odd && matches!(how, Injected::SkipSend)) {
            p2p.push(Do::Send(r + 1, if odd && matches!(how, Injected::SendSize) { 7 } else { N }));
        }
        let mut out = if c.batch && !p2p.is_empty() { vec![Do::Batch(p2p)] } else { p2p };
        out.push(Do::AllReduce(N));
        out
    }

    fn dumps(c: &Case) -> BTreeMap<Rank, FrDump> {
        let ranks: Vec<u32> = (0..c.world).collect();
        (0..c.world)
            .map(|r| {
                let last = step(c, r, r == c.culprit);
                let all = steps(c.steps, &step(c, r, false), &last);
                (Rank(r), dump("0", &ranks, r, &all, last.len()))
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn the_rank_that_changed_its_p2p_is_named(c in case()) {
            let r = run(&dumps(&c), c.world, BTreeMap::new());
            prop_assert_eq!(r.verdict.culprits.clone(), vec![Rank(c.culprit)], "{:?}\n{:#?}", c, r.verdict);
        }

        #[test]
        fn without_some_dumps_it_is_that_rank_or_nobody(c in case(), keep in prop::collection::vec(any::<bool>(), 5)) {
            let mut all = dumps(&c);
            all.retain(|r, _| keep[r.0 as usize]);
            if all.is_empty() {
                return Ok(());
            }
            let r = run(&all, c.world, BTreeMap::new());
            let named = r.verdict.culprits.clone();
            prop_assert!(named.is_empty() || named == vec![Rank(c.culprit)], "{:?} kept {:?}\n{:#?}", c, all.keys().collect::<Vec<_>>(), r.verdict);
        }
    }
}
