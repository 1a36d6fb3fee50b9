//! A simulated agent: the real agent's delivery protocol without a training process behind it.
//!
//! It opens a session, ships numbered lines over `ShipLogs` with a window of unacknowledged
//! batches, and forgets lines only when they are acknowledged: its "spool" is the range
//! `[acked, generated)`. On any error (the server killed, the network cut) it reconnects with
//! backoff, opens a new session, skips what the server says it already holds (`resume_from`)
//! and resends the rest. The connection is the product's own client endpoint (HTTP/2 keepalive,
//! timeouts), so a silent network is noticed the way a real agent notices it.
//!
//! Every agent is its own HTTP/2 connection, as real agents are; they are cheap tokio tasks on
//! one runtime. The first session waits, its log stream open, until every agent is connected
//! ([`Start`]): the run's output then starts at one instant, and the server's memory with every
//! stream open and idle is measured meanwhile.

use super::profile::Profile;
use super::progress::Progress;
use anyhow::{anyhow, bail, Context, Result};
use coroner_model::now_ns;
use coroner_proto::v1;
use coroner_proto::v1::ingest_client::IngestClient;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Unacknowledged batches in flight on one stream (the real agent keeps up to 32).
const WINDOW: usize = 16;
/// How long an RPC other than the log stream may take before the agent gives up on it.
const RPC_LIMIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Plan {
    pub job: String,
    pub rank: u32,
    pub world: u32,
    pub lines: u64,
    /// Lines per second this agent's process prints; 0: all lines are waiting at the start.
    pub rate: f64,
    pub batch_lines: usize,
    pub profile: Profile,
    /// Where it connects: the server, or a partition in front of it.
    pub url: String,
    pub start: Start,
    /// Where this agent reports its acknowledged batches' last lines for the freshness check
    /// (a sample of the agents).
    pub fresh: Option<mpsc::Sender<Acked>>,
}

/// The starting gate every agent passes once: count yourself ready, then wait for the instant
/// the output starts.
#[derive(Debug, Clone)]
pub struct Start {
    pub ready: Arc<AtomicU64>,
    pub go: watch::Receiver<Option<Instant>>,
}

/// A line whose batch was just acknowledged: when, and which.
#[derive(Debug, Clone, Copy)]
pub struct Acked {
    pub rank: u32,
    pub seq: u64,
    pub at: Instant,
}

/// What one agent saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Line transmissions, resends included.
    pub transmitted: u64,
    /// Transmissions of lines sent before (after a reconnect).
    pub resent: u64,
    /// Lines the server said it already held on a new session (acknowledgements lost in a crash).
    pub skipped_on_resume: u64,
    pub acked: u64,
    /// Lines the server's acknowledgements counted as duplicates.
    pub server_duplicates: u64,
    pub sessions: u32,
    /// Acknowledgement latencies of batches, µs from sending to the ack.
    pub latencies_us: Vec<u32>,
    pub last_error: Option<String>,
    /// Whether `ReportExit` was answered after the last line.
    pub exit_reported: bool,
    pub first_send: Option<Instant>,
    pub last_ack: Option<Instant>,
    /// When this agent's process started printing (the common start, once it passed the gate).
    pub go: Option<Instant>,
}

/// Runs `plan` until every line is acknowledged (or `give_up` passes).
pub async fn run(plan: Plan, progress: Arc<Progress>, give_up: Instant) -> Tally {
    let mut t = Tally::default();
    let mut acked = 0u64;
    let mut highest_sent = 0u64;
    let mut backoff = Duration::from_millis(100);
    // Like the real agent, the exit is reported again after a reconnect until it is answered.
    while acked < plan.lines || !t.exit_reported {
        if Instant::now() > give_up {
            t.last_error = Some(format!(
                "gave up with {acked} of {} lines acknowledged (exit reported: {}): {}",
                plan.lines,
                t.exit_reported,
                t.last_error.take().unwrap_or_default()
            ));
            break;
        }
        let progress_before = acked;
        match session(&plan, &mut t, &mut acked, &mut highest_sent, &progress).await {
            Ok(()) => {}
            Err(e) => {
                let error = format!("{e:#}");
                progress.failed(&error);
                t.last_error = Some(error);
                if acked > progress_before {
                    backoff = Duration::from_millis(100);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
    t.acked = acked;
    t
}

async fn client(url: &str) -> Result<IngestClient<coroner_proto::auth::Channel>> {
    // The bench's own coronerd runs without tokens or TLS.
    let auth = coroner_proto::auth::ClientAuth::default();
    let endpoint = auth.endpoint(url).map_err(|e| anyhow!(e))?;
    let channel = tokio::time::timeout(RPC_LIMIT, endpoint.connect()).await.context("connect: timed out")?.context("connect")?;
    Ok(IngestClient::new(auth.channel(channel)).max_decoding_message_size(64 << 20))
}

/// One session: connect, resume, ship until done or an error.
async fn session(plan: &Plan, t: &mut Tally, acked: &mut u64, highest_sent: &mut u64, progress: &Progress) -> Result<()> {
    let mut c = client(&plan.url).await?;
    progress.connects.fetch_add(1, Relaxed);
    let open = tokio::time::timeout(
        RPC_LIMIT,
        c.open_session(v1::OpenSessionRequest {
            job_id: plan.job.clone(),
            rank: Some(plan.rank),
            world_size: Some(plan.world),
            host: super::lines::host(plan.rank),
            pid: 10_000 + plan.rank,
            launcher: "none".into(),
            agent_instance: format!("load-{}", plan.rank),
            ..Default::default()
        }),
    )
    .await
    .context("open a session: timed out")?
    .context("open a session")?
    .into_inner();
    t.sessions += 1;
    progress.sessions.fetch_add(1, Relaxed);
    // What the server already holds was committed even if its acknowledgement was lost.
    let resume = open.resume_from.get(&format!("{}/stdout", plan.rank)).copied().unwrap_or(0);
    if resume > plan.lines {
        bail!("the server holds {resume} lines of rank {} but only {} were sent", plan.rank, plan.lines);
    }
    if resume > *acked {
        t.skipped_on_resume += resume - *acked;
        progress.acked.fetch_add(resume - *acked, Relaxed);
        *acked = resume;
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<v1::LogBatch>(WINDOW);
    let mut acks = tokio::time::timeout(RPC_LIMIT, c.ship_logs(tokio_stream::wrappers::ReceiverStream::new(rx)))
        .await
        .context("open the log stream: timed out")?
        .context("open the log stream")?
        .into_inner();
    let started = match t.go {
        Some(go) => go,
        None => {
            plan.start.ready.fetch_add(1, Relaxed);
            let mut go = plan.start.go.clone();
            let at = *go.wait_for(Option::is_some).await.map_err(|_| anyhow!("the run ended before it started"))?;
            *t.go.insert(at.unwrap_or_else(Instant::now))
        }
    };
    let mut in_flight: VecDeque<(u64, u64, u64, Instant)> = VecDeque::new();
    let mut sent = *acked;
    let mut batch_id = 0u64;
    let mut last_batch = Instant::now();
    let interval = Duration::from_millis(100);
    loop {
        if *acked >= plan.lines {
            drop(tx);
            let exit =
                v1::ProcessExit { session_id: open.session_id.clone(), rank: Some(plan.rank), exit_code: Some(0), at_ns: now_ns(), ..Default::default() };
            match tokio::time::timeout(RPC_LIMIT, c.report_exit(exit)).await {
                Ok(Ok(_)) => {
                    t.exit_reported = true;
                    return Ok(());
                }
                Ok(Err(s)) => bail!("report the exit: {} ({:?})", s.message(), s.code()),
                Err(_) => bail!("report the exit: no answer in {RPC_LIMIT:?}"),
            }
        }
        let available = available(plan, started);
        // Send while the window has room and lines wait: a full batch at once, a partial one
        // when the batching interval passed (the real agent's 1,000 lines or 100 ms).
        while in_flight.len() < WINDOW && sent < available {
            let n = (available - sent).min(plan.batch_lines as u64);
            if n < plan.batch_lines as u64 && available < plan.lines && last_batch.elapsed() < interval {
                break;
            }
            let lines = (sent..sent + n)
                .map(|seq| v1::LogLine {
                    seq,
                    capture_ns: now_ns(),
                    stream: v1::StreamKind::Stdout as i32,
                    raw: plan.profile.line(plan.rank, plan.world, seq),
                    rank: None,
                    file: String::new(),
                })
                .collect();
            let batch = v1::LogBatch { session_id: open.session_id.clone(), batch_id, lines, ..Default::default() };
            tx.send(batch).await.map_err(|_| anyhow!("the log stream closed"))?;
            let now = Instant::now();
            t.first_send.get_or_insert(now);
            in_flight.push_back((batch_id, sent, n, now));
            t.transmitted += n;
            t.resent += highest_sent.saturating_sub(sent).min(n);
            *highest_sent = (*highest_sent).max(sent + n);
            sent += n;
            batch_id += 1;
            last_batch = now;
        }
        // Wake for a waiting partial batch when the batching interval is over, else when the next
        // line is printed: 16,384 paced agents must not each wake ten times a second for nothing.
        let wake = if sent < plan.lines && in_flight.len() < WINDOW {
            let flush = last_batch + interval;
            Some(if available > sent || plan.rate <= 0.0 { flush } else { flush.max(started + Duration::from_secs_f64((available + 1) as f64 / plan.rate)) })
        } else {
            None
        };
        tokio::select! {
            ack = acks.message() => {
                let ack = match ack {
                    Ok(Some(a)) => a,
                    Ok(None) => bail!("the server closed the log stream"),
                    Err(s) => bail!("log stream: {} ({:?})", s.message(), s.code()),
                };
                let (id, first, n, at) = in_flight.pop_front().ok_or_else(|| anyhow!("an ack for batch {} that was not sent", ack.batch_id))?;
                if id != ack.batch_id {
                    bail!("acks out of order: got batch {}, expected {id}", ack.batch_id);
                }
                let now = Instant::now();
                t.latencies_us.push(u32::try_from(now.duration_since(at).as_micros()).unwrap_or(u32::MAX));
                t.server_duplicates += u64::from(ack.duplicates);
                t.last_ack = Some(now);
                let end = first + n;
                if let Some(fresh) = &plan.fresh {
                    // Dropped when the checker is behind: it measures the index, not its own queue.
                    let _ = fresh.try_send(Acked { rank: plan.rank, seq: end - 1, at: now });
                }
                if end > *acked {
                    progress.acked.fetch_add(end - *acked, Relaxed);
                    *acked = end;
                }
            }
            _ = tokio::time::sleep_until(wake.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))), if wake.is_some() => {}
        }
    }
}

/// Lines the simulated process has printed by now.
fn available(plan: &Plan, started: Instant) -> u64 {
    if plan.rate <= 0.0 {
        return plan.lines;
    }
    ((started.elapsed().as_secs_f64() * plan.rate) as u64).min(plan.lines)
}
