//! Ships an import's lines as they are read: one ingest session per rank (opened when its first
//! line or record comes), one `ShipLogs` stream at a time, kept open while the lines are that
//! rank's (a file is one rank's, a combined log goes to the session of no rank, whose lines
//! coronerd files by their prefixes) and closed, all its batches acknowledged, when another
//! rank's line comes. What it holds is bounded: the batch being formed and at most
//! [`IN_FLIGHT_BATCHES`] waiting to be sent; HTTP/2 flow control holds back the rest.

use super::Hosts;
use anyhow::{bail, Context};
use coroner_model::{LogLine, Rank};
use coroner_proto::auth::Channel;
use coroner_proto::convert::line_to_wire;
use coroner_proto::v1::{self, ingest_client::IngestClient};
use std::collections::BTreeMap;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A batch is sent at this many lines, or sooner at [`BATCH_BYTES`] of text.
pub const BATCH_LINES: usize = 2000;
pub const BATCH_BYTES: usize = 4 << 20;
/// Batches queued on one stream before the shipper waits for the connection.
pub const IN_FLIGHT_BATCHES: usize = 4;

/// The `ShipLogs` stream of one rank's session.
struct Open {
    rank: Option<Rank>,
    session: String,
    tx: mpsc::Sender<v1::LogBatch>,
    /// Counts the acknowledgements until the server ends the stream.
    acks: JoinHandle<anyhow::Result<u64>>,
    batch: Vec<LogLine>,
    batch_bytes: usize,
    sent: u64,
}

pub struct Shipper<'a> {
    client: IngestClient<Channel>,
    job: &'a str,
    hosts: &'a Hosts,
    /// The world size the input stated, given to sessions opened from now on.
    pub world_size: Option<u32>,
    sessions: BTreeMap<Option<Rank>, String>,
    open: Option<Open>,
    /// Batch ids go on across a session's streams.
    next_batch: u64,
    pub total_lines: u64,
}

impl<'a> Shipper<'a> {
    pub fn new(client: IngestClient<Channel>, job: &'a str, hosts: &'a Hosts) -> Self {
        Shipper { client, job, hosts, world_size: None, sessions: BTreeMap::new(), open: None, next_batch: 0, total_lines: 0 }
    }

    /// The session of `rank`, opened the first time it is asked for.
    pub async fn session(&mut self, rank: Option<Rank>) -> anyhow::Result<String> {
        if let Some(s) = self.sessions.get(&rank) {
            return Ok(s.clone());
        }
        let resp = self
            .client
            .open_session(v1::OpenSessionRequest {
                job_id: self.job.to_string(),
                rank: rank.map(|r| r.0),
                world_size: self.world_size,
                host: self.hosts.of(rank),
                launcher: if rank.is_some() { "import".into() } else { "import-launcher".into() },
                agent_instance: format!("import-{}", std::process::id()),
                ..Default::default()
            })
            .await
            .context("open an ingest session")?;
        let id = resp.into_inner().session_id;
        self.sessions.insert(rank, id.clone());
        Ok(id)
    }

    /// One line, in the order read.
    pub async fn line(&mut self, line: LogLine) -> anyhow::Result<()> {
        if self.open.as_ref().is_none_or(|o| o.rank != line.rank) {
            self.close_stream().await?;
            self.open_stream(line.rank).await?;
        }
        let Some(open) = self.open.as_mut() else { unreachable!("a stream was just opened") };
        open.batch_bytes += line.bytes.len();
        open.batch.push(line);
        if open.batch.len() >= BATCH_LINES || open.batch_bytes >= BATCH_BYTES {
            self.send_batch().await?;
        }
        Ok(())
    }

    async fn open_stream(&mut self, rank: Option<Rank>) -> anyhow::Result<()> {
        let session = self.session(rank).await?;
        let (tx, rx) = mpsc::channel(IN_FLIGHT_BATCHES);
        let mut client = self.client.clone();
        let acks = tokio::spawn(async move {
            let mut acks = client.ship_logs(tokio_stream::wrappers::ReceiverStream::new(rx)).await.context("ship log batches")?.into_inner();
            let mut n = 0;
            while acks.message().await.context("wait for acknowledgements")?.is_some() {
                n += 1;
            }
            Ok(n)
        });
        self.open = Some(Open { rank, session, tx, acks, batch: Vec::new(), batch_bytes: 0, sent: 0 });
        Ok(())
    }

    async fn send_batch(&mut self) -> anyhow::Result<()> {
        let Some(open) = self.open.as_mut() else { return Ok(()) };
        if open.batch.is_empty() {
            return Ok(());
        }
        let lines = std::mem::take(&mut open.batch);
        open.batch_bytes = 0;
        let batch = v1::LogBatch {
            session_id: open.session.clone(),
            batch_id: self.next_batch,
            lines: lines.iter().map(line_to_wire).collect(),
            clock: Vec::new(),
            spool_backlog: 0,
        };
        self.next_batch += 1;
        if open.tx.send(batch).await.is_err() {
            // The stream ended early: its task says why.
            let Some(open) = self.open.take() else { return Ok(()) };
            open.acks.await.context("the shipping task")??;
            bail!("coronerd ended the log stream before all batches were sent; run the import again (it is idempotent)");
        }
        open.sent += 1;
        self.total_lines += lines.len() as u64;
        Ok(())
    }

    /// Sends what the open stream holds, ends it and waits until every batch is acknowledged.
    pub async fn close_stream(&mut self) -> anyhow::Result<()> {
        self.send_batch().await?;
        let Some(open) = self.open.take() else { return Ok(()) };
        drop(open.tx);
        let acked = open.acks.await.context("the shipping task")??;
        if acked != open.sent {
            bail!("coronerd acknowledged {acked} of {} batches; run the import again (it is idempotent)", open.sent);
        }
        Ok(())
    }
}
