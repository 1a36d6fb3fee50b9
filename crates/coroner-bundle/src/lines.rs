//! `rank<R>.lines.jsonl`: one JSON object per captured line, `{"ts_ns", "stream", "line"}`.

use coroner_model::{LogLine, Rank, Stream};
use serde::Deserialize;

#[derive(Deserialize)]
struct Record {
    ts_ns: i64,
    stream: String,
    line: String,
}

/// The longest record kept whole: JSON escapes a line of [`crate::MAX_LINE_BYTES`] into up to six
/// times as many bytes (`\u0000`). A longer record is cut, fails to parse and is warned about.
pub const MAX_RECORD_BYTES: usize = 6 * crate::MAX_LINE_BYTES;

/// Reads a lines.jsonl file one record at a time. Bad records become warnings (with their line
/// number); the rest stand.
pub struct Jsonl {
    rank: Option<Rank>,
    seqs: [u64; 3],
    record: usize,
}

impl Jsonl {
    pub fn new(rank: Option<Rank>) -> Self {
        Jsonl { rank, seqs: [0; 3], record: 0 }
    }

    /// The next raw record (one line of the file) as a captured line, if it is one.
    pub fn line(&mut self, raw: &[u8], warnings: &mut Vec<String>, name: &str) -> Option<LogLine> {
        self.record += 1;
        if raw.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let rec: Record = match serde_json::from_slice(raw) {
            Ok(r) => r,
            Err(e) => {
                if warnings.len() < 50 {
                    warnings.push(format!("{name}:{}: skipped a record that is not a capture line ({e})", self.record));
                }
                return None;
            }
        };
        let stream = Stream::parse(&rec.stream).unwrap_or(Stream::File);
        let slot = stream as usize;
        let mut bytes = rec.line.into_bytes();
        crate::logfile::cap_line(&mut bytes);
        let line = LogLine { rank: self.rank, stream, seq: self.seqs[slot], capture_ns: rec.ts_ns, bytes };
        self.seqs[slot] += 1;
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_records_are_warned_about_and_skipped() {
        let data = b"{\"ts_ns\": 5, \"stream\": \"stderr\", \"line\": \"a\"}\nnot json\n\n{\"ts_ns\": 6, \"stream\": \"stdout\", \"line\": \"b\"}\n";
        let mut w = Vec::new();
        let mut jsonl = Jsonl::new(Some(Rank(1)));
        let lines: Vec<LogLine> = data.split(|b| *b == b'\n').filter_map(|raw| jsonl.line(raw, &mut w, "rank1.lines.jsonl")).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].stream, lines[0].seq), (Stream::Stderr, 0));
        assert_eq!((lines[1].stream, lines[1].seq), (Stream::Stdout, 0));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("rank1.lines.jsonl:2"), "{w:?}");
    }
}
