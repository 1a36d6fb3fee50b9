//! The feed: what the supervisor tells the shipper process, over one pipe, in order.
//!
//! The first record is the plan (JSON), then the child's output as the supervisor read it (each
//! read with its capture time, and a gap where reads were dropped), then at most one process end.
//! The supervisor is the only writer and the shipper the only reader; the feed ends when the
//! supervisor closes its end (after the process end) or dies (no process end: the shipper takes
//! over the pass-through, see `shipping.rs`).
//!
//! Framing, little-endian: one tag byte, then
//! - `P` plan: `u32` length, JSON bytes;
//! - `C` chunk: `u8` stream (a `v1::StreamKind`), `i64` capture time, `u32` length, the bytes;
//! - `G` gap: `u8` stream, `u64` lines dropped, `u64` bytes dropped;
//! - `E` process end: `u8` flags (1 exit code, 2 signal), `i32` exit code, `i32` signal, `i64`
//!   when, `u64` lines the supervisor could not hand over (no shipper ran).
//!
//! A reader that meets anything else stops: the two ends are one binary, so that is a bug, and
//! the shipper then behaves as if the supervisor had gone.

use crate::chunks::Entry;
use crate::plan::Plan;
use bytes::{Buf, Bytes, BytesMut};
use std::io::{self, Read};

const TAG_PLAN: u8 = b'P';
const TAG_CHUNK: u8 = b'C';
const TAG_GAP: u8 = b'G';
const TAG_END: u8 = b'E';
/// The longest record body a reader accepts (a read is at most 64 KiB; a plan a few KiB).
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
    /// A chunk or a gap.
    Output(Entry),
    End(End),
}

pub fn encode_plan(plan: &Plan, out: &mut Vec<u8>) {
    let json = serde_json::to_vec(plan).expect("a plan always serialises");
    out.push(TAG_PLAN);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
}

pub fn encode_entry(entry: &Entry, out: &mut Vec<u8>) {
    match entry {
        Entry::Chunk { stream, capture_ns, bytes } => {
            out.push(TAG_CHUNK);
            out.push(*stream);
            out.extend_from_slice(&capture_ns.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        Entry::Gap { stream, lines, bytes } => {
            out.push(TAG_GAP);
            out.push(*stream);
            out.extend_from_slice(&lines.to_le_bytes());
            out.extend_from_slice(&bytes.to_le_bytes());
        }
    }
}

pub fn encode_end(end: &End, out: &mut Vec<u8>) {
    out.push(TAG_END);
    out.push(u8::from(end.exit_code.is_some()) | (u8::from(end.signal.is_some()) << 1));
    out.extend_from_slice(&end.exit_code.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&end.signal.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&end.at_ns.to_le_bytes());
    out.extend_from_slice(&end.dropped.to_le_bytes());
}

/// Reads records from the feed in large reads; a chunk's bytes are a slice of the read buffer,
/// not a copy of their own.
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
        TAG_CHUNK => (1 + 9 + 4, 10),
        TAG_GAP => return Ok(Some(1 + 17)),
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
        TAG_CHUNK => {
            let stream = b.get_u8();
            let capture_ns = b.get_i64_le();
            b.advance(4);
            Ok(Record::Output(Entry::Chunk { stream, capture_ns, bytes: b }))
        }
        TAG_GAP => {
            let stream = b.get_u8();
            let lines = b.get_u64_le();
            Ok(Record::Output(Entry::Gap { stream, lines, bytes: b.get_u64_le() }))
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

    fn chunk(stream: u8, ns: i64, text: &[u8]) -> Entry {
        Entry::Chunk { stream, capture_ns: ns, bytes: Bytes::copy_from_slice(text) }
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
        let mut entries: Vec<Entry> = (0..500).map(|i| chunk(1 + (i % 2) as u8, -5 + i, &vec![b'a' + (i % 26) as u8; (i * 37 % 3000) as usize])).collect();
        entries.insert(7, Entry::Gap { stream: 2, lines: 12, bytes: 4096 });
        entries.push(chunk(1, 0, b"bad \xff\x00 bytes"));
        for e in &entries {
            encode_entry(e, &mut buf);
        }
        let end = End { exit_code: None, signal: Some(9), at_ns: 123, dropped: 4 };
        encode_end(&end, &mut buf);
        for piece in [1, 7, 4096, 1 << 20] {
            let mut r = FeedReader::new(Trickle(&buf, piece));
            for e in &entries {
                assert_eq!(r.next().unwrap(), Some(Record::Output(e.clone())), "read {piece} at a time");
            }
            assert_eq!(r.next().unwrap(), Some(Record::End(end.clone())));
            assert_eq!(r.next().unwrap(), None);
        }
    }

    #[test]
    fn a_torn_or_foreign_record_is_an_error_not_output() {
        let mut buf = Vec::new();
        encode_entry(&chunk(1, 0, b"abcdef"), &mut buf);
        encode_entry(&chunk(1, 0, b"ghijkl"), &mut buf);
        buf.truncate(buf.len() - 2);
        let mut r = FeedReader::new(&buf[..]);
        assert!(r.next().unwrap().is_some(), "the whole record before the tear reads");
        assert!(r.next().is_err());
        assert!(FeedReader::new(&b"Z123"[..]).next().is_err());
        let mut huge = vec![TAG_CHUNK];
        huge.extend_from_slice(&[0u8; 9]);
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(FeedReader::new(&huge[..]).next().is_err(), "no 4 GiB allocation for a bad length");
        let mut plan = Vec::new();
        let p = crate::plan::tests::a_plan();
        encode_plan(&p, &mut plan);
        assert_eq!(FeedReader::new(&plan[..]).next().unwrap(), Some(Record::Plan(Box::new(p))));
    }
}
