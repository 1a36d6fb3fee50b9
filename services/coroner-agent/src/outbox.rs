//! The shipper's outbox: batches formed from the line queue, spooled, sent, and held until
//! their acknowledgement arrives.
//!
//! - **Encoded once, spool first:** each batch is encoded when it is formed (see [`crate::wire`];
//!   numbered on the server's base when it is known) and those bytes are appended to the spool
//!   (see [`crate::spool`]) before they are sent, whether or not a server is reachable. The
//!   batches formed at one wake-up share one sync, made in the background.
//! - **Bounded memory:** unacknowledged batches stay in memory up to
//!   [`Limits::max_unacked_bytes`]; older ones are evicted and read back from the spool, as
//!   bytes, to resend. A batch is decoded and rewritten only when it must change (numbered before
//!   the base was known, or partly delivered before a reconnect).
//! - **A full spool** holds new batches in memory only (the queue then drops routine lines), and
//!   starts over once every spooled batch is acknowledged: its limit bounds what the server has
//!   not acknowledged, not all that was ever sent.
//!
//! Lines given up after they were formed (refused by the server as invalid, unreadable from the
//! spool) are counted, and reported with the queue's drops.

use crate::connection::Conn;
use crate::queue::LineQueue;
use crate::seq_base::{prepare_lines, SeqBase};
use crate::spool::{BatchFrame, Record, SpoolWriter};
use crate::wire::{self, Outgoing, SeqRange};
use coroner_proto::v1;
use prost::Message;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

/// How big batches get and how much of them memory holds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub batch_lines: usize,
    pub batch_bytes: usize,
    pub max_unacked_bytes: usize,
}

/// One batch between its forming and its acknowledgement.
struct Pending {
    id: u64,
    /// The batch's encoded `LogBatch` id and lines while held in memory; `None` once evicted
    /// (then read back from the spool at `spool_at`).
    body: Option<bytes::Bytes>,
    count: usize,
    bytes: usize,
    spool_at: Option<u64>,
    /// Each stream's numbers in the batch, as encoded.
    ranges: Vec<SeqRange>,
    /// Whether the numbers are rebased on the server's base already.
    rebased: bool,
    clock: Vec<v1::ClockProbe>,
    sent: bool,
}

/// A batch just formed, before it is spooled.
struct Formed {
    id: u64,
    frame: BatchFrame,
    encoded: wire::EncodedBatch,
    rebased: bool,
}

pub struct Outbox {
    limits: Limits,
    queue: Arc<LineQueue>,
    spool: Option<SpoolWriter>,
    pending: VecDeque<Pending>,
    mem_bytes: usize,
    next_id: u64,
    /// Batches were written to the spool since the last sync started.
    unsynced: bool,
    /// The spool refused a batch (its size limit): new batches are held in memory only, until
    /// every spooled batch is acknowledged and the spool starts over ([`Outbox::reclaim_spool`]).
    spool_full: bool,
    /// The process end is in the spool and not acknowledged (the spool must not start over).
    exit_in_spool: bool,
    /// Batches went into the spool since it (last) started: starting over would free something.
    spooled_any: bool,
    /// Lines of batches given up after they were formed (refused by the server as invalid, or
    /// unreadable from the spool): reported with the queue's drops.
    lost: u64,
    sync_task: Option<tokio::task::JoinHandle<()>>,
}

impl Outbox {
    pub fn new(limits: Limits, queue: Arc<LineQueue>, spool: Option<SpoolWriter>) -> Self {
        queue.set_draining(spool.is_some());
        Outbox {
            limits,
            queue,
            spool,
            pending: VecDeque::new(),
            mem_bytes: 0,
            next_id: 0,
            unsynced: false,
            spool_full: false,
            exit_in_spool: false,
            spooled_any: false,
            lost: 0,
            sync_task: None,
        }
    }

    /// Nothing is waiting for an acknowledgement.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Lines formed into batches and not acknowledged.
    pub fn unacked_lines(&self) -> usize {
        self.pending.iter().map(|p| p.count).sum()
    }

    /// Lines that will never reach the server: dropped by the full queue, or given up in batches.
    pub fn dropped(&self) -> u64 {
        self.queue.dropped() + self.lost
    }

    /// Whether formed batches can go to the spool (else they are held in memory only).
    pub fn can_spool(&self) -> bool {
        self.spool.is_some() && !self.spool_full
    }

    /// Where lines are spooled, for a warning.
    pub fn spool_path(&self) -> Option<String> {
        self.spool.as_ref().map(|s| s.path().display().to_string())
    }

    /// Every batch is to be sent again (a new connection).
    pub fn mark_unsent(&mut self) {
        for p in &mut self.pending {
            p.sent = false;
        }
    }

    /// Spools the base learnt from the server.
    pub fn spool_base(&mut self, base: &SeqBase) {
        self.spool_append(&Record::Base(base.clone()), true);
    }

    /// Spools the process end (synced); `acked` when the server already has it. Returns whether
    /// it was spooled.
    pub fn spool_exit(&mut self, exit: v1::ProcessExit, acked: bool) -> bool {
        let spooled = self.spool_append(&Record::Exit(exit), true).is_some();
        self.exit_in_spool = spooled && !acked;
        spooled
    }

    /// The server acknowledged the process end.
    pub fn exit_acked(&mut self) {
        self.spool_append(&Record::ExitAcked, false);
        self.exit_in_spool = false;
    }

    /// Forgets an acknowledged batch.
    pub fn ack(&mut self, batch_id: u64) {
        if let Some(i) = self.pending.iter().position(|p| p.id == batch_id) {
            let p = self.pending.remove(i).expect("index exists");
            self.forget(&p);
        }
    }

    fn forget(&mut self, p: &Pending) {
        if p.body.is_some() {
            self.mem_bytes -= p.bytes;
        }
        if p.spool_at.is_some() {
            self.spool_append(&Record::Ack(p.id), false);
        }
    }

    /// The stream closed: every batch is unsent; a batch the server refused as invalid is
    /// dropped (resending it would fail forever).
    pub fn on_closed(&mut self, status: Option<&tonic::Status>) {
        if let Some(s) = status {
            tracing::debug!("log stream closed: {s}");
            if s.code() == tonic::Code::InvalidArgument {
                if let Some(i) = self.pending.iter().position(|p| p.sent) {
                    let p = self.pending.remove(i).expect("index exists");
                    tracing::warn!("the server refused a batch of {} lines ({}); dropping it", p.count, s.message());
                    self.lost += p.count as u64;
                    self.forget(&p);
                }
            }
        }
        self.mark_unsent();
    }

    /// Moves queued lines into encoded, spooled, pending batches, numbered on `base` when it is
    /// known; the batches formed here share one sync.
    pub fn form_batches(&mut self, rank: Option<u32>, base: Option<&SeqBase>) {
        self.reclaim_spool(base);
        let mut formed: Vec<Formed> = Vec::new();
        let mut formed_bytes = 0;
        // One round forms at most half of `max_unacked_bytes` (so sends and acks interleave with
        // forming in a burst, and memory stays bounded).
        while formed_bytes < self.limits.max_unacked_bytes / 2 {
            if !self.can_spool() && self.mem_bytes + formed_bytes >= self.limits.max_unacked_bytes {
                // Nowhere to put more: let the queue fill and drop routine lines.
                break;
            }
            let lines = self.queue.take_batch(self.limits.batch_lines, self.limits.batch_bytes);
            if lines.is_empty() {
                break;
            }
            let id = self.next_id;
            self.next_id += 1;
            let capacity = lines.iter().map(|l| l.raw.len() + 32).sum::<usize>() + 16;
            let (frame, encoded) = BatchFrame::build(base.is_some(), capacity, |out| wire::encode_batch(id, &lines, rank, base, out));
            formed_bytes += frame.len();
            formed.push(Formed { id, frame, encoded, rebased: base.is_some() });
        }
        self.add_formed(formed);
        if !self.queue.is_empty() && self.can_spool() {
            // More is waiting: come back at once, after this round's sends.
            self.queue.notify.notify_one();
        }
    }

    /// A full spool whose batches were all acknowledged starts over (with the base written
    /// again): its size limit bounds what the server has not acknowledged, not all that was
    /// ever sent, so a long job with a healthy server keeps spooling.
    fn reclaim_spool(&mut self, base: Option<&SeqBase>) {
        if !self.spool_full || !self.spooled_any || self.exit_in_spool || self.pending.iter().any(|p| p.spool_at.is_some()) {
            return;
        }
        let Some(spool) = self.spool.as_mut() else { return };
        if let Err(e) = spool.reset() {
            tracing::warn!("empty the spool {}: {e}; continuing without it", spool.path().display());
            self.spool = None;
            return;
        }
        tracing::info!("every spooled line was acknowledged; spooling again to {}", spool.path().display());
        self.spool_full = false;
        self.spooled_any = false;
        if let Some(base) = base {
            self.spool_base(base);
        }
        if self.spool.is_some() {
            self.queue.set_draining(true);
        }
    }

    fn add_formed(&mut self, formed: Vec<Formed>) {
        if formed.is_empty() {
            return;
        }
        let offsets = self.spool_frames(&formed.iter().map(|f| &f.frame).collect::<Vec<_>>());
        for (i, f) in formed.into_iter().enumerate() {
            let body = f.frame.payload();
            let bytes = body.len();
            self.mem_bytes += bytes;
            self.pending.push_back(Pending {
                id: f.id,
                body: Some(body),
                count: f.encoded.count,
                bytes,
                spool_at: offsets.as_ref().map(|o| o[i]),
                ranges: f.encoded.ranges,
                rebased: f.rebased,
                clock: Vec::new(),
                sent: false,
            });
        }
        // Over the memory limit: forget the oldest spooled batches' bytes (read back to resend).
        for p in &mut self.pending {
            if self.mem_bytes <= self.limits.max_unacked_bytes {
                break;
            }
            if p.spool_at.is_some() && p.body.is_some() {
                p.body = None;
                self.mem_bytes -= p.bytes;
            }
        }
    }

    /// Sends every unsent batch the stream has room for, with the clock samples taken from
    /// `clock` (in a batch of their own when every batch was sent).
    pub fn send_ready(&mut self, c: &Conn, rank: Option<u32>, base: Option<&SeqBase>, clock: &mut Vec<v1::ClockProbe>) {
        if !clock.is_empty() && self.pending.iter().all(|p| p.sent) {
            self.push_clock_only();
        }
        let default_base = SeqBase::default();
        let base = base.unwrap_or(&default_base);
        let mut done = Vec::new();
        // What this agent holds unacknowledged (spooled or in memory), reported to the server.
        let backlog: u64 = self.pending.iter().map(|p| p.bytes as u64).sum();
        let spool = self.spool.as_ref();
        for p in self.pending.iter_mut().filter(|p| !p.sent) {
            if c.tx.capacity() == 0 {
                break;
            }
            p.clock.append(clock);
            match outgoing(p, c, rank, base, backlog, spool) {
                Ok(Some(out)) => match c.tx.try_send(out) {
                    Ok(()) => p.sent = true,
                    Err(_) => break,
                },
                Ok(None) => done.push(p.id),
                Err(why) => {
                    tracing::warn!("{why}; dropping it");
                    self.lost += p.count as u64;
                    done.push(p.id);
                }
            }
        }
        for id in done {
            self.ack(id);
        }
    }

    /// A batch of clock samples only: its body is its id.
    fn push_clock_only(&mut self) {
        let mut id = bytes::BytesMut::new();
        wire::encode_batch(self.next_id, &[], None, None, &mut id);
        self.pending.push_back(Pending {
            id: self.next_id,
            body: Some(id.freeze()),
            count: 0,
            bytes: 0,
            spool_at: None,
            ranges: Vec::new(),
            rebased: true,
            clock: Vec::new(),
            sent: false,
        });
        self.next_id += 1;
    }

    /// Appends batch frames to the spool with one sync; their offsets, or `None` when they
    /// could not be spooled (full, or an IO error: then it warns once and carries on without).
    fn spool_frames(&mut self, frames: &[&BatchFrame]) -> Option<Vec<u64>> {
        let spool = self.spool.as_mut()?;
        match spool.append_frames(frames, false) {
            Ok(Ok(at)) => {
                self.unsynced = true;
                self.spooled_any = true;
                Some(at)
            }
            Ok(Err(_full)) => {
                if !self.spool_full {
                    tracing::warn!("the spool {} is full; holding lines in memory only", spool.path().display());
                }
                self.spool_full = true;
                self.queue.set_draining(false);
                None
            }
            Err(e) => {
                tracing::warn!("write the spool {}: {e}; continuing without it", spool.path().display());
                self.spool = None;
                self.queue.set_draining(false);
                None
            }
        }
    }

    /// Starts syncing the spool in the background when batches were written since the last
    /// sync and none is running (so a slow disk never holds the queue back).
    pub fn sync_in_background(&mut self) {
        if !self.unsynced || self.sync_task.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let Some(spool) = self.spool.as_ref() else { return };
        match spool.sync_handle() {
            Ok(file) => {
                self.unsynced = false;
                let path = spool.path().to_path_buf();
                self.sync_task = Some(tokio::task::spawn_blocking(move || {
                    if let Err(e) = file.sync_data() {
                        tracing::warn!("sync the spool {}: {e}", path.display());
                    }
                }));
            }
            Err(e) => tracing::debug!("sync the spool: {e}"),
        }
    }

    /// Appends to the spool; on an IO error, warns once and carries on without it.
    fn spool_append(&mut self, record: &Record, sync: bool) -> Option<u64> {
        let spool = self.spool.as_mut()?;
        match spool.append(record, sync) {
            Ok(Ok(at)) => Some(at),
            Ok(Err(_full)) => None,
            Err(e) => {
                tracing::warn!("write the spool {}: {e}; continuing without it", spool.path().display());
                self.spool = None;
                self.queue.set_draining(false);
                None
            }
        }
    }

    /// Ends the outbox: the spool is removed when everything in it was delivered, else kept
    /// (its path returned) for the next agent or `coroner-agent ship`.
    pub fn close(mut self, exit_reported: bool) -> Option<PathBuf> {
        let spool = self.spool.take()?;
        if self.unacked_lines() == 0 && exit_reported {
            if let Err(e) = spool.remove() {
                tracing::debug!("remove the spool: {e}");
            }
            None
        } else {
            Some(spool.path().to_path_buf())
        }
    }
}

/// What to send for one unsent batch: `Ok(None)` when nothing of it is left to send (all its
/// lines delivered, no clock samples), `Err` when it cannot be read (it is given up).
fn outgoing(p: &Pending, c: &Conn, rank: Option<u32>, base: &SeqBase, backlog: u64, spool: Option<&SpoolWriter>) -> Result<Option<Outgoing>, String> {
    let resume = |r: &SeqRange| c.resume_from.get(&r.key()).copied().unwrap_or(0);
    let offset = |r: &SeqRange| if p.rebased { 0 } else { base.start_of(&r.key()) };
    let delivered = p.count > 0 && p.ranges.iter().all(|r| offset(r) + r.last < resume(r));
    if delivered && p.clock.is_empty() {
        return Ok(None);
    }
    // Sent as formed unless its numbers must move or some of its lines are delivered.
    let as_is = p.ranges.iter().all(|r| offset(r) == 0 && r.first >= resume(r));
    let body = match (&p.body, p.spool_at, spool) {
        (Some(b), _, _) => b.clone(),
        (None, Some(at), Some(spool)) => spool.read_batch_payload(at).map_err(|e| format!("read batch {} back from the spool: {e}", p.id))?.0,
        _ => return Err(format!("read batch {} back from the spool: neither in memory nor spooled", p.id)),
    };
    if as_is {
        return Ok(Some(Outgoing::new(&c.session_id, p.clock.clone(), backlog, body)));
    }
    let b = v1::LogBatch::decode(body).map_err(|e| format!("batch {} is unreadable ({e})", p.id))?;
    let lines = prepare_lines(&b.lines, rank, if p.rebased { None } else { Some(base) }, &c.resume_from);
    if lines.is_empty() && p.clock.is_empty() {
        return Ok(None);
    }
    let batch = v1::LogBatch { session_id: c.session_id.clone(), batch_id: p.id, lines, clock: p.clock.clone(), spool_backlog: backlog };
    Ok(Some(Outgoing::message(&batch)))
}
