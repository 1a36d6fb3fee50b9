//! The hot path: the child's pipes, copied through to the agent's own stdout/stderr byte for byte
//! ([`pump`], in the supervisor, and in the shipper when it takes over), and split into stamped,
//! sequenced lines ([`Capture`], in the shipper).
//!
//! Each pipe has its own OS thread doing blocking reads, so a slow terminal on one stream never
//! delays the other, and nothing here ever waits on the network: each read goes to a sink (the
//! supervisor's bounded chunk queue, `chunks.rs`, or a [`Capture`] feeding the shipper's line
//! queue, `queue.rs`).
//!
//! Per read, not per line: one `read`, one `write` of the same bytes to our own stdout or stderr
//! (so the passthrough is byte-exact and as prompt as the child's own writes), one hand-over of
//! the read; a line is a slice of the read buffer, not a copy.
//!
//! A line is the bytes up to `\n`, without it; a `\r` before it is kept. The capture time is the
//! wall-clock time of the read that delivered the line's first byte. A line longer than
//! [`MAX_LINE`] is passed through whole but shipped truncated, with a marker suffix.

use crate::queue::{Line, LineQueue};
use bytes::{Bytes, BytesMut};
use coroner_model::{now_ns, Stream};
use coroner_parse::RankFiler;
use coroner_proto::convert::stream_to_wire;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::sync::{Arc, Mutex};

/// The longest line shipped whole (1 MiB, the limit the server and the bundle reader keep too).
pub const MAX_LINE: usize = coroner_model::MAX_LINE_BYTES;
/// One read from a pipe (the pipe's own buffer is 64 KiB on Linux).
const READ_SIZE: usize = 64 * 1024;

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

    /// Forgets the line under way (its end was dropped); true if there was one.
    pub fn discard(&mut self) -> bool {
        let had = self.first_ns.is_some();
        if had {
            self.take();
        }
        had
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

    /// Spends the numbers of `n` lines of `stream` that were dropped before they were read,
    /// counting them as dropped. A launcher agent cannot tell whose lines they were: it only
    /// counts them.
    pub fn skip(&mut self, stream: Stream, n: u64) {
        if self.filer.is_none() {
            *self.next_seq.entry((None, stream)).or_insert(0) += n;
        }
        self.queue.count_dropped(n);
    }

    /// Numbers and queues the lines of one read, in order, under one queue lock.
    pub fn accept_all(&mut self, stream: Stream, lines: impl IntoIterator<Item = SplitLine>) {
        let wire_stream = stream_to_wire(stream) as i32;
        // A rank agent's lines all share one counter: look it up once.
        let mut own = if self.filer.is_none() { self.next_seq.get(&(None, stream)).copied() } else { None };
        let Sequencer { filer, next_seq, queue } = self;
        queue.push_all(lines.into_iter().map(|line| {
            let rank = filer.as_mut().and_then(|f| f.owner(&line.bytes)).map(|r| r.0);
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

/// Copies `src` to `dst` as it arrives and hands each read, with its capture time, to `sink`,
/// until end of file. Runs on its own thread; returns when the pipe closes (every writer has
/// exited).
///
/// Every read is written through at once (one `write` and a flush, before the sink sees it), so
/// the passthrough is byte-exact and never waits for a line to complete. The sink is the part
/// that may go wrong (a bug, a poisoned lock): it runs under `catch_unwind`, and if it ever panics
/// this pump goes on passing bytes through and hands over no more. The pipe is read to its end
/// whatever happens, so the child never blocks on a full pipe nobody reads.
pub fn pump(mut src: impl Read, mut dst: impl Write, stream: Stream, mut sink: impl FnMut(Bytes, i64)) {
    let mut buf = BytesMut::new();
    let mut passthrough_ok = true;
    let mut capturing = true;
    loop {
        if buf.capacity() < READ_SIZE / 4 {
            // Earlier reads are shared with queued chunks and lines: start a new buffer (the old
            // one is freed when its last reader is done), zeroed once, not once per read.
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
            capturing = guarded(stream, || sink(chunk, now));
        }
    }
}

/// One stream's lines: splits the reads of one pipe into lines and hands them, numbered, to the
/// shared [`Sequencer`]. Kept across a takeover, so a line the supervisor's last read began ends
/// where the shipper's first read ends it.
pub struct Capture {
    stream: Stream,
    splitter: LineSplitter,
    lines: Vec<SplitLine>,
    sequencer: Arc<Mutex<Sequencer>>,
}

impl Capture {
    pub fn new(stream: Stream, sequencer: Arc<Mutex<Sequencer>>) -> Self {
        Capture { stream, splitter: LineSplitter::new(MAX_LINE), lines: Vec::new(), sequencer }
    }

    /// One read of the pipe, at `now_ns`.
    pub fn chunk(&mut self, chunk: &Bytes, now_ns: i64) {
        let lines = &mut self.lines;
        self.splitter.push(chunk, now_ns, &mut |l| lines.push(l));
        self.flush();
    }

    /// `lines` lines of this stream were dropped before they got here: the line under way is
    /// lost too, and the numbers of the dropped lines are spent, so the server sees the gap.
    /// Returns how many lines were lost in all.
    pub fn gap(&mut self, lines: u64) -> u64 {
        let partial = u64::from(self.splitter.discard());
        self.sequencer.lock().unwrap_or_else(|p| p.into_inner()).skip(self.stream, lines + partial);
        lines + partial
    }

    /// The pipe ended: a last line without a newline is a line.
    pub fn finish(&mut self) {
        let lines = &mut self.lines;
        self.splitter.finish(&mut |l| lines.push(l));
        self.flush();
    }

    fn flush(&mut self) {
        if !self.lines.is_empty() {
            let mut s = self.sequencer.lock().unwrap_or_else(|p| p.into_inner());
            s.accept_all(self.stream, self.lines.drain(..));
        }
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
            let mut capture = Capture::new(Stream::Stdout, seq);
            pump(Trickle(&input, piece), &mut out, Stream::Stdout, |c, ns| capture.chunk(&c, ns));
            capture.finish();
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
        let input: &[u8] = b"[rank1]:a\nlauncher\n[default1]:b\n2: srun label\n\xff partial";
        let mut out = Vec::new();
        let mut capture = Capture::new(Stream::Stderr, seq);
        pump(input, &mut out, Stream::Stderr, |c, ns| capture.chunk(&c, ns));
        capture.finish();
        assert_eq!(out, input);
        let lines = queue.drain_all();
        let got: Vec<(Option<u32>, u64)> = lines.iter().map(|l| (l.rank, l.seq)).collect();
        // The pipeline's rule (`coroner_parse::RankFiler`): srun's `N: ` names rank N too.
        assert_eq!(got, vec![(Some(1), 0), (None, 0), (Some(1), 1), (Some(2), 0), (None, 1)]);
        assert_eq!(&lines[4].raw[..], b"\xff partial");
    }

    #[test]
    fn a_gap_spends_the_dropped_lines_numbers_and_the_line_it_cut() {
        let queue = Arc::new(LineQueue::new(100, 1 << 20));
        let seq = Arc::new(Mutex::new(Sequencer::new(None, queue.clone())));
        let mut c = Capture::new(Stream::Stdout, seq);
        c.chunk(&Bytes::from_static(b"a\nhalf"), 1);
        assert_eq!(c.gap(3), 4, "three dropped lines and the half line they cut");
        c.chunk(&Bytes::from_static(b"tail\nb\n"), 2);
        let got: Vec<(u64, Vec<u8>)> = queue.drain_all().into_iter().map(|l| (l.seq, l.raw.to_vec())).collect();
        assert_eq!(got, vec![(0, b"a".to_vec()), (5, b"tail".to_vec()), (6, b"b".to_vec())]);
        assert_eq!(queue.dropped(), 4);
    }

    #[test]
    fn a_sink_that_panics_stops_capture_but_never_the_pass_through() {
        let input: Vec<u8> = (0..2000).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        let mut out = Vec::new();
        let mut calls = 0;
        pump(Trickle(&input, 100), &mut out, Stream::Stdout, |_, _| {
            calls += 1;
            panic!("a bug in capture");
        });
        assert_eq!(out, input, "every byte passed through");
        assert_eq!(calls, 1, "capture stopped after its first failure");
    }
}
