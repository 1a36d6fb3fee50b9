//! Bounded memory, shown without timing: logs generated as they are read (never whole in
//! memory, not even the test's), and a sink that checks, at every line it is given, how far
//! ahead of that line the reader has read. A loader that read a file whole before giving its
//! first line would be ahead by the whole file.

use crate::line_reader::BUFFER_BYTES;
use crate::plain_log::{load_plain_log, Owner};
use crate::{LoadSummary, LogSurvey, Sink, SnapshotFacts};
use coroner_model::{LogLine, ProcessEnd, Rank, SnapshotSummary, Stream, MARKER_SLACK, MAX_LINE_BYTES};
use std::cell::Cell;
use std::io::{self, Read};
use std::path::Path;
use std::rc::Rc;

/// A log of `total` bytes made as it is read: each line from `line(i)`, or, with no newline at
/// all, one byte `fill` repeated. Counts the bytes it has given out in `given`.
pub struct Generated {
    total: u64,
    made: u64,
    given: Rc<Cell<u64>>,
    pending: Vec<u8>,
    at: usize,
    next: u64,
    line: Box<dyn Fn(u64) -> Vec<u8>>,
}

impl Generated {
    /// `total` bytes of one byte, `fill(0)`, with no newline.
    pub fn new(total: usize, fill: fn(u64) -> u8) -> Self {
        let b = fill(0);
        Self::lines(total as u64, Rc::default(), Box::new(move |_| vec![b; 64 << 10]))
    }

    /// `total` bytes of lines (each `line(i)` should end with its newline).
    pub fn lines(total: u64, given: Rc<Cell<u64>>, line: Box<dyn Fn(u64) -> Vec<u8>>) -> Self {
        Generated { total, made: 0, given, pending: Vec::new(), at: 0, next: 0, line }
    }
}

impl Read for Generated {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.pending.len() {
            if self.made >= self.total {
                return Ok(0);
            }
            self.pending = (self.line)(self.next);
            self.next += 1;
            let left = (self.total - self.made) as usize;
            self.pending.truncate(left);
            self.made += self.pending.len() as u64;
            self.at = 0;
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        self.given.set(self.given.get() + n as u64);
        Ok(n)
    }
}

/// A training log's lines: steps, NCCL lines, and rank 5's traceback now and then.
fn training_line(i: u64) -> Vec<u8> {
    let (s, ms) = (i / 1000, i % 1000);
    let text = match i % 7 {
        0 => format!("node0:2001:2001 [1] NCCL INFO Channel {:02}/0 : 1[1] -> 2[2] via P2P/CUMEM", i % 32),
        3 if i % 7001 == 3 => "[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered".to_string(),
        _ => format!("2026-11-30 09:{:02}:{:02},{ms:03} INFO [rank{}] train: step {i} loss 1.{:06}", s / 60 % 60, s % 60, i % 8, i * 7919 % 1_000_000),
    };
    format!("{text}\n").into_bytes()
}

/// Checks every line it is given against how far the input has been read.
struct Ahead {
    given: Rc<Cell<u64>>,
    /// Bytes of the lines given so far in this pass, with their newlines.
    delivered: u64,
    most_ahead: u64,
    longest: usize,
    lines: u64,
    logs: usize,
}

impl Ahead {
    fn see(&mut self, line: &LogLine) {
        self.delivered += line.bytes.len() as u64 + 1;
        self.most_ahead = self.most_ahead.max(self.given.get().saturating_sub(self.delivered));
        self.longest = self.longest.max(line.bytes.len());
        self.lines += 1;
    }
}

impl Sink for Ahead {
    fn line(&mut self, line: LogLine) {
        self.see(&line);
    }
    fn begin_log(&mut self, _source: &str, _survey: &LogSurvey) {
        self.logs += 1;
    }
    fn log_line(&mut self, line: LogLine) {
        self.see(&line);
    }
    fn end(&mut self, _end: ProcessEnd) {}
    fn world_size(&mut self, _n: u32) {}
    fn snapshot(&mut self, _summary: SnapshotSummary, _facts: SnapshotFacts, _dir: &Path) {}
    fn note(&mut self, _note: String) {}
    fn finished(&mut self) {}
}

/// Loads a generated log of `total` bytes as `owner`'s through the one path every plain log takes.
fn load_generated(total: u64, owner: Owner, line: fn(u64) -> Vec<u8>) -> (Ahead, LoadSummary) {
    let given: Rc<Cell<u64>> = Rc::default();
    let mut sink = Ahead { given: given.clone(), delivered: 0, most_ahead: 0, longest: 0, lines: 0, logs: 0 };
    let open = || -> io::Result<Box<dyn Read>> {
        // Each pass reads from the start: its counts start again.
        given.set(0);
        Ok(Box::new(Generated::lines(total, given.clone(), Box::new(line))))
    };
    let mut summary = LoadSummary::default();
    // The sink counts the second pass only: the first gives no lines.
    load_plain_log("train.log", &open, owner, Stream::File, 0, &mut sink, &mut summary);
    (sink, summary)
}

/// Every byte of the input became a line (the last one, cut at `total`, has no newline to count).
fn every_byte(sink: &Ahead, total: u64) -> bool {
    sink.delivered == total || sink.delivered == total + 1
}

#[test]
fn a_combined_log_is_read_ahead_of_its_lines_by_one_buffer_not_whole() {
    let total = 24 << 20;
    let (sink, summary) = load_generated(total, Owner::Unknown, training_line);
    assert_eq!(sink.logs, 1, "filed as one log of unknown owner");
    assert!(sink.lines > 200_000, "{}", sink.lines);
    assert_eq!(summary.lines, sink.lines);
    assert!(every_byte(&sink, total), "{} of {total} bytes became lines", sink.delivered);
    // One `BufReader` buffer (256 KiB) ahead at most, plus the line being read.
    assert!(sink.most_ahead <= (BUFFER_BYTES + 4096) as u64, "read {} bytes ahead of the lines given (of {total})", sink.most_ahead);
}

#[test]
fn a_rank_log_is_read_ahead_of_its_lines_by_one_buffer_not_whole() {
    let total = 8 << 20;
    let (sink, _) = load_generated(total, Owner::Rank(Rank(3)), training_line);
    assert_eq!(sink.logs, 0);
    assert!(every_byte(&sink, total), "{} of {total} bytes became lines", sink.delivered);
    assert!(sink.most_ahead <= (BUFFER_BYTES + 4096) as u64, "read {} bytes ahead of the lines given (of {total})", sink.most_ahead);
}

/// 10 MB with no newline, between ordinary lines: cut to the limit as it is read, said in a
/// warning, and the lines after it still come.
#[test]
fn a_huge_line_without_a_newline_is_cut_and_said() {
    fn line(i: u64) -> Vec<u8> {
        match i {
            0 => b"2026-11-30 09:00:00,000 INFO [rank1] train: step 0\n".to_vec(),
            1..=160 => vec![0xff; 64 << 10], // 10 MiB of bytes that are not UTF-8, no newline
            161 => b"\n".to_vec(),
            _ => b"2026-11-30 09:00:01,000 INFO [rank1] train: step 1\n".to_vec(),
        }
    }
    let total = 51 + (160 << 16) + 1 + 51 * 10;
    let (sink, summary) = load_generated(total, Owner::Unknown, line);
    assert_eq!(sink.lines, 12, "the line before, the cut one, the ten after");
    assert!(sink.longest <= MAX_LINE_BYTES + MARKER_SLACK, "{}", sink.longest);
    assert!(summary.warnings.iter().any(|w| w.contains("train.log: cut 1 of its lines to 1048576 bytes")), "{:?}", summary.warnings);
}
