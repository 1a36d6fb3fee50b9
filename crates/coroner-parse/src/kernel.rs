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
    if let Some(at) = t.find(" invoked oom-killer") {
        // `python invoked oom-killer: gfp_mask=...`: the process that asked for memory; the one
        // killed is named on a later line, which an excerpt may lack.
        let process = t[..at].rsplit([' ', ']']).next().filter(|p| !p.is_empty()).map(str::to_string);
        out.push(EventKind::OomKill { pid: None, process });
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
    // The driver reporting it cannot use the GPU (outside an Xid): a GSP call that failed with
    // a reset required, a probe that failed, a GPU that stopped answering.
    let driver_failure = t.contains("NVRM:")
        && [
            "Reset required",
            "NV_ERR_RESET_REQUIRED",
            "probe routine failed",
            "RmInitAdapter failed",
            "not responding",
            "GPU has fallen off",
            "GSP",
            "timeout",
        ]
        .iter()
        .any(|w| t.contains(w))
        && (t.contains("fail") || t.contains("Reset required") || t.contains("not responding") || t.contains("timeout"));
    if driver_failure
        || (t.contains("ECC") && (t.contains("ncorrectable") || t.contains("double-bit") || t.contains("DBE")))
        || t.contains("fallen off the bus")
        || t.contains("Machine check")
        || t.contains("segfault at ")
    {
        out.push(EventKind::ErrorLine { message: msg() });
        return true;
    }
    false
}

/// Whether a line has the shape of a kernel log line: a dmesg header (`[ 4521.110] `,
/// `[  +0.000005] `, `dmesg -T`'s `[Fri Jan 29 23:42:34 2021] `), a syslog or `journalctl -k`
/// header naming `kernel:`, or a driver tag (`NVRM:`) at its start. What decides that a whole file
/// is a kernel log (`dmesg > dmesg.txt`) rather than a process's output.
pub fn looks_like_kernel_line(t: &str) -> bool {
    let t = t.trim_start();
    // Kernel messages pasted without their header.
    const BARE: [&str; 8] =
        ["NVRM:", "kernel:", "Out of memory: Kill", "Memory cgroup out of memory", "oom-kill:", "oom_reaper:", "Killed process ", "pcieport "];
    if BARE.iter().any(|b| t.starts_with(b)) {
        return true;
    }
    if let Some(r) = t.strip_prefix('[') {
        let Some(close) = r.find(']').filter(|c| *c <= 40) else { return false };
        let inner = r[..close].trim();
        let relative = inner.strip_prefix('+').unwrap_or(inner);
        let uptime = relative
            .split_once('.')
            .is_some_and(|(a, b)| !a.is_empty() && a.bytes().all(|c| c.is_ascii_digit()) && !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()));
        const DAYS: [&str; 7] = ["Mon ", "Tue ", "Wed ", "Thu ", "Fri ", "Sat ", "Sun "];
        let human = DAYS.iter().any(|d| inner.starts_with(d)) && inner.bytes().filter(|c| *c == b':').count() == 2;
        return uptime || human;
    }
    // `Nov 30 08:58:51 gpu7 kernel: ...` (syslog, journalctl -k)
    let mut words = t.split_ascii_whitespace();
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    words.next().is_some_and(|m| MONTHS.contains(&m)) && words.take(4).any(|w| w == "kernel:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_line_shapes() {
        for t in [
            "[ 4521.110] oom-kill:constraint=CONSTRAINT_NONE",
            "[  +0.000005] pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected",
            "[Fri Jan 29 23:42:34 2021] NVRM: Xid (PCI:0000:db:00): 31, pid=13641",
            "Nov 30 08:58:51 gpu7 kernel: NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error",
            "NVRM: GPU at PCI:0000:3b:00: GPU-0e8f",
            "Memory cgroup out of memory: Killed process 629 (python) total-vm:14119556kB",
        ] {
            assert!(looks_like_kernel_line(t), "{t}");
        }
        for t in [
            "[rank0]: Traceback",
            "[2026-11-30 08:58:51,398] INFO x",
            "2026-11-30 08:58:51 kernel: x",
            "[E ProcessGroupNCCL.cpp:587] x",
            "Traceback (most recent call last):",
        ] {
            assert!(!looks_like_kernel_line(t), "{t}");
        }
    }

    fn one(t: &str) -> Option<EventKind> {
        let mut out = Vec::new();
        classify(t, &mut out);
        out.into_iter().next()
    }

    #[test]
    fn xid_versions() {
        assert_eq!(
            one("[12345.678] NVRM: Xid (PCI:0000:0a:00): 79, pid=12345, name=python, GPU has fallen off the bus."),
            Some(EventKind::Xid {
                pci: "0000:0a:00".into(),
                code: 79,
                pid: Some(12345),
                message: "NVRM: Xid (PCI:0000:0a:00): 79, pid=12345, name=python, GPU has fallen off the bus.".into()
            })
        );
        assert!(matches!(one("Nov 30 08:58:51 gpu7 kernel: NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."), Some(EventKind::Xid { code: 48, pid: None, .. })));
        assert!(matches!(
            one("NVRM: Xid (0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1): Out Of Range Address"),
            Some(EventKind::Xid { code: 13, .. })
        ));
    }

    #[test]
    fn oom_killer_and_hardware() {
        assert_eq!(
            one("[ 4521.112] Out of memory: Killed process 12345 (python) total-vm:123456kB, anon-rss:1000kB"),
            Some(EventKind::OomKill { pid: Some(12345), process: Some("python".into()) })
        );
        assert_eq!(one("[ 4521.110] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=python3,pid=777,uid=1000"), Some(EventKind::OomKill { pid: Some(777), process: Some("python3".into()) }));
        assert!(matches!(one("pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0"), Some(EventKind::ErrorLine { .. })));
        assert!(matches!(one("pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0"), Some(EventKind::Warning { .. })));
        assert!(matches!(
            one("Nov 30 08:58:51 h kernel: python[1234]: segfault at 0 ip 00007f sp 00007f error 4 in libc.so.6"),
            Some(EventKind::ErrorLine { .. })
        ));
        assert!(one("[    0.155370] devtmpfs: initialized").is_none());
    }
}
