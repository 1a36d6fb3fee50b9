//! A captured output line: what an agent read from a rank's pipe, or what a bundle holds.

use crate::{Nanos, Rank};
use serde::{Deserialize, Serialize};

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
