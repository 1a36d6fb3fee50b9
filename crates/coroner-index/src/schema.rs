//! The index's tantivy schema and the conversion between [`IndexedLine`] and a tantivy document.
//!
//! Besides the fields callers filter on, the schema keeps one hidden fast field, `origin`,
//! that packs (rank, stream) into one `u64` whose order is the order of `(Option<u32>, Stream)`:
//! it names a line's source in one term and gives the collectors their sort key cheaply.
//!
//! What the analysis makes of a line (its event kind, its printed time) is not stored: a line
//! is indexed before the parsers see it, and its event is often known only after later lines
//! (a traceback ends at the next line that is not part of it), when the document can no longer
//! change. Indexes written before kept a `kind` field (`line` for every line) and a
//! `printed_ns` field (never set); they open unchanged, and those fields are ignored.

use crate::IndexError;
use coroner_model::Stream;
use tantivy::schema::{Field, NumericOptions, Schema, Value, FAST, INDEXED, STORED, STRING, TEXT};
use tantivy::TantivyDocument;

/// The stored `rank` of a line without a rank.
pub const NO_RANK: u64 = u64::MAX;

/// One line as the index stores it; `bytes` are the exact captured bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedLine {
    pub rank: Option<u32>,
    pub stream: Stream,
    pub seq: u64,
    pub capture_ns: i64,
    pub host: String,
    /// `error`, `warning` or `info` (`coroner_parse::severity`).
    pub severity: String,
    pub bytes: Vec<u8>,
}

/// One line to index, borrowed from wherever the caller holds it: the committer builds these
/// straight from the lines it received, without copying them into [`IndexedLine`]s first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRef<'a> {
    pub rank: Option<u32>,
    pub stream: Stream,
    pub seq: u64,
    pub capture_ns: i64,
    pub host: &'a str,
    pub severity: &'a str,
    pub bytes: &'a [u8],
}

impl IndexedLine {
    pub fn as_ref(&self) -> LineRef<'_> {
        LineRef {
            rank: self.rank,
            stream: self.stream,
            seq: self.seq,
            capture_ns: self.capture_ns,
            host: &self.host,
            severity: &self.severity,
            bytes: &self.bytes,
        }
    }
}

/// The fields of the schema, resolved once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields {
    pub text: Field,
    pub raw: Field,
    pub rank: Field,
    pub stream: Field,
    pub origin: Field,
    pub seq: Field,
    pub capture_ns: Field,
    pub host: Field,
    pub severity: Field,
}

pub(crate) const F_ORIGIN: &str = "origin";
pub(crate) const F_SEQ: &str = "seq";
pub(crate) const F_CAPTURE: &str = "capture_ns";

/// The schema new indexes get. Capture time is a fast field but not indexed: time filters are
/// range queries, which tantivy answers from the fast field, and an indexed capture time is a
/// distinct term for nearly every line (most of the term dictionary, for nothing). Indexes
/// written before kept it indexed; they open unchanged (see [`Fields::resolve`]).
pub(crate) fn build_schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let all_num = NumericOptions::default().set_indexed().set_fast().set_stored();
    let fields = Fields {
        // TEXT indexes positions, so phrase queries work; the default tokenizer lowercases.
        text: b.add_text_field("text", TEXT | STORED),
        raw: b.add_bytes_field("raw", STORED),
        rank: b.add_u64_field("rank", all_num.clone()),
        stream: b.add_text_field("stream", STRING | STORED),
        origin: b.add_u64_field(F_ORIGIN, INDEXED | FAST),
        seq: b.add_u64_field(F_SEQ, all_num.clone()),
        capture_ns: b.add_i64_field(F_CAPTURE, NumericOptions::default().set_fast().set_stored()),
        host: b.add_text_field("host", STRING | STORED),
        severity: b.add_text_field("severity", STRING | STORED),
    };
    (b.build(), fields)
}

impl Fields {
    /// The fields of an existing index's schema, by name (an index written by an earlier
    /// version may differ in options, never in names).
    pub(crate) fn resolve(schema: &Schema) -> Result<Fields, String> {
        let get = |name: &str| schema.get_field(name).map_err(|_| format!("it has no field {name:?}"));
        let fast = |name: &str| {
            let f = get(name)?;
            if schema.get_field_entry(f).is_fast() {
                Ok(f)
            } else {
                Err(format!("its field {name:?} is not a fast field"))
            }
        };
        Ok(Fields {
            text: get("text")?,
            raw: get("raw")?,
            rank: fast("rank")?,
            stream: get("stream")?,
            origin: fast(F_ORIGIN)?,
            seq: fast(F_SEQ)?,
            capture_ns: fast(F_CAPTURE)?,
            host: get("host")?,
            severity: get("severity")?,
        })
    }
}

pub(crate) fn stream_code(s: Stream) -> u64 {
    match s {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
        Stream::File => 2,
    }
}

pub(crate) fn stream_from_code(c: u64) -> Stream {
    match c {
        0 => Stream::Stdout,
        1 => Stream::Stderr,
        _ => Stream::File,
    }
}

/// Packs (rank, stream) so that `None` sorts before every rank, as `Option` does.
pub(crate) fn origin(rank: Option<u32>, stream: Stream) -> u64 {
    let rank_key = rank.map_or(0, |r| u64::from(r) + 1);
    (rank_key << 2) | stream_code(stream)
}

pub(crate) fn unpack_origin(o: u64) -> (Option<u32>, Stream) {
    let rank_key = o >> 2;
    let rank = if rank_key == 0 { None } else { u32::try_from(rank_key - 1).ok() };
    (rank, stream_from_code(o & 3))
}

pub(crate) fn to_document(f: &Fields, line: LineRef<'_>) -> TantivyDocument {
    // The text, the small fields and their headers, allocated once.
    let mut doc = TantivyDocument::with_capacity(line.bytes.len() + line.host.len() + 96);
    match std::str::from_utf8(line.bytes) {
        Ok(text) => doc.add_text(f.text, text),
        Err(_) => {
            doc.add_text(f.text, String::from_utf8_lossy(line.bytes));
            doc.add_bytes(f.raw, line.bytes);
        }
    }
    doc.add_u64(f.rank, line.rank.map_or(NO_RANK, u64::from));
    doc.add_text(f.stream, line.stream.as_str());
    doc.add_u64(f.origin, origin(line.rank, line.stream));
    doc.add_u64(f.seq, line.seq);
    doc.add_i64(f.capture_ns, line.capture_ns);
    doc.add_text(f.host, line.host);
    doc.add_text(f.severity, line.severity);
    doc
}

pub(crate) fn from_document(f: &Fields, doc: &TantivyDocument) -> Result<IndexedLine, IndexError> {
    let text = |field: Field| -> String { doc.get_first(field).and_then(|v| v.as_str()).unwrap_or_default().to_string() };
    let bytes = match doc.get_first(f.raw).and_then(|v| v.as_bytes()) {
        Some(raw) => raw.to_vec(),
        None => text(f.text).into_bytes(),
    };
    let stream_name = text(f.stream);
    let stream = Stream::parse(&stream_name).ok_or_else(|| IndexError::Corrupt(format!("stored stream {stream_name:?} is unknown")))?;
    let rank = match doc.get_first(f.rank).and_then(|v| v.as_u64()) {
        None | Some(NO_RANK) => None,
        Some(r) => Some(u32::try_from(r).map_err(|_| IndexError::Corrupt(format!("stored rank {r} does not fit in 32 bits")))?),
    };
    let seq = doc.get_first(f.seq).and_then(|v| v.as_u64()).ok_or_else(|| IndexError::Corrupt("a stored line has no seq".to_string()))?;
    let capture_ns = doc.get_first(f.capture_ns).and_then(|v| v.as_i64()).ok_or_else(|| IndexError::Corrupt("a stored line has no capture_ns".to_string()))?;
    Ok(IndexedLine { rank, stream, seq, capture_ns, host: text(f.host), severity: text(f.severity), bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_orders_like_option_rank_then_stream() {
        let keys = [
            (None, Stream::Stdout),
            (None, Stream::File),
            (Some(0), Stream::Stdout),
            (Some(0), Stream::Stderr),
            (Some(7), Stream::Stdout),
            (Some(u32::MAX), Stream::File),
        ];
        for w in keys.windows(2) {
            assert!(w[0] < w[1]);
            assert!(origin(w[0].0, w[0].1) < origin(w[1].0, w[1].1));
        }
        for k in keys {
            assert_eq!(unpack_origin(origin(k.0, k.1)), k);
        }
    }
}
