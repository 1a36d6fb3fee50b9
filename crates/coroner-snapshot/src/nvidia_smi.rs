//! `nvidia-smi -q -x` XML: per GPU its name, PCI bus id, UUID, framebuffer memory, ECC counters,
//! retired pages and remapped rows, temperature, active clock-event (throttle) reasons and the
//! processes on it. Element names changed across driver versions (`clocks_throttle_reasons` became
//! `clocks_event_reasons`, `single_bit`/`double_bit` became `sram_*`/`dram_*`), so counters are
//! summed by what their names say rather than by fixed paths.

use crate::SnapshotError;
use coroner_model::EventKind;
use quick_xml::events::Event;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuProcess {
    pub pid: Option<u32>,
    pub name: String,
    pub used_bytes: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuInfo {
    pub index: Option<u32>,
    pub product: String,
    pub pci_bus_id: String,
    pub uuid: String,
    pub memory_used: Option<u64>,
    pub memory_total: Option<u64>,
    pub ecc_volatile_correctable: u64,
    pub ecc_volatile_uncorrectable: u64,
    pub ecc_aggregate_correctable: u64,
    pub ecc_aggregate_uncorrectable: u64,
    pub retired_pages: u64,
    pub retired_pending: bool,
    pub remapped_rows_correctable: u64,
    pub remapped_rows_uncorrectable: u64,
    pub remap_pending_or_failed: bool,
    pub temperature_c: Option<i64>,
    /// Active clock-event reasons other than idle (`hw_thermal_slowdown`, `sw_power_cap`).
    pub throttle: Vec<String>,
    pub processes: Vec<GpuProcess>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NvidiaSmi {
    pub driver: Option<String>,
    pub cuda: Option<String>,
    pub gpus: Vec<GpuInfo>,
}

const GIB: f64 = (1u64 << 30) as f64;

fn mib(v: &str) -> Option<u64> {
    let mut it = v.split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    match it.next() {
        Some("MiB") | None => Some(n << 20),
        Some("GiB") => Some(n << 30),
        Some("KiB") => Some(n << 10),
        _ => None,
    }
}

fn num(v: &str) -> u64 {
    v.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Builds one GPU from its flattened `path -> text` pairs (paths relative to `<gpu>`).
fn gpu(fields: &[(String, String)], processes: Vec<GpuProcess>) -> GpuInfo {
    let map: BTreeMap<&str, &str> = fields.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let get = |k: &str| map.get(k).map(|s| s.to_string()).unwrap_or_default();
    let mut g = GpuInfo {
        index: map.get("minor_number").and_then(|v| v.parse().ok()),
        product: get("product_name"),
        pci_bus_id: map.get("pci/pci_bus_id").or(map.get("@id")).map(|s| s.to_string()).unwrap_or_default(),
        uuid: get("uuid"),
        memory_used: map.get("fb_memory_usage/used").and_then(|v| mib(v)),
        memory_total: map.get("fb_memory_usage/total").and_then(|v| mib(v)),
        temperature_c: map.get("temperature/gpu_temp").and_then(|v| v.split_whitespace().next()?.parse().ok()),
        processes,
        ..Default::default()
    };
    for (k, v) in fields {
        let leaf = k.rsplit('/').next().unwrap_or(k);
        if let Some(rest) = k.strip_prefix("ecc_errors/") {
            // Skip per-source breakdowns and the old per-location details: count totals only.
            if rest.contains("sources") || (rest.contains("_bit/") && !rest.ends_with("/total")) {
                continue;
            }
            let unc = leaf.contains("uncorrectable") || rest.contains("double_bit");
            let corr = !unc && (leaf.contains("correctable") || rest.contains("single_bit"));
            let n = num(v);
            match (rest.starts_with("volatile/"), rest.starts_with("aggregate/"), unc, corr) {
                (true, _, true, _) => g.ecc_volatile_uncorrectable += n,
                (true, _, _, true) => g.ecc_volatile_correctable += n,
                (_, true, true, _) => g.ecc_aggregate_uncorrectable += n,
                (_, true, _, true) => g.ecc_aggregate_correctable += n,
                _ => {}
            }
        } else if k.starts_with("retired_pages/") {
            if leaf == "retired_count" {
                g.retired_pages += num(v);
            } else if leaf.starts_with("pending") && v.trim().eq_ignore_ascii_case("yes") {
                g.retired_pending = true;
            }
        } else if let Some(rest) = k.strip_prefix("remapped_rows/") {
            match rest {
                "remapped_row_corr" => g.remapped_rows_correctable = num(v),
                "remapped_row_unc" => g.remapped_rows_uncorrectable = num(v),
                "remapped_row_pending" | "remapped_row_failure" if v.trim().eq_ignore_ascii_case("yes") => g.remap_pending_or_failed = true,
                _ => {}
            }
        } else if (k.starts_with("clocks_event_reasons/") || k.starts_with("clocks_throttle_reasons/")) && v.trim() == "Active" {
            let reason = leaf.trim_start_matches("clocks_event_reason_").trim_start_matches("clocks_throttle_reason_");
            if reason != "gpu_idle" {
                g.throttle.push(reason.to_string());
            }
        }
    }
    g
}

/// Reads the XML. A document without `<nvidia_smi_log>` is an error, and so is malformed XML.
pub fn parse(bytes: &[u8]) -> Result<NvidiaSmi, SnapshotError> {
    let text = std::str::from_utf8(bytes).map_err(|e| SnapshotError::Format(format!("nvidia-smi XML is not UTF-8: {e}")))?;
    let mut reader = quick_xml::Reader::from_str(text);
    let mut out = NvidiaSmi::default();
    let mut path: Vec<String> = Vec::new();
    let mut saw_root = false;
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut procs: Vec<GpuProcess> = Vec::new();
    let mut text_buf = String::new();
    loop {
        let ev = reader.read_event().map_err(|e| SnapshotError::Format(format!("nvidia-smi XML at byte {}: {e}", reader.buffer_position())))?;
        match ev {
            Event::Start(e) => {
                let name = e.local_name().as_ref().to_string();
                if path.is_empty() {
                    saw_root = name == "nvidia_smi_log";
                    if !saw_root {
                        return Err(SnapshotError::Format(format!("root element is <{name}>, not <nvidia_smi_log>")));
                    }
                }
                if path.len() == 1 && name == "gpu" {
                    fields.clear();
                    procs.clear();
                    for a in e.attributes().flatten() {
                        if a.key.local_name().as_ref() == "id" {
                            fields.push(("@id".into(), a.value.to_string()));
                        }
                    }
                }
                if path.len() >= 2 && path[1] == "gpu" && path.last().is_some_and(|p| p == "processes") && name == "process_info" {
                    procs.push(GpuProcess::default());
                }
                path.push(name);
                text_buf.clear();
                if path.len() > 64 {
                    return Err(SnapshotError::Format("nvidia-smi XML nested too deeply".into()));
                }
            }
            Event::Text(t) => text_buf.push_str(&t),
            Event::GeneralRef(r) => text_buf.push_str(match &*r {
                "amp" => "&",
                "lt" => "<",
                "gt" => ">",
                "quot" => "\"",
                "apos" => "'",
                _ => "?",
            }),
            Event::End(_) => {
                let value = text_buf.trim().to_string();
                text_buf.clear();
                if path.len() == 2 {
                    match path[1].as_str() {
                        "driver_version" => out.driver = Some(value.clone()),
                        "cuda_version" => out.cuda = Some(value.clone()),
                        "gpu" => out.gpus.push(gpu(&fields, std::mem::take(&mut procs))),
                        _ => {}
                    }
                } else if path.len() > 2 && path[1] == "gpu" && !value.is_empty() {
                    let rel = path[2..].join("/");
                    if let (Some(p), Some(field)) = (procs.last_mut(), rel.strip_prefix("processes/process_info/")) {
                        match field {
                            "pid" => p.pid = value.parse().ok(),
                            "process_name" => p.name = value.clone(),
                            "used_memory" => p.used_bytes = mib(&value),
                            _ => {}
                        }
                    } else {
                        fields.push((rel, value));
                    }
                }
                path.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !saw_root {
        return Err(SnapshotError::Format("no <nvidia_smi_log> element: not `nvidia-smi -q -x` output".into()));
    }
    if !path.is_empty() {
        return Err(SnapshotError::Format(format!("nvidia-smi XML truncated inside <{}>", path.join("/"))));
    }
    Ok(out)
}

impl NvidiaSmi {
    pub fn highlights(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, g) in self.gpus.iter().enumerate() {
            let idx = g.index.unwrap_or(i as u32);
            let product = g.product.strip_prefix("NVIDIA ").unwrap_or(&g.product);
            let mem = match (g.memory_used, g.memory_total) {
                (Some(u), Some(t)) => format!("{:.1}/{:.1} GiB used", u as f64 / GIB, t as f64 / GIB),
                _ => "memory unknown".into(),
            };
            let mut s =
                format!("GPU {idx} {product} ({}): {mem}, {} uncorrectable ECC", g.pci_bus_id, g.ecc_volatile_uncorrectable.max(g.ecc_aggregate_uncorrectable));
            if let Some(t) = g.temperature_c {
                s.push_str(&format!(", {t} C"));
            }
            if g.retired_pages > 0 || g.retired_pending {
                s.push_str(&format!(", {} retired pages{}", g.retired_pages, if g.retired_pending { " (pending)" } else { "" }));
            }
            if g.remapped_rows_uncorrectable > 0 || g.remap_pending_or_failed {
                s.push_str(&format!(
                    ", {} rows remapped for uncorrectable errors{}",
                    g.remapped_rows_uncorrectable,
                    if g.remap_pending_or_failed { " (pending or failed)" } else { "" }
                ));
            }
            if !g.throttle.is_empty() {
                s.push_str(&format!(", throttled: {}", g.throttle.join(", ")));
            }
            if !g.processes.is_empty() {
                let p: Vec<String> = g.processes.iter().map(|p| format!("{} {}", p.pid.map(|x| x.to_string()).unwrap_or_default(), p.name)).collect();
                s.push_str(&format!(", processes: {}", p.join(", ")));
            }
            out.push(s);
        }
        if out.is_empty() {
            out.push("nvidia-smi: no GPUs listed".into());
        }
        out
    }
}

impl NvidiaSmi {
    /// The GPUs' memory faults as error lines the rules classify (`ecc-error`): uncorrectable ECC
    /// errors since the driver loaded, and pages or rows the GPU could not retire or remap.
    /// Lifetime (aggregate) counts and correctable errors are history, not evidence of this failure.
    pub fn hardware_events(&self) -> Vec<(EventKind, String)> {
        let mut out = Vec::new();
        for g in &self.gpus {
            let id = if g.uuid.is_empty() { g.pci_bus_id.clone() } else { format!("{} ({})", g.pci_bus_id, g.uuid) };
            let mut say = |message: String| out.push((EventKind::ErrorLine { message: message.clone() }, message));
            if g.ecc_volatile_uncorrectable > 0 {
                say(format!("nvidia-smi: GPU {id}: {} uncorrectable ECC errors since the driver loaded", g.ecc_volatile_uncorrectable));
            }
            if g.retired_pending {
                say(format!("nvidia-smi: GPU {id}: page retirement pending after an uncorrectable ECC error"));
            }
            if g.remap_pending_or_failed {
                say(format!("nvidia-smi: GPU {id}: row remapping pending or failed after an uncorrectable ECC error"));
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "nvidia_smi_tests.rs"]
mod tests;
