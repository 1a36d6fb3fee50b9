//! End-to-end ingest: the real coronerd in-process on 127.0.0.1:0 and N simulated agents (tokio
//! tasks speaking the Ingest protocol: OpenSession, then ShipLogs with batches of
//! [`BATCH_LINES`] lines and a window of unacknowledged batches, like the real agent). The clock
//! runs from the first batch sent to the last ack; then a search must find every line.
//!
//! Like the real agent, a simulated agent encodes each batch once, before it is sent (the real
//! one when it forms and spools the batch): here before the clock starts, so the figure is the
//! server's, not this process's protobuf encoder's (the agent's own cost is the agent figure).
//!
//! The reference: the same documents (the committer's `IndexedLine`s) through
//! [`JobIndex::add`] and one [`JobIndex::commit`], no network, no parsing.

use crate::parse::CorpusFile;
use anyhow::{ensure, Context, Result};
use bytes::{BufMut, Bytes};
use coroner_index::{IndexedLine, JobIndex};
use coroner_proto::v1;
use coroner_proto::v1::ingest_client::IngestClient;
use coroner_proto::v1::query_client::QueryClient;
use prost::Message;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

pub const BATCH_LINES: usize = 1000;
/// Unacknowledged batches an agent keeps in flight (the real agent's stream holds 32).
const WINDOW: usize = 16;
/// The last line of every simulated agent carries this word, to be searched for.
const END_MARK: &str = "coronerbenchendmark";

/// A running in-process coronerd.
pub struct Server {
    pub grpc: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<()>>,
    _data_dir: tempfile::TempDir,
}

impl Server {
    pub async fn start() -> Result<Server> {
        let data_dir = tempfile::Builder::new().prefix("coroner-bench-server").tempdir().context("create the server's data dir")?;
        let shutdown = CancellationToken::new();
        let config = coronerd::Config::for_tests(data_dir.path().to_path_buf());
        let (server, bound) = coronerd::start(config, shutdown.clone()).await.context("start coronerd")?;
        let task = tokio::spawn(server);
        Ok(Server { grpc: bound.grpc, shutdown, task, _data_dir: data_dir })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub async fn stop(self) -> Result<()> {
        self.shutdown.cancel();
        self.task.await.context("join coronerd")?
    }

    /// How many committed lines of `job` match `query` (empty: all).
    pub async fn count(&self, job: &str, query: &str) -> Result<u64> {
        let mut q = QueryClient::connect(self.url()).await.context("connect the query client")?;
        let r = q.search(v1::SearchRequest { job_id: job.into(), query: query.into(), limit: 1, ..Default::default() }).await.context("search")?;
        Ok(r.into_inner().total)
    }
}

pub struct IngestFigures {
    pub ingest_lines_per_s: f64,
    pub raw_index_docs_per_s: f64,
    /// CPU seconds of this whole process (server and simulated agents) per million lines,
    /// beside the raw reference's: steadier than the rates on a loaded machine.
    pub ingest_cpu_s_per_million: f64,
    pub raw_cpu_s_per_million: f64,
    pub lines: u64,
    pub agents: u32,
    pub searchable: bool,
}

/// One agent's batches (the `LogBatch` id and lines, encoded), built before the clock starts.
fn encode_batches(batches: &[Vec<v1::LogLine>]) -> Vec<Bytes> {
    batches
        .iter()
        .enumerate()
        .map(|(i, lines)| {
            let batch = v1::LogBatch { batch_id: i as u64, lines: lines.clone(), ..Default::default() };
            Bytes::from(batch.encode_to_vec())
        })
        .collect()
}

/// One agent's lines in batches.
fn agent_batches(files: &[CorpusFile], rank: u32, lines: usize) -> Vec<Vec<v1::LogLine>> {
    let source: Vec<&coroner_model::LogLine> = files.iter().flat_map(|f| &f.lines).collect();
    let offset = rank as usize * 7919 % source.len();
    let mut seqs = [0u64; 4];
    let mut out: Vec<v1::LogLine> = Vec::with_capacity(lines);
    let t0 = crate::synth::DAY_NS + 9 * 3_600_000_000_000;
    for i in 0..lines {
        let l = source[(offset + i) % source.len()];
        let stream = coroner_proto::convert::stream_to_wire(l.stream) as i32;
        let seq = &mut seqs[stream as usize & 3];
        let raw = if i + 1 == lines { format!("rank {rank} done {END_MARK}").into_bytes() } else { l.bytes.clone() };
        out.push(v1::LogLine { seq: *seq, capture_ns: t0 + i as i64 * 1000, stream, raw, rank: None, file: String::new() });
        *seq += 1;
    }
    let mut batches = Vec::new();
    let mut it = out.into_iter().peekable();
    while it.peek().is_some() {
        batches.push(it.by_ref().take(BATCH_LINES).collect());
    }
    batches
}

/// Ships `batches` as one agent would: a session, a ShipLogs stream, a window of unacked batches.
async fn agent(url: String, job: String, rank: u32, world: u32, batches: Vec<Bytes>) -> Result<()> {
    let mut client = IngestClient::connect(url.clone()).await.context("connect")?;
    let open = client
        .open_session(v1::OpenSessionRequest {
            job_id: job,
            rank: Some(rank),
            world_size: Some(world),
            host: crate::synth::host(rank),
            launcher: "none".into(),
            agent_instance: format!("bench-{rank}"),
            ..Default::default()
        })
        .await
        .context("open session")?
        .into_inner();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(WINDOW);
    let mut acks = ship_logs(&url, tokio_stream::wrappers::ReceiverStream::new(rx)).await.context("ship logs")?;
    let total = batches.len();
    let sender = {
        let session = v1::LogBatch { session_id: open.session_id.clone(), ..Default::default() }.encode_to_vec();
        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(WINDOW));
        let p2 = permits.clone();
        let task = tokio::spawn(async move {
            for body in batches {
                let permit = p2.acquire().await.map_err(|_| anyhow::anyhow!("window closed"))?;
                permit.forget();
                // The session id in front of the encoded batch: one LogBatch on the wire.
                let mut message = Vec::with_capacity(session.len() + body.len());
                message.extend_from_slice(&session);
                message.extend_from_slice(&body);
                tx.send(Bytes::from(message)).await.map_err(|_| anyhow::anyhow!("the stream closed"))?;
            }
            Ok::<_, anyhow::Error>(tx)
        });
        (task, permits)
    };
    let mut acked = 0;
    while acked < total {
        let ack = acks.message().await.context("receive an ack")?.context("the server closed the ack stream early")?;
        ensure!(ack.duplicates == 0, "batch {} had {} duplicates", ack.batch_id, ack.duplicates);
        acked += 1;
        sender.1.add_permits(1);
    }
    drop(sender.0.await.context("join the sender")??);
    Ok(())
}

/// Runs the end-to-end figure against `server`, then the raw reference on the same documents.
pub async fn run(server: &Server, files: &[CorpusFile], agents: u32, total_lines: usize) -> Result<IngestFigures> {
    let per_agent = total_lines / agents as usize;
    let job = "bench-ingest".to_string();
    let all: Vec<Vec<Vec<v1::LogLine>>> = (0..agents).map(|r| agent_batches(files, r, per_agent)).collect();
    let encoded: Vec<Vec<Bytes>> = all.iter().map(|b| encode_batches(b)).collect();
    let lines = u64::from(agents) * per_agent as u64;
    // The documents of the reference, exactly as the committer builds them.
    let docs: Vec<IndexedLine> = all.iter().enumerate().flat_map(|(r, batches)| batches.iter().flatten().map(move |l| indexed(r as u32, l))).collect();

    drop(all);
    let cpu0 = process_cpu_s();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (rank, batches) in encoded.into_iter().enumerate() {
        tasks.push(tokio::spawn(agent(server.url(), job.clone(), rank as u32, agents, batches)));
    }
    for t in tasks {
        t.await.context("join an agent")??;
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = process_cpu_s() - cpu0;
    let searchable = server.count(&job, END_MARK).await? == u64::from(agents) && server.count(&job, "").await? == lines;

    let (raw, raw_cpu) = tokio::task::spawn_blocking(move || raw_index(&docs)).await??;
    let per_m = |cpu: f64| cpu / (lines as f64 / 1e6);
    Ok(IngestFigures {
        ingest_lines_per_s: lines as f64 / secs,
        raw_index_docs_per_s: raw,
        ingest_cpu_s_per_million: per_m(cpu),
        raw_cpu_s_per_million: per_m(raw_cpu),
        lines,
        agents,
        searchable,
    })
}

/// `Ingest.ShipLogs` sending already-encoded `LogBatch` bytes.
async fn ship_logs(url: &str, batches: impl tokio_stream::Stream<Item = Bytes> + Send + 'static) -> Result<tonic::Streaming<v1::BatchAck>> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())?.tcp_nodelay(true).connect().await.context("connect")?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.context("the connection is not ready")?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/coroner.v1.Ingest/ShipLogs");
    Ok(grpc.streaming(tonic::Request::new(batches), path, RawCodec).await?.into_inner())
}

/// Writes messages that are already encoded; decodes `BatchAck`s.
#[derive(Clone, Copy)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = v1::BatchAck;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        *self
    }

    fn decoder(&mut self) -> RawCodec {
        *self
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = v1::BatchAck;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<v1::BatchAck>, tonic::Status> {
        v1::BatchAck::decode(buf).map(Some).map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

/// User and system CPU seconds of this process so far (all its threads).
fn process_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Docs per second through `JobIndex::add` and one commit, in a fresh index, and the CPU
/// seconds it took (the merges tantivy starts after the commit are not waited for).
fn raw_index(docs: &[IndexedLine]) -> Result<(f64, f64)> {
    let dir = tempfile::Builder::new().prefix("coroner-bench-raw").tempdir()?;
    let index = JobIndex::open_or_create(&dir.path().join("index"))?;
    let cpu0 = process_cpu_s();
    let started = Instant::now();
    for chunk in docs.chunks(BATCH_LINES) {
        index.add(chunk)?;
    }
    index.commit()?;
    let secs = started.elapsed().as_secs_f64();
    let cpu = process_cpu_s() - cpu0;
    ensure!(index.num_lines() == docs.len() as u64, "the raw index lost lines");
    Ok((docs.len() as f64 / secs, cpu))
}

fn indexed(rank: u32, l: &v1::LogLine) -> IndexedLine {
    IndexedLine {
        rank: Some(rank),
        stream: coroner_proto::convert::stream_from_wire(l.stream, l.seq).unwrap_or(coroner_model::Stream::File),
        seq: l.seq,
        capture_ns: l.capture_ns,
        host: crate::synth::host(rank),
        severity: coroner_parse::severity(&l.raw).as_str().to_string(),
        bytes: l.raw.clone(),
    }
}

/// Size of a folder's files, recursively.
pub fn dir_size(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
