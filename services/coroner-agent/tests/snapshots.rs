//! Runs the built agent against an in-process Ingest server that accepts snapshot uploads: a
//! faulthandler dump, a flight recorder dump (written where the agent told PyTorch to) and a core
//! file appear while the child runs, and each arrives once, whole, with its sha256, kind and rank.
//! A size cap sends the head of a file with the sha of what was sent and the full size beside it.

mod common;

use coroner_proto::v1;
use coroner_proto::v1::ingest_server::Ingest;
use sha2::{Digest, Sha256};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

#[derive(Default, Clone)]
struct Fake {
    uploads: Arc<Mutex<Vec<Upload>>>,
}

/// A snapshot as the fake server received it: its header and its bytes.
type Upload = (v1::SnapshotHeader, Vec<u8>);

#[tonic::async_trait]
impl Ingest for Fake {
    async fn open_session(&self, _: Request<v1::OpenSessionRequest>) -> Result<Response<v1::OpenSessionResponse>, Status> {
        Ok(Response::new(v1::OpenSessionResponse { session_id: "s1".into(), resume_from: Default::default(), seq_offset: 0 }))
    }
    async fn sync_clock(&self, r: Request<v1::ClockProbe>) -> Result<Response<v1::ClockProbe>, Status> {
        Ok(Response::new(r.into_inner()))
    }
    type ShipLogsStream = Pin<Box<dyn Stream<Item = Result<v1::BatchAck, Status>> + Send>>;
    async fn ship_logs(&self, r: Request<Streaming<v1::LogBatch>>) -> Result<Response<Self::ShipLogsStream>, Status> {
        let out = r.into_inner().map(|b| Ok(v1::BatchAck { batch_id: b?.batch_id, duplicates: 0 }));
        Ok(Response::new(Box::pin(out)))
    }
    async fn report_exit(&self, _: Request<v1::ProcessExit>) -> Result<Response<v1::ExitAck>, Status> {
        Ok(Response::new(v1::ExitAck {}))
    }
    async fn snapshot_status(&self, _: Request<v1::SnapshotStatusRequest>) -> Result<Response<v1::SnapshotStatusResponse>, Status> {
        Err(Status::unimplemented("a server from before SnapshotStatus"))
    }
    async fn upload_snapshot(&self, r: Request<Streaming<v1::SnapshotChunk>>) -> Result<Response<v1::SnapshotAck>, Status> {
        let mut chunks = r.into_inner();
        let (mut header, mut data) = (None, Vec::new());
        while let Some(c) = chunks.next().await {
            let c = c?;
            assert_eq!(c.session_id, "s1");
            assert_eq!(c.offset, data.len() as u64, "chunks arrive in order");
            if c.header.is_some() {
                header = c.header;
            }
            data.extend_from_slice(&c.data);
            if c.last {
                break;
            }
        }
        let header = header.ok_or_else(|| Status::invalid_argument("no header"))?;
        if hex::encode(Sha256::digest(&data)) != header.sha256 || header.size != data.len() as u64 {
            return Err(Status::invalid_argument("sha256 or size mismatch"));
        }
        let id = header.sha256.clone();
        self.uploads.lock().unwrap().push((header, data));
        Ok(Response::new(v1::SnapshotAck { snapshot_id: id, deduplicated: false }))
    }
}

async fn serve() -> (Fake, String) {
    let fake = Fake::default();
    let url = common::serve_ingest(fake.clone()).await;
    (fake, url)
}

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/snapshots").join(name)
}

async fn run_agent(server: String, spool: &std::path::Path, extra: &[&str], script: String) -> std::process::Output {
    let mut args: Vec<String> =
        ["run", "--job", "snap", "--rank", "1", "--server", &server, "--flush-timeout", "10", "--spool-dir"].iter().map(|s| s.to_string()).collect();
    args.push(spool.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["--".to_string(), "sh".into(), "-c".into(), script]);
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_coroner-agent"))
            .args(args)
            .env_remove("TORCH_FR_DUMP_TEMP_FILE")
            .env_remove("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulthandler_dump_a_flight_recorder_dump_and_a_core_are_shipped() {
    let (fake, server) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let (fr, core) = (fixture("hang_nccl_trace_rank_0"), fixture("core.sleep.head"));
    // The child writes like a crashing rank would: faulthandler output, then (in the background,
    // like the NCCL watchdog) a flight recorder dump where the agent pointed PyTorch, then a core.
    let script = format!(
        "test \"$TORCH_NCCL_DUMP_ON_TIMEOUT\" = 1 || exit 9
         printf 'Fatal Python error: Segmentation fault\\n\\nCurrent thread 0x1 (most recent call first):\\n  File \"/opt/job/worker.py\", line 77 in crash\\n' > \"$CORONER_SNAPSHOT_DIR/rank1.faulthandler.txt\"
         sleep 0.7
         cp '{}' \"${{TORCH_FR_DUMP_TEMP_FILE}}1\"
         cp '{}' \"$CORONER_SNAPSHOT_DIR/core.4242\"
         sleep 0.2
         exit 139",
        fr.display(),
        core.display()
    );
    let out = run_agent(server, dir.path(), &[], script).await;
    assert_eq!(out.status.code(), Some(139), "{}", String::from_utf8_lossy(&out.stderr));
    let uploads = fake.uploads.lock().unwrap().clone();
    let mut got: Vec<(String, String, Option<u32>)> = uploads.iter().map(|(h, _)| (h.kind.clone(), h.name.clone(), h.rank)).collect();
    got.sort();
    for want in [("core", "snapshots/core.4242"), ("flight_recorder", "flight_recorder/nccl_trace_rank_1"), ("stack", "snapshots/rank1.faulthandler.txt")] {
        assert!(got.contains(&(want.0.into(), want.1.into(), Some(1))), "{want:?} not in {got:?}");
    }
    // Each once, whole.
    let names: Vec<&String> = got.iter().map(|g| &g.1).collect();
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(names, unique, "a snapshot was shipped twice");
    let (h, data) = uploads.iter().find(|(h, _)| h.kind == "flight_recorder").unwrap();
    assert_eq!(data, &std::fs::read(&fr).unwrap());
    assert_eq!(h.original_size, None);
    assert!(h.captured_ns > 0);
    let (_, data) = uploads.iter().find(|(h, _)| h.kind == "core").unwrap();
    assert_eq!(data.len(), std::fs::metadata(&core).unwrap().len() as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_cap_sends_the_head_with_its_own_sha() {
    let (fake, server) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let core = fixture("core.sleep.head");
    let script = format!("cp '{}' \"$CORONER_SNAPSHOT_DIR/core.7\"; exit 0", core.display());
    let out = run_agent(server, dir.path(), &["--snapshot-cap-bytes", "4096"], script).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let uploads = fake.uploads.lock().unwrap().clone();
    assert_eq!(uploads.len(), 1, "{:?}", uploads.iter().map(|u| &u.0).collect::<Vec<_>>());
    let (h, data) = &uploads[0];
    let full = std::fs::read(&core).unwrap();
    assert_eq!(data.as_slice(), &full[..4096]);
    assert_eq!((h.size, h.original_size), (4096, Some(full.len() as u64)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_snapshots_leaves_the_environment_alone() {
    let (fake, server) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let script = "test -z \"$TORCH_FR_DUMP_TEMP_FILE\" || exit 5; echo x > \"$CORONER_SNAPSHOT_DIR/rank1.stack.txt\"; exit 0".to_string();
    let out = run_agent(server, dir.path(), &["--no-snapshots"], script).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fake.uploads.lock().unwrap().is_empty());
}

/// The snapshot folder is the snapshots' spool: a file an agent could not ship (its server was
/// away) stays in the agent's spool folder, and the next agent for the same job and rank ships it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_left_by_an_agent_whose_server_was_away_is_shipped_by_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let nobody = format!("http://127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let script = "printf 'Fatal Python error: Aborted\\n' > \"$CORONER_SNAPSHOT_DIR/rank1.stack.txt\"; exit 134".to_string();
    let out = run_agent(nobody, dir.path(), &["--flush-timeout", "1"], script).await;
    assert_eq!(out.status.code(), Some(134), "{}", String::from_utf8_lossy(&out.stderr));

    let (fake, server) = serve().await;
    let out = run_agent(server, dir.path(), &[], "exit 0".to_string()).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let uploads = fake.uploads.lock().unwrap().clone();
    let names: Vec<&str> = uploads.iter().map(|(h, _)| h.name.as_str()).collect();
    assert_eq!(names, ["snapshots/rank1.stack.txt"]);
    assert_eq!(uploads[0].1, b"Fatal Python error: Aborted\n");
}
