//! A rank's GPU memory over the agent's samples: where it started, its peak, where it ended.
//! Memory that climbs step after step until an out-of-memory error points at tensors kept across
//! steps; memory that is flat and high points at one oversized allocation.
//!
//! A per-rank agent's samples are that rank's lines; a per-node agent's are nobody's, and name
//! their GPU by PCI bus id, which NCCL's init line ties to a rank. When an agent sees several
//! GPUs, the rank's is the one its NCCL init line names, or the only one.

use crate::clock::ClockModel;
use crate::evidence::JobEvidence;
use crate::hardware::{slot_of_address, slot_of_nccl_bus_id, PciSlot};
use coroner_model::{format_rfc3339_ns, Event, EventKind, GpuMemory, GpuSample, Rank};

/// The rank's GPU, from its NCCL init line.
fn rank_slot(evidence: &JobEvidence, rank: Rank) -> Option<PciSlot> {
    evidence.ranks.get(&rank)?.events.iter().find_map(|e| match &e.kind {
        EventKind::NcclInit { bus_id: Some(b), .. } => slot_of_nccl_bus_id(b),
        _ => None,
    })
}

fn sample(e: &Event) -> Option<&GpuSample> {
    match &e.kind {
        EventKind::GpuSample(s) => Some(s),
        _ => None,
    }
}

pub fn summary(evidence: &JobEvidence, clock: &ClockModel, rank: Rank) -> Option<GpuMemory> {
    let slot = rank_slot(evidence, rank);
    let own = evidence.ranks.get(&rank).map(|r| r.events.as_slice()).unwrap_or(&[]);
    let mut samples: Vec<(&Event, &GpuSample)> = own.iter().filter_map(|e| sample(e).map(|s| (e, s))).collect();
    let buses: std::collections::BTreeSet<&str> = samples.iter().map(|(_, s)| s.bus.as_str()).collect();
    match (slot, buses.len()) {
        (Some(slot), _) if buses.len() > 1 || samples.is_empty() => {
            // Several GPUs in view, or a per-node agent: the rank's own GPU.
            samples.retain(|(_, s)| slot_of_address(&s.bus) == Some(slot));
            if samples.is_empty() {
                samples = evidence.unowned.iter().filter_map(|e| sample(e).map(|s| (e, s))).filter(|(_, s)| slot_of_address(&s.bus) == Some(slot)).collect();
            }
        }
        (None, n) if n > 1 => return None,
        _ => {}
    }
    // After the rank's process ended its GPU's memory is no longer its own: a per-node agent
    // keeps sampling. Cut at the end when known, else at the rank's last line.
    let cutoff = evidence
        .end_of(rank)
        .and_then(|e| e.at_ns)
        .or_else(|| samples.iter().any(|(e, _)| e.rank.is_none()).then(|| evidence.ranks.get(&rank).and_then(|r| r.last_capture_ns)).flatten());
    if let Some(cut) = cutoff {
        samples.retain(|(e, _)| e.capture_ns <= cut);
    }
    let (first_e, first) = *samples.first()?;
    let (last_e, last) = *samples.last()?;
    let aligned = |e: &Event| format_rfc3339_ns(clock.aligned(e.rank.or(Some(rank)), e.capture_ns));
    Some(GpuMemory {
        bus: last.bus.clone(),
        samples: samples.len() as u32,
        first_mib: first.used_mib,
        peak_mib: samples.iter().map(|(_, s)| s.used_mib).max().unwrap_or(0),
        last_mib: last.used_mib,
        total_mib: last.total_mib,
        from: aligned(first_e),
        to: aligned(last_e),
        last_util_pct: last.util_pct,
    })
}

/// `12.0 GiB -> 139.2 GiB (peak 139.5) of 139.8 GiB over 12 samples`.
pub fn describe(m: &GpuMemory) -> String {
    let gib = |mib: u64| format!("{:.1}", mib as f64 / 1024.0);
    format!(
        "GPU {} memory {} GiB -> {} GiB (peak {}) of {} GiB over {} samples from {} to {}{}",
        m.bus,
        gib(m.first_mib),
        gib(m.last_mib),
        gib(m.peak_mib),
        gib(m.total_mib),
        m.samples,
        m.from,
        m.to,
        m.last_util_pct.map(|u| format!(", {u}% busy at the end")).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::{LineRef, Stream};

    fn ev(rank: Option<u32>, at: i64, kind: EventKind) -> Event {
        Event {
            rank: rank.map(Rank),
            line: LineRef { stream: Stream::File, seq: at as u64 },
            capture_ns: at * 1_000_000_000,
            printed_ns: None,
            kind,
            text: String::new(),
        }
    }

    fn gpu(bus: &str, used: u64) -> EventKind {
        EventKind::GpuSample(GpuSample { index: None, bus: bus.into(), used_mib: used, total_mib: 143_771, util_pct: Some(90) })
    }

    fn init(rank: u32, bus: &str) -> Event {
        ev(Some(rank), 0, EventKind::NcclInit { host: "h".into(), pid: 1, rank: Rank(rank), nranks: 2, cuda_dev: None, bus_id: Some(bus.into()) })
    }

    #[test]
    fn a_rank_agents_samples_of_its_one_gpu() {
        let mut e = JobEvidence::default();
        e.rank_mut(Rank(0)).events = vec![
            ev(Some(0), 1, gpu("00000000:18:00.0", 1000)),
            ev(Some(0), 2, gpu("00000000:18:00.0", 90_000)),
            ev(Some(0), 3, gpu("00000000:18:00.0", 80_000)),
        ];
        let m = summary(&e, &ClockModel::default(), Rank(0)).expect("a summary");
        assert_eq!((m.samples, m.first_mib, m.peak_mib, m.last_mib), (3, 1000, 90_000, 80_000));
        assert!(describe(&m).contains("1.0 GiB -> 78.1 GiB (peak 87.9) of 140.4 GiB over 3 samples"), "{}", describe(&m));
    }

    #[test]
    fn a_node_agents_samples_are_matched_to_ranks_by_bus_id() {
        let mut e = JobEvidence::default();
        e.rank_mut(Rank(0)).events = vec![init(0, "18000")];
        e.rank_mut(Rank(1)).events = vec![init(1, "3b000")];
        e.unowned = vec![ev(None, 1, gpu("00000000:18:00.0", 10)), ev(None, 1, gpu("00000000:3B:00.0", 20)), ev(None, 2, gpu("00000000:3B:00.0", 30))];
        let clock = ClockModel::default();
        assert_eq!(summary(&e, &clock, Rank(0)).map(|m| (m.samples, m.last_mib)), Some((1, 10)));
        assert_eq!(summary(&e, &clock, Rank(1)).map(|m| (m.samples, m.last_mib)), Some((2, 30)));
        // Rank 1's last line came at 1 s: the node agent's later sample is not its memory.
        e.rank_mut(Rank(1)).last_capture_ns = Some(1_000_000_000);
        assert_eq!(summary(&e, &clock, Rank(1)).map(|m| (m.samples, m.last_mib)), Some((1, 20)));
        // Several GPUs on a rank's own lines and no init line to choose: no guess.
        e.rank_mut(Rank(2)).events = vec![ev(Some(2), 1, gpu("00000000:18:00.0", 10)), ev(Some(2), 1, gpu("00000000:3B:00.0", 20))];
        assert_eq!(summary(&e, &clock, Rank(2)), None);
    }
}
