//! Search on the aligned clock, shared by the gRPC Query service and the web page's JSON API.
//!
//! The index stores capture times only. An aligned-time range becomes one capture window per
//! rank from the current report's clock offsets, widened by each offset's uncertainty so no line
//! that may lie in the range is missed; hits are ordered by capture time plus their rank's
//! offset. An event-class filter takes the lines the analysis turned into events of that class.

use crate::error::ServiceError;
use crate::job::Job;
use crate::jobs::Jobs;
use crate::searches::Searches;
use coroner_index::SearchRequest;
use coroner_model::{Report, Stream};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The most lines an event-class filter passes to the index.
const MAX_KIND_LINES: usize = 10_000;

#[derive(Debug, Clone, Default)]
pub struct SearchParams {
    pub query: String,
    pub rank: Option<u32>,
    pub host: Option<String>,
    pub stream: Option<String>,
    pub severity: Option<String>,
    pub kind: Option<String>,
    /// Aligned time, ns since the epoch, both ends inclusive.
    pub since_ns: Option<i64>,
    pub until_ns: Option<i64>,
    pub limit: usize,
    pub cursor: Option<String>,
    /// Newest first.
    pub descending: bool,
    /// Lines before and after each hit on its rank and stream (`context.rs`), at most
    /// [`super::context::MAX_CONTEXT`].
    pub context: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub rank: Option<u32>,
    /// Aligned time, ns.
    pub time_ns: i64,
    pub time: String,
    pub capture_ns: i64,
    pub host: String,
    pub stream: String,
    pub seq: u64,
    pub line: String,
    /// A line around a hit (`context`), not a hit itself.
    pub context: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchResult {
    pub hits: Vec<Hit>,
    pub total: u64,
    pub next_cursor: Option<String>,
}

/// Each rank's (offset, uncertainty) from the report; an unknown uncertainty counts as 0.
pub(crate) fn clocks(report: &Report) -> BTreeMap<Option<u32>, (i64, i64)> {
    report.ranks.iter().map(|r| (Some(r.rank.0), (r.clock.offset_ns, r.clock.uncertainty_ns.max(0)))).collect()
}

fn nonempty(s: Option<String>) -> Option<String> {
    s.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// One page of hits in aligned order (newest first when `descending`), each with its context
/// lines when `context` > 0; `total` and the cursor count hits only.
pub async fn search(searches: &Searches, job: &Arc<Job>, p: SearchParams) -> Result<SearchResult, ServiceError> {
    searches.check(&p.query)?;
    let report = job.recent_report().await?;
    let clocks = clocks(&report);
    let stream = match nonempty(p.stream) {
        None => None,
        Some(s) => Some(Stream::parse(&s).ok_or_else(|| ServiceError::InvalidArgument(format!("stream {s:?}: use stdout, stderr or file")))?),
    };
    let limit = if p.limit == 0 { 100 } else { p.limit.min(coroner_index::MAX_PAGE_SIZE) };
    let context = super::context::check(p.context, limit)?;
    let capture_windows = capture_windows(job, &clocks, p.since_ns, p.until_ns)?;
    let only_lines = match nonempty(p.kind).filter(|k| k != "line") {
        None => None,
        Some(kind) => Some(lines_of_kind(job, kind).await?),
    };
    let request = SearchRequest {
        query: p.query,
        rank: p.rank,
        host: nonempty(p.host),
        stream,
        severity: nonempty(p.severity),
        capture_windows,
        order_offsets: Some(clocks.iter().map(|(k, (o, _))| (*k, *o)).collect()),
        only_lines,
        limit,
        cursor: nonempty(p.cursor),
        descending: p.descending,
    };
    let index = job.index().clone();
    let page = searches.run(job.id(), move |budget, alone| index.search_within(&request, budget, alone)).await?;
    let mut hits: Vec<Hit> = page.hits.into_iter().map(|h| hit(h, &clocks)).collect();
    if context > 0 {
        let around = super::context::lines_around(&hits, context);
        let request = SearchRequest {
            only_lines: Some(around),
            order_offsets: Some(clocks.iter().map(|(k, (o, _))| (*k, *o)).collect()),
            limit: coroner_index::MAX_PAGE_SIZE,
            ..Default::default()
        };
        let index = job.index().clone();
        let found = searches.run(job.id(), move |budget, alone| index.search_within(&request, budget, alone)).await?;
        let lines = found.hits.into_iter().map(|h| Hit { context: true, ..hit(h, &clocks) }).collect();
        hits = super::context::interleave(hits, lines, context);
    }
    Ok(SearchResult { hits, total: page.total, next_cursor: page.next_cursor })
}

/// An aligned-time range as one capture window per rank (every rank the job holds lines of or
/// has a clock for, and the lines no rank owns), widened by each offset's uncertainty.
pub(crate) type Windows = BTreeMap<Option<u32>, (i64, i64)>;

pub(crate) fn capture_windows(
    job: &Job,
    clocks: &BTreeMap<Option<u32>, (i64, i64)>,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<Option<Windows>, ServiceError> {
    if let (Some(a), Some(b)) = (since, until) {
        if a > b {
            return Err(ServiceError::InvalidArgument("the time range ends before it starts".into()));
        }
    }
    if since.is_none() && until.is_none() {
        return Ok(None);
    }
    let (lo, hi) = (since.unwrap_or(i64::MIN), until.unwrap_or(i64::MAX));
    let mut keys: BTreeSet<Option<u32>> = job.positions().keys().map(|(r, _, _)| *r).collect();
    keys.extend(clocks.keys().copied());
    keys.insert(None);
    let windows = keys
        .into_iter()
        .map(|k| {
            let (off, unc) = clocks.get(&k).copied().unwrap_or((0, 0));
            (k, (lo.saturating_sub(off).saturating_sub(unc), hi.saturating_sub(off).saturating_add(unc)))
        })
        .collect();
    Ok(Some(windows))
}

/// The lines the analysis turned into events of class `kind` (at most [`MAX_KIND_LINES`]).
async fn lines_of_kind(job: &Job, kind: String) -> Result<Vec<(Option<u32>, Stream, u64)>, ServiceError> {
    job.with_evidence(move |evidence| {
        let owned = evidence.ranks.iter().flat_map(|(r, ev)| ev.events.iter().map(move |e| (Some(r.0), e)));
        let unowned = evidence.unowned.iter().map(|e| (None, e));
        owned.chain(unowned).filter(|(_, e)| e.kind.name() == kind).map(|(r, e)| (r, e.line.stream, e.line.seq)).take(MAX_KIND_LINES).collect()
    })
    .await
}

pub(crate) fn hit(h: coroner_index::IndexedLine, clocks: &BTreeMap<Option<u32>, (i64, i64)>) -> Hit {
    let off = clocks.get(&h.rank).map(|c| c.0).unwrap_or(0);
    let time_ns = h.capture_ns.saturating_add(off);
    Hit {
        rank: h.rank,
        time_ns,
        time: coroner_model::format_rfc3339_ns(time_ns),
        capture_ns: h.capture_ns,
        host: h.host,
        stream: h.stream.as_str().to_string(),
        seq: h.seq,
        line: String::from_utf8_lossy(&h.bytes).into_owned(),
        context: false,
    }
}

/// Lines matching `query` per rank (`None`: lines no rank owns).
pub async fn count_by_rank(searches: &Searches, job: &Arc<Job>, query: String) -> Result<BTreeMap<Option<u32>, u64>, ServiceError> {
    searches.check(&query)?;
    let index = job.index().clone();
    searches.run(job.id(), move |budget, alone| index.count_by_rank_within(&query, budget, alone)).await
}

/// The timeline over the job's current evidence and report.
pub async fn timeline(jobs: &Jobs, job: &Arc<Job>, opts: super::timeline::TimelineOptions) -> Result<super::timeline::Timeline, ServiceError> {
    let report = job.current_report().await?;
    let rules = jobs.rules();
    job.with_evidence(move |evidence| super::timeline::build(evidence, &report, &rules, opts)).await
}
