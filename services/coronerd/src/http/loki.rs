//! The Loki-compatible read API (`crate::loki`) on the HTTP port, behind the read token like every
//! other read: `GET /loki/api/v1/labels`, `/loki/api/v1/label/{name}/values`,
//! `/loki/api/v1/query_range` and `/loki/api/v1/query`, with Loki's parameters (`query`,
//! `start`/`end`/`time` as ns, float seconds or RFC 3339, `limit`, `direction`, `step`) and its
//! JSON. Errors are Loki's too: the status and the message as plain text, which Grafana shows.

use super::AppState;
use crate::error::ServiceError;
use crate::loki::logql::{self, Label, Query};
use crate::loki::response;
use crate::loki::select::{self, Range};
use axum::extract::{Path, Query as Params, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::collections::BTreeSet;

/// What a query range spans when `start` is not given (Loki's default).
const DEFAULT_SPAN_NS: i64 = 3600 * 1_000_000_000;
/// Lines per answer when `limit` is not given (Loki's default), and the most one may ask.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 5000;

#[derive(Debug, Default, Deserialize)]
pub struct LokiParams {
    query: Option<String>,
    start: Option<String>,
    end: Option<String>,
    time: Option<String>,
    limit: Option<String>,
    direction: Option<String>,
    step: Option<String>,
}

fn bad(m: String) -> ServiceError {
    ServiceError::InvalidArgument(m)
}

/// A Loki time: integer ns (ten digits or fewer: seconds), float seconds, or RFC 3339.
pub fn parse_time(what: &str, s: &str) -> Result<i64, ServiceError> {
    let s = s.trim();
    if s.contains('.') && !s.contains('-') {
        if let Ok(secs) = s.parse::<f64>() {
            return Ok((secs * 1e9) as i64);
        }
    }
    if let Ok(n) = s.parse::<i64>() {
        return Ok(if s.trim_start_matches('-').len() <= 10 { n.saturating_mul(1_000_000_000) } else { n });
    }
    crate::views::timeline::parse_time(s).ok_or_else(|| bad(format!("{what} {s:?}: use ns since the epoch, seconds, or RFC 3339")))
}

/// A Loki duration (`step`): a Go duration (`15s`, `1500ms`) or float seconds.
fn parse_step(s: &str) -> Result<i64, ServiceError> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return Ok((secs * 1e9) as i64);
    }
    coroner_model::parse_duration(s).map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)).map_err(|e| bad(format!("step {s:?}: {e}")))
}

impl LokiParams {
    fn time(&self, what: &str, v: &Option<String>) -> Result<Option<i64>, ServiceError> {
        v.as_deref().filter(|s| !s.trim().is_empty()).map(|s| parse_time(what, s)).transpose()
    }

    fn limit(&self) -> Result<usize, ServiceError> {
        match self.limit.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(DEFAULT_LIMIT),
            Some(v) => {
                let n: usize = v.parse().map_err(|_| bad(format!("limit {v:?} is not a number")))?;
                if n == 0 || n > MAX_LIMIT {
                    return Err(bad(format!("limit {n}: ask for 1 to {MAX_LIMIT} lines")));
                }
                Ok(n)
            }
        }
    }

    fn backward(&self) -> Result<bool, ServiceError> {
        match self.direction.as_deref().map(|d| d.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("backward") => Ok(true),
            Some("forward") => Ok(false),
            Some(other) => Err(bad(format!("direction {other:?}: forward or backward"))),
        }
    }

    fn query(&self) -> Result<Query, ServiceError> {
        let text =
            self.query.as_deref().filter(|q| !q.trim().is_empty()).ok_or_else(|| bad("query: a LogQL stream selector such as {job=\"my-job\"}".into()))?;
        logql::parse(text).map_err(|e| bad(e.0))
    }

    /// The range of a range query: `start` to `end`, at most `limit` lines, in `direction`.
    fn range(&self) -> Result<Range, ServiceError> {
        let end = self.time("end", &self.end)?.unwrap_or_else(coroner_model::now_ns);
        let start = self.time("start", &self.start)?.unwrap_or(end.saturating_sub(DEFAULT_SPAN_NS));
        if start > end {
            return Err(bad("start is after end".into()));
        }
        // Loki's `end` is exclusive, but a range ending where it starts still means that instant.
        Ok(Range { start_ns: start, end_ns: end.max(start.saturating_add(1)), limit: self.limit()?, backward: self.backward()? })
    }
}

/// Loki's error: the status, and the message as plain text.
fn error(e: ServiceError) -> Response {
    if let Some(r) = super::elsewhere(&e) {
        return r;
    }
    (super::status_of(&e), [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], super::public_message(&e)).into_response()
}

fn answer(result: Result<serde_json::Value, ServiceError>) -> Response {
    match result {
        Ok(v) => (StatusCode::OK, Json(v)).into_response(),
        Err(e) => error(e),
    }
}

/// `GET /loki/api/v1/query_range`.
pub async fn query_range(State(s): State<AppState>, Params(p): Params<LokiParams>) -> Response {
    answer(
        async {
            let range = p.range()?;
            match p.query()? {
                Query::Constant(v) => {
                    let step = p.step.as_deref().map(parse_step).transpose()?.unwrap_or(1_000_000_000);
                    Ok(response::matrix(v, range.start_ns, range.end_ns, step))
                }
                Query::Logs(q) => Ok(response::streams(&select::select(&s.jobs, &s.searches, &q, range).await?)),
            }
        }
        .await,
    )
}

/// `GET /loki/api/v1/query`: an instant query. A log query reads the lines up to `time` (now
/// when absent), newest first unless `direction=forward`.
pub async fn query(State(s): State<AppState>, Params(p): Params<LokiParams>) -> Response {
    answer(
        async {
            let time = p.time("time", &p.time)?.unwrap_or_else(coroner_model::now_ns);
            match p.query()? {
                Query::Constant(v) => Ok(response::vector(v, time)),
                Query::Logs(q) => {
                    let range = Range { start_ns: 0, end_ns: time.saturating_add(1), limit: p.limit()?, backward: p.backward()? };
                    Ok(response::streams(&select::select(&s.jobs, &s.searches, &q, range).await?))
                }
            }
        }
        .await,
    )
}

/// `GET /loki/api/v1/labels`.
pub async fn labels() -> Response {
    answer(Ok(response::names(Label::ALL.iter().map(|l| l.name().to_string()).collect())))
}

/// `GET /loki/api/v1/label/{name}/values`: the jobs seen in the range; the ranks and hosts of
/// the jobs `query` names (or of the jobs seen in the range), from their reports; the streams.
/// An unknown label has no values.
pub async fn label_values(State(s): State<AppState>, Path(name): Path<String>, Params(p): Params<LokiParams>) -> Response {
    answer(
        async {
            let Some(label) = Label::parse(&name) else { return Ok(response::names(Vec::new())) };
            if label == Label::Stream {
                return Ok(response::names(["file", "stderr", "stdout"].map(String::from).to_vec()));
            }
            let end = p.time("end", &p.end)?.unwrap_or_else(coroner_model::now_ns);
            let start = p.time("start", &p.start)?.unwrap_or(end.saturating_sub(DEFAULT_SPAN_NS));
            let selector = match p.query.as_deref().filter(|q| !q.trim().is_empty()).map(logql::parse).transpose().map_err(|e| bad(e.0))? {
                Some(Query::Logs(q)) => q,
                Some(Query::Constant(_)) => return Err(bad("query: a stream selector such as {job=\"my-job\"}".into())),
                None => logql::LogQuery { matchers: Vec::new(), filters: Vec::new() },
            };
            let range = Range { start_ns: start, end_ns: end.max(start.saturating_add(1)), limit: 1, backward: true };
            let jobs = select::jobs_of(&s.jobs, &selector, range).await?;
            if label == Label::Job {
                return Ok(response::names(jobs.iter().map(|j| j.as_str().to_string()).collect()));
            }
            let mut values = BTreeSet::new();
            for id in jobs {
                let Some(row) = s.jobs.row(&id).await? else { continue };
                let report: serde_json::Value = row.report_json.as_deref().and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default();
                for r in report["ranks"].as_array().into_iter().flatten() {
                    let value = match label {
                        Label::Rank => r["rank"].as_u64().map(|n| n.to_string()),
                        _ => r["host"].as_str().filter(|h| !h.is_empty()).map(str::to_string),
                    };
                    values.extend(value.filter(|v| selector.selects(label, v)));
                }
            }
            let mut values: Vec<String> = values.into_iter().collect();
            if label == Label::Rank {
                values.sort_by_key(|v| v.parse::<u64>().unwrap_or(u64::MAX));
            }
            Ok(response::names(values))
        }
        .await,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_loki_reads_them() {
        assert_eq!(parse_time("t", "1700000000000000000").ok(), Some(1_700_000_000_000_000_000));
        assert_eq!(parse_time("t", "1700000000").ok(), Some(1_700_000_000_000_000_000), "ten digits are seconds");
        assert_eq!(parse_time("t", "1700000000.5").ok(), Some(1_700_000_000_500_000_000));
        assert_eq!(parse_time("t", "2023-11-14T22:13:20Z").ok(), Some(1_700_000_000_000_000_000));
        assert!(parse_time("t", "yesterday").is_err());
    }

    #[test]
    fn defaults_and_bounds_of_a_range() {
        let p = LokiParams { end: Some("2000000000000000000".into()), ..Default::default() };
        let r = p.range().expect("range");
        assert_eq!((r.start_ns, r.end_ns, r.limit, r.backward), (2_000_000_000_000_000_000 - DEFAULT_SPAN_NS, 2_000_000_000_000_000_000, DEFAULT_LIMIT, true));
        let p = LokiParams { limit: Some("0".into()), ..Default::default() };
        assert!(p.range().is_err());
        let p = LokiParams { direction: Some("sideways".into()), ..Default::default() };
        assert!(p.range().is_err());
        let p = LokiParams { start: Some("5".into()), end: Some("4".into()), ..Default::default() };
        assert!(p.range().is_err());
        assert_eq!(parse_step("15ms").ok(), Some(15_000_000));
        assert_eq!(parse_step("2").ok(), Some(2_000_000_000));
    }
}
