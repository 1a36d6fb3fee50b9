//! A log exported from a console that prints each record's stamp on a line of its own, the record
//! on the next (CloudWatch's export of a SageMaker job: `2024-11-15T06:01:13.169Z` then
//! `Traceback (most recent call last): ...`). The stamp is put back before its record, where a
//! container runtime would have written it (`2024-11-15T06:01:13.169Z Traceback ...`), so the
//! record is read with its time and the stamp alone makes no line of its own.

use coroner_model::LogLine;

/// Holds a stamp line until the record it stamps arrives.
#[derive(Debug, Default)]
pub(crate) struct StampLines {
    pending: Option<LogLine>,
}

impl StampLines {
    /// The next line of the log; gives back the line to file, if any (a stamp waits for its record).
    pub(crate) fn push(&mut self, line: LogLine) -> Option<LogLine> {
        let stamp = is_stamp(&line.bytes);
        match self.pending.take() {
            // Two stamps in a row: the first stamped nothing and stays as it was.
            Some(held) if stamp => {
                self.pending = Some(line);
                Some(held)
            }
            Some(mut held) => {
                held.bytes.push(b' ');
                held.bytes.extend_from_slice(&line.bytes);
                Some(held)
            }
            None if stamp => {
                self.pending = Some(line);
                None
            }
            None => Some(line),
        }
    }

    /// The end of the log: a last stamp that stamped nothing.
    pub(crate) fn flush(&mut self) -> Option<LogLine> {
        self.pending.take()
    }
}

/// A line that is only an RFC 3339 stamp with its zone: `2024-11-15T06:01:13.169Z`,
/// `2024-11-15T06:01:13+00:00`.
fn is_stamp(bytes: &[u8]) -> bool {
    let s = bytes.trim_ascii();
    let digits = |r: std::ops::Range<usize>| s.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let shaped = s.len() >= 20 && s.len() <= 35 && digits(0..4) && s[4] == b'-' && s[7] == b'-' && s[10] == b'T' && s[13] == b':' && s[16] == b':';
    shaped
        && digits(11..13)
        && (s.ends_with(b"Z") || s[19..].iter().any(|b| matches!(b, b'+' | b'-')))
        && s[19..].iter().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'Z' | b'+' | b'-' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::Stream;

    fn line(seq: u64, t: &str) -> LogLine {
        LogLine { rank: None, stream: Stream::File, seq, capture_ns: 0, bytes: t.as_bytes().to_vec() }
    }

    #[test]
    fn a_stamp_on_a_line_of_its_own_goes_before_the_record_after_it() {
        let mut s = StampLines::default();
        assert!(s.push(line(0, "2025-03-01T10:20:30.400Z")).is_none());
        let joined = s.push(line(1, "RuntimeError: the store went away")).expect("the stamped record");
        assert_eq!((joined.seq, joined.text().into_owned()), (0, "2025-03-01T10:20:30.400Z RuntimeError: the store went away".to_string()));
        // Two stamps in a row, a last stamp: each stays a line of its own.
        assert!(s.push(line(2, "2025-03-01T10:20:31+00:00")).is_none());
        assert_eq!(s.push(line(3, "2025-03-01T10:20:32Z")).map(|l| l.seq), Some(2));
        assert_eq!(s.flush().map(|l| l.seq), Some(3));
        // A record that begins with a stamp is a record.
        assert_eq!(s.push(line(4, "2025-03-01T10:20:33Z INFO step 5")).map(|l| l.seq), Some(4));
        assert!(!is_stamp(b"2025-03-01 10:20:33"), "no zone: a time a program printed, not a collector's stamp");
    }
}
