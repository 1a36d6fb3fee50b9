//! `coroner search`: one page of a job's matching lines (with `--context N`, the lines around
//! each hit, as `grep -C N` shows them), or with `--follow` the newest page and then every new
//! hit of a running job until it ends or Ctrl-C.
//!
//! Following polls the Search RPC every [`POLL`] over the last [`LOOKBACK`] of aligned time and
//! prints what it has not printed (by rank, stream and sequence number), so a line that reached
//! coronerd late (an agent's batch, a spool sent after a reconnect) is still shown when it
//! arrives within [`LOOKBACK`] of the newest line shown. It exits with the job's verdict code
//! (`outcome.rs`) once the job is no longer running, after a last poll, and on Ctrl-C with the
//! verdict of that moment.

use crate::remote::{connect, parse_time, status_message, Server};
use coroner_model::Verdict;
use coroner_proto::auth::Channel;
use coroner_proto::v1::{self, query_client::QueryClient};
use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

/// How often `--follow` asks for new lines.
const POLL: Duration = Duration::from_secs(1);
/// How far behind the newest line shown `--follow` still looks for lines that arrived late.
const LOOKBACK_NS: i64 = 120 * 1_000_000_000;
/// Lines asked per page while following.
const FOLLOW_PAGE: u32 = 1000;

/// What `coroner search` asks for.
pub struct SearchArgs {
    pub query: String,
    pub rank: Option<u32>,
    pub host: Option<String>,
    pub stream: Option<String>,
    pub kind: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub limit: u32,
    pub cursor: Option<String>,
    pub context: u32,
    pub follow: bool,
    pub json: bool,
}

impl SearchArgs {
    fn request(&self, job: &str) -> anyhow::Result<v1::SearchRequest> {
        Ok(v1::SearchRequest {
            job_id: job.to_string(),
            query: self.query.clone(),
            rank: self.rank,
            since_ns: self.since.as_deref().map(|s| parse_time("--since", s)).transpose()?,
            until_ns: self.until.as_deref().map(|s| parse_time("--until", s)).transpose()?,
            limit: self.limit,
            cursor: self.cursor.clone().unwrap_or_default(),
            host: self.host.clone().unwrap_or_default(),
            stream: self.stream.clone().unwrap_or_default(),
            kind: self.kind.clone().unwrap_or_default(),
            context: self.context,
            ..Default::default()
        })
    }
}

fn hit_json(h: &v1::SearchHit) -> serde_json::Value {
    serde_json::json!({
        "rank": h.rank, "time": coroner_model::format_rfc3339_ns(h.time_ns), "host": h.host, "stream": h.stream,
        "seq": h.seq, "line": h.line, "context": h.context,
    })
}

/// Prints lines grep's way: `:` after a hit's stream, `-` after a context line's, and `--`
/// between groups that do not follow each other on one rank and stream.
struct Printer {
    json: bool,
    grouped: bool,
    last: Option<(Option<u32>, String, u64)>,
}

impl Printer {
    fn line(&mut self, h: &v1::SearchHit) {
        if self.json {
            crate::term::out_json(&hit_json(h).to_string());
            return;
        }
        let follows = self.last.as_ref().is_some_and(|(r, s, q)| *r == h.rank && *s == h.stream && q.checked_add(1) == Some(h.seq));
        if self.grouped && self.last.is_some() && !follows {
            crate::say!("--");
        }
        self.last = Some((h.rank, h.stream.clone(), h.seq));
        let rank = h.rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into());
        let mark = if h.context { '-' } else { ':' };
        crate::say!("{} rank {rank} {}{mark} {}", coroner_model::format_rfc3339_ns(h.time_ns), h.stream, h.line);
    }
}

pub async fn search(server: &Server, job: &str, a: SearchArgs) -> anyhow::Result<ExitCode> {
    let request = a.request(job)?;
    let mut client = connect(server).await?;
    if a.follow {
        return follow(&mut client, request, a.json).await;
    }
    let resp = client.search(request).await.map_err(status_message)?.into_inner();
    if a.json {
        let hits: Vec<serde_json::Value> = resp.hits.iter().map(hit_json).collect();
        let next = (!resp.next_cursor.is_empty()).then_some(&resp.next_cursor);
        crate::term::out_json(&serde_json::to_string_pretty(&serde_json::json!({"hits": hits, "total": resp.total, "next_cursor": next}))?);
    } else {
        let mut printer = Printer { json: false, grouped: a.context > 0, last: None };
        for h in &resp.hits {
            printer.line(h);
        }
        let shown = resp.hits.iter().filter(|h| !h.context).count();
        crate::say_err!("{shown} of {} matching lines (times on the aligned clock)", resp.total);
    }
    if !resp.next_cursor.is_empty() {
        crate::say_err!("more: add --cursor {}", resp.next_cursor);
    }
    Ok(ExitCode::SUCCESS)
}

async fn verdict(client: &mut QueryClient<Channel>, job: &str) -> anyhow::Result<Verdict> {
    let r = client.get_report(v1::GetReportRequest { job_id: job.to_string() }).await.map_err(status_message)?.into_inner();
    Ok(crate::outcome::verdict_from_wire(&r))
}

/// What `--follow` has printed, by (rank, stream, seq) with its aligned time, and the newest time.
#[derive(Default)]
struct Seen {
    lines: HashMap<(Option<u32>, String, u64), i64>,
    newest_ns: Option<i64>,
}

impl Seen {
    /// Whether `h` is new; remembers it.
    fn first_time(&mut self, h: &v1::SearchHit) -> bool {
        self.newest_ns = Some(self.newest_ns.map_or(h.time_ns, |t| t.max(h.time_ns)));
        self.lines.insert((h.rank, h.stream.clone(), h.seq), h.time_ns).is_none()
    }

    /// Where the next poll starts, and forgets what lies before it.
    fn window_start(&mut self, since: Option<i64>) -> Option<i64> {
        let from = self.newest_ns.map(|t| t.saturating_sub(LOOKBACK_NS));
        if let Some(from) = from {
            self.lines.retain(|_, t| *t >= from);
        }
        match (from, since) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

async fn follow(client: &mut QueryClient<Channel>, request: v1::SearchRequest, json: bool) -> anyhow::Result<ExitCode> {
    let job = request.job_id.clone();
    let mut printer = Printer { json, grouped: request.context > 0, last: None };
    let mut seen = Seen::default();
    // The newest page first, oldest of it first, as `tail -f` starts.
    let newest = v1::SearchRequest { newest_first: true, cursor: String::new(), ..request.clone() };
    let mut first = client.search(newest).await.map_err(status_message)?.into_inner().hits;
    first.reverse();
    for h in first.iter().filter(|h| seen.first_time(h)) {
        printer.line(h);
    }
    loop {
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::select! {
            _ = ctrl_c => return Ok(crate::outcome::exit_code(verdict(client, &job).await?)),
            () = tokio::time::sleep(POLL) => {}
        }
        // The verdict before the poll: lines committed before a job's end are all in that poll.
        let verdict = verdict(client, &job).await?;
        let mut page = v1::SearchRequest { since_ns: seen.window_start(request.since_ns), limit: FOLLOW_PAGE, cursor: String::new(), ..request.clone() };
        loop {
            let resp = client.search(page.clone()).await.map_err(status_message)?.into_inner();
            for h in resp.hits.iter().filter(|h| seen.first_time(h)) {
                printer.line(h);
            }
            if resp.next_cursor.is_empty() {
                break;
            }
            page.cursor = resp.next_cursor;
        }
        if verdict != Verdict::Running {
            return Ok(crate::outcome::exit_code(verdict));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(rank: u32, seq: u64, t: i64) -> v1::SearchHit {
        v1::SearchHit { rank: Some(rank), seq, time_ns: t, stream: "stdout".into(), ..Default::default() }
    }

    #[test]
    fn a_line_is_printed_once_and_the_window_trails_the_newest_line() {
        let mut seen = Seen::default();
        assert_eq!(seen.window_start(Some(5)), Some(5), "before any line: --since");
        assert!(seen.first_time(&hit(0, 1, 1_000)));
        assert!(!seen.first_time(&hit(0, 1, 1_000)), "the same line again");
        assert!(seen.first_time(&hit(1, 1, LOOKBACK_NS + 10_000)));
        assert_eq!(seen.window_start(None), Some(10_000));
        assert_eq!(seen.lines.len(), 1, "lines before the window are forgotten");
        assert_eq!(seen.window_start(Some(i64::MAX)), Some(i64::MAX));
    }
}
