//! Runs the built agent against an in-process Ingest server: every line arrives with its exact
//! bytes and per-stream sequence numbers, the process end is reported, and a fully acknowledged
//! spool is removed. In launcher mode, lines are filed under the ranks their prefixes name.

mod common;

use coroner_proto::v1;
use coroner_proto::v1::ingest_server::Ingest;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

#[derive(Default, Clone)]
struct Fake {
    sessions: Arc<Mutex<Vec<v1::OpenSessionRequest>>>,
    lines: Arc<Mutex<Vec<v1::LogLine>>>,
    exits: Arc<Mutex<Vec<v1::ProcessExit>>>,
    /// What `OpenSession` says the server already holds.
    resume_from: std::collections::HashMap<String, u64>,
    /// Takes batches but never acknowledges them.
    silent: bool,
}

#[tonic::async_trait]
impl Ingest for Fake {
    async fn open_session(&self, r: Request<v1::OpenSessionRequest>) -> Result<Response<v1::OpenSessionResponse>, Status> {
        self.sessions.lock().unwrap().push(r.into_inner());
        Ok(Response::new(v1::OpenSessionResponse { session_id: "s1".into(), resume_from: self.resume_from.clone(), seq_offset: 0 }))
    }
    async fn sync_clock(&self, r: Request<v1::ClockProbe>) -> Result<Response<v1::ClockProbe>, Status> {
        let mut p = r.into_inner();
        p.t2_server_recv_ns = 1;
        p.t3_server_send_ns = 2;
        Ok(Response::new(p))
    }
    type ShipLogsStream = Pin<Box<dyn Stream<Item = Result<v1::BatchAck, Status>> + Send>>;
    async fn ship_logs(&self, r: Request<Streaming<v1::LogBatch>>) -> Result<Response<Self::ShipLogsStream>, Status> {
        let lines = self.lines.clone();
        let silent = self.silent;
        let out = r.into_inner().filter_map(move |b| {
            let b = match b {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            assert_eq!(b.session_id, "s1");
            lines.lock().unwrap().extend(b.lines);
            (!silent).then_some(Ok(v1::BatchAck { batch_id: b.batch_id, duplicates: 0 }))
        });
        Ok(Response::new(Box::pin(out)))
    }
    async fn report_exit(&self, r: Request<v1::ProcessExit>) -> Result<Response<v1::ExitAck>, Status> {
        self.exits.lock().unwrap().push(r.into_inner());
        Ok(Response::new(v1::ExitAck {}))
    }
    async fn snapshot_status(&self, _: Request<v1::SnapshotStatusRequest>) -> Result<Response<v1::SnapshotStatusResponse>, Status> {
        Err(Status::unimplemented("a server from before SnapshotStatus"))
    }
    async fn upload_snapshot(&self, _: Request<Streaming<v1::SnapshotChunk>>) -> Result<Response<v1::SnapshotAck>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

async fn serve() -> (Fake, String) {
    serve_fake(Fake::default()).await
}

async fn serve_fake(fake: Fake) -> (Fake, String) {
    let url = common::serve_ingest(fake.clone()).await;
    (fake, url)
}

async fn run_agent(server: String, spool: std::path::PathBuf, extra: &[&str], script: &str) -> std::process::Output {
    let mut args: Vec<String> = ["run", "--job", "ship", "--server", &server, "--flush-timeout", "5", "--spool-dir"].iter().map(|s| s.to_string()).collect();
    args.push(spool.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["--", "sh", "-c", script].iter().map(|s| s.to_string()));
    tokio::task::spawn_blocking(move || std::process::Command::new(env!("CARGO_BIN_EXE_coroner-agent")).args(args).output().unwrap()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_arrives_with_its_bytes_and_the_exit_is_reported() {
    let (fake, server) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let out = run_agent(server, dir.path().into(), &["--rank", "2"], "echo a; echo 'b\r'; echo e >&2; printf 'tail\\377'; exit 3").await;
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = fake.lines.lock().unwrap().clone();
    let mut got: Vec<(i32, u64, Vec<u8>)> = lines.iter().map(|l| (l.stream, l.seq, l.raw.clone())).collect();
    got.sort();
    assert_eq!(got, vec![(1, 0, b"a".to_vec()), (1, 1, b"b\r".to_vec()), (1, 2, b"tail\xff".to_vec()), (2, 0, b"e".to_vec())]);
    assert!(lines.iter().all(|l| l.rank.is_none() && l.capture_ns > 0));
    let sessions = fake.sessions.lock().unwrap().clone();
    assert_eq!(sessions.len(), 1);
    assert_eq!((sessions[0].job_id.as_str(), sessions[0].rank), ("ship", Some(2)));
    let exits = fake.exits.lock().unwrap().clone();
    assert_eq!(exits.len(), 1);
    assert_eq!((exits[0].rank, exits[0].exit_code, exits[0].signal), (Some(2), Some(3), None));
    // Everything acknowledged: the spool is gone.
    let left: Vec<_> =
        std::fs::read_dir(dir.path().join("ship/rank-2")).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "spool")).collect();
    assert!(left.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launcher_agent_files_lines_by_prefix() {
    let (fake, server) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let script = "echo '[default0]:hello'; echo '[default1]:[rank5]: Traceback'; echo '[default1]:more'; echo launcher";
    let out = run_agent(server, dir.path().into(), &["--launcher", "torchrun", "--node-rank-base", "4"], script).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let mut got: Vec<(Option<u32>, u64)> = fake.lines.lock().unwrap().iter().map(|l| (l.rank, l.seq)).collect();
    got.sort();
    assert_eq!(got, vec![(None, 0), (Some(4), 0), (Some(5), 0), (Some(5), 1)]);
    let sessions = fake.sessions.lock().unwrap().clone();
    assert_eq!((sessions[0].rank, sessions[0].node_rank_base, sessions[0].launcher.as_str()), (None, Some(4), "torchrun"));
    assert_eq!(fake.exits.lock().unwrap()[0].rank, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_agent_replays_the_spool_a_disconnected_one_left() {
    let dir = tempfile::tempdir().unwrap();
    let dead = "http://127.0.0.1:1".to_string();
    let out = run_agent(dead, dir.path().into(), &["--rank", "1", "--flush-timeout", "0.5"], "echo lost-then-found; exit 7").await;
    assert_eq!(out.status.code(), Some(7));

    let (fake, server) = serve().await;
    let out = run_agent(server, dir.path().into(), &["--rank", "1"], "echo second").await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let sessions = fake.sessions.lock().unwrap().clone();
    assert_eq!(sessions.len(), 2, "the replay opens the earlier agent's session first");
    assert_ne!(sessions[0].agent_instance, sessions[1].agent_instance);
    let raws: Vec<Vec<u8>> = fake.lines.lock().unwrap().iter().map(|l| l.raw.clone()).collect();
    assert_eq!(raws, vec![b"lost-then-found".to_vec(), b"second".to_vec()]);
    let exits: Vec<Option<i32>> = fake.exits.lock().unwrap().iter().map(|e| e.exit_code).collect();
    assert_eq!(exits, vec![Some(7), Some(0)]);
    let left: Vec<_> =
        std::fs::read_dir(dir.path().join("ship/rank-1")).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "spool")).collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_of_rebased_batches_is_replayed_without_rebasing_again() {
    let dir = tempfile::tempdir().unwrap();
    let held: std::collections::HashMap<String, u64> = [("1/stdout".to_string(), 10)].into();
    // The first agent learns that the server holds lines 0-9, numbers its own from 10, and is
    // never acknowledged: its spool keeps the batch exactly as sent.
    let (first, server) = serve_fake(Fake { resume_from: held, silent: true, ..Fake::default() }).await;
    let out = run_agent(server, dir.path().into(), &["--rank", "1", "--flush-timeout", "1"], "echo x; echo y").await;
    assert_eq!(out.status.code(), Some(0));
    let sent: Vec<u64> = first.lines.lock().unwrap().iter().map(|l| l.seq).collect();
    assert_eq!(sent, vec![10, 11]);

    // Meanwhile line 10 got committed: the replay sends 11 only, numbered as first sent.
    let held: std::collections::HashMap<String, u64> = [("1/stdout".to_string(), 11)].into();
    let (fake, server) = serve_fake(Fake { resume_from: held, ..Fake::default() }).await;
    let out = run_agent(server, dir.path().into(), &["--rank", "1"], "echo second").await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Vec<(u64, Vec<u8>)> = fake.lines.lock().unwrap().iter().map(|l| (l.seq, l.raw.clone())).collect();
    assert_eq!(got, vec![(11, b"y".to_vec()), (11, b"second".to_vec())]);
}

/// A spool at its size limit starts over once the server has acknowledged everything in it (its
/// limit bounds what is unacknowledged, not all that was ever sent), and no line is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_starts_over_once_everything_in_it_is_acknowledged() {
    let (fake, server) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let script = "for i in $(seq 1 40); do seq 1 200; sleep 0.03; done";
    let out = run_agent(server, dir.path().into(), &["--rank", "0", "--spool-max-bytes", "16384"], script).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("is full") && stderr.contains("spooling again"), "{stderr}");
    assert!(!stderr.contains("dropped"), "{stderr}");
    let mut seqs: Vec<u64> = fake.lines.lock().unwrap().iter().map(|l| l.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs, (0..8000).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coroner_agent_ship_sends_what_exited_agents_left_in_their_spools() {
    let dir = tempfile::tempdir().unwrap();
    let dead = "http://127.0.0.1:1".to_string();
    for (rank, line) in [("1", "left-by-rank-1"), ("2", "left-by-rank-2")] {
        let out = run_agent(dead.clone(), dir.path().into(), &["--rank", rank, "--world-size", "4"], &format!("echo {line}; exit 3")).await;
        assert_eq!(out.status.code(), Some(3));
    }
    let (fake, server) = serve().await;
    let ship = |server: String| {
        let dir = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_coroner-agent"))
                .args(["ship", "--server", &server])
                .arg("--spool-dir")
                .arg(dir)
                .env_remove("CORONER_TOKEN")
                .output()
                .unwrap()
        })
    };
    let out = ship(dead.clone()).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "nothing could be sent: {}", String::from_utf8_lossy(&out.stderr));
    let out = ship(server.clone()).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let mut raws: Vec<String> = fake.lines.lock().unwrap().iter().map(|l| String::from_utf8_lossy(&l.raw).into_owned()).collect();
    raws.sort();
    assert_eq!(raws, vec!["left-by-rank-1", "left-by-rank-2"]);
    let mut exits: Vec<(Option<u32>, Option<i32>)> = fake.exits.lock().unwrap().iter().map(|e| (e.rank, e.exit_code)).collect();
    exits.sort();
    assert_eq!(exits, vec![(Some(1), Some(3)), (Some(2), Some(3))]);
    let out = ship(server).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "nothing left is not an error");
    assert_eq!(fake.lines.lock().unwrap().len(), 2, "nothing is sent twice");
}
