//! Snapshots through the real server: a bundle imported into coronerd gets the same snapshot
//! highlights and flight recorder progress as `coroner analyze` finds offline, because the server
//! reads the stored bytes with the same readers.

use crate::served::TestServer;
use coroner_tests::{binary, data_dir};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn imported_snapshots_get_the_offline_highlights_and_progress() {
    let server = TestServer::start();
    let bundle = data_dir().join("corpus/nccl2_oom_r1");
    let out = server.coroner(&["import", bundle.to_str().expect("utf-8 path"), "--job", "snap-import"]);
    assert!(out.status.success(), "import: {}", String::from_utf8_lossy(&out.stderr));
    let offline_out = Command::new(binary("coroner")).args(["analyze", "--json"]).arg(&bundle).output().expect("analyze");
    let offline: serde_json::Value = serde_json::from_slice(&offline_out.stdout).expect("json");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = server.coroner(&["report", "snap-import", "--json"]);
        let online: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let settled = online["verdict"] != "running" && online["snapshots"].as_array().is_some_and(|s| s.len() == 4);
        if settled || Instant::now() > deadline {
            assert_eq!(online["snapshots"], offline["snapshots"], "snapshot highlights differ");
            assert_eq!(online["collectives"], offline["collectives"], "flight recorder progress differs");
            let fr = &online["snapshots"][0];
            assert_eq!(fr["kind"], "flight_recorder");
            assert!(fr["highlights"][0].as_str().is_some_and(|h| h.contains("pending ALLREDUCE seq 11")), "{fr:#}");
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

mod resume {
    use crate::served::{runtime, TestServer};
    use coroner_proto::v1::{self, ingest_client::IngestClient};
    use sha2::{Digest, Sha256};
    use tonic::transport::Channel;

    async fn session(client: &mut IngestClient<Channel>, job: &str) -> String {
        session_as(client, job, &format!("{job}-agent")).await
    }

    async fn session_as(client: &mut IngestClient<Channel>, job: &str, agent: &str) -> String {
        let req = v1::OpenSessionRequest {
            job_id: job.into(),
            rank: Some(0),
            world_size: Some(1),
            host: "node-a".into(),
            agent_instance: agent.into(),
            ..Default::default()
        };
        client.open_session(req).await.expect("open a session").into_inner().session_id
    }

    fn chunk(session: &str, header: Option<v1::SnapshotHeader>, offset: usize, data: &[u8], last: bool) -> v1::SnapshotChunk {
        v1::SnapshotChunk { session_id: session.into(), header, offset: offset as u64, data: data.to_vec(), last }
    }

    async fn status(client: &mut IngestClient<Channel>, session: &str, header: &v1::SnapshotHeader) -> v1::SnapshotStatusResponse {
        let req = v1::SnapshotStatusRequest { session_id: session.into(), header: Some(header.clone()) };
        client.snapshot_status(req).await.expect("SnapshotStatus").into_inner()
    }

    /// An upload cut off half-way resumes where the server's bytes end, and the stored content
    /// is whole; a later job with the same content sends no bytes at all and still lists it.
    #[test]
    fn an_interrupted_upload_resumes_and_a_stored_content_is_not_sent_again() {
        let server = TestServer::start();
        runtime().block_on(async {
            let mut client = IngestClient::connect(server.grpc_url.clone()).await.expect("connect");
            let s1 = session(&mut client, "resume-1").await;
            let content: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
            let header = v1::SnapshotHeader {
                rank: Some(0),
                kind: "core".into(),
                name: "core/core.4242".into(),
                size: content.len() as u64,
                sha256: hex::encode(Sha256::digest(&content)),
                captured_ns: 1,
                original_size: None,
            };
            assert_eq!(status(&mut client, &s1, &header).await, v1::SnapshotStatusResponse { stored: false, resume_offset: 0 });

            // The first 1 MiB arrives, then the stream breaks (the agent died).
            let half = 1 << 20;
            let cut = tokio_stream::iter(vec![chunk(&s1, Some(header.clone()), 0, &content[..half], false)]);
            assert!(client.upload_snapshot(cut).await.is_err(), "a stream that ends without its last chunk is no snapshot");
            let resume = status(&mut client, &s1, &header).await;
            assert_eq!(resume, v1::SnapshotStatusResponse { stored: false, resume_offset: half as u64 });

            // A chunk at the wrong offset is refused with the reason; the right one completes it.
            let wrong = tokio_stream::iter(vec![chunk(&s1, Some(header.clone()), 7, &content[7..], true)]);
            let err = client.upload_snapshot(wrong).await.expect_err("a resume at an offset the server does not hold");
            assert!(err.message().contains("cannot resume at 7"), "{err:?}");
            let rest = tokio_stream::iter(vec![
                chunk(&s1, Some(header.clone()), half, &content[half..2 * half], false),
                chunk(&s1, None, 2 * half, &content[2 * half..], true),
            ]);
            let ack = client.upload_snapshot(rest).await.expect("the resumed upload").into_inner();
            assert_eq!(ack.snapshot_id, header.sha256);
            let stored = std::fs::read(server.data_path().join("snapshots").join(&header.sha256[..2]).join(&header.sha256)).expect("stored bytes");
            assert!(stored == content, "the stored content is the whole file");

            // Another job of the same agent, the same content: stored already, filed under the
            // new job, no bytes sent (an agent of another identity must send them: red_team/claim_by_hash.rs).
            let s2 = session_as(&mut client, "resume-2", "resume-1-agent").await;
            assert_eq!(status(&mut client, &s2, &header).await, v1::SnapshotStatusResponse { stored: true, resume_offset: 0 });
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let (_, report) = server.get_json("/jobs/resume-2/report.json");
            let names: Vec<String> = report["snapshots"].as_array().into_iter().flatten().filter_map(|s| s["name"].as_str().map(String::from)).collect();
            if names == ["core/core.4242"] {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "resume-2 never listed the deduplicated snapshot: {report}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
