//! `torch.cuda.memory_summary()` text: the allocator's table of allocated, active, requested and
//! reserved memory (current and peak), OOM and retry counters, and the fragmentation that follows
//! (reserved but not allocated).

use crate::SnapshotError;

/// The numbers a memory summary gives, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemorySummary {
    pub device: Option<u32>,
    pub ooms: Option<u64>,
    pub alloc_retries: Option<u64>,
    pub allocated: Option<u64>,
    pub allocated_peak: Option<u64>,
    pub active: Option<u64>,
    pub active_peak: Option<u64>,
    pub reserved: Option<u64>,
    pub reserved_peak: Option<u64>,
    pub non_releasable: Option<u64>,
}

impl MemorySummary {
    /// Reserved but not allocated: memory the caching allocator holds and cannot hand out whole.
    pub fn fragmentation(&self) -> Option<u64> {
        Some(self.reserved?.saturating_sub(self.allocated?))
    }

    pub fn highlights(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let (Some(a), Some(r)) = (self.allocated_peak, self.reserved_peak) {
            out.push(format!("peak allocated {}, reserved {}", human(a), human(r)));
        }
        if let (Some(a), Some(r)) = (self.allocated, self.reserved) {
            let mut s = format!("now allocated {}, reserved {}", human(a), human(r));
            if let Some(f) = self.fragmentation() {
                s.push_str(&format!(", {} reserved but unallocated", human(f)));
            }
            out.push(s);
        }
        if let Some(n) = self.ooms.filter(|n| *n > 0) {
            let retries = self.alloc_retries.map(|r| format!(", {r} cudaMalloc retries")).unwrap_or_default();
            let dev = self.device.map(|d| format!(" on device {d}")).unwrap_or_default();
            out.push(format!("{n} CUDA OOM{}{dev}{retries}", if n == 1 { "" } else { "s" }));
        }
        out
    }
}

/// Bytes as `65.0 MiB`.
pub fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `66584 KiB` or `230400 B` to bytes.
fn bytes_of(cell: &str) -> Option<u64> {
    let mut it = cell.split_whitespace();
    let n: f64 = it.next()?.parse().ok()?;
    let mult: u64 = match it.next().unwrap_or("B") {
        "B" => 1,
        "KiB" | "KB" => 1 << 10,
        "MiB" | "MB" => 1 << 20,
        "GiB" | "GB" => 1 << 30,
        "TiB" | "TB" => 1 << 40,
        _ => return None,
    };
    Some((n * mult as f64) as u64)
}

fn counter_after(line: &str, label: &str) -> Option<u64> {
    let at = line.find(label)? + label.len();
    line[at..].trim_start().split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Reads the summary table. Text that holds none of its rows is an error.
pub fn parse(bytes: &[u8]) -> Result<MemorySummary, SnapshotError> {
    let text = String::from_utf8_lossy(bytes);
    let mut m = MemorySummary::default();
    let mut rows = 0;
    for line in text.lines() {
        if let Some(at) = line.find("memory summary, device ID") {
            m.device = counter_after(&line[at..], "device ID").and_then(|d| u32::try_from(d).ok());
        }
        if line.contains("CUDA OOMs:") {
            m.ooms = counter_after(line, "CUDA OOMs:");
            m.alloc_retries = counter_after(line, "cudaMalloc retries:");
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // "", metric, cur, peak, tot alloc, tot freed, ""
        if cells.len() < 4 {
            continue;
        }
        let (cur, peak) = (bytes_of(cells[2]), bytes_of(cells[3]));
        let slot = match cells[1] {
            "Allocated memory" => (&mut m.allocated, &mut m.allocated_peak),
            "Active memory" => (&mut m.active, &mut m.active_peak),
            "GPU reserved memory" => (&mut m.reserved, &mut m.reserved_peak),
            "Non-releasable memory" => {
                m.non_releasable = cur;
                rows += 1;
                continue;
            }
            _ => continue,
        };
        *slot.0 = cur;
        *slot.1 = peak;
        rows += 1;
    }
    if rows == 0 {
        return Err(SnapshotError::Format("no memory summary table (expected rows like `| Allocated memory | ... |`)".into()));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: &[u8] = include_bytes!("../../../tests/data/snapshots/rank1.memory_summary.txt");

    #[test]
    fn corpus_summary() {
        let m = parse(MS).unwrap();
        assert_eq!(m.device, Some(1));
        assert_eq!((m.ooms, m.alloc_retries), (Some(1), Some(1)));
        assert_eq!(m.allocated, Some(66584 << 10));
        assert_eq!(m.allocated_peak, Some(66604 << 10));
        assert_eq!(m.reserved, Some(67584 << 10));
        assert_eq!(m.active_peak, Some(66604 << 10));
        assert_eq!(m.fragmentation(), Some(1000 << 10));
        assert_eq!(
            m.highlights(),
            vec![
                "peak allocated 65.0 MiB, reserved 66.0 MiB",
                "now allocated 65.0 MiB, reserved 66.0 MiB, 1000.0 KiB reserved but unallocated",
                "1 CUDA OOM on device 1, 1 cudaMalloc retries",
            ]
        );
    }

    #[test]
    fn garbage_and_truncation() {
        assert!(parse(b"").is_err());
        assert!(parse(b"\xff\xfe not a table").is_err());
        // Cut mid-table: what was read is kept.
        let half = &MS[..MS.len() / 3];
        let m = parse(half).unwrap();
        assert_eq!(m.allocated, Some(66584 << 10));
        assert_eq!(m.reserved, None);
        // Cells that are not numbers are skipped, not misread.
        let m = parse(b"| Allocated memory | lots | ??? | x | y |\n| GPU reserved memory | 1 GiB | 2 GiB | 0 B | 0 B |").unwrap();
        assert_eq!((m.allocated, m.reserved_peak), (None, Some(2 << 30)));
        assert_eq!(human(0), "0 B");
    }
}
