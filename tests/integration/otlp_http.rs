//! OTLP/HTTP (`POST /v1/logs`) with the requests the exporters really send: the OpenTelemetry
//! Collector's `otlphttp` exporter (protobuf, gzip by default) and Vector's `opentelemetry` sink
//! (JSON, newline-delimited, with Vector's own fields beside `resourceLogs`, times as numbers);
//! a retry of the same records is not a duplicate; the spec's status codes; the write token.

use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use std::io::{Read, Write};
use std::time::Duration;

/// A raw HTTP/1.1 POST with `headers` and a binary `body`: (status, head, body).
pub fn post(port: u16, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let head = format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n{extra}\r\n", body.len());
    s.write_all(head.as_bytes()).expect("write head");
    s.write_all(body).expect("write body");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = raw.get(split + 4..).unwrap_or_default().to_vec();
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    (status, head, if chunked { unchunk(&body) } else { body })
}

fn unchunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&body[eol + 2..eol + 2 + size]);
        body = &body[eol + 2 + size + 2..];
    }
    out
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue { key: k.into(), value: Some(AnyValue { value: Some(v) }), ..Default::default() }
}

fn text(s: &str) -> Value {
    Value::StringValue(s.into())
}

/// What the Collector's k8sattributes processor leaves on a PyTorchJob worker pod's logs (the
/// job name promoted to `k8s.job.name`), with the `filelog` receiver's `log.iostream`.
pub fn pod(job: &str, pod: &str, rank: i64, node: &str, t0: u64, lines: &[&str]) -> ResourceLogs {
    ResourceLogs {
        resource: Some(Resource {
            attributes: vec![
                kv("k8s.job.name", text(job)),
                kv("k8s.pod.name", text(pod)),
                kv("service.instance.id", text(pod)),
                kv("service.name", text("trainer")),
                kv("k8s.node.name", text(node)),
                kv("coroner.rank", Value::IntValue(rank)),
            ],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            log_records: lines
                .iter()
                .enumerate()
                .map(|(i, l)| LogRecord {
                    time_unix_nano: t0 + i as u64 * 1_000_000,
                    observed_time_unix_nano: t0 + i as u64 * 1_000_000 + 500,
                    body: Some(AnyValue { value: Some(text(l)) }),
                    attributes: vec![kv("log.iostream", text("stderr")), kv("log.file.path", text("/var/log/pods/x/0.log"))],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The Collector's `otlphttp` exporter: protobuf, gzip (its default compression).
pub fn collector_post(port: u16, req: &ExportLogsServiceRequest, token: Option<&str>) -> (u16, String, Vec<u8>) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers =
        vec![("Content-Type", "application/x-protobuf"), ("Content-Encoding", "gzip"), ("User-Agent", "OpenTelemetry Collector Contrib/0.115.0 (linux/amd64)")];
    if let Some(a) = &auth {
        headers.push(("Authorization", a));
    }
    post(port, "/v1/logs", &headers, &gzip(&req.encode_to_vec()))
}

fn total(server: &TestServer, job: &str, query: &str) -> (u64, Vec<v1::SearchHit>) {
    runtime().block_on(async {
        let mut q = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        let r = q.search(v1::SearchRequest { job_id: job.into(), query: query.into(), limit: 100, ..Default::default() }).await.expect("search").into_inner();
        (r.total, r.hits)
    })
}

#[test]
fn the_collectors_otlphttp_export_is_one_job_across_pods_and_its_retry_is_no_duplicate() {
    let server = TestServer::start();
    let t0 = 1_714_560_000_000_000_000u64;
    let req = ExportLogsServiceRequest {
        resource_logs: vec![
            pod("llama-ft", "llama-ft-worker-0", 0, "node-a", t0, &["step 1 loss 2.1", "step 2 loss 2.0"]),
            pod(
                "llama-ft",
                "llama-ft-worker-1",
                1,
                "node-b",
                t0 + 300,
                &["step 1 loss 2.1", "RuntimeError: CUDA error: an illegal memory access was encountered"],
            ),
        ],
    };
    let (status, head, body) = collector_post(server.http_port, &req, None);
    assert_eq!(status, 200, "{head}\n{}", String::from_utf8_lossy(&body));
    assert!(head.to_ascii_lowercase().contains("content-type: application/x-protobuf"), "{head}");
    let resp = ExportLogsServiceResponse::decode(body.as_slice()).expect("an ExportLogsServiceResponse");
    assert_eq!(resp.partial_success, None, "full success leaves partial_success unset");

    let (n, hits) = total(&server, "llama-ft", "");
    assert_eq!(n, 4, "both pods' lines in one job: {hits:?}");
    let illegal = hits.iter().find(|h| h.line.contains("illegal memory")).expect("the error line");
    assert_eq!((illegal.rank, illegal.host.as_str(), illegal.stream.as_str()), (Some(1), "node-b", "stderr"));

    // The exporter timed out and sends the same request again: nothing new.
    let (status, _, _) = collector_post(server.http_port, &req, None);
    assert_eq!(status, 200);
    assert_eq!(total(&server, "llama-ft", "").0, 4, "a retry is not a duplicate");
    // A later export continues.
    let later = ExportLogsServiceRequest { resource_logs: vec![pod("llama-ft", "llama-ft-worker-0", 0, "node-a", t0 + 10_000_000, &["step 3 loss 1.9"])] };
    assert_eq!(collector_post(server.http_port, &later, None).0, 200);
    let (n, hits) = total(&server, "llama-ft", "step 3");
    assert_eq!((n, hits.first().map(|h| (h.rank, h.seq))), (1, Some((Some(0), 2))), "numbered after what rank 0 holds");
    let jobs = server.coroner(&["jobs", "--json"]);
    let jobs: serde_json::Value = serde_json::from_slice(&jobs.stdout).expect("jobs JSON");
    assert_eq!(jobs.as_array().map(Vec::len), Some(1), "one job, not one per pod: {jobs:#}");
}

/// What Vector's `opentelemetry` sink posts with `encoding.codec: json` and newline-delimited
/// framing (its documentation's example): one object per event, Vector's fields beside
/// `resourceLogs`, `timeUnixNano` a number.
fn vector_event(job: &str, rank: u32, t: u64, line: &str) -> String {
    serde_json::json!({
        "host": "vector-agent-7",
        "source_type": "kubernetes_logs",
        "resourceLogs": [{
            "resource": {"attributes": [
                {"key": "coroner.job", "value": {"stringValue": job}},
                {"key": "coroner.rank", "value": {"intValue": rank.to_string()}},
                {"key": "host.name", "value": {"stringValue": "node-v"}},
            ]},
            "scopeLogs": [{
                "scope": {"name": "vector"},
                "logRecords": [{
                    "timeUnixNano": t,
                    "observedTimeUnixNano": t.to_string(),
                    "severityText": "ERROR",
                    "traceId": "5B8EFFF798038103D269B633813FC60C",
                    "spanId": "EEE19B7EC3C1B174",
                    "body": {"stringValue": line},
                    "attributes": [{"key": "log.iostream", "value": {"stringValue": "stderr"}}],
                }],
            }],
        }],
    })
    .to_string()
}

#[test]
fn vectors_newline_delimited_json_and_the_json_partial_success() {
    let server = TestServer::start();
    let t = 1_714_560_000_000_000_000u64;
    let body =
        [vector_event("vec-job", 2, t, "NCCL WARN Cuda failure 'out of memory'"), vector_event("vec-job", 2, t + 1000, "second event")].join("\n") + "\n";
    let json = [("Content-Type", "application/json")];
    let (status, head, resp) = post(server.http_port, "/v1/logs", &json, body.as_bytes());
    assert_eq!(status, 200, "{head}\n{}", String::from_utf8_lossy(&resp));
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    let (n, hits) = total(&server, "vec-job", "");
    assert_eq!(n, 2, "{hits:?}");
    assert_eq!((hits[0].rank, hits[0].capture_ns, hits[0].stream.as_str()), (Some(2), t as i64, "stderr"));
    // Posted again (Vector retries on a timeout): no duplicate.
    assert_eq!(post(server.http_port, "/v1/logs", &json, body.as_bytes()).0, 200);
    assert_eq!(total(&server, "vec-job", "").0, 2);

    // A record with no job: accepted in part, said in OTLP's JSON.
    let orphan = r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"1","body":{"stringValue":"whose?"}}]}]}]}"#;
    let (status, _, resp) = post(server.http_port, "/v1/logs", &json, orphan.as_bytes());
    assert_eq!(status, 200);
    let resp: serde_json::Value = serde_json::from_slice(&resp).expect("JSON");
    let partial = &resp["partialSuccess"];
    assert_eq!(partial["rejectedLogRecords"].to_string().trim_matches('"'), "1", "{resp}");
    assert!(partial["errorMessage"].as_str().is_some_and(|m| m.contains("coroner.job")), "{resp}");
}

#[test]
fn bad_requests_get_the_specs_status_codes_with_a_status_body() {
    let server = TestServer::start();
    let (status, _, body) = post(server.http_port, "/v1/logs", &[("Content-Type", "application/x-protobuf")], b"\xff\xff\xff\xff");
    assert_eq!(status, 400, "undecodable: not retryable");
    let s: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    assert!(s.is_null(), "a protobuf request gets a protobuf Status, not JSON");
    assert!(String::from_utf8_lossy(&body).contains("ExportLogsServiceRequest"));
    let (status, _, body) = post(server.http_port, "/v1/logs", &[("Content-Type", "application/json")], b"{\"resourceLogs\": 5}");
    assert_eq!(status, 400);
    let s: serde_json::Value = serde_json::from_slice(&body).expect("a JSON Status");
    assert!(s["message"].as_str().is_some_and(|m| m.contains("JSON mapping")), "{s}");
    assert_eq!(post(server.http_port, "/v1/logs", &[("Content-Type", "text/plain")], b"hello").0, 415);
    let gz = [("Content-Type", "application/json"), ("Content-Encoding", "gzip")];
    assert_eq!(post(server.http_port, "/v1/logs", &gz, b"not gzip at all").0, 400);
    // An empty request is a success.
    assert_eq!(post(server.http_port, "/v1/logs", &[("Content-Type", "application/json")], b"{}").0, 200);
}

#[test]
fn otlp_http_needs_the_write_token_from_the_header() {
    let server = TestServer::start_with(|c| {
        c.write_token = Some("w-otlp-0123456789".into());
        c.read_token = Some("r-otlp-0123456789".into());
    });
    let req = ExportLogsServiceRequest { resource_logs: vec![pod("tok-job", "p0", 0, "n", 1_000, &["a line"])] };
    assert_eq!(collector_post(server.http_port, &req, None).0, 401);
    let (status, _, body) = collector_post(server.http_port, &req, Some("r-otlp-0123456789"));
    assert_eq!(status, 401, "the read token cannot write");
    assert!(String::from_utf8_lossy(&body).contains("read token cannot write"));
    assert_eq!(collector_post(server.http_port, &req, Some("w-otlp-0123456789")).0, 200);
}
