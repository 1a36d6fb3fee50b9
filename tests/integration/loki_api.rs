//! The Loki-compatible read API with the requests Grafana's Loki datasource sends
//! (`pkg/tsdb/loki/api.go` `makeDataRequest`: `url.Values.Encode()`, so keys sorted and spaces as
//! `+`; `start`/`end`/`time` in ns; `step` in ms; `limit` only when set; the connection test is
//! the instant query `vector(1)+vector(1)` at `time=4000000000`), answered in Loki's JSON.

use super::otlp_http::{collector_post, pod};
use crate::served::TestServer;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use serde_json::json;
use std::time::{Duration, Instant};

const T0: u64 = 1_714_560_000_000_000_000;
const START: u64 = T0 - 600_000_000_000;
const END: u64 = T0 + 600_000_000_000;

/// `url.QueryEscape` of a LogQL query, as Go's `url.Values.Encode` writes it.
fn escape(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            b' ' => "+".to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

fn query_range(server: &TestServer, query: &str, direction: &str, limit: u32) -> (u16, String) {
    server.get(&format!("/loki/api/v1/query_range?direction={direction}&end={END}&limit={limit}&query={}&start={START}&step=2000ms", escape(query)))
}

fn streams(body: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    assert_eq!((&v["status"], &v["data"]["resultType"]), (&json!("success"), &json!("streams")), "{v:#}");
    v["data"]["result"].clone()
}

fn lines_of(result: &serde_json::Value) -> Vec<String> {
    result
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v[1].as_str().map(str::to_string))
        .collect()
}

fn seed(server: &TestServer) {
    let req = ExportLogsServiceRequest {
        resource_logs: vec![
            pod("grafana-job", "w-0", 0, "node-a", T0, &["starting worker", "NCCL WARN Cuda failure 'out of memory'", "all good"]),
            pod("grafana-job", "w-1", 1, "node-b", T0 + 100, &["starting worker", "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191", "exiting"]),
        ],
    };
    assert_eq!(collector_post(server.http_port, &req, None).0, 200);
}

#[test]
fn grafanas_connection_test_labels_and_values() {
    let server = TestServer::start();
    seed(&server);
    let (status, body) = server.get("/loki/api/v1/query?direction=backward&query=vector%281%29%2Bvector%281%29&time=4000000000");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    // Grafana checks one sample of value 2. Its time: Loki reads ten digits or fewer as seconds
    // (`parseTimestamp`), so `4000000000` is 4e9 s, as coroner reads it.
    assert_eq!(v, json!({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [4_000_000_000.0, "2"]}]}}));

    let (status, labels) = server.get_json(&format!("/loki/api/v1/labels?end={END}&start={START}"));
    assert_eq!((status, &labels), (200, &json!({"status": "success", "data": ["host", "job", "rank", "stream"]})));
    let (_, jobs) = server.get_json(&format!("/loki/api/v1/label/job/values?end={END}&start={START}"));
    assert_eq!(jobs["data"], json!(["grafana-job"]), "{jobs}");
    // Ranks and hosts come from the job's report, written a moment after its lines.
    let deadline = Instant::now() + Duration::from_secs(30);
    let path = format!("/loki/api/v1/label/rank/values?end={END}&query={}&start={START}", escape(r#"{job="grafana-job"}"#));
    loop {
        let (status, ranks) = server.get_json(&path);
        assert_eq!(status, 200, "{ranks}");
        if ranks["data"] == json!(["0", "1"]) {
            break;
        }
        assert!(Instant::now() < deadline, "rank values: {ranks}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, hosts) =
        server.get_json(&format!("/loki/api/v1/label/host/values?end={END}&query={}&start={START}", escape(r#"{job="grafana-job", host=~"node-b"}"#)));
    assert_eq!(hosts["data"], json!(["node-b"]), "{hosts}");
    let (_, none) = server.get_json("/loki/api/v1/label/pod/values");
    assert_eq!(none["data"], json!([]));
}

#[test]
fn query_range_answers_selectors_and_line_filters_in_lokis_shape() {
    let server = TestServer::start();
    seed(&server);
    let (status, body) = query_range(&server, r#"{job="grafana-job"} |= "NCCL""#, "backward", 1000);
    assert_eq!(status, 200, "{body}");
    let result = streams(&body);
    assert_eq!(
        result,
        json!([
            {"stream": {"job": "grafana-job", "rank": "1", "host": "node-b", "stream": "stderr"},
             "values": [[(T0 + 100 + 1_000_000).to_string(), "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191"]]},
            {"stream": {"job": "grafana-job", "rank": "0", "host": "node-a", "stream": "stderr"},
             "values": [[(T0 + 1_000_000).to_string(), "NCCL WARN Cuda failure 'out of memory'"]]},
        ]),
        "newest first, one stream per rank"
    );

    // Forward, limited: the oldest lines, oldest first.
    let (_, body) = query_range(&server, r#"{job="grafana-job"}"#, "forward", 2);
    assert_eq!(lines_of(&streams(&body)), vec!["starting worker", "starting worker"]);
    let (_, body) = query_range(&server, r#"{job="grafana-job", rank="0"}"#, "forward", 10);
    assert_eq!(lines_of(&streams(&body)), vec!["starting worker", "NCCL WARN Cuda failure 'out of memory'", "all good"]);

    // Substrings the index cannot see as words, regexes, exclusions, label regexes.
    let (_, body) = query_range(&server, r#"{job="grafana-job"} |= "of mem""#, "backward", 100);
    assert_eq!(lines_of(&streams(&body)), vec!["NCCL WARN Cuda failure 'out of memory'"]);
    let (_, body) = query_range(&server, r#"{job=~"grafana-.*", host=~"node-(b|c)"} |~ "(?i)runtimeerror" != "WARN""#, "backward", 100);
    assert_eq!(lines_of(&streams(&body)), vec!["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191"]);
    let (_, body) = query_range(&server, r#"{job="grafana-job", rank!="0"} !~ "start|exit""#, "backward", 100);
    assert_eq!(lines_of(&streams(&body)), vec!["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191"]);
    // An instant log query reads up to its time.
    let (status, body) = server.get(&format!("/loki/api/v1/query?direction=backward&limit=1&query={}&time={END}", escape(r#"{job="grafana-job"}"#)));
    assert_eq!(status, 200, "{body}");
    assert_eq!(lines_of(&streams(&body)), vec!["exiting"]);
    // Nothing in the range.
    let (_, body) = server.get(&format!("/loki/api/v1/query_range?end=2000&query={}&start=1000", escape(r#"{job="grafana-job"}"#)));
    assert_eq!(streams(&body), json!([]));
}

#[test]
fn what_is_not_answered_is_refused_as_loki_refuses() {
    let server = TestServer::start();
    seed(&server);
    for (query, says) in [
        (r#"{job="grafana-job"} | json"#, "parse error at line 1, col 21"),
        // Grafana's log volume query beside every logs query.
        (r#"sum by (level, detected_level) (count_over_time({job="grafana-job"} |= "NCCL" [2s]))"#, "parse error"),
        (r#"{pod="x"}"#, "unknown label"),
    ] {
        let (status, body) = query_range(&server, query, "backward", 100);
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(says), "{query}: {body}");
        assert!(serde_json::from_str::<serde_json::Value>(&body).is_err(), "Loki's errors are plain text: {body}");
    }
    let (status, body) = server.get(&format!("/loki/api/v1/query_range?limit=0&query={}", escape(r#"{job="grafana-job"}"#)));
    assert_eq!(status, 400, "{body}");
}

#[test]
fn the_loki_api_needs_the_read_token_like_every_read() {
    let server = TestServer::start_with(|c| {
        c.write_token = Some("w-loki-0123456789".into());
        c.read_token = Some("r-loki-0123456789".into());
    });
    let path = "/loki/api/v1/labels";
    let (status, _, _) = crate::red_team::http(server.http_port, &format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n"));
    assert_eq!(status, 401);
    let (status, _, body) =
        crate::red_team::http(server.http_port, &format!("GET {path} HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer r-loki-0123456789\r\n\r\n"));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn the_provisioning_file_points_grafana_at_coronerds_http_port_with_the_read_token() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/datasource.yml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let value = |key: &str| text.lines().find_map(|l| l.trim().strip_prefix(&format!("{key}:")).map(|v| v.trim().to_string()));
    assert_eq!(value("type").as_deref(), Some("loki"));
    assert_eq!(value("httpHeaderName1").as_deref(), Some("Authorization"));
    assert_eq!(value("httpHeaderValue1").as_deref(), Some("Bearer ${CORONER_READ_TOKEN}"));
    let default_http = <coronerd::Config as clap::Parser>::try_parse_from(["coronerd"]).expect("defaults").http_addr.port();
    assert!(value("url").is_some_and(|u| u.ends_with(&format!(":{default_http}"))), "the url names coronerd's HTTP port {default_http}: {text}");
}
