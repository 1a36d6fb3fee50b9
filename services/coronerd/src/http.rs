//! HTTP: the jobs page, a job's report page, the report as JSON, health, and `/metrics`.

use crate::jobs::Jobs;
use crate::metrics::Metrics;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use coroner_model::{JobId, Report};
use std::sync::Arc;

#[derive(Clone)]
struct AppState {
    jobs: Arc<Jobs>,
    metrics: Arc<Metrics>,
}

pub fn router(jobs: Arc<Jobs>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/jobs/{id}", get(job_page))
        .route("/jobs/{id}/report.json", get(job_json))
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(AppState { jobs, metrics })
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title><style>{}</style></head><body>{}</body></html>",
        escape(title),
        STYLE,
        body
    ))
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}td,th{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:left}.failed{color:#b00020}.succeeded{color:#1b7f3b}.banner{padding:1em;border-radius:6px;background:#fdecea;margin-bottom:1em}.banner.ok{background:#e8f5e9}pre{background:#f6f6f6;padding:.5em;overflow-x:auto;white-space:pre-wrap}";

fn error(status: StatusCode, message: String) -> Response {
    (status, page("coroner", &format!("<p>{}</p>", escape(&message)))).into_response()
}

async fn index(State(s): State<AppState>) -> Response {
    match s.jobs.store.list_jobs(&Default::default()).await {
        Ok(rows) => {
            let mut body = String::from("<h1>coroner: jobs</h1><table><tr><th>job</th><th>verdict</th><th>culprit</th><th>class</th><th>lines</th></tr>");
            for r in rows {
                body.push_str(&format!(
                    "<tr><td><a href=\"/jobs/{0}\">{0}</a></td><td class=\"{1}\">{1}</td><td>{2}</td><td>{3}</td><td>{4}</td></tr>",
                    escape(r.job_id.as_str()),
                    escape(&r.verdict),
                    r.culprit_rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into()),
                    escape(r.fault_class.as_deref().unwrap_or("-")),
                    r.lines
                ));
            }
            body.push_str("</table>");
            page("coroner: jobs", &body).into_response()
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot list jobs: {e}")),
    }
}

async fn report_of(s: &AppState, id: &str) -> Result<Arc<Report>, Response> {
    let id = JobId::parse(id).map_err(|e| error(StatusCode::BAD_REQUEST, format!("job id: {e}")))?;
    let job = s.jobs.get(&id, false).await.map_err(|e| error(StatusCode::NOT_FOUND, e.to_string()))?;
    job.current_report(&s.jobs.rules).await.map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn job_json(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    match report_of(&s, &id).await {
        Ok(r) => ([(header::CONTENT_TYPE, "application/json")], serde_json::to_string_pretty(&*r).unwrap_or_default()).into_response(),
        Err(resp) => resp,
    }
}

async fn job_page(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    let report = match report_of(&s, &id).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let mut body = format!("<p><a href=\"/\">jobs</a></p><h1>job {}</h1>", escape(&report.job_id));
    match &report.first_failure {
        Some(f) => {
            body.push_str(&format!(
                "<div class=\"banner\" id=\"verdict\"><b class=\"failed\">{}</b>: <b id=\"culprit\">{}</b> failed first - <b>{}</b> (confidence {:.2})<p>{}</p></div>",
                escape(report.verdict.as_str()),
                f.rank.map(|r| format!("rank {r}")).unwrap_or_else(|| "rank unknown".into()),
                f.class,
                f.confidence,
                escape(&f.summary)
            ));
            body.push_str("<h2>Evidence</h2><table><tr><th>time</th><th>rank</th><th>stream</th><th>line</th></tr>");
            for e in &f.evidence {
                body.push_str(&format!(
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                    escape(&e.time),
                    e.rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into()),
                    escape(&e.stream),
                    escape(&e.line)
                ));
            }
            body.push_str("</table>");
        }
        None => body.push_str(&format!(
            "<div class=\"banner ok\" id=\"verdict\"><b class=\"{0}\">{0}</b></div>",
            escape(report.verdict.as_str())
        )),
    }
    body.push_str(&format!("<h2>Full report</h2><pre>{}</pre>", escape(&coroner_analysis::text::render(&report))));
    page(&format!("coroner: {}", report.job_id), &body).into_response()
}

async fn metrics_text(State(s): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render())
}
