//! The live tail of a job: the lines the committer has just made durable, for the web page's
//! server-sent events (`http/tail.rs`). Ingest never waits for a watcher:
//!
//! - nothing is copied while nobody watched the job in the last [`KEEP_WHILE_WATCHED`];
//! - batches go out on a bounded broadcast channel: a watcher that falls [`CHANNEL_BATCHES`]
//!   behind loses the oldest and is told how many it lost (`Lagged`), the sender never blocks;
//! - the last [`RECENT_LINES`] lines are kept so a watcher that reconnects with the id of the
//!   last batch it saw (SSE `Last-Event-ID`) gets what it missed, and nothing twice.
//!
//! A batch's id is `<epoch>-<n>`: `n` counts this job's batches since it was opened here, the
//! epoch tells one opening from the next (an id from before a restart replays nothing).

use coroner_model::{LogLine, Stream};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// Batches a watcher may fall behind before it loses the oldest.
const CHANNEL_BATCHES: usize = 64;
/// Lines kept for watchers that reconnect.
const RECENT_LINES: usize = 10_000;
/// The most lines of one commit group sent to watchers (a group holds up to 128 Ki lines): the
/// rest are counted as skipped; a tail is for reading, a search finds them all.
const MAX_BATCH_LINES: usize = 2_000;
/// Lines are kept for the tail this long after the last watcher was seen.
const KEEP_WHILE_WATCHED: i64 = 60_000_000_000;
/// Watchers of one job at once; past it a new one is refused (429).
pub const MAX_WATCHERS: usize = 32;

/// One committed line as the tail shows it.
#[derive(Debug, Clone)]
pub struct TailLine {
    pub rank: Option<u32>,
    pub stream: Stream,
    pub seq: u64,
    pub capture_ns: i64,
    pub host: Arc<str>,
    pub bytes: Vec<u8>,
}

/// The lines of one commit group, in commit order.
#[derive(Debug)]
pub struct TailBatch {
    pub n: u64,
    pub lines: Vec<TailLine>,
    /// Lines of the group not carried (over [`MAX_BATCH_LINES`]).
    pub skipped: u64,
}

pub struct Tail {
    epoch: u64,
    tx: broadcast::Sender<Arc<TailBatch>>,
    /// The last batches (at most [`RECENT_LINES`] lines), and the next batch number.
    recent: Mutex<(VecDeque<Arc<TailBatch>>, u64)>,
    watched_ns: AtomicI64,
    watchers: AtomicUsize,
}

/// A watcher's place: counted until dropped.
pub struct Watcher {
    tail: Arc<Tail>,
    pub rx: broadcast::Receiver<Arc<TailBatch>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.tail.watchers.fetch_sub(1, Ordering::Relaxed);
        self.tail.touch();
    }
}

impl Default for Tail {
    fn default() -> Self {
        Tail::new()
    }
}

impl Tail {
    pub fn new() -> Tail {
        Tail {
            epoch: coroner_model::now_ns() as u64,
            tx: broadcast::channel(CHANNEL_BATCHES).0,
            recent: Mutex::new((VecDeque::new(), 1)),
            watched_ns: AtomicI64::new(i64::MIN),
            watchers: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        self.watched_ns.store(coroner_model::now_ns(), Ordering::Relaxed);
    }

    /// Whether committed lines are wanted now (someone watches, or did a moment ago).
    pub fn wanted(&self) -> bool {
        self.watchers.load(Ordering::Relaxed) > 0 || coroner_model::now_ns().saturating_sub(self.watched_ns.load(Ordering::Relaxed)) < KEEP_WHILE_WATCHED
    }

    /// Records one commit group's lines (each with its agent's host) and sends them to the
    /// watchers; does nothing when nobody watches. Never blocks on a watcher.
    pub fn record<'a>(&self, lines: impl Iterator<Item = (&'a LogLine, &'a str)>) {
        if !self.wanted() {
            return;
        }
        let mut carried = Vec::new();
        let mut skipped = 0u64;
        let mut host: Option<Arc<str>> = None;
        for (l, h) in lines {
            if carried.len() >= MAX_BATCH_LINES {
                skipped += 1;
                continue;
            }
            if host.as_deref() != Some(h) {
                host = Some(Arc::from(h));
            }
            let host = host.clone().unwrap_or_else(|| Arc::from(h));
            carried.push(TailLine { rank: l.rank.map(|r| r.0), stream: l.stream, seq: l.seq, capture_ns: l.capture_ns, host, bytes: l.bytes.clone() });
        }
        if carried.is_empty() && skipped == 0 {
            return;
        }
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let batch = Arc::new(TailBatch { n: recent.1, lines: carried, skipped });
        recent.1 += 1;
        recent.0.push_back(batch.clone());
        let mut held: usize = recent.0.iter().map(|b| b.lines.len()).sum();
        while held > RECENT_LINES && recent.0.len() > 1 {
            held -= recent.0.pop_front().map_or(0, |b| b.lines.len());
        }
        // Sent under the lock, so a new watcher's replay and its channel never overlap or gap.
        let _ = self.tx.send(batch);
    }

    /// A new watcher, or `None` past [`MAX_WATCHERS`]; with the kept batches after the one
    /// `last_id` names (none when it is absent or of another epoch), and whether lines were lost
    /// between that id and the oldest batch kept.
    pub fn watch(self: &Arc<Self>, last_id: Option<&str>) -> Option<(Watcher, Vec<Arc<TailBatch>>, bool)> {
        if self.watchers.fetch_add(1, Ordering::Relaxed) >= MAX_WATCHERS {
            self.watchers.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        self.touch();
        let after = last_id.and_then(|id| self.parse_id(id));
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let rx = self.tx.subscribe();
        let (replay, lost) = match after {
            None => (Vec::new(), false),
            Some(after) => {
                let replay: Vec<_> = recent.0.iter().filter(|b| b.n > after).cloned().collect();
                let oldest = recent.0.front().map_or(recent.1, |b| b.n);
                (replay, after + 1 < oldest)
            }
        };
        drop(recent);
        Some((Watcher { tail: self.clone(), rx }, replay, lost))
    }

    /// The SSE id of a batch.
    pub fn id_of(&self, b: &TailBatch) -> String {
        format!("{}-{}", self.epoch, b.n)
    }

    fn parse_id(&self, id: &str) -> Option<u64> {
        let (epoch, n) = id.trim().split_once('-')?;
        (epoch.parse::<u64>().ok()? == self.epoch).then_some(())?;
        n.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::Rank;

    fn line(seq: u64) -> LogLine {
        LogLine { rank: Some(Rank(3)), stream: Stream::Stdout, seq, capture_ns: seq as i64, bytes: format!("line {seq}").into_bytes() }
    }

    fn record(t: &Tail, seqs: std::ops::Range<u64>) {
        let lines: Vec<LogLine> = seqs.map(line).collect();
        t.record(lines.iter().map(|l| (l, "node-a")));
    }

    #[test]
    fn nothing_is_kept_while_nobody_watches() {
        let t = Arc::new(Tail::new());
        record(&t, 0..5);
        let (_w, replay, _) = t.watch(Some(&format!("{}-0", t.epoch))).expect("a watcher");
        assert!(replay.is_empty());
    }

    #[test]
    fn a_watcher_gets_batches_and_a_reconnect_gets_only_what_it_missed() {
        let t = Arc::new(Tail::new());
        let (mut w, _, _) = t.watch(None).expect("a watcher");
        record(&t, 0..2);
        let first = w.rx.try_recv().expect("the first batch");
        assert_eq!(first.lines.iter().map(|l| l.seq).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(&*first.lines[0].host, "node-a");
        drop(w);
        record(&t, 2..4);
        record(&t, 4..5);
        let (_w, replay, lost) = t.watch(Some(&t.id_of(&first))).expect("a watcher");
        assert_eq!(replay.iter().flat_map(|b| b.lines.iter().map(|l| l.seq)).collect::<Vec<_>>(), vec![2, 3, 4]);
        assert!(!lost);
        // An id from another opening of the job replays nothing.
        let (_w, replay, _) = t.watch(Some("1-1")).expect("a watcher");
        assert!(replay.is_empty());
    }

    #[test]
    fn a_slow_watcher_loses_batches_and_the_sender_never_waits() {
        let t = Arc::new(Tail::new());
        let (mut w, _, _) = t.watch(None).expect("a watcher");
        for i in 0..(CHANNEL_BATCHES as u64 + 10) {
            record(&t, i..i + 1);
        }
        assert!(matches!(w.rx.try_recv(), Err(broadcast::error::TryRecvError::Lagged(10))));
    }

    #[test]
    fn big_groups_are_cut_and_kept_lines_are_bounded() {
        let t = Arc::new(Tail::new());
        let (w, _, _) = t.watch(None).expect("a watcher");
        record(&t, 0..(MAX_BATCH_LINES as u64 + 5));
        for i in 0..10 {
            record(&t, i * 2000..(i + 1) * 2000);
        }
        let recent = t.recent.lock().unwrap();
        assert_eq!(recent.0.iter().map(|b| b.lines.len()).sum::<usize>(), RECENT_LINES);
        drop(recent);
        let (_, replay, lost) = t.watch(Some(&format!("{}-1", t.epoch))).expect("a watcher");
        assert!(lost && !replay.is_empty());
        drop(w);
    }

    #[test]
    fn watchers_are_bounded() {
        let t = Arc::new(Tail::new());
        let held: Vec<_> = (0..MAX_WATCHERS).map(|_| t.watch(None).expect("a watcher")).collect();
        assert!(t.watch(None).is_none());
        drop(held);
        assert!(t.watch(None).is_some());
    }
}
