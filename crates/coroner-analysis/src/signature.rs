//! A failed job's signature, for incident memory across jobs: the class, the root cause's message
//! as a template (run-to-run variables masked), the innermost frames, and where it ran (host,
//! GPU, collective). Pure and deterministic: the same report and evidence give the same signature,
//! and its id is a fixed hash (FNV-1a), stable across builds and platforms.

use crate::evidence::JobEvidence;
use coroner_model::{Event, EventKind, FailureSignature, Frame, Rank, Report, Verdict};
use regex::Regex;
use std::collections::BTreeSet;
use std::sync::LazyLock;

/// How many of the innermost frames a signature keeps.
pub const TOP_FRAMES: usize = 3;
/// Two signatures of one class whose templates share at least this share of their tokens
/// (Jaccard) are close.
pub const CLOSE_SIMILARITY: f64 = 0.6;
/// Templates are cut to this many characters.
const MAX_TEMPLATE: usize = 400;

/// The signature of a failed job's root cause, or None when the report is not a failure.
/// `evidence`, when given, supplies the root event's typed message and stack; without it the
/// report's evidence line stands for the message and the signature has no frames.
pub fn signature(report: &Report, evidence: Option<&JobEvidence>) -> Option<FailureSignature> {
    if report.verdict != Verdict::Failed {
        return None;
    }
    let f = report.first_failure.as_ref()?;
    let line = f.evidence.iter().find(|e| e.rank == f.rank).or_else(|| f.evidence.first());
    let event = line.and_then(|l| evidence.and_then(|ev| root_event(ev, f.rank, &l.line)));
    let message = match (event, line) {
        (Some(e), _) => event_message(e),
        (None, Some(l)) => l.line.clone(),
        (None, None) => f.summary.clone(),
    };
    let frames = event.map(|e| top_frames(event_frames(e))).unwrap_or_default();
    let template = normalize(&message);
    let gpu = event
        .and_then(|e| match &e.kind {
            EventKind::Xid { pci, .. } => Some(canonical_pci(pci)),
            _ => None,
        })
        .or_else(|| f.evidence.iter().filter(|e| e.rank == f.rank).find_map(|e| xid_pci(&e.line)))
        .or_else(|| evidence.and_then(|ev| rank_gpu(ev, f.rank?)))
        .or_else(|| nvidia_smi_gpu(report, f.rank));
    Some(FailureSignature {
        id: signature_id(f.class.as_str(), &template, &frames),
        class: f.class,
        template,
        frames,
        rank: f.rank,
        host: f.host.clone(),
        gpu,
        collective: collective_of(report, evidence, f.rank),
    })
}

/// The stable id of (class, template, frames): 16 hex digits of FNV-1a 64.
pub fn signature_id(class: &str, template: &str, frames: &[String]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    feed(class.as_bytes());
    feed(&[0]);
    feed(template.as_bytes());
    for f in frames {
        feed(&[0]);
        feed(f.as_bytes());
    }
    format!("{h:016x}")
}

/// How alike `other` is to `this`: `Some((true, 1.0))` for the same signature, `Some((false, s))`
/// for a close one (same class, and message templates with token Jaccard `s` at least
/// [`CLOSE_SIMILARITY`], or the same collective operation), None otherwise.
pub fn compare(this: &FailureSignature, other: &FailureSignature) -> Option<(bool, f64)> {
    if this.class != other.class {
        return None;
    }
    if this.id == other.id {
        return Some((true, 1.0));
    }
    let s = similarity(&this.template, &other.template);
    let same_collective = this.collective.is_some() && this.collective == other.collective;
    (s >= CLOSE_SIMILARITY || same_collective).then(|| (false, (s * 100.0).round() / 100.0))
}

/// Token Jaccard similarity of two templates (tokens split at whitespace and punctuation other
/// than the placeholders' angle brackets).
pub fn similarity(a: &str, b: &str) -> f64 {
    let tokens = |s: &str| -> BTreeSet<String> {
        s.split(|c: char| c.is_whitespace() || (c.is_ascii_punctuation() && !matches!(c, '<' | '>' | '_')))
            .filter(|t| !t.is_empty())
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let (ta, tb) = (tokens(a), tokens(b));
    if ta.is_empty() && tb.is_empty() {
        return 1.0;
    }
    let inter = ta.intersection(&tb).count();
    let union = ta.union(&tb).count();
    inter as f64 / union as f64
}

struct Mask {
    re: Regex,
    with: &'static str,
    /// A match this says to keep stays as it is.
    keep: fn(&str) -> bool,
}

fn mask(re: &str, with: &'static str) -> Mask {
    mask_unless(re, with, |_| false)
}

fn mask_unless(re: &str, with: &'static str, keep: fn(&str) -> bool) -> Mask {
    Mask { re: Regex::new(re).expect("signature mask patterns are valid"), with, keep }
}

/// Words shaped like host names that are not.
const NOT_HOSTS: &[&str] = &["utf-8", "utf-16", "utf-32", "iso-8859-1", "x86-64", "latin-1"];

/// The masks, in order: each runs on the previous one's output, so the specific shapes (times,
/// UUIDs, PCI ids, addresses, paths, shapes) are masked before plain numbers.
static MASKS: LazyLock<Vec<Mask>> = LazyLock::new(|| {
    vec![
        // Dates and times of day (log prefixes, messages that print when).
        mask(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?", "<time>"),
        mask(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b", "<time>"),
        // glog's severity and month-day (`E1130`).
        mask(r"\b([IWEF])\d{4}\b", "${1}<date>"),
        // GPU-xxxxxxxx-xxxx-... and plain UUIDs.
        mask(r"(?i)\b(?:GPU-|MIG-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<uuid>"),
        // PCI bus ids: 0000:18:00.0, 00000000:18:00.0, 18:00.0, PCI:0000:0a:00.
        mask(r"(?i)\b(?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}(?:\.[0-7])?\b", "<pci>"),
        // IPv4 with an optional port, [v6]:port.
        mask(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b", "<addr>"),
        mask(r"\[[0-9a-fA-F:]*:[0-9a-fA-F:]*\](?::\d{1,5})?", "<addr>"),
        // Paths: absolute, ./relative, ~/... (at the start or after a space, quote, '=' or bracket).
        mask(r#"(^|[\s'"=(\[])(?:~|\.{1,2})?/[^\s'",()\[\]{}:;]+"#, "${1}<path>"),
        // Hex: 0x..., and long bare hex runs with a letter in them (pointers, hashes, ids).
        mask(r"(?i)\b0x[0-9a-f]+\b", "<hex>"),
        mask_unless(r"(?i)\b[0-9a-f]{6,}\b", "<hex>", |m| !(m.bytes().any(|b| b.is_ascii_alphabetic()) && m.bytes().any(|b| b.is_ascii_digit()))),
        // Tensor shapes: torch.Size([2, 3]), [2, 3, 4], (2, 3), 64x128.
        mask(r"torch\.Size\(\[[\d,\s]*\]\)", "<shape>"),
        mask(r"\[\s*\d+(?:\s*,\s*\d+)+\s*\]|\(\s*\d+(?:\s*,\s*\d+)+\s*,?\s*\)|\b\d+(?:x\d+)+\b", "<shape>"),
        // Host names that carry digits: gpu-node-017, node17.cluster.local, ip-10-0-0-1.
        mask_unless(r"(?i)\b[a-z][a-z0-9]*(?:-[a-z0-9]+)*-\d+[a-z0-9]*(?:-[a-z0-9]+)*(?:\.[a-z][a-z0-9-]*)*\b", "<host>", |m| {
            NOT_HOSTS.contains(&m.to_ascii_lowercase().as_str())
        }),
        mask(r"(?i)\b[a-z][a-z0-9-]*\d[a-z0-9-]*(?:\.[a-z][a-z0-9-]*)+\b", "<host>"),
        // Ids glued to a word: rank3, pid=123 is a number below.
        mask(r"(?i)\b(rank|default|node|gpu|cuda|device|dev|worker|thread|tid|pid)\d+\b", "${1}<num>"),
        // Numbers, with decimals and exponent; a unit glued to them stays (20.00GiB).
        mask(r"\b\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", "<num>"),
    ]
});

/// The message as a template: UUIDs, PCI bus ids, addresses, paths, hex, tensor shapes, host
/// names with digits and numbers masked; whitespace collapsed; at most a few hundred characters.
pub fn normalize(message: &str) -> String {
    let first = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut s = first.to_string();
    for m in MASKS.iter() {
        let replaced = m.re.replace_all(&s, |c: &regex::Captures<'_>| {
            if (m.keep)(&c[0]) {
                c[0].to_string()
            } else {
                let mut out = String::new();
                c.expand(m.with, &mut out);
                out
            }
        });
        if let std::borrow::Cow::Owned(o) = replaced {
            s = o;
        }
    }
    let mut out = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.len() > MAX_TEMPLATE {
        let mut cut = MAX_TEMPLATE;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

/// A PCI bus id as `dddd:bb:dd` (lowercase, 4-digit domain, no function): the forms the kernel
/// (`0000:18:00`), nvidia-smi (`00000000:18:00.0`) and NCCL print name the same GPU alike.
pub fn canonical_pci(pci: &str) -> String {
    let p = pci.trim().trim_start_matches("PCI:").to_ascii_lowercase();
    let p = p.split('.').next().unwrap_or(&p).to_string();
    let parts: Vec<&str> = p.split(':').collect();
    match parts.as_slice() {
        [domain, bus, dev] => {
            let d = &domain[domain.len().saturating_sub(4)..];
            format!("{d:0>4}:{bus:0>2}:{dev:0>2}")
        }
        [bus, dev] => format!("0000:{bus:0>2}:{dev:0>2}"),
        _ => p,
    }
}

/// NCCL's `busId` (the int64 it prints in hex, e.g. `18000`) as a PCI bus id.
fn nccl_bus_id(s: &str) -> Option<String> {
    if s.contains(':') {
        return Some(canonical_pci(s));
    }
    let v = u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()?;
    Some(format!("{:04x}:{:02x}:{:02x}", v >> 20, (v & 0xff000) >> 12, (v & 0xff0) >> 4))
}

fn xid_pci(line: &str) -> Option<String> {
    static XID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"Xid \((?:PCI:)?([0-9a-fA-F:.]+)\)").expect("valid"));
    XID.captures(line).map(|c| canonical_pci(&c[1]))
}

/// The culprit's event behind the report's evidence line.
fn root_event<'a>(ev: &'a JobEvidence, rank: Option<Rank>, line: &str) -> Option<&'a Event> {
    let events: &[Event] = match rank {
        Some(r) => &ev.ranks.get(&r)?.events,
        None => &ev.unowned,
    };
    events.iter().find(|e| e.text == line)
}

fn event_message(e: &Event) -> String {
    match &e.kind {
        EventKind::Exception { exc_type, message, .. } => format!("{exc_type}: {message}"),
        EventKind::FatalSignal { what, .. } => format!("Fatal Python error: {what}"),
        EventKind::NcclError { message, .. }
        | EventKind::NcclWarn { message }
        | EventKind::StoreError { message }
        | EventKind::ErrorLine { message }
        | EventKind::Xid { message, .. } => message.clone(),
        _ => e.text.clone(),
    }
}

fn event_frames(e: &Event) -> &[Frame] {
    match &e.kind {
        EventKind::Exception { frames, .. } | EventKind::FatalSignal { frames, .. } | EventKind::StackDump { frames } => frames,
        _ => &[],
    }
}

/// The innermost frames, innermost first, as `function (file base name)`.
fn top_frames(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .rev()
        .take(TOP_FRAMES)
        .map(|f| {
            let file = f.file.rsplit(['/', '\\']).next().unwrap_or(&f.file);
            format!("{} ({file})", f.function)
        })
        .collect()
}

/// The GPU a rank used: an Xid on its own lines, else NCCL's init line for it.
fn rank_gpu(ev: &JobEvidence, rank: Rank) -> Option<String> {
    let events = &ev.ranks.get(&rank)?.events;
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Xid { pci, .. } => Some(canonical_pci(pci)),
            _ => None,
        })
        .or_else(|| {
            events.iter().find_map(|e| match &e.kind {
                EventKind::NcclInit { rank: r, bus_id: Some(b), .. } if *r == rank => nccl_bus_id(b),
                _ => None,
            })
        })
}

/// A GPU with uncorrectable errors or retired pages in the culprit's `nvidia-smi` snapshot.
fn nvidia_smi_gpu(report: &Report, rank: Option<Rank>) -> Option<String> {
    static GPU: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^GPU \d+ .*?\(([0-9a-fA-F:.]+)\): .*?(\d+) uncorrectable ECC(.*)$").expect("valid"));
    report.snapshots.iter().filter(|s| s.kind == "nvidia_smi" && (s.rank == rank || s.rank.is_none())).flat_map(|s| &s.highlights).find_map(|h| {
        let c = GPU.captures(h)?;
        let bad = &c[2] != "0" || c[3].contains("retired") || c[3].contains("remapped");
        bad.then(|| canonical_pci(&c[1]))
    })
}

/// The collective the culprit was in: its pending one in the report, else its watchdog timeout,
/// else the one most other ranks were stuck in.
fn collective_of(report: &Report, evidence: Option<&JobEvidence>, rank: Option<Rank>) -> Option<String> {
    let op = |pending: &str| pending.split_whitespace().next().map(str::to_ascii_uppercase);
    if let Some(p) = report.collectives.iter().filter(|c| Some(c.rank) == rank).find_map(|c| c.pending.as_deref()) {
        return op(p);
    }
    if let (Some(ev), Some(r)) = (evidence, rank) {
        let timeout = ev.ranks.get(&r).and_then(|re| {
            re.events.iter().find_map(|e| match &e.kind {
                EventKind::WatchdogTimeout { op, .. } => Some(op.to_ascii_uppercase()),
                _ => None,
            })
        });
        if timeout.is_some() {
            return timeout;
        }
    }
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for p in report.collectives.iter().filter_map(|c| c.pending.as_deref()) {
        if let Some(o) = op(p) {
            *counts.entry(o).or_default() += 1;
        }
    }
    counts.into_iter().max_by_key(|(o, n)| (*n, std::cmp::Reverse(o.clone()))).map(|(o, _)| o)
}

#[cfg(test)]
#[path = "signature_tests.rs"]
mod tests;
