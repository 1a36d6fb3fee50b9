//! The real agent around a real child: a full spool with no server (the coronerd binary, killed
//! and started again in place), two agents claiming one rank, and lines no terminal would like
//! (10 MB, invalid UTF-8, NUL bytes), the last two against a server in this process.

use crate::served::{runtime, Endpoints, Served, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
use coroner_tests::binary;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An agent for `rank` of `job` around `python3 -c script args...`, quiet on stdout.
fn agent(server: &str, job: &str, spool: &Path, extra: &[&str], script: &str, args: &[&str]) -> Command {
    let mut c = Command::new(binary("coroner-agent"));
    c.args(["run", "--job", job, "--rank", "0", "--world-size", "1", "--server", server, "--no-snapshots", "--gpu-sample-secs", "0"])
        .arg("--spool-dir")
        .arg(spool)
        .args(extra)
        .args(["--", "python3", "-c", script])
        .args(args)
        .stdout(Stdio::null());
    c
}

fn wait(mut child: Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().expect("wait for the agent") {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How many lines of `job` match `query` (all of them for an empty query).
async fn count(q: &mut QueryClient<tonic::transport::Channel>, job: &str, query: &str) -> u64 {
    let req = v1::SearchRequest { job_id: job.into(), query: query.into(), limit: 0, ..Default::default() };
    q.search(req).await.expect("search").into_inner().total
}

async fn hits(q: &mut QueryClient<tonic::transport::Channel>, job: &str, query: &str) -> Vec<v1::SearchHit> {
    let req = v1::SearchRequest { job_id: job.into(), query: query.into(), limit: 10, ..Default::default() };
    q.search(req).await.expect("search").into_inner().hits
}

/// The report's notes, once one of them contains `wanted` (or the last ones seen after 20 s).
fn notes_with(server: &Endpoints, job: &str, wanted: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = server.coroner(&["report", job, "--json"]);
        coroner_tests::assert_answered(&out);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
        let notes: Vec<String> = r["notes"].as_array().map(|n| n.iter().filter_map(|x| x.as_str().map(String::from)).collect()).unwrap_or_default();
        if notes.iter().any(|n| n.contains(wanted)) || Instant::now() > deadline {
            return notes;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

const BURST: &str = r#"
import sys, time
n = int(sys.argv[1])
out = sys.stdout
t = time.monotonic()
for i in range(n):
    if i % 100 == 0:
        out.write(f"ERROR important {i}\n")
    elif i % 100 == 50:
        out.write(f"/opt/job/train.py:7: UserWarning: heed {i}\n")
    else:
        out.write(f"step {i} loss 1.0 routine padding padding padding padding padding padding padding\n")
out.flush()
open(sys.argv[2], "w").write(str(time.monotonic() - t))
"#;

/// The spool holds 4 KiB and no server answers: the agent keeps a few MiB in memory, then drops
/// routine lines before errors and warnings, never holding the job back. When a server comes up
/// it gets every error and warning, the lines kept, and the count of the dropped ones, in the
/// report; nothing more is missing than what was counted.
#[test]
fn a_full_spool_drops_routine_lines_first_never_blocks_the_job_and_the_count_reaches_the_report() {
    const N: u64 = 200_000;
    // A server that bound its own address and is gone: the agent's address answers nobody
    // until the server is started again in place.
    let mut server = Served::start();
    server.kill();
    let server_url = server.grpc_url.clone();
    let spool = tempfile::tempdir().expect("tempdir");
    let timing = spool.path().join("child-seconds");
    let mut cmd = agent(&server_url, "spool-full", spool.path(), &["--spool-max-bytes", "4096", "--flush-timeout", "90"], BURST, &[&N.to_string()]);
    cmd.arg(&timing).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start the agent");
    let stderr = child.stderr.take().expect("stderr");
    let stderr = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());

    // The child writes 200,000 lines (18 MB) with no server and a full spool: it never waits.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !timing.exists() {
        assert!(Instant::now() < deadline, "the child did not finish its writes: the agent held it back");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(50));
    let seconds: f64 = std::fs::read_to_string(&timing).expect("timing").trim().parse().expect("seconds");
    assert!(seconds < 10.0, "the child took {seconds} s to write its lines");

    server.restart();
    let status = wait(child, Duration::from_secs(120));
    assert!(status.success(), "the agent exits with the child's status: {status:?}");
    let stderr = stderr.join().expect("stderr reader");
    assert!(stderr.contains("is full") && stderr.contains("dropped"), "{stderr}");

    let notes = notes_with(&server, "spool-full", "dropped");
    let note = notes.iter().find(|n| n.contains("dropped")).unwrap_or_else(|| panic!("no note of the dropped lines: {notes:?}"));
    let dropped: u64 =
        note.split_whitespace().skip_while(|w| *w != "dropped").nth(1).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("a count in {note:?}"));
    assert!(dropped > 0 && dropped < N, "{note}");
    runtime().block_on(async {
        let mut q = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        assert_eq!(count(&mut q, "spool-full", "important").await, N / 100, "every error line arrived");
        assert_eq!(count(&mut q, "spool-full", "heed").await, N / 100, "every warning line arrived");
        assert_eq!(count(&mut q, "spool-full", "").await, N - dropped, "only the counted lines are missing");
    });
}

const TALK: &str = "import sys, time\nfor i in range(300):\n    print(f'{sys.argv[1]} line {i}', flush=True)\n    time.sleep(0.004)\n";

/// Two agents at once for one job and rank (two processes given the same RANK): each gets its own
/// lane of sequence numbers, so neither's lines are taken for the other's duplicates, and the
/// report says that two agents claimed the rank. A later agent of that rank is no conflict.
#[test]
fn two_agents_claiming_one_rank_at_once_lose_no_line_and_the_report_says_so() {
    let server = TestServer::start();
    let spool = tempfile::tempdir().expect("tempdir");
    // Spools apart, as on two hosts.
    let run = |who: &str| {
        agent(&server.grpc_url, "claimed", &spool.path().join(who), &["--flush-timeout", "30"], TALK, &[who])
            .stderr(Stdio::null())
            .spawn()
            .expect("start the agent")
    };
    let (a, b) = (run("agentA"), run("agentB"));
    assert!(wait(a, Duration::from_secs(60)).success());
    assert!(wait(b, Duration::from_secs(60)).success());
    let later = run("agentC");
    assert!(wait(later, Duration::from_secs(60)).success());
    runtime().block_on(async {
        let mut q = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        assert_eq!(count(&mut q, "claimed", "agentA").await, 300, "no line of the first agent is lost");
        assert_eq!(count(&mut q, "claimed", "agentB").await, 300, "no line of the second agent is lost");
        assert_eq!(count(&mut q, "claimed", "agentC").await, 300, "nor of a later one");
        assert_eq!(count(&mut q, "claimed", "").await, 900);
    });
    let notes = notes_with(&server, "claimed", "opened a session while");
    let claims: Vec<&String> = notes.iter().filter(|n| n.contains("opened a session while")).collect();
    assert_eq!(claims.len(), 1, "one conflict, told once (the later agent came after both ended): {notes:?}");
    assert!(claims[0].starts_with("rank 0:") && claims[0].contains("numbered apart"), "{}", claims[0]);
}

const ODD: &str = r#"
import sys
o = sys.stdout.buffer
o.write(b"before the odd lines\n")
o.write(b"bigline " + b"x" * (10 << 20) + b"\n")
o.write(b"bad \xff\xfe utf8 here\n")
o.write(b"nul \x00 inside here\n")
o.write(b"after the odd lines\n")
o.flush()
"#;

/// A 10 MB line is kept up to 1 MiB with a marker saying how much was cut; invalid UTF-8 and
/// NUL bytes arrive (shown with replacement characters); the lines around them are all there.
#[test]
fn a_ten_megabyte_line_invalid_utf8_and_nul_bytes_through_the_agent() {
    let server = TestServer::start();
    let spool = tempfile::tempdir().expect("tempdir");
    let child = agent(&server.grpc_url, "odd-lines", spool.path(), &["--flush-timeout", "30"], ODD, &[]).stderr(Stdio::null()).spawn().expect("agent");
    assert!(wait(child, Duration::from_secs(60)).success());
    runtime().block_on(async {
        let mut q = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        assert_eq!(count(&mut q, "odd-lines", "").await, 5, "every line arrived");
        let big = hits(&mut q, "odd-lines", "bigline").await;
        let cut = 8 + (10 << 20) - coroner_model::MAX_LINE_BYTES;
        let line = &big.first().expect("the long line").line;
        assert!(line.ends_with(&format!("[coroner: truncated {cut} bytes]")), "{}", &line[line.len().saturating_sub(80)..]);
        assert_eq!(line.len(), coroner_model::MAX_LINE_BYTES + coroner_model::truncation_marker(cut as u64).len());
        let bad = hits(&mut q, "odd-lines", "utf8").await;
        assert_eq!(bad.first().map(|h| h.line.as_str()), Some("bad \u{fffd}\u{fffd} utf8 here"));
        let nul = hits(&mut q, "odd-lines", "inside").await;
        assert_eq!(nul.first().map(|h| h.line.as_str()), Some("nul \0 inside here"));
        assert_eq!(count(&mut q, "odd-lines", "after").await, 1);
    });
}
