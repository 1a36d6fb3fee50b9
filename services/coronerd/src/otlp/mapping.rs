//! What an OTLP log record is to coroner: its job, rank, host, stream, capture time and line.
//! Pure (no IO), and the one mapping OTLP/gRPC and OTLP/HTTP share.
//!
//! Each attribute below is looked up key by key, in the order listed; for each key the resource
//! attributes first, then the record's. The first key present wins (docs/OTLP.md):
//! - job: [`JOB_KEYS`]. `service.name` is the last resort, and an SDK's default
//!   (`unknown_service`, `unknown_service:python`) is no job name. `service.instance.id` is never
//!   the job: it names one pod or process, and a job has many. A record without a job is
//!   rejected (counted in `partial_success`).
//! - rank: [`RANK_KEYS`] (an int or a decimal string); absent: a line no rank owns.
//! - host: [`HOST_KEYS`]; world size: [`WORLD_SIZE_KEYS`], optional.
//! - stream: [`STREAM_KEYS`] (`stdout`, `stderr`), else stdout.
//! - line: the record's body (a string, bytes, or other values in their text form), trailing
//!   newlines removed; one record is one line; over 1 MiB it is cut with a marker.
//! - capture time: `time_unix_nano`, else `observed_time_unix_nano`, else the arrival time.

use coroner_model::{JobId, Stream};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};

/// Where a record's job id comes from, most specific first.
pub const JOB_KEYS: [&str; 5] = ["coroner.job", "coroner.job.id", "k8s.job.name", "slurm.job_id", "service.name"];
/// Where its rank comes from.
pub const RANK_KEYS: [&str; 2] = ["coroner.rank", "rank"];
/// Where its host comes from.
pub const HOST_KEYS: [&str; 2] = ["host.name", "k8s.node.name"];
/// Where the job's world size comes from.
pub const WORLD_SIZE_KEYS: [&str; 1] = ["coroner.world_size"];
/// Where its stream comes from.
pub const STREAM_KEYS: [&str; 1] = ["log.iostream"];

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

/// The records of one request that could be mapped, and those that could not.
#[derive(Debug, Default, PartialEq)]
pub struct Mapping {
    pub records: Vec<Mapped>,
    pub rejected: i64,
    /// Why the last rejected record was (for `partial_success.error_message`).
    pub why: String,
}

impl Mapping {
    /// Rejects a record with a reason.
    pub fn reject(&mut self, why: String) {
        self.reject_many(1, why);
    }

    /// Rejects `n` records for one reason.
    pub fn reject_many(&mut self, n: usize, why: String) {
        self.rejected = self.rejected.saturating_add(i64::try_from(n).unwrap_or(i64::MAX));
        self.why = why;
    }
}

fn find<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref())
}

/// The first of `keys` present, each looked up on the resource, then on the record.
fn lookup<'a, T>(keys: &[&str], resource: &'a [KeyValue], record: &'a [KeyValue], read: impl Fn(&str, &'a AnyValue) -> Option<T>) -> Option<T> {
    keys.iter().find_map(|k| [resource, record].into_iter().find_map(|attrs| find(attrs, k).and_then(|v| read(k, v))))
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

/// A job name from `key`, or none: an empty value, or an SDK's default service name.
fn job_name(key: &str, v: &AnyValue) -> Option<String> {
    let s = as_text(v)?.trim().to_string();
    let sdk_default = key == "service.name" && (s == "unknown_service" || s.starts_with("unknown_service:"));
    (!s.is_empty() && !sdk_default).then_some(s)
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

/// Maps an export request; `now_ns` is the capture time of a record that carries none.
pub fn map_request(req: &ExportLogsServiceRequest, now_ns: i64) -> Mapping {
    let mut out = Mapping::default();
    for rl in &req.resource_logs {
        let res: &[KeyValue] = rl.resource.as_ref().map(|r| r.attributes.as_slice()).unwrap_or(&[]);
        for rec in rl.scope_logs.iter().flat_map(|sl| &sl.log_records) {
            let attrs = rec.attributes.as_slice();
            let job = match lookup(&JOB_KEYS, res, attrs, job_name).map(|s| JobId::parse(&s)) {
                Some(Ok(j)) => j,
                Some(Err(e)) => {
                    out.reject(format!("bad job id: {e}"));
                    continue;
                }
                None => {
                    out.reject(format!("no job id: set the resource attribute coroner.job (read in this order: {})", JOB_KEYS.join(", ")));
                    continue;
                }
            };
            let time = [rec.time_unix_nano, rec.observed_time_unix_nano].into_iter().find(|t| *t != 0);
            out.records.push(Mapped {
                job,
                rank: lookup(&RANK_KEYS, res, attrs, |_, v| as_u32(v)),
                host: lookup(&HOST_KEYS, res, attrs, |_, v| as_text(v)).unwrap_or_default(),
                world_size: lookup(&WORLD_SIZE_KEYS, res, attrs, |_, v| as_u32(v)),
                stream: lookup(&STREAM_KEYS, res, attrs, |_, v| as_text(v).and_then(|s| Stream::parse(&s))).unwrap_or(Stream::Stdout),
                time_ns: time.map(|t| i64::try_from(t).unwrap_or(i64::MAX)).unwrap_or(now_ns),
                bytes: body_bytes(rec.body.as_ref()),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn kv(k: &str, v: &str) -> KeyValue {
        KeyValue { key: k.into(), value: Some(AnyValue { value: Some(Value::StringValue(v.into())) }), ..Default::default() }
    }

    fn record(body: &str, t: u64, attributes: Vec<KeyValue>) -> LogRecord {
        LogRecord {
            time_unix_nano: t,
            observed_time_unix_nano: 7,
            body: Some(AnyValue { value: Some(Value::StringValue(body.into())) }),
            attributes,
            ..Default::default()
        }
    }

    fn request(resource: Vec<KeyValue>, records: Vec<LogRecord>) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(Resource { attributes: resource, ..Default::default() }),
                scope_logs: vec![ScopeLogs { log_records: records, ..Default::default() }],
                ..Default::default()
            }],
        }
    }

    fn job_of(resource: Vec<KeyValue>, record_attrs: Vec<KeyValue>) -> Option<String> {
        let m = map_request(&request(resource, vec![record("x", 1, record_attrs)]), 0);
        m.records.first().map(|r| r.job.as_str().to_string())
    }

    #[test]
    fn rule_the_job_comes_from_the_first_key_present_in_the_documented_order() {
        let all = || vec![kv("service.name", "svc"), kv("slurm.job_id", "4242"), kv("k8s.job.name", "k8s-job"), kv("coroner.job", "cj")];
        assert_eq!(job_of(all(), vec![]).as_deref(), Some("cj"));
        assert_eq!(job_of(all()[..3].to_vec(), vec![]).as_deref(), Some("k8s-job"));
        assert_eq!(job_of(all()[..2].to_vec(), vec![]).as_deref(), Some("4242"));
        assert_eq!(job_of(all()[..1].to_vec(), vec![]).as_deref(), Some("svc"));
        assert_eq!(job_of(vec![kv("coroner.job.id", "old-key")], vec![]).as_deref(), Some("old-key"));
    }

    #[test]
    fn rule_a_more_specific_key_on_the_record_beats_a_vaguer_one_on_the_resource() {
        assert_eq!(job_of(vec![kv("service.name", "trainer")], vec![kv("coroner.job", "run-7")]).as_deref(), Some("run-7"));
        // The same key on both: the resource's.
        assert_eq!(job_of(vec![kv("coroner.job", "res")], vec![kv("coroner.job", "rec")]).as_deref(), Some("res"));
    }

    #[test]
    fn rule_pods_of_one_job_are_one_job_not_one_per_service_instance() {
        let pod = |i: &str| vec![kv("k8s.job.name", "llama-70b"), kv("service.instance.id", i), kv("service.name", "trainer")];
        assert_eq!(job_of(pod("pod-a"), vec![]), job_of(pod("pod-b"), vec![]));
        assert_eq!(job_of(vec![kv("service.instance.id", "pod-a")], vec![]), None, "an instance id alone is no job");
    }

    #[test]
    fn rule_an_sdk_default_service_name_is_no_job() {
        let m = map_request(&request(vec![kv("service.name", "unknown_service:python")], vec![record("x", 1, vec![])]), 0);
        assert_eq!((m.records.len(), m.rejected), (0, 1));
        assert!(m.why.contains("coroner.job"), "{}", m.why);
    }

    #[test]
    fn rule_a_bad_job_id_is_rejected_with_the_reason() {
        let m = map_request(&request(vec![kv("coroner.job", "a/b")], vec![record("x", 1, vec![])]), 0);
        assert_eq!(m.rejected, 1);
        assert!(m.why.starts_with("bad job id"), "{}", m.why);
    }

    #[test]
    fn rank_host_stream_time_and_line_follow_their_keys() {
        let rank = KeyValue { key: "coroner.rank".into(), value: Some(AnyValue { value: Some(Value::IntValue(3)) }), ..Default::default() };
        let req = request(
            vec![kv("coroner.job", "j"), rank, kv("k8s.node.name", "node7")],
            vec![record("hello\r\n", 100, vec![kv("log.iostream", "stderr")]), record("later", 0, vec![kv("rank", "5")])],
        );
        let m = map_request(&req, 999);
        assert_eq!(m.rejected, 0);
        let (a, b) = (&m.records[0], &m.records[1]);
        assert_eq!((a.rank, a.host.as_str(), a.stream, a.time_ns, a.bytes.as_slice()), (Some(3), "node7", Stream::Stderr, 100, &b"hello"[..]));
        // The resource's rank wins over the record's; no time: the observed time.
        assert_eq!((b.rank, b.stream, b.time_ns), (Some(3), Stream::Stdout, 7));
    }

    #[test]
    fn a_record_without_any_time_is_captured_at_arrival() {
        let mut r = record("x", 0, vec![]);
        r.observed_time_unix_nano = 0;
        let m = map_request(&request(vec![kv("coroner.job", "j")], vec![r]), 999);
        assert_eq!(m.records[0].time_ns, 999);
    }
}
