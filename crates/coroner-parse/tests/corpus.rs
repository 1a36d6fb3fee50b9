//! Every corpus bundle through `RankParser`: the key events of each scenario.
//! The bundles are copies (without answer keys) under `tests/data/corpus/` at the workspace root.

use coroner_model::{Event, EventKind, LogLine, PeerRef, Rank, SeqNo, Stream};
use coroner_parse::RankParser;
use std::path::{Path, PathBuf};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/corpus")
}

/// Reads a `*.lines.jsonl` file into per-stream line lists.
fn read_jsonl(path: &Path, rank: Option<Rank>) -> Vec<LogLine> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut seq_out = 0u64;
    let mut seq_err = 0u64;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("jsonl");
            let stream = Stream::parse(v["stream"].as_str().unwrap_or("stderr")).unwrap_or(Stream::Stderr);
            let seq = match stream {
                Stream::Stdout => &mut seq_out,
                _ => &mut seq_err,
            };
            let line =
                LogLine { rank, stream, seq: *seq, capture_ns: v["ts_ns"].as_i64().unwrap_or(0), bytes: v["line"].as_str().unwrap_or("").as_bytes().to_vec() };
            *seq += 1;
            line
        })
        .collect()
}

/// Parses one rank (or the launcher, `rank == None`) of a bundle, one parser per stream.
fn parse(bundle: &str, rank: Option<u32>) -> Vec<Event> {
    let file = match rank {
        Some(r) => format!("rank{r}.lines.jsonl"),
        None => "launcher.lines.jsonl".to_string(),
    };
    let lines = read_jsonl(&corpus().join(bundle).join(file), rank.map(Rank));
    let mut out = Vec::new();
    for stream in [Stream::Stdout, Stream::Stderr] {
        let mut p = RankParser::new(rank.map(Rank));
        for l in lines.iter().filter(|l| l.stream == stream) {
            p.push(l, &mut out);
        }
        p.finish(&mut out);
    }
    out
}

fn kinds<'a>(evs: &'a [Event], name: &str) -> Vec<&'a EventKind> {
    evs.iter().map(|e| &e.kind).filter(|k| k.name() == name).collect()
}

fn bundles() -> Vec<(String, Vec<Option<u32>>)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(corpus()) else { return out };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let mut ranks = Vec::new();
        for f in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
            let f = f.file_name().to_string_lossy().to_string();
            if let Some(r) = f.strip_prefix("rank").and_then(|r| r.strip_suffix(".lines.jsonl")) {
                ranks.extend(r.parse::<u32>().ok().map(Some));
            }
            if f == "launcher.lines.jsonl" {
                ranks.push(None);
            }
        }
        ranks.sort();
        out.push((name, ranks));
    }
    out.sort();
    out
}

#[test]
#[ignore = "prints every event of the corpus; run with --ignored --nocapture"]
fn dump_corpus_events() {
    for (b, ranks) in bundles() {
        for r in ranks {
            for e in parse(&b, r) {
                let mut k = serde_json::to_string(&e.kind).unwrap_or_default();
                if k.len() > 300 {
                    k.truncate(300);
                }
                println!("{b} r{r:?} {:?}#{} p={:?} {k}", e.line.stream, e.line.seq, e.printed_ns);
            }
        }
    }
}

#[test]
fn every_bundle_parses_and_events_are_few() {
    let all = bundles();
    assert!(all.len() >= 13, "corpus copies missing: {}", corpus().display());
    for (b, ranks) in all {
        for r in ranks {
            let evs = parse(&b, r);
            assert!(evs.len() < 80, "{b} rank {r:?}: {} events", evs.len());
            for e in &evs {
                if let Some(rank) = r {
                    assert_eq!(e.rank, Some(Rank(rank)));
                }
            }
        }
    }
}

#[test]
fn nccl2_hang_r1() {
    let r0 = parse("nccl2_hang_r1", Some(0));
    assert!(kinds(&r0, "watchdog_timeout").iter().any(|k| matches!(k,
        EventKind::WatchdogTimeout { seq: Some(SeqNo(11)), op, numel_in: Some(1153), numel_out: Some(1153), timeout_ms: Some(20000), elapsed_ms: Some(20038), .. } if op == "ALLREDUCE")));
    assert!(kinds(&r0, "pg_status")
        .iter()
        .any(|k| matches!(k, EventKind::PgStatus { failing_seq: Some(SeqNo(11)), last_enqueued: Some(SeqNo(11)), last_completed: Some(SeqNo(10)), .. })));
    assert!(kinds(&r0, "dump_signal").iter().any(|k| matches!(k, EventKind::DumpSignal { detector: None, .. })));
    assert_eq!(kinds(&r0, "watchdog_abort").len(), 1);
    assert!(kinds(&r0, "fatal_signal").iter().any(|k| matches!(k, EventKind::FatalSignal { what, frames } if what == "Aborted" && frames.last().is_some_and(|f| f.function == "main" && f.line == Some(109)))));
    assert!(kinds(&r0, "step").len() >= 5);
    assert!(kinds(&r0, "nccl_init").iter().any(|k| matches!(k, EventKind::NcclInit { rank: Rank(0), nranks: 2, pid: 1141, .. })));
    assert!(kinds(&r0, "connection_closed").iter().any(|k| matches!(k, EventKind::ConnectionClosed { peer: Some(PeerRef::LocalRank(1)), .. })));
    // printed time of the watchdog line
    let w = r0.iter().find(|e| e.kind.name() == "watchdog_timeout").expect("watchdog");
    assert_eq!(w.printed_ns.map(coroner_model::format_rfc3339_ns).as_deref(), Some("2026-11-30T08:59:11.424298747Z"));

    let r1 = parse("nccl2_hang_r1", Some(1));
    assert!(kinds(&r1, "dump_signal")
        .iter()
        .any(|k| matches!(k, EventKind::DumpSignal { detector: Some(Rank(0)), last_enqueued: Some(SeqNo(10)), last_completed: Some(SeqNo(10)), .. })));
    assert!(kinds(&r1, "stack_dump").iter().any(|k| matches!(k, EventKind::StackDump { frames } if frames.last().is_some_and(|f| f.line == Some(88)))));
    assert_eq!(kinds(&r1, "watchdog_timeout").len(), 0);
}

#[test]
fn nccl2_oom_r1() {
    let r1 = parse("nccl2_oom_r1", Some(1));
    let e = r1.iter().find(|e| e.kind.name() == "exception").expect("exception");
    let EventKind::Exception { exc_type, message, frames } = &e.kind else { unreachable!() };
    assert_eq!(exc_type, "torch.OutOfMemoryError");
    assert!(message.starts_with("CUDA out of memory. Tried to allocate 200.00 GiB"));
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[1].function, "main");
    assert!(e.text.starts_with("torch.OutOfMemoryError: CUDA out of memory"));
    let first = read_jsonl(&corpus().join("nccl2_oom_r1/rank1.lines.jsonl"), Some(Rank(1)));
    let tb = first.iter().find(|l| l.text().contains("Traceback")).expect("traceback line");
    assert_eq!((e.line.stream, e.line.seq, e.capture_ns), (tb.stream, tb.seq, tb.capture_ns));
}

#[test]
fn nccl2_segv_r0() {
    let r0 = parse("nccl2_segv_r0", Some(0));
    let k = kinds(&r0, "fatal_signal");
    assert!(
        matches!(k.as_slice(), [EventKind::FatalSignal { what, frames }] if what == "Segmentation fault" && frames.last().is_some_and(|f| f.function == "string_at")),
        "{k:?}"
    );
}

#[test]
fn nccl2_mismatch_detail() {
    for (rank, mine, theirs) in [(0u32, "[1153]", "[1024]"), (1, "[1024]", "[1153]")] {
        let evs = parse("nccl2_mismatch_detail", Some(rank));
        let k = kinds(&evs, "collective_mismatch");
        assert!(!k.is_empty(), "rank {rank}");
        let EventKind::CollectiveMismatch { this, other } = k[0] else { unreachable!() };
        assert_eq!((this.rank, this.shapes.as_slice(), this.seq), (Rank(rank), &[mine.to_string()][..], Some(SeqNo(10))));
        assert_eq!((other.rank, other.shapes.as_slice()), (Rank(1 - rank), &[theirs.to_string()][..]));
        assert!(!kinds(&evs, "exception").is_empty());
    }
}

#[test]
fn nccl2_nan_shape_statedict_double() {
    let nan = parse("nccl2_nan_r0", Some(0));
    let ex = kinds(&nan, "exception");
    assert_eq!(ex.len(), 1, "the anomaly warning's forward trace is not a traceback: {ex:?}");
    assert!(matches!(ex[0], EventKind::Exception { message, .. } if message.contains("returned nan values")));
    assert!(kinds(&nan, "warning").iter().any(|k| k.message().contains("Error detected in PowBackward0")));

    let shape = parse("nccl2_shape_r0", Some(0));
    assert!(kinds(&shape, "exception").iter().any(|k| k.message() == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x20 and 16x64)"));

    let sd = parse("nccl2_statedict_r1", Some(1));
    let ex = kinds(&sd, "exception");
    let EventKind::Exception { message, .. } = ex[0] else { unreachable!() };
    assert!(message.starts_with("Error(s) in loading state_dict for Sequential:\n\tsize mismatch for 0.weight"));
    assert_eq!(message.lines().count(), 4);

    let d1 = parse("nccl2_double_r0_r1", Some(1));
    assert!(kinds(&d1, "exception").iter().any(|k| k.message().starts_with("ValueError: loss is not finite")));
    let store = kinds(&d1, "store_error");
    assert!(!store.is_empty() && store.len() <= 4, "{store:?}");
    let d0 = parse("nccl2_double_r0_r1", Some(0));
    assert!(kinds(&d0, "exception").iter().any(|k| matches!(k, EventKind::Exception { exc_type, .. } if exc_type == "torch.OutOfMemoryError")));
}

#[test]
fn nccl2_tokenizer_r1() {
    let r1 = parse("nccl2_tokenizer_r1", Some(1));
    let asserts: Vec<_> = kinds(&r1, "error_line").into_iter().filter(|k| k.message().contains("vectorized_gather_kernel")).collect();
    assert_eq!(asserts.len(), 1);
    let ex = kinds(&r1, "exception");
    assert!(
        matches!(ex.as_slice(), [EventKind::Exception { exc_type, message, .. }] if exc_type == "torch.AcceleratorError" && message.starts_with("CUDA error: device-side assert triggered\nSearch for")),
        "{ex:?}"
    );
    assert!(kinds(&r1, "error_line").iter().any(|k| k.message().contains("uncaught AcceleratorError")));
    assert!(!kinds(&r1, "fatal_signal").is_empty());
    let r0 = parse("nccl2_tokenizer_r1", Some(0));
    assert!(kinds(&r0, "watchdog_timeout").iter().any(|k| matches!(k, EventKind::WatchdogTimeout { seq: Some(SeqNo(10)), numel_in: Some(2753), .. })));
}

#[test]
fn gloo8_hang_r5() {
    for r in [0u32, 1, 2, 3, 4, 6, 7] {
        let evs = parse("gloo8_hang_r5", Some(r));
        assert!(kinds(&evs, "transport_timeout").iter().any(|k| matches!(k,
            EventKind::TransportTimeout { transport, timeout_ms: Some(20000), operation } if transport == "gloo" && (operation == "recv" || operation == "send"))), "rank {r}");
        assert!(kinds(&evs, "exception").iter().any(|k| k.message().starts_with("RuntimeError: [/pytorch/third_party/gloo")), "rank {r}");
    }
    let r5 = parse("gloo8_hang_r5", Some(5));
    assert_eq!(kinds(&r5, "stack_dump").len(), 1);
    assert!(kinds(&r5, "exception").is_empty());
    let slow = parse("gloo4_slow_r2", Some(2));
    assert_eq!(kinds(&slow, "step").len(), 12);
    assert!(slow.iter().all(|e| matches!(e.kind, EventKind::Step { .. } | EventKind::Warning { .. })));
}

#[test]
fn nccl2_ok_is_quiet() {
    for r in [0, 1] {
        let evs = parse("nccl2_ok", Some(r));
        assert!(
            evs.iter().all(|e| matches!(
                e.kind,
                EventKind::Step { .. } | EventKind::Warning { .. } | EventKind::NcclInit { .. } | EventKind::ConnectionClosed { .. }
            )),
            "{evs:?}"
        );
        assert!(!kinds(&evs, "step").is_empty());
    }
}

#[test]
fn torchrun_oom_r1_launcher() {
    let evs = parse("torchrun_oom_r1", None);
    let rows: Vec<_> = kinds(&evs, "launcher_worker_failed");
    let root: Vec<_> = rows
        .iter()
        .filter_map(|k| match k {
            EventKind::LauncherWorkerFailed(f) if f.root_cause_row => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(root.len(), 1);
    assert_eq!(
        (root[0].global_rank, root[0].local_rank, root[0].exit_code, root[0].pid, root[0].host.as_deref()),
        (Some(Rank(1)), Some(1), Some(1), Some(3191), Some("localhost"))
    );
    assert!(rows.iter().any(|k| matches!(k, EventKind::LauncherWorkerFailed(f) if !f.root_cause_row && f.global_rank == Some(Rank(0)) && f.signal == Some(15) && f.exit_code.is_none())));
    assert!(rows
        .iter()
        .any(|k| matches!(k, EventKind::LauncherWorkerFailed(f) if f.global_rank.is_none() && f.local_rank == Some(1) && f.exit_code == Some(1))));
    assert!(kinds(&evs, "launcher_signal").iter().any(|k| matches!(k, EventKind::LauncherSignal { pid: Some(3190), signal } if signal == "SIGTERM")));
    assert!(kinds(&evs, "exception")
        .iter()
        .any(|k| matches!(k, EventKind::Exception { exc_type, .. } if exc_type == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError")));
    // The worker's traceback, through the `[default1]:[rank1]:` prefixes, attributed to rank 1.
    assert!(evs.iter().any(|e| e.rank == Some(Rank(1)) && matches!(&e.kind, EventKind::Exception { exc_type, .. } if exc_type == "torch.OutOfMemoryError")));
    assert!(evs.iter().any(|e| matches!(e.kind, EventKind::Step { step: 4 })));
    let table_row = evs.iter().find(|e| matches!(&e.kind, EventKind::LauncherWorkerFailed(f) if f.root_cause_row)).expect("row");
    assert!(table_row.printed_ns.is_some());
}
