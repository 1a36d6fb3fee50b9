//! The Ingest service: sessions, clock exchanges, log batches, process ends and snapshots.

use crate::error::ServiceError;
use crate::job::Job;
use crate::jobs::Jobs;
use crate::metrics::Metrics;
use crate::snapshots::SnapshotStore;

mod admit;
mod budget;
mod prepaid;
mod session_limits;
mod snapshot_upload;
#[cfg(test)]
mod tests;
pub use budget::{IngestBudget, Reservation};
use coroner_model::{ClockSample, JobId, ProcessEnd, Rank};
use coroner_proto::v1::{self, ingest_server::Ingest};
use coroner_store::SessionRecord;
pub use prepaid::Prepaid;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

#[derive(Clone)]
struct Session {
    job: Arc<Job>,
    /// This instance's lease on the job: no commit once it lapsed.
    fence: Arc<crate::ownership::Fence>,
    rank: Option<Rank>,
    host: String,
    world_size: Option<u32>,
    /// `<host>/<agent instance>`: who may file a content it uploaded under another job by hash.
    uploader: String,
}

pub struct IngestService {
    jobs: Arc<Jobs>,
    snapshots: Arc<SnapshotStore>,
    metrics: Arc<Metrics>,
    budget: Arc<IngestBudget>,
    limits: Arc<crate::limits::LimitsConfig>,
    /// Every session this process opened (never pruned). A `ShipLogs` stream looks its batches'
    /// sessions up here, per batch: it once copied the whole table when it opened (1,000 agents
    /// made half a million copies, ~70 MB at the ingest's peak, growing with the square of the agents).
    sessions: Arc<Mutex<HashMap<String, Session>>>,
}

impl IngestService {
    pub fn new(
        jobs: Arc<Jobs>,
        snapshots: Arc<SnapshotStore>,
        metrics: Arc<Metrics>,
        budget: Arc<IngestBudget>,
        limits: Arc<crate::limits::LimitsConfig>,
    ) -> Self {
        IngestService { jobs, snapshots, metrics, budget, limits, sessions: Arc::default() }
    }

    fn session(&self, id: &str) -> Result<Session, ServiceError> {
        lookup(&self.sessions, id)
            .ok_or_else(|| ServiceError::FailedPrecondition(format!("unknown session {id:?} (the server restarted?); open a new session")))
    }
}

fn lookup(sessions: &Mutex<HashMap<String, Session>>, id: &str) -> Option<Session> {
    sessions.lock().ok().and_then(|s| s.get(id).cloned())
}

use coroner_model::now_ns;

type AckStream = Pin<Box<dyn Stream<Item = Result<v1::BatchAck, Status>> + Send>>;

/// Batches one `ShipLogs` stream may have queued for commit before it stops reading.
const IN_FLIGHT: usize = 32;

/// A batch of a `ShipLogs` stream, in the order it arrived.
enum Submitted {
    /// Queued for commit: its commit, which gives its bytes back to the ingest budget.
    Queued(u64, tokio::task::JoinHandle<crate::committer::Reply>),
    Failed(ServiceError),
}

#[tonic::async_trait]
impl Ingest for IngestService {
    async fn open_session(&self, req: Request<v1::OpenSessionRequest>) -> Result<Response<v1::OpenSessionResponse>, Status> {
        let r = req.into_inner();
        let job_id = JobId::parse(&r.job_id).map_err(|e| ServiceError::InvalidArgument(format!("job id: {e}")))?;
        if let (Some(rank), Some(world)) = (r.rank, r.world_size) {
            if rank >= world {
                return Err(ServiceError::InvalidArgument(format!("rank {rank} is beyond the world size {world}")).into());
            }
        }
        let max = coroner_model::MAX_WORLD_SIZE;
        let absurd = match (r.world_size, r.rank) {
            (Some(w), _) if w > max => Some(format!("world size {w}")),
            (_, Some(rank)) if rank >= max => Some(format!("rank {rank}")),
            _ => None,
        };
        if let Some(what) = absurd {
            return Err(ServiceError::InvalidArgument(format!("{what} is beyond the largest world this server takes ({max} ranks)")).into());
        }
        if let Some(why) = session_limits::check_opening(&r, self.limits.max_string_bytes) {
            crate::limits::Limit::StringLength.count(&self.metrics);
            return Err(ServiceError::InvalidArgument(format!("OpenSession: {why}")).into());
        }
        let now = now_ns();
        self.jobs.admit_new(&job_id).await?;
        self.jobs.store.touch_job(&job_id, None, now).await.map_err(ServiceError::from)?;
        let job = self.jobs.get(&job_id, true).await?;
        let fence = self.jobs.fence(&job_id).ok_or_else(|| ServiceError::Unavailable(format!("job {job_id} was closed here; retry")))?;
        let session_id = uuid::Uuid::new_v4().to_string();
        let record = SessionRecord {
            session_id: session_id.clone(),
            job_id: job_id.clone(),
            rank: r.rank.map(Rank),
            local_rank: r.local_rank,
            world_size: r.world_size,
            host: r.host.clone(),
            pid: r.pid,
            launcher: r.launcher.clone(),
            agent_instance: r.agent_instance.clone(),
            versions: r.versions.clone().into_iter().collect(),
            opened_ns: now,
        };
        self.jobs.store.open_session(&record).await.map_err(ServiceError::from)?;
        // Which lane of sequence numbers this session numbers in (`job/claims.rs`).
        let granted = job.claim(&crate::job::claims::Opening {
            session_id: &session_id,
            rank: r.rank,
            instance: &r.agent_instance,
            host: &r.host,
            pid: r.pid,
            launcher: &r.launcher,
            lanes: r.seq_lanes,
            offset: r.seq_offset,
        });
        // A world size is believed in proportion to the agents seen (`limits.rs`).
        let world = r.world_size.map(|w| crate::limits::believed_world_size(w, job.speakers(), self.limits.world_size_slack));
        if world != r.world_size {
            crate::limits::Limit::WorldSize.count(&self.metrics);
        }
        if world.is_some() {
            self.jobs.store.touch_job(&job_id, world, now).await.map_err(ServiceError::from)?;
        }
        job.update(|p| {
            if let Some(w) = world {
                p.set_world_size(w);
            }
            if let Some(rank) = r.rank {
                p.set_host(Rank(rank), &r.host);
            }
            if let Some(base) = r.node_rank_base {
                p.set_node_rank_base(base);
            }
            for note in &r.notes {
                p.add_note(agent_note(&r.host, r.rank, note));
            }
        });
        self.sessions.lock().map_err(|_| ServiceError::Internal("session table lock".into()))?.insert(
            session_id.clone(),
            Session {
                job,
                fence,
                rank: r.rank.map(Rank),
                uploader: if r.agent_instance.is_empty() { String::new() } else { format!("{}/{}", r.host, r.agent_instance) },
                host: r.host,
                world_size: r.world_size,
            },
        );
        tracing::info!(job = %job_id, rank = ?r.rank, session = %session_id, "session opened");
        Ok(Response::new(v1::OpenSessionResponse { session_id, resume_from: granted.resume_from, seq_offset: granted.seq_offset }))
    }

    async fn sync_clock(&self, req: Request<v1::ClockProbe>) -> Result<Response<v1::ClockProbe>, Status> {
        let t2 = now_ns();
        let mut probe = req.into_inner();
        probe.t2_server_recv_ns = t2;
        probe.t3_server_send_ns = now_ns();
        Ok(Response::new(probe))
    }

    type ShipLogsStream = AckStream;

    async fn ship_logs(&self, req: Request<Streaming<v1::LogBatch>>) -> Result<Response<Self::ShipLogsStream>, Status> {
        // Reservations made before each message was decoded (`ingest/prepaid.rs`); a server
        // built without the gate (none in production) reserves after decoding, as before.
        let prepay = req.extensions().get::<Arc<prepaid::Prepay>>().cloned().unwrap_or_else(|| prepaid::Prepay::new(self.budget.clone()));
        let mut batches = req.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let sessions = self.sessions.clone();
        let store = self.jobs.store.clone();
        let metrics = self.metrics.clone();
        let idle = self.limits.ingest_idle_timeout;
        metrics.agents_connected.fetch_add(1, Relaxed);
        // Batches are submitted as they arrive (several in flight per stream, so one job's
        // commits group many batches); a second task answers them in order.
        let (order_tx, mut order_rx) = tokio::sync::mpsc::channel::<Submitted>(IN_FLIGHT);
        let order_metrics = metrics.clone();
        tokio::spawn(async move {
            while let Some(submitted) = order_rx.recv().await {
                let result = match submitted {
                    Submitted::Queued(batch_id, committed) => {
                        committed.await.unwrap_or_else(|e| Err(e.into())).map(|duplicates| v1::BatchAck { batch_id, duplicates })
                    }
                    Submitted::Failed(e) => Err(e),
                };
                let failed = result.is_err();
                // A client that leaves its acknowledgements unread holds only this stream: its
                // batches' budget was given back at their commit, and after the idle timeout it is closed.
                match tokio::time::timeout(idle, tx.send(result.map_err(Status::from))).await {
                    Ok(Ok(())) if !failed => {}
                    Ok(_) => break,
                    Err(_) => {
                        crate::limits::Limit::IdleStream.count(&order_metrics);
                        tracing::info!(idle_s = idle.as_secs(), "closed a log stream whose acknowledgements went unread");
                        break;
                    }
                }
            }
        });
        tokio::spawn(async move {
            // This stream's share of the agents' spool backlog gauge.
            let mut backlog = 0i64;
            loop {
                let batch = match tokio::time::timeout(idle, batches.next()).await {
                    Ok(Some(b)) => b,
                    Ok(None) => break,
                    Err(_) => {
                        crate::limits::Limit::IdleStream.count(&metrics);
                        let why = format!("the log stream sent nothing for {} s (--ingest-idle-timeout); reconnect", idle.as_secs());
                        let _ = order_tx.send(Submitted::Failed(ServiceError::Unavailable(why))).await;
                        break;
                    }
                };
                let batch = match batch {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::debug!(error = %e, "log stream ended");
                        if e.message().contains("decode") {
                            // Bytes that are no LogBatch: say so in the stream's status.
                            let why = format!("a batch could not be decoded ({}); the stream is closed", e.message());
                            let _ = order_tx.send(Submitted::Failed(ServiceError::InvalidArgument(why))).await;
                        }
                        break;
                    }
                };
                let reported = i64::try_from(batch.spool_backlog).unwrap_or(i64::MAX / 2);
                metrics.spool_backlog_bytes.fetch_add(reported - backlog, Relaxed);
                backlog = reported;
                let batch_id = batch.batch_id;
                if let Some(s) = lookup(&sessions, &batch.session_id) {
                    prepay.set_job(&s.job.id);
                }
                // Reserved before decoding; a decoded batch larger than that reserves the rest.
                let decoded = batch_bytes(&batch);
                let paid = prepay.take();
                let more = decoded.saturating_sub(paid.as_ref().map_or(0, Reservation::bytes));
                let topped = if more > 0 { prepay.top_up(more) } else { None };
                let submitted = match submit_batch(&sessions, &store, batch).await {
                    // The budget goes back when the batch is committed, whether or not its
                    // acknowledgement is read.
                    Ok(wait) => Submitted::Queued(
                        batch_id,
                        tokio::spawn(async move {
                            let r = Job::committed(wait).await;
                            drop((paid, topped));
                            r
                        }),
                    ),
                    Err(e) => Submitted::Failed(e),
                };
                let failed = matches!(submitted, Submitted::Failed(_));
                if order_tx.send(submitted).await.is_err() || failed {
                    break;
                }
            }
            metrics.spool_backlog_bytes.fetch_sub(backlog, Relaxed);
            metrics.agents_connected.fetch_sub(1, Relaxed);
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn report_exit(&self, req: Request<v1::ProcessExit>) -> Result<Response<v1::ExitAck>, Status> {
        let r = req.into_inner();
        let session = self.session(&r.session_id)?;
        // An agent's count is a claim: it saturates the counter, never wraps it.
        let _ = self.metrics.dropped_lines_reported.fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_add(r.dropped_lines)));
        if r.rank.is_none() || r.rank.map(Rank) == session.rank {
            session.job.end_claim(&r.session_id);
        }
        if !r.notes.is_empty() {
            session.job.update(|p| r.notes.iter().for_each(|n| p.add_note(agent_note(&session.host, r.rank, n))));
        }
        if r.exit_code.is_none() && r.signal.is_none() {
            // The agent lost sight of the process: nothing is known of its end but the notes.
            return Ok(Response::new(v1::ExitAck {}));
        }
        let Some(rank) = r.rank.map(Rank).or(session.rank) else {
            // A launcher agent's own end: the workers' ends come from their own reports or the launcher's table.
            session.job.update(|p| {
                if r.dropped_lines > 0 {
                    p.add_note(format!("the launcher agent on {} dropped {} lines (its spool was full)", session.host, r.dropped_lines));
                }
                p.add_note(format!("the launcher on {} ended ({})", session.host, describe(r.exit_code, r.signal)));
                p.add_launcher_end(r.exit_code, r.signal);
                p.set_finished(true);
            });
            return Ok(Response::new(v1::ExitAck {}));
        };
        if let Some(w) = session.world_size {
            if rank.0 >= w {
                return Err(ServiceError::InvalidArgument(format!("rank {rank} is beyond the world size {w}")).into());
            }
        }
        let end = ProcessEnd { rank, exit_code: r.exit_code, signal: r.signal, at_ns: (r.at_ns != 0).then_some(r.at_ns) };
        self.jobs.store.record_exit(&session.job.id, &end).await.map_err(ServiceError::from)?;
        let ends = self.jobs.store.process_ends(&session.job.id).await.map_err(ServiceError::from)?.len() as u32;
        if r.dropped_lines > 0 {
            session.job.update(|p| {
                p.add_note(format!(
                    "rank {rank}'s agent dropped {} lines (its spool was full, or they were in flight when part of the agent was killed)",
                    r.dropped_lines
                ));
            });
        }
        session.job.update(|p| {
            p.add_end(end);
            if session.world_size.is_some_and(|w| ends >= w) {
                p.set_finished(true);
            }
        });
        Ok(Response::new(v1::ExitAck {}))
    }

    async fn snapshot_status(&self, req: Request<v1::SnapshotStatusRequest>) -> Result<Response<v1::SnapshotStatusResponse>, Status> {
        self.snapshot_status_of(req.into_inner()).await.map(Response::new)
    }

    async fn upload_snapshot(&self, req: Request<Streaming<v1::SnapshotChunk>>) -> Result<Response<v1::SnapshotAck>, Status> {
        let mut chunks = req.into_inner();
        let mut upload = None;
        let mut session = None;
        let mut complete = false;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            if session.is_none() {
                session = Some(self.session(&chunk.session_id)?);
            }
            if let (Some(h), Some(s)) = (chunk.header.clone(), session.as_ref()) {
                self.check_job_quota(s, &h).await?;
                let (store, offset) = (self.snapshots.clone(), chunk.offset);
                // Opening a resumed upload hashes its partial bytes again: off the runtime.
                upload = Some(tokio::task::spawn_blocking(move || store.begin(h, offset)).await.map_err(ServiceError::from)??);
            }
            let u = upload.as_mut().ok_or_else(|| ServiceError::InvalidArgument("the first chunk must carry the snapshot header".into()))?;
            u.write(chunk.offset, &chunk.data)?;
            if chunk.last {
                complete = true;
                break;
            }
        }
        let (Some(session), Some(upload)) = (session, upload) else {
            return Err(ServiceError::InvalidArgument("empty snapshot upload".into()).into());
        };
        if !complete {
            // The bytes so far stay: SnapshotStatus tells the agent where to resume.
            return Err(ServiceError::Unavailable("the snapshot upload ended before its last chunk; ask SnapshotStatus where to resume".into()).into());
        }
        let stored = tokio::task::spawn_blocking(move || upload.finish()).await.map_err(ServiceError::from)??;
        self.snapshots.remember_uploader(&stored.header.sha256, &session.uploader);
        let fresh = self.file_snapshot(&session, &stored.header, stored.stored_bytes).await?;
        Ok(Response::new(v1::SnapshotAck { snapshot_id: stored.header.sha256.clone(), deduplicated: !fresh || stored.deduplicated }))
    }
}

fn describe(exit_code: Option<i32>, signal: Option<i32>) -> String {
    match (signal, exit_code) {
        (Some(s), _) => format!("signal {s}"),
        (None, Some(c)) => format!("exit code {c}"),
        _ => "end unknown".into(),
    }
}

/// What a batch costs in memory once decoded: its line bytes and a fixed overhead per line.
fn batch_bytes(batch: &v1::LogBatch) -> u64 {
    batch.lines.iter().map(|l| l.raw.len() as u64 + l.file.len() as u64 + 96).sum()
}

/// Validates a batch, stores its clock samples and queues its lines for commit.
async fn submit_batch(
    sessions: &Mutex<HashMap<String, Session>>,
    store: &Arc<dyn coroner_store::Metastore>,
    batch: v1::LogBatch,
) -> Result<tokio::sync::oneshot::Receiver<crate::committer::Reply>, ServiceError> {
    let session = lookup(sessions, &batch.session_id)
        .ok_or_else(|| ServiceError::FailedPrecondition(format!("unknown session {:?}: open the session before shipping logs", batch.session_id)))?;
    session.fence.check(&session.job.id)?;
    let admit::Admitted { lines, notes } = admit::admit(batch.lines, session.rank, session.world_size, &session.host);
    if !notes.is_empty() {
        session.job.update(|p| notes.into_iter().for_each(|n| p.add_note(n)));
    }
    if !batch.clock.is_empty() {
        if let Some(rank) = session.rank {
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
            store.add_clock_samples(&session.job.id, &samples).await?;
            session.job.update(|p| p.add_clock_samples(samples));
        }
    }
    session.job.submit(lines, session.host.clone()).await
}

/// A note an agent sent, as the report shows it: which agent said it, capped in length (an
/// agent's text is untrusted).
fn agent_note(host: &str, rank: Option<u32>, note: &str) -> String {
    const MAX: usize = 1000;
    let who = match rank {
        Some(r) => format!("rank {r}'s agent on {host}"),
        None => format!("the agent on {host}"),
    };
    let mut note = note.trim().to_string();
    if note.len() > MAX {
        let cut = (0..=MAX).rev().find(|i| note.is_char_boundary(*i)).unwrap_or(0);
        note.truncate(cut);
        note.push_str("...");
    }
    format!("{who}: {note}")
}
