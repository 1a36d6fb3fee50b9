//! Replays the spool an earlier agent of the same job and rank key left behind: its
//! unacknowledged batches and its process end, under the earlier agent's own session identity
//! (its `agent_instance`), so the server files them exactly as if that agent had delivered them.

use crate::connection::{connect, AckEvent, Conn};
use crate::seq_base::{prepare_lines, SeqBase};
use crate::spool::{read_spool, Record, SpoolWriter, SpooledBatch};
use crate::wire::Outgoing;
use coroner_proto::auth::Channel;
use coroner_proto::v1;
use std::collections::HashSet;
use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long one replay may wait for its acknowledgements.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(30);

/// Ships one orphaned spool; true when everything in it was acknowledged (the file is then gone).
pub async fn replay(channel: Channel, path: PathBuf, file: File) -> bool {
    let contents = match read_spool(&file) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("cannot replay the spool {}: {e}", path.display());
            return false;
        }
    };
    if let Some(why) = &contents.corrupt {
        tracing::warn!("the spool {} is damaged ({why}); replaying what precedes it", path.display());
    }
    let unacked = contents.unacked();
    if unacked.batches.is_empty() && unacked.exit.is_none() {
        let _ = std::fs::remove_file(&path);
        return true;
    }
    // The earlier agent's lane, when it learnt one (a spool it never shipped from gets a new one).
    let mut request = contents.session.clone();
    request.seq_lanes = true;
    request.seq_offset = contents.base().map(|b| b.offset());
    let (conn, mut acks) = match connect(channel, request).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("replay {}: {e}", path.display());
            return false;
        }
    };
    let mut writer = match SpoolWriter::reopen(file, &path, contents.valid_len) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("reopen the spool {}: {e}", path.display());
            return false;
        }
    };
    let base = match contents.base() {
        Some(b) => b,
        None => {
            let b = SeqBase::from_session(&conn.resume_from, conn.seq_offset);
            let _ = writer.append(&Record::Base(b.clone()), true);
            b
        }
    };
    let deadline = tokio::time::Instant::now() + REPLAY_TIMEOUT;
    let lines_sent = match send_batches(&conn, &mut acks, &mut writer, &unacked.batches, contents.session.rank, &base, deadline).await {
        Ok(n) => n,
        Err(why) => {
            tracing::warn!("replay {}: {why}", path.display());
            return false;
        }
    };
    if let Some(exit) = unacked.exit {
        if !report_exit(&conn, exit).await {
            tracing::warn!("replay {}: the process end was not acknowledged; keeping the spool", path.display());
            return false;
        }
        let _ = writer.append(&Record::ExitAcked, true);
    }
    tracing::info!("replayed {lines_sent} lines from an earlier agent's spool {}", path.display());
    let _ = writer.remove();
    true
}

/// Sends the unacknowledged batches in the earlier agent's lane, numbered on `base`, and waits
/// for their acknowledgements (recorded in the spool) until `deadline`. Returns how many lines
/// were sent, or why not all were acknowledged.
async fn send_batches(
    conn: &Conn,
    acks: &mut mpsc::Receiver<AckEvent>,
    writer: &mut SpoolWriter,
    batches: &[SpooledBatch],
    rank: Option<u32>,
    base: &SeqBase,
    deadline: tokio::time::Instant,
) -> Result<usize, String> {
    let mut outstanding = HashSet::new();
    let mut lines_sent = 0;
    for spooled in batches {
        let b = &spooled.batch;
        let lines = prepare_lines(&b.lines, rank, (!spooled.rebased).then_some(base), &conn.resume_from);
        if lines.is_empty() {
            let _ = writer.append(&Record::Ack(b.batch_id), false);
            continue;
        }
        lines_sent += lines.len();
        let batch = v1::LogBatch { session_id: conn.session_id.clone(), batch_id: b.batch_id, lines, clock: Vec::new(), spool_backlog: 0 };
        if tokio::time::timeout_at(deadline, conn.tx.send(Outgoing::message(&batch))).await.map_or(true, |r| r.is_err()) {
            return Err("the server stopped taking batches".into());
        }
        outstanding.insert(b.batch_id);
    }
    while !outstanding.is_empty() {
        match tokio::time::timeout_at(deadline, acks.recv()).await {
            Ok(Some(AckEvent::Ack(a))) => {
                if outstanding.remove(&a.batch_id) {
                    let _ = writer.append(&Record::Ack(a.batch_id), false);
                }
            }
            _ => return Err(format!("{} batches unacknowledged; keeping the spool", outstanding.len())),
        }
    }
    Ok(lines_sent)
}

/// Reports the earlier agent's process end under this session; whether it was acknowledged.
async fn report_exit(conn: &Conn, mut exit: v1::ProcessExit) -> bool {
    exit.session_id = conn.session_id.clone();
    let mut client = conn.client.clone();
    matches!(tokio::time::timeout(Duration::from_secs(5), client.report_exit(exit)).await, Ok(Ok(_)))
}
