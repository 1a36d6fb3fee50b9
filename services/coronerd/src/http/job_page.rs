//! `/jobs/<id>`: the verdict banner with the culprit and the evidence, a restarted job's attempts
//! (`attempts.rs`), the timeline (drawn by `assets/job.js` from `/api/jobs/<id>/timeline`), the
//! search with its histogram and the context of a line (`assets/explore.js`), the live tail
//! (`assets/tail.js`, server-sent events from `tail.rs`), the cascade, the collective progress
//! table, snapshots, and the full report. docs/WEB.md describes the page, its URL and its keys.

use super::{error_page, escape, AppState};
use crate::views::job_id;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use coroner_model::Report;

/// Rows of the collective table shown on the page; the rest are in report.json.
const MAX_COLLECTIVE_ROWS: usize = 200;

pub async fn handler(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    let report = async {
        let j = s.jobs.get(&job_id(&id)?, false).await?;
        let r = j.current_report().await?;
        Ok::<_, crate::error::ServiceError>(s.jobs.with_history(r).await)
    }
    .await;
    match report {
        Ok(r) => super::page(&format!("coroner: {}", r.job_id), &render(&r)).into_response(),
        Err(e) => error_page(e),
    }
}

fn rank(r: Option<coroner_model::Rank>) -> String {
    r.map(|r| r.to_string()).unwrap_or_else(|| "-".into())
}

/// For a restarted job: which attempt the first failure is of (`attempt 0: `).
fn attempt_of_failure(r: &Report) -> String {
    r.attempts.iter().find(|a| a.outcome == coroner_model::AttemptOutcome::FailedFirst).map(|a| format!("attempt {}: ", a.attempt)).unwrap_or_default()
}

fn banner(r: &Report, out: &mut String) {
    match &r.first_failure {
        Some(f) => {
            out.push_str(&format!(
                "<div class=\"banner {v}\" id=\"verdict\"><div class=\"headline\"><b class=\"verdict\">{V}</b>: <b id=\"culprit\" data-rank=\"{dr}\">{who}</b> failed first: <b class=\"class\">{class}</b> <span class=\"muted\">(confidence {conf:.2}{host}{time})</span></div><p>{summary}</p>",
                v = escape(r.verdict.as_str()),
                V = escape(&r.verdict.as_str().to_uppercase()),
                dr = rank(f.rank),
                who = attempt_of_failure(r) + &f.rank.map(|r| format!("rank {r}")).unwrap_or_else(|| "rank unknown".into()),
                class = f.class,
                conf = f.confidence,
                host = f.host.as_deref().map(|h| format!(", on {}", escape(h))).unwrap_or_default(),
                time = f.time.as_deref().map(|t| format!(", at {}", escape(t))).unwrap_or_default(),
                summary = escape(&f.summary),
            ));
            if !f.candidates.is_empty() {
                let c: Vec<String> = f.candidates.iter().map(|r| r.to_string()).collect();
                out.push_str(&format!("<p>Candidates: ranks {}</p>", c.join(", ")));
            }
            for a in &r.advice {
                out.push_str(&format!("<p class=\"advice\">{}</p>", escape(a)));
            }
            out.push_str("</div><h2>Evidence</h2><table id=\"evidence\"><tr><th>time (aligned)</th><th>rank</th><th>stream</th><th>line</th></tr>");
            for e in &f.evidence {
                out.push_str(&format!(
                    "<tr><td class=\"nowrap\">{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                    escape(&e.time),
                    rank(e.rank),
                    escape(&e.stream),
                    escape(&e.line)
                ));
            }
            out.push_str("</table>");
        }
        None => out.push_str(&format!(
            "<div class=\"banner ok {0}\" id=\"verdict\"><b class=\"verdict\">{1}</b>: no failure found</div>",
            escape(r.verdict.as_str()),
            escape(&r.verdict.as_str().to_uppercase())
        )),
    }
}

const TIMELINE: &str = r#"<h2>Timeline</h2>
<div id="timeline-controls"><button id="tl-all" type="button">whole job</button> <button id="tl-failure" type="button">failure window</button> <button id="tl-in" type="button">zoom in</button> <button id="tl-out" type="button">zoom out</button> <label><input id="tl-group" type="checkbox"> group ranks by host</label> <span class="muted">drag across the lanes to zoom</span>
<span class="legend"><i class="root"></i>root cause <i class="symptom"></i>symptom <i class="progress"></i>progress <i class="failure"></i>first failure</span></div>
<div id="timeline" data-job="JOB"><p class="muted">loading the timeline…</p></div>"#;

const SEARCH: &str = r#"<h2>Search</h2>
<form id="search" data-job="JOB"><input name="q" size="36" placeholder='"NCCL WARN" or Watchdog AND timeout' title="press / to search"> rank <input name="rank" size="4"> host <input name="host" size="10"> <select name="stream"><option value="">any stream</option><option>stdout</option><option>stderr</option></select> since <input name="since" size="22" placeholder="RFC 3339, aligned"> until <input name="until" size="22"> <button>search</button> <span class="muted keys">/ search · j k move · Enter context · Esc close</span></form>
<p id="search-error" class="error"></p><p id="search-counts" class="muted"></p><div id="histogram"></div><div id="search-results" class="vlist lines"></div>
<div id="context" hidden></div>"#;

const TAIL: &str = r#"<h2>Live tail</h2>
<form id="tail-filters" data-job="JOB">rank <input name="rank" size="8" placeholder="0,3,8-15"> host <input name="host" size="10"> <select name="stream"><option value="">any stream</option><option>stdout</option><option>stderr</option></select> text <input name="q" size="20"> <button>follow</button> <button type="button" id="tail-pause">pause</button> <span id="tail-status" class="muted">connecting…</span></form>
<div id="tail" class="vlist lines"></div>"#;

fn collectives(r: &Report, out: &mut String) {
    if r.collectives.is_empty() {
        return;
    }
    let culprit = r.first_failure.as_ref().and_then(|f| f.rank);
    // Rows that tell the story first: the culprit's, then ranks with a pending collective.
    let mut rows: Vec<&coroner_model::CollectiveRow> = r.collectives.iter().collect();
    rows.sort_by_key(|c| (Some(c.rank) != culprit, c.pending.is_none(), c.pg.clone(), c.rank));
    out.push_str("<h2>Collective progress</h2><table id=\"collectives\"><tr><th>process group</th><th>rank</th><th>last enqueued</th><th>last started</th><th>last completed</th><th>pending</th></tr>");
    let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    for c in rows.iter().take(MAX_COLLECTIVE_ROWS) {
        out.push_str(&format!(
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if Some(c.rank) == culprit { " class=\"culprit\"" } else { "" },
            escape(&c.pg),
            c.rank,
            n(c.last_enqueued),
            n(c.last_started),
            n(c.last_completed),
            escape(c.pending.as_deref().unwrap_or("-"))
        ));
    }
    out.push_str("</table>");
    if rows.len() > MAX_COLLECTIVE_ROWS {
        out.push_str(&format!(
            "<p class=\"muted\">{} more rows in <a href=\"/jobs/{}/report.json\">report.json</a></p>",
            rows.len() - MAX_COLLECTIVE_ROWS,
            escape(&r.job_id)
        ));
    }
}

fn rest(r: &Report, out: &mut String) {
    if !r.cascade.is_empty() {
        out.push_str("<h2>Cascade</h2><table id=\"cascade\"><tr><th>rank</th><th>caused by</th><th>how</th><th>time</th></tr>");
        for c in r.cascade.iter().take(MAX_COLLECTIVE_ROWS) {
            out.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"nowrap\">{}</td></tr>",
                c.rank,
                rank(c.caused_by),
                escape(&c.how),
                escape(c.time.as_deref().unwrap_or("-"))
            ));
        }
        out.push_str("</table>");
    }
    collectives(r, out);
    super::flight_recorder::render(r, out);
    out.push_str("<h2>Snapshots</h2>");
    if r.snapshots.is_empty() {
        out.push_str("<p class=\"muted\">none</p>");
    } else {
        out.push_str("<table id=\"snapshots\"><tr><th>rank</th><th>kind</th><th>name</th><th>size</th><th>highlights</th></tr>");
        for s in &r.snapshots {
            out.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td><a href=\"/jobs/{}/snapshots/{}\">{}</a></td><td>{}</td><td>{}</td></tr>",
                rank(s.rank),
                escape(&s.kind),
                escape(&r.job_id),
                escape(&s.sha256),
                escape(&s.name),
                s.size,
                s.highlights.iter().map(|h| escape(h)).collect::<Vec<_>>().join("<br>")
            ));
        }
        out.push_str("</table>");
    }
}

pub fn render(r: &Report) -> String {
    let id = escape(&r.job_id);
    let mut out = format!("<p class=\"nav\"><a href=\"/\">jobs</a> / {id} · <a href=\"/jobs/{id}/report.json\">report.json</a></p><h1>job {id}</h1>");
    banner(r, &mut out);
    super::attempts::render(r, &mut out);
    super::live_findings::render(r, &mut out);
    super::similar::render(r, &mut out);
    out.push_str(&TIMELINE.replace("JOB", &id));
    out.push_str(&SEARCH.replace("JOB", &id));
    out.push_str(&TAIL.replace("JOB", &id));
    rest(r, &mut out);
    if !r.notes.is_empty() {
        out.push_str("<h2>Notes</h2><ul>");
        for n in &r.notes {
            out.push_str(&format!("<li>{}</li>", escape(n)));
        }
        out.push_str("</ul>");
    }
    out.push_str(&format!("<details><summary>Full report</summary><pre>{}</pre></details>", escape(&coroner_analysis::text::render(r))));
    for script in ["vlist.js", "job.js", "explore.js", "tail.js"] {
        out.push_str(&format!("<script src=\"/assets/{script}\"></script>"));
    }
    out
}
