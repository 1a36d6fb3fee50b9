//! Batches encoded once: the bytes the spool keeps are the bytes sent.
//!
//! A protobuf message may be written as the concatenation of its parts, fields in any order. So a
//! `LogBatch` is encoded once, when the shipper forms it (its `batch_id` and `lines`, written
//! straight from the queued lines), spooled as is, and sent behind a small per-send prefix (the
//! session id, clock samples, spool backlog) by [`ShipCodec`], which writes bytes instead of
//! encoding a message. The server decodes an ordinary `LogBatch`.

use crate::queue::Line;
use crate::seq_base::{stream_key, SeqBase};
use bytes::{BufMut, Bytes, BytesMut};
use coroner_proto::v1;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// The sequence numbers of one (rank, stream) in a batch, as encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqRange {
    /// The stream's rank (a line's own, else the session's).
    pub rank: Option<u32>,
    pub stream: i32,
    pub first: u64,
    pub last: u64,
}

impl SeqRange {
    pub fn key(&self) -> String {
        stream_key(self.rank, self.stream)
    }
}

/// A formed batch's `LogBatch` fields 2 and 3, and what the shipper needs to know about them.
#[derive(Debug, Clone)]
pub struct EncodedBatch {
    pub count: usize,
    pub ranges: Vec<SeqRange>,
}

/// Appends `batch_id` and `lines` as `LogBatch` fields to `out`. With `base`, each line's
/// number is rebased onto it (its stream's start plus `seq`); without, the agent's own numbers are written.
pub fn encode_batch(batch_id: u64, lines: &[Line], session_rank: Option<u32>, base: Option<&SeqBase>, out: &mut BytesMut) -> EncodedBatch {
    out.reserve(16 + lines.iter().map(|l| l.raw.len() + 40).sum::<usize>());
    if batch_id != 0 {
        encode_key(2, WireType::Varint, out);
        encode_varint(batch_id, out);
    }
    let mut ranges: Vec<(SeqRange, u64)> = Vec::new();
    for l in lines {
        let rank = l.rank.or(session_rank);
        let i = match ranges.iter().position(|(r, _)| r.rank == rank && r.stream == l.stream) {
            Some(i) => i,
            None => {
                let offset = base.map_or(0, |b| b.start_of(&stream_key(rank, l.stream)));
                ranges.push((SeqRange { rank, stream: l.stream, first: offset + l.seq, last: 0 }, offset));
                ranges.len() - 1
            }
        };
        let (range, offset) = &mut ranges[i];
        let seq = *offset + l.seq;
        range.last = seq;
        encode_line(seq, l, out);
    }
    EncodedBatch { count: lines.len(), ranges: ranges.into_iter().map(|(r, _)| r).collect() }
}

/// One line as `LogBatch.lines` (field 3), byte for byte what prost writes for `v1::LogLine`.
fn encode_line(seq: u64, l: &Line, out: &mut BytesMut) {
    let raw = l.raw.len();
    let mut len = 0;
    if seq != 0 {
        len += 1 + encoded_len_varint(seq);
    }
    if l.capture_ns != 0 {
        len += 1 + encoded_len_varint(l.capture_ns as u64);
    }
    if l.stream != 0 {
        len += 1 + encoded_len_varint(i64::from(l.stream) as u64);
    }
    if raw != 0 {
        len += 1 + encoded_len_varint(raw as u64) + raw;
    }
    if let Some(r) = l.rank {
        len += 1 + encoded_len_varint(u64::from(r));
    }
    encode_key(3, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
    if seq != 0 {
        encode_key(1, WireType::Varint, out);
        encode_varint(seq, out);
    }
    if l.capture_ns != 0 {
        encode_key(2, WireType::Varint, out);
        encode_varint(l.capture_ns as u64, out);
    }
    if l.stream != 0 {
        encode_key(3, WireType::Varint, out);
        encode_varint(i64::from(l.stream) as u64, out);
    }
    if raw != 0 {
        encode_key(4, WireType::LengthDelimited, out);
        encode_varint(raw as u64, out);
        out.put_slice(&l.raw);
    }
    if let Some(r) = l.rank {
        encode_key(5, WireType::Varint, out);
        encode_varint(u64::from(r), out);
    }
}

/// One `LogBatch` as sent: the per-send fields, then the batch's encoded id and lines.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub prefix: Bytes,
    pub body: Bytes,
}

impl Outgoing {
    /// `body` (a batch's id and lines) behind this send's session, clock samples and backlog.
    pub fn new(session_id: &str, clock: Vec<v1::ClockProbe>, spool_backlog: u64, body: Bytes) -> Self {
        let head = v1::LogBatch { session_id: session_id.to_string(), clock, spool_backlog, ..Default::default() };
        Outgoing { prefix: head.encode_to_vec().into(), body }
    }

    /// A whole message encoded by prost (the slow path: a batch rewritten before sending).
    pub fn message(batch: &v1::LogBatch) -> Self {
        Outgoing { prefix: Bytes::new(), body: batch.encode_to_vec().into() }
    }

    pub fn len(&self) -> usize {
        self.prefix.len() + self.body.len()
    }
}

/// The `ShipLogs` codec: writes [`Outgoing`] bytes as they are, decodes `BatchAck`s.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShipCodec;

#[derive(Debug, Clone, Copy, Default)]
pub struct OutgoingEncoder;

#[derive(Debug, Clone, Copy, Default)]
pub struct AckDecoder;

impl Codec for ShipCodec {
    type Encode = Outgoing;
    type Decode = v1::BatchAck;
    type Encoder = OutgoingEncoder;
    type Decoder = AckDecoder;

    fn encoder(&mut self) -> OutgoingEncoder {
        OutgoingEncoder
    }

    fn decoder(&mut self) -> AckDecoder {
        AckDecoder
    }
}

impl Encoder for OutgoingEncoder {
    type Item = Outgoing;
    type Error = Status;

    fn encode(&mut self, item: Outgoing, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.len());
        dst.put_slice(&item.prefix);
        dst.put_slice(&item.body);
        Ok(())
    }
}

impl Decoder for AckDecoder {
    type Item = v1::BatchAck;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<v1::BatchAck>, Status> {
        v1::BatchAck::decode(buf).map(Some).map_err(|e| Status::internal(format!("decode a batch acknowledgement: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64, stream: i32, rank: Option<u32>, raw: &[u8], capture_ns: i64) -> Line {
        Line { raw: Bytes::copy_from_slice(raw), seq, capture_ns, stream, rank }
    }

    #[test]
    fn a_batch_encodes_exactly_as_prost_does() {
        let lines = vec![
            line(0, 1, None, b"first \xff", 1_700_000_000_000_000_000),
            line(1, 1, None, b"", -5),
            line(0, 2, Some(0), &[b'x'; 300], 0),
            line(7, 3, Some(70_000), b"file", 1),
        ];
        let mut out = BytesMut::new();
        let enc = encode_batch(42, &lines, Some(3), None, &mut out);
        let expected = v1::LogBatch {
            batch_id: 42,
            lines: lines
                .iter()
                .map(|l| v1::LogLine { seq: l.seq, capture_ns: l.capture_ns, stream: l.stream, raw: l.raw.to_vec(), rank: l.rank, file: String::new() })
                .collect(),
            ..Default::default()
        };
        assert_eq!(&out[..], &expected.encode_to_vec()[..]);
        assert_eq!(enc.count, 4);
        let keys: Vec<(String, u64, u64)> = enc.ranges.iter().map(|r| (r.key(), r.first, r.last)).collect();
        assert_eq!(keys, vec![("3/stdout".into(), 0, 1), ("0/stderr".into(), 0, 0), ("70000/file".into(), 7, 7)]);
    }

    #[test]
    fn a_known_base_rebases_the_numbers_once() {
        let lines = vec![line(0, 1, None, b"a", 1), line(1, 1, None, b"b", 2), line(0, 2, None, b"c", 3)];
        let base = SeqBase::from_session(&[("3/stdout".to_string(), 100)].into(), 0);
        let mut out = BytesMut::new();
        let enc = encode_batch(0, &lines, Some(3), Some(&base), &mut out);
        let decoded = v1::LogBatch::decode(&out[..]).unwrap();
        let seqs: Vec<u64> = decoded.lines.iter().map(|l| l.seq).collect();
        assert_eq!(seqs, vec![100, 101, 0]);
        assert_eq!((enc.ranges[0].first, enc.ranges[0].last), (100, 101));
    }

    #[test]
    fn prefix_and_body_decode_as_one_message() {
        let mut body = BytesMut::new();
        encode_batch(9, &[line(5, 1, None, b"hello", 10)], None, None, &mut body);
        let clock = vec![v1::ClockProbe { t1_agent_send_ns: 1, ..Default::default() }];
        let out = Outgoing::new("s-1", clock.clone(), 77, body.freeze());
        let mut bytes = out.prefix.to_vec();
        bytes.extend_from_slice(&out.body);
        let b = v1::LogBatch::decode(&bytes[..]).unwrap();
        assert_eq!((b.session_id.as_str(), b.batch_id, b.spool_backlog), ("s-1", 9, 77));
        assert_eq!(b.clock, clock);
        assert_eq!(b.lines[0].raw, b"hello");
        assert_eq!(b.lines[0].seq, 5);
    }
}
