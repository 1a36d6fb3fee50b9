//! The lines around one line, for the page's context view: the `n` lines before and after it on
//! its own rank and stream (by sequence number, as `grep -C` shows them), and on a few other
//! ranks (its neighbours and the culprit, or the ranks asked) the `n` lines before and after the
//! same moment on the aligned clock.
//!
//! Bounded: `n` at most [`super::context::MAX_CONTEXT`], at most [`MAX_PEERS`] other ranks.

use super::search::{self, Hit, SearchParams};
use crate::error::ServiceError;
use crate::job::Job;
use crate::searches::Searches;
use coroner_index::SearchRequest;
use coroner_model::Stream;
use serde::Serialize;
use std::sync::Arc;

/// The most other ranks shown at once.
pub const MAX_PEERS: usize = 8;

#[derive(Debug, Clone)]
pub struct AroundParams {
    pub rank: Option<u32>,
    pub stream: Stream,
    pub seq: u64,
    pub n: usize,
    /// Other ranks to show; empty: the line's neighbours and the culprit.
    pub peers: Vec<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeerLines {
    pub rank: u32,
    pub host: Option<String>,
    /// Oldest first; `context` is true for every line (none is the one clicked).
    pub lines: Vec<Hit>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Around {
    /// The line asked about.
    pub line: Hit,
    /// Its rank and stream, oldest first, the line itself among them (`context: false`).
    pub own: Vec<Hit>,
    pub peers: Vec<PeerLines>,
}

pub async fn around(searches: &Searches, job: &Arc<Job>, p: AroundParams) -> Result<Around, ServiceError> {
    let n = super::context::check(p.n, 1)?;
    if p.peers.len() > MAX_PEERS {
        return Err(ServiceError::InvalidArgument(format!("{} peer ranks: at most {MAX_PEERS}", p.peers.len())));
    }
    let report = job.recent_report().await?;
    let clocks = search::clocks(&report);
    let wanted: Vec<(Option<u32>, Stream, u64)> = (p.seq.saturating_sub(n as u64)..=p.seq.saturating_add(n as u64)).map(|s| (p.rank, p.stream, s)).collect();
    let request = SearchRequest {
        only_lines: Some(wanted),
        order_offsets: Some(clocks.iter().map(|(k, (o, _))| (*k, *o)).collect()),
        limit: 2 * n + 1,
        ..Default::default()
    };
    let index = job.index().clone();
    let found = searches.run(job.id(), move |budget, alone| index.search_within(&request, budget, alone)).await?;
    let mut own: Vec<Hit> = found.hits.into_iter().map(|h| search::hit(h, &clocks)).collect();
    own.sort_by_key(|h| h.seq);
    own.iter_mut().for_each(|h| h.context = h.seq != p.seq);
    let line = own.iter().find(|h| h.seq == p.seq).cloned().ok_or_else(|| {
        let rank = p.rank.map_or("no rank".to_string(), |r| format!("rank {r}"));
        ServiceError::NotFound(format!("job {} has no line {} on {rank}, {}: search for it again", job.id(), p.seq, p.stream.as_str()))
    })?;
    let peers = if p.peers.is_empty() { default_peers(&report, p.rank) } else { p.peers };
    let mut out = Vec::with_capacity(peers.len());
    for rank in peers.into_iter().filter(|r| Some(*r) != p.rank) {
        let host = report.ranks.iter().find(|x| x.rank.0 == rank).and_then(|x| x.host.clone());
        out.push(PeerLines { rank, host, lines: at_moment(searches, job, rank, line.time_ns, n).await? });
    }
    Ok(Around { line, own, peers: out })
}

/// The line's neighbours that the report knows (rank - 1, rank + 1) and the culprit.
fn default_peers(report: &coroner_model::Report, rank: Option<u32>) -> Vec<u32> {
    let known = |r: u32| report.ranks.iter().any(|x| x.rank.0 == r);
    let mut peers: Vec<u32> = Vec::new();
    if let Some(r) = rank {
        peers.extend([r.checked_sub(1), r.checked_add(1)].into_iter().flatten().filter(|r| known(*r)));
    }
    if let Some(c) = report.first_failure.as_ref().and_then(|f| f.rank) {
        if Some(c.0) != rank && !peers.contains(&c.0) {
            peers.push(c.0);
        }
    }
    peers
}

/// `n` lines of `rank` at or before aligned time `t` and `n` after it, oldest first.
async fn at_moment(searches: &Searches, job: &Arc<Job>, rank: u32, t: i64, n: usize) -> Result<Vec<Hit>, ServiceError> {
    let base = SearchParams { rank: Some(rank), limit: n, ..Default::default() };
    let before = search::search(searches, job, SearchParams { until_ns: Some(t), descending: true, ..base.clone() }).await?;
    let after = search::search(searches, job, SearchParams { since_ns: Some(t.saturating_add(1)), ..base }).await?;
    // Capture windows are widened by the clock's uncertainty: keep each side's own.
    let mut lines: Vec<Hit> = before.hits.into_iter().filter(|h| h.time_ns <= t).rev().chain(after.hits.into_iter().filter(|h| h.time_ns > t)).collect();
    lines.iter_mut().for_each(|h| h.context = true);
    Ok(lines)
}
