//! The corpus ran on one host (skew 0). Here each rank's clock is moved by up to 30 s either way,
//! capture times and printed times alike, and the diagnosis must not change.

use coroner_tests::skew::{shift_line, SplitMix};
use coroner_tests::{corpus_bundles, headline, truth, Collected};
use std::collections::BTreeMap;

const MAX_SKEW_NS: i64 = 30_000_000_000;

#[test]
fn every_bundle_survives_random_clock_skew() {
    let mut wrong = Vec::new();
    for seed in 1..=6u64 {
        for bundle in corpus_bundles() {
            let mut c = Collected::load(&bundle);
            let mut rng = SplitMix(seed * 7919 + bundle.to_string_lossy().len() as u64);
            let shifts: BTreeMap<_, i64> = c.ranks().into_iter().map(|r| (Some(r), rng.shift(MAX_SKEW_NS))).collect();
            for line in &mut c.lines {
                let shift = shifts.get(&line.rank).copied().unwrap_or(0);
                shift_line(line, shift);
            }
            let got = headline(&c.report("skewed"));
            let want = truth(&bundle);
            if got != want {
                wrong.push(format!("seed {seed} {}: got {got:?}, want {want:?} (shifts {shifts:?})", bundle.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "wrong under skew:\n{}", wrong.join("\n"));
}

#[test]
fn step_lines_recover_the_skew() {
    let bundle = coroner_tests::data_dir().join("corpus/nccl2_double_r0_r1");
    let mut c = Collected::load(&bundle);
    let shift = -12_345_678_901i64;
    for line in &mut c.lines {
        if line.rank == Some(coroner_model::Rank(1)) {
            shift_line(line, shift);
        }
    }
    let report = c.report("j");
    let r1 = report.ranks.iter().find(|r| r.rank.0 == 1).expect("rank 1");
    assert!((r1.clock.offset_ns + shift).abs() < 20_000_000, "offset {} for a shift of {shift}", r1.clock.offset_ns);
    assert!(r1.clock.uncertainty_ns > 0 && r1.clock.uncertainty_ns < 100_000_000, "{:?}", r1.clock);
}
