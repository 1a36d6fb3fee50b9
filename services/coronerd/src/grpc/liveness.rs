//! The `coroner.v1.Liveness` service: takes agents' heartbeats (CPU time, I/O, GPU utilisation)
//! into their job's live monitor and, once per suspicion, asks the suspected rank's agent for a
//! stack dump. The suspicion itself is the job's live ticker's (`job/live_ticker.rs`).

use crate::jobs::Jobs;
use crate::views::job_id;
use coroner_model::{JobId, Rank};
use coroner_proto::v1::{self, liveness_server::Liveness};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tonic::{Request, Response, Status};

pub struct LivenessService {
    jobs: Arc<Jobs>,
    /// (job, rank, raised_at) whose agent was already asked for a stack dump.
    asked: Mutex<HashSet<(JobId, Rank, String)>>,
}

impl LivenessService {
    pub fn new(jobs: Arc<Jobs>) -> Self {
        LivenessService { jobs, asked: Mutex::new(HashSet::new()) }
    }

    /// Whether this suspicion's stack dump is still to be asked for (once per suspicion).
    fn first_ask(&self, job: JobId, rank: Rank, raised_at: String) -> bool {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).insert((job, rank, raised_at))
    }
}

#[tonic::async_trait]
impl Liveness for LivenessService {
    async fn heartbeat(&self, req: Request<v1::HeartbeatRequest>) -> Result<Response<v1::HeartbeatResponse>, Status> {
        let r = req.into_inner();
        let id = job_id(&r.job_id)?;
        let job = self.jobs.get(&id, false).await?;
        let rank = Rank(r.rank);
        let beat = crate::job::Liveness { rank, at_ns: r.at_ns, cpu_ns: r.cpu_ns, io_bytes: r.io_bytes, gpu_util_pct: r.gpu_util_pct };
        let suspected = job.heartbeat(beat).await?;
        let dump_stack = suspected.is_some_and(|raised_at| self.first_ask(id, rank, raised_at));
        if dump_stack {
            tracing::info!(job = %job.id(), rank = %rank, "asking the suspected rank's agent for a stack dump");
        }
        Ok(Response::new(v1::HeartbeatResponse { dump_stack }))
    }
}
