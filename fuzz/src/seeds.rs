//! Seed inputs for every target, built from the fixtures under `tests/data` (the corpus bundles
//! and the snapshot files). Nothing here is committed as a corpus: `scripts/fuzz.sh` writes the
//! seeds to `fuzz/seeds/<target>/` before it runs the targets.

use crate::{bundle_input, frame, Tag, BUNDLE_FILES, SNAPSHOT_KINDS};
use coroner_proto::v1;
use prost::Message;
use std::path::{Path, PathBuf};

/// The largest seed per target, under the `-max_len` the script gives each.
pub const MAX_SEED: usize = 60 * 1024;
/// A text file in a bundle seed is cut (at a line end) to this many bytes.
const MAX_TEXT_FILE: usize = 8 * 1024;

/// `tests/data` of the checkout this crate lives in.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data")
}

fn sorted(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    v.sort();
    v
}

fn corpus_dirs() -> Vec<PathBuf> {
    sorted(&data_dir().join("corpus")).into_iter().filter(|p| p.is_dir()).collect()
}

fn name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The first `max` bytes of a text, ending at a line end when there is one.
fn head_lines(b: &[u8], max: usize) -> &[u8] {
    if b.len() <= max {
        return b;
    }
    match b[..max].iter().rposition(|c| *c == b'\n') {
        Some(i) => &b[..=i],
        None => &b[..max],
    }
}

/// `lines` seeds: the raw rank and launcher logs, each with a few flag bytes.
pub fn lines() -> Seeds {
    let mut out = Vec::new();
    for dir in corpus_dirs() {
        for f in sorted(&dir) {
            let n = name(&f);
            if !(n.ends_with(".stderr.log") || n.ends_with(".stdout.log")) {
                continue;
            }
            let Ok(bytes) = std::fs::read(&f) else { continue };
            // Per-rank parser on stderr; the launcher's combined stream without a rank.
            let flags: u8 = if n.starts_with("launcher") { 0b0001_0010 } else { 0b0010_0011 };
            let mut seed = vec![flags];
            seed.extend_from_slice(head_lines(&bytes, 12 * 1024));
            out.push((format!("{}-{n}", name(&dir)), seed));
        }
    }
    if let Ok(dmesg) = std::fs::read(data_dir().join("snapshots/dmesg-tail.txt")) {
        let mut seed = vec![0b0000_0100];
        seed.extend_from_slice(head_lines(&dmesg, 12 * 1024));
        out.push(("dmesg".into(), seed));
    }
    if let Ok(stack) = std::fs::read(data_dir().join("snapshots/rank1.stack.txt")) {
        // A traceback whose last line is padded past the cap.
        let mut seed = vec![0b0000_1011];
        seed.extend_from_slice(&stack);
        seed.extend_from_slice("é".repeat(7).as_bytes());
        out.push(("stack-padded".into(), seed));
    }
    out
}

/// The name a corpus file has in [`BUNDLE_FILES`], if it has one.
fn bundle_name(rel: &str) -> Option<&'static str> {
    if let Some(n) = BUNDLE_FILES.iter().find(|n| **n == rel) {
        return Some(n);
    }
    let parts: Vec<&str> = rel.split('/').collect();
    if let ["torchrun_logs", _, attempt, "0", "stderr.log"] = parts.as_slice() {
        if attempt.starts_with("attempt_") {
            return Some("torchrun_logs/run/attempt_0/0/stderr.log");
        }
    }
    None
}

fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, PathBuf)>) {
    for p in sorted(dir) {
        if p.is_dir() {
            walk(&p, base, out);
        } else if let Ok(rel) = p.strip_prefix(base) {
            out.push((rel.to_string_lossy().into_owned(), p.clone()));
        }
    }
}

/// `bundle` seeds: each corpus bundle's files under their [`BUNDLE_FILES`] names, text files cut.
pub fn bundles() -> Seeds {
    let mut out = Vec::new();
    for dir in corpus_dirs() {
        let mut files = Vec::new();
        walk(&dir, &dir, &mut files);
        let mut picked: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut total = 0;
        for (rel, path) in files {
            let Some(n) = bundle_name(&rel) else { continue };
            let Ok(bytes) = std::fs::read(&path) else { continue };
            let text = !bytes.iter().take(512).any(|b| *b == 0 || *b >= 0x80);
            let body = if text { head_lines(&bytes, MAX_TEXT_FILE).to_vec() } else if bytes.len() <= MAX_TEXT_FILE { bytes } else { continue };
            if picked.iter().any(|(p, _)| *p == n) || total + body.len() + 64 > MAX_SEED {
                continue;
            }
            total += body.len() + 64;
            picked.push((n, body));
        }
        let refs: Vec<(&str, &[u8])> = picked.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        out.push((name(&dir), bundle_input(&refs)));
    }
    // A combined log with no bundle files: read as a folder of plain logs.
    if let Ok(log) = std::fs::read(data_dir().join("corpus/torchrun_oom_r1/launcher.stderr.log")) {
        out.push(("combined-log".into(), bundle_input(&[("train.log", head_lines(&log, MAX_TEXT_FILE))])));
    }
    out
}

/// `snapshot` seeds: each snapshot fixture behind the byte for its reader, and the flight
/// recorder pickles behind the raw pickle reader's byte too.
pub fn snapshots() -> Seeds {
    let mut out = Vec::new();
    let kind_byte = |k: &str| SNAPSHOT_KINDS.iter().position(|x| *x == k).unwrap_or(0) as u8;
    for f in sorted(&data_dir().join("snapshots")) {
        let n = name(&f);
        let Ok(bytes) = std::fs::read(&f) else { continue };
        if bytes.len() + 1 > MAX_SEED {
            continue;
        }
        let kind = coroner_snapshot::kind_of("", &n);
        let kind = if n.contains("nccl_trace") { "flight_recorder" } else { kind };
        let mut seed = vec![kind_byte(kind)];
        seed.extend_from_slice(&bytes);
        out.push((n.clone(), seed));
        if kind == "flight_recorder" {
            let mut raw = vec![kind_byte("pickle")];
            raw.extend_from_slice(&bytes);
            out.push((format!("{n}.pickle"), raw));
        }
        if kind == "memory_summary" || kind == "stack" {
            // Unnamed: the kind comes from the content.
            let mut other = vec![kind_byte("other")];
            other.extend_from_slice(&bytes);
            out.push((format!("{n}.other"), other));
        }
    }
    out
}

/// `ingest` seeds: per corpus bundle and rank, a session, a batch of its first lines (as the
/// agent encodes them), clock probes and its exit; and a launcher session naming ranks per line.
pub fn ingest() -> Seeds {
    let mut out = Vec::new();
    for dir in corpus_dirs() {
        let meta: serde_json::Value = std::fs::read(dir.join("meta.json")).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        let world = meta.get("world_size").and_then(|w| w.as_u64()).map(|w| w as u32);
        let exits: serde_json::Value = std::fs::read(dir.join("exits.json")).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        for rank in 0..2u32 {
            let Ok(jsonl) = std::fs::read(dir.join(format!("rank{rank}.lines.jsonl"))) else { continue };
            let lines = wire_lines(&jsonl, 40, None);
            let mut seed = frame(Tag::OpenSession, &open_session(&name(&dir), Some(rank), world).encode_to_vec());
            let probe = v1::ClockProbe { session_id: "s".into(), t1_agent_send_ns: 1_796_029_196_000_000_000, t2_server_recv_ns: 1_796_029_196_000_400_000, t3_server_send_ns: 1_796_029_196_000_450_000, t4_agent_recv_ns: 1_796_029_196_000_900_000 };
            let batch = v1::LogBatch { session_id: "s".into(), batch_id: 1, lines, clock: vec![probe.clone()], spool_backlog: 0 };
            seed.extend(frame(Tag::LogBatch, &batch.encode_to_vec()));
            seed.extend(frame(Tag::ClockProbe, &probe.encode_to_vec()));
            let rec = exits.get("ranks").and_then(|r| r.get(rank.to_string()));
            let exit = v1::ProcessExit {
                session_id: "s".into(),
                rank: Some(rank),
                exit_code: rec.and_then(|r| r.get("exit_code")).and_then(|c| c.as_i64()).map(|c| c as i32),
                signal: rec.and_then(|r| r.get("signal")).and_then(|c| c.as_i64()).map(|c| c as i32),
                at_ns: 1_796_029_200_000_000_000,
                dropped_lines: 0,
                notes: Vec::new(),
            };
            seed.extend(frame(Tag::ProcessExit, &exit.encode_to_vec()));
            out.push((format!("{}-rank{rank}", name(&dir)), seed));
        }
        if let Ok(jsonl) = std::fs::read(dir.join("launcher.lines.jsonl")) {
            let mut seed = frame(Tag::OpenSession, &open_session(&name(&dir), None, world).encode_to_vec());
            let batch = v1::LogBatch { session_id: "s".into(), batch_id: 1, lines: wire_lines(&jsonl, 60, Some(1)), clock: Vec::new(), spool_backlog: 4096 };
            seed.extend(frame(Tag::LogBatch, &batch.encode_to_vec()));
            let exit = v1::ProcessExit { session_id: "s".into(), exit_code: Some(1), ..Default::default() };
            seed.extend(frame(Tag::ProcessExit, &exit.encode_to_vec()));
            out.push((format!("{}-launcher", name(&dir)), seed));
        }
    }
    if let Ok(stack) = std::fs::read(data_dir().join("snapshots/rank1.stack.txt")) {
        let header = v1::SnapshotHeader { rank: Some(1), kind: "stack".into(), name: "rank1.stack.txt".into(), size: stack.len() as u64, sha256: "0".repeat(64), captured_ns: 1, original_size: None };
        let chunk = v1::SnapshotChunk { session_id: "s".into(), header: Some(header), offset: 0, data: stack, last: true };
        out.push(("snapshot-chunk".into(), frame(Tag::SnapshotChunk, &chunk.encode_to_vec())));
    }
    out
}

fn open_session(job: &str, rank: Option<u32>, world_size: Option<u32>) -> v1::OpenSessionRequest {
    v1::OpenSessionRequest {
        job_id: job.into(),
        rank,
        local_rank: rank,
        world_size,
        host: "vm".into(),
        pid: 2143,
        launcher: "torchrun".into(),
        agent_instance: "fuzz".into(),
        node_rank_base: rank.is_none().then_some(0),
        ..Default::default()
    }
}

/// The first `max` records of a lines.jsonl as wire lines; `rank` is put on every line.
fn wire_lines(jsonl: &[u8], max: usize, rank: Option<u32>) -> Vec<v1::LogLine> {
    let mut seqs = [0u64; 3];
    jsonl
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .take(max)
        .map(|r| {
            let stream = match r.get("stream").and_then(|s| s.as_str()) {
                Some("stdout") => v1::StreamKind::Stdout,
                Some("stderr") => v1::StreamKind::Stderr,
                _ => v1::StreamKind::File,
            };
            let slot = stream as usize - 1;
            let seq = seqs[slot];
            seqs[slot] += 1;
            v1::LogLine {
                seq,
                capture_ns: r.get("ts_ns").and_then(|t| t.as_i64()).unwrap_or(0),
                stream: stream as i32,
                raw: r.get("line").and_then(|l| l.as_str()).unwrap_or("").as_bytes().to_vec(),
                rank,
                file: String::new(),
            }
        })
        .collect()
}

/// Named seed inputs of one target.
pub type Seeds = Vec<(String, Vec<u8>)>;

/// Every target's seeds, by target name.
pub fn all() -> Vec<(&'static str, Seeds)> {
    vec![("lines", lines()), ("bundle", bundles()), ("snapshot", snapshots()), ("ingest", ingest())]
}
