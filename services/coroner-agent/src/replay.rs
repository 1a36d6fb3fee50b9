//! Replays the spool an earlier agent of the same job and rank key left behind: its
//! unacknowledged batches and its process end, under the earlier agent's own session identity
//! (its `agent_instance`), so the server files them exactly as if that agent had delivered them.

use crate::connection::{connect, AckEvent};
use crate::seq_base::{prepare_lines, SeqBase};
use crate::spool::{read_spool, Record, SpoolWriter};
use crate::wire::Outgoing;
use coroner_proto::v1;
use std::collections::HashSet;
use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;
use coroner_proto::auth::Channel;

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
    let rank = contents.session.rank;
    let mut outstanding = HashSet::new();
    let mut lines_sent = 0;
    let deadline = tokio::time::Instant::now() + REPLAY_TIMEOUT;
    for spooled in &unacked.batches {
        let b = &spooled.batch;
        let lines = prepare_lines(&b.lines, rank, (!spooled.rebased).then_some(&base), &conn.resume_from);
        if lines.is_empty() {
            let _ = writer.append(&Record::Ack(b.batch_id), false);
            continue;
        }
        lines_sent += lines.len();
        let batch = v1::LogBatch { session_id: conn.session_id.clone(), batch_id: b.batch_id, lines, clock: Vec::new(), spool_backlog: 0 };
        if tokio::time::timeout_at(deadline, conn.tx.send(Outgoing::message(&batch))).await.map_or(true, |r| r.is_err()) {
            tracing::warn!("replay {}: the server stopped taking batches", path.display());
            return false;
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
            _ => {
                tracing::warn!("replay {}: {} batches unacknowledged; keeping the spool", path.display(), outstanding.len());
                return false;
            }
        }
    }
    if let Some(mut exit) = unacked.exit {
        exit.session_id = conn.session_id.clone();
        let mut client = conn.client.clone();
        match tokio::time::timeout(Duration::from_secs(5), client.report_exit(exit)).await {
            Ok(Ok(_)) => {
                let _ = writer.append(&Record::ExitAcked, true);
            }
            _ => {
                tracing::warn!("replay {}: the process end was not acknowledged; keeping the spool", path.display());
                return false;
            }
        }
    }
    tracing::info!("replayed {lines_sent} lines from an earlier agent's spool {}", path.display());
    let _ = writer.remove();
    true
}
