//! The shipper: one background task that turns queued lines into batches, spools them, ships
//! them over `ShipLogs`, and forgets a batch only when its `BatchAck` arrives.
//!
//! - **Batching:** a batch closes at [`Config::batch_lines`] lines or [`Config::batch_bytes`]
//!   bytes (the queue wakes the task), or every [`Config::batch_interval`]. What happens to a
//!   batch from then on (encoded once, spooled first, held until acknowledged, read back from the
//!   spool) is the outbox's (`outbox.rs`).
//! - **Sequence numbers:** lines are numbered per (rank, stream) from 0 by this agent; the first
//!   session gives the instance its base (`seq_base.rs`), which is spooled, and named again when
//!   reopening so the instance keeps its lane. After a reconnect, lines below `resume_from` are
//!   not resent.
//! - **Reconnect:** on any error the connection is dropped, every unacked batch is marked unsent,
//!   and a new connection is tried with exponential backoff (0.2 s doubling to 5 s), each delay
//!   drawn at random from its upper half so agents that lost one server do not return in lockstep;
//!   each attempt tries the next server of the list and follows one redirect to the job's owner
//!   (`connection.rs`).
//! - **Clock:** while connected, a `SyncClock` probe every 5 s; samples ride in the next batch.
//! - **Replay:** on the first connection, orphaned spools of earlier agents with the same job and
//!   rank key are shipped under their own sessions before this agent opens its own.
//! - **The end:** once told the child ended ([`Finish`]), the process end is spooled and
//!   reported; the shipper stops when everything is acknowledged, at the deadline, or at once
//!   when no server ever answered (the spool holds everything already).
//!
//! The state is [`Shipper`]; [`Shipper::run`] waits for one [`Wake`] at a time, hands it to its
//! handler, then [`Shipper::advance`]s (form, sync, connect, probe, send, report the end).
//! Nothing here can block the pipe threads: they only touch the queue.

use crate::clock;
use crate::connection::{self, AckEvent, Conn, Connected};
use crate::outbox::{Limits, Outbox};
use crate::queue::LineQueue;
use crate::replay;
use crate::seq_base::SeqBase;
use crate::spool::SpoolWriter;
use coroner_proto::auth::Channel;
use coroner_proto::v1;
use coroner_proto::v1::ingest_client::IngestClient;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The first reconnect delay, and the longest.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long the server may take to acknowledge the process end.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct Config {
    /// coronerd's gRPC URL, or several separated by commas (instances sharing one PostgreSQL),
    /// tried in turn; a server that does not own the job redirects to the one that does.
    pub server: String,
    pub batch_lines: usize,
    pub batch_bytes: usize,
    pub batch_interval: Duration,
    pub max_unacked_bytes: usize,
    /// The token and CA every connection to `server` uses.
    pub auth: coroner_proto::auth::ClientAuth,
}

impl Config {
    pub fn new(server: String, auth: coroner_proto::auth::ClientAuth) -> Self {
        Config { server, auth, batch_lines: 1000, batch_bytes: 1 << 20, batch_interval: Duration::from_millis(100), max_unacked_bytes: 2 << 20 }
    }
}

/// Sent by `main` when the child has exited and its pipes are drained.
pub struct Finish {
    pub exit: v1::ProcessExit,
    pub deadline: Instant,
}

/// How shipping ended.
#[derive(Debug)]
pub struct Summary {
    pub unacked_lines: usize,
    pub exit_reported: bool,
    pub dropped: u64,
    pub spool_kept: Option<PathBuf>,
}

/// The latest connection's client and session id, as the shipper publishes them.
pub type Published = Option<(IngestClient<Channel>, String)>;
/// Where the shipper's connections are seen (the snapshot uploads use them).
pub type ConnWatch = tokio::sync::watch::Receiver<Published>;

/// What background tasks tell the shipper; each carries the connection generation it belongs
/// to where a later connection makes it stale.
enum Event {
    Connected(u64, Result<Box<Connected>, String>),
    Clock(v1::ClockProbe),
    ExitReported(u64, bool),
}

/// Why [`Shipper::run`] woke up.
enum Wake {
    Finish(Finish),
    Event(Event),
    Ack(AckEvent),
    /// Lines are waiting, or the batching interval passed.
    Lines,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExitState {
    NotSent,
    InFlight,
    Acked,
}

/// The connection and how to get the next one.
struct Link {
    /// Counts connection attempts and losses: an event of an older generation is stale.
    gen: u64,
    conn: Option<Conn>,
    acks: Option<mpsc::Receiver<AckEvent>>,
    connecting: bool,
    next_connect: Instant,
    backoff: Duration,
    /// The loss of the server was reported (once, until it is back).
    warned: bool,
    /// No server has answered this agent yet: at the end, nothing is worth waiting for.
    never_connected: bool,
    next_probe: Instant,
}

impl Link {
    fn new() -> Self {
        let now = Instant::now();
        Link {
            gen: 0,
            conn: None,
            acks: None,
            connecting: false,
            next_connect: now,
            backoff: BACKOFF_MIN,
            warned: false,
            never_connected: true,
            next_probe: now,
        }
    }

    /// The next acknowledgement of the open stream; never, without one.
    async fn next_ack(&mut self) -> Option<AckEvent> {
        match self.acks.as_mut() {
            Some(rx) => rx.recv().await,
            None => std::future::pending().await,
        }
    }
}

/// The child's end, once told, and how far its report got.
struct Ending {
    finish: Option<Finish>,
    spooled: bool,
    state: ExitState,
}

pub struct Shipper {
    cfg: Config,
    session: v1::OpenSessionRequest,
    queue: Arc<LineQueue>,
    outbox: Outbox,
    /// Orphaned spools, replayed on the first connection.
    orphans: Vec<(PathBuf, File)>,
    /// This instance's sequence base, once the first session gave it.
    base: Option<SeqBase>,
    /// Clock samples waiting for the next batch.
    clock: Vec<v1::ClockProbe>,
    link: Link,
    ending: Ending,
    events_tx: mpsc::UnboundedSender<Event>,
    /// Where each new connection's client and session are published (for snapshot uploads).
    conn_watch: Option<tokio::sync::watch::Sender<Published>>,
}

impl Shipper {
    pub fn new(cfg: Config, session: v1::OpenSessionRequest, queue: Arc<LineQueue>, spool: Option<SpoolWriter>, orphans: Vec<(PathBuf, File)>) -> Self {
        let (events_tx, _) = mpsc::unbounded_channel();
        let limits = Limits { batch_lines: cfg.batch_lines, batch_bytes: cfg.batch_bytes, max_unacked_bytes: cfg.max_unacked_bytes };
        Shipper {
            outbox: Outbox::new(limits, queue.clone(), spool),
            cfg,
            session,
            queue,
            orphans,
            base: None,
            clock: Vec::new(),
            link: Link::new(),
            ending: Ending { finish: None, spooled: false, state: ExitState::NotSent },
            events_tx,
            conn_watch: None,
        }
    }

    /// Publishes every connection this shipper opens; the receiver sees the latest.
    pub fn watch_connections(&mut self) -> ConnWatch {
        let (tx, rx) = tokio::sync::watch::channel(None);
        self.conn_watch = Some(tx);
        rx
    }

    /// Runs until `finish` says the child is done and everything is acknowledged, or its deadline.
    pub async fn run(mut self, mut finish: mpsc::Receiver<Finish>) -> Summary {
        let (events_tx, mut events) = mpsc::unbounded_channel();
        self.events_tx = events_tx;
        let queue = self.queue.clone();
        let mut tick = tokio::time::interval(self.cfg.batch_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let wake = tokio::select! {
                Some(f) = finish.recv(), if self.ending.finish.is_none() => Wake::Finish(f),
                Some(ev) = events.recv() => Wake::Event(ev),
                Some(ack) = self.link.next_ack() => Wake::Ack(ack),
                _ = queue.notify.notified() => Wake::Lines,
                _ = tick.tick() => Wake::Lines,
            };
            match wake {
                Wake::Finish(f) => self.ending.finish = Some(f),
                Wake::Event(Event::Connected(g, result)) if g == self.link.gen => self.on_connected(result),
                Wake::Event(Event::Clock(sample)) => self.clock.push(sample),
                Wake::Event(Event::ExitReported(g, ok)) if g == self.link.gen => self.on_exit_reported(ok),
                Wake::Event(_) => {}
                Wake::Ack(AckEvent::Ack(a)) => self.outbox.ack(a.batch_id),
                Wake::Ack(AckEvent::Closed(status)) => self.on_stream_closed(status.as_ref()),
                Wake::Lines => {}
            }
            self.advance();
            if self.finished() {
                break;
            }
        }
        self.summary()
    }

    /// A connection attempt ended: connected, or the next attempt is scheduled.
    fn on_connected(&mut self, result: Result<Box<Connected>, String>) {
        self.link.connecting = false;
        match result {
            Ok(pair) => {
                let (c, rx) = *pair;
                if self.link.warned {
                    tracing::info!("reconnected to {}", self.cfg.server);
                }
                self.link.warned = false;
                self.link.never_connected = false;
                self.link.backoff = BACKOFF_MIN;
                if self.base.is_none() {
                    let base = SeqBase::from_session(&c.resume_from, c.seq_offset);
                    self.outbox.spool_base(&base);
                    self.base = Some(base);
                }
                self.outbox.mark_unsent();
                if let Some(w) = &self.conn_watch {
                    let _ = w.send(Some((c.client.clone(), c.session_id.clone())));
                }
                self.link.conn = Some(c);
                self.link.acks = Some(rx);
                self.link.next_probe = Instant::now();
            }
            Err(e) => {
                if !self.link.warned {
                    let spool = self.outbox.spool_path();
                    tracing::warn!("{e}; will retry, spooling to {}", spool.as_deref().unwrap_or("memory only"));
                    self.link.warned = true;
                }
                self.link.next_connect = Instant::now() + connection::jittered(self.link.backoff);
                self.link.backoff = (self.link.backoff * 2).min(BACKOFF_MAX);
            }
        }
    }

    /// The server answered the report of the process end.
    fn on_exit_reported(&mut self, ok: bool) {
        self.ending.state = if ok { ExitState::Acked } else { ExitState::NotSent };
        if ok {
            self.outbox.exit_acked();
        }
    }

    /// The `ShipLogs` stream closed: the connection is dropped and a new one scheduled.
    fn on_stream_closed(&mut self, status: Option<&tonic::Status>) {
        self.outbox.on_closed(status);
        if !self.link.warned {
            tracing::warn!("lost the connection to {}; will reconnect", self.cfg.server);
            self.link.warned = true;
        }
        self.link.conn = None;
        self.link.acks = None;
        self.link.gen += 1;
        if self.ending.state == ExitState::InFlight {
            self.ending.state = ExitState::NotSent;
        }
        self.link.next_connect = Instant::now() + connection::jittered(self.link.backoff);
    }

    /// What every wake-up does: form and spool batches, spool the end once known, connect when
    /// due, and while connected probe the clock, send, and report the end.
    fn advance(&mut self) {
        let rank = self.session.rank;
        self.outbox.form_batches(rank, self.base.as_ref());
        self.outbox.sync_in_background();
        self.spool_exit();
        let now = Instant::now();
        if self.link.conn.is_none() && !self.link.connecting && now >= self.link.next_connect {
            self.link.connecting = true;
            self.link.gen += 1;
            self.spawn_connect();
        }
        let Some(c) = &self.link.conn else { return };
        if now >= self.link.next_probe {
            self.link.next_probe = now + clock::PROBE_INTERVAL;
            let tx = self.events_tx.clone();
            let (client, sid) = (c.client.clone(), c.session_id.clone());
            tokio::spawn(async move {
                if let Some(s) = clock::probe(client, sid).await {
                    let _ = tx.send(Event::Clock(s));
                }
            });
        }
        self.outbox.send_ready(c, rank, self.base.as_ref(), &mut self.clock);
        self.report_exit();
    }

    /// The process end with this shipper's own drops added.
    fn exit_record(&self) -> Option<v1::ProcessExit> {
        let f = self.ending.finish.as_ref()?;
        let mut exit = f.exit.clone();
        exit.dropped_lines = f.exit.dropped_lines.saturating_add(self.outbox.dropped());
        Some(exit)
    }

    /// Spools the process end, once, as soon as it is known.
    fn spool_exit(&mut self) {
        if self.ending.spooled {
            return;
        }
        if let Some(exit) = self.exit_record() {
            self.outbox.spool_exit(exit, self.ending.state == ExitState::Acked);
            self.ending.spooled = true;
        }
    }

    /// Reports the process end on the open connection, unless it is in flight or acknowledged.
    fn report_exit(&mut self) {
        let (Some(c), ExitState::NotSent) = (&self.link.conn, self.ending.state) else { return };
        let Some(mut exit) = self.exit_record() else { return };
        self.ending.state = ExitState::InFlight;
        exit.session_id = c.session_id.clone();
        let (mut client, tx, g) = (c.client.clone(), self.events_tx.clone(), self.link.gen);
        tokio::spawn(async move {
            let ok = tokio::time::timeout(EXIT_TIMEOUT, client.report_exit(exit)).await.is_ok_and(|r| r.is_ok());
            let _ = tx.send(Event::ExitReported(g, ok));
        });
    }

    /// Whether to stop: only once the child ended, when everything is delivered, when no server
    /// ever answered, or at the deadline.
    fn finished(&self) -> bool {
        let Some(f) = &self.ending.finish else { return false };
        let done = self.outbox.is_empty() && self.queue.is_empty() && self.ending.state == ExitState::Acked;
        // No server ever answered: the spool holds everything (lines and the end) already,
        // and holding the launcher for the linger would buy nothing. (A server that
        // answered before and went away is retried until the linger: it may be a restart
        // or another instance taking the job over.)
        let link = &self.link;
        let unreachable = link.conn.is_none() && link.warned && link.never_connected && self.queue.is_empty() && self.outbox.can_spool();
        done || unreachable || Instant::now() >= f.deadline
    }

    fn summary(self) -> Summary {
        tracing::debug!("the line queue held at most {} KiB", self.queue.peak_bytes() >> 10);
        let exit_reported = self.ending.state == ExitState::Acked;
        let unacked_lines = self.outbox.unacked_lines();
        let dropped = self.outbox.dropped();
        let spool_kept = self.outbox.close(exit_reported);
        Summary { unacked_lines, exit_reported, dropped, spool_kept }
    }

    /// Starts a connection attempt of generation `self.link.gen` to the next server of the list
    /// (replaying orphaned spools first, on the first attempt).
    fn spawn_connect(&mut self) {
        let gen = self.link.gen;
        let list = connection::servers(&self.cfg.server);
        let server = list.get(gen as usize % list.len().max(1)).copied().unwrap_or_default().to_string();
        let mut request = self.session.clone();
        // Reopening: keep the lane the first session gave.
        request.seq_offset = self.base.as_ref().map(SeqBase::offset);
        let orphans = std::mem::take(&mut self.orphans);
        let tx = self.events_tx.clone();
        let auth = self.cfg.auth.clone();
        tokio::spawn(async move {
            let result = async {
                let channel = connection::open_channel(&server, &auth).await?;
                for (path, file) in orphans {
                    replay::replay(channel.clone(), path, file).await;
                }
                connection::connect_or_follow(channel, &server, &auth, request).await.map(Box::new)
            }
            .await;
            let _ = tx.send(Event::Connected(gen, result));
        });
    }
}
