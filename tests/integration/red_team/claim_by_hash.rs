//! Finding: "Claim by hash." `SnapshotStatus` with another job's sha256 filed that content under
//! the caller's job with no bytes sent, with the claimed size (10^15) recorded and the caller's
//! kind picking the reader. Now only the uploader (or a job holding it) files by hash; anyone
//! else must send the bytes, and the size recorded is the stored size.

use super::{ingest, session};
use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
use sha2::{Digest, Sha256};

#[test]
fn another_agent_cannot_file_stored_content_without_its_bytes() {
    let server = TestServer::start();
    runtime().block_on(async {
        let mut client = ingest(&server.grpc_url).await;
        let content = b"Thread 0x7f (most recent call first):\n  File \"train.py\", line 3 in step\n".to_vec();
        let header = v1::SnapshotHeader {
            rank: Some(0),
            kind: "stack".into(),
            name: "stacks/rank0.stack.txt".into(),
            size: content.len() as u64,
            sha256: hex::encode(Sha256::digest(&content)),
            captured_ns: 1,
            original_size: None,
        };
        let victim = session(&mut client, "rt-victim", 0, 1, "node-a", "victim-agent").await;
        let chunk = v1::SnapshotChunk { session_id: victim.clone(), header: Some(header.clone()), offset: 0, data: content.clone(), last: true };
        client.upload_snapshot(tokio_stream::iter(vec![chunk])).await.expect("the victim's upload");

        // The attacker names the victim's sha256, a huge size and another reader.
        let thief = session(&mut client, "rt-thief", 0, 1, "node-z", "thief-agent").await;
        let claim = v1::SnapshotHeader { kind: "core".into(), size: 1_000_000_000_000_000, original_size: Some(1_000_000_000_000_000), ..header.clone() };
        let answer = client
            .snapshot_status(v1::SnapshotStatusRequest { session_id: thief.clone(), header: Some(claim.clone()) })
            .await
            .expect("SnapshotStatus")
            .into_inner();
        assert_eq!(answer, v1::SnapshotStatusResponse { stored: false, resume_offset: 0 }, "the thief must send the bytes");
        let mut query = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        let listed =
            query.list_snapshots(v1::ListSnapshotsRequest { job_id: "rt-thief".into(), ..Default::default() }).await.expect("list").into_inner().snapshots;
        assert!(listed.is_empty(), "filed without bytes: {listed:?}");

        // The uploader itself files it under another of its jobs without sending it again, and
        // the size recorded is what is stored, whatever the header claims.
        let again = session(&mut client, "rt-victim-2", 0, 1, "node-a", "victim-agent").await;
        let answer = client.snapshot_status(v1::SnapshotStatusRequest { session_id: again, header: Some(claim) }).await.expect("SnapshotStatus").into_inner();
        assert!(answer.stored);
        let listed =
            query.list_snapshots(v1::ListSnapshotsRequest { job_id: "rt-victim-2".into(), ..Default::default() }).await.expect("list").into_inner().snapshots;
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].size, listed[0].stored_bytes), (content.len() as u64, content.len() as u64), "{listed:?}");
    });
    let (_, metrics) = server.get("/metrics");
    assert!(super::metric(&metrics, "coroner_limits_refused_total{limit=\"claim_by_hash\"}") >= 1.0, "{metrics}");
}
