//! The bounded queue between the pipe threads and the shipper. Pushing never blocks: when the
//! queue is full, a line that looks like an error or a warning evicts the oldest routine line,
//! and a routine line is dropped. Every drop is counted and reported with the process end.
//!
//! A pipe thread pushes all the lines of one read under one lock; a line's bytes are a slice of
//! the read buffer they arrived in (no copy, no allocation per line).

use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::Mutex;
use tokio::sync::Notify;

/// Markers of a line worth keeping when something must go. A plain byte search, and only run
/// when the queue is full.
const IMPORTANT: &[&[u8]] = &[b"Error", b"error", b"WARN", b"Traceback", b"Fatal", b"[E", b"[F"];

/// What a queued line costs beside its bytes (its fields and the queue's slot), for the limit.
pub const LINE_OVERHEAD: usize = 64;

pub fn is_important(raw: &[u8]) -> bool {
    IMPORTANT.iter().any(|m| memchr::memmem::find(raw, m).is_some())
}

/// One captured line: its exact bytes, its capture time, and its number in its (rank, stream)
/// as this agent counts them (from 0; the shipper rebases it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub raw: Bytes,
    pub seq: u64,
    pub capture_ns: i64,
    /// A `v1::StreamKind` value.
    pub stream: i32,
    /// Set by a launcher agent that filed the line under a worker's global rank.
    pub rank: Option<u32>,
}

impl Line {
    fn cost(&self) -> usize {
        self.raw.len() + LINE_OVERHEAD
    }
}

struct Queued {
    line: Line,
    /// Computed lazily, the first time the queue is full.
    important: Option<bool>,
}

#[derive(Default)]
struct Inner {
    lines: VecDeque<Queued>,
    bytes: usize,
    dropped: u64,
    /// The most bytes ever held (for the exit summary).
    peak_bytes: usize,
}

/// Lines waiting for the shipper.
pub struct LineQueue {
    inner: Mutex<Inner>,
    max_lines: usize,
    max_bytes: usize,
    /// Wakes the shipper when a full batch is waiting.
    pub notify: Notify,
    wake_lines: usize,
    wake_bytes: usize,
}

impl LineQueue {
    pub fn new(max_lines: usize, max_bytes: usize) -> Self {
        LineQueue::with_wake(max_lines, max_bytes, 1000, 1 << 20)
    }

    /// A queue that wakes the shipper once `wake_lines` lines or `wake_bytes` bytes wait.
    pub fn with_wake(max_lines: usize, max_bytes: usize, wake_lines: usize, wake_bytes: usize) -> Self {
        LineQueue { inner: Mutex::default(), max_lines, max_bytes, notify: Notify::new(), wake_lines, wake_bytes }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    pub fn push(&self, line: Line) {
        self.push_all(std::iter::once(line));
    }

    /// Pushes lines in order under one lock (the lines of one read).
    pub fn push_all(&self, lines: impl IntoIterator<Item = Line>) {
        let mut q = self.lock();
        let (lines_before, bytes_before) = (q.lines.len(), q.bytes);
        for line in lines {
            self.push_locked(&mut q, line);
        }
        q.peak_bytes = q.peak_bytes.max(q.bytes);
        let wake = (lines_before < self.wake_lines && q.lines.len() >= self.wake_lines)
            || (bytes_before < self.wake_bytes && q.bytes >= self.wake_bytes);
        drop(q);
        if wake {
            self.notify.notify_one();
        }
    }

    fn push_locked(&self, q: &mut Inner, line: Line) {
        let size = line.cost();
        if q.lines.len() >= self.max_lines || q.bytes + size > self.max_bytes {
            if !is_important(&line.raw) {
                q.dropped += 1;
                return;
            }
            // Make room by evicting the oldest routine lines.
            while q.lines.len() >= self.max_lines || q.bytes + size > self.max_bytes {
                let victim = q.lines.iter_mut().position(|e| !*e.important.get_or_insert_with(|| is_important(&e.line.raw)));
                match victim.and_then(|i| q.lines.remove(i)) {
                    Some(v) => {
                        q.bytes -= v.line.cost();
                        q.dropped += 1;
                    }
                    None => {
                        q.dropped += 1;
                        return;
                    }
                }
            }
        }
        q.bytes += size;
        q.lines.push_back(Queued { line, important: None });
    }

    /// Takes up to `max_lines` lines and about `max_bytes` bytes of text (at least one line).
    pub fn take_batch(&self, max_lines: usize, max_bytes: usize) -> Vec<Line> {
        let mut q = self.lock();
        let mut out = Vec::with_capacity(max_lines.min(q.lines.len()));
        let mut bytes = 0;
        while out.len() < max_lines {
            let Some(front) = q.lines.front() else { break };
            let size = front.line.raw.len();
            if !out.is_empty() && bytes + size > max_bytes {
                break;
            }
            let e = q.lines.pop_front().expect("front exists");
            q.bytes -= e.line.cost();
            bytes += size;
            out.push(e.line);
        }
        out
    }

    #[cfg(test)]
    pub fn drain_all(&self) -> Vec<Line> {
        let mut q = self.lock();
        q.bytes = 0;
        q.lines.drain(..).map(|e| e.line).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().lines.is_empty()
    }

    /// How many lines wait.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().lines.len()
    }

    /// The most bytes the queue ever held (lines with their overhead).
    pub fn peak_bytes(&self) -> usize {
        self.lock().peak_bytes
    }

    /// Lines dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64, text: &str) -> Line {
        Line { seq, raw: Bytes::copy_from_slice(text.as_bytes()), stream: 1, capture_ns: 0, rank: None }
    }

    #[test]
    fn a_full_queue_keeps_errors_and_drops_routine_lines() {
        let q = LineQueue::new(3, 1 << 20);
        q.push(line(0, "step 1"));
        q.push(line(1, "[rank0]:[E1130 08:59:11 x.cpp:1] boom"));
        q.push(line(2, "step 2"));
        q.push(line(3, "step 3"));
        q.push(line(4, "Traceback (most recent call last):"));
        let kept: Vec<u64> = q.drain_all().iter().map(|l| l.seq).collect();
        assert_eq!(kept, vec![1, 2, 4]);
        assert_eq!(q.dropped(), 2);
    }

    #[test]
    fn the_byte_limit_counts_each_line_with_its_overhead() {
        let q = LineQueue::new(100, 2 * (LINE_OVERHEAD + 10));
        q.push_all((0..3).map(|i| line(i, "0123456789")));
        assert_eq!(q.len(), 2);
        assert_eq!(q.dropped(), 1);
        q.take_batch(1, 1 << 20);
        q.push(line(3, "0123456789"));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn batches_respect_line_and_byte_limits() {
        let q = LineQueue::new(100, 1 << 20);
        q.push_all((0..5).map(|i| line(i, "0123456789")));
        assert_eq!(q.take_batch(2, 1 << 20).len(), 2);
        assert_eq!(q.take_batch(10, 15).len(), 1);
        assert_eq!(q.take_batch(10, 1 << 20).len(), 2);
        assert!(q.is_empty());
    }

    #[test]
    fn the_shipper_is_woken_once_per_full_batch() {
        let q = LineQueue::with_wake(100, 1 << 20, 3, 1 << 20);
        q.push_all((0..2).map(|i| line(i, "x")));
        assert!(futures_now(&q).is_none());
        q.push_all((2..5).map(|i| line(i, "x")));
        assert!(futures_now(&q).is_some());
    }

    /// Whether a permit to wake the shipper is stored (without waiting for one).
    fn futures_now(q: &LineQueue) -> Option<()> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async { tokio::time::timeout(std::time::Duration::from_millis(1), q.notify.notified()).await.ok() })
    }
}
