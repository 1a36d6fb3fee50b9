//! Freshness: how long after its acknowledgement a line is found by search.
//!
//! A sample of the agents hands over the last line of each acknowledged batch ([`Acked`]); this
//! checker searches that rank's newest lines until the line is among them and records the time
//! from the acknowledgement to the answer that held it. Samples arriving while the checker is
//! busy are dropped by the agents, so the figure is the index's delay plus one search, not a
//! queue of the checker's own. A line not found within [`GIVE_UP`] counts as that long.

use super::agent::Acked;
use anyhow::{anyhow, Context, Result};
use coroner_proto::v1;
use coroner_proto::v1::query_client::QueryClient;
use futures::StreamExt;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Lines searched for at once.
const CONCURRENT: usize = 4;
/// How long one line is looked for.
const GIVE_UP: Duration = Duration::from_secs(30);

/// What the checker found: ms from acknowledgement to found, per sampled line, and the lines
/// never found within [`GIVE_UP`].
#[derive(Debug, Default)]
pub struct Freshness {
    pub ms: Vec<f64>,
    pub not_found: u64,
}

/// Checks lines as they arrive on `rx` until every sender is gone.
pub async fn check(url: String, job: String, rx: mpsc::Receiver<Acked>) -> Result<Freshness> {
    let auth = coroner_proto::auth::ClientAuth::default();
    let channel = auth.endpoint(&url).map_err(|e| anyhow!(e))?.connect().await.context("connect for the freshness check")?;
    let q = QueryClient::new(auth.channel(channel)).max_decoding_message_size(64 << 20);
    let found: Vec<Option<f64>> = tokio_stream::wrappers::ReceiverStream::new(rx)
        .map(|a| {
            let (mut q, job) = (q.clone(), job.clone());
            async move { find(&mut q, &job, a).await }
        })
        .buffer_unordered(CONCURRENT)
        .collect()
        .await;
    let mut f = Freshness::default();
    for ms in found {
        match ms {
            Some(ms) => f.ms.push(ms),
            None => {
                f.not_found += 1;
                f.ms.push(GIVE_UP.as_secs_f64() * 1e3);
            }
        }
    }
    Ok(f)
}

/// Searches `a.rank`'s newest stdout lines until `a.seq` is among them; ms since its ack.
async fn find(q: &mut QueryClient<coroner_proto::auth::Channel>, job: &str, a: Acked) -> Option<f64> {
    let deadline = a.at + GIVE_UP;
    while Instant::now() < deadline {
        let page = q
            .search(v1::SearchRequest {
                job_id: job.into(),
                rank: Some(a.rank),
                stream: "stdout".into(),
                limit: 1000,
                newest_first: true,
                ..Default::default()
            })
            .await;
        if let Ok(page) = page {
            if page.get_ref().hits.iter().any(|h| h.seq == a.seq) {
                return Some(a.at.elapsed().as_secs_f64() * 1e3);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}
