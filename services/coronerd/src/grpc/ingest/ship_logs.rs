//! `ShipLogs`: one agent's stream of log batches, and the stream of their acknowledgements.
//!
//! Contract:
//! - Batches are submitted to their job's committer as they arrive (up to [`IN_FLIGHT`] per
//!   stream, so one job's commits group many batches); a second task answers them in the order
//!   they arrived, each once its lines are durable and in the evidence.
//! - A batch's memory was reserved from the ingest budget before it was decoded (`prepaid.rs`)
//!   and goes back when the batch is committed, whether or not its acknowledgement is read.
//! - A stream that sends nothing, or leaves its acknowledgements unread, for
//!   `--ingest-idle-timeout` is closed; the first failed batch ends the stream with its status.

use super::admit;
use super::budget::Reservation;
use super::prepaid::Prepay;
use super::sessions::Sessions;
use crate::error::ServiceError;
use crate::job::{Job, Reply};
use crate::limits::Limit;
use crate::metrics::Metrics;
use coroner_model::ClockSample;
use coroner_proto::v1;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Status, Streaming};

/// Batches one `ShipLogs` stream may have queued for commit before it stops reading.
const IN_FLIGHT: usize = 32;

/// A batch of a `ShipLogs` stream, in the order it arrived.
enum Submitted {
    /// Queued for commit: its commit, which gives its bytes back to the ingest budget.
    Queued(u64, JoinHandle<Reply>),
    Failed(ServiceError),
}

/// What one stream reads with.
pub struct ShipStream {
    pub sessions: Arc<Sessions>,
    /// Where a job's row is kept (the world size a launcher states goes there).
    pub jobs: Arc<crate::jobs::Jobs>,
    pub metrics: Arc<Metrics>,
    pub idle: Duration,
    pub prepay: Arc<Prepay>,
    /// `--world-size-slack`: how far a world size a launcher's lines state is believed.
    pub world_size_slack: u32,
}

impl ShipStream {
    /// Starts reading `batches`; returns the acknowledgements' stream.
    pub fn start(self, batches: Streaming<v1::LogBatch>) -> ReceiverStream<Result<v1::BatchAck, Status>> {
        let (tx, rx) = mpsc::channel(16);
        self.metrics.agents_connected.fetch_add(1, Relaxed);
        let (order_tx, order_rx) = mpsc::channel::<Submitted>(IN_FLIGHT);
        tokio::spawn(answer_in_order(order_rx, tx, self.idle, self.metrics.clone()));
        tokio::spawn(self.read(batches, order_tx));
        ReceiverStream::new(rx)
    }

    async fn read(self, mut batches: Streaming<v1::LogBatch>, order_tx: mpsc::Sender<Submitted>) {
        // This stream's share of the agents' spool backlog gauge.
        let mut backlog = 0i64;
        // The session this stream's batches name (held in the table while the stream uses it).
        let mut using: Option<String> = None;
        loop {
            let batch = match self.next(&mut batches).await {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => {
                    let _ = order_tx.send(Submitted::Failed(e)).await;
                    break;
                }
            };
            if using.as_deref() != Some(batch.session_id.as_str()) {
                if let Some(old) = using.replace(batch.session_id.clone()) {
                    self.sessions.stream_left(&old);
                }
                self.sessions.stream_uses(&batch.session_id);
            }
            let reported = i64::try_from(batch.spool_backlog).unwrap_or(i64::MAX / 2);
            self.metrics.spool_backlog_bytes.fetch_add(reported - backlog, Relaxed);
            backlog = reported;
            let submitted = self.submit(batch).await;
            let failed = matches!(submitted, Submitted::Failed(_));
            if order_tx.send(submitted).await.is_err() || failed {
                break;
            }
        }
        if let Some(id) = using {
            self.sessions.stream_left(&id);
        }
        self.metrics.spool_backlog_bytes.fetch_sub(backlog, Relaxed);
        self.metrics.agents_connected.fetch_sub(1, Relaxed);
    }

    /// The next batch; `None` when the stream ended, an error for the stream's status.
    async fn next(&self, batches: &mut Streaming<v1::LogBatch>) -> Result<Option<v1::LogBatch>, ServiceError> {
        match tokio::time::timeout(self.idle, batches.next()).await {
            Ok(Some(Ok(b))) => Ok(Some(b)),
            Ok(None) => Ok(None),
            Err(_) => {
                Limit::IdleStream.count(&self.metrics);
                Err(ServiceError::Unavailable(format!("the log stream sent nothing for {} s (--ingest-idle-timeout); reconnect", self.idle.as_secs())))
            }
            Ok(Some(Err(e))) => {
                tracing::debug!(error = %e, "log stream ended");
                if e.message().contains("decode") {
                    // Bytes that are no LogBatch: say so in the stream's status.
                    return Err(ServiceError::InvalidArgument(format!("a batch could not be decoded ({}); the stream is closed", e.message())));
                }
                Ok(None)
            }
        }
    }

    /// Queues a batch for commit, its reserved budget held until the commit.
    async fn submit(&self, batch: v1::LogBatch) -> Submitted {
        let batch_id = batch.batch_id;
        let session = self.sessions.get(&batch.session_id);
        if let Some(s) = &session {
            self.prepay.set_job(s.job.id());
        }
        // A per-node launcher's session: its lines may state the job's world size.
        let launcher = session.filter(|s| s.rank.is_none()).map(|s| (s.job.clone(), self.jobs.clone(), self.world_size_slack));
        // Reserved before decoding; a decoded batch larger than that reserves the rest.
        let decoded = batch_bytes(&batch);
        let paid = self.prepay.take();
        let more = decoded.saturating_sub(paid.as_ref().map_or(0, Reservation::bytes));
        let topped = if more > 0 { self.prepay.top_up(more) } else { None };
        match submit_batch(&self.sessions, batch).await {
            // The budget goes back when the batch is committed, whether or not its
            // acknowledgement is read.
            Ok(wait) => Submitted::Queued(
                batch_id,
                tokio::spawn(async move {
                    let r = Job::committed(wait).await;
                    drop((paid, topped));
                    if let (Ok(_), Some((job, jobs, slack))) = (&r, launcher) {
                        adopt_said_world_size(&job, &jobs, slack).await;
                    }
                    r
                }),
            ),
            Err(e) => Submitted::Failed(e),
        }
    }
}

/// Answers the stream's batches in the order they arrived; stops at the first failure, or when
/// the client leaves its acknowledgements unread past the idle timeout.
async fn answer_in_order(mut order_rx: mpsc::Receiver<Submitted>, tx: mpsc::Sender<Result<v1::BatchAck, Status>>, idle: Duration, metrics: Arc<Metrics>) {
    while let Some(submitted) = order_rx.recv().await {
        let result = match submitted {
            Submitted::Queued(batch_id, committed) => committed.await.unwrap_or_else(|e| Err(e.into())).map(|duplicates| v1::BatchAck { batch_id, duplicates }),
            Submitted::Failed(e) => Err(e),
        };
        let failed = result.is_err();
        // A client that leaves its acknowledgements unread holds only this stream: its
        // batches' budget was given back at their commit, and after the idle timeout it is closed.
        match tokio::time::timeout(idle, tx.send(result.map_err(Status::from))).await {
            Ok(Ok(())) if !failed => {}
            Ok(_) => break,
            Err(_) => {
                Limit::IdleStream.count(&metrics);
                tracing::info!(idle_s = idle.as_secs(), "closed a log stream whose acknowledgements went unread");
                break;
            }
        }
    }
}

/// A launcher's lines stated the job's world size (torchrun's rendezvous result): into the
/// evidence and the job's row, where `coroner jobs` reads it.
async fn adopt_said_world_size(job: &Job, jobs: &crate::jobs::Jobs, slack: u32) {
    if let Some(w) = job.adopt_said_world_size(slack) {
        if let Err(e) = jobs.touch(job.id(), Some(w), coroner_model::now_ns()).await {
            tracing::warn!(job = %job.id(), error = %e, "could not record the world size a launcher stated");
        }
    }
}

/// What a batch costs in memory once decoded: its line bytes and a fixed overhead per line.
fn batch_bytes(batch: &v1::LogBatch) -> u64 {
    batch.lines.iter().map(|l| l.raw.len() as u64 + l.file.len() as u64 + 96).sum()
}

/// Validates a batch, stores its clock samples and queues its lines for commit.
async fn submit_batch(sessions: &Sessions, batch: v1::LogBatch) -> Result<oneshot::Receiver<Reply>, ServiceError> {
    let session = sessions
        .get(&batch.session_id)
        .ok_or_else(|| ServiceError::FailedPrecondition(format!("unknown session {:?}: open the session before shipping logs", batch.session_id)))?;
    session.fence.check(session.job.id())?;
    let admit::Admitted { lines, notes } = admit::admit(batch.lines, session.rank, session.world_size, &session.host);
    if !notes.is_empty() {
        session.job.update(|p| notes.into_iter().for_each(|n| p.add_note(n)));
    }
    if let (false, Some(rank)) = (batch.clock.is_empty(), session.rank) {
        let samples: Vec<ClockSample> = batch
            .clock
            .iter()
            .map(|c| ClockSample {
                rank,
                t1_agent_send: c.t1_agent_send_ns,
                t2_server_recv: c.t2_server_recv_ns,
                t3_server_send: c.t3_server_send_ns,
                t4_agent_recv: c.t4_agent_recv_ns,
            })
            .collect();
        session.job.add_clock_samples(samples).await?;
    }
    session.job.submit(lines, session.host.clone()).await
}
