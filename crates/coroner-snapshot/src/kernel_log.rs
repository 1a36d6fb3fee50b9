//! Kernel log snapshots (a `dmesg` tail): the Xid, ECC, AER and OOM-killer lines, read with the
//! same classifier the log parsers use for kernel lines in a rank's output.

use coroner_model::EventKind;

/// The kernel events in a log, with the line each came from.
pub fn parse(bytes: &[u8]) -> Vec<(EventKind, String)> {
    let text = String::from_utf8_lossy(bytes);
    let mut out = Vec::new();
    for line in text.lines() {
        let mut events = Vec::new();
        if coroner_parse::kernel::classify(line, &mut events) {
            out.extend(events.into_iter().map(|e| (e, line.trim().to_string())));
        }
    }
    out
}

/// One line per kind of finding, then the first few lines themselves.
pub fn highlights(bytes: &[u8]) -> Vec<String> {
    let events = parse(bytes);
    let xids: Vec<String> = events
        .iter()
        .filter_map(|(e, _)| match e {
            EventKind::Xid { code, pci, .. } => Some(format!("Xid {code} on {pci}")),
            _ => None,
        })
        .collect();
    let ooms: Vec<String> = events
        .iter()
        .filter_map(|(e, _)| match e {
            EventKind::OomKill { pid, process } => {
                Some(format!("{}{}", process.as_deref().unwrap_or("a process"), pid.map(|p| format!(" (pid {p})")).unwrap_or_default()))
            }
            _ => None,
        })
        .collect();
    let errors = events.iter().filter(|(e, _)| matches!(e, EventKind::ErrorLine { .. })).count();
    let mut out = Vec::new();
    if !xids.is_empty() {
        let mut x = xids.clone();
        x.dedup();
        out.push(format!("kernel: {} Xid lines: {}", xids.len(), x.join(", ")));
    }
    if !ooms.is_empty() {
        out.push(format!("kernel: OOM killer took {}", ooms.join(", ")));
    }
    if errors > 0 {
        out.push(format!("kernel: {errors} hardware error lines (ECC, AER, machine check, segfault)"));
    }
    if out.is_empty() {
        out.push("kernel: no Xid, ECC or OOM-killer lines".into());
    }
    out.extend(events.iter().take(3).map(|(_, l)| l.chars().take(200).collect()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_dmesg_is_clean() {
        let d = include_bytes!("../../../tests/data/snapshots/dmesg-tail.txt");
        assert_eq!(highlights(d), vec!["kernel: no Xid, ECC or OOM-killer lines"]);
    }

    #[test]
    fn xid_and_oom_lines() {
        let d = b"[  1.0] boot\n[12345.678] NVRM: Xid (PCI:0000:0a:00): 79, pid=12345, name=python, GPU has fallen off the bus.\n\
[12346.0] Out of memory: Killed process 4242 (python3) total-vm:1kB\n\xff\xfe binary junk\n";
        let h = highlights(d);
        assert_eq!(h[0], "kernel: 1 Xid lines: Xid 79 on 0000:0a:00");
        assert_eq!(h[1], "kernel: OOM killer took python3 (pid 4242)");
        assert!(h[2].contains("NVRM: Xid"));
    }
}
