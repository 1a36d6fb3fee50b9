//! Finding: "Jobs cost threads and memory that nothing reclaims." 800 job ids in two OTLP
//! requests made 5,663 threads and 2.6 GB; a world size of 2^20 cost ~550 MB per job; 50 MiB host
//! names took the server from 3 to 7.3 GB. Now index writers past `--max-open-jobs` are closed
//! least recently used, new job ids stop at `--max-jobs`, a world size is believed in proportion
//! to the agents seen, and host names are bounded.

use super::{ingest, threads_and_rss};
use crate::otlp_metrics::resource;
use crate::served::{runtime, Served};
use coroner_proto::v1::{self, query_client::QueryClient};
use opentelemetry_proto::tonic::collector::logs::v1::{logs_service_client::LogsServiceClient, ExportLogsServiceRequest};
use std::time::Instant;

#[test]
fn a_thousand_otlp_job_ids_leave_threads_and_memory_bounded() {
    let server = Served::start_with(&["--max-open-jobs", "16", "--max-jobs", "1100"]);
    let (threads0, rss0) = threads_and_rss(server.pid());
    let started = Instant::now();
    runtime().block_on(async {
        let mut otlp = LogsServiceClient::connect(server.grpc_url.clone()).await.expect("connect").max_encoding_message_size(64 << 20);
        for part in 0..2 {
            let resource_logs = (0..500).map(|i| resource(&format!("rt-otlp-{part}-{i}"), 0, "node-a", 1_000, &["step 1 loss 2.0"])).collect();
            otlp.export(ExportLogsServiceRequest { resource_logs }).await.expect("export");
        }
        // Past --max-jobs: refused with the reason.
        let over = (0..200).map(|i| resource(&format!("rt-otlp-over-{i}"), 0, "node-a", 1_000, &["x"])).collect();
        let e = otlp.export(ExportLogsServiceRequest { resource_logs: over }).await.expect_err("past --max-jobs");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("--max-jobs"), "{}", e.message());
    });
    let (threads, rss) = threads_and_rss(server.pid());
    println!("1,000 OTLP job ids in {:?}: threads {threads0} -> {threads}, RSS {rss0} -> {rss} MiB", started.elapsed());
    // 16 open writers of ~7 threads each, the runtime's and the blocking pool's threads.
    assert!(threads < 400, "{threads} threads after 1,000 jobs");
    assert!(rss < 1500, "{rss} MiB after 1,000 jobs");
    let out = server.coroner(&["jobs"]);
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(listed.lines().filter(|l| l.starts_with("rt-otlp-0-") || l.starts_with("rt-otlp-1-")).count(), 1000);
    // The export past the limit created jobs up to --max-jobs (1,100), none beyond.
    assert_eq!(listed.lines().filter(|l| l.starts_with("rt-otlp-over-")).count(), 100);
    // Every job is still searchable, writer open or not.
    let out = server.coroner(&["search", "rt-otlp-0-3", "loss"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("step 1 loss 2.0"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_huge_world_size_or_host_name_costs_nothing_much() {
    let server = Served::start();
    runtime().block_on(async {
        let mut client = ingest(&server.grpc_url).await;
        let huge = v1::OpenSessionRequest {
            job_id: "rt-world".into(),
            rank: Some(0),
            world_size: Some(1 << 20),
            host: "node-a".into(),
            agent_instance: "a".into(),
            ..Default::default()
        };
        client.open_session(huge).await.expect("the session opens");
        let long = v1::OpenSessionRequest { job_id: "rt-world".into(), rank: Some(1), world_size: Some(2), host: "h".repeat(50 << 20), ..Default::default() };
        let e = client.open_session(long).await.expect_err("a 50 MiB host name");
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("--max-string-bytes"), "{}", e.message());
        let mut query = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        let started = Instant::now();
        let report = query.get_report(v1::GetReportRequest { job_id: "rt-world".into() }).await.expect("report").into_inner();
        let json: serde_json::Value = serde_json::from_str(&report.report_json).expect("json");
        let ranks = json["ranks"].as_array().map(Vec::len).unwrap_or(0);
        println!("report of a job claiming 2^20 ranks: {ranks} ranks listed, {} bytes, in {:?}", report.report_json.len(), started.elapsed());
        assert!(ranks <= 80, "{ranks} ranks listed for one agent");
    });
    let (_, rss) = threads_and_rss(server.pid());
    println!("RSS after a 2^20 world size and a 50 MiB host name: {rss} MiB");
    assert!(rss < 500, "{rss} MiB");
}
