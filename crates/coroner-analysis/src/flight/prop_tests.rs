//! Property tests: random well-formed multi-rank histories (a repeating step of collectives) with
//! one rank diverging once. With every dump, that rank is named; with random dumps removed, the
//! answer is that rank or nobody, never another rank.

use super::tests::{dump, run, Spec};
use super::*;
use proptest::prelude::*;

const OPS: [&str; 3] = ["all_reduce", "all_gather", "reduce_scatter"];

#[derive(Debug, Clone, Copy)]
enum Injected {
    /// Another size where the others issue their usual collective.
    Size,
    /// Another op.
    Op,
    /// A collective of the rank's own, from a new line, where the others issue their usual one.
    Extra,
    /// Same op and size, issued from a line the rank never used.
    CallSite,
    /// The rank never issues the collective the others wait in.
    Skip,
}

/// One history: `world` ranks, a step of `pattern` collectives repeated `steps` times, then rank
/// `culprit` diverging at the `at`-th collective of the last step, where every rank stops.
#[derive(Debug, Clone)]
struct Case {
    world: u32,
    pattern: Vec<(usize, i64, u32)>,
    steps: u64,
    at: usize,
    culprit: u32,
    how: Injected,
}

fn case() -> impl Strategy<Value = Case> {
    (2u32..=6, prop::collection::vec((0usize..3, 1i64..5, 10u32..20), 1..4), 2u64..5, any::<prop::sample::Index>(), any::<prop::sample::Index>(), 0usize..5)
        .prop_map(|(world, pattern, steps, at, culprit, how)| {
            let pattern: Vec<(usize, i64, u32)> = pattern.into_iter().enumerate().map(|(i, (op, n, line))| (op, n * 256, line * 10 + i as u32)).collect();
            Case {
                world,
                at: at.index(pattern.len()),
                pattern,
                steps,
                culprit: culprit.index(world as usize) as u32,
                how: [Injected::Size, Injected::Op, Injected::Extra, Injected::CallSite, Injected::Skip][how],
            }
        })
}

fn dumps(c: &Case) -> BTreeMap<Rank, FrDump> {
    let k = c.pattern.len() as u64;
    let stop = c.steps * k + c.at as u64 + 1;
    (0..c.world)
        .map(|r| {
            let mut specs: Vec<Spec> = (1..=stop)
                .map(|s| {
                    let (op, n, line) = c.pattern[((s - 1) % k) as usize];
                    (s, OPS[op], n, line, s < stop)
                })
                .collect();
            if r == c.culprit {
                let last = specs.last_mut().expect("at least one");
                match c.how {
                    Injected::Size => last.2 = 7,
                    Injected::Op => last.1 = "broadcast",
                    Injected::Extra => *last = (stop, "all_reduce", 3, 999, false),
                    Injected::CallSite => last.3 = 998,
                    Injected::Skip => {
                        specs.pop();
                    }
                }
            }
            (Rank(r), dump(c.world, &specs))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_divergent_rank_is_named(c in case()) {
        let r = run(&dumps(&c), c.world, BTreeMap::new());
        prop_assert_eq!(r.verdict.culprits.clone(), vec![Rank(c.culprit)], "{:?}\n{:#?}", c, r.verdict);
    }

    #[test]
    fn removed_dumps_give_the_right_rank_or_unknown(c in case(), keep in prop::collection::vec(any::<bool>(), 6)) {
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
