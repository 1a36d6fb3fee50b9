//! The feed: what the supervisor tells the shipper process, over one pipe, in order.
//!
//! The first record is the plan (JSON), then the child's lines as the supervisor captured and
//! numbered them, then at most one process end. The supervisor is the only writer and the
//! shipper the only reader; the feed ends when the supervisor closes its end (after the process
//! end) or dies (no process end: the shipper takes over the pass-through, see `shipping.rs`).
//!
//! Framing, little-endian: one tag byte, then
//! - `P` plan: `u32` length, JSON bytes;
//! - `L` line: `u8` stream (a `v1::StreamKind`), `u8` 1 if a rank follows, `u32` rank, `u64`
//!   seq, `i64` capture time, `u32` length, the line's bytes;
//! - `E` process end: `u8` flags (1 exit code, 2 signal), `i32` exit code, `i32` signal, `i64`
//!   when, `u64` lines the supervisor dropped or could not hand over.
//!
//! A reader that meets anything else stops: the two ends are one binary, so that is a bug, and
//! the shipper then behaves as if the supervisor had gone.

use crate::plan::Plan;
use crate::queue::Line;
use bytes::{Buf, Bytes, BytesMut};
use std::io::{self, Read};

const TAG_PLAN: u8 = b'P';
const TAG_LINE: u8 = b'L';
const TAG_END: u8 = b'E';
/// The longest record body a reader accepts (a line is at most 1 MiB plus its marker).
const MAX_BODY: u32 = 4 << 20;

/// How the child ended, as the supervisor saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub at_ns: i64,
    pub dropped: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Plan(Box<Plan>),
    Line(Line),
    End(End),
}

pub fn encode_plan(plan: &Plan, out: &mut Vec<u8>) {
    let json = serde_json::to_vec(plan).expect("a plan always serialises");
    out.push(TAG_PLAN);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
}

pub fn encode_line(line: &Line, out: &mut Vec<u8>) {
    out.push(TAG_LINE);
    out.push(u8::try_from(line.stream).unwrap_or(0));
    out.push(u8::from(line.rank.is_some()));
    out.extend_from_slice(&line.rank.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&line.seq.to_le_bytes());
    out.extend_from_slice(&line.capture_ns.to_le_bytes());
    out.extend_from_slice(&(line.raw.len() as u32).to_le_bytes());
    out.extend_from_slice(&line.raw);
}

pub fn encode_end(end: &End, out: &mut Vec<u8>) {
    out.push(TAG_END);
    out.push(u8::from(end.exit_code.is_some()) | (u8::from(end.signal.is_some()) << 1));
    out.extend_from_slice(&end.exit_code.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&end.signal.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&end.at_ns.to_le_bytes());
    out.extend_from_slice(&end.dropped.to_le_bytes());
}

/// Reads records from the feed in large reads; a line's bytes are a slice of the read buffer, not
/// a copy of their own (the shipper's hot path: one record per line of the job).
pub struct FeedReader<R> {
    src: R,
    buf: BytesMut,
    eof: bool,
}

/// How much the reader asks of the pipe at once.
const READ_CHUNK: usize = 256 << 10;

impl<R: Read> FeedReader<R> {
    pub fn new(src: R) -> Self {
        FeedReader { src, buf: BytesMut::new(), eof: false }
    }

    /// Whether a whole record is already buffered (the next `next` will not read the pipe).
    pub fn has_buffered_record(&self) -> bool {
        matches!(record_len(&self.buf), Ok(Some(n)) if self.buf.len() >= n)
    }

    /// The next record; `Ok(None)` at the end of the feed. A record torn by the end of the feed,
    /// or one this reader does not know, is an error.
    pub fn next(&mut self) -> io::Result<Option<Record>> {
        loop {
            if let Some(n) = record_len(&self.buf)? {
                if self.buf.len() >= n {
                    let record = self.buf.split_to(n).freeze();
                    return decode(record).map(Some);
                }
            }
            if self.eof {
                return if self.buf.is_empty() { Ok(None) } else { Err(io::ErrorKind::UnexpectedEof.into()) };
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
        let start = self.buf.len();
        let room = self.buf.capacity() - start;
        self.buf.resize(start + room, 0);
        loop {
            match self.src.read(&mut self.buf[start..]) {
                Ok(n) => {
                    self.buf.truncate(start + n);
                    self.eof = n == 0;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.buf.truncate(start);
                    return Err(e);
                }
            }
        }
    }
}

/// The whole length of the record at the start of `buf`, once its header is there.
fn record_len(buf: &[u8]) -> io::Result<Option<usize>> {
    let Some(&tag) = buf.first() else { return Ok(None) };
    let (header, len_at) = match tag {
        TAG_PLAN => (1 + 4, 1),
        TAG_LINE => (1 + 22 + 4, 23),
        TAG_END => return Ok(Some(1 + 25)),
        other => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("unknown feed record {other:#04x}"))),
    };
    if buf.len() < header {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[len_at..len_at + 4].try_into().expect("4 bytes"));
    if len > MAX_BODY {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a feed record of {len} bytes")));
    }
    Ok(Some(header + len as usize))
}

/// Decodes one whole record (as `record_len` framed it).
fn decode(mut b: Bytes) -> io::Result<Record> {
    match b.get_u8() {
        TAG_PLAN => {
            b.advance(4);
            let plan = serde_json::from_slice(&b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("plan: {e}")))?;
            Ok(Record::Plan(Box::new(plan)))
        }
        TAG_LINE => {
            let stream = i32::from(b.get_u8());
            let has_rank = b.get_u8() == 1;
            let rank = b.get_u32_le();
            let seq = b.get_u64_le();
            let capture_ns = b.get_i64_le();
            b.advance(4);
            Ok(Record::Line(Line { raw: b, seq, capture_ns, stream, rank: has_rank.then_some(rank) }))
        }
        _ => {
            let flags = b.get_u8();
            let code = b.get_i32_le();
            let signal = b.get_i32_le();
            Ok(Record::End(End {
                exit_code: (flags & 1 != 0).then_some(code),
                signal: (flags & 2 != 0).then_some(signal),
                at_ns: b.get_i64_le(),
                dropped: b.get_u64_le(),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64, rank: Option<u32>, text: &[u8]) -> Line {
        Line { raw: Bytes::copy_from_slice(text), seq, capture_ns: -5 + seq as i64, stream: 2, rank }
    }

    #[test]
    fn records_read_back_in_order() {
        let mut buf = Vec::new();
        let lines = [line(0, None, b"hello \xff\x00"), line(1, Some(7), b""), line(2, Some(0), &[b'x'; 70_000])];
        for l in &lines {
            encode_line(l, &mut buf);
        }
        let end = End { exit_code: None, signal: Some(9), at_ns: 123, dropped: 4 };
        encode_end(&end, &mut buf);
        let mut r = FeedReader::new(&buf[..]);
        for l in &lines {
            assert_eq!(r.next().unwrap(), Some(Record::Line(l.clone())));
        }
        assert_eq!(r.next().unwrap(), Some(Record::End(end)));
        assert_eq!(r.next().unwrap(), None);
    }

    /// Hands out its bytes a few at a time, like a pipe.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(self.0.len()).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn the_reader_reads_every_record_whatever_the_read_sizes() {
        let mut buf = Vec::new();
        let lines: Vec<Line> = (0..500).map(|i| line(i, (i % 3 == 0).then_some(i as u32), &vec![b'a' + (i % 26) as u8; (i * 37 % 3000) as usize])).collect();
        for l in &lines {
            encode_line(l, &mut buf);
        }
        let end = End { exit_code: Some(0), signal: None, at_ns: 9, dropped: 0 };
        encode_end(&end, &mut buf);
        for piece in [1, 7, 4096, 1 << 20] {
            let mut r = FeedReader::new(Trickle(&buf, piece));
            for l in &lines {
                assert_eq!(r.next().unwrap(), Some(Record::Line(l.clone())), "read {piece} at a time");
            }
            assert_eq!(r.next().unwrap(), Some(Record::End(end.clone())));
            assert_eq!(r.next().unwrap(), None);
        }
        let mut r = FeedReader::new(&buf[..buf.len() - 3]);
        let mut last = Ok(None);
        for _ in 0..=lines.len() {
            last = r.next();
        }
        assert!(last.is_err(), "the torn end is an error, not a record");
    }

    #[test]
    fn a_torn_or_foreign_record_is_an_error_not_a_line() {
        let mut buf = Vec::new();
        encode_line(&line(0, None, b"abcdef"), &mut buf);
        buf.truncate(buf.len() - 2);
        let mut r = FeedReader::new(&buf[..]);
        assert!(r.next().is_err());
        assert!(FeedReader::new(&b"Z123"[..]).next().is_err());
        let mut huge = vec![TAG_LINE];
        huge.extend_from_slice(&[0u8; 22]);
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(FeedReader::new(&huge[..]).next().is_err(), "no 4 GiB allocation for a bad length");
    }
}
