//! After the run: what the server holds, asked through its query API like any client.
//!
//! Every rank's lines are read back by sequence number (searches filtered by rank, paged), so a
//! lost line and a duplicated one cannot cancel out in a count. The per-rank counts and the SQL
//! line count are read too and must agree.

use anyhow::{anyhow, Context, Result};
use coroner_proto::v1;
use coroner_proto::v1::query_client::QueryClient;
use futures::{stream, StreamExt};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Held {
    /// Lines of the job the index holds (all ranks).
    pub indexed: u64,
    /// Lines held more than once (every extra copy counts).
    pub duplicated: u64,
    /// Lines sent and acknowledged that the server does not hold.
    pub lost: u64,
    /// Lines held that were never sent (a sequence number beyond the rank's lines).
    pub unexpected: u64,
    /// The line count the SQL metastore keeps for the job.
    pub sql_lines: u64,
    /// Ranks with something wrong, first few.
    pub bad_ranks: Vec<String>,
}

type Client = QueryClient<coroner_proto::auth::Channel>;

/// Ranks read back at once (the bench's server allows as many searches of one job).
pub const CONCURRENT_READS: usize = 16;

async fn client(url: &str) -> Result<Client> {
    // The bench's own coronerd runs without tokens or TLS.
    let auth = coroner_proto::auth::ClientAuth::default();
    let endpoint = auth.endpoint(url).map_err(|e| anyhow!(e))?;
    let channel = endpoint.connect().await.context("connect for the check")?;
    Ok(QueryClient::new(auth.channel(channel)).max_decoding_message_size(256 << 20))
}

/// Reads back `ranks` ranks of `lines` lines each.
pub async fn check(url: &str, job: &str, ranks: u32, lines: u64) -> Result<Held> {
    let q = client(url).await?;
    let per_rank: Vec<Result<(u32, Vec<u64>)>> = stream::iter(0..ranks)
        .map(|rank| {
            let mut q = q.clone();
            async move { Ok((rank, seqs(&mut q, job, rank).await?)) }
        })
        .buffer_unordered(CONCURRENT_READS)
        .collect()
        .await;
    let mut held = Held::default();
    for r in per_rank {
        let (rank, mut seqs) = r?;
        held.indexed += seqs.len() as u64;
        seqs.sort_unstable();
        let before = seqs.len() as u64;
        seqs.dedup();
        let duplicated = before - seqs.len() as u64;
        let unexpected = seqs.iter().filter(|&&s| s >= lines).count() as u64;
        let lost = lines - (seqs.len() as u64 - unexpected);
        if duplicated + unexpected + lost > 0 && held.bad_ranks.len() < 8 {
            held.bad_ranks.push(format!("rank {rank}: {lost} lost, {duplicated} duplicated, {unexpected} never sent"));
        }
        held.duplicated += duplicated;
        held.unexpected += unexpected;
        held.lost += lost;
    }
    let mut q = q;
    let counted =
        q.count_by_rank(v1::CountByRankRequest { job_id: job.into(), query: String::new() }).await.context("count the job's lines by rank")?.into_inner().total;
    if counted != held.indexed {
        held.bad_ranks.push(format!("the per-rank count says {counted} lines, reading them back gave {}", held.indexed));
    }
    held.sql_lines = q
        .list_jobs(v1::ListJobsRequest::default())
        .await
        .context("list jobs")?
        .into_inner()
        .jobs
        .into_iter()
        .find(|j| j.job_id == job)
        .map(|j| j.lines)
        .unwrap_or(0);
    Ok(held)
}

/// The stdout sequence numbers the server holds for one rank, every page.
async fn seqs(q: &mut Client, job: &str, rank: u32) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = q
            .search(v1::SearchRequest {
                job_id: job.into(),
                rank: Some(rank),
                stream: "stdout".into(),
                limit: 10_000,
                cursor: cursor.clone(),
                ..Default::default()
            })
            .await
            .with_context(|| format!("read back rank {rank}'s lines"))?
            .into_inner();
        out.extend(page.hits.iter().map(|h| h.seq));
        if page.next_cursor.is_empty() || page.hits.is_empty() {
            return Ok(out);
        }
        cursor = page.next_cursor;
    }
}
