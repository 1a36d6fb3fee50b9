//! Finds what a path holds and feeds it to the pipeline.

use crate::line_reader::LineReader;
use crate::lines::{Jsonl, MAX_RECORD_BYTES};
use crate::plain_log::{load_plain_log, Owner};
use crate::progress::{Progress, STEP_BYTES};
use crate::snapshots::scan_snapshots;
use crate::walk::{Entry, Scope};
use crate::BundleError;
use crate::Sink;
use coroner_model::{Nanos, ProcessEnd, Rank, Stream};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// What was read, for the user.
#[derive(Debug, Default)]
pub struct LoadSummary {
    pub files: usize,
    pub lines: u64,
    pub warnings: Vec<String>,
    /// The folder being read, which reads stay inside (`walk.rs`).
    scope: Scope,
    progress: Progress,
}

impl LoadSummary {
    /// `bytes` more of the input were read.
    pub(crate) fn read(&mut self, bytes: u64, sink: &mut dyn Sink) {
        self.progress.bytes += bytes;
        self.progress.files = self.files;
        sink.progress(&self.progress);
    }
}

/// Files in a bundle folder that are never inputs: answer keys and other tools' output.
const NOT_INPUTS: &[&str] = &["truth.json", "fr_trace_analysis.txt", "fr_trace_entries.txt", "fr_ls.txt"];

/// Reads every path into the sink and marks the job finished.
pub fn load_paths(paths: &[PathBuf], sink: &mut dyn Sink) -> Result<LoadSummary, BundleError> {
    let mut summary = LoadSummary { progress: crate::progress::measure(paths), ..Default::default() };
    sink.progress(&summary.progress);
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
fn read(path: &Path, sink: &mut dyn Sink, summary: &mut LoadSummary) -> Option<Vec<u8>> {
    if !readable(path, summary) {
        return None;
    }
    match std::fs::read(path) {
        Ok(b) => {
            summary.files += 1;
            summary.read(b.len() as u64, sink);
            Some(b)
        }
        Err(e) => {
            summary.warnings.push(format!("skipped {}: {e}", path.display()));
            None
        }
    }
}

/// Opens a file to stream it; as [`read`], anything else becomes a warning.
fn open(path: &Path, summary: &mut LoadSummary) -> Option<std::fs::File> {
    if !readable(path, summary) {
        return None;
    }
    match std::fs::File::open(path) {
        Ok(f) => {
            summary.files += 1;
            Some(f)
        }
        Err(e) => {
            summary.warnings.push(format!("skipped {}: {e}", path.display()));
            None
        }
    }
}

/// Whether `path` is a regular file inside the folder being read; else a warning says why not.
fn readable(path: &Path, summary: &mut LoadSummary) -> bool {
    match summary.scope.classify(path) {
        Entry::File => true,
        Entry::Dir => {
            summary.warnings.push(format!("skipped {}: a folder where a file was expected", path.display()));
            false
        }
        Entry::Skip(why) => {
            summary.warnings.push(format!("skipped {}: {why}", path.display()));
            false
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

/// A `lines.jsonl` file, one record at a time; how many lines it gave.
fn load_jsonl(path: &Path, rank: Option<Rank>, sink: &mut dyn Sink, summary: &mut LoadSummary) -> Option<u64> {
    let name = file_name(path);
    let file = open(path, summary)?;
    let mut records = LineReader::with_limit(file, MAX_RECORD_BYTES);
    let mut jsonl = Jsonl::new(rank);
    let (mut n, mut counted) = (0, 0);
    loop {
        match records.next_line() {
            Ok(Some(raw)) => {
                if let Some(line) = jsonl.line(&raw, &mut summary.warnings, &name) {
                    sink.line(line);
                    n += 1;
                }
                if records.consumed() - counted >= STEP_BYTES {
                    summary.read(records.consumed() - counted, sink);
                    counted = records.consumed();
                }
            }
            Ok(None) => break,
            Err(e) => {
                summary.warnings.push(format!("{name}: reading stopped after {} bytes ({e}); the lines before are kept", records.consumed()));
                break;
            }
        }
    }
    summary.read(records.consumed() - counted, sink);
    summary.lines += n;
    Some(n)
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
    if let Some(bytes) = optional(dir, "meta.json", sink, summary) {
        match serde_json::from_slice::<Meta>(&bytes) {
            Ok(m) => world_size = m.world_size,
            Err(e) => summary.warnings.push(format!("meta.json is not valid ({e}); ignored")),
        }
    }
    if let Some(bytes) = optional(dir, "exits.json", sink, summary) {
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
            if load_jsonl(path, Some(Rank(rank)), sink, summary).is_some() {
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
                    load_log_file(path, Some((Owner::Rank(Rank(rank)), stream)), sink, summary);
                }
            }
        }
    }
    let mut launcher_lines = false;
    if let Some(bytes) = optional(dir, "launcher.exit.json", sink, summary) {
        match serde_json::from_slice::<LauncherExit>(&bytes) {
            Ok(e) => sink.launcher_end(e.returncode),
            Err(e) => summary.warnings.push(format!("launcher.exit.json is not valid ({e}); ignored")),
        }
    }
    let launcher_jsonl = dir.join("launcher.lines.jsonl");
    let jsonl_lines = std::fs::symlink_metadata(&launcher_jsonl).is_ok().then(|| load_jsonl(&launcher_jsonl, None, sink, summary)).flatten();
    if let Some(n) = jsonl_lines {
        launcher_lines = n > 0;
    } else {
        for (name, stream) in [("launcher.stdout.log", Stream::Stdout), ("launcher.stderr.log", Stream::Stderr)] {
            let p = dir.join(name);
            if std::fs::symlink_metadata(&p).is_ok() {
                launcher_lines = true;
                load_log_file(&p, Some((Owner::Launcher, stream)), sink, summary);
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

fn optional(dir: &Path, name: &str, sink: &mut dyn Sink, summary: &mut LoadSummary) -> Option<Vec<u8>> {
    let p = dir.join(name);
    std::fs::symlink_metadata(&p).is_ok().then(|| read(&p, sink, summary)).flatten()
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
                    load_log_file(&p, Some((Owner::Rank(Rank(l)), stream)), sink, summary);
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
    summary.files += 1;
    load_spooled("standard input", std::io::stdin().lock(), Owner::Unknown, Stream::File, sink, summary);
    Ok(())
}

/// A log that can be read only once (standard input, a FIFO): copied to an unnamed temporary
/// file first, so that it too is read twice and never held in memory.
fn load_spooled(name: &str, mut input: impl Read, owner: Owner, stream: Stream, sink: &mut dyn Sink, summary: &mut LoadSummary) {
    let copy = tempfile::tempfile().and_then(|mut copy| std::io::copy(&mut input, &mut copy).map(|_| copy));
    let copy = match copy {
        Ok(c) => c,
        Err(e) => {
            return summary.warnings.push(format!("skipped {name}: could not copy it to a temporary file to read it ({e}; is TMPDIR writable and not full?)"))
        }
    };
    let open = || -> std::io::Result<Box<dyn Read>> {
        let mut f = copy.try_clone()?;
        f.seek(SeekFrom::Start(0))?;
        Ok(Box::new(f))
    };
    load_plain_log(name, &open, owner, stream, coroner_model::now_ns(), sink, summary);
}

/// One plain log file. Its owner and stream come from `known`, else from its name; without a
/// rank in the name it is a combined log whose lines are filed by what they show.
fn load_log_file(path: &Path, known: Option<(Owner, Stream)>, sink: &mut dyn Sink, summary: &mut LoadSummary) {
    if !readable(path, summary) {
        return;
    }
    if known.is_none() && load_loose_dump(path, sink, summary) {
        return;
    }
    let (owner, stream) = match known {
        Some(k) => k,
        None => (rank_from_name(path).map_or(Owner::Unknown, Owner::Rank), stream_from_name(path)),
    };
    let name = summary.scope.relative(path);
    let Some(file) = open(path, summary) else { return };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        // A FIFO or `/dev/stdin` named by the user: it can be read only once.
        return load_spooled(&name, file, owner, stream, sink, summary);
    }
    // The first pass reads this handle; the second reads the file again from its start.
    let first = std::cell::Cell::new(Some(file));
    let reopen = || -> std::io::Result<Box<dyn Read>> {
        match first.take() {
            Some(f) => Ok(Box::new(f)),
            None => Ok(Box::new(std::fs::File::open(path)?)),
        }
    };
    load_plain_log(&name, &reopen, owner, stream, mtime_ns(path), sink, summary);
}

/// A flight recorder dump lying among plain logs (`nccl_trace_rank_3`, `fr_3.json`): read whole
/// as the snapshot of the rank its name ends with. False when the file is not one (only a file
/// whose name or first byte says it may be one is read whole).
fn load_loose_dump(path: &Path, sink: &mut dyn Sink, summary: &mut LoadSummary) -> bool {
    let name = file_name(path);
    let mut first = [0u8; 1];
    let first = std::fs::File::open(path).and_then(|mut f| f.read(&mut first)).ok().filter(|n| *n == 1).map(|_| first[0]);
    if !crate::snapshots::may_be_loose_dump(&name, first) {
        return false;
    }
    let Ok(bytes) = std::fs::read(path) else { return false };
    let Some(s) = crate::snapshots::loose_dump(&name, &bytes, false) else { return false };
    summary.files += 1;
    summary.read(bytes.len() as u64, sink);
    sink.snapshot(s.summary, s.facts, path.parent().unwrap_or(Path::new(".")));
    true
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
