//! Bounded storage on a real coronerd (docs/RETENTION.md): retention by size deletes the least
//! recently seen finished job and never a running one; `coroner delete` (the write token, a
//! confirmation, `--force` for a running job) removes a job from every view, and the snapshot
//! contents it shared stay until the last job naming them goes.

use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, admin_client::AdminClient, ingest_client::IngestClient};
use coroner_tests::{binary, data_dir};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const WRITE: &str = "w-storage-0123456789";
const READ: &str = "r-storage-9876543210";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `coroner --server URL [--token T] ARGS` with `stdin` as its standard input.
fn coroner_with_input(server: &TestServer, token: Option<&str>, args: &[&str], stdin: &str) -> Output {
    let mut c = Command::new(binary("coroner"));
    c.env_remove("CORONER_TOKEN").arg("--server").arg(&server.grpc_url);
    if let Some(t) = token {
        c.args(["--token", t]);
    }
    let mut child = c.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run coroner");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("answer");
    child.wait_with_output().expect("coroner ends")
}

fn import(server: &TestServer, token: Option<&str>, bundle: &str, job: &str) {
    let path = data_dir().join("corpus").join(bundle);
    let out = coroner_with_input(server, token, &["import", path.to_str().expect("utf-8"), "--job", job], "");
    assert!(out.status.success(), "import {job}: {}", stderr(&out));
}

/// A job with an open agent session and no end: its verdict stays `running`.
fn running_job(server: &TestServer, token: Option<&str>, job: &str) {
    let url = server.grpc_url.clone();
    let token = token.map(str::to_string);
    runtime().block_on(async move {
        let auth = coroner_proto::auth::ClientAuth::default().with_token(token.as_deref()).expect("token");
        let channel = auth.endpoint(&url).expect("endpoint").connect().await.expect("connect");
        let mut client = IngestClient::new(auth.channel(channel));
        let req = v1::OpenSessionRequest {
            job_id: job.into(),
            rank: Some(0),
            world_size: Some(2),
            host: "node-a".into(),
            agent_instance: "a-1".into(),
            ..Default::default()
        };
        client.open_session(req).await.expect("open a session");
    });
}

fn store(data: &Path) -> std::sync::Arc<dyn coroner_store::Metastore> {
    runtime().block_on(coroner_store::connect(&format!("sqlite://{}?mode=rwc", data.join("coroner.db").display()))).expect("open the server's store")
}

fn jobs_listed(server: &TestServer, token: Option<&str>) -> Vec<String> {
    let out = coroner_with_input(server, token, &["jobs", "--json"], "");
    assert!(out.status.success(), "jobs: {}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("jobs JSON");
    list.as_array().expect("a list").iter().map(|j| j["job_id"].as_str().unwrap_or_default().to_string()).collect()
}

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(150));
    }
}

#[test]
fn retention_by_size_deletes_the_oldest_finished_job_and_never_a_running_one() {
    let data = tempfile::tempdir().expect("tempdir");
    let at = data.path().to_path_buf();
    let finished = ["size-oldest", "size-middle", "size-newest"];
    {
        let first = TestServer::start_with(|c| c.data_dir = at.clone());
        running_job(&first, None, "size-running");
        for job in finished {
            import(&first, None, "nccl2_ok", job);
            first.settled_report(job, Duration::from_secs(20));
        }
        // Each index's size reaches the store a moment after its last commit.
        let store = store(&at);
        wait_for("every finished job's index size is recorded", || {
            runtime().block_on(store.oldest_finished_jobs(10)).is_ok_and(|j| j.len() == 3 && j.iter().all(|j| j.index_bytes > 0))
        });
    }
    let usage = runtime().block_on(store(&at).storage_usage()).expect("usage");
    // One byte less than what is stored: deleting the oldest finished job is enough.
    let limit = usage.total() - 1;
    // As jobs written before index sizes were recorded: the second server measures them first.
    let older = store(&at);
    runtime().block_on(async {
        for job in finished {
            older.set_index_bytes(&coroner_model::JobId::parse(job).expect("job id"), 0).await.expect("forget the size");
        }
    });
    let second = TestServer::start_with(|c| {
        c.data_dir = at.clone();
        c.retain_max_bytes = limit;
        c.retention_interval = Duration::from_millis(200);
    });
    wait_for("the oldest finished job is deleted", || !jobs_listed(&second, None).contains(&"size-oldest".to_string()));
    let (_, metrics) = second.get("/metrics");
    assert!(metrics.contains("coroner_jobs_deleted_total{reason=\"size\"} 1"), "{metrics}");
    assert!(metrics.contains(&format!("coroner_storage_max_bytes {limit}")), "{metrics}");
    let left = jobs_listed(&second, None);
    for job in ["size-running", "size-middle", "size-newest"] {
        assert!(left.contains(&job.to_string()), "{job} was deleted too: {left:?}");
    }
    assert!(!at.join("jobs/size-oldest").exists(), "its index folder is gone");
    assert!(at.join("jobs/size-middle/index").exists());
    let gone = second.coroner(&["report", "size-oldest"]);
    assert!(stderr(&gone).contains("no job"), "{}", stderr(&gone));
}

#[test]
fn coroner_delete_asks_needs_the_write_token_and_removes_the_job_everywhere() {
    let server = TestServer::start_with(|c| {
        c.write_token = Some(WRITE.into());
        c.read_token = Some(READ.into());
    });
    // Two jobs from one bundle share its snapshot contents.
    import(&server, Some(WRITE), "nccl2_oom_r1", "del-first");
    import(&server, Some(WRITE), "nccl2_oom_r1", "del-second");
    let snapshots = |job: &str| {
        let out = coroner_with_input(&server, Some(READ), &["snapshot", "list", job, "--json"], "");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).ok().and_then(|v| v.as_array().map(Vec::len)).unwrap_or(0)
    };
    wait_for("both jobs hold their four snapshots", || snapshots("del-first") == 4 && snapshots("del-second") == 4);
    let contents = server.data_path().join("snapshots");
    let stored = || walk_files(&contents);
    let before = stored();
    assert!(before >= 1, "snapshot contents are stored");

    let declined = coroner_with_input(&server, Some(WRITE), &["delete", "del-first"], "n\n");
    assert_eq!(declined.status.code(), Some(1), "{}", stderr(&declined));
    assert!(stderr(&declined).contains("[y/N]") && stderr(&declined).contains("was not deleted"), "{}", stderr(&declined));
    let read_only = coroner_with_input(&server, Some(READ), &["delete", "del-first", "--yes"], "");
    assert_eq!(read_only.status.code(), Some(2));
    assert!(stderr(&read_only).contains("read token cannot write"), "{}", stderr(&read_only));
    assert!(jobs_listed(&server, Some(READ)).contains(&"del-first".to_string()), "nothing was deleted yet");

    let confirmed = coroner_with_input(&server, Some(WRITE), &["delete", "del-first"], "y\n");
    assert!(confirmed.status.success(), "{}", stderr(&confirmed));
    let said = String::from_utf8_lossy(&confirmed.stdout);
    assert!(said.contains("deleted job del-first (failed,") && said.contains("0 snapshot contents"), "{said}");
    assert_eq!(stored(), before, "del-second still names every content");
    assert!(!jobs_listed(&server, Some(READ)).contains(&"del-first".to_string()));
    let (status, page) = server.get(&format!("/?token={READ}"));
    assert_eq!(status, 200);
    assert!(!page.contains("del-first") && page.contains("del-second"), "{page}");
    let again = coroner_with_input(&server, Some(WRITE), &["delete", "del-first", "--yes"], "");
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("no job \"del-first\""), "{}", stderr(&again));

    let last = coroner_with_input(&server, Some(WRITE), &["delete", "del-second", "--yes"], "");
    assert!(last.status.success(), "{}", stderr(&last));
    assert!(String::from_utf8_lossy(&last.stdout).contains(&format!("{before} snapshot contents")), "{}", String::from_utf8_lossy(&last.stdout));
    assert_eq!(stored(), 0, "the last job naming them took the contents with it");
    let (_, metrics) = server.get(&format!("/metrics?token={READ}"));
    assert!(metrics.contains("coroner_jobs_deleted_total{reason=\"request\"} 2"), "{metrics}");
    assert!(!metrics.contains("coroner_jobs{verdict=\"failed\"}"), "no failed job is left: {metrics}");
}

#[test]
fn a_running_job_is_deleted_only_when_forced() {
    let server = TestServer::start();
    running_job(&server, None, "still-running");
    let refused = server.coroner(&["delete", "still-running", "--yes"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("is running") && stderr(&refused).contains("--force"), "{}", stderr(&refused));
    let url = server.grpc_url.clone();
    let code = runtime().block_on(async move {
        let mut admin = AdminClient::connect(url).await.expect("connect");
        admin.delete_job(v1::DeleteJobRequest { job_id: "never-seen".into(), force: false }).await.expect_err("unknown job").code()
    });
    assert_eq!(code, tonic::Code::NotFound);
    let forced = server.coroner(&["delete", "still-running", "--yes", "--force"]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert!(String::from_utf8_lossy(&forced.stdout).contains("deleted job still-running (running,"));
    assert!(!jobs_listed(&server, None).contains(&"still-running".to_string()));
}

fn walk_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n != "partial"))
        .map(|p| if p.is_dir() { walk_files(&p) } else { 1 })
        .sum()
}
