//! A captured output line: what an agent read from a rank's pipe, or what a bundle holds.

use crate::{Nanos, Rank};
use serde::{Deserialize, Serialize};

/// The longest line kept whole: 1 MiB. Whoever reads a longer line (the agent from a pipe, the
/// bundle reader from a file, coronerd from the wire or OTLP) keeps its first `MAX_LINE_BYTES`
/// bytes and appends [`truncation_marker`], ` [coroner: truncated N bytes]`.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Slack over [`MAX_LINE_BYTES`] for a line that was already cut (it ends with its marker), so
/// a line cut by the agent is not cut again by the server.
pub const MARKER_SLACK: usize = 64;

/// Bits of a sequence number within its lane. Every agent instance numbers its lines in a lane of
/// 2^40 numbers of its own (coronerd's `job/claims.rs`), so the lane of a line's number names the
/// agent that captured it: coronerd deduplicates per lane, the pipeline keeps a launcher's
/// rank mapping per lane (one per node).
pub const SEQ_LANE_BITS: u32 = 40;

/// The lane of a sequence number.
pub fn seq_lane(seq: u64) -> u32 {
    (seq >> SEQ_LANE_BITS) as u32
}

/// What ends a line cut `cut` bytes short.
pub fn truncation_marker(cut: u64) -> String {
    format!(" [coroner: truncated {cut} bytes]")
}

/// Cuts a line longer than [`MAX_LINE_BYTES`] (plus [`MARKER_SLACK`]) to `MAX_LINE_BYTES` bytes
/// and the marker; returns how many bytes were cut (0 when the line is kept whole).
pub fn cap_line(bytes: &mut Vec<u8>) -> u64 {
    if bytes.len() <= MAX_LINE_BYTES + MARKER_SLACK {
        return 0;
    }
    let cut = (bytes.len() - MAX_LINE_BYTES) as u64;
    bytes.truncate(MAX_LINE_BYTES);
    bytes.extend_from_slice(truncation_marker(cut).as_bytes());
    cut
}

/// Which stream of the process a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
    /// A tailed file (an NCCL debug file, a kernel log).
    File,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
            Stream::File => "file",
        }
    }

    pub fn parse(s: &str) -> Option<Stream> {
        match s {
            "stdout" => Some(Stream::Stdout),
            "stderr" => Some(Stream::Stderr),
            "file" => Some(Stream::File),
            _ => None,
        }
    }
}

/// One line as captured, never altered: the bytes are kept exactly (they may not be UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The global rank that owns the line, when the session or a launcher prefix tells it.
    pub rank: Option<Rank>,
    pub stream: Stream,
    /// Position of the line in its (rank, stream), from 0; the dedup key on ingest.
    pub seq: u64,
    /// When the capturing agent read the line, on the agent host's clock.
    pub capture_ns: Nanos,
    /// The raw bytes, without the trailing newline.
    pub bytes: Vec<u8>,
}

impl LogLine {
    /// The text of the line, with invalid UTF-8 replaced; for display and matching only.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_once_with_a_marker() {
        let mut ten_mb = vec![b'x'; 10 << 20];
        assert_eq!(cap_line(&mut ten_mb), (10 << 20) - MAX_LINE_BYTES as u64);
        assert!(ten_mb.ends_with(format!(" [coroner: truncated {} bytes]", (10 << 20) - MAX_LINE_BYTES).as_bytes()));
        assert_eq!(ten_mb.len(), MAX_LINE_BYTES + truncation_marker((10 << 20) - MAX_LINE_BYTES as u64).len());
        // Already cut: left as it is.
        let before = ten_mb.clone();
        assert_eq!(cap_line(&mut ten_mb), 0);
        assert_eq!(ten_mb, before);
        let mut short = b"ok \xff\0".to_vec();
        assert_eq!(cap_line(&mut short), 0);
    }
}
