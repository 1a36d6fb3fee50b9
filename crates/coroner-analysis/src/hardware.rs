//! Hardware lines as evidence: a kernel log's Xid, ECC and OOM-killer lines and `nvidia-smi`'s
//! memory faults, from a rank's snapshots or from lines no rank owns, joined to the rank whose
//! process or GPU they name.
//!
//! A hardware line names a process (`pid=`), a GPU (`PCI:0000:3b:00`) or neither; the job's own
//! lines say which rank is which process and which GPU (NCCL's init line prints pid, host and
//! busId). A line joined to a rank becomes a root finding there, or sharpens the one already there:
//! an NCCL error or a crash on a GPU whose driver reported Xid 79 is a hardware fault.

use crate::clock::ClockModel;
use crate::evidence::JobEvidence;
use crate::findings::Finding;
use crate::rules::RuleSet;
use coroner_model::{Event, EventKind, FaultClass, Rank, Role};
use std::collections::HashMap;

/// Classes a GPU fault shows up as on the rank itself: a hardware line on that rank explains them.
const EXPLAINED_BY_HARDWARE: [FaultClass; 6] =
    [FaultClass::NcclError, FaultClass::Segfault, FaultClass::PythonException, FaultClass::Killed, FaultClass::Hang, FaultClass::NanInf];

/// (domain, bus, device) of a PCI address.
pub(crate) type PciSlot = (u32, u32, u32);

/// `0000:3b:00` or `0000:3b:00.0` (Xid, nvidia-smi) -> (0, 0x3b, 0).
pub(crate) fn slot_of_address(addr: &str) -> Option<PciSlot> {
    let addr = addr.trim().trim_start_matches("PCI:");
    let mut parts = addr.split(':');
    let (a, b, c) = (parts.next()?, parts.next()?, parts.next());
    let (domain, bus, dev) = match c {
        Some(dev) => (a, b, dev),
        None => ("0", a, b),
    };
    let dev = dev.split('.').next()?;
    Some((u32::from_str_radix(domain, 16).ok()?, u32::from_str_radix(bus, 16).ok()?, u32::from_str_radix(dev, 16).ok()?))
}

/// NCCL's `busId 3b000`: the hex digits of `0000:3b:00.0` run together (domain, bus, device,
/// function), leading zeros dropped.
pub(crate) fn slot_of_nccl_bus_id(id: &str) -> Option<PciSlot> {
    if id.contains(':') {
        return slot_of_address(id);
    }
    let v = u64::from_str_radix(id.trim(), 16).ok()?;
    Some(((v >> 20) as u32, ((v >> 12) & 0xff) as u32, ((v >> 4) & 0xff) as u32))
}

/// Which rank is which process and which GPU, from NCCL's init lines.
struct Identities {
    by_pid: HashMap<u32, Vec<Rank>>,
    by_slot: HashMap<PciSlot, Vec<Rank>>,
}

impl Identities {
    fn new(evidence: &JobEvidence) -> Self {
        let mut by_pid: HashMap<u32, Vec<Rank>> = HashMap::new();
        let mut by_slot: HashMap<PciSlot, Vec<Rank>> = HashMap::new();
        for (rank, ev) in &evidence.ranks {
            for e in &ev.events {
                // A DataLoader worker the rank names (`DataLoader worker (pid 629) is killed`) is
                // its process too: the kernel's OOM killer names the worker's pid.
                if let EventKind::ErrorLine { message } | EventKind::Exception { message, .. } = &e.kind {
                    if let Some(pid) = worker_pid(message) {
                        by_pid.entry(pid).or_default().push(*rank);
                    }
                }
                if let EventKind::NcclInit { pid, bus_id, .. } = &e.kind {
                    by_pid.entry(*pid).or_default().push(*rank);
                    if let Some(slot) = bus_id.as_deref().and_then(slot_of_nccl_bus_id) {
                        by_slot.entry(slot).or_default().push(*rank);
                    }
                }
            }
        }
        for ranks in by_pid.values_mut().chain(by_slot.values_mut()) {
            ranks.sort_unstable();
            ranks.dedup();
        }
        Identities { by_pid, by_slot }
    }

    /// The one rank a hardware line names, if exactly one fits. Pids and PCI slots repeat across
    /// hosts, so a name shared by several ranks decides nothing.
    fn rank_of(&self, e: &Event) -> Option<Rank> {
        let one = |ranks: Option<&Vec<Rank>>| match ranks.map(Vec::as_slice) {
            Some([r]) => Some(*r),
            _ => None,
        };
        match &e.kind {
            EventKind::Xid { pid, pci, .. } => {
                pid.and_then(|p| one(self.by_pid.get(&p))).or_else(|| slot_of_address(pci).and_then(|s| one(self.by_slot.get(&s))))
            }
            EventKind::OomKill { pid: Some(p), .. } => one(self.by_pid.get(p)),
            _ => None,
        }
    }
}

/// `DataLoader worker (pid 629)` / `DataLoader worker (pid(s) 18360)`.
fn worker_pid(message: &str) -> Option<u32> {
    let at = message.find("worker (pid")?;
    let r = &message[at + "worker (pid".len()..];
    let r = r.strip_prefix("(s)").unwrap_or(r).trim_start();
    let n = r.bytes().take_while(u8::is_ascii_digit).count();
    r[..n].parse().ok()
}

/// Every hardware line the evidence holds, with the rank it belongs to where one can be named.
fn attributed(evidence: &JobEvidence) -> Vec<(Rank, &Event)> {
    let ids = Identities::new(evidence);
    let unowned = evidence.unowned.iter().filter(|e| matches!(e.kind, EventKind::Xid { .. } | EventKind::OomKill { .. }));
    evidence.hardware.iter().chain(unowned).filter_map(|e| e.rank.or_else(|| ids.rank_of(e)).map(|r| (r, e))).collect()
}

/// Hardware roots no rank can be named for (a kernel log given alone, an Xid on a GPU no line of
/// the job names), earliest first: when nothing else failed, they are the failure, rank unknown.
pub fn unattributed<'a>(evidence: &'a JobEvidence, rules: &'a RuleSet) -> Vec<(&'a Event, crate::rules::Verdict<'a>)> {
    let ids = Identities::new(evidence);
    // Unowned lines (a kernel log, a launcher's own output) count when they are hardware: an Xid
    // or OOM-killer line, or any line the rules call a GPU hardware fault (`fallen off the bus`
    // outside an Xid, a driver that needs a reset).
    let unowned = evidence.unowned.iter().filter(|e| match e.kind {
        EventKind::Xid { .. } | EventKind::OomKill { .. } => true,
        EventKind::ErrorLine { .. } => rules.classify(e).class() == Some(FaultClass::GpuHardware),
        _ => false,
    });
    let mut out: Vec<(&Event, crate::rules::Verdict<'_>)> = evidence
        .hardware
        .iter()
        .chain(unowned)
        .filter(|e| e.rank.is_none() && ids.rank_of(e).is_none())
        .map(|e| (e, rules.classify(e)))
        .filter(|(_, v)| v.role == Role::Root && v.class().is_some())
        .collect();
    out.sort_by_key(|(e, _)| (e.printed_ns.unwrap_or(e.capture_ns), e.line.seq));
    out
}

/// Joins hardware lines to the ranks' root findings: a hardware root sharpens a finding it
/// explains, adds its line to any other, and is a finding of its own on a rank that had none.
pub fn merge<'a>(evidence: &'a JobEvidence, rules: &'a RuleSet, clock: &ClockModel, findings: &mut Vec<Finding<'a>>) {
    for (rank, e) in attributed(evidence) {
        let verdict = rules.classify(e);
        if verdict.role != Role::Root {
            continue;
        }
        let Some(class) = verdict.class() else { continue };
        match findings.iter_mut().find(|f| f.rank == rank) {
            Some(f) => {
                let sharper = class == FaultClass::GpuHardware
                    && f.class != FaultClass::GpuHardware
                    && (EXPLAINED_BY_HARDWARE.contains(&f.class) || verdict.confidence() > f.confidence);
                if sharper {
                    f.class = class;
                    f.rule = verdict.rule;
                    f.confidence = f.confidence.max(verdict.confidence());
                    f.events.insert(0, e);
                } else if !f.events.iter().any(|x| std::ptr::eq(*x, e)) {
                    f.events.push(e);
                }
            }
            None => {
                // A line without a time of its own happened no later than the rank's last sign of life.
                let ev = evidence.ranks.get(&rank);
                let host_ns = e.printed_ns.or_else(|| evidence.end_of(rank).and_then(|end| end.at_ns)).or_else(|| ev.and_then(|r| r.last_capture_ns));
                let Some(host_ns) = host_ns else { continue };
                findings.push(Finding {
                    rank,
                    class,
                    rule: verdict.rule,
                    confidence: verdict.confidence(),
                    aligned_ns: clock.aligned(Some(rank), host_ns),
                    events: vec![e],
                    from_end: None,
                    undated: false,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_and_nccl_bus_ids_name_the_same_slot() {
        assert_eq!(slot_of_address("0000:3b:00"), Some((0, 0x3b, 0)));
        assert_eq!(slot_of_address("PCI:0000:3b:00.0"), Some((0, 0x3b, 0)));
        assert_eq!(slot_of_address("00000000:3B:00.0"), Some((0, 0x3b, 0)));
        assert_eq!(slot_of_nccl_bus_id("3b000"), Some((0, 0x3b, 0)));
        assert_eq!(slot_of_nccl_bus_id("18000"), slot_of_address("0000:18:00.0"));
        assert_eq!(slot_of_nccl_bus_id("60"), Some((0, 0, 6)));
        assert_eq!(slot_of_address("garbage"), None);
    }
}

#[cfg(test)]
mod merge_tests {
    use super::*;
    use crate::evidence::RankEvidence;
    use coroner_model::{LineRef, ProcessEnd, Report, SeqNo, Stream};

    const T0: i64 = 1_790_000_000_000_000_000;

    fn event(rank: Option<u32>, at_s: i64, stream: Stream, kind: EventKind) -> Event {
        Event {
            rank: rank.map(Rank),
            line: LineRef { stream, seq: at_s as u64 },
            capture_ns: T0 + at_s * 1_000_000_000,
            printed_ns: None,
            kind,
            text: "line".into(),
        }
    }

    fn init(rank: u32, pid: u32, bus: &str) -> Event {
        event(
            Some(rank),
            0,
            Stream::Stdout,
            EventKind::NcclInit { host: "node-a".into(), pid, rank: Rank(rank), nranks: 2, cuda_dev: Some(rank), bus_id: Some(bus.into()) },
        )
    }

    /// Rank 1 went quiet before ALLREDUCE seq 11; rank 0 timed out waiting in it. Both were killed.
    fn hang() -> JobEvidence {
        let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(2), finished: true, ..Default::default() };
        let timeout = EventKind::WatchdogTimeout {
            pg: None,
            seq: Some(SeqNo(11)),
            op: "ALLREDUCE".into(),
            numel_in: None,
            numel_out: None,
            timeout_ms: Some(600_000),
            elapsed_ms: None,
        };
        let status =
            |en| EventKind::PgStatus { pg: None, failing_seq: None, last_enqueued: Some(SeqNo(en)), last_started: None, last_completed: Some(SeqNo(10)) };
        ev.insert_rank(
            Rank(0),
            RankEvidence {
                events: vec![init(0, 1000, "18000"), event(Some(0), 700, Stream::Stderr, timeout), event(Some(0), 701, Stream::Stderr, status(11))],
                lines: 9,
                last_capture_ns: Some(T0 + 702_000_000_000),
                ..Default::default()
            },
        );
        ev.insert_rank(
            Rank(1),
            RankEvidence {
                events: vec![init(1, 1001, "3b000"), event(Some(1), 710, Stream::Stderr, status(10))],
                lines: 9,
                last_capture_ns: Some(T0 + 710_000_000_000),
                ..Default::default()
            },
        );
        ev.ends = (0..2).map(|r| ProcessEnd { rank: Rank(r), exit_code: None, signal: Some(6), at_ns: Some(T0 + 720_000_000_000) }).collect();
        ev
    }

    fn hardware_line(rank: Option<u32>, kind: EventKind) -> Event {
        Event { rank: rank.map(Rank), line: LineRef { stream: Stream::File, seq: 0 }, capture_ns: 0, printed_ns: None, text: kind.message(), kind }
    }

    fn analyze(ev: &JobEvidence) -> Report {
        crate::analyze(ev, &RuleSet::builtin())
    }

    fn culprit(r: &Report) -> (Option<u32>, &'static str) {
        let f = r.first_failure.as_ref().expect("a first failure");
        (f.rank.map(|r| r.0), f.class.as_str())
    }

    #[test]
    fn without_hardware_lines_the_silent_rank_is_a_hang() {
        assert_eq!(culprit(&analyze(&hang())), (Some(1), "hang"));
    }

    #[test]
    fn an_xid_naming_a_ranks_gpu_makes_it_a_hardware_fault() {
        let mut ev = hang();
        let xid =
            |pci: &str| EventKind::Xid { pci: pci.into(), code: 79, pid: None, message: format!("NVRM: Xid (PCI:{pci}): 79, GPU has fallen off the bus.") };
        ev.hardware.push(hardware_line(None, xid("0000:3b:00")));
        let report = analyze(&ev);
        assert_eq!(culprit(&report), (Some(1), "gpu_hardware"));
        let f = report.first_failure.as_ref().expect("first failure");
        assert!(f.evidence.iter().any(|l| l.line.contains("fallen off the bus") && l.rank == Some(Rank(1)) && l.time == "undated"), "{:#?}", f.evidence);
        assert!(report.advice.iter().any(|a| a.contains("Drain host node-a")), "{:?}", report.advice);
    }

    #[test]
    fn an_xid_on_a_gpu_no_rank_uses_is_not_pinned_on_anyone() {
        let mut ev = hang();
        ev.hardware.push(hardware_line(
            None,
            EventKind::Xid { pci: "0000:99:00".into(), code: 79, pid: None, message: "NVRM: Xid (PCI:0000:99:00): 79, GPU has fallen off the bus.".into() },
        ));
        assert_eq!(culprit(&analyze(&ev)), (Some(1), "hang"));
    }

    #[test]
    fn the_oom_killer_naming_a_pid_is_that_ranks_root() {
        let mut ev = hang();
        ev.ends[1] = ProcessEnd { rank: Rank(1), exit_code: None, signal: Some(9), at_ns: Some(T0 + 400_000_000_000) };
        ev.unowned.push(event(None, 399, Stream::Stdout, EventKind::OomKill { pid: Some(1001), process: Some("python".into()) }));
        let report = analyze(&ev);
        assert_eq!(culprit(&report), (Some(1), "killed"));
        assert!(report.first_failure.as_ref().is_some_and(|f| f.evidence.iter().any(|l| l.rank.is_none() || l.rank == Some(Rank(1)))));
    }

    #[test]
    fn nvidia_smi_ecc_errors_on_a_ranks_snapshot_sharpen_its_crash() {
        let mut ev = hang();
        let crash = EventKind::FatalSignal { what: "Segmentation fault".into(), frames: Vec::new() };
        ev.rank_mut(Rank(1)).events.push(event(Some(1), 100, Stream::Stderr, crash));
        assert_eq!(culprit(&analyze(&ev)), (Some(1), "segfault"));
        let ecc = "nvidia-smi: GPU 00000000:3B:00.0: 2 uncorrectable ECC errors since the driver loaded".to_string();
        ev.hardware.push(hardware_line(Some(1), EventKind::ErrorLine { message: ecc }));
        assert_eq!(culprit(&analyze(&ev)), (Some(1), "gpu_hardware"));
    }
}
