//! Finds what a path holds and feeds it to the pipeline.

use crate::lines::parse_jsonl;
use crate::logfile::{looks_like_text, split_log};
use crate::snapshots::scan_snapshots;
use crate::walk::{Entry, Scope};
use crate::BundleError;
use crate::Sink;
use coroner_model::{LogLine, Nanos, ProcessEnd, Rank, Stream};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What was read, for the user.
#[derive(Debug, Default)]
pub struct LoadSummary {
    pub files: usize,
    pub lines: u64,
    pub warnings: Vec<String>,
    /// The folder being read, which reads stay inside (`walk.rs`).
    scope: Scope,
}

/// Files in a bundle folder that are never inputs: answer keys and other tools' output.
const NOT_INPUTS: &[&str] = &["truth.json", "fr_trace_analysis.txt", "fr_trace_entries.txt", "fr_ls.txt"];

/// Reads every path into the sink and marks the job finished.
pub fn load_paths(paths: &[PathBuf], sink: &mut dyn Sink) -> Result<LoadSummary, BundleError> {
    let mut summary = LoadSummary::default();
    for path in paths {
        if path.as_os_str() == "-" {
            summary.scope = Scope::anything();
            sink.plain_logs();
            load_stdin(sink, &mut summary)?;
            continue;
        }
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BundleError::Missing { path: path.clone() },
            _ => BundleError::Io { path: path.clone(), source: e },
        })?;
        if meta.is_dir() {
            summary.scope = Scope::inside(path);
            if is_bundle(path) {
                load_bundle(path, sink, &mut summary)?;
            } else {
                sink.plain_logs();
                load_folder(path, sink, &mut summary, 0)?;
            }
        } else {
            sink.plain_logs();
            summary.scope = Scope::anything();
            load_log_file(path, None, sink, &mut summary);
        }
    }
    if summary.lines == 0 {
        return Err(BundleError::Empty { paths: paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") });
    }
    for w in &summary.warnings {
        sink.note(w.clone());
    }
    sink.finished();
    Ok(summary)
}

fn is_bundle(dir: &Path) -> bool {
    ["exits.json", "meta.json", "launcher.lines.jsonl", "rank0.lines.jsonl"].iter().any(|f| dir.join(f).is_file())
        || list(dir).iter().any(|p| file_name(p).ends_with(".lines.jsonl"))
}

fn list(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    v.sort();
    v
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// A file's bytes; anything that is not a readable regular file (inside the folder being read)
/// becomes a warning.
fn read(path: &Path, summary: &mut LoadSummary) -> Option<Vec<u8>> {
    match summary.scope.classify(path) {
        Entry::File => {}
        Entry::Dir => {
            summary.warnings.push(format!("skipped {}: a folder where a file was expected", path.display()));
            return None;
        }
        Entry::Skip(why) => {
            summary.warnings.push(format!("skipped {}: {why}", path.display()));
            return None;
        }
    }
    match std::fs::read(path) {
        Ok(b) => {
            summary.files += 1;
            Some(b)
        }
        Err(e) => {
            summary.warnings.push(format!("skipped {}: {e}", path.display()));
            None
        }
    }
}

fn mtime_ns(path: &Path) -> Nanos {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as Nanos)
        .unwrap_or(0)
}

fn push_all(sink: &mut dyn Sink, lines: Vec<LogLine>, summary: &mut LoadSummary) {
    summary.lines += lines.len() as u64;
    for l in lines {
        sink.line(l);
    }
}

#[derive(Deserialize)]
struct Meta {
    world_size: Option<u32>,
}

#[derive(Deserialize)]
struct Exits {
    world_size: Option<u32>,
    #[serde(default)]
    ranks: BTreeMap<String, ExitRecord>,
}

#[derive(Deserialize)]
struct LauncherExit {
    returncode: Option<i32>,
}

#[derive(Deserialize)]
struct ExitRecord {
    exit_code: Option<i32>,
    signal: Option<i32>,
}

fn load_bundle(dir: &Path, sink: &mut dyn Sink, summary: &mut LoadSummary) -> Result<(), BundleError> {
    let mut world_size = None;
    if let Some(bytes) = optional(dir, "meta.json", summary) {
        match serde_json::from_slice::<Meta>(&bytes) {
            Ok(m) => world_size = m.world_size,
            Err(e) => summary.warnings.push(format!("meta.json is not valid ({e}); ignored")),
        }
    }
    if let Some(bytes) = optional(dir, "exits.json", summary) {
        match serde_json::from_slice::<Exits>(&bytes) {
            Ok(exits) => {
                world_size = world_size.or(exits.world_size);
                for (key, rec) in exits.ranks {
                    match key.parse::<u32>() {
                        Ok(r) if world_size.is_none_or(|w| r < w) => {
                            sink.end(ProcessEnd { rank: Rank(r), exit_code: rec.exit_code, signal: rec.signal, at_ns: None });
                        }
                        _ => summary.warnings.push(format!("exits.json: rank {key:?} is not a rank of this job; ignored")),
                    }
                }
            }
            Err(e) => summary.warnings.push(format!("exits.json is not valid ({e}); process ends unknown")),
        }
    }
    if let Some(w) = world_size {
        sink.world_size(w);
    }

    let files = list(dir);
    let mut ranks_with_lines = Vec::new();
    for path in &files {
        let name = file_name(path);
        if let Some(rank) = name.strip_prefix("rank").and_then(|r| r.strip_suffix(".lines.jsonl")).and_then(|r| r.parse::<u32>().ok()) {
            if let Some(bytes) = read(path, summary) {
                let lines = parse_jsonl(&bytes, Some(Rank(rank)), &mut summary.warnings, &name);
                push_all(sink, lines, summary);
                ranks_with_lines.push(rank);
            }
        }
    }
    // Ranks captured only as raw logs.
    for path in &files {
        let name = file_name(path);
        let Some(rest) = name.strip_prefix("rank") else { continue };
        for (suffix, stream) in [(".stdout.log", Stream::Stdout), (".stderr.log", Stream::Stderr)] {
            if let Some(rank) = rest.strip_suffix(suffix).and_then(|r| r.parse::<u32>().ok()) {
                if !ranks_with_lines.contains(&rank) {
                    load_log_file(path, Some((Rank(rank), stream)), sink, summary);
                }
            }
        }
    }
    let mut launcher_lines = false;
    if let Some(bytes) = optional(dir, "launcher.exit.json", summary) {
        match serde_json::from_slice::<LauncherExit>(&bytes) {
            Ok(e) => sink.launcher_end(e.returncode),
            Err(e) => summary.warnings.push(format!("launcher.exit.json is not valid ({e}); ignored")),
        }
    }
    if let Some(bytes) = optional(dir, "launcher.lines.jsonl", summary) {
        let lines = parse_jsonl(&bytes, None, &mut summary.warnings, "launcher.lines.jsonl");
        launcher_lines = !lines.is_empty();
        push_all(sink, lines, summary);
    } else {
        for (name, stream) in [("launcher.stdout.log", Stream::Stdout), ("launcher.stderr.log", Stream::Stderr)] {
            let p = dir.join(name);
            if std::fs::symlink_metadata(&p).is_ok() {
                launcher_lines = true;
                let mtime = mtime_ns(&p);
                if let Some(bytes) = read(&p, summary) {
                    push_all(sink, split_log(&bytes, None, stream, mtime), summary);
                }
            }
        }
    }
    let torchrun_logs = dir.join("torchrun_logs");
    if !launcher_lines && ranks_with_lines.is_empty() && torchrun_logs.is_dir() {
        load_torchrun_logs(&torchrun_logs, sink, summary);
    }
    warn_unknown(dir, &files, summary);
    for s in scan_snapshots(dir, &mut summary.warnings) {
        sink.snapshot(s.summary, s.facts, dir);
    }
    Ok(())
}

fn optional(dir: &Path, name: &str, summary: &mut LoadSummary) -> Option<Vec<u8>> {
    let p = dir.join(name);
    std::fs::symlink_metadata(&p).is_ok().then(|| read(&p, summary)).flatten()
}

/// Whether a bundle's top-level entry is one the format (or a tool beside it) defines.
fn known_in_bundle(name: &str) -> bool {
    const FIXED: &[&str] = &[
        "meta.json",
        "exits.json",
        "launcher.exit.json",
        "launcher.lines.jsonl",
        "launcher.stdout.log",
        "launcher.stderr.log",
        "snapshots",
        "flight_recorder",
        "host",
        "torchrun_logs",
        "README.md",
    ];
    let rank_file = name
        .strip_prefix("rank")
        .and_then(|r| [".lines.jsonl", ".stdout.log", ".stderr.log"].iter().find_map(|s| r.strip_suffix(s)))
        .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()));
    rank_file || FIXED.contains(&name) || NOT_INPUTS.contains(&name)
}

/// One warning naming what a bundle holds that its format does not (left unread).
fn warn_unknown(dir: &Path, files: &[PathBuf], summary: &mut LoadSummary) {
    let unknown: Vec<String> = files.iter().map(|p| file_name(p)).filter(|n| !known_in_bundle(n)).collect();
    if unknown.is_empty() {
        return;
    }
    let shown: Vec<&str> = unknown.iter().take(10).map(String::as_str).collect();
    let more = if unknown.len() > shown.len() { format!(" and {} more", unknown.len() - shown.len()) } else { String::new() };
    summary.warnings.push(format!("{}: ignored {} entries a capture bundle does not hold: {}{more}", dir.display(), unknown.len(), shown.join(", ")));
}

/// torchrun `--log-dir`: `<run id>/attempt_<k>/<local rank>/{stdout,stderr}.log`; the last attempt.
fn load_torchrun_logs(dir: &Path, sink: &mut dyn Sink, summary: &mut LoadSummary) {
    let runs: Vec<PathBuf> = list(dir).into_iter().filter(|p| summary.scope.classify(p) == Entry::Dir).collect();
    for run in runs {
        let Some(attempt) = list(&run).into_iter().rfind(|p| file_name(p).starts_with("attempt_")) else { continue };
        for local in list(&attempt) {
            let Ok(l) = file_name(&local).parse::<u32>() else { continue };
            for (name, stream) in [("stdout.log", Stream::Stdout), ("stderr.log", Stream::Stderr)] {
                let p = local.join(name);
                if p.is_file() {
                    load_log_file(&p, Some((Rank(l), stream)), sink, summary);
                }
            }
        }
    }
}

/// A folder of plain logs: every text file in it (three levels deep at most).
fn load_folder(dir: &Path, sink: &mut dyn Sink, summary: &mut LoadSummary, depth: u32) -> Result<(), BundleError> {
    std::fs::read_dir(dir).map_err(|e| BundleError::Io { path: dir.to_path_buf(), source: e })?;
    for path in list(dir) {
        match summary.scope.classify(&path) {
            Entry::Dir => {
                if depth < 3 {
                    load_folder(&path, sink, summary, depth + 1)?;
                }
            }
            Entry::File if NOT_INPUTS.contains(&file_name(&path).as_str()) => {}
            Entry::File => load_log_file(&path, None, sink, summary),
            Entry::Skip(why) => summary.warnings.push(format!("skipped {}: {why}", path.display())),
        }
    }
    Ok(())
}

/// `-`: one log read from standard input (a pasted traceback, `kubectl logs ... | coroner analyze -`).
fn load_stdin(sink: &mut dyn Sink, summary: &mut LoadSummary) -> Result<(), BundleError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin().read_to_end(&mut bytes).map_err(|e| BundleError::Io { path: PathBuf::from("-"), source: e })?;
    summary.files += 1;
    let now = coroner_model::now_ns();
    load_log_bytes("standard input", &bytes, None, Stream::File, now, sink, summary);
    Ok(())
}

/// One plain log file. Its rank and stream come from `known`, else from its name; without a rank
/// in the name it is a combined log whose lines are filed by their prefixes.
fn load_log_file(path: &Path, known: Option<(Rank, Stream)>, sink: &mut dyn Sink, summary: &mut LoadSummary) {
    let Some(bytes) = read(path, summary) else { return };
    if known.is_none() && load_loose_dump(path, &bytes, sink) {
        return;
    }
    let (rank, stream) = match known {
        Some((r, s)) => (Some(r), s),
        None => (rank_from_name(path), stream_from_name(path)),
    };
    let name = summary.scope.relative(path);
    load_log_bytes(&name, &bytes, rank, stream, mtime_ns(path), sink, summary);
}

/// A flight recorder dump lying among plain logs (`nccl_trace_rank_3`, `fr_3.json`): read as the
/// snapshot of the rank its name ends with. False when the file is not one.
fn load_loose_dump(path: &Path, bytes: &[u8], sink: &mut dyn Sink) -> bool {
    let name = file_name(path);
    let Some(s) = crate::snapshots::loose_dump(&name, bytes, false) else { return false };
    sink.snapshot(s.summary, s.facts, path.parent().unwrap_or(Path::new(".")));
    true
}

/// A plain log's bytes, read by whatever opened it.
fn load_log_bytes(name: &str, bytes: &[u8], rank: Option<Rank>, stream: Stream, fallback_ns: Nanos, sink: &mut dyn Sink, summary: &mut LoadSummary) {
    if bytes.is_empty() {
        summary.warnings.push(format!("{name} is empty"));
        return;
    }
    if !looks_like_text(&bytes[..bytes.len().min(8192)]) {
        summary.warnings.push(format!("skipped {name}: not a text log"));
        return;
    }
    let lines = split_log(bytes, rank, stream, fallback_ns);
    let dated = |l: &LogLine| {
        let rest = coroner_parse::prefix::split_rank_prefix(&l.bytes).rest(&l.bytes);
        coroner_parse::time::printed_time(&String::from_utf8_lossy(&rest[..rest.len().min(256)]), fallback_ns).is_some()
    };
    if !bytes.is_empty() && !lines.iter().any(dated) {
        summary.warnings.push(format!(
            "{name}: no line carries a time of its own, so its times in the report are when the file was last written (or read), not when it happened"
        ));
    }
    if rank.is_some() {
        push_all(sink, lines, summary);
    } else {
        summary.lines += lines.len() as u64;
        sink.log(name, lines);
    }
}

/// `rank3.log`, `rank-3.err`, `worker_rank_3.out`, `node1-rank12.txt`: the number after "rank".
pub fn rank_from_name(path: &Path) -> Option<Rank> {
    let name = file_name(path).to_ascii_lowercase();
    let at = name.rfind("rank")?;
    let digits: String = name[at + 4..].trim_start_matches(['-', '_', '.']).chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(Rank)
}

fn stream_from_name(path: &Path) -> Stream {
    let name = file_name(path).to_ascii_lowercase();
    if name.contains("stderr") || name.ends_with(".err") {
        Stream::Stderr
    } else if name.contains("stdout") || name.ends_with(".out") {
        Stream::Stdout
    } else {
        Stream::File
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_come_from_file_names() {
        assert_eq!(rank_from_name(Path::new("/x/rank3.stderr.log")), Some(Rank(3)));
        assert_eq!(rank_from_name(Path::new("worker_rank_12.out")), Some(Rank(12)));
        assert_eq!(rank_from_name(Path::new("node1-RANK-7.txt")), Some(Rank(7)));
        assert_eq!(rank_from_name(Path::new("train.log")), None);
    }
}
