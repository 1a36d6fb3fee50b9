//! The run budget of one search: a deadline, a number of matching lines visited, and a stop flag
//! the caller raises when its client went away or the server is stopping.
//!
//! [`Budgeted`] wraps any collector and drives each segment's matches itself (tantivy's own loop
//! cannot be stopped), checking the budget every [`CHECK_EVERY`] matches and before each segment.
//! A search over budget ends with [`IndexError::OverBudget`] or [`IndexError::Cancelled`], never
//! with a partial answer presented as whole. Between two matches a scorer may scan postings on its
//! own (an AND of rare terms): that stretch is bounded by the clause limit (`limits.rs`), not here.

use crate::{IndexError, QueryLimits};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::query::Weight;
use tantivy::{DocSet, SegmentOrdinal, SegmentReader, TantivyError, TERMINATED};

/// Matches between two looks at the clock: a look costs ~20 ns, 1,024 matches ~10 us.
const CHECK_EVERY: u64 = 1024;

const WITHIN: u8 = 0;
const TIME: u8 = 1;
const DOCS: u8 = 2;
const STOPPED: u8 = 3;

/// What one search may spend. Shared by the threads that search its segments.
#[derive(Debug)]
pub struct Budget {
    pub limits: QueryLimits,
    started: Instant,
    deadline: Option<Instant>,
    max_docs: u64,
    stop: Arc<AtomicBool>,
    docs: AtomicU64,
    exceeded: AtomicU8,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(QueryLimits::default(), None, u64::MAX, Arc::default())
    }
}

impl Budget {
    /// `timeout`: how long the search may run; `max_docs`: how many matching lines it may visit;
    /// `stop`: raised by the caller to end it now.
    pub fn new(limits: QueryLimits, timeout: Option<Duration>, max_docs: u64, stop: Arc<AtomicBool>) -> Budget {
        let started = Instant::now();
        Budget { limits, started, deadline: timeout.map(|t| started + t), max_docs, stop, docs: AtomicU64::new(0), exceeded: AtomicU8::new(WITHIN) }
    }

    /// Whether the caller raised the stop flag.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Counts `n` more matches; false once the budget is spent (and remembers why).
    fn spend(&self, n: u64) -> bool {
        if self.exceeded.load(Ordering::Relaxed) != WITHIN {
            return false;
        }
        let docs = self.docs.fetch_add(n, Ordering::Relaxed) + n;
        let why = if self.stop.load(Ordering::Relaxed) {
            STOPPED
        } else if docs > self.max_docs {
            DOCS
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            TIME
        } else {
            return true;
        };
        let _ = self.exceeded.compare_exchange(WITHIN, why, Ordering::Relaxed, Ordering::Relaxed);
        false
    }

    /// The error for a search that ran out of this budget, if it did.
    pub(crate) fn error(&self) -> Option<IndexError> {
        let elapsed = self.started.elapsed();
        match self.exceeded.load(Ordering::Relaxed) {
            TIME => Some(IndexError::OverBudget(format!(
                "the search ran out of time after {:.1} s; narrow it (fewer terms, a rank, a host or a time range)",
                elapsed.as_secs_f64()
            ))),
            DOCS => Some(IndexError::OverBudget(format!(
                "the search matched more than {} lines; narrow it (fewer terms, a rank, a host or a time range)",
                self.max_docs
            ))),
            STOPPED => Some(IndexError::Cancelled),
            _ => None,
        }
    }
}

/// A collector whose segments are collected within a [`Budget`].
pub(crate) struct Budgeted<'a, C> {
    pub inner: C,
    pub budget: &'a Budget,
}

/// Not an error anyone sees: the marker of a segment cut short (the budget says why).
fn cut_short() -> TantivyError {
    TantivyError::InternalError("search over budget".into())
}

impl<C: Collector> Collector for Budgeted<'_, C> {
    type Fruit = C::Fruit;
    type Child = C::Child;

    fn for_segment(&self, ord: SegmentOrdinal, reader: &SegmentReader) -> tantivy::Result<C::Child> {
        self.inner.for_segment(ord, reader)
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(&self, fruits: Vec<<C::Child as SegmentCollector>::Fruit>) -> tantivy::Result<C::Fruit> {
        self.inner.merge_fruits(fruits)
    }

    fn collect_segment(&self, weight: &dyn Weight, ord: SegmentOrdinal, reader: &SegmentReader) -> tantivy::Result<<C::Child as SegmentCollector>::Fruit> {
        if !self.budget.spend(0) {
            return Err(cut_short());
        }
        let mut child = self.inner.for_segment(ord, reader)?;
        let mut scorer = weight.scorer(reader, 1.0)?;
        let alive = reader.alive_bitset();
        let mut doc = scorer.doc();
        let mut since_check = 0u64;
        while doc != TERMINATED {
            if alive.is_none_or(|a| a.is_alive(doc)) {
                child.collect(doc, 0.0);
            }
            since_check += 1;
            if since_check == CHECK_EVERY {
                if !self.budget.spend(since_check) {
                    return Err(cut_short());
                }
                since_check = 0;
            }
            doc = scorer.advance();
        }
        // The segment is done: count its last matches without failing finished work.
        self.budget.docs.fetch_add(since_check, Ordering::Relaxed);
        Ok(child.harvest())
    }
}

/// A budgeted search's result: the budget's reason wins over tantivy's marker.
pub(crate) fn settle<T>(budget: &Budget, result: tantivy::Result<T>) -> Result<T, IndexError> {
    match (budget.error(), result) {
        (Some(e), _) => Err(e),
        (None, r) => Ok(r?),
    }
}
