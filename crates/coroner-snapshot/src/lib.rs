//! Readers for crash snapshots: bytes in, typed facts out, no IO.
//!
//! Each reader takes a file's bytes and returns what it understood, or a [`SnapshotError`] that
//! says why not; none panics on bad input and none executes anything (pickles are read as data by
//! [`pickle`], never unpickled). [`highlights`] picks the reader by snapshot kind and returns the
//! short lines the report shows; [`flight_recorder::FlightRecord::progress`] turns a flight
//! recorder dump into collective-progress facts for the correlation engine.
//!
//! | kind | reader |
//! | --- | --- |
//! | `flight_recorder` | [`flight_recorder`]: PyTorch NCCL flight recorder pickles |
//! | `state_dict` | [`state_dict`]: `torch.save` zips, names/shapes/dtypes only |
//! | `state_dict_summary` | [`state_dict_summary`]: the crash hook's `state_dict.json` (metadata only, sharding) |
//! | `nvidia_smi` | [`nvidia_smi`]: `nvidia-smi -q -x` XML |
//! | `memory_summary` | [`memory_summary`]: `torch.cuda.memory_summary()` text |
//! | `stack` | [`stack`]: crash hook `stack.txt` and `sigterm.stack.txt`, faulthandler output |
//! | `core` | [`core`]: ELF core notes |
//! | `kernel_log` | [`kernel_log`]: dmesg Xid / ECC / OOM-killer lines |

pub mod core;
pub mod flight_dump;
pub mod flight_json;
pub mod flight_recorder;
pub mod kernel_log;
pub mod memory_summary;
pub mod nvidia_smi;
pub mod pickle;
pub mod stack;
pub mod state_dict;
pub mod state_dict_summary;

pub use flight_recorder::{FlightRecord, FrEntry, FrProgress};

/// Why a snapshot could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("pickle: {0}")]
    Pickle(String),
    #[error("{0}")]
    Format(String),
    #[error("empty file")]
    Empty,
}

/// The kind of a snapshot from its folder and file name (`flight_recorder`, `stack`,
/// `memory_summary`, `state_dict`, `state_dict_summary`, `nvidia_smi`, `core`, `kernel_log`,
/// `other`). The crash hook's files: `rank<R>.stack.txt`, `rank<R>.sigterm.stack.txt` and
/// `rank<R>.faulthandler.txt` (with `.p<pid>` before the suffix when a second process of the
/// rank wrote one) are `stack`; `rank<R>.state_dict.json` is `state_dict_summary`;
/// `rank<R>.state_dict.pt` and `rank<R>.optimizer.state_dict.pt` are `state_dict`.
pub fn kind_of(folder: &str, name: &str) -> &'static str {
    let lower = name.to_ascii_lowercase();
    if folder == "flight_recorder" || lower.starts_with("nccl_trace_rank_") || lower.contains("flight_recorder") || lower.starts_with("fr_") {
        "flight_recorder"
    } else if lower.contains("stack") || lower.contains("faulthandler") || lower.contains("traceback") {
        "stack"
    } else if lower.contains("memory_summary") {
        "memory_summary"
    } else if lower.contains("state_dict") && lower.ends_with(".json") {
        "state_dict_summary"
    } else if lower.contains("state_dict") || lower.ends_with(".pt") || lower.ends_with(".pth") {
        "state_dict"
    } else if lower.contains("nvidia-smi") && lower.ends_with(".xml") || lower.contains("nvidia_smi") {
        "nvidia_smi"
    } else if lower.starts_with("core") {
        "core"
    } else if lower.contains("dmesg") || lower.contains("kern") {
        "kernel_log"
    } else {
        "other"
    }
}

/// Short human lines for the report. `kind` picks the reader (see [`kind_of`]); for an `other`
/// file the kind comes from its name, else from its first bytes. An unknown kind gives no lines.
pub fn highlights(kind: &str, name: &str, bytes: &[u8]) -> Result<Vec<String>, SnapshotError> {
    if bytes.is_empty() {
        return Err(SnapshotError::Empty);
    }
    let kind = match kind {
        "other" | "" => match kind_of("", name) {
            "other" => sniff(bytes),
            by_name => by_name,
        },
        k => k,
    };
    Ok(match kind {
        "flight_recorder" => flight_recorder::parse(bytes)?.highlights(),
        "state_dict" => state_dict::parse(bytes)?.highlights(),
        "state_dict_summary" => state_dict_summary::parse(bytes)?.highlights(),
        "nvidia_smi" => nvidia_smi::parse(bytes)?.highlights(),
        "memory_summary" => memory_summary::parse(bytes)?.highlights(),
        "stack" => {
            let mut dump = stack::parse(bytes)?;
            // faulthandler writes no reason of its own on SIGTERM; the hook's file name says it.
            if dump.reason.is_none() && name.to_ascii_lowercase().contains("sigterm") {
                dump.reason = Some("received SIGTERM".into());
            }
            dump.highlights()
        }
        "core" => core::parse(bytes)?.highlights(),
        "kernel_log" => kernel_log::highlights(bytes),
        _ => Vec::new(),
    })
}

/// What the readers make of one snapshot, for a report: never an error.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// The reader's highlights, or one `unreadable: <why>` line.
    pub highlights: Vec<String>,
    /// For a readable flight recorder dump: its progress per process group.
    pub fr_progress: Vec<FrProgress>,
    /// For a readable flight recorder dump: its operations, bounded, for the cross-rank matcher.
    pub fr_dump: Option<coroner_model::FrDump>,
    /// Hardware lines for the correlation engine, as typed events with the text they came from:
    /// a kernel log's Xid, ECC, AER and OOM-killer lines, and what `nvidia-smi` says of uncorrectable
    /// memory errors. Hardware evidence counts as evidence, not only as a highlight.
    pub hardware: Vec<(coroner_model::EventKind, String)>,
}

/// Reads a snapshot for the report. `kept` of `size` bytes are at hand (a size cap may have cut
/// the rest): a cut file says so in its highlights.
pub fn facts(kind: &str, name: &str, bytes: &[u8], size: u64) -> Facts {
    let mut f = Facts::default();
    match highlights(kind, name, bytes) {
        Ok(h) => f.highlights = h,
        Err(e) => f.highlights.push(format!("unreadable: {e}")),
    }
    match kind {
        "flight_recorder" => {
            if let Ok(fr) = flight_recorder::parse(bytes) {
                f.fr_progress = fr.progress();
                // A dump cut by a size cap does not parse, so a kept dump is always whole.
                f.fr_dump = Some(fr.dump(if flight_json::is_json(bytes) { "json" } else { "pickle" }));
            }
        }
        "kernel_log" => f.hardware = kernel_log::parse(bytes),
        "nvidia_smi" => {
            if let Ok(smi) = nvidia_smi::parse(bytes) {
                f.hardware = smi.hardware_events();
            }
        }
        _ => {}
    }
    if (bytes.len() as u64) < size {
        f.highlights.push(format!("only the first {} of {} bytes were kept (size cap)", bytes.len(), size));
    }
    f
}

/// The kind of an unnamed file from its content.
fn sniff(b: &[u8]) -> &'static str {
    let head = &b[..b.len().min(512)];
    let text = String::from_utf8_lossy(head);
    if b.starts_with(b"\x7fELF") {
        "core"
    } else if b.starts_with(b"PK\x03\x04") {
        "state_dict"
    } else if b.first() == Some(&b'{') && text.contains(state_dict_summary::FORMAT) {
        "state_dict_summary"
    } else if b.first() == Some(&0x80) || (b.first() == Some(&b'{') && (text.contains("\"entries\"") || text.contains("\"pg_config\""))) {
        "flight_recorder"
    } else if text.contains("<nvidia_smi_log") {
        "nvidia_smi"
    } else if text.contains("memory summary") {
        "memory_summary"
    } else if text.contains("Fatal Python error")
        || text.contains("Traceback (most recent call last)")
        || text.starts_with("reason:")
        || text.contains("most recent call first")
    {
        "stack"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_names() {
        assert_eq!(kind_of("flight_recorder", "nccl_trace_rank_1"), "flight_recorder");
        assert_eq!(kind_of("snapshots", "rank1.memory_summary.txt"), "memory_summary");
        assert_eq!(kind_of("host", "nvidia-smi-q.xml"), "nvidia_smi");
        assert_eq!(kind_of("host", "dmesg-tail.txt"), "kernel_log");
        assert_eq!(kind_of("snapshots", "core.1234"), "core");
        assert_eq!(kind_of("host", "topo.txt"), "other");
    }

    /// Every file the crash hook writes (python/coroner_hook) gets the kind its reader needs.
    #[test]
    fn kinds_of_the_crash_hooks_files() {
        for (name, kind) in [
            ("rank3.stack.txt", "stack"),
            ("rank3.sigterm.stack.txt", "stack"),
            ("rank3.p4242.sigterm.stack.txt", "stack"),
            ("rank3.faulthandler.txt", "stack"),
            ("rank3.p4242.faulthandler.txt", "stack"),
            ("rank3.memory_summary.txt", "memory_summary"),
            ("rank3.state_dict.json", "state_dict_summary"),
            ("rank3.state_dict.pt", "state_dict"),
            ("rank3.optimizer.state_dict.pt", "state_dict"),
        ] {
            assert_eq!(kind_of("snapshots", name), kind, "{name}");
        }
        let json = include_bytes!("../../../tests/data/snapshots/rank3.state_dict.json");
        assert_eq!(sniff(json), "state_dict_summary");
        assert!(highlights("other", "upload.bin", json).unwrap()[0].starts_with("22 tensors"));
    }

    #[test]
    fn a_sigterm_stack_says_it_was_sigterm() {
        let dump = b"Current thread 0x00007f6df2c94b80 (most recent call first):\n  File \"/opt/job/train.py\", line 12 in <module>\n";
        let h = highlights("stack", "rank3.sigterm.stack.txt", dump).unwrap();
        assert_eq!(h, vec!["reason: received SIGTERM", "1 threads, 1 with Python frames; current thread in <module> (/opt/job/train.py:12)"]);
        assert_eq!(highlights("stack", "rank3.faulthandler.txt", dump).unwrap().len(), 1, "no reason invented for other dumps");
    }

    #[test]
    fn highlights_dispatch_and_sniff() {
        let ms = include_bytes!("../../../tests/data/snapshots/rank1.memory_summary.txt");
        assert_eq!(highlights("memory_summary", "x", ms).unwrap()[0], "peak allocated 65.0 MiB, reserved 66.0 MiB");
        assert_eq!(highlights("other", "dump.bin", ms).unwrap()[0], "peak allocated 65.0 MiB, reserved 66.0 MiB");
        assert_eq!(highlights("core", "core", b""), Err(SnapshotError::Empty));
        assert!(highlights("state_dict", "x.pt", b"not a zip").is_err());
        assert_eq!(highlights("other", "topo.txt", b"GPU0 X NV18").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn facts_never_fail() {
        let fr = include_bytes!("../../../tests/data/snapshots/hang_nccl_trace_rank_0");
        let f = facts("flight_recorder", "nccl_trace_rank_0", fr, fr.len() as u64);
        assert_eq!(f.fr_progress.len(), 1);
        let f = facts("flight_recorder", "nccl_trace_rank_0", &fr[..100], fr.len() as u64);
        assert!(f.fr_progress.is_empty());
        assert!(f.highlights[0].starts_with("unreadable: pickle: truncated"), "{:?}", f.highlights);
        assert_eq!(f.highlights[1], format!("only the first 100 of {} bytes were kept (size cap)", fr.len()));
        let core = include_bytes!("../../../tests/data/snapshots/core.sleep.head");
        // A core cut after its notes still reads.
        let f = facts("core", "core.1", core, 1 << 30);
        assert!(f.highlights[0].starts_with("core: SIGSEGV"), "{:?}", f.highlights);
    }

    #[test]
    fn hardware_facts_come_from_kernel_logs_and_nvidia_smi_memory_faults() {
        let clean = include_bytes!("../../../tests/data/snapshots/nvidia-smi-q.xml");
        assert!(facts("nvidia_smi", "nvidia-smi-q.xml", clean, clean.len() as u64).hardware.is_empty());
        // The same GPU after an uncorrectable error: the volatile DRAM counter is no longer 0.
        let text = String::from_utf8_lossy(clean);
        let volatile = text.find("<volatile>").expect("a volatile ECC block");
        let at = volatile + text[volatile..].find("<dram_uncorrectable>0<").expect("a volatile DRAM counter");
        let broken = format!("{}<dram_uncorrectable>2<{}", &text[..at], &text[at + "<dram_uncorrectable>0<".len()..]);
        let hw = facts("nvidia_smi", "nvidia-smi-q.xml", broken.as_bytes(), broken.len() as u64).hardware;
        assert_eq!(hw.len(), 1, "{hw:?}");
        assert!(hw[0].1.contains("2 uncorrectable ECC errors"), "{hw:?}");

        let dmesg = b"[ 812.1] eth0: link up\n[ 8123.4] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n";
        let hw = facts("kernel_log", "dmesg.txt", dmesg, dmesg.len() as u64).hardware;
        assert!(matches!(hw.as_slice(), [(coroner_model::EventKind::Xid { code: 79, pid: Some(4242), .. }, _)]), "{hw:?}");
    }
}
