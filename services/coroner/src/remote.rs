//! Commands that read from coronerd: `report`, `jobs`, `search`.

use anyhow::Context;
use coroner_proto::v1::{self, query_client::QueryClient};
use std::process::ExitCode;
use tonic::transport::Channel;

async fn connect(server: &str) -> anyhow::Result<QueryClient<Channel>> {
    QueryClient::connect(server.to_string())
        .await
        .with_context(|| format!("connect to coronerd at {server} (is it running? set --server or CORONER_SERVER)"))
}

fn status_message(s: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{}", s.message())
}

pub async fn report(server: &str, job: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(server).await?;
    let r = client
        .get_report(v1::GetReportRequest { job_id: job.to_string() })
        .await
        .map_err(status_message)?
        .into_inner();
    if json {
        println!("{}", r.report_json);
    } else {
        print!("{}", r.report_text);
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn jobs(server: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(server).await?;
    let jobs = client.list_jobs(v1::ListJobsRequest::default()).await.map_err(status_message)?.into_inner().jobs;
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
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        println!("{:<32} {:<10} {:<8} {:<20} {:>6} {:>10}", "JOB", "VERDICT", "CULPRIT", "CLASS", "RANKS", "LINES");
        for j in jobs {
            println!(
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

pub async fn search(server: &str, job: &str, query: &str, rank: Option<u32>, limit: u32, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(server).await?;
    let resp = client
        .search(v1::SearchRequest { job_id: job.to_string(), query: query.to_string(), rank, limit, ..Default::default() })
        .await
        .map_err(status_message)?
        .into_inner();
    if json {
        let hits: Vec<serde_json::Value> = resp
            .hits
            .iter()
            .map(|h| serde_json::json!({"rank": h.rank, "time": coroner_model::format_rfc3339_ns(h.time_ns), "stream": h.stream, "line": h.line}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&hits)?);
    } else {
        for h in &resp.hits {
            let rank = h.rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into());
            println!("{} rank {rank} {}: {}", coroner_model::format_rfc3339_ns(h.time_ns), h.stream, h.line);
        }
        eprintln!("{} of {} matching lines", resp.hits.len(), resp.total);
    }
    Ok(ExitCode::SUCCESS)
}
