//! The gRPC Query service against the real coronerd: health and reflection answer; search with
//! filters, aligned time ranges and cursors; counts per rank; the timeline; snapshots; and a
//! scheduler-style watcher that learns the culprit while real agents run.

use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;

#[test]
fn health_and_reflection_answer() {
    let served = TestServer::start();
    runtime().block_on(async {
        use tonic_health::pb::{health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest};
        let channel = tonic::transport::Channel::from_shared(served.grpc_url.clone()).expect("url").connect().await.expect("connect");
        let mut health = HealthClient::new(channel.clone());
        for service in ["", "coroner.v1.Query", "coroner.v1.Ingest"] {
            let r = health.check(HealthCheckRequest { service: service.into() }).await.expect("health check").into_inner();
            assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
        }

        use tonic_reflection::pb::v1::{
            server_reflection_client::ServerReflectionClient, server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
            ServerReflectionRequest,
        };
        let mut reflection = ServerReflectionClient::new(channel);
        let req = ServerReflectionRequest { host: String::new(), message_request: Some(MessageRequest::ListServices(String::new())) };
        let mut answers = reflection.server_reflection_info(tokio_stream::iter(vec![req])).await.expect("reflection").into_inner();
        let answer = answers.next().await.expect("an answer").expect("ok");
        let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else { panic!("not a service list: {answer:?}") };
        let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        for want in ["coroner.v1.Query", "coroner.v1.Ingest"] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
    });
}

#[test]
fn search_filters_pages_and_counts_on_the_aligned_clock() {
    let served = TestServer::start();
    let report = served.import("nccl2_hang_r1", "q-hang");
    runtime().block_on(async {
        let mut q = QueryClient::connect(served.grpc_url.clone()).await.expect("connect");
        let search = |req: v1::SearchRequest| {
            let mut q = q.clone();
            async move { q.search(req).await }
        };
        let base = v1::SearchRequest { job_id: "q-hang".into(), limit: 7, ..Default::default() };

        // Paging with cursors visits every line once, in aligned-time order.
        let all = search(base.clone()).await.expect("search").into_inner();
        assert!(all.total > 20, "{}", all.total);
        let mut seen = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = search(v1::SearchRequest { cursor: cursor.clone(), ..base.clone() }).await.expect("page").into_inner();
            seen.extend(page.hits.iter().map(|h| (h.rank, h.stream.clone(), h.seq, h.time_ns)));
            if page.next_cursor.is_empty() {
                break;
            }
            cursor = page.next_cursor;
        }
        assert_eq!(seen.len() as u64, all.total);
        assert!(seen.windows(2).all(|w| w[0].3 <= w[1].3), "hits are in aligned-time order");
        let unique: std::collections::BTreeSet<_> = seen.iter().map(|s| (s.0, s.1.clone(), s.2)).collect();
        assert_eq!(unique.len(), seen.len(), "no line twice");

        // Filters: rank, stream, host, event class.
        let r1 = search(v1::SearchRequest { rank: Some(1), limit: 1000, ..base.clone() }).await.expect("rank").into_inner();
        assert!(r1.total > 0 && r1.hits.iter().all(|h| h.rank == Some(1)));
        let err = search(v1::SearchRequest { stream: "stderr".into(), limit: 1000, ..base.clone() }).await.expect("stream").into_inner();
        assert!(err.hits.iter().all(|h| h.stream == "stderr"));
        let host = r1.hits[0].host.clone();
        if !host.is_empty() {
            let on_host = search(v1::SearchRequest { host: host.clone(), limit: 1000, ..base.clone() }).await.expect("host").into_inner();
            assert!(on_host.total > 0 && on_host.hits.iter().all(|h| h.host == host));
        }
        let timeouts = search(v1::SearchRequest { kind: "watchdog_timeout".into(), limit: 1000, ..base.clone() }).await.expect("kind").into_inner();
        assert!(timeouts.total > 0, "the watchdog timeout lines are found by event class");
        assert!(timeouts.hits.iter().all(|h| h.line.contains("Watchdog") || h.line.contains("timeout") || h.line.contains("Timeout")), "{:?}", timeouts.hits);

        // An aligned time range: from the first failure on, only later lines; widened by each
        // rank's clock uncertainty.
        let failure = report["first_failure"]["time"].as_str().expect("failure time");
        let failure_ns = chrono::DateTime::parse_from_rfc3339(failure).expect("rfc3339").timestamp_nanos_opt().expect("ns");
        let slack: i64 =
            report["ranks"].as_array().expect("ranks").iter().map(|r| r["clock"]["uncertainty_ns"].as_i64().unwrap_or(0).max(0)).max().unwrap_or(0);
        let after = search(v1::SearchRequest { since_ns: Some(failure_ns), limit: 1000, ..base.clone() }).await.expect("since").into_inner();
        assert!(after.total > 0 && after.total < all.total, "{} of {}", after.total, all.total);
        assert!(after.hits.iter().all(|h| h.time_ns >= failure_ns - 2 * slack), "a hit before the range");
        let before = search(v1::SearchRequest { until_ns: Some(failure_ns), limit: 1000, ..base.clone() }).await.expect("until").into_inner();
        assert!(before.total + after.total >= all.total, "the two halves cover the job");

        // Malformed input gets reasons.
        let bad = search(v1::SearchRequest { query: "\"unclosed".into(), ..base.clone() }).await.expect_err("bad query");
        assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
        let bad = search(v1::SearchRequest { cursor: "garbage".into(), ..base.clone() }).await.expect_err("bad cursor");
        assert_eq!(bad.code(), tonic::Code::InvalidArgument);
        let missing = search(v1::SearchRequest { job_id: "nope".into(), ..base.clone() }).await.expect_err("unknown job");
        assert_eq!(missing.code(), tonic::Code::NotFound);

        // Counts per rank.
        let counts = q.count_by_rank(v1::CountByRankRequest { job_id: "q-hang".into(), query: "NCCL".into() }).await.expect("counts").into_inner();
        assert!(counts.total > 0);
        assert!(counts.counts.iter().any(|c| c.rank.is_some()), "{counts:?}");

        // The timeline: a lane per rank, the culprit's with its events, the failure time.
        let t = q.timeline(v1::TimelineRequest { job_id: "q-hang".into(), ..Default::default() }).await.expect("timeline").into_inner();
        assert_eq!(t.culprit_rank, Some(1));
        assert_eq!(t.lanes.len(), 2, "{t:?}");
        assert!(t.failure_ns.is_some() && t.start_ns <= t.end_ns);
        assert!(t.lanes.iter().any(|l| l.events.iter().any(|e| e.role == "symptom" || e.role == "root")), "{t:?}");
        let grouped =
            q.timeline(v1::TimelineRequest { job_id: "q-hang".into(), group_by_host: true, ..Default::default() }).await.expect("timeline").into_inner();
        assert!(grouped.grouped_by_host && !grouped.lanes.is_empty() && grouped.lanes.len() <= 2);

        // ListJobs filters.
        let jobs = q.list_jobs(v1::ListJobsRequest { fault_class: "hang".into(), ..Default::default() }).await.expect("jobs").into_inner().jobs;
        assert_eq!(jobs.len(), 1);
        let jobs = q.list_jobs(v1::ListJobsRequest { fault_class: "cuda_oom".into(), ..Default::default() }).await.expect("jobs").into_inner().jobs;
        assert!(jobs.is_empty());
        let jobs = q.list_jobs(v1::ListJobsRequest { until_ns: 1, ..Default::default() }).await.expect("jobs").into_inner().jobs;
        assert!(jobs.is_empty(), "no job was first seen in 1970");
    });
}

#[test]
fn snapshots_are_listed_and_streamed_back_byte_for_byte() {
    let served = TestServer::start();
    served.import("nccl2_hang_r1", "q-snap");
    let list = served.coroner(&["snapshot", "list", "q-snap", "--json"]);
    assert!(list.status.success(), "{}", String::from_utf8_lossy(&list.stderr));
    let snaps: serde_json::Value = serde_json::from_slice(&list.stdout).expect("JSON");
    let first = snaps.as_array().and_then(|s| s.first()).expect("the bundle's snapshots were imported").clone();
    let sha = first["sha256"].as_str().expect("sha");
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = out_dir.path().join("snap.bin");
    let got = served.coroner(&["snapshot", "get", "q-snap", sha, "-o", out.to_str().expect("utf-8")]);
    assert!(got.status.success(), "{}", String::from_utf8_lossy(&got.stderr));
    let bytes = std::fs::read(&out).expect("downloaded");
    use sha2::Digest;
    assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), sha);
    // The same bytes over HTTP.
    let (status, _) = served.get(&format!("/jobs/q-snap/snapshots/{sha}"));
    assert_eq!(status, 200);
    let missing = served.coroner(&["snapshot", "get", "q-snap", &"ab".repeat(32), "-o", out.to_str().expect("utf-8")]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no snapshot"), "{}", String::from_utf8_lossy(&missing.stderr));
}

#[test]
fn a_scheduler_watching_a_job_learns_the_culprit_within_a_second_of_the_evidence() {
    let served = TestServer::start();
    let job = "watch-kill";
    let rt = runtime();
    // The watcher subscribes before any agent starts (watching creates the job).
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, v1::ReportResponse)>();
    let url = served.grpc_url.clone();
    rt.spawn(async move {
        let mut q = QueryClient::connect(url).await.expect("connect");
        let mut stream = q.watch_job(v1::GetReportRequest { job_id: job.into() }).await.expect("watch").into_inner();
        while let Some(Ok(r)) = stream.next().await {
            if tx.send((Instant::now(), r)).is_err() {
                break;
            }
        }
    });
    let (_, first) = rx.recv_timeout(Duration::from_secs(10)).expect("the current report comes first");
    assert_eq!(first.verdict, "running");

    let dir = tempfile::tempdir().expect("tempdir");
    let mut agents = crate::ring::Ring { server: &served.grpc_url, job, world: 3, fault: "kill", fault_rank: 1 }.start(dir.path());
    // The killed rank's agent reports the end and flushes before it exits: when it has exited,
    // the evidence has arrived.
    let evidence_in = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(_)) = agents[1].try_wait() {
                break Instant::now();
            }
            assert!(Instant::now() < deadline, "rank 1's agent did not end");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let mut named = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok((at, r)) if r.culprit_rank == Some(1) => {
                named = Some((at, r));
                break;
            }
            _ => {}
        }
    }
    for a in &mut agents {
        let _ = a.wait();
    }
    let (at, r) = named.expect("the watcher never heard rank 1 named");
    let lag = at.saturating_duration_since(evidence_in);
    assert!(lag < Duration::from_secs(1), "the culprit came {lag:?} after the evidence");
    assert_eq!(r.fault_class, "killed", "{}", r.report_text);
}
