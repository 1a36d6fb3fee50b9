//! Bad input on coronerd's gRPC port: bytes that are no protobuf, ranks beyond the world size,
//! 10 MB lines (Ingest and OTLP), snapshot names that climb out of a folder.

use crate::served::{runtime, TestServer};
use bytes::{Buf, BufMut, Bytes};
use coroner_proto::v1::{self, ingest_client::IngestClient, query_client::QueryClient};
use opentelemetry_proto::tonic::collector::logs::v1::{logs_service_client::LogsServiceClient, ExportLogsServiceRequest};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use sha2::{Digest, Sha256};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};

/// Sends and receives raw bytes: what a broken or hostile client puts on the wire.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

/// Not a protobuf message: a length-delimited field whose length runs past the end, then junk.
const GARBAGE: &[u8] = b"\x0a\xff\xff\xff\xff\x0f\x12garbage\xff\xfe";

async fn open(client: &mut IngestClient<Channel>, job: &str, rank: Option<u32>, world: Option<u32>, host: &str) -> Result<String, Status> {
    let req = v1::OpenSessionRequest {
        job_id: job.into(),
        rank,
        world_size: world,
        host: host.into(),
        agent_instance: format!("{job}-{host}-{rank:?}"),
        ..Default::default()
    };
    client.open_session(req).await.map(|r| r.into_inner().session_id)
}

/// Ships one batch and waits for its acknowledgement (or the stream's status).
async fn ship(client: &mut IngestClient<Channel>, session: &str, lines: Vec<v1::LogLine>) -> Result<v1::BatchAck, Status> {
    let batch = v1::LogBatch { session_id: session.into(), batch_id: 1, lines, ..Default::default() };
    let mut acks = client.ship_logs(tokio_stream::iter(vec![batch])).await?.into_inner();
    acks.message().await?.ok_or_else(|| Status::unknown("the stream ended without an acknowledgement"))
}

fn line(seq: u64, stream: i32, rank: Option<u32>, text: &[u8]) -> v1::LogLine {
    v1::LogLine { seq, stream, rank, raw: text.to_vec(), capture_ns: 1_700_000_000_000_000_000 + seq as i64, ..Default::default() }
}

async fn search(q: &mut QueryClient<Channel>, job: &str, query: &str) -> v1::SearchResponse {
    q.search(v1::SearchRequest { job_id: job.into(), query: query.into(), limit: 10, ..Default::default() }).await.expect("search").into_inner()
}

async fn report_notes(q: &mut QueryClient<Channel>, job: &str) -> Vec<String> {
    let r = q.get_report(v1::GetReportRequest { job_id: job.into() }).await.expect("report").into_inner();
    let json: serde_json::Value = serde_json::from_str(&r.report_json).expect("report JSON");
    json["notes"].as_array().map(|n| n.iter().filter_map(|x| x.as_str().map(String::from)).collect()).unwrap_or_default()
}

/// Raw garbage on `OpenSession` and on `ShipLogs`, over a real HTTP/2 connection: each call gets
/// a status that says the bytes could not be decoded, and the server goes on serving agents.
#[test]
fn garbage_bytes_on_open_session_and_ship_logs_get_a_clear_status_and_the_server_keeps_serving() {
    let server = TestServer::start();
    runtime().block_on(async {
        let channel = Channel::from_shared(server.grpc_url.clone()).expect("url").connect().await.expect("connect");
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.expect("ready");
        let path = tonic::codegen::http::uri::PathAndQuery::from_static("/coroner.v1.Ingest/OpenSession");
        let err = grpc.unary(tonic::Request::new(Bytes::from_static(GARBAGE)), path, Raw).await.expect_err("garbage opens no session");
        assert!(matches!(err.code(), Code::Internal | Code::InvalidArgument), "{err:?}");
        assert!(err.message().contains("decode"), "the status says why: {err:?}");

        grpc.ready().await.expect("ready");
        let path = tonic::codegen::http::uri::PathAndQuery::from_static("/coroner.v1.Ingest/ShipLogs");
        let request = tonic::Request::new(tokio_stream::iter(vec![Bytes::from_static(GARBAGE)]));
        let status = match grpc.streaming(request, path, Raw).await {
            Err(s) => s,
            Ok(resp) => match resp.into_inner().message().await {
                Ok(Some(ack)) => panic!("garbage was acknowledged: {ack:?}"),
                Ok(None) => panic!("the log stream ended without saying why"),
                Err(s) => s,
            },
        };
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("could not be decoded"), "{status:?}");

        // The same connection and a new one still serve a well-formed agent.
        let mut client = IngestClient::new(channel);
        let session = open(&mut client, "after-garbage", Some(0), Some(1), "node-a").await.expect("a good session");
        let ack = ship(&mut client, &session, vec![line(0, 1, None, b"a good line")]).await.expect("a good batch");
        assert_eq!((ack.batch_id, ack.duplicates), (1, 0));
        let mut fresh = IngestClient::connect(server.grpc_url.clone()).await.expect("connect again");
        open(&mut fresh, "after-garbage", Some(0), Some(1), "node-a").await.expect("another session");
    });
}

/// A session for a rank beyond its world size, or with an absurd world size, is refused with the
/// reason. A launcher's line filed under a rank beyond the world size, or with an unknown stream,
/// costs only itself: the batch's other lines are kept, and the report says what happened.
#[test]
fn ranks_beyond_the_world_size_are_refused_or_kept_with_a_warning() {
    let server = TestServer::start();
    runtime().block_on(async {
        let mut client = IngestClient::connect(server.grpc_url.clone()).await.expect("connect");
        let err = open(&mut client, "ranks", Some(4), Some(4), "node-a").await.expect_err("rank 4 of 4");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("rank 4 is beyond the world size 4"), "{err:?}");
        let err = open(&mut client, "ranks", Some(0), Some(4_000_000_000), "node-a").await.expect_err("four billion ranks");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("world size 4000000000 is beyond the largest"), "{err:?}");

        let launcher = open(&mut client, "ranks", None, Some(4), "node-l").await.expect("a launcher session");
        let lines = vec![
            line(0, 1, Some(1), b"worker one speaks"),
            line(0, 1, Some(9), b"rank nine speaks"),
            line(0, 1, None, b"launcher itself speaks"),
            line(1, 0, None, b"unknown stream speaks"),
            line(1, 1, Some(1), b"worker one again"),
        ];
        let ack = ship(&mut client, &launcher, lines).await.expect("the batch is acknowledged, not refused whole");
        assert_eq!(ack.duplicates, 0);
        let mut q = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        assert_eq!(search(&mut q, "ranks", "speaks").await.total, 3, "the good lines and the one beyond the world size");
        assert_eq!(search(&mut q, "ranks", "again").await.total, 1);
        let nine = search(&mut q, "ranks", "nine").await;
        assert_eq!(nine.hits.first().and_then(|h| h.rank), Some(9));
        let notes = report_notes(&mut q, "ranks").await;
        assert!(notes.iter().any(|n| n.contains("rank 9, beyond its world size 4") && n.contains("node-l")), "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("unknown stream kind")), "{notes:?}");
    });
}

fn resource_logs(job: &str, body: Vec<u8>) -> ResourceLogs {
    let kv = |k: &str, v: Value| KeyValue { key: k.into(), value: Some(AnyValue { value: Some(v) }), ..Default::default() };
    ResourceLogs {
        resource: Some(Resource {
            attributes: vec![kv("coroner.job.id", Value::StringValue(job.into())), kv("coroner.rank", Value::IntValue(0))],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            log_records: vec![LogRecord { time_unix_nano: 1, body: Some(AnyValue { value: Some(Value::BytesValue(body)) }), ..Default::default() }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A 10 MB line sent straight to `ShipLogs` (by a client that does not cut it, unlike the agent)
/// or as an OTLP log body is kept up to 1 MiB, with the marker saying how much was cut.
#[test]
fn a_ten_megabyte_line_over_grpc_or_otlp_is_cut_at_the_stated_limit_with_a_marker() {
    let server = TestServer::start();
    let mut big = b"wirebig ".to_vec();
    big.extend(std::iter::repeat_n(b'y', 10 << 20));
    let cut = big.len() - coroner_model::MAX_LINE_BYTES;
    let marker = format!("[coroner: truncated {cut} bytes]");
    runtime().block_on(async {
        let mut client = IngestClient::connect(server.grpc_url.clone()).await.expect("connect");
        let session = open(&mut client, "long-lines", Some(0), Some(1), "node-a").await.expect("session");
        ship(&mut client, &session, vec![line(0, 1, None, &big), line(1, 1, None, b"wiresmall after")]).await.expect("acknowledged");
        let mut otlp_body = b"otlpbig ".to_vec();
        otlp_body.extend(std::iter::repeat_n(b'z', 10 << 20));
        let mut logs = LogsServiceClient::connect(server.grpc_url.clone()).await.expect("connect");
        logs.export(ExportLogsServiceRequest { resource_logs: vec![resource_logs("long-lines-otlp", otlp_body)] }).await.expect("export");

        let mut q = QueryClient::connect(server.grpc_url.clone()).await.expect("connect").max_decoding_message_size(16 << 20);
        for (job, word) in [("long-lines", "wirebig"), ("long-lines-otlp", "otlpbig")] {
            let hits = search(&mut q, job, word).await;
            let l = &hits.hits.first().unwrap_or_else(|| panic!("{word}: {hits:?}")).line;
            assert!(l.ends_with(&marker), "{word}: ends with {:?}", &l[l.len().saturating_sub(60)..]);
            assert_eq!(l.len(), coroner_model::MAX_LINE_BYTES + 1 + marker.len(), "{word}");
        }
        assert_eq!(search(&mut q, "long-lines", "wiresmall").await.total, 1);
    });
}

fn header(name: &str, content: &[u8]) -> v1::SnapshotHeader {
    v1::SnapshotHeader {
        rank: Some(0),
        kind: "stack".into(),
        name: name.into(),
        size: content.len() as u64,
        sha256: hex::encode(Sha256::digest(content)),
        captured_ns: 1,
        original_size: None,
    }
}

async fn upload(client: &mut IngestClient<Channel>, session: &str, h: &v1::SnapshotHeader, content: &[u8]) -> Result<v1::SnapshotAck, Status> {
    let chunk = v1::SnapshotChunk { session_id: session.into(), header: Some(h.clone()), offset: 0, data: content.to_vec(), last: true };
    client.upload_snapshot(tokio_stream::iter(vec![chunk])).await.map(|r| r.into_inner())
}

/// Snapshot names that would climb out of a folder (or carry a NUL) are refused with the reason,
/// on an upload and on `SnapshotStatus` for content the server already holds; none is listed.
#[test]
fn snapshot_names_with_path_traversal_are_refused() {
    let server = TestServer::start();
    runtime().block_on(async {
        let mut client = IngestClient::connect(server.grpc_url.clone()).await.expect("connect");
        let session = open(&mut client, "snap-names", Some(0), Some(1), "node-a").await.expect("session");
        let content = b"Fatal Python error: Aborted\n";
        for name in ["../../etc/passwd", "/etc/passwd", "snapshots/../../../etc/passwd", "snapshots/a\0b", ""] {
            let err = upload(&mut client, &session, &header(name, content), content).await.expect_err(name);
            assert_eq!(err.code(), Code::InvalidArgument, "{name:?}: {err:?}");
            assert!(err.message().contains("not a safe relative name"), "{name:?}: {err:?}");
        }
        let good = header("snapshots/rank0.stack.txt", content);
        upload(&mut client, &session, &good, content).await.expect("a good name is stored");
        // The content is stored now: SnapshotStatus would file it under any name it is given.
        let status = v1::SnapshotStatusRequest { session_id: session.clone(), header: Some(header("../../etc/passwd", content)) };
        let err = client.snapshot_status(status).await.expect_err("a bad name is not filed");
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        let mut q = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        let listed =
            q.list_snapshots(v1::ListSnapshotsRequest { job_id: "snap-names".into(), ..Default::default() }).await.expect("list").into_inner().snapshots;
        let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["snapshots/rank0.stack.txt"]);
    });
}
