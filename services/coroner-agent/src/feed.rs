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
use bytes::Bytes;
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

/// Reads the next record; `Ok(None)` at the end of the feed.
pub fn read_record(r: &mut impl Read) -> io::Result<Option<Record>> {
    let mut tag = [0u8; 1];
    loop {
        match r.read(&mut tag) {
            Ok(0) => return Ok(None),
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    match tag[0] {
        TAG_PLAN => {
            let body = read_body(r)?;
            let plan = serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("plan: {e}")))?;
            Ok(Some(Record::Plan(Box::new(plan))))
        }
        TAG_LINE => {
            let mut h = [0u8; 1 + 1 + 4 + 8 + 8];
            r.read_exact(&mut h)?;
            let stream = i32::from(h[0]);
            let rank = (h[1] == 1).then(|| u32::from_le_bytes(h[2..6].try_into().expect("4 bytes")));
            let seq = u64::from_le_bytes(h[6..14].try_into().expect("8 bytes"));
            let capture_ns = i64::from_le_bytes(h[14..22].try_into().expect("8 bytes"));
            let raw = Bytes::from(read_body(r)?);
            Ok(Some(Record::Line(Line { raw, seq, capture_ns, stream, rank })))
        }
        TAG_END => {
            let mut b = [0u8; 1 + 4 + 4 + 8 + 8];
            r.read_exact(&mut b)?;
            let code = i32::from_le_bytes(b[1..5].try_into().expect("4 bytes"));
            let signal = i32::from_le_bytes(b[5..9].try_into().expect("4 bytes"));
            Ok(Some(Record::End(End {
                exit_code: (b[0] & 1 != 0).then_some(code),
                signal: (b[0] & 2 != 0).then_some(signal),
                at_ns: i64::from_le_bytes(b[9..17].try_into().expect("8 bytes")),
                dropped: u64::from_le_bytes(b[17..25].try_into().expect("8 bytes")),
            })))
        }
        other => Err(io::Error::new(io::ErrorKind::InvalidData, format!("unknown feed record {other:#04x}"))),
    }
}

fn read_body(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_BODY {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a feed record of {len} bytes")));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(body)
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
        let mut r = &buf[..];
        for l in &lines {
            assert_eq!(read_record(&mut r).unwrap(), Some(Record::Line(l.clone())));
        }
        assert_eq!(read_record(&mut r).unwrap(), Some(Record::End(end)));
        assert_eq!(read_record(&mut r).unwrap(), None);
    }

    #[test]
    fn a_torn_or_foreign_record_is_an_error_not_a_line() {
        let mut buf = Vec::new();
        encode_line(&line(0, None, b"abcdef"), &mut buf);
        buf.truncate(buf.len() - 2);
        assert!(read_record(&mut &buf[..]).is_err());
        assert!(read_record(&mut &b"Z123"[..]).is_err());
        let mut huge = vec![TAG_LINE];
        huge.extend_from_slice(&[0u8; 22]);
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(read_record(&mut &huge[..]).is_err(), "no 4 GiB allocation for a bad length");
    }
}
