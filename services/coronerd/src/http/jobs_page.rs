//! `/`: the jobs, newest first, a page at a time (keyset paging: `after_ns` and `after_id` name
//! the last job of the previous page), filtered by verdict, class, host and time; `/suspects`:
//! the hosts and GPUs the failure history points at (`Jobs::suspects`).

use super::{error_page, escape, page, AppState};
use crate::error::ServiceError;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// Jobs per page unless `limit` says otherwise, and the most one page shows.
const PAGE: u32 = 50;
const MAX_PAGE: u32 = 500;

#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    verdict: Option<String>,
    class: Option<String>,
    host: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<String>,
    after_ns: Option<String>,
    after_id: Option<String>,
}

fn set(v: &Option<String>) -> Option<String> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_string)
}

impl Filter {
    /// The store's filter, asking one job more than a page (whether another page follows).
    pub fn to_store(&self) -> Result<(coroner_store::JobFilter, u32), ServiceError> {
        let time = |what: &str, v: &Option<String>| set(v).map(|s| super::api::parse_time(what, &s)).transpose();
        let limit = super::api::opt::<u32>("limit", &self.limit)?.unwrap_or(PAGE);
        if limit == 0 || limit > MAX_PAGE {
            return Err(ServiceError::InvalidArgument(format!("limit {limit}: use 1 to {MAX_PAGE} jobs a page")));
        }
        let after = match (super::api::opt::<i64>("after_ns", &self.after_ns)?, set(&self.after_id)) {
            (None, None) => None,
            (Some(last_seen_ns), Some(id)) => Some(coroner_store::JobPosition { last_seen_ns, job_id: crate::views::job_id(&id)? }),
            _ => return Err(ServiceError::InvalidArgument("after_ns and after_id go together: follow the page's \"next\" link".into())),
        };
        let filter = coroner_store::JobFilter {
            verdict: set(&self.verdict),
            fault_class: set(&self.class),
            host: set(&self.host),
            since_ns: time("since", &self.since)?,
            until_ns: time("until", &self.until)?,
            after,
            limit: Some(limit + 1),
        };
        Ok((filter, limit))
    }

    /// This filter's query string with another page position.
    fn query(&self, after: Option<&coroner_store::JobPosition>) -> String {
        let mut parts: Vec<String> =
            [("verdict", &self.verdict), ("class", &self.class), ("host", &self.host), ("since", &self.since), ("until", &self.until), ("limit", &self.limit)]
                .iter()
                .filter_map(|(k, v)| set(v).map(|v| format!("{k}={}", urlencode(&v))))
                .collect();
        if let Some(a) = after {
            parts.push(format!("after_ns={}&after_id={}", a.last_seen_ns, urlencode(a.job_id.as_str())));
        }
        parts.join("&")
    }
}

fn urlencode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

fn input(name: &str, label: &str, v: &Option<String>, hint: &str) -> String {
    format!("{label} <input name=\"{name}\" value=\"{}\" placeholder=\"{hint}\" size=\"12\"> ", escape(v.as_deref().unwrap_or("")))
}

pub async fn handler(State(s): State<AppState>, Query(f): Query<Filter>) -> Response {
    let (filter, limit) = match f.to_store() {
        Ok(x) => x,
        Err(e) => return error_page(e),
    };
    let mut rows = match s.jobs.list(&filter).await {
        Ok(rows) => rows,
        Err(e) => return error_page(e),
    };
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let mut body = String::from("<p class=\"nav\">jobs · <a href=\"/suspects\">suspect hosts</a></p><h1>coroner: jobs</h1>");
    body.push_str("<form class=\"filters\" id=\"job-filters\" method=\"get\" action=\"/\">");
    body.push_str(&input("verdict", "verdict", &f.verdict, "failed"));
    body.push_str(&input("class", "class", &f.class, "cuda_oom"));
    body.push_str(&input("host", "host", &f.host, "node-7"));
    body.push_str(&input("since", "seen since", &f.since, "2024-05-01T00:00:00Z"));
    body.push_str(&input("until", "started until", &f.until, "RFC 3339"));
    body.push_str("<button>filter</button></form>");
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
        body.push_str("<p>No jobs match. Run agents with <code>coroner-agent run -- ...</code> or <code>coroner import BUNDLE --job ID</code>.</p>");
    }
    body.push_str("<p class=\"pager\">");
    if filter.after.is_some() {
        body.push_str(&format!("<a id=\"first-page\" href=\"/?{}\">first page</a> ", escape(&f.query(None))));
    }
    if let Some(last) = rows.last().filter(|_| more) {
        body.push_str(&format!("<a id=\"next-page\" rel=\"next\" href=\"/?{}\">next page</a>", escape(&f.query(Some(&last.position())))));
    }
    body.push_str("</p>");
    page("coroner: jobs", &body).into_response()
}

#[derive(Debug, Default, Deserialize)]
pub struct SuspectsQuery {
    since: Option<String>,
    /// `1`/`true`: hosts close to the line too, not only flagged ones.
    all: Option<String>,
}

pub async fn suspects(State(s): State<AppState>, Query(q): Query<SuspectsQuery>) -> Response {
    let since = match set(&q.since).map(|v| super::api::parse_time("since", &v)).transpose() {
        Ok(x) => x,
        Err(e) => return error_page(e),
    };
    let all = matches!(q.all.as_deref().map(str::trim), Some("1" | "true" | "on"));
    let list = match s.jobs.suspects(since, all).await {
        Ok(l) => l,
        Err(e) => return error_page(e),
    };
    let mut body = String::from("<p class=\"nav\"><a href=\"/\">jobs</a> · suspect hosts</p><h1>coroner: suspect hosts and GPUs</h1>");
    body.push_str(&format!(
        "<form class=\"filters\" method=\"get\" action=\"/suspects\">{}<label><input type=\"checkbox\" name=\"all\" value=\"1\"{}> also hosts close to the line</label> <button>show</button></form>",
        input("since", "failures since", &q.since, "RFC 3339"),
        if all { " checked" } else { "" }
    ));
    if list.is_empty() {
        body.push_str("<p id=\"no-suspects\">No host or GPU stands out in the failure history.</p>");
    } else {
        body.push_str("<table id=\"suspects\"><tr><th>host</th><th>GPU</th><th>score</th><th>its share</th><th>failures (hardware)</th><th>jobs seen</th><th>why</th><th>recent failures</th></tr>");
        for x in &list {
            let jobs: Vec<String> = x.incidents.iter().take(5).map(|i| format!("<a href=\"/jobs/{0}\">{0}</a>", escape(i.job_id.as_str()))).collect();
            body.push_str(&format!(
                "<tr{}><td><a href=\"/?host={}\">{}</a></td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{} ({})</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if x.flagged { " class=\"culprit\"" } else { "" },
                escape(&urlencode(&x.host)),
                escape(&x.host),
                escape(x.gpu.as_deref().unwrap_or("-")),
                x.score,
                x.expected,
                x.failures,
                x.hardware_failures,
                x.jobs_seen,
                escape(&x.reason),
                jobs.join(" ")
            ));
        }
        body.push_str("</table>");
    }
    page("coroner: suspects", &body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pairs: &[(&str, &str)]) -> Filter {
        let q: String = pairs.iter().map(|(k, v)| format!("{k}={}", urlencode(v))).collect::<Vec<_>>().join("&");
        serde_urlencoded_like(&q)
    }

    fn serde_urlencoded_like(q: &str) -> Filter {
        axum::extract::Query::<Filter>::try_from_uri(&format!("/?{q}").parse().expect("a uri")).expect("a filter").0
    }

    #[test]
    fn a_page_asks_one_more_and_the_next_link_keeps_the_filters() {
        let filter = f(&[("verdict", "failed"), ("host", "node 7"), ("limit", "20")]);
        let (store, limit) = filter.to_store().expect("valid");
        assert_eq!((store.limit, limit, store.host.as_deref()), (Some(21), 20, Some("node 7")));
        let pos = coroner_store::JobPosition { last_seen_ns: 5, job_id: coroner_model::JobId::parse("j-1").expect("id") };
        let next = filter.query(Some(&pos));
        assert_eq!(next, "verdict=failed&host=node%207&limit=20&after_ns=5&after_id=j-1");
        let (again, _) = serde_urlencoded_like(&next).to_store().expect("valid");
        assert_eq!(again.after, Some(pos));
    }

    #[test]
    fn bad_filters_are_refused_with_a_reason() {
        for bad in [&[("limit", "0")][..], &[("limit", "100000")], &[("since", "yesterday")], &[("after_ns", "5")], &[("after_ns", "x"), ("after_id", "a")]] {
            let e = f(bad).to_store().expect_err("refused");
            assert!(matches!(e, ServiceError::InvalidArgument(_)), "{bad:?}: {e}");
        }
    }
}
