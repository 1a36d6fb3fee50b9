//! OTLP records into a job: mapped (`mapping.rs`), retries dropped (`retry.rs`), numbered after
//! what the job holds, committed. The one receiver behind OTLP/gRPC (`grpc/otlp.rs`) and
//! OTLP/HTTP (`http/otlp.rs`).

use super::mapping::{map_request, Mapped, Mapping};
use super::retry::{self, Identity};
use crate::error::ServiceError;
use crate::job::Job;
use crate::jobs::Jobs;
use coroner_index::{SearchRequest, MAX_PAGE_SIZE};
use coroner_model::{JobId, LogLine, Rank, Stream};
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The most stored lines one (rank, stream) of an export is compared with: an export whose
/// records span more than this many held lines (records hours apart) is checked against the
/// first ones only.
const MAX_HELD_LINES: usize = 100_000;

/// The next sequence number per (job, rank, stream).
type NextSeq = HashMap<(JobId, Option<u32>, Stream), u64>;

pub struct OtlpReceiver {
    jobs: Arc<Jobs>,
    metrics: Arc<crate::metrics::Metrics>,
    /// Host names are bounded like an agent's (`--max-string-bytes`).
    max_string_bytes: usize,
    /// Held across a commit, so exports are checked, numbered and committed in one order.
    next_seq: tokio::sync::Mutex<NextSeq>,
}

impl OtlpReceiver {
    pub fn new(jobs: Arc<Jobs>, metrics: Arc<crate::metrics::Metrics>, max_string_bytes: usize) -> Self {
        OtlpReceiver { jobs, metrics, max_string_bytes, next_seq: tokio::sync::Mutex::new(HashMap::new()) }
    }

    /// Takes one export request: what it could not map is counted in `partial_success` (with
    /// the reason), the rest is committed before this returns.
    pub async fn export(&self, req: &ExportLogsServiceRequest, now: i64) -> Result<ExportLogsServiceResponse, ServiceError> {
        let mut mapping = map_request(req, now);
        self.refuse_bad_hosts(&mut mapping);
        let Mapping { records, rejected, why } = mapping;
        let metrics = &self.metrics;
        metrics.otlp_records.fetch_add(records.len() as u64, Relaxed);
        metrics.otlp_rejected.fetch_add(rejected.max(0) as u64, Relaxed);
        self.ingest(records, now).await?;
        let partial_success = (rejected > 0).then_some(ExportLogsPartialSuccess { rejected_log_records: rejected, error_message: why });
        Ok(ExportLogsServiceResponse { partial_success })
    }

    /// Host names are shown and kept per rank: bounded and plain, like an agent's
    /// (`grpc/ingest/session_limits.rs`).
    fn refuse_bad_hosts(&self, mapping: &mut Mapping) {
        let max = self.max_string_bytes;
        let before = mapping.records.len();
        mapping.records.retain(|m| m.host.len() <= max && !m.host.chars().any(char::is_control));
        let refused = before - mapping.records.len();
        if refused > 0 {
            mapping.reject_many(refused, format!("host.name over {max} bytes (--max-string-bytes) or holding control characters"));
            crate::limits::Limit::StringLength.count(&self.metrics);
        }
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
            let ranks = hosts.values().flatten().filter_map(|m| m.rank).collect::<HashSet<_>>().len();
            let world = hosts.values().flatten().filter_map(|m| m.world_size).max().map(|w| self.jobs.believed_world_size(w, ranks.max(1)));
            let job = self.jobs.heard_from(&id, world, now).await?;
            let ranks: Vec<(u32, String)> = hosts.values().flatten().filter_map(|m| m.rank.map(|r| (r, m.host.clone()))).collect();
            job.update(|p| {
                if let Some(w) = world {
                    p.set_world_size(w);
                }
                for (rank, host) in &ranks {
                    p.set_host(Rank(*rank), host);
                }
            });
            for (host, records) in hosts {
                let fresh = fresh_records(&job, records).await?;
                let positions = job.positions();
                let lines: Vec<LogLine> = fresh
                    .into_iter()
                    .map(|m| {
                        let held = positions.get(&(m.rank, m.stream, 0)).copied().unwrap_or(0);
                        let next = next_seq.entry((id.clone(), m.rank, m.stream)).or_insert(0);
                        *next = (*next).max(held);
                        let seq = *next;
                        *next += 1;
                        LogLine { rank: m.rank.map(Rank), stream: m.stream, seq, capture_ns: m.time_ns, bytes: m.bytes }
                    })
                    .collect();
                if !lines.is_empty() {
                    job.commit(lines, host).await?;
                }
            }
        }
        Ok(())
    }
}

/// `records` less those the job already holds (an exporter's retry) or that repeat within them,
/// in capture order within each (rank, stream).
async fn fresh_records(job: &Arc<Job>, records: Vec<Mapped>) -> Result<Vec<Mapped>, ServiceError> {
    let mut lanes: BTreeMap<(Option<u32>, Stream), Vec<Mapped>> = BTreeMap::new();
    for m in records {
        lanes.entry((m.rank, m.stream)).or_default().push(m);
    }
    let mut out = Vec::new();
    for ((rank, stream), mut lane) in lanes {
        lane.sort_by_key(|m| m.time_ns);
        let held = match retry::span(&lane) {
            Some(span) => held_identities(job, rank, stream, span).await?,
            None => HashSet::new(),
        };
        let dropped = retry::drop_held(&mut lane, held);
        if dropped > 0 {
            tracing::debug!(job = %job.id(), ?rank, dropped, "OTLP records already held (an exporter's retry)");
        }
        out.extend(lane);
    }
    Ok(out)
}

/// The identities of the lines the job's index holds for (rank, stream) within `span`.
async fn held_identities(job: &Arc<Job>, rank: Option<u32>, stream: Stream, span: (i64, i64)) -> Result<HashSet<Identity>, ServiceError> {
    let index = job.index().clone();
    let found = tokio::task::spawn_blocking(move || {
        let mut request =
            SearchRequest { rank, stream: Some(stream), capture_windows: Some(BTreeMap::from([(rank, span)])), limit: MAX_PAGE_SIZE, ..Default::default() };
        let mut held = HashSet::new();
        loop {
            let page = index.search(&request)?;
            held.extend(page.hits.into_iter().map(|h| (h.capture_ns, h.bytes)));
            match page.next_cursor {
                Some(c) if held.len() < MAX_HELD_LINES => request.cursor = Some(c),
                _ => return Ok::<_, coroner_index::IndexError>(held),
            }
        }
    })
    .await?;
    Ok(found?)
}
