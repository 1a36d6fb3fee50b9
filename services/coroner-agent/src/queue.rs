//! The bounded queue between the pipe threads and the shipper. It never waits on the network:
//! the shipper drains it into the spool on local disk whether or not a server is reachable.
//! When it is full while the shipper is spooling (a burst faster than the spool takes it), a
//! pipe thread waits for room, at most [`WAIT_FOR_ROOM`] (the child then waits on its pipe, as
//! it would on a slow terminal). When the shipper cannot spool, or did not make room in time,
//! a line that looks like an error or a warning (`coroner_parse::is_important`, the rule the
//! index's severity follows too) evicts the oldest routine line, and a routine
//! line is dropped, without waiting again until the shipper takes lines. Every drop is counted
//! and reported with the process end.
//!
//! A pipe thread pushes all the lines of one read under one lock; a line's bytes are a slice of
//! the read buffer they arrived in (no copy, no allocation per line).

use bytes::Bytes;
use coroner_parse::is_important;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The longest a pipe thread waits for room while the shipper is spooling.
pub const WAIT_FOR_ROOM: Duration = Duration::from_millis(250);

/// What a queued line costs beside its bytes (its fields and the queue's slot), for the limit.
pub const LINE_OVERHEAD: usize = 64;

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
    /// A wait for room timed out: drop instead of waiting until the shipper takes lines again.
    stalled: bool,
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
    /// Signalled when the shipper takes lines.
    room: Condvar,
    /// The shipper drains the queue without bound (it has a spool with room): worth waiting for.
    draining: AtomicBool,
    wait_for_room: Duration,
}

impl LineQueue {
    pub fn new(max_lines: usize, max_bytes: usize) -> Self {
        LineQueue::with_wake(max_lines, max_bytes, 1000, 1 << 20)
    }

    /// A queue that wakes the shipper once `wake_lines` lines or `wake_bytes` bytes wait.
    pub fn with_wake(max_lines: usize, max_bytes: usize, wake_lines: usize, wake_bytes: usize) -> Self {
        LineQueue {
            inner: Mutex::default(),
            max_lines,
            max_bytes,
            notify: Notify::new(),
            wake_lines,
            wake_bytes,
            room: Condvar::new(),
            draining: AtomicBool::new(false),
            wait_for_room: WAIT_FOR_ROOM,
        }
    }

    /// Says whether the shipper is draining the queue into a spool (then a full queue waits for
    /// room before dropping).
    pub fn set_draining(&self, draining: bool) {
        self.draining.store(draining, Ordering::Relaxed);
        if !draining {
            self.room.notify_all();
        }
    }

    #[cfg(test)]
    fn with_wait(mut self, wait: Duration) -> Self {
        self.wait_for_room = wait;
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
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
            q = self.push_locked(q, line);
        }
        q.peak_bytes = q.peak_bytes.max(q.bytes);
        let wake = (lines_before < self.wake_lines && q.lines.len() >= self.wake_lines) || (bytes_before < self.wake_bytes && q.bytes >= self.wake_bytes);
        drop(q);
        if wake {
            self.notify.notify_one();
        }
    }

    fn full(&self, q: &Inner, size: usize) -> bool {
        !q.lines.is_empty() && (q.lines.len() >= self.max_lines || q.bytes + size > self.max_bytes)
    }

    fn push_locked<'a>(&'a self, mut q: MutexGuard<'a, Inner>, line: Line) -> MutexGuard<'a, Inner> {
        let size = line.cost();
        if self.full(&q, size) && !q.stalled && self.draining.load(Ordering::Relaxed) {
            self.notify.notify_one();
            let deadline = Instant::now() + self.wait_for_room;
            while self.full(&q, size) && self.draining.load(Ordering::Relaxed) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    q.stalled = true;
                    break;
                }
                q = self.room.wait_timeout(q, left).unwrap_or_else(|p| p.into_inner()).0;
            }
        }
        self.admit(&mut q, line, size);
        q
    }

    fn admit(&self, q: &mut Inner, line: Line, size: usize) {
        if self.full(q, size) {
            if !is_important(&line.raw) {
                q.dropped += 1;
                return;
            }
            // Make room by evicting the oldest routine lines.
            while self.full(q, size) {
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
        if !out.is_empty() {
            q.stalled = false;
            self.room.notify_all();
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

    /// Lines dropped so far because the queue was full, or counted in with [`LineQueue::count_dropped`].
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Counts lines that were dropped before they reached this queue (the supervisor's gaps).
    pub fn count_dropped(&self, lines: u64) {
        let mut q = self.lock();
        q.dropped = q.dropped.saturating_add(lines);
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
    fn a_full_queue_waits_for_a_draining_shipper_instead_of_dropping() {
        let q = std::sync::Arc::new(LineQueue::new(2, 1 << 20).with_wait(Duration::from_secs(30)));
        q.set_draining(true);
        q.push_all((0..2).map(|i| line(i, "step")));
        let pusher = {
            let q = q.clone();
            std::thread::spawn(move || q.push_all((2..5).map(|i| line(i, "step"))))
        };
        let mut taken = Vec::new();
        while taken.len() < 5 {
            taken.extend(q.take_batch(1, 1 << 20).into_iter().map(|l| l.seq));
            std::thread::sleep(Duration::from_millis(5));
        }
        pusher.join().unwrap();
        assert_eq!(taken, vec![0, 1, 2, 3, 4]);
        assert_eq!(q.dropped(), 0);
    }

    #[test]
    fn a_stalled_shipper_is_waited_for_once_then_lines_drop_until_it_takes_some() {
        let q = LineQueue::new(1, 1 << 20).with_wait(Duration::from_millis(20));
        q.set_draining(true);
        q.push(line(0, "a"));
        let started = Instant::now();
        q.push(line(1, "b"));
        assert!(started.elapsed() >= Duration::from_millis(20));
        let started = Instant::now();
        q.push(line(2, "c"));
        assert!(started.elapsed() < Duration::from_secs(1), "no second wait while stalled");
        assert_eq!(q.dropped(), 2);
        assert_eq!(q.take_batch(10, 1 << 20).len(), 1);
        // Not draining (no spool): a full queue drops at once.
        q.set_draining(false);
        q.push(line(3, "d"));
        let started = Instant::now();
        q.push(line(4, "e"));
        assert!(started.elapsed() < Duration::from_millis(20));
        assert_eq!(q.dropped(), 3);
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
