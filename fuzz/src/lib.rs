//! Shared pieces of coroner's fuzz targets: how a fuzz input is cut into files or messages, and
//! the seed inputs built from the fixtures under `tests/data` (`cargo run --example make_seeds`).
//!
//! The formats are chosen so that the seeds stay readable and a mutation of one part leaves the
//! others intact:
//! - `lines`: one flag byte, then the log text (see [`LineFlags`]).
//! - `bundle`: files in the style of `tail` output, each starting with a `==> name <==` line;
//!   only the names in [`BUNDLE_FILES`] are written (nothing outside the temporary folder).
//! - `snapshot`: one byte picking the reader ([`SNAPSHOT_KINDS`]), then the file's bytes.
//! - `ingest`: frames of `tag, length (u16 little-endian), protobuf bytes` ([`frames`]).

pub mod seeds;

/// The first byte of a `lines` input.
#[derive(Debug, Clone, Copy)]
pub struct LineFlags(pub u8);

impl LineFlags {
    /// The parser's own rank (a per-rank agent's session), or none (a launcher's combined stream).
    pub fn parser_rank(self) -> Option<u32> {
        (self.0 & 1 == 1).then_some(u32::from(self.0 >> 5))
    }
    /// 0 stdout, 1 stderr, 2 file (and 3 is file too).
    pub fn stream(self) -> u8 {
        (self.0 >> 1) & 3
    }
    /// Repeat the last line past the parser's 64 KiB cap (the cut may fall inside a character).
    pub fn pad_last_line(self) -> bool {
        self.0 & 8 != 0
    }
    /// Each line names its own rank (a launcher agent's worker lines).
    pub fn lines_name_rank(self) -> bool {
        self.0 & 16 != 0
    }
}

/// The files a `bundle` input may write, relative to the bundle folder.
pub const BUNDLE_FILES: &[&str] = &[
    "meta.json",
    "exits.json",
    "launcher.exit.json",
    "rank0.lines.jsonl",
    "rank1.lines.jsonl",
    "rank2.lines.jsonl",
    "launcher.lines.jsonl",
    "rank0.stdout.log",
    "rank1.stderr.log",
    "rank3.stderr.log",
    "launcher.stderr.log",
    "train.log",
    "torchrun_logs/run/attempt_0/0/stderr.log",
    "flight_recorder/nccl_trace_rank_0",
    "flight_recorder/nccl_trace_rank_1",
    "snapshots/rank1.stack.txt",
    "snapshots/rank1.memory_summary.txt",
    "snapshots/rank0.state_dict.pt",
    "host/dmesg-tail.txt",
    "host/nvidia-smi-q.xml",
    "snapshots/core.1234",
];

/// `==> name <==` header lines cut a bundle input into `(name, bytes)`; the line end before a
/// header (or the input's end) belongs to the separator, so binary files survive exactly. Bytes
/// before the first header and sections whose name is not in [`BUNDLE_FILES`] are dropped. A
/// later section of the same name replaces an earlier one.
pub fn bundle_sections(data: &[u8]) -> Vec<(&'static str, &[u8])> {
    // (name, where its body starts, where its header starts) for every header line.
    let mut headers: Vec<(Option<&'static str>, usize, usize)> = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let end = data[pos..].iter().position(|b| *b == b'\n').map_or(data.len(), |i| pos + i);
        let next = (end + 1).min(data.len());
        if let Some(name) = data[pos..end].strip_prefix(b"==> ").and_then(|l| l.strip_suffix(b" <==")) {
            headers.push((BUNDLE_FILES.iter().find(|n| n.as_bytes() == name).copied(), next, pos));
        }
        pos = next;
    }
    let mut out: Vec<(&'static str, &[u8])> = Vec::new();
    for (i, (name, start, _)) in headers.iter().enumerate() {
        let Some(name) = *name else { continue };
        let end = headers.get(i + 1).map_or(data.len(), |h| h.2);
        let body = &data[*start..end.max(*start)];
        let body = body.strip_suffix(b"\n").unwrap_or(body);
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = body,
            None => out.push((name, body)),
        }
    }
    out
}

/// Writes files as a bundle input; the inverse of [`bundle_sections`].
pub fn bundle_input(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, body) in files {
        out.extend_from_slice(format!("==> {name} <==\n").as_bytes());
        out.extend_from_slice(body);
        out.push(b'\n');
    }
    out
}

/// The readers a `snapshot` input's first byte picks (modulo the length): a snapshot kind as
/// `coroner_snapshot::kind_of` names it, or `pickle` for the raw pickle reader.
pub const SNAPSHOT_KINDS: &[&str] =
    &["flight_recorder", "state_dict", "nvidia_smi", "memory_summary", "stack", "core", "kernel_log", "other", "pickle", "state_dict_summary"];

/// The message an `ingest` frame's tag (modulo 5) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    OpenSession,
    LogBatch,
    ProcessExit,
    SnapshotChunk,
    ClockProbe,
}

impl Tag {
    pub fn of(b: u8) -> Tag {
        match b % 5 {
            0 => Tag::OpenSession,
            1 => Tag::LogBatch,
            2 => Tag::ProcessExit,
            3 => Tag::SnapshotChunk,
            _ => Tag::ClockProbe,
        }
    }
    pub fn byte(self) -> u8 {
        self as u8
    }
}

/// Cuts an `ingest` input into frames; a frame whose length runs past the end takes what is left.
pub fn frames(mut data: &[u8]) -> Vec<(Tag, &[u8])> {
    let mut out = Vec::new();
    while data.len() >= 3 {
        let tag = Tag::of(data[0]);
        let len = usize::from(u16::from_le_bytes([data[1], data[2]]));
        let body = &data[3..];
        let take = len.min(body.len());
        out.push((tag, &body[..take]));
        data = &body[take..];
    }
    out
}

/// One frame, the inverse of [`frames`] (a body longer than 65,535 bytes is cut).
pub fn frame(tag: Tag, body: &[u8]) -> Vec<u8> {
    let body = &body[..body.len().min(usize::from(u16::MAX))];
    let mut out = vec![tag.byte()];
    out.extend_from_slice(&(body.len() as u16).to_le_bytes());
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_inputs_round_trip_and_unknown_names_are_dropped() {
        let files: Vec<(&str, &[u8])> = vec![("exits.json", b"{}\n"), ("snapshots/core.1234", b"\x7fELF\x00"), ("rank0.lines.jsonl", b"a\nb")];
        let mut input = b"junk before\n".to_vec();
        input.extend(bundle_input(&files));
        input.extend_from_slice(b"==> ../../etc/passwd <==\nroot\n");
        assert_eq!(bundle_sections(&input), files);
        assert_eq!(bundle_sections(b"==> meta.json <==\n==> meta.json <=="), vec![("meta.json", &b""[..])]);
    }

    #[test]
    fn frames_round_trip() {
        let mut input = frame(Tag::LogBatch, b"abc");
        input.extend(frame(Tag::ProcessExit, b""));
        input.extend_from_slice(&[0, 9, 0, b'x']);
        assert_eq!(frames(&input), vec![(Tag::LogBatch, &b"abc"[..]), (Tag::ProcessExit, &b""[..]), (Tag::OpenSession, &b"x"[..])]);
    }
}
