//! One GPU's memory and utilisation at one moment, as the agent samples it while the job runs
//! (`nvidia-smi --query-gpu`), so a report can show memory climbing before an out-of-memory error.
//!
//! Samples travel as ordinary lines of the agent's own (`file` stream), in the one-line form of
//! [`GpuSample::to_line`]: spooled, indexed, searchable and replayed like every other line.

use serde::{Deserialize, Serialize};

/// What starts an agent's GPU sample line.
pub const GPU_SAMPLE_PREFIX: &str = "coroner-agent gpu-sample:";

/// The `--query-gpu` fields the agent asks for, in the order [`GpuSample::from_csv_row`] reads.
pub const GPU_QUERY_FIELDS: &str = "index,pci.bus_id,memory.used,memory.total,utilization.gpu";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSample {
    pub index: Option<u32>,
    /// PCI bus id as nvidia-smi prints it (`00000000:3B:00.0`).
    pub bus: String,
    pub used_mib: u64,
    pub total_mib: u64,
    pub util_pct: Option<u32>,
}

impl GpuSample {
    /// One row of `nvidia-smi --query-gpu=<GPU_QUERY_FIELDS> --format=csv,noheader,nounits`.
    /// Fields nvidia-smi cannot read print as `[N/A]` or `[Not Supported]`: memory must be there.
    pub fn from_csv_row(row: &str) -> Option<GpuSample> {
        let f: Vec<&str> = row.split(',').map(str::trim).collect();
        let [index, bus, used, total, util] = f.as_slice() else { return None };
        let number = |s: &str| s.trim_end_matches(" MiB").trim_end_matches(" %").trim().parse::<u64>().ok();
        Some(GpuSample {
            index: index.parse().ok(),
            bus: bus.to_string(),
            used_mib: number(used)?,
            total_mib: number(total)?,
            util_pct: number(util).and_then(|u| u32::try_from(u).ok()),
        })
    }

    /// The line the agent ships: `coroner-agent gpu-sample: gpu=0 bus=00000000:3B:00.0 used_mib=1234 total_mib=143771 util_pct=97`.
    pub fn to_line(&self) -> String {
        let index = self.index.map(|i| format!("gpu={i} ")).unwrap_or_default();
        let util = self.util_pct.map(|u| format!(" util_pct={u}")).unwrap_or_default();
        format!("{GPU_SAMPLE_PREFIX} {index}bus={} used_mib={} total_mib={}{util}", self.bus, self.used_mib, self.total_mib)
    }

    /// Reads a line [`GpuSample::to_line`] wrote; None for any other line.
    pub fn from_line(line: &str) -> Option<GpuSample> {
        let rest = line.trim().strip_prefix(GPU_SAMPLE_PREFIX)?;
        let mut s = GpuSample { index: None, bus: String::new(), used_mib: 0, total_mib: 0, util_pct: None };
        let (mut used, mut total) = (None, None);
        for field in rest.split_whitespace() {
            let (k, v) = field.split_once('=')?;
            match k {
                "gpu" => s.index = v.parse().ok(),
                "bus" => s.bus = v.to_string(),
                "used_mib" => used = v.parse().ok(),
                "total_mib" => total = v.parse().ok(),
                "util_pct" => s.util_pct = v.parse().ok(),
                _ => {}
            }
        }
        s.used_mib = used?;
        s.total_mib = total?;
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csv_row_becomes_a_line_and_back() {
        let s = GpuSample::from_csv_row("1, 00000000:3B:00.0, 81234, 143771, 97").expect("a sample");
        assert_eq!(s, GpuSample { index: Some(1), bus: "00000000:3B:00.0".into(), used_mib: 81234, total_mib: 143771, util_pct: Some(97) });
        assert_eq!(GpuSample::from_line(&s.to_line()), Some(s));
    }

    #[test]
    fn unreadable_fields_and_other_lines() {
        let s = GpuSample::from_csv_row("0, 00000000:18:00.0, 10, 143771, [N/A]").expect("memory is enough");
        assert_eq!(s.util_pct, None);
        assert_eq!(GpuSample::from_csv_row("0, 00000000:18:00.0, [N/A], 143771, 5"), None);
        assert_eq!(GpuSample::from_csv_row("garbage"), None);
        assert_eq!(GpuSample::from_line("coroner-agent gpu-sample: bus=x"), None);
        assert_eq!(GpuSample::from_line("step 4 loss 1.0"), None);
    }
}
