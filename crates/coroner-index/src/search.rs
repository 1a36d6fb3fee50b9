//! Search requests: turning a [`SearchRequest`] into a tantivy query, and the keyset cursor
//! that pages through its results in (capture_ns, rank, stream, seq) order.

use crate::collect::{SortKey, Windows};
use crate::schema::{origin, unpack_origin, Fields};
use crate::{check_query, IndexError, QueryLimits};
use coroner_model::Stream;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;
use tantivy::query::{AllQuery, BooleanQuery, Occur, Query, QueryParser, RangeQuery, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::{Index, Term};

/// The most hits one page returns; larger limits are lowered to it.
pub const MAX_PAGE_SIZE: usize = 10_000;

/// What to search for. Every filter that is set must hold (they are ANDed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchRequest {
    /// Tantivy query syntax over the line's text; terms are ANDed unless `OR` is written.
    /// Empty (or only spaces) matches every line.
    pub query: String,
    pub rank: Option<u32>,
    /// Only lines captured on this host.
    pub host: Option<String>,
    pub stream: Option<Stream>,
    pub severity: Option<String>,
    /// Per-rank capture-time windows, both ends inclusive: the caller converts an aligned-time
    /// range into per-rank capture ranges (ranks have different clock offsets). `None` = no
    /// time filter. Key `None` = lines without a rank. Ranks absent from the map are excluded.
    pub capture_windows: Option<BTreeMap<Option<u32>, (i64, i64)>>,
    /// Per-rank clock offsets (ns to add to a capture time): when set, hits are ordered by
    /// capture time plus the line's rank offset (aligned time) instead of capture time, and the
    /// cursor pages in that order. Ranks absent from the map get offset 0. The index still stores
    /// capture times only.
    pub order_offsets: Option<BTreeMap<Option<u32>, i64>>,
    /// Only these lines, by (rank, stream, seq): how an event-class filter computed from the
    /// analysis narrows a search. `Some(empty)` matches nothing.
    pub only_lines: Option<Vec<(Option<u32>, Stream, u64)>>,
    /// Hits per page, at most [`MAX_PAGE_SIZE`]; 0 returns only the total.
    pub limit: usize,
    /// The `next_cursor` of the previous page, to continue after it.
    pub cursor: Option<String>,
    /// Newest first: the same order reversed (a page of the last lines of a range, as a log
    /// viewer shows them). A cursor continues only in the order it was made in.
    pub descending: bool,
}

/// One page of hits in (capture_ns, rank, stream, seq) order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchPage {
    pub hits: Vec<crate::IndexedLine>,
    /// How many lines match the request in all (not only after the cursor).
    pub total: u64,
    /// Present when more hits follow this page.
    pub next_cursor: Option<String>,
}

/// A cursor's version, one per order: a cursor continues only in the order it was made in.
const CURSOR_VERSION: &str = "c1";
const CURSOR_VERSION_DESCENDING: &str = "d1";

fn cursor_version(descending: bool) -> &'static str {
    if descending {
        CURSOR_VERSION_DESCENDING
    } else {
        CURSOR_VERSION
    }
}

/// Encodes the last sort key of a page as an opaque cursor.
pub(crate) fn encode_cursor(key: SortKey, descending: bool) -> String {
    hex::encode(format!("{}:{}:{}:{}", cursor_version(descending), key.0, key.1, key.2))
}

pub(crate) fn decode_cursor(cursor: &str, descending: bool) -> Result<SortKey, IndexError> {
    let bad = || IndexError::BadCursor(cursor.chars().take(64).collect());
    let bytes = hex::decode(cursor.trim()).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let mut parts = text.split(':');
    if parts.next() != Some(cursor_version(descending)) {
        return Err(bad());
    }
    let capture = parts.next().and_then(|p| p.parse::<i64>().ok()).ok_or_else(bad)?;
    let origin = parts.next().and_then(|p| p.parse::<u64>().ok()).ok_or_else(bad)?;
    let seq = parts.next().and_then(|p| p.parse::<u64>().ok()).ok_or_else(bad)?;
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((capture, origin, seq))
}

/// Parses the text query; an empty one matches everything.
pub(crate) fn parse_text_query(index: &Index, f: &Fields, query: &str, limits: &QueryLimits) -> Result<Box<dyn Query>, IndexError> {
    // Before the grammar: it backtracks exponentially on nested groups (`limits.rs`).
    check_query(query, limits)?;
    if query.trim().is_empty() {
        return Ok(Box::new(AllQuery));
    }
    let mut parser = QueryParser::for_index(index, vec![f.text]);
    parser.set_conjunction_by_default();
    parser.parse_query(query).map_err(|e| IndexError::BadQuery(e.to_string()))
}

fn term(t: Term) -> Box<dyn Query> {
    Box::new(TermQuery::new(t, IndexRecordOption::Basic))
}

/// The query for a request; the per-rank part of the time windows is checked by the collector
/// (see [`windows_by_rank_key`]), the query only narrows to the union of the windows.
pub(crate) fn build_query(index: &Index, f: &Fields, req: &SearchRequest, limits: &QueryLimits) -> Result<Box<dyn Query>, IndexError> {
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, parse_text_query(index, f, &req.query, limits)?)];
    if let Some(rank) = req.rank {
        clauses.push((Occur::Must, term(Term::from_field_u64(f.rank, u64::from(rank)))));
    }
    if let Some(stream) = req.stream {
        clauses.push((Occur::Must, term(Term::from_field_text(f.stream, stream.as_str()))));
    }
    if let Some(host) = &req.host {
        clauses.push((Occur::Must, term(Term::from_field_text(f.host, host))));
    }
    if let Some(lines) = &req.only_lines {
        let any: Vec<(Occur, Box<dyn Query>)> = lines
            .iter()
            .map(|(rank, stream, seq)| {
                let both: Box<dyn Query> = Box::new(BooleanQuery::new(vec![
                    (Occur::Must, term(Term::from_field_u64(f.origin, origin(*rank, *stream)))),
                    (Occur::Must, term(Term::from_field_u64(f.seq, *seq))),
                ]));
                (Occur::Should, both)
            })
            .collect();
        if any.is_empty() {
            return Ok(Box::new(tantivy::query::EmptyQuery));
        }
        clauses.push((Occur::Must, Box::new(BooleanQuery::new(any))));
    }
    if let Some(severity) = &req.severity {
        clauses.push((Occur::Must, term(Term::from_field_text(f.severity, severity))));
    }
    if let Some(windows) = &req.capture_windows {
        let lo = windows.values().map(|w| w.0).min();
        let hi = windows.values().map(|w| w.1).max();
        if let (Some(lo), Some(hi)) = (lo, hi) {
            clauses.push((
                Occur::Must,
                Box::new(RangeQuery::new(Bound::Included(Term::from_field_i64(f.capture_ns, lo)), Bound::Included(Term::from_field_i64(f.capture_ns, hi)))),
            ));
        }
    }
    if clauses.len() == 1 {
        if let Some((_, q)) = clauses.pop() {
            return Ok(q);
        }
    }
    Ok(Box::new(BooleanQuery::new(clauses)))
}

/// The windows keyed as the collectors see a rank (the rank part of `origin`).
pub(crate) fn windows_by_rank_key(req: &SearchRequest) -> Option<Windows> {
    req.capture_windows.as_ref().map(|w| {
        let map: HashMap<u64, (i64, i64)> = w.iter().map(|(rank, window)| (origin(*rank, Stream::Stdout) >> 2, *window)).collect();
        Arc::new(map)
    })
}

/// The sort offsets keyed as the collectors see a rank (the rank part of `origin`).
pub(crate) fn offsets_by_rank_key(req: &SearchRequest) -> Option<Arc<HashMap<u64, i64>>> {
    req.order_offsets.as_ref().map(|o| Arc::new(o.iter().map(|(rank, off)| (origin(*rank, Stream::Stdout) >> 2, *off)).collect()))
}

/// The rank a collector's origin belongs to.
pub(crate) fn rank_of_origin(o: u64) -> Option<u32> {
    unpack_origin(o).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let key = (-5, 42, u64::MAX);
        assert_eq!(decode_cursor(&encode_cursor(key, false), false).ok(), Some(key));
        assert_eq!(decode_cursor(&encode_cursor(key, true), true).ok(), Some(key));
        assert!(matches!(decode_cursor(&encode_cursor(key, true), false), Err(IndexError::BadCursor(_))), "a cursor keeps its order");
        assert!(matches!(decode_cursor("zz", false), Err(IndexError::BadCursor(_))));
        assert!(matches!(decode_cursor(&hex::encode("c1:1:2"), false), Err(IndexError::BadCursor(_))));
        assert!(matches!(decode_cursor(&hex::encode("c9:1:2:3"), false), Err(IndexError::BadCursor(_))));
    }
}
