//! Custom tantivy collectors. They read only fast fields and keep at most a page in memory,
//! so a query that matches tens of millions of lines is counted and paged, never loaded whole.

use crate::schema::{F_CAPTURE, F_ORIGIN, F_SEQ};
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::Column;
use tantivy::{DocAddress, DocId, Score, SegmentOrdinal, SegmentReader};

/// The order of search results: capture time, then (rank, stream) packed as `origin`, then seq.
pub(crate) type SortKey = (i64, u64, u64);

/// Per-rank capture windows keyed by the rank part of `origin` (`origin >> 2`), inclusive.
pub(crate) type Windows = Arc<HashMap<u64, (i64, i64)>>;

/// The fast-field columns every collector reads.
pub(crate) struct Columns {
    origin: Column<u64>,
    seq: Column<u64>,
    capture: Column<i64>,
}

impl Columns {
    pub(crate) fn open(segment: &SegmentReader) -> tantivy::Result<Columns> {
        let ff = segment.fast_fields();
        Ok(Columns { origin: ff.u64(F_ORIGIN)?, seq: ff.u64(F_SEQ)?, capture: ff.i64(F_CAPTURE)? })
    }

    pub(crate) fn key(&self, doc: DocId) -> SortKey {
        (self.capture.first(doc).unwrap_or_default(), self.origin.first(doc).unwrap_or_default(), self.seq.first(doc).unwrap_or_default())
    }
}

pub(crate) fn in_windows(windows: &Option<Windows>, key: &SortKey) -> bool {
    match windows {
        None => true,
        Some(w) => w.get(&(key.1 >> 2)).is_some_and(|&(lo, hi)| lo <= key.0 && key.0 <= hi),
    }
}

/// Keeps the `k` smallest items in a max-heap.
struct SmallestK<K: Ord> {
    k: usize,
    heap: BinaryHeap<(K, DocAddress)>,
}

impl<K: Ord> SmallestK<K> {
    fn new(k: usize) -> Self {
        SmallestK { k, heap: BinaryHeap::with_capacity(k.min(4096) + 1) }
    }

    fn offer(&mut self, key: K, addr: DocAddress) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push((key, addr));
        } else if let Some(mut top) = self.heap.peek_mut() {
            if (&key, &addr) < (&top.0, &top.1) {
                *top = (key, addr);
            }
        }
    }
}

fn merge_smallest<K: Ord>(k: usize, parts: Vec<Vec<(K, DocAddress)>>) -> Vec<(K, DocAddress)> {
    let mut all: Vec<(K, DocAddress)> = parts.into_iter().flatten().collect();
    all.sort();
    all.truncate(k);
    all
}

/// Counts the matches inside the windows and keeps the `limit` smallest keys after `after`.
pub(crate) struct PageCollector {
    pub after: Option<SortKey>,
    pub limit: usize,
    pub windows: Option<Windows>,
    /// Added to the capture time in the sort key, per rank key (aligned-time order).
    pub offsets: Option<Arc<HashMap<u64, i64>>>,
    /// Newest first: keys are kept reversed ([`reversed`]), so the smallest are the newest.
    pub descending: bool,
}

/// A key in reverse order (`!x` reverses the order of both i64 and u64, and is its own inverse).
pub(crate) fn reversed(key: SortKey) -> SortKey {
    (!key.0, !key.1, !key.2)
}

pub(crate) struct PageSegment {
    cols: Columns,
    segment: SegmentOrdinal,
    after: Option<SortKey>,
    windows: Option<Windows>,
    offsets: Option<Arc<HashMap<u64, i64>>>,
    descending: bool,
    total: u64,
    top: SmallestK<SortKey>,
}

impl Collector for PageCollector {
    type Fruit = (u64, Vec<(SortKey, DocAddress)>);
    type Child = PageSegment;

    fn for_segment(&self, segment: SegmentOrdinal, reader: &SegmentReader) -> tantivy::Result<PageSegment> {
        Ok(PageSegment {
            cols: Columns::open(reader)?,
            segment,
            after: self.after,
            windows: self.windows.clone(),
            offsets: self.offsets.clone(),
            descending: self.descending,
            total: 0,
            top: SmallestK::new(self.limit),
        })
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(&self, parts: Vec<(u64, Vec<(SortKey, DocAddress)>)>) -> tantivy::Result<Self::Fruit> {
        let total = parts.iter().map(|p| p.0).sum();
        Ok((total, merge_smallest(self.limit, parts.into_iter().map(|p| p.1).collect())))
    }
}

impl SegmentCollector for PageSegment {
    type Fruit = (u64, Vec<(SortKey, DocAddress)>);

    fn collect(&mut self, doc: DocId, _score: Score) {
        let mut key = self.cols.key(doc);
        if !in_windows(&self.windows, &key) {
            return;
        }
        if let Some(off) = self.offsets.as_ref().and_then(|o| o.get(&(key.1 >> 2))) {
            key.0 = key.0.saturating_add(*off);
        }
        if self.descending {
            key = reversed(key);
        }
        self.total += 1;
        if self.after.is_none_or(|after| key > after) {
            self.top.offer(key, DocAddress::new(self.segment, doc));
        }
    }

    fn harvest(self) -> Self::Fruit {
        (self.total, self.top.heap.into_vec())
    }
}

/// Per `origin` (rank, stream): how many lines match, and the highest seq among them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OriginStats {
    pub count: u64,
    pub max_seq: u64,
}

pub(crate) struct OriginStatsCollector;

pub(crate) struct OriginStatsSegment {
    cols: Columns,
    stats: HashMap<u64, OriginStats>,
}

impl Collector for OriginStatsCollector {
    type Fruit = HashMap<u64, OriginStats>;
    type Child = OriginStatsSegment;

    fn for_segment(&self, _: SegmentOrdinal, reader: &SegmentReader) -> tantivy::Result<OriginStatsSegment> {
        Ok(OriginStatsSegment { cols: Columns::open(reader)?, stats: HashMap::new() })
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(&self, parts: Vec<HashMap<u64, OriginStats>>) -> tantivy::Result<Self::Fruit> {
        let mut out: HashMap<u64, OriginStats> = HashMap::new();
        for part in parts {
            for (origin, s) in part {
                let e = out.entry(origin).or_default();
                e.count += s.count;
                e.max_seq = e.max_seq.max(s.max_seq);
            }
        }
        Ok(out)
    }
}

impl SegmentCollector for OriginStatsSegment {
    type Fruit = HashMap<u64, OriginStats>;

    fn collect(&mut self, doc: DocId, _score: Score) {
        let origin = self.cols.origin.first(doc).unwrap_or_default();
        let seq = self.cols.seq.first(doc).unwrap_or_default();
        let e = self.stats.entry(origin).or_default();
        e.count += 1;
        e.max_seq = e.max_seq.max(seq);
    }

    fn harvest(self) -> Self::Fruit {
        self.stats
    }
}

/// The `k` lines with the smallest seq at or above `from` (run on one origin's term query).
pub(crate) struct SeqChunkCollector {
    pub from: u64,
    pub k: usize,
}

pub(crate) struct SeqChunkSegment {
    seq: Column<u64>,
    segment: SegmentOrdinal,
    from: u64,
    top: SmallestK<u64>,
}

impl Collector for SeqChunkCollector {
    type Fruit = Vec<(u64, DocAddress)>;
    type Child = SeqChunkSegment;

    fn for_segment(&self, segment: SegmentOrdinal, reader: &SegmentReader) -> tantivy::Result<SeqChunkSegment> {
        Ok(SeqChunkSegment { seq: reader.fast_fields().u64(F_SEQ)?, segment, from: self.from, top: SmallestK::new(self.k) })
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(&self, parts: Vec<Vec<(u64, DocAddress)>>) -> tantivy::Result<Self::Fruit> {
        Ok(merge_smallest(self.k, parts))
    }
}

impl SegmentCollector for SeqChunkSegment {
    type Fruit = Vec<(u64, DocAddress)>;

    fn collect(&mut self, doc: DocId, _score: Score) {
        let seq = self.seq.first(doc).unwrap_or_default();
        if seq >= self.from {
            self.top.offer(seq, DocAddress::new(self.segment, doc));
        }
    }

    fn harvest(self) -> Self::Fruit {
        self.top.heap.into_vec()
    }
}
