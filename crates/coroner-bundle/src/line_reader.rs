//! Lines from a file or a stream with bounded memory: whatever the input (a 20 GB log, a 10 MB
//! line with no newline, NULs, invalid UTF-8), one line holds at most [`crate::MAX_LINE_BYTES`]
//! plus its marker, and the reader itself one `BufReader` buffer ([`BUFFER_BYTES`]).
//!
//! A line is the bytes up to `\n` (not included; a `\r` stays, as the parsers expect). A line
//! longer than the limit keeps its first [`crate::MAX_LINE_BYTES`] bytes and ends with
//! ` [coroner: truncated N bytes]`, exactly as [`coroner_model::cap_line`] cuts it, but the cut
//! bytes are skipped as they are read, never held. The last line needs no newline; an empty
//! input has no lines.

use coroner_model::{truncation_marker, MARKER_SLACK, MAX_LINE_BYTES};
use std::io::{self, BufRead, BufReader, Read};

/// The read buffer: large enough that a read is one system call per 256 KiB, small beside a line's
/// limit of 1 MiB.
pub const BUFFER_BYTES: usize = 256 << 10;

pub struct LineReader<R> {
    inner: BufReader<R>,
    /// The longest line kept whole.
    limit: usize,
    /// Bytes consumed from the input so far (lines, newlines and cut bytes).
    consumed: u64,
    /// Lines cut at the limit so far.
    cut_lines: u64,
}

impl<R: Read> LineReader<R> {
    /// Lines of a plain log: cut at [`crate::MAX_LINE_BYTES`].
    pub fn new(input: R) -> Self {
        Self::with_limit(input, MAX_LINE_BYTES)
    }

    /// Lines cut at `limit` bytes (a JSON record escapes a line of the limit into more bytes).
    pub fn with_limit(input: R, limit: usize) -> Self {
        LineReader { inner: BufReader::with_capacity(BUFFER_BYTES, input), limit, consumed: 0, cut_lines: 0 }
    }

    /// Bytes of the input consumed so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// How many lines were longer than the limit and cut.
    pub fn cut_lines(&self) -> u64 {
        self.cut_lines
    }

    /// The next line, without its newline; `None` at the end of the input.
    pub fn next_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        let keep = self.limit + MARKER_SLACK;
        let mut line = Vec::new();
        let mut len = 0u64; // the whole line's length, kept bytes and skipped ones
        let mut any = false;
        loop {
            let buf = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                if !any {
                    return Ok(None);
                }
                break;
            }
            any = true;
            let (piece, used, done) = match memchr::memchr(b'\n', buf) {
                Some(i) => (&buf[..i], i + 1, true),
                None => (buf, buf.len(), false),
            };
            let room = (keep + 1).saturating_sub(line.len());
            line.extend_from_slice(&piece[..piece.len().min(room)]);
            len += piece.len() as u64;
            self.inner.consume(used);
            self.consumed += used as u64;
            if done {
                break;
            }
        }
        if len > keep as u64 {
            line.truncate(self.limit);
            line.extend_from_slice(truncation_marker(len - self.limit as u64).as_bytes());
            self.cut_lines += 1;
        }
        Ok(Some(line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> Vec<Vec<u8>> {
        let mut r = LineReader::new(input);
        let mut out = Vec::new();
        while let Some(l) = r.next_line().expect("in memory") {
            out.push(l);
        }
        assert_eq!(r.consumed(), input.len() as u64);
        out
    }

    #[test]
    fn lines_split_like_the_whole_file_split() {
        for input in [&b""[..], b"a", b"a\n", b"a\n\n", b"a\r\nb", b"\n\nx\n", b"a\0b\xff\nc"] {
            let mut want: Vec<Vec<u8>> = input.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
            if want.last().is_some_and(Vec::is_empty) {
                want.pop();
            }
            assert_eq!(all(input), want, "{input:?}");
        }
    }

    #[test]
    fn a_line_over_the_limit_is_cut_as_cap_line_cuts_it() {
        for extra in [0usize, MARKER_SLACK, MARKER_SLACK + 1, 3 * BUFFER_BYTES + 7] {
            let mut big = vec![b'x'; MAX_LINE_BYTES + extra];
            let mut input = big.clone();
            input.extend_from_slice(b"\nnext\n");
            coroner_model::cap_line(&mut big);
            let lines = all(&input);
            assert_eq!(lines.len(), 2, "{extra}");
            assert_eq!(lines[0], big, "{extra}");
            assert_eq!(lines[1], b"next");
        }
    }

    /// A 10 MB line with no newline at all: one cut line, and the reader never holds it.
    #[test]
    fn a_huge_line_without_a_newline_is_cut_and_never_held_whole() {
        let total = 10 << 20;
        let mut input = crate::bounded_tests::Generated::new(total, |_| b'y');
        let mut r = LineReader::new(&mut input);
        let line = r.next_line().expect("in memory").expect("one line");
        assert!(line.len() < MAX_LINE_BYTES + 100, "{}", line.len());
        let marker = truncation_marker((total - MAX_LINE_BYTES) as u64);
        assert!(line.ends_with(marker.as_bytes()), "{:?}", String::from_utf8_lossy(&line[line.len() - 60..]));
        assert_eq!(r.next_line().expect("in memory"), None);
        assert_eq!((r.cut_lines(), r.consumed()), (1, total as u64));
        assert!(line.capacity() < 2 * (MAX_LINE_BYTES + MARKER_SLACK + BUFFER_BYTES), "the line's buffer grew to {}", line.capacity());
    }
}
