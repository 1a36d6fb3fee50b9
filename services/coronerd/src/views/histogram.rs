//! Matching lines over aligned time, per rank (per host when many ranks match): the counts come
//! from the index (`coroner_index::JobIndex::histogram_within`), never from fetching hits.
//!
//! The axis is the asked range (`since`/`until`) or, without one, the first to the last match.
//! Rows are ranks while at most [`MAX_RANK_ROWS`] ranks match, else hosts (a rank's host from the
//! report); lines no rank owns are a row of their own. Grouping is pure (`rows()`).

use super::search::{self, SearchParams};
use crate::error::ServiceError;
use crate::job::Job;
use crate::searches::Searches;
use coroner_index::{Buckets, SearchRequest, MAX_BUCKETS};
use coroner_model::Stream;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

pub const DEFAULT_BUCKETS: u32 = 60;
/// Above this many matching ranks, rows are hosts.
pub const MAX_RANK_ROWS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    Auto,
    Rank,
    Host,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Row {
    pub label: String,
    pub host: Option<String>,
    /// The ranks counted in this row (empty: lines no rank owns).
    pub ranks: Vec<u32>,
    pub counts: Vec<u64>,
    pub sum: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HistogramView {
    pub start_ns: i64,
    pub width_ns: i64,
    pub buckets: u32,
    /// Per bucket, all rows.
    pub totals: Vec<u64>,
    pub rows: Vec<Row>,
    /// `rank` or `host`.
    pub grouped_by: &'static str,
    /// Matches outside the axis.
    pub outside: u64,
}

pub async fn histogram(searches: &Searches, job: &Arc<Job>, p: SearchParams, buckets: u32, grouping: Grouping) -> Result<HistogramView, ServiceError> {
    if buckets == 0 || buckets > MAX_BUCKETS {
        return Err(ServiceError::InvalidArgument(format!("buckets {buckets}: use 1 to {MAX_BUCKETS}")));
    }
    let report = job.recent_report().await?;
    let clocks = search::clocks(&report);
    let Some((lo, hi)) = axis(searches, job, &p).await? else {
        return Ok(HistogramView { start_ns: 0, width_ns: 0, buckets, totals: vec![0; buckets as usize], rows: Vec::new(), grouped_by: "rank", outside: 0 });
    };
    let width = ((i128::from(hi) - i128::from(lo)) / i128::from(buckets) + 1).clamp(1, i128::from(i64::MAX)) as i64;
    let axis = Buckets { start_ns: lo, width_ns: width, count: buckets };
    let stream = match p.stream.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(Stream::parse(s).ok_or_else(|| ServiceError::InvalidArgument(format!("stream {s:?}: use stdout, stderr or file")))?),
    };
    let request = SearchRequest {
        query: p.query.clone(),
        rank: p.rank,
        host: p.host.clone().filter(|h| !h.trim().is_empty()),
        stream,
        severity: p.severity.clone().filter(|h| !h.trim().is_empty()),
        capture_windows: search::capture_windows(job, &clocks, p.since_ns, p.until_ns)?,
        order_offsets: Some(clocks.iter().map(|(k, (o, _))| (*k, *o)).collect()),
        ..Default::default()
    };
    let index = job.index().clone();
    let counted = searches.run(job.id(), move |budget, alone| index.histogram_within(&request, axis, budget, alone)).await?;
    let hosts: BTreeMap<u32, String> = report.ranks.iter().filter_map(|r| Some((r.rank.0, r.host.clone()?))).collect();
    let (rows, grouped_by) = rows(counted.per_rank, &hosts, grouping);
    let mut totals = vec![0u64; buckets as usize];
    for r in &rows {
        totals.iter_mut().zip(&r.counts).for_each(|(t, c)| *t += c);
    }
    Ok(HistogramView { start_ns: lo, width_ns: width, buckets, totals, rows, grouped_by, outside: counted.outside })
}

/// The asked range, else the aligned times of the first and the last match (`None`: no match).
async fn axis(searches: &Searches, job: &Arc<Job>, p: &SearchParams) -> Result<Option<(i64, i64)>, ServiceError> {
    if let (Some(a), Some(b)) = (p.since_ns, p.until_ns) {
        if a > b {
            return Err(ServiceError::InvalidArgument("the time range ends before it starts".into()));
        }
        return Ok(Some((a, b)));
    }
    let one = SearchParams { limit: 1, cursor: None, context: 0, ..p.clone() };
    let first = search::search(searches, job, SearchParams { descending: false, ..one.clone() }).await?;
    let last = search::search(searches, job, SearchParams { descending: true, ..one }).await?;
    Ok(match (first.hits.first(), last.hits.first()) {
        (Some(a), Some(b)) => Some((p.since_ns.unwrap_or(a.time_ns), p.until_ns.unwrap_or(b.time_ns))),
        _ => None,
    })
}

/// Per-rank counts as rows: one per rank, or one per host (`Auto`: hosts past [`MAX_RANK_ROWS`]
/// ranks), in rank order (hosts by their first rank); lines no rank owns last.
pub fn rows(per_rank: BTreeMap<Option<u32>, Vec<u64>>, hosts: &BTreeMap<u32, String>, grouping: Grouping) -> (Vec<Row>, &'static str) {
    let by_host = match grouping {
        Grouping::Host => true,
        Grouping::Rank => false,
        Grouping::Auto => per_rank.keys().filter(|k| k.is_some()).count() > MAX_RANK_ROWS,
    };
    let sum = |c: &[u64]| c.iter().sum();
    let mut out: Vec<Row> = Vec::new();
    let mut unowned = None;
    let mut host_rows: BTreeMap<String, usize> = BTreeMap::new();
    for (rank, counts) in per_rank {
        let Some(rank) = rank else {
            unowned = Some(Row { label: "no rank".into(), host: None, ranks: Vec::new(), sum: sum(&counts), counts });
            continue;
        };
        let host = hosts.get(&rank).cloned();
        if !by_host {
            out.push(Row { label: format!("rank {rank}"), host, ranks: vec![rank], sum: sum(&counts), counts });
            continue;
        }
        let key = host.clone().unwrap_or_else(|| "unknown host".into());
        match host_rows.get(&key) {
            Some(&i) => {
                let row = &mut out[i];
                row.ranks.push(rank);
                row.counts.iter_mut().zip(&counts).for_each(|(a, b)| *a += b);
                row.sum += sum(&counts);
            }
            None => {
                host_rows.insert(key.clone(), out.len());
                out.push(Row { label: key, host, ranks: vec![rank], sum: sum(&counts), counts });
            }
        }
    }
    out.extend(unowned);
    (out, if by_host { "host" } else { "rank" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: u32) -> BTreeMap<Option<u32>, Vec<u64>> {
        let mut m: BTreeMap<Option<u32>, Vec<u64>> = (0..n).map(|r| (Some(r), vec![1, u64::from(r)])).collect();
        m.insert(None, vec![5, 0]);
        m
    }

    #[test]
    fn few_ranks_are_rows_of_their_own_and_unowned_lines_come_last() {
        let (rows, by) = rows(counts(3), &BTreeMap::new(), Grouping::Auto);
        assert_eq!(by, "rank");
        assert_eq!(rows.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(), ["rank 0", "rank 1", "rank 2", "no rank"]);
        assert_eq!(rows[2].counts, vec![1, 2]);
        assert_eq!(rows[2].sum, 3);
    }

    #[test]
    fn many_ranks_are_grouped_by_host_with_their_counts_added() {
        let hosts: BTreeMap<u32, String> = (0..100).map(|r| (r, format!("node-{}", r / 8))).collect();
        let (rows, by) = rows(counts(100), &hosts, Grouping::Auto);
        assert_eq!(by, "host");
        assert_eq!(rows.len(), 13 + 1);
        assert_eq!(rows[0].label, "node-0");
        assert_eq!(rows[0].ranks, (0..8).collect::<Vec<_>>());
        assert_eq!(rows[0].counts, vec![8, 28]);
        let (rows, _) = rows_of(counts(3), &BTreeMap::new(), Grouping::Host);
        assert_eq!(rows[0].label, "unknown host");
        assert_eq!(rows[0].ranks, vec![0, 1, 2]);
    }

    fn rows_of(c: BTreeMap<Option<u32>, Vec<u64>>, h: &BTreeMap<u32, String>, g: Grouping) -> (Vec<Row>, &'static str) {
        rows(c, h, g)
    }
}
