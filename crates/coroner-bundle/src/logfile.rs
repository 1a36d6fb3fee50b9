//! Plain log files: raw bytes, no capture times. Each line gets the time printed in it, or the last
//! printed time before it (lines keep their order), so the analysis can still place them.

use coroner_model::{LogLine, Nanos, Rank, Stream};
use coroner_parse::time::printed_time;

/// Whether the start of a file looks like text: few NULs and control bytes.
pub fn looks_like_text(head: &[u8]) -> bool {
    if head.is_empty() {
        return true;
    }
    let bad = head.iter().filter(|&&b| b == 0 || (b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x1b))).count();
    bad * 100 < head.len()
}

/// Cuts a line longer than [`crate::MAX_LINE_BYTES`], saying so at its end.
pub fn cap_line(bytes: &mut Vec<u8>) {
    coroner_model::cap_line(bytes);
}

/// Splits a raw log into lines with synthetic capture times. `fallback_ns` (the file's mtime)
/// dates lines when nothing in the file carries a time, and picks the year for glog times.
pub fn split_log(bytes: &[u8], rank: Option<Rank>, stream: Stream, fallback_ns: Nanos) -> Vec<LogLine> {
    let mut raw_lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if raw_lines.last().is_some_and(|l| l.is_empty()) {
        raw_lines.pop();
    }
    let printed: Vec<Option<Nanos>> = raw_lines
        .iter()
        .map(|l| {
            // The time a line prints comes after any launcher prefix (`[rank3]:[E1229 10:00:01...`).
            let rest = coroner_parse::prefix::split_rank_prefix(l).rest(l);
            let head = &rest[..rest.len().min(256)];
            printed_time(&String::from_utf8_lossy(head), fallback_ns)
        })
        .collect();
    let first_known = printed.iter().flatten().next().copied().unwrap_or(fallback_ns);
    let mut last = first_known;
    raw_lines
        .into_iter()
        .zip(printed)
        .enumerate()
        .map(|(i, (l, t))| {
            // Never step backwards: a line printed earlier than its predecessor keeps file order.
            let t = t.map_or(last, |t| t.max(last));
            last = t;
            let mut bytes = l.to_vec();
            cap_line(&mut bytes);
            LogLine { rank, stream, seq: i as u64, capture_ns: t, bytes }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_without_a_time_take_the_last_printed_one() {
        let log = b"2026-11-30 08:58:51,398 INFO step 1\nno time here\n2026-11-30 08:58:52,000 INFO step 2\n";
        let lines = split_log(log, Some(Rank(0)), Stream::Stdout, 0);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].capture_ns, lines[1].capture_ns);
        assert!(lines[2].capture_ns > lines[1].capture_ns);
        assert_eq!(lines[1].bytes, b"no time here");
    }

    #[test]
    fn a_prefixed_lines_own_time_is_read_after_its_prefix() {
        let lines = split_log(b"[rank3]:[E1229 10:00:01.000000000 ProcessGroupNCCL.cpp:616] x\n", Some(Rank(3)), Stream::Stderr, 1_790_000_000_000_000_000);
        assert_ne!(lines[0].capture_ns, 1_790_000_000_000_000_000, "the glog time is read");
    }

    #[test]
    fn binary_is_not_text_and_huge_lines_are_capped() {
        assert!(!looks_like_text(&[0u8; 100]));
        assert!(looks_like_text(b"hello\nworld\n"));
        let mut big = vec![b'x'; crate::MAX_LINE_BYTES + 100];
        cap_line(&mut big);
        assert!(big.ends_with(b"[coroner: truncated 100 bytes]"));
    }
}
