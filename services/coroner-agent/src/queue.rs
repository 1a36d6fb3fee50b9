//! The bounded queue between the pipe threads and the shipper. Pushing never blocks: when the
//! queue is full, a line that looks like an error or a warning evicts the oldest routine line,
//! and a routine line is dropped. Every drop is counted and reported with the process end.

use coroner_proto::v1;
use std::collections::VecDeque;
use std::sync::Mutex;
use tokio::sync::Notify;

/// Markers of a line worth keeping when something must go. A plain byte search, and only run
/// when the queue is full.
const IMPORTANT: &[&[u8]] = &[b"Error", b"error", b"WARN", b"Traceback", b"Fatal", b"[E", b"[F"];

pub fn is_important(raw: &[u8]) -> bool {
    IMPORTANT.iter().any(|m| raw.windows(m.len()).any(|w| w == *m))
}

struct Queued {
    line: v1::LogLine,
    /// Computed lazily, the first time the queue is full.
    important: Option<bool>,
}

#[derive(Default)]
struct Inner {
    lines: VecDeque<Queued>,
    bytes: usize,
    dropped: u64,
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

    pub fn push(&self, line: v1::LogLine) {
        let size = line.raw.len();
        let mut q = self.lock();
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
                        q.bytes -= v.line.raw.len();
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
        let wake = q.lines.len() == self.wake_lines || (q.bytes >= self.wake_bytes && q.bytes - size < self.wake_bytes);
        drop(q);
        if wake {
            self.notify.notify_one();
        }
    }

    /// Takes up to `max_lines` lines and about `max_bytes` bytes (at least one line).
    pub fn take_batch(&self, max_lines: usize, max_bytes: usize) -> Vec<v1::LogLine> {
        let mut q = self.lock();
        let mut out = Vec::new();
        let mut bytes = 0;
        while out.len() < max_lines {
            let Some(front) = q.lines.front() else { break };
            let size = front.line.raw.len();
            if !out.is_empty() && bytes + size > max_bytes {
                break;
            }
            let e = q.lines.pop_front().expect("front exists");
            q.bytes -= size;
            bytes += size;
            out.push(e.line);
        }
        out
    }

    #[cfg(test)]
    pub fn drain_all(&self) -> Vec<v1::LogLine> {
        let mut q = self.lock();
        q.bytes = 0;
        q.lines.drain(..).map(|e| e.line).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().lines.is_empty()
    }

    /// Lines dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64, text: &str) -> v1::LogLine {
        v1::LogLine { seq, raw: text.as_bytes().to_vec(), stream: 1, ..Default::default() }
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
    fn batches_respect_line_and_byte_limits() {
        let q = LineQueue::new(100, 1 << 20);
        for i in 0..5 {
            q.push(line(i, "0123456789"));
        }
        assert_eq!(q.take_batch(2, 1 << 20).len(), 2);
        assert_eq!(q.take_batch(10, 15).len(), 1);
        assert_eq!(q.take_batch(10, 1 << 20).len(), 2);
        assert!(q.is_empty());
    }
}
