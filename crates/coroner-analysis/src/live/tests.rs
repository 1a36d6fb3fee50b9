//! The live monitor on synthetic jobs: lines fed in capture order, evaluated every 100 ms.

use super::*;
use coroner_model::{Nanos, Rank};

const S: Nanos = 1_000_000_000;
const MS: Nanos = 1_000_000;

/// (time, rank, text), in any order.
type Script = Vec<(Nanos, u32, String)>;

fn step_line(rank: u32, step: u64) -> String {
    format!("2026-11-30 08:58:51,{:03} INFO [rank{rank}] train: step {step} loss 1.{}", step % 1000, (step * 7919) % 100000)
}

/// `world` ranks printing a step line every `period` from `start`, steps `0..steps`.
fn steady(world: u32, start: Nanos, period: Nanos, steps: u64) -> Script {
    let mut s = Vec::new();
    for r in 0..world {
        s.push((0, r, format!("INFO [rank{r}] init_process_group backend=nccl world={world}")));
        for n in 0..steps {
            s.push((start + n as Nanos * period + Nanos::from(r) * MS / 10, r, step_line(r, n)));
        }
    }
    s
}

/// Replays a script; returns, per rank, when it was first suspected and the last finding.
fn replay(mut script: Script, config: LiveConfig, until: Nanos) -> (Vec<(u32, Nanos)>, Vec<coroner_model::SuspectedHang>) {
    script.sort_by_key(|(t, r, _)| (*t, *r));
    let mut m = LiveMonitor::new(config);
    let mut first: Vec<(u32, Nanos)> = Vec::new();
    let mut last = Vec::new();
    let mut i = 0;
    let mut now = 0;
    while now <= until {
        while i < script.len() && script[i].0 <= now {
            m.push_line(Rank(script[i].1), script[i].0, &script[i].2);
            i += 1;
        }
        last = m.evaluate(now);
        for f in &last {
            if !first.iter().any(|(r, _)| *r == f.rank.0) {
                first.push((f.rank.0, now));
            }
        }
        now += 100 * MS;
    }
    (first, last)
}

#[test]
fn a_rank_left_behind_is_suspected_after_the_threshold_and_not_before() {
    // 4 ranks, one step a second; rank 2 stops after step 9, the others go on to step 29.
    let mut s = steady(4, 10 * S, S, 30);
    s.retain(|(_, r, t)| {
        !(*r == 2
            && t.contains("step ")
            && t.split("step ").nth(1).and_then(|x| x.split(' ').next()).and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n >= 10))
    });
    let (first, last) = replay(s, LiveConfig::default(), 45 * S);
    assert_eq!(first.len(), 1, "{first:?}");
    let (rank, at) = first[0];
    assert_eq!(rank, 2);
    // Its last line at 19 s, the others' step 10 at 20 s; threshold max(10 x 1 s, 5 s) = 10 s,
    // counted from when most others passed it.
    assert!(at > 30 * S && at <= 30 * S + 200 * MS, "raised at {at}");
    let f = &last[0];
    assert_eq!(f.why, "behind");
    assert_eq!(f.last_step, Some(9));
    assert!(f.steps_behind >= 10, "{f:?}");
    assert_eq!(f.median_step_ms, Some(1000));
    assert!(f.last_lines.last().unwrap().contains("step 9"), "{f:?}");
}

#[test]
fn the_rank_that_went_quiet_elsewhere_while_all_wait_is_suspected() {
    // 8 ranks stop after step 3 (waiting in the next collective); rank 5 printed one more line.
    let mut s = steady(8, 5 * S, 3 * MS, 4);
    s.push((5 * S + 12 * MS, 5, "INFO [rank5] train: waiting for next batch from data loader".into()));
    let (first, last) = replay(s, LiveConfig { floor_ns: 2 * S, ..Default::default() }, 30 * S);
    assert_eq!(first.iter().map(|f| f.0).collect::<Vec<_>>(), vec![5]);
    assert!(first[0].1 <= 5 * S + 12 * MS + 2 * S + 200 * MS, "{first:?}");
    assert_eq!(last[0].why, "diverged");
    assert!(last[0].summary.contains("waiting for next batch"), "{}", last[0].summary);
}

#[test]
fn with_two_ranks_the_one_that_printed_more_after_the_common_step_is_the_suspect() {
    let mut s = steady(2, 4 * S, 2 * MS, 5);
    s.push((4 * S + 10 * MS, 1, "INFO [rank1] train: waiting for next batch from data loader".into()));
    let (first, _) = replay(s, LiveConfig { floor_ns: 2 * S, ..Default::default() }, 20 * S);
    assert_eq!(first.iter().map(|f| f.0).collect::<Vec<_>>(), vec![1]);
}

#[test]
fn ranks_that_all_stop_in_the_same_place_raise_nothing() {
    // Every rank: 20 steps, then an all-rank checkpoint save of 60 s, then 20 more steps.
    let mut s = steady(4, 5 * S, S / 2, 20);
    for r in 0..4 {
        s.push((15 * S, r, format!("INFO [rank{r}] saving checkpoint to /ckpt/step_20")));
        for n in 20..40 {
            s.push((75 * S + (n - 20) as Nanos * S / 2, r, step_line(r, n)));
        }
    }
    let (first, _) = replay(s, LiveConfig::default(), 100 * S);
    assert!(first.is_empty(), "{first:?}");
}

#[test]
fn a_slow_first_step_and_different_print_rates_raise_nothing() {
    let mut s = Vec::new();
    for r in 0..4u32 {
        // Step 0 after 5 s of init, step 1 after a 90 s compile, then one step a second. Rank 0
        // prints every step, the others every tenth.
        let every = if r == 0 { 1 } else { 10 };
        s.push((5 * S, r, step_line(r, 0)));
        for n in 1..300u64 {
            if n % every == 0 {
                s.push((95 * S + (n as Nanos - 1) * S, r, step_line(r, n)));
            }
        }
    }
    let (first, _) = replay(s, LiveConfig::default(), 400 * S);
    assert!(first.is_empty(), "{first:?}");
}

#[test]
fn a_rank_that_comes_back_is_no_longer_suspected() {
    let mut s = steady(3, 5 * S, S, 40);
    // Rank 1 pauses for 15 s after step 9 (steps 10..=24 come late, all at once at 29.5 s).
    for (t, r, text) in &mut s {
        if *r == 1 && *t > 14 * S + S / 2 && *t < 30 * S {
            *t = 29 * S + S / 2;
            let _ = text;
        }
    }
    s.sort_by_key(|(t, r, _)| (*t, *r));
    let (first, last) = replay(s.clone(), LiveConfig::default(), 29 * S);
    assert_eq!(first.iter().map(|f| f.0).collect::<Vec<_>>(), vec![1]);
    assert_eq!(last.len(), 1, "still suspected at 29 s");
    let (_, last) = replay(s, LiveConfig::default(), 31 * S);
    assert!(last.is_empty(), "retracted once it prints again: {last:?}");
}

#[test]
fn a_pause_seen_before_after_the_same_line_is_not_a_hang() {
    // Rank 0 alone evaluates for 30 s after "running evaluation" (the others wait at a barrier),
    // twice. The first time is suspected (nothing says it is normal yet); the second is not.
    let mut s = Vec::new();
    let mut t = 5 * S;
    let mut n = 0;
    for round in 0..2 {
        for _ in 0..20 {
            for r in 0..4 {
                s.push((t + Nanos::from(r) * MS, r, step_line(r, n)));
            }
            n += 1;
            t += S;
        }
        s.push((t, 0, format!("INFO [rank0] running evaluation round {round}")));
        t += 30 * S;
    }
    for r in 0..4 {
        s.push((t + Nanos::from(r) * MS, r, step_line(r, n)));
    }
    let end = t;
    let (first, _) = replay(s, LiveConfig::default(), end);
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].1 < 60 * S, "only the first evaluation: {first:?}");
}

#[test]
fn a_busy_process_gets_more_time() {
    let mut s = steady(2, 4 * S, S, 10);
    s.push((14 * S, 1, "INFO [rank1] writing a big file".into()));
    s.sort_by_key(|(t, r, _)| (*t, *r));
    let mut m = LiveMonitor::new(LiveConfig::default());
    for (t, r, text) in &s {
        m.push_line(Rank(*r), *t, text);
    }
    assert_eq!(m.evaluate(30 * S).len(), 1, "idle: suspected after 10 s");
    m.push_liveness(Rank(1), 20 * S, Some(0), None, None);
    m.push_liveness(Rank(1), 30 * S, Some(9 * S as u64), None, None);
    assert!(m.evaluate(30 * S).is_empty(), "busy at 0.9 cores: six times longer");
    assert_eq!(m.evaluate(80 * S).len(), 1);
    m.push_liveness(Rank(1), 40 * S, Some(9 * S as u64), Some(0), None);
    m.push_liveness(Rank(1), 50 * S, Some(9 * S as u64), Some(100 << 20), None);
    assert!(m.evaluate(300 * S).is_empty(), "writing 10 MiB/s to disk is working, however long");
    m.push_end(Rank(1));
    assert!(m.evaluate(80 * S).is_empty(), "an ended process is not hanging");
}

#[test]
fn all_quiet_in_the_same_place_the_idle_gpu_is_the_suspect() {
    let s = steady(4, 4 * S, S, 10);
    let mut m = LiveMonitor::new(LiveConfig::default());
    for (t, r, text) in &s {
        m.push_line(Rank(*r), *t, text);
    }
    assert!(m.evaluate(40 * S).is_empty(), "no GPU figures: nothing tells them apart");
    for r in 0..4 {
        m.push_liveness(Rank(r), 39 * S, None, None, Some(if r == 3 { 0 } else { 100 }));
    }
    let f = m.evaluate(40 * S);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].rank, f[0].why.as_str()), (Rank(3), "gpu_idle"));
}

#[test]
fn a_numbered_start_up_burst_is_not_the_progress_template() {
    let mut s = Vec::new();
    for r in 0..2u32 {
        for c in 0..24 {
            s.push((S + Nanos::from(c) * 10_000, r, format!("vm:1141:1141 [{r}] NCCL INFO Channel {c:02}/24 : 0 1")));
        }
    }
    s.extend(steady(2, 3 * S, S, 6).into_iter().filter(|(t, _, _)| *t > 0));
    s.sort_by_key(|(t, r, _)| (*t, *r));
    let mut m = LiveMonitor::new(LiveConfig::default());
    for (t, r, text) in &s {
        m.push_line(Rank(*r), *t, text);
    }
    let (template, _) = m.job_template().expect("a template");
    assert!(template.contains("train: step <n>"), "{template}");
}

#[test]
fn peers_printing_the_next_step_a_moment_earlier_do_not_make_a_rank_behind() {
    // All 4 ranks pause 60 s after step 19 (a barrier); then ranks 0-2 print step 20 at once and
    // rank 3 prints it 50 ms later. At that moment rank 3 is silent for 60 s and most others are
    // past it, but only just.
    let mut s = steady(4, 5 * S, S, 20);
    for r in 0..4 {
        s.push((85 * S + if r == 3 { 50 * MS } else { 0 }, r, step_line(r, 20)));
    }
    let (first, _) = replay(s, LiveConfig::default(), 90 * S);
    assert!(first.is_empty(), "{first:?}");
}

#[test]
fn one_rank_of_two_thousand_stuck_apart_is_found() {
    let mut m = LiveMonitor::new(LiveConfig::default());
    for step in 0..6u64 {
        for r in 0..2048u32 {
            m.push_line(Rank(r), (10 + step as Nanos) * S + Nanos::from(r) * 1000, &step_line(r, step));
        }
    }
    m.push_line(Rank(1234), 15 * S + 500 * MS, "INFO [rank1234] train: waiting for next batch from data loader");
    let found = m.evaluate(40 * S);
    assert_eq!(found.iter().map(|f| f.rank).collect::<Vec<_>>(), vec![Rank(1234)]);
    assert_eq!(found[0].peers_step, Some(5));
}

/// Found by fuzzing the ingest messages: capture times from the wire at the ends of the range
/// overflowed the step intervals, the silence and the pause arithmetic (a panic in debug builds).
#[test]
fn capture_times_at_the_ends_of_the_range_do_not_overflow() {
    let mut m = LiveMonitor::new(LiveConfig::default());
    for n in 0..12u64 {
        let (low, high) = (Nanos::MIN + n as Nanos, Nanos::MAX - 12 + n as Nanos);
        m.push_line(Rank(0), low, &step_line(0, n));
        m.push_line(Rank(0), if n % 2 == 0 { high } else { low }, "loading the next shard");
        m.push_line(Rank(1), if n % 2 == 0 { low } else { high }, &step_line(1, n));
        for r in 2..5 {
            m.push_line(Rank(r), low, &step_line(r, n + 1));
        }
    }
    for r in 0..5 {
        m.push_liveness(Rank(r), Nanos::MIN, Some(0), Some(0), None);
        m.push_liveness(Rank(r), Nanos::MAX, Some(1), Some(1), None);
    }
    for now in [Nanos::MIN, 0, Nanos::MAX] {
        for f in m.evaluate(now) {
            assert!(f.silent_ms >= f.threshold_ms, "{f:?}");
        }
    }
}
