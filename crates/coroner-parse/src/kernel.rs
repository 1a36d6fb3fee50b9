//! Kernel and system lines, with or without a dmesg `[12345.678]` or syslog
//! `Nov 30 08:58:51 host kernel:` header: NVRM Xid, the OOM killer, PCIe AER and ECC reports,
//! user-space segfault reports.

use crate::util::{leading_u64, num_after};
use coroner_model::EventKind;

/// Reads a line that holds one of the kernel markers (`NVRM:`, `Killed process`, `oom-kill:`,
/// `AER:`, `segfault at`, `ECC`, `fallen off the bus`, `Machine check`; the caller prefilters).
pub fn classify(t: &str, out: &mut Vec<EventKind>) -> bool {
    if let Some(at) = t.find("NVRM: Xid (") {
        let msg = &t[at..];
        let r = &msg["NVRM: Xid (".len()..];
        let Some(close) = r.find("):") else { return false };
        let pci = r[..close].strip_prefix("PCI:").unwrap_or(&r[..close]).to_string();
        let rest = r[close + 2..].trim_start();
        let Some(code) = leading_u64(rest).and_then(|v| u32::try_from(v).ok()) else { return false };
        let pid = num_after(rest, "pid=").and_then(|v| u32::try_from(v).ok());
        out.push(EventKind::Xid { pci, code, pid, message: msg.trim_end().to_string() });
        return true;
    }
    if let Some(at) = t.find("Killed process ") {
        let r = &t[at + "Killed process ".len()..];
        let pid = leading_u64(r).and_then(|v| u32::try_from(v).ok());
        let process = r.find('(').and_then(|o| r[o + 1..].find(')').map(|c| r[o + 1..o + 1 + c].to_string()));
        out.push(EventKind::OomKill { pid, process });
        return true;
    }
    if let Some(at) = t.find("oom-kill:") {
        let r = &t[at..];
        let pid = num_after(r, ",pid=").and_then(|v| u32::try_from(v).ok());
        let process = r.find(",task=").map(|i| {
            let v = &r[i + 6..];
            v[..v.find(',').unwrap_or(v.len())].to_string()
        });
        out.push(EventKind::OomKill { pid, process });
        return true;
    }
    let msg = || {
        // Drop a dmesg / syslog header up to `kernel: ` when present.
        t.find("kernel: ").map(|i| &t[i + 8..]).unwrap_or(t).trim().to_string()
    };
    if t.contains("AER:") {
        if t.contains("Uncorrect") || t.contains("Fatal") {
            out.push(EventKind::ErrorLine { message: msg() });
        } else {
            out.push(EventKind::Warning { message: msg() });
        }
        return true;
    }
    if (t.contains("ECC") && (t.contains("ncorrectable") || t.contains("double-bit") || t.contains("DBE")))
        || t.contains("fallen off the bus")
        || t.contains("Machine check")
        || t.contains("segfault at ")
    {
        out.push(EventKind::ErrorLine { message: msg() });
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(t: &str) -> Option<EventKind> {
        let mut out = Vec::new();
        classify(t, &mut out);
        out.into_iter().next()
    }

    #[test]
    fn xid_versions() {
        assert_eq!(
            one("[12345.678] NVRM: Xid (PCI:0000:0a:00): 79, pid=12345, name=python, GPU has fallen off the bus."),
            Some(EventKind::Xid { pci: "0000:0a:00".into(), code: 79, pid: Some(12345), message: "NVRM: Xid (PCI:0000:0a:00): 79, pid=12345, name=python, GPU has fallen off the bus.".into() })
        );
        assert!(matches!(one("Nov 30 08:58:51 gpu7 kernel: NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."), Some(EventKind::Xid { code: 48, pid: None, .. })));
        assert!(matches!(one("NVRM: Xid (0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1): Out Of Range Address"), Some(EventKind::Xid { code: 13, .. })));
    }

    #[test]
    fn oom_killer_and_hardware() {
        assert_eq!(one("[ 4521.112] Out of memory: Killed process 12345 (python) total-vm:123456kB, anon-rss:1000kB"), Some(EventKind::OomKill { pid: Some(12345), process: Some("python".into()) }));
        assert_eq!(one("[ 4521.110] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=python3,pid=777,uid=1000"), Some(EventKind::OomKill { pid: Some(777), process: Some("python3".into()) }));
        assert!(matches!(one("pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0"), Some(EventKind::ErrorLine { .. })));
        assert!(matches!(one("pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0"), Some(EventKind::Warning { .. })));
        assert!(matches!(one("Nov 30 08:58:51 h kernel: python[1234]: segfault at 0 ip 00007f sp 00007f error 4 in libc.so.6"), Some(EventKind::ErrorLine { .. })));
        assert!(one("[    0.155370] devtmpfs: initialized").is_none());
    }
}
