//! A bundle's snapshot folders: `snapshots/`, `flight_recorder/` and `host/`. Each file is listed
//! with its size, sha256 and what the snapshot readers find in it (`coroner_snapshot::facts`). A
//! file they cannot read gets an `unreadable: ...` highlight; it never fails the load. Folders, links out of the
//! bundle and special files are skipped with a warning.

use coroner_model::{Rank, SnapshotSummary};
use sha2::{Digest, Sha256};
use std::path::Path;

pub use coroner_snapshot::kind_of;

/// The rank a snapshot belongs to: `rank3.stack.txt`, or the flight recorder's `nccl_trace_rank_3`.
fn rank_of(name: &str) -> Option<Rank> {
    if name.starts_with("nccl_trace_rank_") {
        return fr_rank_of(name);
    }
    let rest = name.strip_prefix("rank")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(Rank)
}

/// A flight recorder dump's rank: the digits its name ends with (PyTorch appends the rank to
/// whatever prefix `TORCH_FR_DUMP_TEMP_FILE` or `TORCH_NCCL_DEBUG_INFO_TEMP_FILE` gives), before a
/// `.json` or `.pkl` a collector may add.
pub fn fr_rank_of(name: &str) -> Option<Rank> {
    let stem = [".json", ".pkl", ".pickle"].iter().find_map(|e| name.strip_suffix(e)).unwrap_or(name);
    let digits = stem.len() - stem.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    stem[stem.len() - digits..].parse().ok().map(Rank)
}

/// A loose file that is a flight recorder dump, read as a snapshot of the rank its name ends
/// with: a pickle, or JSON named like a dump (`any_name`: JSON of any name, in a folder of dumps).
/// `None` when the bytes are not a dump.
pub fn loose_dump(name: &str, bytes: &[u8], any_name: bool) -> Option<Scanned> {
    let named = any_name || dump_name(name);
    let shaped = bytes.first() == Some(&0x80) || (named && coroner_snapshot::flight_json::is_json(bytes));
    if !shaped || coroner_snapshot::flight_recorder::parse(bytes).is_err() {
        return None;
    }
    Some(read_snapshot("flight_recorder", name, fr_rank_of(name), bytes))
}

/// Whether a loose file of this name whose first byte is `first` may be a flight recorder dump
/// ([`loose_dump`]): only such a file is read whole; any other log is streamed.
pub fn may_be_loose_dump(name: &str, first: Option<u8>) -> bool {
    first == Some(0x80) || dump_name(name)
}

fn dump_name(name: &str) -> bool {
    kind_of("", name) == "flight_recorder" || name.contains("trace_rank")
}

/// A snapshot file read from a bundle: its summary (highlights empty) and what the readers
/// made of it (`JobPipeline::add_snapshot_facts` files both).
pub struct Scanned {
    pub summary: SnapshotSummary,
    pub facts: coroner_snapshot::Facts,
}

/// What the readers make of one file of `rank`.
pub fn read_snapshot(kind: &str, name: &str, rank: Option<Rank>, bytes: &[u8]) -> Scanned {
    Scanned {
        summary: SnapshotSummary {
            rank,
            kind: kind.to_string(),
            name: name.to_string(),
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(bytes)),
            highlights: Vec::new(),
        },
        facts: coroner_snapshot::facts(kind, name, bytes, bytes.len() as u64),
    }
}

pub fn scan_snapshots(dir: &Path, warnings: &mut Vec<String>) -> Vec<Scanned> {
    let mut out = Vec::new();
    for folder in ["snapshots", "flight_recorder", "host"] {
        let Ok(entries) = std::fs::read_dir(dir.join(folder)) else { continue };
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        // Snapshot files stay inside the bundle (an import uploads them to a server).
        let scope = crate::walk::Scope::inside(dir);
        for path in paths {
            match scope.classify(&path) {
                crate::walk::Entry::File => {}
                crate::walk::Entry::Dir => {
                    warnings.push(format!("skipped snapshot {}: a folder, not a file", path.display()));
                    continue;
                }
                crate::walk::Entry::Skip(why) => {
                    warnings.push(format!("skipped snapshot {}: {why}", path.display()));
                    continue;
                }
            }
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            match std::fs::read(&path) {
                Ok(bytes) => {
                    let (rank, kind) = (rank_of(&name), kind_of(folder, &name));
                    let mut scanned = read_snapshot(kind, &name, rank, &bytes);
                    scanned.summary.name = format!("{folder}/{name}");
                    out.push(scanned);
                }
                Err(e) => warnings.push(format!("skipped snapshot {}: {e}", path.display())),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_ranks_from_names() {
        assert_eq!(kind_of("flight_recorder", "nccl_trace_rank_1"), "flight_recorder");
        assert_eq!(rank_of("nccl_trace_rank_1"), Some(Rank(1)));
        assert_eq!(kind_of("snapshots", "rank1.memory_summary.txt"), "memory_summary");
        assert_eq!(rank_of("rank12.stack.txt"), Some(Rank(12)));
        assert_eq!(kind_of("host", "nvidia-smi-q.xml"), "nvidia_smi");
        assert_eq!(kind_of("host", "dmesg-tail.txt"), "kernel_log");
        assert_eq!(rank_of("topo.txt"), None);
        assert_eq!(rank_of("nccl_trace_rank_3.json"), Some(Rank(3)));
        for (name, rank) in [("fr_12", Some(12)), ("/tmp/trace_7.pkl", Some(7)), ("dump", None), ("nccl_trace_rank_0.json", Some(0))] {
            assert_eq!(fr_rank_of(name), rank.map(Rank), "{name}");
        }
    }

    #[test]
    fn unreadable_files_get_a_highlight_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("flight_recorder")).unwrap();
        std::fs::create_dir_all(dir.path().join("snapshots")).unwrap();
        std::fs::write(dir.path().join("flight_recorder/nccl_trace_rank_0"), b"\x80\x02}q\x00(X").unwrap();
        std::fs::write(dir.path().join("snapshots/rank0.stack.txt"), b"Fatal Python error: Aborted\n").unwrap();
        let mut warnings = Vec::new();
        let s = scan_snapshots(dir.path(), &mut warnings);
        assert!(warnings.is_empty());
        assert_eq!(s.len(), 2);
        assert!(s[0].facts.highlights[0].starts_with("reason: Fatal Python error: Aborted"), "{:?}", s[0].facts.highlights);
        assert!(s[1].facts.highlights[0].starts_with("unreadable: pickle: truncated"), "{:?}", s[1].facts.highlights);
        assert!(s[1].facts.fr_progress.is_empty());
    }
}
