//! The supervisor's queue: the child's output as it was read, chunk by chunk, on its way to the
//! shipper. The supervisor does not split lines (the shipper does): this queue holds whole reads,
//! bounded in bytes.
//!
//! When it is full while a shipper runs (a burst faster than the shipper takes it) a pipe thread
//! waits for room, at most [`WAIT_FOR_ROOM`], as it would on a slow terminal; if no room came in
//! time, or no shipper runs, the chunk is dropped instead and a gap (the stream and how many lines
//! it held) takes its place, so the shipper knows where lines are missing and how many. Gaps cost
//! a few bytes and are merged, so the queue stays bounded whatever the output rate.

use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The longest a pipe thread waits for room while a shipper runs.
pub const WAIT_FOR_ROOM: Duration = Duration::from_millis(250);

/// One entry of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Bytes read from the child's `stream` (a `v1::StreamKind` value) at `capture_ns`.
    Chunk { stream: u8, capture_ns: i64, bytes: Bytes },
    /// Bytes of `stream` dropped here: `lines` newlines in `bytes` bytes.
    Gap { stream: u8, lines: u64, bytes: u64 },
}

impl Entry {
    /// The stream it belongs to (a `v1::StreamKind` value).
    pub fn stream(&self) -> u8 {
        match self {
            Entry::Chunk { stream, .. } | Entry::Gap { stream, .. } => *stream,
        }
    }
}

#[derive(Default)]
struct Inner {
    entries: VecDeque<Entry>,
    bytes: usize,
    /// Some room did not come in time: drop without waiting until the reader takes entries.
    stalled: bool,
    closed: bool,
    /// A shipper runs and takes entries: worth waiting for.
    draining: bool,
}

pub struct ChunkQueue {
    inner: Mutex<Inner>,
    max_bytes: usize,
    room: Condvar,
    arrived: Condvar,
    wait_for_room: Duration,
}

impl ChunkQueue {
    pub fn new(max_bytes: usize) -> Self {
        ChunkQueue { inner: Mutex::default(), max_bytes, room: Condvar::new(), arrived: Condvar::new(), wait_for_room: WAIT_FOR_ROOM }
    }

    #[cfg(test)]
    fn with_wait(mut self, wait: Duration) -> Self {
        self.wait_for_room = wait;
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Says whether a shipper runs (then a full queue waits for room before dropping).
    pub fn set_draining(&self, draining: bool) {
        self.lock().draining = draining;
        self.room.notify_all();
    }

    /// Queues one read of `stream`, or a gap in its place.
    pub fn push(&self, stream: u8, capture_ns: i64, bytes: Bytes) {
        let size = bytes.len();
        let mut q = self.lock();
        let full = |q: &Inner| !q.entries.is_empty() && q.bytes + size > self.max_bytes;
        if full(&q) && q.draining && !q.stalled {
            let deadline = Instant::now() + self.wait_for_room;
            while full(&q) && q.draining {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    q.stalled = true;
                    break;
                }
                q = self.room.wait_timeout(q, left).unwrap_or_else(|p| p.into_inner()).0;
            }
        }
        let was_empty = q.entries.is_empty();
        if full(&q) {
            let lines = memchr::memchr_iter(b'\n', &bytes).count() as u64;
            match q.entries.back_mut() {
                Some(Entry::Gap { stream: s, lines: l, bytes: b }) if *s == stream => {
                    *l += lines;
                    *b += size as u64;
                }
                _ => q.entries.push_back(Entry::Gap { stream, lines, bytes: size as u64 }),
            }
        } else {
            q.bytes += size;
            q.entries.push_back(Entry::Chunk { stream, capture_ns, bytes });
        }
        drop(q);
        if was_empty {
            self.arrived.notify_one();
        }
    }

    /// Takes what is queued, up to about `max_bytes` (at least one entry), waiting up to
    /// `timeout` while the queue is empty and open. Empty when it timed out or the queue is
    /// closed and empty.
    pub fn take(&self, max_bytes: usize, timeout: Duration) -> Vec<Entry> {
        let mut q = self.lock();
        if q.entries.is_empty() && !q.closed {
            q = self.arrived.wait_timeout(q, timeout).unwrap_or_else(|p| p.into_inner()).0;
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        while let Some(front) = q.entries.front() {
            let size = match front {
                Entry::Chunk { bytes, .. } => bytes.len(),
                Entry::Gap { .. } => 0,
            };
            if !out.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            q.bytes -= size;
            out.push(q.entries.pop_front().expect("front exists"));
        }
        if !out.is_empty() {
            q.stalled = false;
            self.room.notify_all();
        }
        out
    }

    /// No more chunks will come: a waiting reader wakes.
    pub fn close(&self) {
        self.lock().closed = true;
        self.arrived.notify_all();
    }

    /// Closed, and everything in it taken.
    pub fn is_finished(&self) -> bool {
        let q = self.lock();
        q.closed && q.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    #[test]
    fn a_full_queue_with_no_shipper_turns_chunks_into_merged_gaps() {
        let q = ChunkQueue::new(10);
        q.push(1, 0, chunk("0123456\n"));
        q.push(1, 1, chunk("a\nb\n"));
        q.push(1, 2, chunk("cd\n"));
        q.push(2, 3, chunk("err\n"));
        let got = q.take(1 << 20, Duration::ZERO);
        assert_eq!(
            got,
            vec![
                Entry::Chunk { stream: 1, capture_ns: 0, bytes: chunk("0123456\n") },
                Entry::Gap { stream: 1, lines: 3, bytes: 7 },
                Entry::Gap { stream: 2, lines: 1, bytes: 4 },
            ]
        );
        q.push(1, 4, chunk("fits\n"));
        assert_eq!(q.take(1 << 20, Duration::ZERO), vec![Entry::Chunk { stream: 1, capture_ns: 4, bytes: chunk("fits\n") }]);
    }

    #[test]
    fn with_a_shipper_a_full_queue_waits_for_room_once_then_drops_until_it_is_taken() {
        let q = std::sync::Arc::new(ChunkQueue::new(4).with_wait(Duration::from_millis(50)));
        q.set_draining(true);
        q.push(1, 0, chunk("abc\n"));
        let reader = {
            let q = q.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                q.take(4, Duration::ZERO)
            })
        };
        q.push(1, 1, chunk("def\n")); // waits until the reader makes room
        assert_eq!(reader.join().unwrap().len(), 1);
        let started = Instant::now();
        q.push(1, 2, chunk("ghi\n")); // nobody takes: waits 50 ms, then a gap
        q.push(1, 3, chunk("jkl\n")); // stalled: no second wait
        assert!(started.elapsed() < Duration::from_millis(500));
        let got = q.take(1 << 20, Duration::ZERO);
        assert_eq!(got[1], Entry::Gap { stream: 1, lines: 2, bytes: 8 });
    }

    #[test]
    fn a_blocking_reader_wakes_for_chunks_and_for_close() {
        let q = std::sync::Arc::new(ChunkQueue::new(1 << 20));
        let reader = {
            let q = q.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while !q.is_finished() {
                    n += q.take(1 << 20, Duration::from_secs(30)).len();
                }
                n
            })
        };
        for i in 0..5 {
            q.push(1, i, chunk("x\n"));
            std::thread::sleep(Duration::from_millis(2));
        }
        q.close();
        assert_eq!(reader.join().unwrap(), 5);
    }
}
