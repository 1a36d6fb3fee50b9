//! `GET /api/notifications`: the delivery log (`notify/`), newest first: each event with the
//! sink it went to, the attempts made, where it stands (pending, delivered, failed), the last
//! HTTP status and the last error. Filters: `job`, `state`, `limit` (at most 1,000; 100 by default).

use super::{error_json, AppState};
use crate::error::ServiceError;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use coroner_model::format_rfc3339_ns;
use coroner_store::{DeliveryFilter, DeliveryState};
use serde::Deserialize;

const MAX_ROWS: u32 = 1_000;

#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    job: Option<String>,
    state: Option<String>,
    limit: Option<String>,
}

fn filter(q: LogQuery) -> Result<DeliveryFilter, ServiceError> {
    let state = match q.state.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(DeliveryState::parse(s).ok_or_else(|| ServiceError::InvalidArgument(format!("state {s:?}: use pending, delivered or failed")))?),
    };
    let limit = match q.limit.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => 100,
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_ROWS).contains(n))
            .ok_or_else(|| ServiceError::InvalidArgument(format!("limit {l:?}: give 1 to {MAX_ROWS}")))?,
    };
    Ok(DeliveryFilter { job_id: q.job.filter(|j| !j.is_empty()), state, limit })
}

pub async fn log(State(s): State<AppState>, Query(q): Query<LogQuery>) -> Response {
    let rows = match filter(q) {
        Ok(f) => s.jobs.deliveries(&f).await,
        Err(e) => Err(e),
    };
    match rows {
        Ok(rows) => Json(
            rows.iter()
                .map(|d| {
                    serde_json::json!({
                        "job_id": d.event.job_id, "kind": d.event.kind, "key": d.event.key,
                        "event": serde_json::from_str::<serde_json::Value>(&d.event.payload_json).unwrap_or_default(),
                        "sink": d.sink, "state": d.state.as_str(), "attempts": d.attempts,
                        "last_status": d.last_status, "last_error": d.last_error,
                        "updated": format_rfc3339_ns(d.updated_ns),
                    })
                })
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => error_json(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(state: Option<&str>, limit: Option<&str>) -> LogQuery {
        LogQuery { job: Some("j".into()), state: state.map(str::to_string), limit: limit.map(str::to_string) }
    }

    #[test]
    fn bad_filters_are_refused_with_what_to_give() {
        assert_eq!(
            filter(q(Some("failed"), Some("5"))).expect("valid"),
            DeliveryFilter { job_id: Some("j".into()), state: Some(DeliveryState::Failed), limit: 5 }
        );
        assert_eq!(filter(q(None, None)).expect("valid").limit, 100);
        for (state, limit, want) in
            [(Some("lost"), None, "pending, delivered or failed"), (None, Some("0"), "give 1 to 1000"), (None, Some("x"), "give 1 to 1000")]
        {
            let e = filter(q(state, limit)).expect_err("refused").to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
