//! Commands that read from coronerd: `report`, `jobs`, `count`, `watch` (`search` is `search.rs`).

use anyhow::Context;
use coroner_proto::auth::{Channel, ClientAuth};
use coroner_proto::v1::{self, query_client::QueryClient};
use std::process::ExitCode;

/// The coronerd a command talks to: its address (`--server`) and how to reach it (`--token`, `--tls-ca`).
pub struct Server {
    pub url: String,
    pub auth: ClientAuth,
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

/// A channel to coronerd whose calls carry `--token`.
pub async fn channel(server: &Server) -> anyhow::Result<Channel> {
    let endpoint = server.auth.endpoint(&server.url).map_err(|e| anyhow::anyhow!("{e} (set --server or CORONER_SERVER)"))?;
    let inner = endpoint.connect().await.with_context(|| format!("connect to coronerd at {server} (is it running? set --server or CORONER_SERVER)"))?;
    Ok(server.auth.channel(inner))
}

pub async fn connect(server: &Server) -> anyhow::Result<QueryClient<Channel>> {
    Ok(QueryClient::new(channel(server).await?))
}

pub fn status_message(s: tonic::Status) -> anyhow::Error {
    if s.message().is_empty() {
        anyhow::anyhow!("coronerd answered {:?}", s.code())
    } else {
        anyhow::anyhow!("{}", s.message())
    }
}

/// Every item of a paged list (docs/API.md): `page` asks for the page after a token (empty for
/// the first) and answers its items and the next token (empty after the last).
pub async fn every_page<T, Fut>(mut page: impl FnMut(String) -> Fut) -> anyhow::Result<Vec<T>>
where
    Fut: std::future::Future<Output = Result<(Vec<T>, String), tonic::Status>>,
{
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let (items, next) = page(token.clone()).await.map_err(status_message)?;
        all.extend(items);
        if next.is_empty() {
            return Ok(all);
        }
        anyhow::ensure!(next != token, "coronerd answered the same page token twice; stopped listing after {} items", all.len());
        token = next;
    }
}

pub async fn report(server: &Server, job: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(server).await?;
    let r = client.get_report(v1::GetReportRequest { job_id: job.to_string() }).await.map_err(status_message)?.into_inner();
    if json {
        crate::term::out_json(&r.report_json);
    } else {
        crate::say_part!("{}", r.report_text);
    }
    Ok(crate::outcome::exit_code(crate::outcome::verdict_from_wire(&r)))
}

pub async fn jobs(server: &Server, json: bool) -> anyhow::Result<ExitCode> {
    let client = connect(server).await?;
    let jobs = every_page(|page_token| {
        let mut client = client.clone();
        async move {
            let page = client.list_jobs(v1::ListJobsRequest { page_token, ..Default::default() }).await?.into_inner();
            Ok((page.jobs, page.next_page_token))
        }
    })
    .await?;
    if json {
        let list: Vec<serde_json::Value> = jobs
            .iter()
            .map(|j| {
                serde_json::json!({
                    "job_id": j.job_id, "verdict": j.verdict, "culprit_rank": j.culprit_rank,
                    "class": if j.fault_class.is_empty() { None } else { Some(&j.fault_class) },
                    "ranks": j.ranks, "lines": j.lines,
                    "first_seen": coroner_model::format_rfc3339_ns(j.first_seen_ns),
                    "last_seen": coroner_model::format_rfc3339_ns(j.last_seen_ns),
                })
            })
            .collect();
        crate::term::out_json(&serde_json::to_string_pretty(&list)?);
    } else {
        crate::say!("{:<32} {:<10} {:<8} {:<20} {:>6} {:>10}", "JOB", "VERDICT", "CULPRIT", "CLASS", "RANKS", "LINES");
        for j in jobs {
            crate::say!(
                "{:<32} {:<10} {:<8} {:<20} {:>6} {:>10}",
                j.job_id,
                j.verdict,
                j.culprit_rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into()),
                if j.fault_class.is_empty() { "-" } else { &j.fault_class },
                j.ranks,
                j.lines
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An RFC 3339 time (`2024-05-01T12:00:00Z`, `2024-05-01T14:00:00.5+02:00`) as ns since the epoch.
pub fn parse_time(what: &str, s: &str) -> anyhow::Result<i64> {
    chrono::DateTime::parse_from_rfc3339(s.trim())
        .ok()
        .and_then(|t| t.timestamp_nanos_opt())
        .ok_or_else(|| anyhow::anyhow!("{what} {s:?} is not an RFC 3339 time (like 2024-05-01T12:00:00Z)"))
}

pub async fn count(server: &Server, job: &str, query: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(server).await?;
    let resp = client.count_by_rank(v1::CountByRankRequest { job_id: job.to_string(), query: query.to_string() }).await.map_err(status_message)?.into_inner();
    if json {
        let rows: Vec<serde_json::Value> = resp.counts.iter().map(|c| serde_json::json!({"rank": c.rank, "count": c.count})).collect();
        crate::term::out_json(&serde_json::to_string_pretty(&rows)?);
    } else {
        for c in &resp.counts {
            crate::say!("{:>8} {:>10}", c.rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into()), c.count);
        }
        crate::say_err!("{} matching lines on {} ranks", resp.total, resp.counts.iter().filter(|c| c.rank.is_some()).count());
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the job's headline now and on every change, until the server ends the stream or, with
/// `until_done`, until the verdict is no longer `running` (then exits with that verdict's code).
pub async fn watch(server: &Server, job: &str, json: bool, until_done: bool) -> anyhow::Result<ExitCode> {
    use tokio_stream::StreamExt;
    let mut client = connect(server).await?;
    let mut stream = client.watch_job(v1::GetReportRequest { job_id: job.to_string() }).await.map_err(status_message)?.into_inner();
    let mut suspected_before = false;
    while let Some(update) = stream.next().await {
        let r = update.map_err(status_message)?;
        let now = coroner_model::format_rfc3339_ns(coroner_model::now_ns());
        let report: serde_json::Value = serde_json::from_str(&r.report_json).unwrap_or_default();
        let live = report.get("live_findings").cloned().unwrap_or_else(|| serde_json::json!([]));
        if json {
            crate::term::out_json(
                &serde_json::json!({"at": now, "job_id": r.job_id, "verdict": r.verdict, "culprit_rank": r.culprit_rank,
                    "class": if r.fault_class.is_empty() { None } else { Some(&r.fault_class) }, "live_findings": live})
                .to_string(),
            );
        } else {
            let headline = r.report_text.lines().next().unwrap_or("");
            crate::say!("[{now}] {headline}");
            for f in live.as_array().into_iter().flatten() {
                crate::say!("[{now}]   suspected hang: {}", f["summary"].as_str().unwrap_or(""));
                if let Some(last) = f["last_lines"].as_array().and_then(|l| l.last()).and_then(|l| l.as_str()) {
                    crate::say!("[{now}]     last line: {last}");
                }
            }
            let suspected = live.as_array().is_some_and(|a| !a.is_empty());
            if suspected_before && !suspected {
                crate::say!("[{now}]   no suspected hang any more");
            }
            suspected_before = suspected;
        }
        let verdict = crate::outcome::verdict_from_wire(&r);
        if until_done && verdict != coroner_model::Verdict::Running {
            return Ok(crate::outcome::exit_code(verdict));
        }
    }
    if until_done {
        anyhow::bail!("coronerd ended the watch before the job was done (restarted or shutting down?); run the command again");
    }
    Ok(ExitCode::SUCCESS)
}
