//! Finding: "Disk fills without limit." Partial uploads under any 64-hex name were kept forever
//! (2.7 GiB in 20 s from one client); a resume read the whole partial into memory on the async
//! runtime; a new upload at offset 0 reset another client's partial. Now partials stop at
//! `--max-partial-mb`, expire after `--partial-ttl`, a resume checks the file's length, and
//! offset 0 never wipes someone's bytes.

use super::{ingest, session};
use crate::served::{runtime, TestServer};
use coroner_proto::v1;
use std::time::{Duration, Instant};

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum()
}

#[test]
fn partial_uploads_stop_at_the_quota_and_expire() {
    let server = TestServer::start_with(|c| {
        c.limits.max_partial_mb = 8;
        c.limits.partial_ttl = Duration::from_secs(3);
    });
    let partial = server.data_path().join("snapshots").join("partial");
    runtime().block_on(async {
        let mut client = ingest(&server.grpc_url).await;
        let s = session(&mut client, "rt-disk", 0, 1, "node-a", "a").await;
        let mb = vec![7u8; 1 << 20];
        // Random names, never finished: the red team's 2.7 GiB in 20 s.
        let mut refused = None;
        let started = Instant::now();
        for i in 0..64u32 {
            let header =
                v1::SnapshotHeader { kind: "core".into(), name: format!("core/core.{i}"), size: 4 << 20, sha256: format!("{i:064x}"), ..Default::default() };
            let chunks: Vec<v1::SnapshotChunk> = (0..3u64)
                .map(|k| v1::SnapshotChunk { session_id: s.clone(), header: (k == 0).then(|| header.clone()), offset: k << 20, data: mb.clone(), last: false })
                .collect();
            if let Err(e) = client.upload_snapshot(tokio_stream::iter(chunks)).await {
                if e.code() == tonic::Code::ResourceExhausted {
                    refused = Some((i, e.message().to_string()));
                    break;
                }
            }
        }
        let (at, why) = refused.expect("the quota stopped the uploads");
        println!("partial uploads refused after {at} uploads ({:?}): {why}", started.elapsed());
        assert!(why.contains("--max-partial-mb"), "{why}");
        let held = dir_bytes(&partial);
        assert!(held <= 8 << 20, "partials hold {held} bytes against an 8 MiB quota");

        // A resume at the length the server holds works; offset 0 does not wipe it.
        let header = v1::SnapshotHeader { kind: "core".into(), name: "core/core.0".into(), size: 4 << 20, sha256: format!("{:064x}", 0), ..Default::default() };
        let fresh = vec![v1::SnapshotChunk { session_id: s.clone(), header: Some(header.clone()), offset: 0, data: vec![1; 10], last: false }];
        let e = client.upload_snapshot(tokio_stream::iter(fresh)).await.expect_err("offset 0 over someone's bytes");
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("resume"), "{}", e.message());
    });
    // Untouched for the TTL (3 s), the partials are deleted and the quota is free again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while dir_bytes(&partial) > 0 {
        assert!(Instant::now() < deadline, "partials never expired: {} bytes", dir_bytes(&partial));
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, metrics) = server.get("/metrics");
    assert!(super::metric(&metrics, "coroner_limits_refused_total{limit=\"partial_quota\"}") >= 1.0, "{metrics}");
}
