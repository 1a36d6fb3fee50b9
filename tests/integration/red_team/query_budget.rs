//! Finding: "One search pins a core forever." A 205-byte query of 100 nested parentheses ran in
//! tantivy's grammar without end; ten expensive queries stalled every search of every job; and
//! SIGTERM then never finished.

use super::{ingest, line, session, ship};
use crate::served::{runtime, Served, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
use std::time::{Duration, Instant};

fn search(job: &str, query: &str) -> v1::SearchRequest {
    v1::SearchRequest { job_id: job.into(), query: query.into(), limit: 10, ..Default::default() }
}

#[test]
fn the_nested_parenthesis_query_is_refused_at_once_on_grpc_and_http() {
    let server = TestServer::start();
    let attack = format!("{} foo {}", "(".repeat(100), ")".repeat(100));
    assert_eq!(attack.len(), 205, "the red team's 205 bytes");
    runtime().block_on(async {
        let mut client = ingest(&server.grpc_url).await;
        let s = session(&mut client, "rt-parens", 0, 1, "node-a", "a").await;
        ship(&mut client, &s, (0..100).map(|i| line(i, b"foo bar")).collect(), 100).await;
        let mut query = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        let started = Instant::now();
        let err = query.search(search("rt-parens", &attack)).await.expect_err("refused");
        let took = started.elapsed();
        println!("nested parentheses refused over gRPC in {took:?}");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("100 deep"), "{}", err.message());
        assert!(took < Duration::from_secs(1), "refused in {took:?}");
        let err = query.count_by_rank(v1::CountByRankRequest { job_id: "rt-parens".into(), query: attack.clone() }).await.expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        // Too many clauses and too many bytes are refused the same way.
        let err = query.search(search("rt-parens", &vec!["foo"; 1000].join(" AND "))).await.expect_err("refused");
        assert!(err.message().contains("bytes") || err.message().contains("clauses"), "{}", err.message());
    });
    let encoded: String = attack.bytes().map(|b| format!("%{b:02X}")).collect();
    let started = Instant::now();
    let (status, body) = server.get(&format!("/api/jobs/rt-parens/search?q={encoded}"));
    println!("nested parentheses refused over HTTP in {:?}", started.elapsed());
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("deep"), "{body}");
    let (_, metrics) = server.get("/metrics");
    assert!(super::metric(&metrics, "coroner_limits_refused_total{limit=\"query_depth\"}") >= 3.0, "{metrics}");
}

/// Ten expensive searches on one job at once; a cheap search on another job is answered at
/// once, and the expensive ones end at --max-query-time instead of running on.
#[test]
fn ten_expensive_searches_leave_another_jobs_search_fast_and_stop_at_their_deadline() {
    let server = TestServer::start_with(|c| c.limits.max_query_time = Duration::from_secs(3));
    let heavy: Vec<String> = (0..12).map(|i| format!("\"loss step {i}\" OR \"step loss rank {i}\"")).collect();
    let expensive = heavy.join(" OR ");
    runtime().block_on(async {
        let mut client = ingest(&server.grpc_url).await;
        let a = session(&mut client, "rt-busy", 0, 1, "node-a", "a").await;
        let lines: Vec<_> = (0..200_000u64).map(|i| line(i, format!("step {} loss {} rank {} step loss", i % 97, i % 13, i % 11).as_bytes())).collect();
        ship(&mut client, &a, lines, 20_000).await;
        let b = session(&mut client, "rt-quiet", 0, 1, "node-b", "b").await;
        ship(&mut client, &b, (0..100).map(|i| line(i, b"NCCL WARN quiet job")).collect(), 100).await;
        let query = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        // One expensive search alone, for the figure.
        let started = Instant::now();
        let alone = query.clone().search(search("rt-busy", &expensive)).await;
        println!("one expensive search alone: {:?} ({:?})", started.elapsed(), alone.as_ref().map(|r| r.get_ref().total).map_err(|e| e.code()));
        let mut storm = Vec::new();
        for _ in 0..10 {
            let mut q = query.clone();
            let expensive = expensive.clone();
            storm.push(tokio::spawn(async move {
                let started = Instant::now();
                let r = q.search(search("rt-busy", &expensive)).await;
                (started.elapsed(), r.map(|r| r.into_inner().total).map_err(|e| e.code()))
            }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut cheap = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let r = query.clone().search(search("rt-quiet", "NCCL")).await.expect("the cheap search");
            cheap.push(started.elapsed());
            assert_eq!(r.get_ref().total, 100);
        }
        let worst = cheap.iter().max().copied().unwrap_or_default();
        println!("cheap search on another job during the storm: {cheap:?}");
        assert!(worst < Duration::from_secs(1), "a cheap search on another job took {worst:?} behind ten expensive ones");
        for t in storm {
            let (took, r) = t.await.expect("join");
            println!("expensive search: {took:?} {r:?}");
            // Each ends by its deadline (3 s) plus a wait for its job's slot, never later than
            // the slot wait (3 s) and the run (3 s) and slack.
            assert!(took < Duration::from_secs(20), "an expensive search ran {took:?}");
        }
    });
}

/// SIGTERM while expensive searches run: the server exits promptly instead of waiting for them.
#[test]
fn sigterm_during_expensive_searches_exits_promptly() {
    let server = Served::start_with(&["--max-query-time", "600"]);
    let heavy: Vec<String> = (0..12).map(|i| format!("\"loss step {i}\" OR \"step loss rank {i}\"")).collect();
    let expensive = heavy.join(" OR ");
    runtime().block_on(async {
        let mut client = ingest(&server.grpc_url).await;
        let a = session(&mut client, "rt-term", 0, 1, "node-a", "a").await;
        let lines: Vec<_> = (0..200_000u64).map(|i| line(i, format!("step {} loss {} rank {} step loss", i % 97, i % 13, i % 11).as_bytes())).collect();
        ship(&mut client, &a, lines, 20_000).await;
        let query = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        for _ in 0..4 {
            let mut q = query.clone();
            let expensive = expensive.clone();
            tokio::spawn(async move {
                let _ = q.search(search("rt-term", &expensive)).await;
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    });
    let started = Instant::now();
    let exited = server.terminate(Duration::from_secs(30));
    println!("coronerd exited {:?} after SIGTERM with searches running", started.elapsed());
    assert!(exited, "coronerd did not exit within 30 s of SIGTERM");
}
