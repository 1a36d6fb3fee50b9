//! OTLP logs in through a real `LogsService` client, found again by search and in the report;
//! Prometheus metrics scraped after ingest.

use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
use opentelemetry_proto::tonic::collector::logs::v1::{logs_service_client::LogsServiceClient, ExportLogsServiceRequest};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;

fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue { key: k.into(), value: Some(AnyValue { value: Some(v) }), ..Default::default() }
}

fn text(s: &str) -> Value {
    Value::StringValue(s.into())
}

/// One resource (a rank's process) with its lines, 10 ms apart from `t0`.
pub fn resource(job: &str, rank: i64, host: &str, t0: u64, lines: &[&str]) -> ResourceLogs {
    ResourceLogs {
        resource: Some(Resource {
            attributes: vec![kv("coroner.job", text(job)), kv("coroner.rank", Value::IntValue(rank)), kv("host.name", text(host))],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            log_records: lines
                .iter()
                .enumerate()
                .map(|(i, l)| LogRecord {
                    time_unix_nano: t0 + i as u64 * 10_000_000,
                    body: Some(AnyValue { value: Some(text(l)) }),
                    attributes: vec![kv("log.iostream", text("stderr"))],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn otlp_logs_are_indexed_and_analyzed_like_agent_lines() {
    let served = TestServer::start();
    let t0 = 1_714_560_000_000_000_000u64;
    runtime().block_on(async {
        let mut logs = LogsServiceClient::connect(served.grpc_url.clone()).await.expect("connect");
        let req = ExportLogsServiceRequest {
            resource_logs: vec![
                resource("otlp-job", 0, "node-a", t0, &["step 1 loss 2.1", "step 2 loss 2.0", "training going fine"]),
                resource(
                    "otlp-job",
                    1,
                    "node-b",
                    t0 + 5_000_000,
                    &[
                        "step 1 loss 2.1",
                        "Traceback (most recent call last):",
                        "  File \"train.py\", line 10, in <module>",
                        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB",
                    ],
                ),
                // No job id: rejected, and said so.
                ResourceLogs {
                    resource: None,
                    scope_logs: vec![ScopeLogs { log_records: vec![LogRecord::default()], ..Default::default() }],
                    ..Default::default()
                },
            ],
        };
        let resp = logs.export(req).await.expect("export").into_inner();
        let partial = resp.partial_success.expect("the record without a job is reported");
        assert_eq!(partial.rejected_log_records, 1);
        assert!(partial.error_message.contains("coroner.job.id"), "{}", partial.error_message);

        let mut q = QueryClient::connect(served.grpc_url.clone()).await.expect("connect");
        let hits = q
            .search(v1::SearchRequest { job_id: "otlp-job".into(), query: "OutOfMemoryError".into(), limit: 10, ..Default::default() })
            .await
            .expect("search")
            .into_inner();
        assert_eq!(hits.total, 1, "{hits:?}");
        let h = &hits.hits[0];
        assert_eq!((h.rank, h.host.as_str(), h.stream.as_str(), h.seq), (Some(1), "node-b", "stderr", 3));
        assert_eq!(h.capture_ns, (t0 + 5_000_000 + 30_000_000) as i64);

        // A second export continues the sequence numbers after what the job holds.
        let more = ExportLogsServiceRequest { resource_logs: vec![resource("otlp-job", 0, "node-a", t0 + 100_000_000, &["a later line"])] };
        logs.export(more).await.expect("export");
        let later = q
            .search(v1::SearchRequest { job_id: "otlp-job".into(), query: "later".into(), limit: 10, ..Default::default() })
            .await
            .expect("search")
            .into_inner();
        assert_eq!(later.hits.first().map(|h| (h.rank, h.seq)), Some((Some(0), 3)));

        let report = q.get_report(v1::GetReportRequest { job_id: "otlp-job".into() }).await.expect("report").into_inner();
        let json: serde_json::Value = serde_json::from_str(&report.report_json).expect("JSON");
        let ranks = json["ranks"].as_array().expect("ranks");
        assert!(ranks.iter().any(|r| r["rank"] == 1 && r["host"] == "node-b"), "{json:#}");
        assert_eq!(report.culprit_rank, Some(1), "{}", report.report_text);
        assert_eq!(report.fault_class, "cuda_oom", "{}", report.report_text);
    });
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[test]
fn metrics_count_what_was_ingested() {
    let served = TestServer::start();
    served.import("nccl2_hang_r1", "m-hang");
    served.import("nccl2_oom_r1", "m-oom");
    // The reporter stores each job's report a moment after its last lines are in (debounced):
    // until then a job can still read as it was half-imported (rank 0's timeout without rank 1's
    // OOM is a hang). Wait for both reports to settle.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let (status, text) = loop {
        let (status, text) = served.get("/metrics");
        let settled = text.lines().any(|l| l == "coroner_jobs_failed{class=\"cuda_oom\"} 1") && text.lines().any(|l| l == "coroner_jobs{verdict=\"failed\"} 2");
        if settled || std::time::Instant::now() > deadline {
            break (status, text);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(status, 200);
    assert!(metric(&text, "coroner_ingest_lines_total") > 50.0);
    assert!(metric(&text, "coroner_ingest_bytes_total") > metric(&text, "coroner_ingest_lines_total"));
    assert!(metric(&text, "coroner_ingest_batches_total") >= 2.0);
    assert!(metric(&text, "coroner_index_commit_duration_seconds_count") >= 1.0);
    assert!(metric(&text, "coroner_report_duration_seconds_count") >= 1.0);
    assert_eq!(metric(&text, "coroner_ingest_agents_connected"), 0.0, "the importer's streams closed");
    assert_eq!(metric(&text, "coroner_agent_spool_backlog_bytes"), 0.0);
    assert_eq!(metric(&text, "coroner_jobs_failed{class=\"hang\"}"), 1.0);
    assert_eq!(metric(&text, "coroner_jobs_failed{class=\"cuda_oom\"}"), 1.0);
    assert_eq!(metric(&text, "coroner_jobs{verdict=\"failed\"}"), 2.0);
    assert!(text.contains("# TYPE coroner_index_commit_duration_seconds histogram"));
    assert!(text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).all(|l| l.starts_with("coroner_")), "{text}");
}
