//! The red team's findings (issue 26), each reproduced against a real coronerd: one file per
//! finding. Timing assertions are generous bounds that prove "not unbounded"; the measured
//! figures are printed (`-- --nocapture`) and written in docs/SECURITY.md.

mod claim_by_hash;
mod ingest_fairness;
mod jobs_bounds;
mod partial_uploads;
mod query_budget;
mod small_items;
mod terminal;
mod tokens;

use coroner_proto::v1::{self, ingest_client::IngestClient};
use std::time::Duration;
use tonic::transport::Channel;

/// An ingest client on `url`.
pub async fn ingest(url: &str) -> IngestClient<Channel> {
    IngestClient::connect(url.to_string()).await.expect("connect").max_decoding_message_size(64 << 20).max_encoding_message_size(64 << 20)
}

/// Opens a session for `rank` of `job` as agent `agent` on `host`.
pub async fn session(client: &mut IngestClient<Channel>, job: &str, rank: u32, world: u32, host: &str, agent: &str) -> String {
    let req = v1::OpenSessionRequest {
        job_id: job.into(),
        rank: Some(rank),
        world_size: Some(world),
        host: host.into(),
        agent_instance: agent.into(),
        ..Default::default()
    };
    client.open_session(req).await.expect("OpenSession").into_inner().session_id
}

pub fn line(seq: u64, text: &[u8]) -> v1::LogLine {
    v1::LogLine {
        seq,
        capture_ns: 1_700_000_000_000_000_000 + seq as i64 * 1000,
        stream: v1::StreamKind::Stdout as i32,
        raw: text.to_vec(),
        ..Default::default()
    }
}

/// Ships `lines` in batches of `per_batch` on one stream and waits for every acknowledgement.
pub async fn ship(client: &mut IngestClient<Channel>, session: &str, lines: Vec<v1::LogLine>, per_batch: usize) {
    let batches: Vec<v1::LogBatch> = lines
        .chunks(per_batch.max(1))
        .enumerate()
        .map(|(i, c)| v1::LogBatch { session_id: session.into(), batch_id: i as u64, lines: c.to_vec(), ..Default::default() })
        .collect();
    let n = batches.len();
    let mut acks = client.ship_logs(tokio_stream::iter(batches)).await.expect("ShipLogs").into_inner();
    for _ in 0..n {
        let ack = tokio::time::timeout(Duration::from_secs(120), acks.message()).await.expect("an ack in time");
        ack.expect("an ack, not an error").expect("an ack before the stream ends");
    }
}

/// A plain HTTP/1.1 request on `port`: (status, head, body).
pub fn http(port: u16, request: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return (0, String::new(), String::new()) };
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    let _ = s.write_all(request.as_bytes());
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_string(), body.to_string())
}

/// A value of coronerd's /metrics text, 0 when absent.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0.0)
}

/// (threads, resident MiB) of a process, from /proc.
pub fn threads_and_rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok()).unwrap_or(0);
    (field("Threads:"), field("VmRSS:") / 1024)
}
