//! Search latency on a large job built with [`JobIndex`] directly (synthetic ranks, see
//! [`crate::synth`]), and the index's size per raw byte.
//!
//! The queries mix what an operator types after a failure: single terms and phrases, each with
//! a rank filter, a time window (per-rank capture windows, as the server sends them), or both;
//! one page of 100 hits each, hits loaded, as the Search RPC does.

use crate::ingest::dir_size;
use crate::synth::{self, Shape};
use anyhow::{ensure, Result};
use coroner_index::{IndexedLine, JobIndex, SearchRequest};
use std::collections::BTreeMap;
use std::time::Instant;

pub struct SearchFigures {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub queries: usize,
    pub lines: u64,
    pub build_s: f64,
    pub index_bytes_per_raw_byte: f64,
    pub index_bytes: u64,
    pub raw_bytes: u64,
}

const TERMS: [&str; 6] = ["watchdog", "loss", "nccl", "traceback", "outofmemoryerror", "aborted"];
const PHRASES: [&str; 4] = ["\"collective operation timeout\"", "\"CUDA out of memory\"", "\"Init COMPLETE\"", "\"Fatal Python error\""];

pub fn run(lines: u64, queries: usize) -> Result<SearchFigures> {
    let ranks = if lines >= 4_000_000 { 1024 } else { 256 };
    let shape = Shape::new(ranks, (lines / u64::from(ranks)) as usize);
    let dir = tempfile::Builder::new().prefix("coroner-bench-search").tempdir()?;
    let index = JobIndex::open_or_create(&dir.path().join("index"))?;

    let started = Instant::now();
    let mut raw_bytes = 0u64;
    let mut n = 0u64;
    let mut span = (i64::MAX, i64::MIN);
    let mut docs = Vec::with_capacity(shape.lines_per_rank + 32);
    for r in 0..ranks {
        let host = synth::host(r);
        for l in synth::rank_lines(&shape, r) {
            raw_bytes += l.bytes.len() as u64 + 1;
            span = (span.0.min(l.capture_ns), span.1.max(l.capture_ns));
            docs.push(IndexedLine {
                rank: l.rank.map(|r| r.0),
                stream: l.stream,
                seq: l.seq,
                capture_ns: l.capture_ns,
                host: host.clone(),
                severity: "info".into(),
                bytes: l.bytes,
            });
        }
        n += docs.len() as u64;
        index.add(&docs)?;
        docs.clear();
    }
    index.commit()?;
    let build_s = started.elapsed().as_secs_f64();
    ensure!(index.num_lines() == n, "the index lost lines");

    let mut latencies = Vec::with_capacity(queries);
    let mut hits = 0u64;
    let width = span.1 - span.0;
    for i in 0..queries {
        let query = if i % 2 == 0 { TERMS[i / 2 % TERMS.len()] } else { PHRASES[i / 2 % PHRASES.len()] };
        let rank = (i as u32).wrapping_mul(2_654_435_761) % ranks;
        let (lo, hi) = (span.0 + width * (i % 7) as i64 / 10, span.0 + width * ((i % 7) as i64 + 4) / 10);
        let mut req = SearchRequest { query: query.into(), limit: 100, ..Default::default() };
        match i % 3 {
            0 => req.rank = Some(rank),
            1 => req.capture_windows = Some(windows(ranks, lo, hi)),
            _ => {
                req.rank = Some(rank);
                req.capture_windows = Some(BTreeMap::from([(Some(rank), (lo, hi))]));
            }
        }
        let t = Instant::now();
        let page = index.search(&req)?;
        latencies.push(t.elapsed().as_secs_f64() * 1e3);
        hits += page.total;
    }
    std::hint::black_box(hits);
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];

    drop(index);
    let index_bytes = dir_size(dir.path());
    Ok(SearchFigures {
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        queries,
        lines: n,
        build_s,
        index_bytes_per_raw_byte: index_bytes as f64 / raw_bytes as f64,
        index_bytes,
        raw_bytes,
    })
}

/// A time window for every rank, shifted by the rank's clock error as an aligned range would be.
fn windows(ranks: u32, lo: i64, hi: i64) -> BTreeMap<Option<u32>, (i64, i64)> {
    (0..ranks).map(|r| (Some(r), (lo + synth::skew_ns(r) / 4, hi + synth::skew_ns(r) / 4))).collect()
}
