//! `/`: every job with its verdict, culprit and fault class; filters by verdict and class.

use super::{error_page, escape, page, AppState};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    verdict: Option<String>,
    class: Option<String>,
}

pub async fn page_handler(s: &AppState, f: Filter) -> Response {
    let filter = coroner_store::JobFilter {
        verdict: f.verdict.clone().filter(|v| !v.is_empty()),
        fault_class: f.class.clone().filter(|v| !v.is_empty()),
        ..Default::default()
    };
    let rows = match s.jobs.list(&filter).await {
        Ok(rows) => rows,
        Err(e) => return error_page(e),
    };
    let mut body = String::from("<h1>coroner: jobs</h1>");
    body.push_str(&format!(
        "<form class=\"filters\" method=\"get\" action=\"/\">verdict <input name=\"verdict\" value=\"{}\" placeholder=\"failed\"> class <input name=\"class\" value=\"{}\" placeholder=\"cuda_oom\"> <button>filter</button></form>",
        escape(f.verdict.as_deref().unwrap_or("")),
        escape(f.class.as_deref().unwrap_or(""))
    ));
    body.push_str("<table id=\"jobs\"><tr><th>job</th><th>verdict</th><th>culprit</th><th>class</th><th>lines</th><th>last seen</th></tr>");
    for r in &rows {
        body.push_str(&format!(
            "<tr><td><a href=\"/jobs/{0}\">{0}</a></td><td class=\"{1}\">{1}</td><td>{2}</td><td>{3}</td><td>{4}</td><td>{5}</td></tr>",
            escape(r.job_id.as_str()),
            escape(&r.verdict),
            r.culprit_rank.map(|r| format!("rank {r}")).unwrap_or_else(|| "-".into()),
            escape(r.fault_class.as_deref().unwrap_or("-")),
            r.lines,
            escape(&coroner_model::format_rfc3339_ns(r.last_seen_ns)),
        ));
    }
    body.push_str("</table>");
    if rows.is_empty() {
        body.push_str("<p>No jobs yet. Run agents with <code>coroner-agent run -- ...</code> or <code>coroner import BUNDLE --job ID</code>.</p>");
    }
    page("coroner: jobs", &body).into_response()
}

pub async fn handler(State(s): State<AppState>, Query(f): Query<Filter>) -> Response {
    page_handler(&s, f).await
}
