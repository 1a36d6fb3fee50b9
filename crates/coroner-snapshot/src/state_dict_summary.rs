//! The crash hook's `rank<R>.state_dict.json`: a metadata-only description of a model (each
//! parameter's and buffer's name, global shape, dtype, device, element count; for a sharded one
//! its local shape, the sharding kind and over how many ranks), the optimizer's class and
//! settings, and whether the opt-in full state_dict was written or why not. The hook lists at
//! most 20,000 tensors and counts all of them in `totals`; this reader recomputes the totals from
//! the list when a file has none.
//!
//! The document (format `coroner.state_dict_summary`, version 1) is JSON; fields this reader does
//! not know are ignored, and every field is optional except `format`.

use crate::SnapshotError;
use serde::Deserialize;
use std::collections::BTreeMap;

pub const FORMAT: &str = "coroner.state_dict_summary";

/// One tensor as the hook described it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Entry {
    pub name: String,
    /// `parameter` or `buffer`.
    pub kind: String,
    /// The global shape; None when the hook could not know it (an FSDP flattened view).
    pub shape: Option<Vec<u64>>,
    pub dtype: Option<String>,
    pub device: Option<String>,
    pub numel: Option<u64>,
    pub element_size: Option<u64>,
    pub sharded: bool,
    /// `DTensor`, `ShardedTensor`, `FlatParameter`, `FSDP flattened view`.
    pub sharding: Option<String>,
    pub local_shape: Option<Vec<u64>>,
    pub local_numel: Option<u64>,
    pub ranks: Option<u64>,
    pub placements: Vec<String>,
    /// Why the hook could not describe this tensor.
    pub error: Option<String>,
}

/// Counts over every tensor of the model (the list may hold only the first ones).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Totals {
    pub tensors: u64,
    pub listed: u64,
    pub omitted: u64,
    pub parameters: u64,
    pub buffers: u64,
    /// Global elements of the parameters.
    pub numel: u64,
    pub buffer_numel: u64,
    /// Global bytes of parameters and buffers.
    pub bytes: u64,
    pub local_numel: u64,
    pub local_bytes: u64,
    pub sharded: u64,
    /// Tensors whose global shape is unknown (counted by their local size).
    pub unknown_global: u64,
    /// Elements per dtype.
    pub dtypes: BTreeMap<String, u64>,
    /// Tensors per device.
    pub devices: BTreeMap<String, u64>,
    /// Sharded tensors per number of ranks they are spread over.
    pub shard_ranks: BTreeMap<String, u64>,
    pub placements: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Optimizer {
    pub class: String,
    pub param_group_count: u64,
    /// Each group's plain settings (`lr`, `betas`, `eps`, `weight_decay`, `params` as a count).
    pub param_groups: Vec<BTreeMap<String, serde_json::Value>>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct FullStateDict {
    pub requested: bool,
    pub written: Vec<String>,
    pub skipped: Option<String>,
    pub failed: Vec<String>,
    pub estimated_bytes: Option<u64>,
    pub max_bytes: Option<u64>,
}

/// What a `state_dict.json` says.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StateDictSummary {
    pub format: String,
    pub version: u64,
    pub rank: Option<u64>,
    pub reason: Option<String>,
    pub model_class: Option<String>,
    /// Why the description stops short (a deadline, a model that failed to iterate).
    pub incomplete: Option<String>,
    pub tensors: Vec<Entry>,
    pub totals: Option<Totals>,
    pub optimizer: Option<Optimizer>,
    pub full_state_dict: Option<FullStateDict>,
}

/// Reads a `state_dict.json`. Not JSON, cut short, or not this format: an error.
pub fn parse(bytes: &[u8]) -> Result<StateDictSummary, SnapshotError> {
    let doc: StateDictSummary = serde_json::from_slice(bytes).map_err(|e| SnapshotError::Format(format!("state_dict summary: {e}")))?;
    if doc.format != FORMAT {
        return Err(SnapshotError::Format(format!("state_dict summary: format is {:?}, not {FORMAT:?}", doc.format)));
    }
    Ok(doc)
}

impl StateDictSummary {
    /// The file's totals, or ones computed from its list.
    pub fn totals(&self) -> Totals {
        if let Some(t) = &self.totals {
            return t.clone();
        }
        let mut t = Totals { tensors: self.tensors.len() as u64, listed: self.tensors.len() as u64, ..Totals::default() };
        for e in &self.tensors {
            let size = e.element_size.unwrap_or(0);
            let local = if e.sharded { e.local_numel } else { e.numel }.unwrap_or(0);
            if e.kind == "buffer" {
                t.buffers += 1;
                t.buffer_numel = t.buffer_numel.saturating_add(e.numel.unwrap_or(0));
            } else {
                t.parameters += 1;
                t.numel = t.numel.saturating_add(e.numel.unwrap_or(0));
            }
            if e.numel.is_none() {
                t.unknown_global += 1;
            }
            t.bytes = t.bytes.saturating_add(e.numel.unwrap_or(local).saturating_mul(size));
            t.local_numel = t.local_numel.saturating_add(local);
            t.local_bytes = t.local_bytes.saturating_add(local.saturating_mul(size));
            if let Some(d) = &e.dtype {
                bump(&mut t.dtypes, d, e.numel.unwrap_or(local));
            }
            if let Some(d) = &e.device {
                bump(&mut t.devices, d, 1);
            }
            if e.sharded {
                t.sharded += 1;
                if let Some(r) = e.ranks {
                    bump(&mut t.shard_ranks, &r.to_string(), 1);
                }
                for p in &e.placements {
                    bump(&mut t.placements, p, 1);
                }
            }
        }
        t
    }

    pub fn highlights(&self) -> Vec<String> {
        let t = self.totals();
        let mut out = Vec::new();
        let mut head = format!("{} tensors ({} parameters, {} buffers): {} parameters", t.tensors, t.parameters, t.buffers, count(t.numel));
        if t.unknown_global > 0 {
            head.push_str(&format!(" (+{} tensors of unknown global shape)", t.unknown_global));
        }
        let dtypes = shares(&t.dtypes);
        if !dtypes.is_empty() {
            head.push_str(&format!(", {dtypes}"));
        }
        if !t.devices.is_empty() {
            head.push_str(&format!("; on {}", t.devices.keys().take(4).cloned().collect::<Vec<_>>().join(", ")));
        }
        out.push(head);
        if t.sharded > 0 {
            let ranks: Vec<String> = t.shard_ranks.keys().take(4).cloned().collect();
            let kinds: std::collections::BTreeSet<&str> = self.tensors.iter().filter(|e| e.sharded).filter_map(|e| e.sharding.as_deref()).collect();
            let mut s = format!("sharded: {} tensors", t.sharded);
            if !ranks.is_empty() {
                s.push_str(&format!(" over {} ranks", ranks.join("/")));
            }
            if !kinds.is_empty() {
                s.push_str(&format!(" ({}", kinds.into_iter().collect::<Vec<_>>().join(", ")));
                if !t.placements.is_empty() {
                    s.push_str(&format!(" {}", t.placements.keys().take(3).cloned().collect::<Vec<_>>().join(", ")));
                }
                s.push(')');
            }
            s.push_str(&format!("; this rank holds {} elements ({})", count(t.local_numel), bytes(t.local_bytes)));
            out.push(s);
        } else if t.bytes > 0 {
            out.push(format!("not sharded: {} on this rank", bytes(t.bytes)));
        }
        // The first of the largest (max_by_key keeps the last, so from the end).
        if let Some(e) = self.tensors.iter().filter(|e| e.error.is_none()).rev().max_by_key(|e| e.numel.unwrap_or(0)) {
            let shape = |s: &Option<Vec<u64>>| s.as_ref().map(|s| format!("{s:?}").replace(", ", ",")).unwrap_or_else(|| "?".into());
            let mut s = format!("largest listed: {} {} {}", e.name, shape(&e.shape), e.dtype.as_deref().unwrap_or("?"));
            if e.sharded {
                s.push_str(&format!(" (local {})", shape(&e.local_shape)));
            }
            out.push(s);
        }
        if t.omitted > 0 {
            out.push(format!("only the first {} of {} tensors are listed", t.listed, t.tensors));
        }
        if let Some(why) = &self.incomplete {
            out.push(format!("incomplete: {why}"));
        }
        if let Some(o) = &self.optimizer {
            out.push(optimizer_line(o));
        }
        if let Some(f) = self.full_state_dict.as_ref().filter(|f| f.requested) {
            if !f.written.is_empty() {
                out.push(format!("full state_dict written: {}", f.written.join(", ")));
            } else if let Some(why) = &f.skipped {
                out.push(format!("full state_dict not written: {why}"));
            }
            if !f.failed.is_empty() {
                out.push(format!("full state_dict failed: {}", f.failed.join("; ")));
            }
        }
        out
    }
}

/// Counts come from the file: they saturate rather than overflow.
fn bump(map: &mut BTreeMap<String, u64>, key: &str, n: u64) {
    let v = map.entry(key.to_string()).or_default();
    *v = v.saturating_add(n);
}

fn optimizer_line(o: &Optimizer) -> String {
    let mut s = format!("optimizer {}", if o.class.is_empty() { "?" } else { &o.class });
    if let Some(g) = o.param_groups.first() {
        let settings: Vec<String> = ["lr", "betas", "eps", "weight_decay", "momentum"]
            .iter()
            .filter_map(|k| g.get(*k).map(|v| format!("{k}={}", v.to_string().replace(',', ", "))))
            .collect();
        if !settings.is_empty() {
            s.push_str(&format!(": {}", settings.join(" ")));
        }
    }
    if o.param_group_count > 1 {
        s.push_str(&format!(" ({} param groups; the first shown)", o.param_group_count));
    }
    s
}

/// Elements per dtype as shares: `bfloat16 95%, float32 5%`.
fn shares(by: &BTreeMap<String, u64>) -> String {
    let total: u64 = by.values().fold(0, |a, b| a.saturating_add(*b));
    let mut v: Vec<(&String, &u64)> = by.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    if v.len() == 1 || total == 0 {
        return v.iter().take(3).map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", ");
    }
    let pct = |n: u64| match n as f64 * 100.0 / total as f64 {
        p if p > 0.0 && p < 1.0 => "<1%".to_string(),
        p => format!("{p:.0}%"),
    };
    v.iter().take(3).map(|(k, n)| format!("{k} {}", pct(**n))).collect::<Vec<_>>().join(", ")
}

/// `7.1 B`, `350.0 M`, `12.3 K`, `42`.
fn count(n: u64) -> String {
    let f = n as f64;
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1} K", f / 1e3),
        1_000_000..=999_999_999 => format!("{:.1} M", f / 1e6),
        1_000_000_000..=999_999_999_999 => format!("{:.1} B", f / 1e9),
        _ => format!("{:.1} T", f / 1e12),
    }
}

fn bytes(n: u64) -> String {
    let f = n as f64;
    const K: f64 = 1024.0;
    if f < K {
        format!("{n} B")
    } else if f < K * K {
        format!("{:.1} KiB", f / K)
    } else if f < K * K * K {
        format!("{:.1} MiB", f / (K * K))
    } else if f < K * K * K * K {
        format!("{:.1} GiB", f / (K * K * K))
    } else {
        format!("{:.1} TiB", f / (K * K * K * K))
    }
}

#[cfg(test)]
#[path = "state_dict_summary_tests.rs"]
mod tests;
