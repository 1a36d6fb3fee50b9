//! What the pasted-log tests share: one rank's lines through a `RankParser`, the events out.

use coroner_model::{Event, LogLine, Stream};
use coroner_parse::RankParser;

const T0: i64 = 1_796_029_127_092_747_587; // 2026-11-30T08:58:47Z

/// Parses `lines` as one process's stderr, a microsecond apart, and closes what is open.
pub fn run(lines: &[&str]) -> Vec<Event> {
    let mut p = RankParser::new(None);
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let line = LogLine { rank: None, stream: Stream::Stderr, seq: i as u64, capture_ns: T0 + i as i64 * 1000, bytes: l.as_bytes().to_vec() };
        p.push(&line, &mut out);
    }
    p.finish(&mut out);
    out
}
