//! `rank<R>.lines.jsonl`: one JSON object per captured line, `{"ts_ns", "stream", "line"}`.

use coroner_model::{LogLine, Rank, Stream};
use serde::Deserialize;

#[derive(Deserialize)]
struct Record {
    ts_ns: i64,
    stream: String,
    line: String,
}

/// Parses a lines.jsonl file. Bad records become warnings (with their line number); the rest stand.
pub fn parse_jsonl(bytes: &[u8], rank: Option<Rank>, warnings: &mut Vec<String>, name: &str) -> Vec<LogLine> {
    let mut out = Vec::new();
    let mut seqs = [0u64; 3];
    for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let rec: Record = match serde_json::from_slice(raw) {
            Ok(r) => r,
            Err(e) => {
                if warnings.len() < 50 {
                    warnings.push(format!("{name}:{}: skipped a record that is not a capture line ({e})", i + 1));
                }
                continue;
            }
        };
        let stream = Stream::parse(&rec.stream).unwrap_or(Stream::File);
        let slot = stream as usize;
        let mut bytes = rec.line.into_bytes();
        crate::logfile::cap_line(&mut bytes);
        out.push(LogLine { rank, stream, seq: seqs[slot], capture_ns: rec.ts_ns, bytes });
        seqs[slot] += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_records_are_warned_about_and_skipped() {
        let data = b"{\"ts_ns\": 5, \"stream\": \"stderr\", \"line\": \"a\"}\nnot json\n\n{\"ts_ns\": 6, \"stream\": \"stdout\", \"line\": \"b\"}\n";
        let mut w = Vec::new();
        let lines = parse_jsonl(data, Some(Rank(1)), &mut w, "rank1.lines.jsonl");
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].stream, lines[0].seq), (Stream::Stderr, 0));
        assert_eq!((lines[1].stream, lines[1].seq), (Stream::Stdout, 0));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("rank1.lines.jsonl:2"), "{w:?}");
    }
}
