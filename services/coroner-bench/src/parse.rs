//! Parse throughput on the corpus mix, beside a plain newline scan of the same bytes.
//!
//! The corpus files (`tests/data/corpus/*/rank*.lines.jsonl` and `launcher.lines.jsonl`) are
//! decoded once; each pass then feeds every file's lines through fresh [`RankParser`]s, one per
//! (rank, stream) as the pipeline keeps them, on one thread. The reference counts the newlines
//! of the same bytes (each file's lines joined by `\n`) with `memchr`, as many passes.

use anyhow::{Context, Result};
use coroner_model::{Event, LogLine, Rank, Stream};
use coroner_parse::RankParser;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One corpus file's lines, and the same bytes as one buffer for the scan.
pub struct CorpusFile {
    pub rank: Option<Rank>,
    pub lines: Vec<LogLine>,
    pub joined: Vec<u8>,
}

/// The corpus: `tests/data/corpus` under the workspace (or `$CORONER_CORPUS`).
pub fn corpus_dir() -> PathBuf {
    std::env::var_os("CORONER_CORPUS").map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/corpus"))
}

pub fn load_corpus(dir: &Path) -> Result<Vec<CorpusFile>> {
    let mut paths = Vec::new();
    for bundle in std::fs::read_dir(dir).with_context(|| format!("read the corpus {}", dir.display()))? {
        let bundle = bundle?.path();
        if !bundle.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&bundle)? {
            let p = f?.path();
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.ends_with(".lines.jsonl") && (name.starts_with("rank") || name.starts_with("launcher")) {
                paths.push(p);
            }
        }
    }
    paths.sort();
    let mut files = Vec::new();
    for p in paths {
        let bytes = std::fs::read(&p).with_context(|| format!("read {}", p.display()))?;
        let rank = coroner_bundle::rank_from_name(&p);
        let lines = parse_jsonl(&bytes, rank);
        let mut joined = Vec::new();
        for l in &lines {
            joined.extend_from_slice(&l.bytes);
            joined.push(b'\n');
        }
        files.push(CorpusFile { rank, lines, joined });
    }
    anyhow::ensure!(!files.is_empty(), "no *.lines.jsonl files under {}", dir.display());
    Ok(files)
}

#[derive(serde::Deserialize)]
struct Record {
    ts_ns: i64,
    stream: String,
    line: String,
}

/// The bundle format's `{"ts_ns", "stream", "line"}` records, numbered per stream like a loader does.
fn parse_jsonl(bytes: &[u8], rank: Option<Rank>) -> Vec<LogLine> {
    let mut seqs = [0u64; 3];
    let mut out = Vec::new();
    for raw in bytes.split(|b| *b == b'\n') {
        let Ok(rec) = serde_json::from_slice::<Record>(raw) else {
            continue;
        };
        let stream = Stream::parse(&rec.stream).unwrap_or(Stream::File);
        let slot = stream_slot(stream);
        out.push(LogLine { rank, stream, seq: seqs[slot], capture_ns: rec.ts_ns, bytes: rec.line.into_bytes() });
        seqs[slot] += 1;
    }
    out
}

pub struct ParseFigures {
    pub parse_mb_per_s: f64,
    pub scan_mb_per_s: f64,
    pub bytes: u64,
    pub events: u64,
}

/// Parses the corpus `passes` times (enough passes to reach about `target_bytes`).
pub fn run(files: &[CorpusFile], target_bytes: u64) -> ParseFigures {
    let per_pass: u64 = files.iter().map(|f| f.joined.len() as u64).sum();
    let passes = target_bytes.div_ceil(per_pass.max(1)).max(1);
    let bytes = per_pass * passes;

    let started = Instant::now();
    let mut events = 0u64;
    let mut out: Vec<Event> = Vec::new();
    for _ in 0..passes {
        for f in files {
            let mut parsers: [Option<RankParser>; 3] = [None, None, None];
            for l in &f.lines {
                let p = parsers[stream_slot(l.stream)].get_or_insert_with(|| RankParser::new(f.rank));
                p.push(l, &mut out);
            }
            for p in parsers.iter_mut().flatten() {
                p.finish(&mut out);
            }
            events += out.len() as u64;
            out.clear();
        }
    }
    let parse_s = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut newlines = 0u64;
    for _ in 0..passes {
        for f in files {
            newlines += memchr::memchr_iter(b'\n', std::hint::black_box(&f.joined)).count() as u64;
        }
    }
    let scan_s = started.elapsed().as_secs_f64();
    std::hint::black_box(newlines);

    ParseFigures { parse_mb_per_s: bytes as f64 / parse_s / 1e6, scan_mb_per_s: bytes as f64 / scan_s / 1e6, bytes, events }
}

fn stream_slot(s: Stream) -> usize {
    match s {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
        Stream::File => 2,
    }
}
