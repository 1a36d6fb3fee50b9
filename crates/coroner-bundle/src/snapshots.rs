//! A bundle's snapshot folders: `snapshots/`, `flight_recorder/` and `host/`. Each file is listed
//! with its size and sha256 so the report can point at it; reading the contents is the snapshot
//! readers' job.

use coroner_model::{Rank, SnapshotSummary};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The kind of a snapshot, from its file name.
pub fn kind_of(folder: &str, name: &str) -> &'static str {
    let lower = name.to_ascii_lowercase();
    if folder == "flight_recorder" || lower.starts_with("nccl_trace_rank_") {
        "flight_recorder"
    } else if lower.contains("stack") {
        "stack"
    } else if lower.contains("memory_summary") {
        "memory_summary"
    } else if lower.contains("state_dict") || lower.ends_with(".pt") || lower.ends_with(".pth") {
        "state_dict"
    } else if lower.contains("nvidia-smi") && lower.ends_with(".xml") {
        "nvidia_smi"
    } else if lower.starts_with("core") {
        "core"
    } else if lower.contains("dmesg") || lower.contains("kern") {
        "kernel_log"
    } else {
        "other"
    }
}

/// The rank a snapshot belongs to: `rank3.stack.txt`, or the flight recorder's `nccl_trace_rank_3`.
fn rank_of(name: &str) -> Option<Rank> {
    if let Some(r) = name.strip_prefix("nccl_trace_rank_") {
        return r.parse().ok().map(Rank);
    }
    let rest = name.strip_prefix("rank")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(Rank)
}

pub fn scan_snapshots(dir: &Path, warnings: &mut Vec<String>) -> Vec<SnapshotSummary> {
    let mut out = Vec::new();
    for folder in ["snapshots", "flight_recorder", "host"] {
        let Ok(entries) = std::fs::read_dir(dir.join(folder)) else { continue };
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
        paths.sort();
        for path in paths {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            match std::fs::read(&path) {
                Ok(bytes) => out.push(SnapshotSummary {
                    rank: rank_of(&name),
                    kind: kind_of(folder, &name).to_string(),
                    name: format!("{folder}/{name}"),
                    size: bytes.len() as u64,
                    sha256: hex::encode(Sha256::digest(&bytes)),
                    highlights: Vec::new(),
                }),
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
    }
}
