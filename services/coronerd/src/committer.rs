//! A job's committer: the only writer of its index, in two stages so that indexing one group of
//! batches overlaps feeding the previous group to the analysis.
//!
//! - **Index stage:** takes every queued request (group commit across agents, up to
//!   [`MAX_GROUP_LINES`]), drops lines already held (dedup by rank, stream and sequence number,
//!   each lane of numbers on its own: `job/claims.rs`),
//!   adds the rest to the index straight from the received lines (no copies before tantivy's
//!   own) and commits.
//! - **Publish stage:** pushes the committed lines into the job's pipeline, bumps the evidence
//!   version, and only then acknowledges. So an acknowledged line is durable *and* in the
//!   evidence of every report computed after the acknowledgement (readers never see a report
//!   older than what was acknowledged to them).
//!
//! Requests are answered in the order they were queued; an empty request is a barrier (its
//! answer means every request queued before it is answered).

use crate::error::ServiceError;
use crate::job::claims::{lane_of, StreamLane};
use crate::job::Job;
use crate::metrics::Metrics;
use crate::writers::Writers;
use coroner_index::LineRef;
use coroner_model::LogLine;
use coroner_store::Metastore;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// Requests waiting for the committer; senders wait when it is full. Memory is bounded by the
/// ingest budget (`ingest/budget.rs`), not by this count, which must hold every batch that arrives
/// during one commit: at 256, each commit took at most 256 batches, and 256 agents sending a
/// small batch every 100 ms waited ~2 s for acks (`coroner-bench load --agents 256 --rate 50`:
/// ack p50 1.9 s at 256, 258 ms at 4096).
pub const COMMIT_QUEUE: usize = 4096;
/// The most lines one index commit takes: about 10-20 MB of lines; fewer, larger commits make
/// fewer segments to merge, more would hold acknowledgements back longer.
const MAX_GROUP_LINES: usize = 128 * 1024;
/// Committed groups waiting for the publish stage.
const PUBLISH_QUEUE: usize = 2;

pub type Reply = Result<u32, ServiceError>;

/// Lines to commit, and where to say when they are durable (with how many were duplicates).
pub struct CommitRequest {
    pub lines: Vec<LogLine>,
    pub host: String,
    pub done: oneshot::Sender<Reply>,
}

/// One index commit's worth of requests, on its way to the publish stage.
struct Group {
    /// Per request: the fresh lines, in order.
    fresh: Vec<Vec<LogLine>>,
    replies: Vec<(oneshot::Sender<Reply>, u32)>,
    outcome: Result<(), String>,
}

/// Starts both stages for `job`.
pub fn start(job: &Arc<Job>, rx: mpsc::Receiver<CommitRequest>, store: Arc<dyn Metastore>, metrics: Arc<Metrics>, writers: Arc<Writers>) {
    let (tx, publish_rx) = mpsc::channel(PUBLISH_QUEUE);
    tokio::spawn(index_stage(job.clone(), rx, tx, metrics.clone(), writers));
    tokio::spawn(publish_stage(job.clone(), publish_rx, store, metrics));
}

async fn index_stage(job: Arc<Job>, mut rx: mpsc::Receiver<CommitRequest>, tx: mpsc::Sender<Group>, metrics: Arc<Metrics>, writers: Arc<Writers>) {
    while let Some(first) = rx.recv().await {
        let mut lines = first.lines.len();
        let mut requests = vec![first];
        while lines < MAX_GROUP_LINES {
            match rx.try_recv() {
                Ok(r) => {
                    lines += r.lines.len();
                    requests.push(r);
                }
                Err(_) => break,
            }
        }
        let started = Instant::now();
        let (job2, writers) = (job.clone(), writers.clone());
        let group = tokio::task::spawn_blocking(move || commit_group(&job2, requests, &writers)).await;
        let group = match group {
            Ok(g) => g,
            Err(e) => {
                // The requests went down with the task; their senders see a dropped reply.
                tracing::error!(job = %job.id, error = %e, "the index commit panicked");
                continue;
            }
        };
        if group.outcome.is_ok() {
            metrics.commits.fetch_add(1, Ordering::Relaxed);
            metrics.commit_latency.observe(started.elapsed());
        }
        if tx.send(group).await.is_err() {
            return;
        }
    }
}

/// Dedups, indexes and commits one group (blocking: runs on a blocking thread).
fn commit_group(job: &Job, requests: Vec<CommitRequest>, writers: &Writers) -> Group {
    let mut fresh = Vec::with_capacity(requests.len());
    let mut replies = Vec::with_capacity(requests.len());
    let mut hosts = Vec::with_capacity(requests.len());
    // What this group advances, over the committed positions (applied only once it is durable).
    let mut next: HashMap<StreamLane, u64> = HashMap::new();
    {
        let held = job.positions.lock().unwrap_or_else(|p| p.into_inner());
        for r in requests {
            let mut lines = r.lines;
            let before = lines.len();
            // A batch's lines mostly share one stream: look the position up when the key changes.
            let mut current: Option<(StreamLane, u64)> = None;
            lines.retain(|l| {
                // Each lane of a stream is deduplicated on its own (`job/claims.rs`).
                let key = (l.rank.map(|r| r.0), l.stream, lane_of(l.seq));
                let expected = match &mut current {
                    Some((k, e)) if *k == key => e,
                    _ => {
                        if let Some((k, e)) = current.take() {
                            next.insert(k, e);
                        }
                        let e = next.get(&key).or_else(|| held.get(&key)).copied().unwrap_or(0);
                        &mut current.insert((key, e)).1
                    }
                };
                if l.seq < *expected {
                    false
                } else {
                    // Admission leaves out u64::MAX (`ingest/admit.rs`); never wrap regardless.
                    *expected = l.seq.saturating_add(1);
                    true
                }
            });
            if let Some((k, e)) = current {
                next.insert(k, e);
            }
            replies.push((r.done, (before - lines.len()) as u32));
            fresh.push(lines);
            hosts.push(r.host);
        }
    }
    let outcome = if fresh.iter().all(Vec::is_empty) {
        Ok(())
    } else {
        // This job writes now: past --max-open-jobs writers, the least recently used one closes.
        writers.used(&job.id, &job.index);
        let docs = fresh.iter().zip(&hosts).flat_map(|(lines, host)| lines.iter().map(move |l| doc(l, host)));
        job.index.add_refs(docs).and_then(|()| job.index.commit()).map_err(|e| e.to_string())
    };
    if outcome.is_ok() {
        let mut held = job.positions.lock().unwrap_or_else(|p| p.into_inner());
        for (key, n) in next {
            let e = held.entry(key).or_insert(0);
            *e = (*e).max(n);
        }
    }
    Group { fresh, replies, outcome }
}

async fn publish_stage(job: Arc<Job>, mut rx: mpsc::Receiver<Group>, store: Arc<dyn Metastore>, metrics: Arc<Metrics>) {
    while let Some(first) = rx.recv().await {
        let mut groups = vec![first];
        while let Ok(g) = rx.try_recv() {
            groups.push(g);
        }
        let committed: Vec<Vec<LogLine>> = groups.iter_mut().filter(|g| g.outcome.is_ok()).flat_map(|g| std::mem::take(&mut g.fresh)).collect();
        let n: u64 = committed.iter().map(|l| l.len() as u64).sum();
        if n > 0 {
            let bytes: u64 = committed.iter().flatten().map(|l| l.bytes.len() as u64).sum();
            let (pipeline, version) = (job.pipeline.clone(), job.version.clone());
            // Parsing is CPU work: off the runtime. The version is bumped under the same lock.
            let pushed = tokio::task::spawn_blocking(move || {
                let mut p = pipeline.lock().unwrap_or_else(|e| e.into_inner());
                for line in committed.into_iter().flatten() {
                    p.push_line(line);
                }
                version.fetch_add(1, Ordering::SeqCst);
            })
            .await;
            if let Err(e) = pushed {
                tracing::error!(job = %job.id, error = %e, "feeding committed lines to the analysis panicked");
            }
            metrics.lines_ingested.fetch_add(n, Ordering::Relaxed);
            metrics.bytes_ingested.fetch_add(bytes, Ordering::Relaxed);
            if let Err(e) = store.add_lines_count(&job.id, n).await {
                tracing::warn!(job = %job.id, error = %e, "could not update the line count");
            }
            job.dirty.notify_one();
        }
        for g in groups {
            let ok = g.outcome.is_ok();
            if ok {
                metrics.batches.fetch_add(g.replies.len() as u64, Ordering::Relaxed);
            }
            for (done, dups) in g.replies {
                let reply = match &g.outcome {
                    Ok(()) => {
                        metrics.duplicate_lines.fetch_add(u64::from(dups), Ordering::Relaxed);
                        Ok(dups)
                    }
                    Err(e) => Err(ServiceError::Unavailable(format!("commit failed: {e}; retry"))),
                };
                let _ = done.send(reply);
            }
        }
    }
}

fn doc<'a>(l: &'a LogLine, host: &'a str) -> LineRef<'a> {
    LineRef {
        rank: l.rank.map(|r| r.0),
        stream: l.stream,
        seq: l.seq,
        capture_ns: l.capture_ns,
        host,
        severity: coroner_parse::severity(&l.bytes).as_str(),
        bytes: &l.bytes,
    }
}
