//! HTTP: the web pages (one file each), their JSON API (`api.rs`; the context and histogram
//! behind exploring, `explore.rs`; the live tail as server-sent events, `tail.rs`), snapshot downloads, `/metrics`, OTLP/HTTP
//! logs in (`otlp.rs`) and a Loki-compatible read API for Grafana (`loki.rs`).
//!
//! Pages are server-rendered HTML with one small vanilla script for the timeline and the search
//! box; every asset is served from here (no build step, no external network). Errors are pages
//! or JSON with the reason: a malformed query is a 400 with the parser's message, an unknown job
//! a 404, never a 500.

mod api;
mod attempts;
mod explore;
mod flight_recorder;
mod job_page;
mod jobs_page;
mod live_findings;

mod loki;
mod notifications;
mod otlp;
pub mod serve;
mod similar;
mod tail;

use crate::error::ServiceError;
use crate::jobs::Jobs;
use crate::metrics::{JobCounts, Metrics};
use crate::snapshots::SnapshotStore;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;

#[derive(Clone)]
pub(crate) struct AppState {
    pub jobs: Arc<Jobs>,
    pub metrics: Arc<Metrics>,
    pub snapshots: Arc<SnapshotStore>,
    pub searches: Arc<crate::searches::Searches>,
    pub otlp: Arc<crate::otlp::OtlpReceiver>,
}

/// What the HTTP side serves from.
pub struct Services {
    pub jobs: Arc<Jobs>,
    pub metrics: Arc<Metrics>,
    pub snapshots: Arc<SnapshotStore>,
    pub searches: Arc<crate::searches::Searches>,
    pub otlp: Arc<crate::otlp::OtlpReceiver>,
}

pub fn router(services: Services) -> Router {
    let Services { jobs, metrics, snapshots, searches, otlp } = services;
    Router::new()
        .route("/", get(jobs_page::handler))
        .route("/suspects", get(jobs_page::suspects))
        .route("/jobs/{id}", get(job_page::handler))
        .route("/jobs/{id}/report.json", get(api::report_json))
        .route("/jobs/{id}/snapshots/{sha}", get(api::snapshot_download))
        .route("/api/jobs", get(api::jobs))
        .route("/api/jobs/{id}/search", get(api::search))
        .route("/api/jobs/{id}/counts", get(api::counts))
        .route("/api/jobs/{id}/timeline", get(api::timeline))
        .route("/api/jobs/{id}/context", get(explore::context))
        .route("/api/jobs/{id}/histogram", get(explore::histogram))
        .route("/api/jobs/{id}/tail", get(tail::tail))
        .route("/api/notifications", get(notifications::log))
        .route("/loki/api/v1/labels", get(loki::labels))
        .route("/loki/api/v1/label/{name}/values", get(loki::label_values))
        .route("/loki/api/v1/query_range", get(loki::query_range))
        .route("/loki/api/v1/query", get(loki::query))
        .route("/assets/{name}", get(script))
        .route(crate::auth::OTLP_LOGS_PATH, post(otlp::logs).layer(axum::extract::DefaultBodyLimit::max(otlp::MAX_BODY_BYTES)))
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(axum::middleware::from_fn(to_owner))
        .with_state(AppState { jobs, metrics, snapshots, searches, otlp })
}

/// Every asset the pages load, served from the binary.
const ASSETS: [(&str, &str, &str); 5] = [
    ("style.css", "text/css", include_str!("assets/style.css")),
    ("vlist.js", "text/javascript", include_str!("assets/vlist.js")),
    ("job.js", "text/javascript", include_str!("assets/job.js")),
    ("explore.js", "text/javascript", include_str!("assets/explore.js")),
    ("tail.js", "text/javascript", include_str!("assets/tail.js")),
];

async fn script(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, kind, body)) => ([(header::CONTENT_TYPE, *kind)], *body).into_response(),
        None => (StatusCode::NOT_FOUND, format!("no asset {name:?}")).into_response(),
    }
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

pub(crate) fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>{}</title><link rel=\"stylesheet\" href=\"/assets/style.css\"></head><body>{}</body></html>",
        escape(title),
        body
    ))
}

pub(crate) fn status_of(e: &ServiceError) -> StatusCode {
    match e {
        ServiceError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
        ServiceError::NotFound(_) => StatusCode::NOT_FOUND,
        ServiceError::FailedPrecondition(_) => StatusCode::CONFLICT,
        ServiceError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        ServiceError::ResourceExhausted(_) => StatusCode::TOO_MANY_REQUESTS,
        ServiceError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        ServiceError::Elsewhere(_) => StatusCode::TEMPORARY_REDIRECT,
    }
}

/// The message a caller may see (internal details go to the log only).
pub(crate) fn public_message(e: &ServiceError) -> String {
    match e {
        ServiceError::Internal(m) => {
            tracing::error!(error = %m, "internal error");
            "internal error; see the coronerd log".into()
        }
        other => other.to_string(),
    }
}

/// A job another instance owns: a redirect there, completed by [`to_owner`] with the path.
fn elsewhere(e: &ServiceError) -> Option<Response> {
    let ServiceError::Elsewhere(owner) = e else { return None };
    let mut r = StatusCode::TEMPORARY_REDIRECT.into_response();
    if let Ok(v) = owner.http.parse() {
        r.headers_mut().insert(crate::error::OWNER_HTTP_KEY, v);
    }
    Some(r)
}

/// Turns a handler's redirect to the job's owner into `Location: <owner>/<same path and query>`.
async fn to_owner(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let path = req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    let mut r = next.run(req).await;
    if let Some(owner) = r.headers_mut().remove(crate::error::OWNER_HTTP_KEY) {
        let target = format!("{}{path}", owner.to_str().unwrap_or_default().trim_end_matches('/'));
        if let Ok(v) = target.parse() {
            r.headers_mut().insert(header::LOCATION, v);
        }
    }
    r
}

/// An error as a page.
pub(crate) fn error_page(e: ServiceError) -> Response {
    if let Some(r) = elsewhere(&e) {
        return r;
    }
    let status = status_of(&e);
    let body = format!("<p><a href=\"/\">jobs</a></p><h1>{}</h1><p class=\"error\">{}</p>", status, escape(&public_message(&e)));
    (status, page("coroner: error", &body)).into_response()
}

/// An error as JSON: `{"error": "..."}`.
pub(crate) fn error_json(e: ServiceError) -> Response {
    if let Some(r) = elsewhere(&e) {
        return r;
    }
    let status = status_of(&e);
    (status, axum::Json(serde_json::json!({ "error": public_message(&e) }))).into_response()
}

/// Jobs by verdict and class: the store's tally (a handful of rows), whatever the number of jobs.
pub(crate) async fn job_counts(jobs: &Jobs) -> Result<JobCounts, ServiceError> {
    Ok(JobCounts::from_tally(&jobs.tally().await?))
}

async fn metrics_text(State(s): State<AppState>) -> impl IntoResponse {
    // The ingest metrics are served even when the store cannot be read.
    let counts = job_counts(&s.jobs).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "metrics: cannot count jobs");
        JobCounts::default()
    });
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render(&counts))
}
