//! Several coronerd instances sharing one PostgreSQL database and one data dir: real agents
//! stream lines, the instance that owns the job is killed with SIGKILL mid-ingest, another takes
//! the lease over, the agents reconnect and replay, and the job ends complete (no line lost, none
//! twice). Prints what it measured: time to takeover, the ingest gap, how queries fared.
//!
//! Each run creates its own PostgreSQL database and drops it (`postgres.rs`:
//! `CORONER_TEST_POSTGRES_URL`, `CORONER_SKIP_POSTGRES=1`).

use crate::postgres::TestDatabase;
use crate::served::{runtime, Served};
use coroner_proto::v1::{self, query_client::QueryClient};
use coroner_tests::binary;
use sqlx::{Connection, PgConnection};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WORLD: u32 = 4;
const LINES: u32 = 4000;
/// Seconds between two lines of one rank: 4000 lines last about 8 s.
const PERIOD: &str = "0.002";
const TTL_S: u64 = 2;

/// Keeps a folder when the thread panics, and says where it is.
struct KeepOnPanic(Option<tempfile::TempDir>);

impl Drop for KeepOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("CORONER_TEST_KEEP_LOGS").is_some() {
            if let Some(dir) = self.0.take() {
                eprintln!("takeover: the instances' logs are kept in {}", dir.keep().display());
            }
        }
    }
}

/// One coronerd of the three, by its instance id.
struct Instance {
    id: String,
    server: Served,
}

impl std::ops::Deref for Instance {
    type Target = Served;
    fn deref(&self) -> &Served {
        &self.server
    }
}

fn start_instance(id: &str, db_url: &str, data: &Path, log: &Path) -> Instance {
    let ttl = TTL_S.to_string();
    let server = Served::start_in(data, &log.join(format!("{id}.log")), &["--database-url", db_url, "--instance-id", id, "--lease-ttl", &ttl]);
    Instance { id: id.to_string(), server }
}

/// A rank that prints `rank R line I` LINES times, steadily.
fn start_agent(servers: &str, job: &str, rank: u32, spool: &Path, log: &Path) -> Child {
    let script = format!("import time\nfor i in range({LINES}):\n    print(f'rank {rank} line {{i}}', flush=True)\n    time.sleep({PERIOD})\n");
    Command::new(binary("coroner-agent"))
        .args(["run", "--job", job, "--server", servers, "--flush-timeout", "60"])
        .arg("--spool-dir")
        .arg(spool)
        .args(["--", "python3", "-c", &script])
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", WORLD.to_string())
        .env("CORONER_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log.join(format!("agent-{rank}.log"))).expect("log file"))
        .spawn()
        .expect("start coroner-agent")
}

/// The job's lines per rank, asked of one instance; `Err` when it could not answer.
async fn counts(url: &str, job: &str) -> Result<Vec<u64>, String> {
    let mut q = QueryClient::connect(url.to_string()).await.map_err(|e| e.to_string())?;
    let r = q
        .count_by_rank(v1::CountByRankRequest { job_id: job.into(), query: String::new() })
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
        .into_inner();
    let mut by_rank = vec![0; WORLD as usize];
    for c in r.counts {
        if let Some(rank) = c.rank {
            by_rank[rank as usize] = c.count;
        }
    }
    Ok(by_rank)
}

/// A plain HTTP/1.0 GET: the status and the `location` header.
fn http_head(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").expect("send");
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    let status = raw.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let location = raw.lines().find_map(|l| l.strip_prefix("location: ").or_else(|| l.strip_prefix("Location: "))).unwrap_or_default().trim().to_string();
    (status, location)
}

async fn owner(admin: &mut PgConnection, job: &str) -> Option<(String, i64)> {
    sqlx::query_as::<_, (String, i64)>(
        "SELECT owner, epoch FROM job_leases WHERE job_id = $1 AND expires_ns > (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000000)::BIGINT",
    )
    .bind(job)
    .fetch_optional(admin)
    .await
    .expect("read the lease")
}

#[test]
fn three_instances_survive_the_owner_being_killed_mid_ingest() {
    let rt = runtime();
    let Some(db) = TestDatabase::create(&rt, "takeover") else { return };
    run(&rt, &db.url);
}

fn run(rt: &tokio::runtime::Runtime, db_url: &str) {
    let mut conn = rt.block_on(PgConnection::connect(db_url)).expect("connect to the test database");
    let admin = &mut conn;
    let data = tempfile::tempdir().expect("shared data dir");
    let logs = tempfile::tempdir().expect("log dir");
    // The instances' logs, kept when the test fails (the panic message names the folder).
    let logs_kept = logs.path().to_path_buf();
    let _keep_on_panic = KeepOnPanic(Some(logs));
    let spool = tempfile::tempdir().expect("spool dir");
    // Each instance migrates the same fresh database at once: the migrator's advisory lock must hold.
    let mut instances: Vec<Instance> = ["i1", "i2", "i3"].iter().map(|id| start_instance(id, db_url, data.path(), &logs_kept)).collect();
    let servers = instances.iter().map(|i| i.grpc_url.as_str()).collect::<Vec<_>>().join(",");
    let job = "takeover-1";
    let mut agents: Vec<Child> = (0..WORLD).map(|r| start_agent(&servers, job, r, spool.path(), &logs_kept)).collect();

    // Wait for a third of the lines, then kill the owner.
    let total = u64::from(WORLD * LINES);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (owner_id, epoch) = loop {
        let done: u64 = rt.block_on(counts(&instances[0].grpc_url, job)).map(|c| c.iter().sum()).unwrap_or(0);
        if done >= total / 3 {
            break rt.block_on(owner(admin, job)).expect("the job has an owner");
        }
        assert!(Instant::now() < deadline, "ingest did not reach a third of the lines: {done}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let victim = instances.iter().position(|i| i.id == owner_id).expect("the owner is one of ours");
    let mut dead = instances.remove(victim);
    let before: u64 = rt.block_on(counts(&dead.grpc_url, job)).map(|c| c.iter().sum()).unwrap_or(0);
    let killed = Instant::now();
    dead.server.kill();

    // Measure: who owns the job, whether the survivors answer queries, and when lines flow again.
    let mut takeover = None;
    let mut failed_queries = Vec::new();
    let mut answered_during = 0;
    let mut resumed = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while resumed.is_none() || takeover.is_none() {
        assert!(Instant::now() < deadline, "no takeover within 60 s (owner {owner_id} killed)");
        if takeover.is_none() {
            if let Some((o, e)) = rt.block_on(owner(admin, job)) {
                if o != owner_id {
                    assert!(e > epoch, "the new owner's epoch {e} is above the old {epoch}");
                    takeover = Some((killed.elapsed(), o));
                }
            }
        }
        let t = killed.elapsed();
        match rt.block_on(counts(&instances[0].grpc_url, job)) {
            Ok(c) => {
                answered_during += 1;
                if resumed.is_none() && c.iter().sum::<u64>() > before {
                    resumed = Some(t);
                }
            }
            Err(e) => failed_queries.push((t, e)),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (takeover_after, new_owner) = takeover.expect("measured");
    let resumed_after = resumed.expect("measured");

    // Every agent finishes and is acknowledged in full.
    for (rank, a) in agents.iter_mut().enumerate() {
        let code = a.wait().expect("agent exit").code();
        assert_eq!(code, Some(0), "rank {rank}'s agent");
    }
    let finished = killed.elapsed();
    // Each rank's lines, exactly once, whichever instance is asked.
    for inst in &instances {
        let c = rt.block_on(counts(&inst.grpc_url, job)).expect("counts after the takeover");
        assert_eq!(c, vec![u64::from(LINES); WORLD as usize], "lines per rank asked of {}", inst.id);
    }
    let lines: i64 = rt
        .block_on(sqlx::query_scalar::<_, i64>("SELECT lines FROM jobs WHERE job_id = $1").bind(job).fetch_one(&mut *admin))
        .unwrap_or_else(|e| panic!("read the job's line count: {e}"));
    let report_verdict = rt.block_on(async {
        let mut q = QueryClient::connect(instances[1].grpc_url.clone()).await.expect("connect");
        q.get_report(v1::GetReportRequest { job_id: job.into() }).await.expect("report").into_inner().verdict
    });
    let ends: i64 = rt
        .block_on(sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM process_ends WHERE job_id = $1").bind(job).fetch_one(&mut *admin))
        .expect("count process ends");

    // The web: the instance that does not own the job redirects to the one that does.
    let owner_http = instances.iter().find(|i| i.id == new_owner).map(|i| i.http_port).expect("the new owner");
    let other = instances.iter().find(|i| i.id != new_owner).expect("a non-owner");
    let (status, location) = http_head(other.http_port, &format!("/api/jobs/{job}/counts"));
    assert_eq!(status, 307, "a non-owner redirects web requests");
    assert_eq!(location, format!("http://127.0.0.1:{owner_http}/api/jobs/{job}/counts"));

    let first_failed = failed_queries.first().map(|(t, _)| format!("{:.2}", t.as_secs_f64())).unwrap_or("-".into());
    let last_failed = failed_queries.last().map(|(t, _)| format!("{:.2}", t.as_secs_f64())).unwrap_or("-".into());
    println!(
        "takeover: killed {owner_id} (epoch {epoch}) with {before}/{total} lines committed; {new_owner} owned the job after {:.2} s \
         (lease TTL {TTL_S} s); lines flowed again {:.2} s after the kill; all agents done {:.2} s after it; queries to a survivor \
         in the gap: {answered_during} answered, {} failed (from {first_failed} s to {last_failed} s: {}); final {} lines, jobs.lines {lines}, \
         {ends} process ends, verdict {report_verdict}",
        takeover_after.as_secs_f64(),
        resumed_after.as_secs_f64(),
        finished.as_secs_f64(),
        failed_queries.len(),
        failed_queries.first().map(|(_, e)| e.as_str()).unwrap_or("none"),
        u64::from(WORLD * LINES),
    );
    assert_eq!(lines, i64::from(WORLD * LINES), "the store's line count is exact after the takeover");
    assert_eq!(ends, i64::from(WORLD), "every rank's end is recorded");
    assert!(takeover_after < Duration::from_secs(TTL_S * 3 + 5), "the takeover took {takeover_after:?} with a {TTL_S} s TTL");
    assert_eq!(report_verdict, "succeeded", "the report covers the whole job");
}
