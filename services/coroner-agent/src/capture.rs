//! The hot path: the child's pipes, copied through to the agent's own stdout/stderr byte for byte,
//! and split into stamped, sequenced lines for the shipper.
//!
//! Each pipe has its own OS thread doing blocking reads, so a slow terminal on one stream never
//! delays the other, and nothing here ever waits on the network: lines go into the shipper's
//! bounded in-memory queue, which the shipper drains into the spool on local disk. In a burst
//! faster than the spool takes it the thread waits for room (bounded, see `queue.rs`); when the
//! shipper cannot spool, a full queue drops (and counts) routine lines rather than blocks.
//!
//! Per read, not per line: one `read`, one `write` of the same bytes to our own stdout or stderr
//! (so the passthrough is byte-exact and as prompt as the child's own writes), one lock to queue
//! the read's lines; a line is a slice of the read buffer, not a copy.
//!
//! A line is the bytes up to `\n`, without it; a `\r` before it is kept. The capture time is the
//! wall-clock time of the read that delivered the line's first byte. A line longer than
//! [`MAX_LINE`] is passed through whole but shipped truncated, with a marker suffix.

use crate::launcher::RankFiler;
use crate::queue::{Line, LineQueue};
use bytes::{Bytes, BytesMut};
use coroner_model::Stream;
use coroner_proto::convert::stream_to_wire;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The longest line shipped whole (1 MiB, the limit the server and the bundle reader keep too).
pub const MAX_LINE: usize = coroner_model::MAX_LINE_BYTES;
/// One read from a pipe (the pipe's own buffer is 64 KiB on Linux).
const READ_SIZE: usize = 64 * 1024;

/// Nanoseconds since the Unix epoch by this host's wall clock.
pub fn now_ns() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

/// One complete line as split from a pipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitLine {
    pub bytes: Bytes,
    pub capture_ns: i64,
    /// Bytes cut off beyond the cap (already reflected in the marker suffix of `bytes`).
    pub truncated: u64,
}

/// Splits a byte stream into lines, across chunk boundaries, without assuming UTF-8. A line
/// that lies whole in one chunk is a slice of it; only a line split across chunks is copied.
#[derive(Debug)]
pub struct LineSplitter {
    cap: usize,
    buf: Vec<u8>,
    first_ns: Option<i64>,
    truncated: u64,
}

impl LineSplitter {
    pub fn new(cap: usize) -> Self {
        LineSplitter { cap, buf: Vec::new(), first_ns: None, truncated: 0 }
    }

    /// Feeds one chunk read at `now_ns`; calls `out` for every line it completes.
    pub fn push(&mut self, chunk: &Bytes, now_ns: i64, out: &mut impl FnMut(SplitLine)) {
        let mut at = 0;
        for nl in memchr::memchr_iter(b'\n', chunk) {
            if self.first_ns.is_none() && nl - at <= self.cap {
                out(SplitLine { bytes: chunk.slice(at..nl), capture_ns: now_ns, truncated: 0 });
            } else {
                self.first_ns.get_or_insert(now_ns);
                self.append(&chunk[at..nl]);
                out(self.take());
            }
            at = nl + 1;
        }
        if at < chunk.len() {
            self.first_ns.get_or_insert(now_ns);
            self.append(&chunk[at..]);
        }
    }

    /// Emits the partial last line, if the stream ended without a newline.
    pub fn finish(&mut self, out: &mut impl FnMut(SplitLine)) {
        if self.first_ns.is_some() {
            out(self.take());
        }
    }

    fn append(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.buf.len());
        let keep = room.min(bytes.len());
        self.buf.extend_from_slice(&bytes[..keep]);
        self.truncated += (bytes.len() - keep) as u64;
    }

    fn take(&mut self) -> SplitLine {
        let mut bytes = std::mem::take(&mut self.buf);
        let truncated = std::mem::take(&mut self.truncated);
        if truncated > 0 {
            bytes.extend_from_slice(coroner_model::truncation_marker(truncated).as_bytes());
        }
        SplitLine { bytes: Bytes::from(bytes), capture_ns: self.first_ns.take().unwrap_or_default(), truncated }
    }
}

/// Files lines under ranks, numbers them per (rank, stream) from 0, and queues them.
/// Shared by both pipe threads, so a launcher's local→global mapping learnt on stderr applies to
/// stdout too.
pub struct Sequencer {
    filer: Option<RankFiler>,
    next_seq: HashMap<(Option<u32>, Stream), u64>,
    queue: Arc<LineQueue>,
}

impl Sequencer {
    /// `filer` is `Some` for a launcher agent.
    pub fn new(filer: Option<RankFiler>, queue: Arc<LineQueue>) -> Self {
        Sequencer { filer, next_seq: HashMap::new(), queue }
    }

    /// A sequencer that goes on numbering where another left off: `next` holds the next number
    /// of each (rank, stream) (the shipper taking over the pass-through from a dead supervisor).
    pub fn continuing(filer: Option<RankFiler>, queue: Arc<LineQueue>, next: HashMap<(Option<u32>, Stream), u64>) -> Self {
        Sequencer { filer, next_seq: next, queue }
    }

    /// Numbers and queues the lines of one read, in order, under one queue lock.
    pub fn accept_all(&mut self, stream: Stream, lines: impl IntoIterator<Item = SplitLine>) {
        let wire_stream = stream_to_wire(stream) as i32;
        // A rank agent's lines all share one counter: look it up once.
        let mut own = if self.filer.is_none() { self.next_seq.get(&(None, stream)).copied() } else { None };
        let Sequencer { filer, next_seq, queue } = self;
        queue.push_all(lines.into_iter().map(|line| {
            let rank = filer.as_mut().and_then(|f| f.file(&line.bytes));
            let seq = match (&mut own, rank) {
                (Some(n), None) => n,
                _ => next_seq.entry((rank, stream)).or_insert(0),
            };
            let wire = Line { seq: *seq, capture_ns: line.capture_ns, stream: wire_stream, raw: line.bytes, rank };
            // Never blocks: a full queue drops (and counts) a routine line. The sequence number
            // is spent either way, so the server sees the gap.
            *seq += 1;
            wire
        }));
        if let Some(n) = own {
            next_seq.insert((None, stream), n);
        }
    }
}

/// Copies `src` to `dst` as it arrives and feeds the lines to `sequencer`, until end of file.
/// Runs on its own thread; returns when the pipe closes (every writer has exited).
///
/// Every read is written through at once (one `write` and a flush, before any line is
/// queued), so the passthrough is byte-exact and never waits for a line to complete. Capture
/// is the part that may go wrong (a bug, a poisoned lock): it runs under `catch_unwind`, and if
/// it ever panics this pump goes on passing bytes through and captures no more. The pipe is
/// read to its end whatever happens, so the child never blocks on a full pipe nobody reads.
pub fn pump(
    mut src: impl Read,
    mut dst: impl Write,
    stream: Stream,
    sequencer: Arc<Mutex<Sequencer>>,
) {
    let mut splitter = LineSplitter::new(MAX_LINE);
    let mut buf = BytesMut::new();
    let mut lines = Vec::new();
    let mut passthrough_ok = true;
    let mut capturing = true;
    loop {
        if buf.capacity() < READ_SIZE / 4 {
            // Earlier reads are shared with queued lines: start a new buffer (the old one is
            // freed when its last line is shipped), zeroed once, not once per read.
            buf = BytesMut::zeroed(READ_SIZE);
            buf.clear();
        }
        let room = buf.capacity();
        // SAFETY: every byte of this allocation was initialised by `BytesMut::zeroed` (and later
        // overwritten by reads); `split` below hands out only the bytes a read filled.
        unsafe { buf.set_len(room) };
        let n = match src.read(&mut buf[..]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {
                buf.clear();
                continue;
            }
            Err(e) => {
                tracing::warn!("reading the child's {}: {e}", stream.as_str());
                break;
            }
        };
        let now = now_ns();
        buf.truncate(n);
        let chunk = buf.split().freeze();
        if passthrough_ok {
            // Our own stdout may be closed (a pipe whose reader left); keep capturing anyway.
            if dst.write_all(&chunk).and_then(|()| dst.flush()).is_err() {
                passthrough_ok = false;
            }
        }
        if capturing {
            capturing = guarded(stream, || {
                splitter.push(&chunk, now, &mut |l| lines.push(l));
                if !lines.is_empty() {
                    let mut s = sequencer.lock().unwrap_or_else(|p| p.into_inner());
                    s.accept_all(stream, lines.drain(..));
                }
            });
        }
    }
    if capturing {
        guarded(stream, || {
            splitter.finish(&mut |l| lines.push(l));
            let mut s = sequencer.lock().unwrap_or_else(|p| p.into_inner());
            s.accept_all(stream, lines.drain(..));
        });
    }
}

/// Runs one capture step; false (and a warning) if it panicked.
fn guarded(stream: Stream, step: impl FnOnce()) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(step)) {
        Ok(()) => true,
        Err(_) => {
            tracing::error!("capturing the child's {} failed; its output still passes through but is no longer shipped", stream.as_str());
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(chunks: &[&[u8]], cap: usize) -> Vec<SplitLine> {
        let mut s = LineSplitter::new(cap);
        let mut out = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            s.push(&Bytes::copy_from_slice(c), i as i64, &mut |l| out.push(l));
        }
        s.finish(&mut |l| out.push(l));
        out
    }

    #[test]
    fn lines_span_chunks_and_keep_their_first_read_time() {
        let lines = split_all(&[b"ab", b"c\nde", b"f\n\ng"], MAX_LINE);
        let got: Vec<(&[u8], i64)> = lines.iter().map(|l| (&l.bytes[..], l.capture_ns)).collect();
        assert_eq!(got, vec![(&b"abc"[..], 0), (b"def", 1), (b"", 2), (b"g", 2)]);
    }

    #[test]
    fn carriage_returns_and_invalid_utf8_are_kept() {
        // A multi-byte character split across reads, a lone continuation byte, and a \r.
        let lines = split_all(&[b"caf\xc3", b"\xa9 \xff\r\n", b"tail"], MAX_LINE);
        assert_eq!(&lines[0].bytes[..], b"caf\xc3\xa9 \xff\r");
        assert_eq!(&lines[1].bytes[..], b"tail");
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn no_phantom_line_after_a_final_newline() {
        assert_eq!(split_all(&[b"x\n"], MAX_LINE).len(), 1);
        assert!(split_all(&[], MAX_LINE).is_empty());
    }

    #[test]
    fn long_lines_are_shipped_truncated_with_a_marker() {
        let lines = split_all(&[b"0123456789", b"abc\nok\n"], 4);
        assert_eq!(&lines[0].bytes[..], b"0123 [coroner: truncated 9 bytes]");
        assert_eq!(lines[0].truncated, 9);
        assert_eq!(&lines[1].bytes[..], b"ok");
        // A long line that lies whole in one read is cut the same way.
        let lines = split_all(&[b"abcdefg\nok\n"], 4);
        assert_eq!(&lines[0].bytes[..], b"abcd [coroner: truncated 3 bytes]");
        assert_eq!(&lines[1].bytes[..], b"ok");
    }

    /// Hands out its bytes a few at a time, like a child writing in small pieces.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(self.0.len()).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_rank_agent_numbers_its_lines_across_reads_whatever_their_size() {
        let input: Vec<u8> = (0..3000).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        for piece in [1, 7, 4096, 1 << 20] {
            let queue = Arc::new(LineQueue::new(1 << 20, 1 << 30));
            let seq = Arc::new(Mutex::new(Sequencer::new(None, queue.clone())));
            let mut out = Vec::new();
            pump(Trickle(&input, piece), &mut out, Stream::Stdout, seq);
            assert_eq!(out, input);
            let lines = queue.drain_all();
            assert_eq!(lines.len(), 3000);
            for (i, l) in lines.iter().enumerate() {
                assert_eq!((l.seq, &l.raw[..], l.rank), (i as u64, format!("line {i}").as_bytes(), None));
            }
        }
    }

    #[test]
    fn pump_passes_bytes_through_unchanged_and_sequences_lines() {
        let queue = Arc::new(LineQueue::new(100, 1 << 20));
        let seq = Arc::new(Mutex::new(Sequencer::new(Some(RankFiler::new(0)), queue.clone())));
        let input: &[u8] = b"[rank1]:a\nlauncher\n[default1]:b\n\xff partial";
        let mut out = Vec::new();
        pump(input, &mut out, Stream::Stderr, seq);
        assert_eq!(out, input);
        let lines = queue.drain_all();
        let got: Vec<(Option<u32>, u64)> = lines.iter().map(|l| (l.rank, l.seq)).collect();
        assert_eq!(got, vec![(Some(1), 0), (None, 0), (Some(1), 1), (None, 1)]);
        assert_eq!(&lines[3].raw[..], b"\xff partial");
    }
}
