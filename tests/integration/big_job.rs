//! A large job built through the server's own ingest in bulk: `world` ranks, 8 a host, a session
//! each over one gRPC channel (`ship`), a few lines each. One rank runs out of CUDA memory first
//! (a traceback on stderr); every other rank's NCCL watchdog times out on the collective it waited
//! in, ten minutes later. `coroner import` opens one session per rank in turn (~0.3 s a rank in a
//! debug build); here every agent opens its session first, as at a job's start, then all ship at
//! once, and the server's arrivals and group commit take them in bulk (4,096 ranks: ~11 s in a
//! debug build on a loaded 2-core machine).
//!
//! Opening the sessions first matters: an `OpenSession` answers the positions the job holds
//! (`resume_from`, every rank's streams), so agents opening one by one while the others already
//! shipped cost the server time growing with the square of the ranks (~60 s for 4,096).

use crate::served::runtime;
use coroner_proto::v1::{self, ingest_client::IngestClient};
use std::sync::Arc;
use tokio::sync::Semaphore;
use tonic::transport::Channel;

/// Ranks a host.
pub const RANKS_PER_HOST: u32 = 8;

const T0: u64 = 1_796_000_000_000_000_000;
const SECOND: u64 = 1_000_000_000;

/// The rank that fails first in a job of `world` ranks.
pub fn culprit(world: u32) -> u32 {
    world / 3
}

/// The host `rank` runs on.
pub fn host_of(rank: u32) -> String {
    format!("node-{:04}", rank / RANKS_PER_HOST)
}

/// One rank's lines: (nanoseconds after T0, stream, line).
fn rank_lines(rank: u32, world: u32) -> Vec<(u64, &'static str, String)> {
    // Each rank's clock a few microseconds off its neighbours', as on a real cluster.
    let skew = u64::from(rank % 97) * 3_000;
    let mut lines: Vec<(u64, &'static str, String)> =
        (0..4u64).map(|step| (step * SECOND + skew, "stdout", format!("[rank{rank}] step {step} loss {:.4} lr 3.0e-4", 2.5 - step as f64 * 0.1))).collect();
    if rank == culprit(world) {
        let gpu = rank % RANKS_PER_HOST;
        for (i, l) in [
            format!("[rank{rank}]: Traceback (most recent call last):"),
            format!("[rank{rank}]:   File \"/workspace/train.py\", line 212, in <module>"),
            format!("[rank{rank}]:     loss = model(batch).loss"),
            format!("[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {gpu} has a total capacity of 79.15 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use."),
        ]
        .into_iter()
        .enumerate()
        {
            lines.push((4 * SECOND + skew + i as u64 * 1_000, "stderr", l));
        }
    } else {
        // The watchdog of every other rank fires ten minutes into the collective it waits in.
        let ran = 600_000 + u64::from(rank % 50);
        lines.push((
            4 * SECOND + 600 * SECOND + skew + u64::from(rank) * 10_000,
            "stderr",
            format!("[rank{rank}]:[E1130 01:03:24.000000000 ProcessGroupNCCL.cpp:689] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=1153, NumelOut=1153, Timeout(ms)=600000) ran for {ran} milliseconds before timing out."),
        ));
    }
    lines
}

/// Ships the job of `world` ranks as its agents would, a session per rank over one gRPC channel,
/// `CONCURRENT` calls at a time: every agent opens its session at the job's start (so the server's
/// arrivals take them in groups), then each ships its lines in one `ShipLogs` batch and waits for
/// the ack (so the group commit takes many agents' batches at once).
pub fn ship(grpc_url: &str, job: &str, world: u32) {
    runtime().block_on(async {
        let channel = Channel::from_shared(grpc_url.to_string()).expect("a gRPC URL").connect().await.expect("connect to coronerd's gRPC port");
        let sessions = each_rank(world, |rank| open(IngestClient::new(channel.clone()), job.to_string(), rank, world)).await;
        each_rank(world, |rank| ship_lines(IngestClient::new(channel.clone()), sessions[rank as usize].clone(), rank, world)).await;
    });
}

/// Calls in flight at once (HTTP/2 streams on the channel).
const CONCURRENT: usize = 128;

/// `call(rank)` for every rank, `CONCURRENT` at a time; their answers in rank order.
async fn each_rank<T: Send + 'static, F: std::future::Future<Output = T> + Send + 'static>(world: u32, call: impl Fn(u32) -> F) -> Vec<T> {
    let slots = Arc::new(Semaphore::new(CONCURRENT));
    let tasks: Vec<_> = (0..world)
        .map(|rank| {
            let slots = slots.clone();
            let call = call(rank);
            tokio::spawn(async move {
                let _slot = slots.acquire_owned().await.expect("slots");
                call.await
            })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("an agent's task"));
    }
    out
}

async fn open(mut client: IngestClient<Channel>, job: String, rank: u32, world: u32) -> String {
    let open = client
        .open_session(v1::OpenSessionRequest {
            job_id: job,
            rank: Some(rank),
            local_rank: Some(rank % RANKS_PER_HOST),
            world_size: Some(world),
            host: host_of(rank),
            launcher: "none".into(),
            agent_instance: format!("big-job-{rank}"),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("OpenSession for rank {rank}: {e}"))
        .into_inner();
    open.session_id
}

async fn ship_lines(mut client: IngestClient<Channel>, session_id: String, rank: u32, world: u32) {
    let mut seqs = [0u64; 3];
    let lines = rank_lines(rank, world)
        .into_iter()
        .map(|(at, stream, line)| {
            let stream = if stream == "stderr" { v1::StreamKind::Stderr } else { v1::StreamKind::Stdout } as i32;
            let seq = &mut seqs[stream as usize];
            *seq += 1;
            v1::LogLine { seq: *seq - 1, capture_ns: (T0 + at) as i64, stream, raw: line.into_bytes(), ..Default::default() }
        })
        .collect();
    let batch = v1::LogBatch { session_id, batch_id: 1, lines, ..Default::default() };
    let mut acks = client.ship_logs(tokio_stream::iter([batch])).await.unwrap_or_else(|e| panic!("ShipLogs for rank {rank}: {e}")).into_inner();
    let ack = acks.message().await.unwrap_or_else(|e| panic!("the ack for rank {rank}: {e}"));
    assert_eq!(ack.map(|a| a.batch_id), Some(1), "rank {rank}'s batch acknowledged");
}
