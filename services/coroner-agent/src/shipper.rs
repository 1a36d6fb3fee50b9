//! The shipper: one background task that turns queued lines into batches, spools them, ships
//! them over `ShipLogs`, and forgets a batch only when its `BatchAck` arrives.
//!
//! - **Batching:** a batch closes at [`Config::batch_lines`] lines or [`Config::batch_bytes`]
//!   bytes (the queue wakes the task), or every [`Config::batch_interval`].
//! - **Encoded once, spool first:** each batch is encoded when it is formed (see [`crate::wire`];
//!   numbered on the server's base when it is known) and those bytes are appended to the spool
//!   (see [`crate::spool`]) before they are sent, whether or not a server is reachable. The
//!   batches formed at one wake-up share one sync. Unacknowledged batches stay in memory up to
//!   [`Config::max_unacked_bytes`]; older ones are evicted and read back from the spool, as bytes,
//!   to resend. A batch is decoded and rewritten only when it must change (numbered before the
//!   base was known, or partly delivered before a reconnect).
//! - **Sequence numbers:** lines are numbered per (rank, stream) from 0 by this agent; on its
//!   first session the server says where each stream starts (`resume_from`, and `seq_offset`
//!   for the streams it does not name: a lane of numbers of this instance's own, so two agents
//!   speaking for one rank never collide), and that becomes this instance's base. The base is
//!   spooled too, and named when reopening (`OpenSessionRequest.seq_offset`), so the instance
//!   keeps its lane. After a reconnect, lines below `resume_from` are not resent.
//! - **Reconnect:** on any error the connection is dropped, every unacked batch is marked unsent,
//!   and a new connection is tried with exponential backoff (0.2 s doubling to 5 s), each delay
//!   drawn at random from its upper half so agents that lost one server do not return in lockstep.
//! - **Clock:** while connected, a `SyncClock` probe every 5 s; samples ride in the next batch.
//! - **Replay:** on the first connection, orphaned spools of earlier agents with the same job and
//!   rank key are shipped under their own sessions before this agent opens its own.
//!
//! Nothing here can block the pipe threads: they only touch the queue.

use crate::clock;
use crate::queue::LineQueue;
use crate::replay;
use crate::spool::{BatchFrame, Record, SpoolWriter};
use crate::wire::{self, Outgoing, SeqRange, ShipCodec};
use prost::Message;
use coroner_proto::v1;
use coroner_proto::v1::ingest_client::IngestClient;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use coroner_proto::auth::Channel;

#[derive(Debug, Clone)]
pub struct Config {
    /// coronerd's gRPC URL, or several separated by commas (instances sharing one PostgreSQL),
    /// tried in turn; a server that does not own the job redirects to the one that does.
    pub server: String,
    pub batch_lines: usize,
    pub batch_bytes: usize,
    pub batch_interval: Duration,
    pub max_unacked_bytes: usize,
}

impl Config {
    pub fn new(server: String) -> Self {
        Config {
            server,
            batch_lines: 1000,
            batch_bytes: 1 << 20,
            batch_interval: Duration::from_millis(100),
            max_unacked_bytes: 2 << 20,
        }
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

/// The stream key the server uses in `resume_from`: `<rank>/<stream>`, `-` for no rank.
pub fn stream_key(rank: Option<u32>, stream: i32) -> String {
    let rank = rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into());
    let stream = match v1::StreamKind::try_from(stream) {
        Ok(v1::StreamKind::Stdout) => "stdout",
        Ok(v1::StreamKind::Stderr) => "stderr",
        Ok(v1::StreamKind::File) => "file",
        _ => "unknown",
    };
    format!("{rank}/{stream}")
}

/// The key under which a base map keeps the session's `seq_offset` (no stream key looks like it).
pub const OFFSET_KEY: &str = "*";

/// Where a stream's numbers start in a base learnt from the server.
pub fn base_of(base: &HashMap<String, u64>, key: &str) -> u64 {
    base.get(key).or_else(|| base.get(OFFSET_KEY)).copied().unwrap_or(0)
}

/// The base an `OpenSession` answer gives: `resume_from`, and `seq_offset` for other streams.
pub fn base_from(resume_from: &HashMap<String, u64>, seq_offset: u64) -> HashMap<String, u64> {
    let mut base = resume_from.clone();
    base.insert(OFFSET_KEY.to_string(), seq_offset);
    base
}

/// Rebases a batch's local sequence numbers and leaves out lines the server already has.
pub fn prepare_lines(
    lines: &[v1::LogLine],
    session_rank: Option<u32>,
    base: &HashMap<String, u64>,
    resume_from: &HashMap<String, u64>,
) -> Vec<v1::LogLine> {
    lines
        .iter()
        .filter_map(|l| {
            let key = stream_key(l.rank.or(session_rank), l.stream);
            let seq = base_of(base, &key) + l.seq;
            (seq >= resume_from.get(&key).copied().unwrap_or(0)).then(|| v1::LogLine { seq, ..l.clone() })
        })
        .collect()
}

/// One open connection: a session and the sending half of its `ShipLogs` stream.
pub struct Conn {
    pub client: IngestClient<Channel>,
    pub session_id: String,
    pub resume_from: HashMap<String, u64>,
    /// Where this session numbers streams `resume_from` does not name.
    pub seq_offset: u64,
    pub tx: mpsc::Sender<Outgoing>,
}

enum Event {
    Connected(u64, Result<Box<(Conn, mpsc::Receiver<AckEvent>)>, String>),
    Clock(v1::ClockProbe),
    ExitReported(u64, bool),
}

pub enum AckEvent {
    Ack(v1::BatchAck),
    Closed(Option<tonic::Status>),
}

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

/// Why [`connect`] did not connect.
#[derive(Debug)]
pub enum ConnectError {
    /// The server does not own the job: reconnect to the owner at this address.
    Redirect(String),
    Failed(String),
}

impl From<String> for ConnectError {
    fn from(s: String) -> Self {
        ConnectError::Failed(s)
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Redirect(owner) => write!(f, "the job is owned by the coronerd at {owner}"),
            ConnectError::Failed(s) => f.write_str(s),
        }
    }
}

/// A reconnect delay of between half and all of `backoff`, at random: thousands of agents that
/// lost one coronerd together do not all come back in the same instant.
pub fn jittered(backoff: Duration) -> Duration {
    backoff.mul_f64(0.5 + 0.5 * fastrand::f64())
}

/// The server list of [`Config::server`].
pub fn servers(list: &str) -> Vec<&str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()
}

fn open_refused(s: tonic::Status) -> ConnectError {
    let owner = s.metadata().get("coroner-owner").and_then(|v| v.to_str().ok());
    match owner {
        Some(o) if s.code() == tonic::Code::FailedPrecondition => ConnectError::Redirect(o.to_string()),
        _ => ConnectError::Failed(format!("open session: {}", s.message())),
    }
}

/// Opens a channel, a session and a `ShipLogs` stream.
pub async fn connect(
    channel: Channel,
    request: v1::OpenSessionRequest,
) -> Result<(Conn, mpsc::Receiver<AckEvent>), ConnectError> {
    let mut client = IngestClient::new(channel.clone());
    let open = tokio::time::timeout(Duration::from_secs(5), client.open_session(request))
        .await
        .map_err(|_| "open session: timed out".to_string())?
        .map_err(open_refused)?
        .into_inner();
    // Sent batches leave this channel as fast as the connection takes them: a few suffice.
    let (tx, rx) = mpsc::channel::<Outgoing>(8);
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut acks = tokio::time::timeout(Duration::from_secs(5), ship_logs(channel, stream))
        .await
        .map_err(|_| "ship logs: timed out".to_string())?
        .map_err(|s| format!("ship logs: {}", s.message()))?
        .into_inner();
    let (ack_tx, ack_rx) = mpsc::channel(256);
    tokio::spawn(async move {
        loop {
            let event = match acks.message().await {
                Ok(Some(ack)) => AckEvent::Ack(ack),
                Ok(None) => AckEvent::Closed(None),
                Err(status) => AckEvent::Closed(Some(status)),
            };
            let closed = matches!(event, AckEvent::Closed(_));
            if ack_tx.send(event).await.is_err() || closed {
                break;
            }
        }
    });
    let conn = Conn { client, session_id: open.session_id, resume_from: open.resume_from, seq_offset: open.seq_offset, tx };
    Ok((conn, ack_rx))
}

/// `Ingest.ShipLogs` with batches sent as encoded bytes (the generated client would encode
/// `LogBatch` messages again).
async fn ship_logs(
    channel: Channel,
    batches: impl tokio_stream::Stream<Item = Outgoing> + Send + 'static,
) -> Result<tonic::Response<tonic::Streaming<v1::BatchAck>>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| tonic::Status::unavailable(format!("the connection is not ready: {e}")))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/coroner.v1.Ingest/ShipLogs");
    let mut request = tonic::Request::new(batches);
    request.extensions_mut().insert(tonic::GrpcMethod::new("coroner.v1.Ingest", "ShipLogs"));
    grpc.streaming(request, path, ShipCodec).await
}

pub async fn open_channel(server: &str) -> Result<Channel, String> {
    let endpoint = coroner_proto::auth::endpoint(server)?
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true);
    let channel = endpoint.connect().await.map_err(|e| format!("connect to {server}: {e}"))?;
    Ok(coroner_proto::auth::channel(channel))
}

pub struct Shipper {
    cfg: Config,
    session: v1::OpenSessionRequest,
    queue: Arc<LineQueue>,
    spool: Option<SpoolWriter>,
    orphans: Vec<(PathBuf, File)>,
    pending: VecDeque<Pending>,
    mem_bytes: usize,
    next_id: u64,
    base: Option<HashMap<String, u64>>,
    clock: Vec<v1::ClockProbe>,
    events_tx: mpsc::UnboundedSender<Event>,
    /// Batches were written to the spool since the last sync started.
    unsynced: bool,
    /// The spool refused a batch (its size limit): new batches are held in memory only, until
    /// every spooled batch is acknowledged and the spool starts over ([`Shipper::reclaim_spool`]).
    spool_full: bool,
    /// The process end is in the spool and not acknowledged (the spool must not start over).
    exit_in_spool: bool,
    /// Batches went into the spool since it (last) started: starting over would free something.
    spooled_any: bool,
    /// Lines of batches given up after they were formed (refused by the server as invalid, or
    /// unreadable from the spool): reported with the queue's drops.
    lost: u64,
    sync_task: Option<tokio::task::JoinHandle<()>>,
    /// Where each new connection's client and session are published (for snapshot uploads).
    conn_watch: Option<tokio::sync::watch::Sender<Option<(IngestClient<Channel>, String)>>>,
}

/// A connection's client and session id, as the shipper publishes them.
pub type ConnWatch = tokio::sync::watch::Receiver<Option<(IngestClient<Channel>, String)>>;

impl Shipper {
    pub fn new(
        cfg: Config,
        session: v1::OpenSessionRequest,
        queue: Arc<LineQueue>,
        spool: Option<SpoolWriter>,
        orphans: Vec<(PathBuf, File)>,
    ) -> Self {
        let (events_tx, _) = mpsc::unbounded_channel();
        queue.set_draining(spool.is_some());
        Shipper {
            cfg,
            session,
            queue,
            spool,
            orphans,
            pending: VecDeque::new(),
            mem_bytes: 0,
            next_id: 0,
            base: None,
            clock: Vec::new(),
            events_tx,
            unsynced: false,
            spool_full: false,
            exit_in_spool: false,
            spooled_any: false,
            lost: 0,
            sync_task: None,
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
        let mut gen = 0u64;
        let mut conn: Option<Conn> = None;
        let mut acks: Option<mpsc::Receiver<AckEvent>> = None;
        let mut connecting = false;
        let mut next_connect = Instant::now();
        let mut backoff = Duration::from_millis(200);
        let mut warned = false;
        // No server has answered this agent yet: at the end, nothing is worth waiting for.
        let mut never_connected = true;
        let mut next_probe = Instant::now();
        let mut finishing: Option<Finish> = None;
        let mut exit_spooled = false;
        let mut exit_state = ExitState::NotSent;

        loop {
            tokio::select! {
                Some(f) = finish.recv(), if finishing.is_none() => finishing = Some(f),
                Some(ev) = events.recv() => match ev {
                    Event::Connected(g, result) if g == gen => {
                        connecting = false;
                        match result {
                            Ok(pair) => {
                                let (c, rx) = *pair;
                                if warned {
                                    tracing::info!("reconnected to {}", self.cfg.server);
                                }
                                warned = false;
                                never_connected = false;
                                backoff = Duration::from_millis(200);
                                self.on_connected(&c);
                                if let Some(w) = &self.conn_watch {
                                    let _ = w.send(Some((c.client.clone(), c.session_id.clone())));
                                }
                                conn = Some(c);
                                acks = Some(rx);
                                next_probe = Instant::now();
                            }
                            Err(e) => {
                                if !warned {
                                    let spool = self.spool.as_ref().map(|s| s.path().display().to_string());
                                    tracing::warn!("{e}; will retry, spooling to {}", spool.as_deref().unwrap_or("memory only"));
                                    warned = true;
                                }
                                next_connect = Instant::now() + jittered(backoff);
                                backoff = (backoff * 2).min(Duration::from_secs(5));
                            }
                        }
                    }
                    Event::Clock(sample) => self.clock.push(sample),
                    Event::ExitReported(g, ok) if g == gen => {
                        exit_state = if ok { ExitState::Acked } else { ExitState::NotSent };
                        if ok {
                            self.spool_append(&Record::ExitAcked, false);
                            self.exit_in_spool = false;
                        }
                    }
                    _ => {}
                },
                Some(ack) = async { match acks.as_mut() { Some(rx) => rx.recv().await, None => std::future::pending().await } } => match ack {
                    AckEvent::Ack(a) => self.on_ack(a),
                    AckEvent::Closed(status) => {
                        self.on_closed(status.as_ref());
                        if !warned {
                            tracing::warn!("lost the connection to {}; will reconnect", self.cfg.server);
                            warned = true;
                        }
                        conn = None;
                        acks = None;
                        gen += 1;
                        if exit_state == ExitState::InFlight {
                            exit_state = ExitState::NotSent;
                        }
                        next_connect = Instant::now() + jittered(backoff);
                    }
                },
                _ = queue.notify.notified() => {}
                _ = tick.tick() => {}
            }

            self.form_batches();
            self.sync_in_background();
            if let Some(f) = &finishing {
                if !exit_spooled {
                    let mut exit = f.exit.clone();
                    exit.dropped_lines = f.exit.dropped_lines.saturating_add(self.dropped());
                    self.exit_in_spool = self.spool_append(&Record::Exit(exit), true).is_some() && exit_state != ExitState::Acked;
                    exit_spooled = true;
                }
            }
            let now = Instant::now();
            if conn.is_none() && !connecting && now >= next_connect {
                connecting = true;
                gen += 1;
                self.spawn_connect(gen);
            }
            if let Some(c) = &conn {
                if now >= next_probe {
                    next_probe = now + clock::PROBE_INTERVAL;
                    let tx = self.events_tx.clone();
                    let (client, sid) = (c.client.clone(), c.session_id.clone());
                    tokio::spawn(async move {
                        if let Some(s) = clock::probe(client, sid).await {
                            let _ = tx.send(Event::Clock(s));
                        }
                    });
                }
                self.send_ready(c);
                if let (Some(f), ExitState::NotSent) = (&finishing, exit_state) {
                    exit_state = ExitState::InFlight;
                    let mut exit = f.exit.clone();
                    exit.session_id = c.session_id.clone();
                    exit.dropped_lines = f.exit.dropped_lines.saturating_add(self.dropped());
                    let (mut client, tx, g) = (c.client.clone(), self.events_tx.clone(), gen);
                    tokio::spawn(async move {
                        let ok = tokio::time::timeout(Duration::from_secs(5), client.report_exit(exit))
                            .await
                            .is_ok_and(|r| r.is_ok());
                        let _ = tx.send(Event::ExitReported(g, ok));
                    });
                }
            }
            if let Some(f) = &finishing {
                let done = self.pending.is_empty() && self.queue.is_empty() && exit_state == ExitState::Acked;
                // No server ever answered: the spool holds everything (lines and the end) already,
                // and holding the launcher for the linger would buy nothing. (A server that
                // answered before and went away is retried until the linger: it may be a restart
                // or another instance taking the job over.)
                let unreachable = conn.is_none() && warned && never_connected && self.queue.is_empty() && self.spool.is_some() && !self.spool_full;
                if done || unreachable || Instant::now() >= f.deadline {
                    break;
                }
            }
        }
        self.summary(exit_state == ExitState::Acked)
    }

    fn summary(mut self, exit_reported: bool) -> Summary {
        tracing::debug!("the line queue held at most {} KiB", self.queue.peak_bytes() >> 10);
        let unacked_lines: usize = self.pending.iter().map(|p| p.count).sum();
        let mut spool_kept = None;
        if let Some(spool) = self.spool.take() {
            if unacked_lines == 0 && exit_reported {
                if let Err(e) = spool.remove() {
                    tracing::debug!("remove the spool: {e}");
                }
            } else {
                spool_kept = Some(spool.path().to_path_buf());
            }
        }
        Summary { unacked_lines, exit_reported, dropped: self.dropped(), spool_kept }
    }

    /// Lines that will never reach the server: dropped by the full queue, or given up in batches.
    fn dropped(&self) -> u64 {
        self.queue.dropped() + self.lost
    }

    fn spawn_connect(&mut self, gen: u64) {
        // Each attempt tries the next server of the list.
        let list = servers(&self.cfg.server);
        let server = list.get(gen as usize % list.len().max(1)).copied().unwrap_or_default().to_string();
        let mut request = self.session.clone();
        // Reopening: keep the lane the first session gave.
        request.seq_offset = self.base.as_ref().map(|b| base_of(b, OFFSET_KEY));
        let orphans = std::mem::take(&mut self.orphans);
        let tx = self.events_tx.clone();
        tokio::spawn(async move {
            let result = async {
                let channel = open_channel(&server).await?;
                for (path, file) in orphans {
                    replay::replay(channel.clone(), path, file).await;
                }
                let connected = match connect(channel, request.clone()).await {
                    Err(ConnectError::Redirect(owner)) => {
                        tracing::info!("{server} does not own this job; connecting to its owner at {owner}");
                        connect(open_channel(&owner).await?, request).await
                    }
                    other => other,
                };
                connected.map(Box::new).map_err(|e| e.to_string())
            }
            .await;
            let _ = tx.send(Event::Connected(gen, result));
        });
    }

    fn on_connected(&mut self, c: &Conn) {
        if self.base.is_none() {
            let base = base_from(&c.resume_from, c.seq_offset);
            self.spool_append(&Record::Base(base.clone()), true);
            self.base = Some(base);
        }
        for p in &mut self.pending {
            p.sent = false;
        }
    }

    fn on_ack(&mut self, ack: v1::BatchAck) {
        if let Some(i) = self.pending.iter().position(|p| p.id == ack.batch_id) {
            let p = self.pending.remove(i).expect("index exists");
            if p.body.is_some() {
                self.mem_bytes -= p.bytes;
            }
            if p.spool_at.is_some() {
                self.spool_append(&Record::Ack(p.id), false);
            }
        }
    }

    fn on_closed(&mut self, status: Option<&tonic::Status>) {
        if let Some(s) = status {
            tracing::debug!("log stream closed: {s}");
            // The server refused a batch as invalid: resending it would fail forever.
            if s.code() == tonic::Code::InvalidArgument {
                if let Some(i) = self.pending.iter().position(|p| p.sent) {
                    let p = self.pending.remove(i).expect("index exists");
                    tracing::warn!("the server refused a batch of {} lines ({}); dropping it", p.count, s.message());
                    self.lost += p.count as u64;
                    if p.body.is_some() {
                        self.mem_bytes -= p.bytes;
                    }
                    if p.spool_at.is_some() {
                        self.spool_append(&Record::Ack(p.id), false);
                    }
                }
            }
        }
        for p in &mut self.pending {
            p.sent = false;
        }
    }

    /// Moves queued lines into encoded, spooled, pending batches; the batches formed here share
    /// one sync.
    fn form_batches(&mut self) {
        self.reclaim_spool();
        let rank = self.session.rank;
        let mut formed: Vec<Formed> = Vec::new();
        let mut formed_bytes = 0;
        // One round forms at most half of `max_unacked_bytes` (so sends and acks interleave with
        // forming in a burst, and memory stays bounded).
        while formed_bytes < self.cfg.max_unacked_bytes / 2 {
            if !self.can_spool() && self.mem_bytes + formed_bytes >= self.cfg.max_unacked_bytes {
                // Nowhere to put more: let the queue fill and drop routine lines.
                break;
            }
            let lines = self.queue.take_batch(self.cfg.batch_lines, self.cfg.batch_bytes);
            if lines.is_empty() {
                break;
            }
            let id = self.next_id;
            self.next_id += 1;
            let capacity = lines.iter().map(|l| l.raw.len() + 32).sum::<usize>() + 16;
            let base = self.base.as_ref();
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
    fn reclaim_spool(&mut self) {
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
        if let Some(base) = self.base.clone() {
            self.spool_append(&Record::Base(base), true);
        }
        if self.spool.is_some() {
            self.queue.set_draining(true);
        }
    }

    /// Whether formed batches can go to the spool (else they are held in memory only).
    fn can_spool(&self) -> bool {
        self.spool.is_some() && !self.spool_full
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
        for p in self.pending.iter_mut() {
            if self.mem_bytes <= self.cfg.max_unacked_bytes {
                break;
            }
            if p.spool_at.is_some() && p.body.is_some() {
                p.body = None;
                self.mem_bytes -= p.bytes;
            }
        }
    }

    /// Sends every unsent batch the stream has room for.
    fn send_ready(&mut self, c: &Conn) {
        if !self.clock.is_empty() && self.pending.iter().all(|p| p.sent) {
            // A batch of clock samples only: its body is its id.
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
        let base = self.base.clone().unwrap_or_default();
        let rank = self.session.rank;
        let mut done = Vec::new();
        // What this agent holds unacknowledged (spooled or in memory), reported to the server.
        let backlog: u64 = self.pending.iter().map(|p| p.bytes as u64).sum();
        for p in self.pending.iter_mut().filter(|p| !p.sent) {
            if c.tx.capacity() == 0 {
                break;
            }
            let resume = |r: &SeqRange| c.resume_from.get(&r.key()).copied().unwrap_or(0);
            let offset = |r: &SeqRange| if p.rebased { 0 } else { base_of(&base, &r.key()) };
            let delivered = p.count > 0 && p.ranges.iter().all(|r| offset(r) + r.last < resume(r));
            p.clock.append(&mut self.clock);
            if delivered && p.clock.is_empty() {
                done.push(p.id);
                continue;
            }
            // Sent as formed unless its numbers must move or some of its lines are delivered.
            let as_is = p.ranges.iter().all(|r| offset(r) == 0 && r.first >= resume(r));
            let body = match (&p.body, p.spool_at, &self.spool) {
                (Some(b), _, _) => Ok(b.clone()),
                (None, Some(at), Some(spool)) => spool.read_batch_payload(at).map(|(b, _)| b),
                _ => Err(std::io::Error::other("neither in memory nor spooled")),
            };
            let out = match body {
                Ok(body) if as_is => Outgoing::new(&c.session_id, p.clock.clone(), backlog, body),
                Ok(body) => match v1::LogBatch::decode(body) {
                    Ok(b) => {
                        let own = HashMap::new();
                        let lines = prepare_lines(&b.lines, rank, if p.rebased { &own } else { &base }, &c.resume_from);
                        if lines.is_empty() && p.clock.is_empty() {
                            done.push(p.id);
                            continue;
                        }
                        let batch = v1::LogBatch { session_id: c.session_id.clone(), batch_id: p.id, lines, clock: p.clock.clone(), spool_backlog: backlog };
                        Outgoing::message(&batch)
                    }
                    Err(e) => {
                        tracing::warn!("batch {} is unreadable ({e}); dropping it", p.id);
                        self.lost += p.count as u64;
                        done.push(p.id);
                        continue;
                    }
                },
                Err(e) => {
                    tracing::warn!("read batch {} back from the spool: {e}; dropping it", p.id);
                    self.lost += p.count as u64;
                    done.push(p.id);
                    continue;
                }
            };
            match c.tx.try_send(out) {
                Ok(()) => p.sent = true,
                Err(_) => break,
            }
        }
        for id in done {
            self.on_ack(v1::BatchAck { batch_id: id, duplicates: 0 });
        }
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
    fn sync_in_background(&mut self) {
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExitState {
    NotSent,
    InFlight,
    Acked,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_delays_are_spread_over_the_upper_half_of_the_backoff() {
        let b = Duration::from_secs(4);
        let d: Vec<Duration> = (0..200).map(|_| jittered(b)).collect();
        assert!(d.iter().all(|d| *d >= b / 2 && *d <= b));
        let distinct: std::collections::HashSet<_> = d.iter().collect();
        assert!(distinct.len() > 150, "delays differ from agent to agent");
    }

    #[test]
    fn lines_are_rebased_and_already_delivered_ones_skipped() {
        let line = |rank: Option<u32>, stream: i32, seq: u64| v1::LogLine { rank, stream, seq, ..Default::default() };
        let lines = vec![line(None, 1, 0), line(None, 1, 1), line(None, 2, 0), line(Some(4), 1, 0)];
        let base: HashMap<String, u64> = [("3/stdout".to_string(), 10)].into();
        let resume: HashMap<String, u64> = [("3/stdout".to_string(), 11), ("4/stdout".to_string(), 0)].into();
        let out = prepare_lines(&lines, Some(3), &base, &resume);
        let got: Vec<(Option<u32>, i32, u64)> = out.iter().map(|l| (l.rank, l.stream, l.seq)).collect();
        assert_eq!(got, vec![(None, 1, 11), (None, 2, 0), (Some(4), 1, 0)]);
        assert_eq!(stream_key(None, 2), "-/stderr");
    }

    #[test]
    fn streams_the_server_did_not_name_start_at_the_sessions_offset() {
        let line = |stream: i32, seq: u64| v1::LogLine { stream, seq, ..Default::default() };
        let base = base_from(&[("3/stdout".to_string(), 10)].into(), 1 << 40);
        let out = prepare_lines(&[line(1, 0), line(2, 5)], Some(3), &base, &HashMap::new());
        let got: Vec<u64> = out.iter().map(|l| l.seq).collect();
        assert_eq!(got, vec![10, (1 << 40) + 5]);
        // A base spooled by an older agent has no offset: streams start at 0.
        assert_eq!(base_of(&HashMap::new(), "3/stderr"), 0);
    }
}
