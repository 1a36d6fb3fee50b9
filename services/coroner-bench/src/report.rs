//! Report latency: a synthetic job (see [`crate::synth`]) is pushed into a [`JobPipeline`] with
//! its ends and hosts; the clock then runs over `JobPipeline::report` alone, the work between
//! the pipeline holding every line and the final report. The report must name the planted
//! culprit and its class.

use crate::synth::{self, Shape};
use coroner_analysis::RuleSet;
use coroner_model::{FaultClass, Rank};
use coroner_pipeline::JobPipeline;
use std::time::Instant;

pub struct ReportFigures {
    pub ms: f64,
    pub ingest_s: f64,
    pub lines: u64,
    pub culprit_ok: bool,
    pub found: String,
    pub evidence_ms: f64,
    /// CPU time of the report's thread: the figure without other processes' contention.
    pub cpu_ms: f64,
    pub events: usize,
}

pub fn run(shape: Shape) -> ReportFigures {
    let started = Instant::now();
    let mut p = JobPipeline::new(&format!("synthetic-{}", shape.ranks));
    p.set_world_size(shape.ranks);
    let mut lines = 0u64;
    for r in 0..shape.ranks {
        p.set_host(Rank(r), &synth::host(r));
        for l in synth::rank_lines(&shape, r) {
            lines += 1;
            p.push_line(l);
        }
    }
    for e in synth::ends(&shape) {
        p.add_end(e);
    }
    p.set_finished(true);
    let ingest_s = started.elapsed().as_secs_f64();

    let rules = RuleSet::builtin();
    let started = Instant::now();
    let cpu0 = thread_cpu_ms();
    let report = p.report(&rules);
    let cpu_ms = thread_cpu_ms() - cpu0;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    // For profiling: CORONER_BENCH_REPORT_REPEAT=N runs the report N more times.
    let repeat: usize = std::env::var("CORONER_BENCH_REPORT_REPEAT").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    for _ in 0..repeat {
        std::hint::black_box(p.report(&rules));
    }
    // The two halves, for the profile: gathering the evidence, and the pure analysis.
    let started = Instant::now();
    let evidence = p.evidence();
    let evidence_ms = started.elapsed().as_secs_f64() * 1e3;
    let events: usize = evidence.ranks.values().map(|r| r.events.len()).sum();
    drop(evidence);

    let (rank, class) = report.first_failure.as_ref().map_or((None, None), |f| (f.rank, Some(f.class)));
    let culprit_ok = rank == Some(Rank(shape.culprit)) && class == Some(FaultClass::CudaOom);
    let found = format!("rank {} {}", rank.map_or("-".to_string(), |r| r.0.to_string()), class.map_or("-", |c| c.as_str()));
    ReportFigures { ms, ingest_s, lines, culprit_ok, found, evidence_ms, cpu_ms, events }
}

/// CPU time this thread has used, in ms.
pub fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}
