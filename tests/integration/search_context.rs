//! Search with context (the lines around each hit on its rank and stream, marked as context) over
//! gRPC, the HTTP JSON API and `coroner search --context`; the JSON output's total and cursor;
//! `coroner search --follow` printing a running job's new hits and exiting with its verdict.

use crate::red_team::{ingest, session, ship};
use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
use coroner_tests::binary;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const T: i64 = 1_700_000_000_000_000_000;

fn line(seq: u64, text: &str) -> v1::LogLine {
    v1::LogLine { seq, capture_ns: T + seq as i64 * 1_000_000, stream: v1::StreamKind::Stdout as i32, raw: text.as_bytes().to_vec(), ..Default::default() }
}

/// Rank 0 prints `line 0` .. `line 9`, `line 5` with a marker; rank 1 prints a marker of its own.
fn seed(server: &TestServer, job: &str) {
    runtime().block_on(async {
        let mut client = ingest(&server.grpc_url).await;
        let s0 = session(&mut client, job, 0, 2, "node-a", "a0").await;
        let lines = (0..10).map(|i| line(i, &if i == 5 { format!("line {i} ctxmarker") } else { format!("line {i}") })).collect();
        ship(&mut client, &s0, lines, 100).await;
        let s1 = session(&mut client, job, 1, 2, "node-b", "a1").await;
        ship(&mut client, &s1, vec![line(0, "rank one ctxmarker")], 10).await;
    });
}

fn shape(hits: &[v1::SearchHit]) -> Vec<(Option<u32>, u64, bool)> {
    hits.iter().map(|h| (h.rank, h.seq, h.context)).collect()
}

#[test]
fn context_lines_frame_each_hit_on_its_rank_over_grpc_and_http() {
    let server = TestServer::start();
    seed(&server, "ctx-job");
    let r = runtime().block_on(async {
        let mut q = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        q.search(v1::SearchRequest { job_id: "ctx-job".into(), query: "ctxmarker".into(), context: 2, limit: 10, ..Default::default() })
            .await
            .expect("search")
            .into_inner()
    });
    assert_eq!(r.total, 2, "context lines are not hits");
    // Rank 1's hit comes first (earlier) and has no lines around it; rank 0's has two each side.
    assert_eq!(
        shape(&r.hits),
        vec![(Some(1), 0, false), (Some(0), 3, true), (Some(0), 4, true), (Some(0), 5, false), (Some(0), 6, true), (Some(0), 7, true)],
        "{:?}",
        r.hits
    );
    assert_eq!(r.hits.iter().find(|h| h.seq == 4).map(|h| h.line.as_str()), Some("line 4"));

    let (status, page) = server.get_json("/api/jobs/ctx-job/search?q=ctxmarker&context=1&limit=1");
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["total"], 2, "{page}");
    assert!(page["next_cursor"].as_str().is_some_and(|c| !c.is_empty()), "one hit of two: a cursor: {page}");
    let hits = page["hits"].as_array().expect("hits");
    assert!(hits.iter().any(|h| h["context"] == false) && hits.iter().all(|h| h["rank"] == hits[0]["rank"]), "{page}");
    let (status, refused) = server.get_json("/api/jobs/ctx-job/search?q=ctxmarker&context=51");
    assert_eq!(status, 400, "{refused}");
}

#[test]
fn coroner_search_prints_context_greps_way_and_json_with_total_and_cursor() {
    let server = TestServer::start();
    seed(&server, "ctx-cli");
    let out = server.coroner(&["search", "ctx-cli", "ctxmarker", "--rank", "0", "--context", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].ends_with("stdout- line 4") && lines[1].ends_with("stdout: line 5 ctxmarker") && lines[2].ends_with("stdout- line 6"), "{text}");

    let out = server.coroner(&["search", "ctx-cli", "ctxmarker", "--limit", "1", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(page["total"], 2, "{page}");
    let cursor = page["next_cursor"].as_str().expect("a cursor while more hits follow").to_string();
    assert_eq!(page["hits"].as_array().map(Vec::len), Some(1), "{page}");
    let out = server.coroner(&["search", "ctx-cli", "ctxmarker", "--limit", "1", "--json", "--cursor", &cursor]);
    let rest: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!((rest["hits"].as_array().map(Vec::len), &rest["next_cursor"]), (Some(1), &serde_json::Value::Null), "{rest}");
    assert_ne!(rest["hits"][0]["rank"], page["hits"][0]["rank"]);
}

#[test]
fn coroner_search_follow_prints_new_hits_and_exits_with_the_verdict() {
    let server = TestServer::start();
    let rt = runtime();
    let (mut client, s) = rt.block_on(async {
        let mut client = ingest(&server.grpc_url).await;
        let s = session(&mut client, "follow-job", 0, 1, "node-a", "a0").await;
        ship(&mut client, &s, vec![line(0, "tick 0 followmarker"), line(1, "noise"), line(2, "tick 2 followmarker")], 10).await;
        (client, s)
    });
    let mut child = Command::new(binary("coroner"))
        .env_remove("CORONER_TOKEN")
        .args(["--server", &server.grpc_url, "search", "follow-job", "followmarker", "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start coroner search --follow");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut printed: Vec<serde_json::Value> = Vec::new();
    let mut wait_for = |n: usize, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while printed.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            let l = rx.recv_timeout(left).unwrap_or_else(|_| panic!("{what}: printed {printed:?}"));
            printed.push(serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")));
        }
    };
    wait_for(2, "the hits the job held");
    rt.block_on(ship(&mut client, &s, vec![line(3, "tick 3 followmarker")], 10));
    wait_for(3, "the new hit");
    rt.block_on(async {
        let exit = v1::ProcessExit { session_id: s.clone(), rank: Some(0), exit_code: Some(0), at_ns: T + 10_000_000, ..Default::default() };
        client.report_exit(exit).await.expect("ReportExit");
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("--follow did not end with the job; printed {printed:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    reader.join().expect("reader");
    while let Ok(l) = rx.try_recv() {
        printed.push(serde_json::from_str(&l).expect("JSON"));
    }
    let seqs: Vec<u64> = printed.iter().filter_map(|h| h["seq"].as_u64()).collect();
    assert_eq!(seqs, vec![0, 2, 3], "each hit once, in order: {printed:?}");
    assert_eq!(status.code(), Some(0), "the job succeeded: exit 0 as `coroner report`");
}
