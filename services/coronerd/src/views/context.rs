//! The lines around each hit of a search, as `grep -C N` shows them. Pure.
//!
//! Context is taken on the hit's own rank and stream, by sequence number (the order the rank
//! printed its lines in): the `n` lines before and after. A line is shown once per page: a line
//! that is itself a hit of the page is shown as that hit, and one in the context of two hits
//! is shown with the first. Bounded: `n` at most [`MAX_CONTEXT`], and a page's context lines
//! (`2 n` per hit) at most one index page.

use super::search::Hit;
use crate::error::ServiceError;
use coroner_model::Stream;
use std::collections::{BTreeMap, HashSet};

/// The most lines of context asked before and after a hit.
pub const MAX_CONTEXT: usize = 50;

/// A line's key: (rank, stream, seq).
type Key = (Option<u32>, String, u64);

fn key(h: &Hit) -> Key {
    (h.rank, h.stream.clone(), h.seq)
}

/// `n` if a page of `limit` hits may carry it, else the reason.
pub fn check(n: usize, limit: usize) -> Result<usize, ServiceError> {
    if n > MAX_CONTEXT {
        return Err(ServiceError::InvalidArgument(format!("context {n}: at most {MAX_CONTEXT} lines before and after a hit")));
    }
    let lines = n.saturating_mul(2).saturating_mul(limit.max(1));
    if lines > coroner_index::MAX_PAGE_SIZE {
        return Err(ServiceError::InvalidArgument(format!(
            "context {n} around {limit} hits is {lines} lines, over the {} one page may carry: lower the limit or the context",
            coroner_index::MAX_PAGE_SIZE
        )));
    }
    Ok(n)
}

/// The (rank, stream, seq) of every line within `n` of a hit on its rank and stream.
pub fn lines_around(hits: &[Hit], n: usize) -> Vec<(Option<u32>, Stream, u64)> {
    let n = n as u64;
    let mut out = Vec::new();
    for h in hits {
        let Some(stream) = Stream::parse(&h.stream) else { continue };
        let lo = h.seq.saturating_sub(n);
        let hi = h.seq.saturating_add(n);
        out.extend((lo..=hi).filter(|s| *s != h.seq).map(|s| (h.rank, stream, s)));
    }
    out.sort();
    out.dedup();
    out
}

/// The hits in their order, each preceded and followed by its context lines (from `around`,
/// marked `context`) in sequence order; each line once.
pub fn interleave(hits: Vec<Hit>, around: Vec<Hit>, n: usize) -> Vec<Hit> {
    let n = n as u64;
    let mut by_stream: BTreeMap<(Option<u32>, String), BTreeMap<u64, Hit>> = BTreeMap::new();
    for c in around {
        by_stream.entry((c.rank, c.stream.clone())).or_default().insert(c.seq, c);
    }
    let mut shown: HashSet<Key> = hits.iter().map(key).collect();
    let mut out = Vec::with_capacity(hits.len());
    for h in hits {
        let lane = by_stream.get(&(h.rank, h.stream.clone()));
        let mut side = |range: std::ops::RangeInclusive<u64>, out: &mut Vec<Hit>| {
            for c in lane.into_iter().flat_map(|l| l.range(range.clone())).map(|(_, c)| c) {
                if shown.insert(key(c)) {
                    out.push(c.clone());
                }
            }
        };
        if h.seq > 0 {
            side(h.seq.saturating_sub(n)..=h.seq - 1, &mut out);
        }
        let after = h.seq.saturating_add(1)..=h.seq.saturating_add(n);
        out.push(h);
        side(after, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(rank: u32, seq: u64, context: bool) -> Hit {
        Hit {
            rank: Some(rank),
            time_ns: seq as i64,
            time: String::new(),
            capture_ns: seq as i64,
            host: String::new(),
            stream: "stdout".into(),
            seq,
            line: format!("r{rank} l{seq}"),
            context,
        }
    }

    fn shape(lines: &[Hit]) -> Vec<(u32, u64, bool)> {
        lines.iter().map(|h| (h.rank.unwrap_or(99), h.seq, h.context)).collect()
    }

    #[test]
    fn rule_context_is_asked_on_the_hits_own_rank_and_stream() {
        let around = lines_around(&[line(1, 5, false), line(2, 0, false)], 2);
        let wanted: Vec<_> = [(1, 3), (1, 4), (1, 6), (1, 7), (2, 1), (2, 2)].into_iter().map(|(r, s)| (Some(r), Stream::Stdout, s)).collect();
        assert_eq!(around, wanted);
    }

    #[test]
    fn rule_each_hit_is_framed_by_its_lines_in_order() {
        let hits = vec![line(1, 5, false), line(2, 1, false)];
        let around = vec![line(2, 2, true), line(1, 4, true), line(1, 6, true), line(2, 0, true)];
        assert_eq!(shape(&interleave(hits, around, 1)), vec![(1, 4, true), (1, 5, false), (1, 6, true), (2, 0, true), (2, 1, false), (2, 2, true)]);
    }

    #[test]
    fn rule_a_line_is_shown_once_and_a_hit_as_a_hit() {
        // Hits 3 and 5 on one rank: 4 is the context of both, 5 is in 3's context but a hit.
        let hits = vec![line(1, 3, false), line(1, 5, false)];
        let around = vec![line(1, 2, true), line(1, 4, true), line(1, 5, true), line(1, 6, true), line(1, 7, true)];
        assert_eq!(shape(&interleave(hits, around, 2)), vec![(1, 2, true), (1, 3, false), (1, 4, true), (1, 5, false), (1, 6, true), (1, 7, true)]);
    }

    #[test]
    fn rule_context_is_bounded() {
        assert!(check(MAX_CONTEXT + 1, 1).is_err());
        assert!(check(50, 100).is_ok());
        assert!(check(50, 101).is_err());
        assert_eq!(check(0, 10_000).ok(), Some(0));
    }
}
