//! Plain log files: raw bytes, no capture times. Each line gets the time printed in it, or the last
//! printed time before it (lines keep their order), so the analysis can still place them
//! ([`Stamper`], one line at a time; `plain_log.rs` reads the file).

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

/// The time a plain log's line prints, read after any launcher prefix
/// (`[rank3]:[E1229 10:00:01...`) in its first 256 bytes; `fallback_ns` picks the year for glog times.
pub fn printed_time_of(line: &[u8], fallback_ns: Nanos) -> Option<Nanos> {
    let rest = coroner_parse::prefix::split_rank_prefix(line).rest(line);
    printed_time(&String::from_utf8_lossy(&rest[..rest.len().min(256)]), fallback_ns)
}

/// Gives a plain log's lines, in file order, their synthetic capture times: the time a line
/// prints, else the last printed time before it, else (before the first printed time) the first
/// one in the file, `first_known` (a first pass finds it; the file's mtime when nothing in the
/// file carries a time). Never steps backwards: a line printed earlier than its predecessor
/// keeps file order.
pub struct Stamper {
    rank: Option<Rank>,
    stream: Stream,
    fallback_ns: Nanos,
    last: Nanos,
    seq: u64,
}

impl Stamper {
    pub fn new(rank: Option<Rank>, stream: Stream, fallback_ns: Nanos, first_known: Option<Nanos>) -> Self {
        Stamper { rank, stream, fallback_ns, last: first_known.unwrap_or(fallback_ns), seq: 0 }
    }

    /// The next line of the file (already cut to the line limit).
    pub fn stamp(&mut self, bytes: Vec<u8>) -> LogLine {
        let t = printed_time_of(&bytes, self.fallback_ns).map_or(self.last, |t| t.max(self.last));
        self.last = t;
        let line = LogLine { rank: self.rank, stream: self.stream, seq: self.seq, capture_ns: t, bytes };
        self.seq += 1;
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_log(log: &[u8], rank: Option<Rank>, stream: Stream, fallback_ns: Nanos) -> Vec<LogLine> {
        let raw: Vec<&[u8]> = log.strip_suffix(b"\n").unwrap_or(log).split(|b| *b == b'\n').collect();
        let first = raw.iter().find_map(|l| printed_time_of(l, fallback_ns));
        let mut stamper = Stamper::new(rank, stream, fallback_ns, first);
        raw.into_iter().map(|l| stamper.stamp(l.to_vec())).collect()
    }

    #[test]
    fn lines_before_the_first_printed_time_take_it() {
        let log = b"no time yet\n2026-11-30 08:58:51,398 INFO step 1\n";
        let lines = split_log(log, Some(Rank(0)), Stream::Stdout, 5);
        assert_eq!(lines[0].capture_ns, lines[1].capture_ns);
        assert_ne!(lines[0].capture_ns, 5);
        assert_eq!(split_log(b"x\ny\n", None, Stream::File, 5)[1].capture_ns, 5, "no time at all: the fallback");
    }

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
