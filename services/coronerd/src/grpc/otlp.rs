//! An OTLP logs receiver: `opentelemetry.proto.collector.logs.v1.LogsService/Export` on the gRPC
//! port, so an OpenTelemetry Collector (or any OTLP exporter) can ship a job's logs to coronerd.
//!
//! Mapping (documented in the README):
//! - job: resource attribute `coroner.job.id`, else `service.instance.id`, else the same keys on
//!   the log record; a record without a job is rejected (counted in `partial_success`);
//! - rank: `coroner.rank`, else `rank` (resource, else record; an int or a decimal string);
//! - host: resource `host.name`; world size: `coroner.world_size`, optional;
//! - stream: record attribute `log.iostream` (`stdout`/`stderr`), else stdout;
//! - line: the record's body (a string, bytes, or other values in their text form); one record
//!   is one line; a body over 1 MiB is cut there with a `[coroner: truncated N bytes]` marker;
//! - capture time: `time_unix_nano`, else `observed_time_unix_nano`, else the arrival time;
//! - sequence numbers: assigned by the server per (job, rank, stream), continuing after what
//!   the job already holds. Exports are committed one at a time, so numbers never race.

use crate::error::ServiceError;
use crate::jobs::Jobs;
use coroner_model::{now_ns, JobId, LogLine, Rank, Stream};
use opentelemetry_proto::tonic::collector::logs::v1::{
    logs_service_server::LogsService, ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::LogsServiceServer;

/// One record, mapped.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    pub job: JobId,
    pub rank: Option<u32>,
    pub host: String,
    pub world_size: Option<u32>,
    pub stream: Stream,
    pub time_ns: i64,
    pub bytes: Vec<u8>,
}

fn find<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref())
}

fn as_text(v: &AnyValue) -> Option<String> {
    match v.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        Value::BoolValue(b) => Some(b.to_string()),
        Value::DoubleValue(d) => Some(d.to_string()),
        Value::BytesValue(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

fn as_u32(v: &AnyValue) -> Option<u32> {
    match v.value.as_ref()? {
        Value::IntValue(i) => u32::try_from(*i).ok(),
        Value::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn body_bytes(v: Option<&AnyValue>) -> Vec<u8> {
    let Some(v) = v.and_then(|v| v.value.as_ref()) else { return Vec::new() };
    let mut bytes = match v {
        Value::StringValue(s) => s.clone().into_bytes(),
        Value::BytesValue(b) => b.clone(),
        other => format!("{other:?}").into_bytes(),
    };
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    coroner_model::cap_line(&mut bytes);
    bytes
}

/// Maps an export request; returns the records it could map, and how many it rejected and why.
pub fn map_request(req: &ExportLogsServiceRequest, now_ns: i64) -> (Vec<Mapped>, i64, String) {
    let mut out = Vec::new();
    let mut rejected = 0i64;
    let mut why = String::new();
    for rl in &req.resource_logs {
        let res: &[KeyValue] = rl.resource.as_ref().map(|r| r.attributes.as_slice()).unwrap_or(&[]);
        for sl in &rl.scope_logs {
            for rec in &sl.log_records {
                let attr = |keys: &[&str]| keys.iter().find_map(|k| find(res, k)).or_else(|| keys.iter().find_map(|k| find(&rec.attributes, k)));
                let job = attr(&["coroner.job.id", "service.instance.id"]).and_then(as_text).map(|s| JobId::parse(s.trim()));
                let job = match job {
                    Some(Ok(j)) => j,
                    Some(Err(e)) => {
                        rejected += 1;
                        why = format!("bad job id: {e}");
                        continue;
                    }
                    None => {
                        rejected += 1;
                        why = "no job id: set the resource attribute coroner.job.id (or service.instance.id)".into();
                        continue;
                    }
                };
                let time = [rec.time_unix_nano, rec.observed_time_unix_nano].into_iter().find(|t| *t != 0);
                out.push(Mapped {
                    job,
                    rank: attr(&["coroner.rank", "rank"]).and_then(as_u32),
                    host: attr(&["host.name"]).and_then(as_text).unwrap_or_default(),
                    world_size: attr(&["coroner.world_size"]).and_then(as_u32),
                    stream: attr(&["log.iostream"]).and_then(as_text).and_then(|s| Stream::parse(&s)).unwrap_or(Stream::Stdout),
                    time_ns: time.map(|t| i64::try_from(t).unwrap_or(i64::MAX)).unwrap_or(now_ns),
                    bytes: body_bytes(rec.body.as_ref()),
                });
            }
        }
    }
    (out, rejected, why)
}

/// The next sequence number per (job, rank, stream).
type NextSeq = HashMap<(JobId, Option<u32>, Stream), u64>;

pub struct OtlpLogs {
    jobs: Arc<Jobs>,
    metrics: Arc<crate::metrics::Metrics>,
    /// Host names are bounded like an agent's (`--max-string-bytes`).
    max_string_bytes: usize,
    /// Held across a commit, so exports are numbered and committed in one order.
    next_seq: tokio::sync::Mutex<NextSeq>,
}

impl OtlpLogs {
    pub fn new(jobs: Arc<Jobs>, metrics: Arc<crate::metrics::Metrics>, max_string_bytes: usize) -> Self {
        OtlpLogs { jobs, metrics, max_string_bytes, next_seq: tokio::sync::Mutex::new(HashMap::new()) }
    }

    async fn ingest(&self, records: Vec<Mapped>, now: i64) -> Result<(), ServiceError> {
        // Per job, per host: the lines in capture order within each (rank, stream).
        let mut by_job: BTreeMap<JobId, BTreeMap<String, Vec<Mapped>>> = BTreeMap::new();
        for m in records {
            by_job.entry(m.job.clone()).or_default().entry(m.host.clone()).or_default().push(m);
        }
        let mut next_seq = self.next_seq.lock().await;
        for (id, hosts) in by_job {
            // A world size is believed in proportion to the ranks this export names (`limits.rs`).
            let ranks = hosts.values().flatten().filter_map(|m| m.rank).collect::<std::collections::HashSet<_>>().len();
            let world = hosts.values().flatten().filter_map(|m| m.world_size).max().map(|w| self.jobs.believed_world_size(w, ranks.max(1)));
            let job = self.jobs.heard_from(&id, world, now).await?;
            let positions = job.positions();
            let ranks: Vec<(u32, String)> = hosts.values().flatten().filter_map(|m| m.rank.map(|r| (r, m.host.clone()))).collect();
            job.update(|p| {
                if let Some(w) = world {
                    p.set_world_size(w);
                }
                for (rank, host) in &ranks {
                    p.set_host(Rank(*rank), host);
                }
            });
            for (host, mut records) in hosts {
                records.sort_by_key(|m| (m.rank, m.stream, m.time_ns));
                let lines: Vec<LogLine> = records
                    .into_iter()
                    .map(|m| {
                        let key = (id.clone(), m.rank, m.stream);
                        let held = positions.get(&(m.rank, m.stream, 0)).copied().unwrap_or(0);
                        let next = next_seq.entry(key).or_insert(0);
                        *next = (*next).max(held);
                        let seq = *next;
                        *next += 1;
                        LogLine { rank: m.rank.map(Rank), stream: m.stream, seq, capture_ns: m.time_ns, bytes: m.bytes }
                    })
                    .collect();
                job.commit(lines, host).await?;
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl LogsService for OtlpLogs {
    async fn export(&self, req: Request<ExportLogsServiceRequest>) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let now = now_ns();
        let (records, mut rejected, mut why) = map_request(req.get_ref(), now);
        // Host names are shown and kept per rank: bounded and plain, like an agent's (`grpc/ingest/session_limits.rs`).
        let max = self.max_string_bytes;
        let before = records.len();
        let records: Vec<Mapped> = records.into_iter().filter(|m| m.host.len() <= max && !m.host.chars().any(char::is_control)).collect();
        if records.len() < before {
            rejected += (before - records.len()) as i64;
            why = format!("host.name over {max} bytes (--max-string-bytes) or holding control characters");
            crate::limits::Limit::StringLength.count(&self.metrics);
        }
        let metrics = &self.metrics;
        metrics.otlp_records.fetch_add(records.len() as u64, std::sync::atomic::Ordering::Relaxed);
        metrics.otlp_rejected.fetch_add(rejected.max(0) as u64, std::sync::atomic::Ordering::Relaxed);
        self.ingest(records, now).await?;
        let partial_success = (rejected > 0).then_some(ExportLogsPartialSuccess { rejected_log_records: rejected, error_message: why });
        Ok(Response::new(ExportLogsServiceResponse { partial_success }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn kv(k: &str, v: Value) -> KeyValue {
        KeyValue { key: k.into(), value: Some(AnyValue { value: Some(v) }), ..Default::default() }
    }

    #[test]
    fn resource_attributes_map_to_job_rank_and_host() {
        let rec = |body: &str, t: u64, extra: Vec<KeyValue>| LogRecord {
            time_unix_nano: t,
            observed_time_unix_nano: 7,
            body: Some(AnyValue { value: Some(Value::StringValue(body.into())) }),
            attributes: extra,
            ..Default::default()
        };
        let req = ExportLogsServiceRequest {
            resource_logs: vec![
                ResourceLogs {
                    resource: Some(Resource {
                        attributes: vec![
                            kv("service.instance.id", Value::StringValue("job-a".into())),
                            kv("rank", Value::StringValue("3".into())),
                            kv("host.name", Value::StringValue("node7".into())),
                        ],
                        ..Default::default()
                    }),
                    scope_logs: vec![ScopeLogs {
                        log_records: vec![rec("hello\n", 100, vec![kv("log.iostream", Value::StringValue("stderr".into()))]), rec("later", 0, vec![])],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ResourceLogs {
                    resource: None,
                    scope_logs: vec![ScopeLogs { log_records: vec![rec("orphan", 1, vec![])], ..Default::default() }],
                    ..Default::default()
                },
            ],
        };
        let (m, rejected, why) = map_request(&req, 999);
        assert_eq!(rejected, 1);
        assert!(why.contains("coroner.job.id"), "{why}");
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].job.as_str(), m[0].rank, m[0].host.as_str()), ("job-a", Some(3), "node7"));
        assert_eq!((m[0].stream, m[0].time_ns, m[0].bytes.as_slice()), (Stream::Stderr, 100, &b"hello"[..]));
        assert_eq!((m[1].stream, m[1].time_ns), (Stream::Stdout, 7));
    }
}
