//! A job's committer: the only writer of its index, in two stages so that indexing one group of
//! batches overlaps feeding the previous group to the analysis.
//!
//! - **Index stage:** takes every queued request (group commit across agents, up to
//!   [`MAX_GROUP_LINES`]), drops lines already held (dedup by rank, stream and sequence number,
//!   each lane of numbers on its own: `positions.rs`),
//!   adds the rest to the index straight from the received lines (no copies before tantivy's
//!   own) and commits.
//! - **Publish stage:** hands the committed lines to the live tail (`tail.rs`: a copy only while
//!   someone watches, never waiting), pushes them into the job's evidence (`state.rs`, which
//!   bumps its version), and only then acknowledges. So an acknowledged line is durable *and* in the
//!   evidence of every report computed after the acknowledgement (readers never see a report
//!   older than what was acknowledged to them).
//!
//! After commits, the index's size on disk is measured and recorded for retention by size
//! (`index_size.rs`: once per second at most, and always after the last commit).
//!
//! Requests are answered in the order they were queued; an empty request is a barrier (its
//! answer means every request queued before it is answered). Both stages end when the job's
//! handle, the only sender, is dropped.

use super::index_size::IndexSize;
use super::positions::{self, Advance, Committed};
use super::state::Evidence;
use super::tail::Tail;
use crate::error::ServiceError;
use crate::metrics::Metrics;
use crate::writers::Writers;
use coroner_index::{JobIndex, LineRef};
use coroner_model::{JobId, LogLine};
use coroner_store::Metastore;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// Requests waiting for the committer; senders wait when it is full. Memory is bounded by the
/// ingest budget (`grpc/ingest/budget.rs`), not by this count, which must hold every batch that
/// arrives during one commit, or commits are capped by it: at 256, each commit took at most 256
/// batches, and 256 agents sending a small batch every 100 ms waited ~2 s for acks
/// (`coroner-bench load --agents 256 --rate 50`: ack p50 1.9 s at 256, 258 ms at 4096); at 4096,
/// 16,384 ranks printing a line each second in lockstep needed four serial commits a second,
/// more than two cores could make (`--agents 16384 --profile steady`: ack p99 5.3 s). The
/// channel allocates its slots as they fill.
pub const COMMIT_QUEUE: usize = 64 * 1024;
/// The most lines one index commit takes: about 10-20 MB of lines; fewer, larger commits make
/// fewer segments to merge, more would hold acknowledgements back longer.
const MAX_GROUP_LINES: usize = 128 * 1024;
/// Committed groups waiting for the publish stage.
const PUBLISH_QUEUE: usize = 2;

/// A batch's answer: how many of its lines were duplicates.
pub type Reply = Result<u32, ServiceError>;

/// Lines to commit, and where to say when they are durable (with how many were duplicates).
pub struct CommitRequest {
    pub lines: Vec<LogLine>,
    pub host: String,
    pub done: oneshot::Sender<Reply>,
}

/// What the committer writes: the job's index, positions and evidence, and the shared services.
pub struct Committer {
    pub id: JobId,
    pub index: Arc<JobIndex>,
    pub positions: Arc<Committed>,
    pub evidence: Arc<Evidence>,
    pub store: Arc<dyn Metastore>,
    pub metrics: Arc<Metrics>,
    pub writers: Arc<Writers>,
    /// The live tail: committed lines for the web page's watchers (`tail.rs`), never waited on.
    pub tail: Arc<Tail>,
}

/// One index commit's worth of requests, on its way to the publish stage.
struct Group {
    /// Per request: the fresh lines, in order.
    fresh: Vec<Vec<LogLine>>,
    /// Per request: the host its agent runs on.
    hosts: Vec<String>,
    replies: Vec<(oneshot::Sender<Reply>, u32)>,
    outcome: Result<(), String>,
}

impl Committer {
    /// Starts both stages; they run until `rx` closes.
    pub fn start(self, rx: mpsc::Receiver<CommitRequest>) {
        let this = Arc::new(self);
        let (tx, publish_rx) = mpsc::channel(PUBLISH_QUEUE);
        tokio::spawn(this.clone().index_stage(rx, tx));
        tokio::spawn(this.publish_stage(publish_rx));
    }

    async fn index_stage(self: Arc<Self>, mut rx: mpsc::Receiver<CommitRequest>, tx: mpsc::Sender<Group>) {
        let mut size = IndexSize::default();
        loop {
            let next = match size.due() {
                None => rx.recv().await,
                Some(at) => tokio::select! {
                    r = rx.recv() => r,
                    _ = tokio::time::sleep_until(at) => {
                        size.measure(&self.id, &self.index, &self.store).await;
                        continue;
                    }
                },
            };
            let Some(first) = next else { break };
            let requests = take_group(first, &mut rx);
            let started = Instant::now();
            let this = self.clone();
            let group = match tokio::task::spawn_blocking(move || this.commit_group(requests)).await {
                Ok(g) => g,
                Err(e) => {
                    // The requests went down with the task; their senders see a dropped reply.
                    tracing::error!(job = %self.id, error = %e, "the index commit panicked");
                    continue;
                }
            };
            if group.outcome.is_ok() {
                self.metrics.commits.fetch_add(1, Ordering::Relaxed);
                self.metrics.commit_latency.observe(started.elapsed());
                size.committed();
            }
            if tx.send(group).await.is_err() {
                return;
            }
        }
        if size.due().is_some() {
            size.measure(&self.id, &self.index, &self.store).await;
        }
    }

    /// Dedups, indexes and commits one group (blocking: runs on a blocking thread).
    fn commit_group(&self, requests: Vec<CommitRequest>) -> Group {
        let mut fresh = Vec::with_capacity(requests.len());
        let mut replies = Vec::with_capacity(requests.len());
        let mut hosts = Vec::with_capacity(requests.len());
        // What this group advances, over the committed positions (applied only once it is durable).
        let mut next = Advance::new();
        self.positions.with(|held| {
            for r in requests {
                let mut lines = r.lines;
                let dropped = positions::keep_fresh(&mut lines, held, &mut next);
                replies.push((r.done, dropped as u32));
                fresh.push(lines);
                hosts.push(r.host);
            }
        });
        let outcome = if fresh.iter().all(Vec::is_empty) {
            Ok(())
        } else {
            // This job writes now: past --max-open-jobs writers, the least recently used one closes.
            self.writers.used(&self.id, &self.index);
            let docs = fresh.iter().zip(&hosts).flat_map(|(lines, host)| lines.iter().map(move |l| doc(l, host)));
            self.index.add_refs(docs).and_then(|()| self.index.commit()).map_err(|e| e.to_string())
        };
        if outcome.is_ok() {
            self.positions.advance(next);
        }
        Group { fresh, hosts, replies, outcome }
    }

    async fn publish_stage(self: Arc<Self>, mut rx: mpsc::Receiver<Group>) {
        while let Some(first) = rx.recv().await {
            let mut groups = vec![first];
            while let Ok(g) = rx.try_recv() {
                groups.push(g);
            }
            let durable = groups.iter().filter(|g| g.outcome.is_ok());
            self.tail.record(durable.flat_map(|g| g.fresh.iter().zip(&g.hosts).flat_map(|(lines, host)| lines.iter().map(move |l| (l, host.as_str())))));
            let committed: Vec<(Vec<LogLine>, String)> = groups
                .iter_mut()
                .filter(|g| g.outcome.is_ok())
                .flat_map(|g| std::mem::take(&mut g.fresh).into_iter().zip(std::mem::take(&mut g.hosts)))
                .collect();
            self.publish(committed).await;
            for g in groups {
                self.answer(g);
            }
        }
    }

    /// Feeds committed lines, each request's with the host its agent runs on, to the evidence
    /// and counts them.
    async fn publish(&self, committed: Vec<(Vec<LogLine>, String)>) {
        let n: u64 = committed.iter().map(|(l, _)| l.len() as u64).sum();
        if n == 0 {
            return;
        }
        let bytes: u64 = committed.iter().flat_map(|(l, _)| l).map(|l| l.bytes.len() as u64).sum();
        let evidence = self.evidence.clone();
        // Parsing is CPU work: off the runtime.
        let pushed = tokio::task::spawn_blocking(move || {
            evidence.change_routine(|p| {
                let mut news = false;
                for (lines, host) in committed {
                    for line in lines {
                        news |= p.push_line_from(line, &host);
                    }
                }
                news
            });
        })
        .await;
        if let Err(e) = pushed {
            tracing::error!(job = %self.id, error = %e, "feeding committed lines to the analysis panicked");
        }
        self.metrics.lines_ingested.fetch_add(n, Ordering::Relaxed);
        self.metrics.bytes_ingested.fetch_add(bytes, Ordering::Relaxed);
        if let Err(e) = self.store.add_lines_count(&self.id, n).await {
            tracing::warn!(job = %self.id, error = %e, "could not update the line count");
        }
    }

    /// Answers a group's requests, in order.
    fn answer(&self, g: Group) {
        if g.outcome.is_ok() {
            self.metrics.batches.fetch_add(g.replies.len() as u64, Ordering::Relaxed);
        }
        for (done, dups) in g.replies {
            let reply = match &g.outcome {
                Ok(()) => {
                    self.metrics.duplicate_lines.fetch_add(u64::from(dups), Ordering::Relaxed);
                    Ok(dups)
                }
                Err(e) => Err(ServiceError::Unavailable(format!("commit failed: {e}; retry"))),
            };
            let _ = done.send(reply);
        }
    }
}

/// `first` and every request queued behind it, up to [`MAX_GROUP_LINES`] lines (group commit).
fn take_group(first: CommitRequest, rx: &mut mpsc::Receiver<CommitRequest>) -> Vec<CommitRequest> {
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
    requests
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
