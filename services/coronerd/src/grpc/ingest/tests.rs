//! `ShipLogs` against a whole server in this process.

use coroner_proto::v1::{self, ingest_client::IngestClient};
use std::time::Duration;

/// A stream used to copy the whole session table when it opened and look sessions up in its copy:
/// 1,000 agents made half a million copies (~70 MB at the ingest's peak, growing with the square
/// of the agents). It now looks them up in the one table, so a session opened after the stream
/// began is found.
#[tokio::test]
async fn a_stream_takes_batches_of_a_session_opened_after_it_began() {
    let dir = tempfile::tempdir().expect("a data dir");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (server, bound) = crate::start(crate::Config::for_tests(dir.path().to_path_buf()), shutdown.clone()).await.expect("start coronerd");
    let task = tokio::spawn(server);
    let mut client = IngestClient::connect(format!("http://{}", bound.grpc)).await.expect("connect");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    // The server has answered the call: its handler ran before the session below exists.
    let mut acks = client.ship_logs(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("ShipLogs").into_inner();
    let opened = client
        .open_session(v1::OpenSessionRequest { job_id: "late-session".into(), rank: Some(0), world_size: Some(1), host: "h".into(), ..Default::default() })
        .await
        .expect("OpenSession")
        .into_inner();
    let line = v1::LogLine { seq: 0, capture_ns: 1, stream: v1::StreamKind::Stdout as i32, raw: b"step 1 loss 2.0".to_vec(), ..Default::default() };
    tx.send(v1::LogBatch { session_id: opened.session_id, batch_id: 7, lines: vec![line], ..Default::default() }).await.expect("send");
    let ack = tokio::time::timeout(Duration::from_secs(30), acks.message()).await.expect("an answer in time");
    assert_eq!(ack.expect("an ack, not an error").expect("an ack").batch_id, 7);
    drop(tx);
    shutdown.cancel();
    let _ = task.await;
}
