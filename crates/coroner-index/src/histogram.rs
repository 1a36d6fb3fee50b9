//! Matching lines per rank and time bucket, counted in the index: a collector that reads only
//! the `origin` and capture-time fast fields, so a histogram over millions of matches holds one
//! counter per (rank, bucket) and never loads a line.
//!
//! Buckets are on the aligned clock when the request carries per-rank offsets
//! (`SearchRequest::order_offsets`): a line falls in bucket `(capture + offset - start) / width`;
//! lines outside `[start, start + width * count)` are counted in `outside`, not dropped silently.

use crate::collect::Columns;
use crate::search::rank_of_origin;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::{DocId, Score, SegmentOrdinal, SegmentReader};

/// The most buckets one histogram has: a screen's width of bars, and a bound on the counters
/// (ranks x buckets) a request can make the server hold.
pub const MAX_BUCKETS: u32 = 500;

/// The time axis of a histogram: `count` buckets of `width_ns` from `start_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buckets {
    pub start_ns: i64,
    pub width_ns: i64,
    pub count: u32,
}

impl Buckets {
    /// The bucket of time `t`, if inside the axis.
    pub fn of(&self, t: i64) -> Option<u32> {
        if t < self.start_ns || self.width_ns <= 0 {
            return None;
        }
        let i = (i128::from(t) - i128::from(self.start_ns)) / i128::from(self.width_ns);
        (i < i128::from(self.count)).then_some(i as u32)
    }
}

/// Counts per rank (`None`: lines no rank owns), one counter per bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    pub per_rank: BTreeMap<Option<u32>, Vec<u64>>,
    /// Matching lines before or after the axis.
    pub outside: u64,
}

pub(crate) struct HistogramCollector {
    pub buckets: Buckets,
    pub windows: Option<crate::collect::Windows>,
    pub offsets: Option<Arc<HashMap<u64, i64>>>,
}

pub(crate) struct HistogramSegment {
    cols: Columns,
    buckets: Buckets,
    windows: Option<crate::collect::Windows>,
    offsets: Option<Arc<HashMap<u64, i64>>>,
    /// Keyed by the rank part of `origin`.
    counts: HashMap<u64, Vec<u64>>,
    outside: u64,
}

type Fruit = (HashMap<u64, Vec<u64>>, u64);

impl Collector for HistogramCollector {
    type Fruit = Fruit;
    type Child = HistogramSegment;

    fn for_segment(&self, _: SegmentOrdinal, reader: &SegmentReader) -> tantivy::Result<HistogramSegment> {
        Ok(HistogramSegment {
            cols: Columns::open(reader)?,
            buckets: self.buckets,
            windows: self.windows.clone(),
            offsets: self.offsets.clone(),
            counts: HashMap::new(),
            outside: 0,
        })
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(&self, parts: Vec<Fruit>) -> tantivy::Result<Fruit> {
        let mut counts: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut outside = 0;
        for (part, out) in parts {
            outside += out;
            for (rank, c) in part {
                let e = counts.entry(rank).or_insert_with(|| vec![0; c.len()]);
                e.iter_mut().zip(c).for_each(|(a, b)| *a += b);
            }
        }
        Ok((counts, outside))
    }
}

impl SegmentCollector for HistogramSegment {
    type Fruit = Fruit;

    fn collect(&mut self, doc: DocId, _score: Score) {
        let key = self.cols.key(doc);
        if !crate::collect::in_windows(&self.windows, &key) {
            return;
        }
        let rank = key.1 >> 2;
        let off = self.offsets.as_ref().and_then(|o| o.get(&rank)).copied().unwrap_or(0);
        match self.buckets.of(key.0.saturating_add(off)) {
            Some(b) => {
                let n = self.buckets.count as usize;
                self.counts.entry(rank).or_insert_with(|| vec![0; n])[b as usize] += 1;
            }
            None => self.outside += 1,
        }
    }

    fn harvest(self) -> Fruit {
        (self.counts, self.outside)
    }
}

/// The collector's fruit keyed by rank.
pub(crate) fn by_rank((counts, outside): Fruit) -> Histogram {
    // The rank part of origin is origin >> 2; rank_of_origin takes a whole origin.
    let per_rank = counts.into_iter().map(|(k, v)| (rank_of_origin(k << 2), v)).collect();
    Histogram { per_rank, outside }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_falls_in_one_bucket_or_outside() {
        let b = Buckets { start_ns: 100, width_ns: 10, count: 3 };
        assert_eq!([99, 100, 109, 110, 129, 130].map(|t| b.of(t)), [None, Some(0), Some(0), Some(1), Some(2), None]);
        assert_eq!(Buckets { start_ns: i64::MIN, width_ns: i64::MAX, count: 3 }.of(i64::MAX), Some(2));
    }

    /// Ranks 0..3, ten lines each at 1000 i + r; "boom" on lines 2 and 7.
    fn index(dir: &std::path::Path) -> crate::JobIndex {
        let idx = crate::JobIndex::open_or_create(dir).expect("open index");
        let lines: Vec<crate::IndexedLine> = (0..3u32)
            .flat_map(|r| {
                (0..10u64).map(move |i| crate::IndexedLine {
                    rank: Some(r),
                    stream: coroner_model::Stream::Stdout,
                    seq: i,
                    capture_ns: 1000 * i as i64 + i64::from(r),
                    host: "h".into(),
                    severity: "info".into(),
                    bytes: if i == 2 || i == 7 { format!("boom {i}") } else { format!("step {i}") }.into_bytes(),
                })
            })
            .collect();
        idx.add(&lines).expect("add");
        idx.commit().expect("commit");
        idx
    }

    #[test]
    fn matches_are_counted_per_rank_and_bucket_on_the_aligned_clock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let idx = index(dir.path());
        let buckets = Buckets { start_ns: 0, width_ns: 5000, count: 2 };
        let q = crate::SearchRequest { query: "boom".into(), ..Default::default() };
        let h = idx.histogram_within(&q, buckets, &crate::Budget::default(), false).expect("histogram");
        let want: BTreeMap<Option<u32>, Vec<u64>> = (0..3).map(|r| (Some(r), vec![1, 1])).collect();
        assert_eq!(h, Histogram { per_rank: want, outside: 0 });
        // Rank 2's clock is 4 us behind: its line 2 (2002 + 4000) moves into bucket 1, its line 7
        // (7002 + 4000) past the axis' end.
        let offsets = [(Some(2), 4000)].into_iter().collect();
        let q = crate::SearchRequest { order_offsets: Some(offsets), ..q };
        let h = idx.histogram_within(&q, buckets, &crate::Budget::default(), true).expect("histogram");
        assert_eq!(h.per_rank[&Some(2)], vec![0, 1]);
        assert_eq!(h.outside, 1);
        // The filters hold: rank 1 only.
        let q = crate::SearchRequest { rank: Some(1), ..q };
        let h = idx.histogram_within(&q, buckets, &crate::Budget::default(), true).expect("histogram");
        assert_eq!(h.per_rank.keys().copied().collect::<Vec<_>>(), vec![Some(1)]);
    }

    #[test]
    fn a_histogram_is_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let idx = index(dir.path());
        let q = crate::SearchRequest::default();
        for b in [
            Buckets { start_ns: 0, width_ns: 1, count: 0 },
            Buckets { start_ns: 0, width_ns: 1, count: MAX_BUCKETS + 1 },
            Buckets { start_ns: 0, width_ns: 0, count: 2 },
        ] {
            assert!(idx.histogram_within(&q, b, &crate::Budget::default(), false).is_err(), "{b:?}");
        }
    }
}
