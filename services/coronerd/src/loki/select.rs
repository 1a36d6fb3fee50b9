//! A log query's lines: which jobs its selector names, then each job's lines through the same
//! aligned search as the rest of the API (`views::search`), narrowed by the index where a filter
//! allows (`narrow.rs`) and decided by the filters themselves.
//!
//! Bounds: a selector may name at most [`MAX_JOBS`] jobs; the lines scanned to fill one answer
//! (matches of the narrowed search that the filters then look at) are at most the server's
//! `--max-query-lines` in all, and every page is one search within the usual budget and slots
//! (`searches.rs`). Past a bound the query is refused, never answered in part.

use super::logql::{Label, LogQuery};
use super::narrow::whole_words;
use crate::error::ServiceError;
use crate::jobs::Jobs;
use crate::searches::Searches;
use crate::views::search::{self, Hit, SearchParams};
use coroner_model::JobId;

/// The most jobs one selector may name (`job=~"..."`).
pub const MAX_JOBS: usize = 16;
/// Lines asked of the index per page.
const PAGE: usize = 1000;

/// The time range and order of a query (Loki's `start`, `end`, `limit`, `direction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Aligned time, ns, inclusive.
    pub start_ns: i64,
    /// Aligned time, ns, exclusive.
    pub end_ns: i64,
    pub limit: usize,
    /// Newest first (Loki's `direction=backward`, its default).
    pub backward: bool,
}

/// One line with the labels of its stream.
#[derive(Debug, Clone)]
pub struct Entry {
    pub job: JobId,
    pub hit: Hit,
}

impl Entry {
    /// The value of `label` on this line ("" when it has none: a line no rank owns).
    pub fn label(&self, label: Label) -> String {
        label_of(&self.job, &self.hit, label)
    }
}

fn label_of(job: &JobId, hit: &Hit, label: Label) -> String {
    match label {
        Label::Job => job.as_str().to_string(),
        Label::Rank => hit.rank.map(|r| r.to_string()).unwrap_or_default(),
        Label::Host => hit.host.clone(),
        Label::Stream => hit.stream.clone(),
    }
}

/// The jobs a selector names: the one of `job="..."`, or those the job matchers select among
/// the jobs coronerd heard from since the range's start (a job's first and last sight are
/// arrival times, which a job's printed lines may predate: an import of old logs).
pub async fn jobs_of(jobs: &Jobs, q: &LogQuery, range: Range) -> Result<Vec<JobId>, ServiceError> {
    if let Some(id) = q.fixed(Label::Job) {
        return Ok(JobId::parse(id).ok().filter(|j| q.selects(Label::Job, j.as_str())).into_iter().collect());
    }
    let filter = coroner_store::JobFilter { since_ns: Some(range.start_ns), ..Default::default() };
    let named: Vec<JobId> = jobs.list(&filter).await?.into_iter().filter(|r| q.selects(Label::Job, r.job_id.as_str())).map(|r| r.job_id).collect();
    if named.len() > MAX_JOBS {
        return Err(ServiceError::InvalidArgument(format!(
            "the selector names {} jobs in this range, over the {MAX_JOBS} one query may read: name one with job=\"...\" or narrow the regex",
            named.len()
        )));
    }
    Ok(named)
}

/// The query's lines in `range`: at most `range.limit`, oldest or newest first.
pub async fn select(jobs: &Jobs, searches: &Searches, q: &LogQuery, range: Range) -> Result<Vec<Entry>, ServiceError> {
    let mut scanned = 0u64;
    let mut all = Vec::new();
    for id in jobs_of(jobs, q, range).await? {
        let job = match jobs.get(&id, false).await {
            Ok(j) => j,
            Err(ServiceError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        let mut params = params_of(q, range);
        loop {
            let page = search::search(searches, &job, params.clone()).await?;
            scanned += page.hits.len() as u64;
            for hit in page.hits {
                let kept = Label::ALL.into_iter().all(|l| q.selects(l, &label_of(&id, &hit, l))) && q.filters.iter().all(|f| f.keeps(&hit.line));
                if kept {
                    all.push(Entry { job: id.clone(), hit });
                }
            }
            let full = all.len() >= range.limit;
            match page.next_cursor {
                Some(c) if !full => params.cursor = Some(c),
                _ => break,
            }
            if scanned > searches.max_lines() {
                return Err(ServiceError::ResourceExhausted(format!(
                    "the line filters kept {} of {scanned} lines scanned, and a query may scan {} (--max-query-lines): \
                     narrow it (rank=, host=, a shorter range, or a filter with whole words such as |= \" NCCL WARN \")",
                    all.len(),
                    searches.max_lines()
                )));
            }
        }
    }
    // Jobs are read one after another; the answer is in one order.
    all.sort_by_key(|e| (e.hit.time_ns, e.hit.rank, e.hit.seq));
    if range.backward {
        all.reverse();
    }
    all.truncate(range.limit);
    Ok(all)
}

/// The aligned search of one job that holds every line the query may keep.
fn params_of(q: &LogQuery, range: Range) -> SearchParams {
    let words: Vec<String> = q
        .filters
        .iter()
        .filter_map(|f| match f {
            super::logql::LineFilter::Contains(text) => Some(whole_words(text)),
            _ => None,
        })
        .flatten()
        .collect();
    // A rank that is no number selects nothing; u32::MAX is no rank a job has.
    let rank = q.fixed(Label::Rank).map(|r| r.parse::<u32>().unwrap_or(u32::MAX));
    SearchParams {
        query: words.join(" "),
        rank,
        host: q.fixed(Label::Host).map(str::to_string),
        stream: q.fixed(Label::Stream).map(str::to_string),
        since_ns: Some(range.start_ns),
        until_ns: Some(range.end_ns.saturating_sub(1)),
        limit: PAGE.min(range.limit.max(1) * 4),
        descending: range.backward,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loki::logql::{parse, Query};

    fn logs(q: &str) -> LogQuery {
        match parse(q) {
            Ok(Query::Logs(l)) => l,
            other => panic!("{q}: {other:?}"),
        }
    }

    const RANGE: Range = Range { start_ns: 10, end_ns: 20, limit: 5, backward: true };

    #[test]
    fn the_search_takes_what_the_index_can_answer_and_leaves_the_rest_to_the_filters() {
        let p = params_of(&logs(r#"{job="j", rank="3", host="n1", stream="stderr"} |= " NCCL WARN " != "x" |~ "y""#), RANGE);
        assert_eq!(p.query, "nccl warn");
        assert_eq!((p.rank, p.host.as_deref(), p.stream.as_deref()), (Some(3), Some("n1"), Some("stderr")));
        assert_eq!((p.since_ns, p.until_ns, p.descending), (Some(10), Some(19), true), "end is exclusive");
        assert_eq!(p.limit, 20);
    }

    #[test]
    fn a_rank_that_is_no_number_selects_no_rank() {
        assert_eq!(params_of(&logs(r#"{job="j", rank="x"}"#), RANGE).rank, Some(u32::MAX));
        assert_eq!(params_of(&logs(r#"{job="j", rank=~"1|2"}"#), RANGE).rank, None);
    }
}
