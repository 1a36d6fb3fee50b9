//! The Ingest service: sessions, clock exchanges, log batches (`ingest/ship_logs.rs`), process
//! ends and snapshots (`ingest/snapshot_upload.rs`). It reaches jobs through the registry
//! ([`Jobs`]) and each job's methods only.

use crate::error::ServiceError;
use crate::jobs::Jobs;
use crate::limits::{Limit, LimitsConfig};
use crate::metrics::Metrics;
use crate::snapshots::SnapshotStore;

mod admit;
mod budget;
mod prepaid;
mod session_limits;
mod sessions;
mod ship_logs;
mod snapshot_upload;
#[cfg(test)]
mod tests;
pub use budget::IngestBudget;
use coroner_model::{now_ns, JobId, ProcessEnd, Rank};
use coroner_proto::v1::{self, ingest_server::Ingest};
use coroner_store::SessionRecord;
pub use prepaid::Prepaid;
use sessions::{Session, Sessions};
use ship_logs::ShipStream;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

pub struct IngestService {
    jobs: Arc<Jobs>,
    snapshots: Arc<SnapshotStore>,
    metrics: Arc<Metrics>,
    budget: Arc<IngestBudget>,
    limits: Arc<LimitsConfig>,
    /// Every session this process opened (`ingest/sessions.rs`).
    sessions: Arc<Sessions>,
}

impl IngestService {
    pub fn new(jobs: Arc<Jobs>, snapshots: Arc<SnapshotStore>, metrics: Arc<Metrics>, budget: Arc<IngestBudget>, limits: Arc<LimitsConfig>) -> Self {
        let sessions = Arc::new(Sessions::new(metrics.clone()));
        IngestService { jobs, snapshots, metrics, budget, limits, sessions }
    }

    fn session(&self, id: &str) -> Result<Session, ServiceError> {
        self.sessions.get(id).ok_or_else(|| ServiceError::FailedPrecondition(format!("unknown session {id:?} (the server restarted?); open a new session")))
    }

    /// The job an OpenSession names, once its rank, world size and strings pass the checks.
    fn check_opening(&self, r: &v1::OpenSessionRequest) -> Result<JobId, ServiceError> {
        let job_id = JobId::parse(&r.job_id).map_err(|e| ServiceError::InvalidArgument(format!("job id: {e}")))?;
        if let (Some(rank), Some(world)) = (r.rank, r.world_size) {
            if rank >= world {
                return Err(ServiceError::InvalidArgument(format!("rank {rank} is beyond the world size {world}")));
            }
        }
        let max = coroner_model::MAX_WORLD_SIZE;
        let absurd = match (r.world_size, r.rank) {
            (Some(w), _) if w > max => Some(format!("world size {w}")),
            (_, Some(rank)) if rank >= max => Some(format!("rank {rank}")),
            _ => None,
        };
        if let Some(what) = absurd {
            return Err(ServiceError::InvalidArgument(format!("{what} is beyond the largest world this server takes ({max} ranks)")));
        }
        if let Some(why) = session_limits::check_opening(r, self.limits.max_string_bytes) {
            Limit::StringLength.count(&self.metrics);
            return Err(ServiceError::InvalidArgument(format!("OpenSession: {why}")));
        }
        Ok(job_id)
    }

    /// Files what an opening session says about its job: the world size believed, its rank's
    /// host, the node's rank base and the agent's notes.
    async fn take_opening(&self, job: &crate::job::Job, r: &v1::OpenSessionRequest, lane: u32, now: i64) -> Result<(), ServiceError> {
        // A world size is believed in proportion to the agents seen (`limits.rs`).
        let world = r.world_size.map(|w| self.jobs.believed_world_size(w, job.speakers()));
        if world != r.world_size {
            Limit::WorldSize.count(&self.metrics);
        }
        if world.is_some() {
            self.jobs.touch(job.id(), world, now).await?;
        }
        job.update(|p| {
            if let Some(w) = world {
                p.set_world_size(w);
            }
            if let Some(rank) = r.rank {
                p.set_host(Rank(rank), &r.host);
            }
            if let Some(base) = r.node_rank_base {
                p.set_node_rank_base(lane, base);
            }
            for note in &r.notes {
                p.add_note(agent_note(&r.host, r.rank, note));
            }
        });
        Ok(())
    }
}

fn session_record(r: &v1::OpenSessionRequest, session_id: &str, job_id: &JobId, now: i64) -> SessionRecord {
    SessionRecord {
        session_id: session_id.to_string(),
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
        attempt: r.attempt.unwrap_or(0),
    }
}

type AckStream = Pin<Box<dyn Stream<Item = Result<v1::BatchAck, Status>> + Send>>;

#[tonic::async_trait]
impl Ingest for IngestService {
    async fn open_session(&self, req: Request<v1::OpenSessionRequest>) -> Result<Response<v1::OpenSessionResponse>, Status> {
        let r = req.into_inner();
        let job_id = self.check_opening(&r)?;
        let now = now_ns();
        let job = self.jobs.heard_from(&job_id, None, now).await?;
        let fence = self.jobs.fence(&job_id).ok_or_else(|| ServiceError::Unavailable(format!("job {job_id} was closed here; retry")))?;
        let session_id = uuid::Uuid::new_v4().to_string();
        // Which lane of sequence numbers this session numbers in (`job/claims.rs`).
        let granted = job.claim(&crate::job::Opening {
            session_id: &session_id,
            rank: r.rank,
            instance: &r.agent_instance,
            host: &r.host,
            pid: r.pid,
            launcher: &r.launcher,
            lanes: r.seq_lanes,
            offset: r.seq_offset,
        });
        let mut record = session_record(&r, &session_id, &job_id, now);
        record.attempt = job.attempt_of_opening(r.rank.map(Rank), record.attempt, granted.restarted, now);
        self.jobs.open_session(record).await?;
        self.take_opening(&job, &r, granted.lane, now).await?;
        let uploader = if r.agent_instance.is_empty() { String::new() } else { format!("{}/{}", r.host, r.agent_instance) };
        let session = Session { job, fence, rank: r.rank.map(Rank), uploader, host: r.host, world_size: r.world_size };
        self.sessions.insert(session_id.clone(), session);
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
        let stream = ShipStream {
            sessions: self.sessions.clone(),
            jobs: self.jobs.clone(),
            metrics: self.metrics.clone(),
            idle: self.limits.ingest_idle_timeout,
            prepay,
            world_size_slack: self.limits.world_size_slack,
        };
        Ok(Response::new(Box::pin(stream.start(req.into_inner()))))
    }

    async fn report_exit(&self, req: Request<v1::ProcessExit>) -> Result<Response<v1::ExitAck>, Status> {
        let r = req.into_inner();
        let session = self.session(&r.session_id)?;
        // An agent's count is a claim: it saturates the counter, never wraps it.
        let _ = self.metrics.dropped_lines_reported.fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_add(r.dropped_lines)));
        if r.rank.is_none() || r.rank.map(Rank) == session.rank {
            session.job.end_claim(&r.session_id);
            // Its process ended: the session is forgotten once no log stream uses it.
            self.sessions.ended(&r.session_id);
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
        // Stored before the evidence hears of it, so a job opened again reads it back.
        self.jobs.record_end(session.job.id(), &end).await?;
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
            if session.world_size.is_some_and(|w| p.ranks_ended() >= w as usize) {
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
