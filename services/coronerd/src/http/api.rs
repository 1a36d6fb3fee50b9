//! The JSON API behind the pages (`/api/...`), the report as JSON, and snapshot downloads.

use super::{error_json, error_page, AppState};
use crate::error::ServiceError;
use crate::views::search::{self, SearchParams};
use crate::views::timeline::TimelineOptions;
use crate::views::{job_id, snapshot_file};
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;

pub(super) async fn job(s: &AppState, id: &str) -> Result<Arc<crate::job::Job>, ServiceError> {
    s.jobs.get(&job_id(id)?, false).await
}

pub async fn report_json(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    let result = async {
        let j = job(&s, &id).await?;
        let r = j.current_report().await?;
        Ok::<_, ServiceError>(s.jobs.with_history(r).await)
    }
    .await;
    match result {
        Ok(r) => ([(header::CONTENT_TYPE, "application/json")], serde_json::to_string_pretty(&*r).unwrap_or_default()).into_response(),
        Err(e) => error_json(e),
    }
}

pub async fn jobs(State(s): State<AppState>) -> Response {
    match s.jobs.list(&Default::default()).await {
        Ok(rows) => Json(
            rows.iter()
                .map(|r| {
                    serde_json::json!({
                        "job_id": r.job_id.as_str(), "verdict": r.verdict, "culprit_rank": r.culprit_rank.map(|r| r.0),
                        "class": r.fault_class, "lines": r.lines,
                        "first_seen": coroner_model::format_rfc3339_ns(r.first_seen_ns),
                        "last_seen": coroner_model::format_rfc3339_ns(r.last_seen_ns),
                    })
                })
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => error_json(e),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct SearchQuery {
    #[serde(default)]
    q: String,
    rank: Option<String>,
    host: Option<String>,
    stream: Option<String>,
    severity: Option<String>,
    kind: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
    /// Lines before and after each hit on its rank and stream.
    context: Option<String>,
}

/// An RFC 3339 time or integer ns since the epoch.
pub fn parse_time(what: &str, s: &str) -> Result<i64, ServiceError> {
    let s = s.trim();
    if let Ok(ns) = s.parse::<i64>() {
        return Ok(ns);
    }
    crate::views::timeline::parse_time(s)
        .ok_or_else(|| ServiceError::InvalidArgument(format!("{what} {s:?}: use RFC 3339 (2024-05-01T12:00:00Z) or ns since the epoch")))
}

pub(super) fn opt<T: std::str::FromStr>(what: &str, s: &Option<String>) -> Result<Option<T>, ServiceError> {
    match s.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| ServiceError::InvalidArgument(format!("{what} {v:?} is not a number"))),
    }
}

pub(super) fn params(q: SearchQuery) -> Result<SearchParams, ServiceError> {
    let time = |what: &str, v: &Option<String>| v.as_deref().filter(|s| !s.trim().is_empty()).map(|s| parse_time(what, s)).transpose();
    Ok(SearchParams {
        rank: opt("rank", &q.rank)?,
        since_ns: time("since", &q.since)?,
        until_ns: time("until", &q.until)?,
        limit: opt::<usize>("limit", &q.limit)?.unwrap_or(100),
        query: q.q,
        host: q.host,
        stream: q.stream,
        severity: q.severity,
        kind: q.kind,
        cursor: q.cursor,
        descending: false,
        context: opt::<usize>("context", &q.context)?.unwrap_or(0),
    })
}

pub async fn search(State(s): State<AppState>, Path(id): Path<String>, Query(q): Query<SearchQuery>) -> Response {
    let result = async {
        s.searches.check(&q.q)?;
        let j = job(&s, &id).await?;
        search::search(&s.searches, &j, params(q)?).await
    }
    .await;
    match result {
        Ok(r) => Json(r).into_response(),
        Err(e) => error_json(e),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct CountQuery {
    #[serde(default)]
    q: String,
}

pub async fn counts(State(s): State<AppState>, Path(id): Path<String>, Query(q): Query<CountQuery>) -> Response {
    let result = async {
        s.searches.check(&q.q)?;
        let j = job(&s, &id).await?;
        search::count_by_rank(&s.searches, &j, q.q).await
    }
    .await;
    match result {
        Ok(counts) => Json(counts.into_iter().map(|(rank, count)| serde_json::json!({"rank": rank, "count": count})).collect::<Vec<_>>()).into_response(),
        Err(e) => error_json(e),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct TimelineQuery {
    group: Option<String>,
    max_lanes: Option<String>,
    max_events: Option<String>,
}

pub async fn timeline(State(s): State<AppState>, Path(id): Path<String>, Query(q): Query<TimelineQuery>) -> Response {
    let result = async {
        let j = job(&s, &id).await?;
        let d = TimelineOptions::default();
        let opts = TimelineOptions {
            group_by_host: q.group.as_deref() == Some("host"),
            max_lanes: opt::<usize>("max_lanes", &q.max_lanes)?.unwrap_or(d.max_lanes).clamp(1, 10_000),
            max_events_per_lane: opt::<usize>("max_events", &q.max_events)?.unwrap_or(d.max_events_per_lane).clamp(1, 10_000),
        };
        search::timeline(&s.jobs, &j, opts).await
    }
    .await;
    match result {
        Ok(t) => Json(t).into_response(),
        Err(e) => error_json(e),
    }
}

/// The stored bytes of a snapshot, streamed.
pub async fn snapshot_download(State(s): State<AppState>, Path((id, sha)): Path<(String, String)>) -> Response {
    let (record, path) = match snapshot_file(&s.jobs, &s.snapshots, &id, &sha).await {
        Ok(x) => x,
        Err(e) => return error_page(e),
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) => return error_page(ServiceError::Internal(format!("open snapshot {}: {e}", path.display()))),
    };
    let stream = futures::stream::unfold(file, |mut file| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 256 << 10];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(buf), file))
            }
            Err(e) => Some((Err(e), file)),
        }
    });
    let name: String = record.name.rsplit('/').next().unwrap_or("snapshot").chars().filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\').collect();
    (
        [(header::CONTENT_TYPE, "application/octet-stream".to_string()), (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{name}\""))],
        Body::from_stream(stream),
    )
        .into_response()
}
