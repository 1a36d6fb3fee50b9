//! Live monitor latency: what coronerd's live ticker does every 250 ms on a running job
//! (`coronerd/src/job/live_ticker.rs`: `LiveMonitor::evaluate` under the job's read lock).
//!
//! A running job of `ranks` ranks printing a step line a second through a [`JobPipeline`] with
//! its live monitor on; one rank (`Shape::culprit`) stops half way. Then ticks: before each,
//! a few hundred new step lines on a few ranks (what arrives between two ticks), and the clock
//! runs over the evaluation alone. Every tick must name the stopped rank, and only it.

use crate::report::thread_cpu_ms;
use coroner_analysis::live::LiveConfig;
use coroner_model::{LogLine, Rank, Stream};
use coroner_pipeline::JobPipeline;
use std::time::Instant;

const S: i64 = 1_000_000_000;
/// 2026-11-30 09:00:00 UTC.
const T0: i64 = 1_796_029_200 * S;
/// Steps every rank printed before the ticks.
const STEPS: u64 = 30;
/// Ranks that print between two ticks, and lines each.
const MOVING_RANKS: u32 = 4;
pub const LINES_PER_TICK: u64 = 300;

#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub ranks: u32,
    pub ticks: usize,
}

pub struct LiveFigures {
    pub lines: u64,
    pub ingest_s: f64,
    /// Per tick: the median and the slowest, wall clock and the evaluating thread's CPU.
    pub p50_ms: f64,
    pub max_ms: f64,
    pub cpu_p50_ms: f64,
    /// Every tick suspected the stopped rank and nobody else.
    pub suspect_ok: bool,
    pub found: String,
}

fn step_line(rank: u32, stream_seq: u64, step: u64, at: i64) -> LogLine {
    let text = format!("2026-11-30 09:{:02}:{:02},000 INFO [rank{rank}] train: step {step} loss 1.{:05}", (step / 60) % 60, step % 60, (step * 7919) % 100_000);
    LogLine { rank: Some(Rank(rank)), stream: Stream::Stdout, seq: stream_seq, capture_ns: at, bytes: text.into_bytes() }
}

pub fn run(shape: Shape) -> LiveFigures {
    let started = Instant::now();
    let mut p = JobPipeline::new(&format!("live-{}", shape.ranks));
    p.set_world_size(shape.ranks);
    p.enable_live(LiveConfig::default());
    let stopped = shape.ranks * 3 / 5 + 1;
    let mut lines = 0u64;
    // Per rank: the next step (and sequence number).
    let mut next = vec![0u64; shape.ranks as usize];
    let at = |rank: u32, step: u64| T0 + step as i64 * S + i64::from(rank % 1000) * 100_000;
    for step in 0..STEPS {
        for r in 0..shape.ranks {
            if r == stopped && step >= STEPS / 2 {
                continue;
            }
            p.push_line(step_line(r, step, step, at(r, step)));
            next[r as usize] = step + 1;
            lines += 1;
        }
    }
    let ingest_s = started.elapsed().as_secs_f64();

    let mut wall = Vec::with_capacity(shape.ticks);
    let mut cpu = Vec::with_capacity(shape.ticks);
    let mut suspect_ok = true;
    let mut found = String::new();
    for tick in 0..shape.ticks {
        // A few ranks catch up on lines that were on their way: consecutive steps, in order.
        for k in 0..MOVING_RANKS {
            let r = ((tick as u32 * MOVING_RANKS + k) * 7919) % shape.ranks;
            if r == stopped {
                continue;
            }
            for _ in 0..LINES_PER_TICK / u64::from(MOVING_RANKS) {
                let step = next[r as usize];
                p.push_line(step_line(r, step, step, at(r, step)));
                next[r as usize] = step + 1;
                lines += 1;
            }
        }
        // The ticker's `now`: a few seconds after the last common step.
        let now = T0 + (STEPS as i64 + 3) * S + tick as i64 * S / 4;
        let live = p.live().expect("the live monitor is on");
        let (t0, c0) = (Instant::now(), thread_cpu_ms());
        let suspects = std::hint::black_box(live.evaluate(now));
        cpu.push(thread_cpu_ms() - c0);
        wall.push(t0.elapsed().as_secs_f64() * 1e3);
        let ranks: Vec<u32> = suspects.iter().map(|s| s.rank.0).collect();
        suspect_ok &= ranks == [stopped];
        found = format!("{ranks:?} ({})", suspects.first().map_or("-", |s| s.why.as_str()));
    }
    LiveFigures {
        lines,
        ingest_s,
        p50_ms: median(&mut wall),
        max_ms: wall.iter().copied().fold(0.0, f64::max),
        cpu_p50_ms: median(&mut cpu),
        suspect_ok,
        found,
    }
}

/// The same monitor when many ranks fall behind at once (a partition delays two ranks in five,
/// or a loaded server takes their lines in late): each silent rank behind the majority asks when
/// the majority passed its step.
pub struct LaggingFigures {
    pub ranks_behind: u32,
    pub p50_ms: f64,
    pub max_ms: f64,
    /// Every rank that stopped was suspected.
    pub all_suspected: bool,
}

pub fn run_lagging(ranks: u32, ticks: usize) -> LaggingFigures {
    let mut p = JobPipeline::new(&format!("live-lagging-{ranks}"));
    p.set_world_size(ranks);
    p.enable_live(LiveConfig::default());
    let behind = |r: u32| r % 5 < 2;
    let at = |rank: u32, step: u64| T0 + step as i64 * S + i64::from(rank % 1000) * 100_000;
    for step in 0..STEPS {
        for r in (0..ranks).filter(|&r| step < STEPS / 2 || !behind(r)) {
            p.push_line(step_line(r, step, step, at(r, step)));
        }
    }
    let live = p.live().expect("the live monitor is on");
    let mut wall = Vec::with_capacity(ticks);
    let mut all_suspected = true;
    for tick in 0..ticks {
        let now = T0 + (STEPS as i64 + 3) * S + tick as i64 * S / 4;
        let t0 = Instant::now();
        let suspects = std::hint::black_box(live.evaluate(now));
        wall.push(t0.elapsed().as_secs_f64() * 1e3);
        let suspected: std::collections::HashSet<u32> = suspects.iter().map(|s| s.rank.0).collect();
        all_suspected &= (0..ranks).filter(|&r| behind(r)).all(|r| suspected.contains(&r));
    }
    LaggingFigures {
        ranks_behind: (0..ranks).filter(|&r| behind(r)).count() as u32,
        p50_ms: median(&mut wall),
        max_ms: wall.iter().copied().fold(0.0, f64::max),
        all_suspected,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
