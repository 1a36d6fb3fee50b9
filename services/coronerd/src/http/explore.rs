//! The JSON behind the page's exploring: the lines around one line (`/api/jobs/<id>/context`)
//! and matching lines per rank and time bucket (`/api/jobs/<id>/histogram`). Bad input is a 400
//! with the reason; both are bounded (context lines and peers, buckets).

use super::api::{job, opt, params, SearchQuery};
use super::{error_json, AppState};
use crate::error::ServiceError;
use crate::views::around::{self, AroundParams};
use crate::views::histogram::{self as counted, Grouping};
use crate::views::tail_filter::parse_ranks;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use coroner_model::Stream;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
pub struct ContextQuery {
    rank: Option<String>,
    stream: Option<String>,
    seq: Option<String>,
    n: Option<String>,
    peers: Option<String>,
}

/// The most peer ranks a `peers` list may name, as ranges are expanded.
const MAX_PEER_LIST: u32 = around::MAX_PEERS as u32;

fn around_params(q: ContextQuery) -> Result<AroundParams, ServiceError> {
    let stream = q.stream.as_deref().unwrap_or("stdout").trim();
    let stream = Stream::parse(stream).ok_or_else(|| ServiceError::InvalidArgument(format!("stream {stream:?}: use stdout, stderr or file")))?;
    let seq =
        opt::<u64>("seq", &q.seq)?.ok_or_else(|| ServiceError::InvalidArgument("seq: the line's sequence number is required (a search hit's seq)".into()))?;
    let mut peers = Vec::new();
    for (a, b) in parse_ranks(q.peers.as_deref().unwrap_or(""))? {
        if b - a >= MAX_PEER_LIST || peers.len() as u32 + (b - a) >= MAX_PEER_LIST {
            return Err(ServiceError::InvalidArgument(format!("peers: at most {} ranks", around::MAX_PEERS)));
        }
        peers.extend(a..=b);
    }
    Ok(AroundParams { rank: opt("rank", &q.rank)?, stream, seq, n: opt::<usize>("n", &q.n)?.unwrap_or(10), peers })
}

pub async fn context(State(s): State<AppState>, Path(id): Path<String>, Query(q): Query<ContextQuery>) -> Response {
    let result = async {
        let p = around_params(q)?;
        let j = job(&s, &id).await?;
        around::around(&s.searches, &j, p).await
    }
    .await;
    match result {
        Ok(r) => Json(r).into_response(),
        Err(e) => error_json(e),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct HistogramQuery {
    #[serde(flatten)]
    search: SearchQuery,
    buckets: Option<String>,
    /// `rank`, `host`, or `auto` (the default).
    group: Option<String>,
}

fn grouping(s: Option<&str>) -> Result<Grouping, ServiceError> {
    match s.map(str::trim).unwrap_or("") {
        "" | "auto" => Ok(Grouping::Auto),
        "rank" => Ok(Grouping::Rank),
        "host" => Ok(Grouping::Host),
        other => Err(ServiceError::InvalidArgument(format!("group {other:?}: use rank, host or auto"))),
    }
}

pub async fn histogram(State(s): State<AppState>, Path(id): Path<String>, Query(q): Query<HistogramQuery>) -> Response {
    let result = async {
        let buckets = opt::<u32>("buckets", &q.buckets)?.unwrap_or(counted::DEFAULT_BUCKETS);
        let group = grouping(q.group.as_deref())?;
        let p = params(q.search)?;
        s.searches.check(&p.query)?;
        let j = job(&s, &id).await?;
        counted::histogram(&s.searches, &j, p, buckets, group).await
    }
    .await;
    match result {
        Ok(r) => Json(r).into_response(),
        Err(e) => error_json(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(seq: &str, peers: &str, stream: &str) -> ContextQuery {
        ContextQuery { rank: Some("3".into()), stream: Some(stream.into()), seq: Some(seq.into()), n: None, peers: Some(peers.into()) }
    }

    #[test]
    fn context_requests_are_checked() {
        let p = around_params(q("7", "0-2,9", "stderr")).expect("valid");
        assert_eq!((p.rank, p.stream, p.seq, p.n, p.peers), (Some(3), Stream::Stderr, 7, 10, vec![0, 1, 2, 9]));
        assert!(around_params(q("x", "", "stdout")).is_err());
        assert!(around_params(q("1", "0-100", "stdout")).is_err());
        assert!(around_params(q("1", "0-3,4-7,8", "stdout")).is_err());
        assert!(around_params(q("1", "", "stdin")).is_err());
        assert!(around_params(ContextQuery::default()).is_err());
        assert!(grouping(Some("gpu")).is_err());
    }
}
