//! The Query service: jobs, reports, search, counts per rank, the timeline, snapshots, and a live
//! watch of a job's report. Search and the timeline are computed in [`crate::views`], shared with
//! the web page; jobs are reached through the registry ([`Jobs`]) and their methods only.

use crate::error::ServiceError;
use crate::grpc::paging;
use crate::jobs::Jobs;
use crate::searches::Searches;
use crate::snapshots::SnapshotStore;
use crate::views::search::{self, SearchParams};
use crate::views::timeline::{Timeline, TimelineOptions};
use crate::views::{job_id, snapshot_file};
use coroner_model::Report;
use coroner_proto::report as wire;
use coroner_proto::v1::{self, query_server::Query};
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// Bytes per GetSnapshot message.
const SNAPSHOT_CHUNK: usize = 256 << 10;

pub struct QueryService {
    jobs: Arc<Jobs>,
    snapshots: Arc<SnapshotStore>,
    searches: Arc<Searches>,
}

impl QueryService {
    pub fn new(jobs: Arc<Jobs>, snapshots: Arc<SnapshotStore>, searches: Arc<Searches>) -> Self {
        QueryService { jobs, snapshots, searches }
    }
}

pub fn report_response(report: &Report) -> v1::ReportResponse {
    let first = report.first_failure.as_ref();
    v1::ReportResponse {
        job_id: report.job_id.clone(),
        verdict: report.verdict.as_str().to_string(),
        culprit_rank: first.and_then(|f| f.rank.and_then(coroner_model::Rank::known).map(|r| r.0)),
        fault_class: first.map(|f| f.class.as_str().to_string()).unwrap_or_default(),
        report_json: serde_json::to_string_pretty(report).unwrap_or_default(),
        report_text: coroner_analysis::text::render(report),
        report: Some(wire::report_to_wire(report)),
        verdict_code: wire::verdict_to_wire(report.verdict) as i32,
        fault_class_code: first.map_or(v1::FaultClass::Unspecified, |f| wire::fault_class_to_wire(f.class)) as i32,
    }
}

fn job_summary(row: coroner_store::JobRow, ranks: u32) -> v1::JobSummary {
    let class = row.fault_class.unwrap_or_default();
    v1::JobSummary {
        job_id: row.job_id.to_string(),
        verdict_code: coroner_model::Verdict::parse(&row.verdict).map_or(v1::Verdict::Unspecified, wire::verdict_to_wire) as i32,
        verdict: row.verdict,
        culprit_rank: row.culprit_rank.and_then(coroner_model::Rank::known).map(|r| r.0),
        fault_class_code: wire::fault_class_name_to_wire(&class) as i32,
        fault_class: class,
        ranks: row.world_size.unwrap_or(ranks).max(ranks),
        lines: row.lines,
        first_seen_ns: row.first_seen_ns,
        last_seen_ns: row.last_seen_ns,
    }
}

/// What a ListJobs page token is bound to: the request's filters.
#[derive(serde::Serialize, serde::Deserialize, PartialEq)]
struct JobFilters {
    verdict: String,
    fault_class: String,
    since_ns: i64,
    until_ns: i64,
}

/// A snapshot's place in ListSnapshots' order: capture time, rank (none first), name, content.
type SnapshotKey = (i64, Option<u32>, String, String);

fn snapshot_key(s: &coroner_store::SnapshotRecord) -> SnapshotKey {
    (s.captured_ns, s.rank.map(|r| r.0), s.name.clone(), s.sha256.clone())
}

/// A suspect's place in ListSuspects' order (the analysis's): flagged first, highest score first,
/// then host and GPU.
type SuspectKey = (bool, i64, String, Option<String>);

fn suspect_key(s: &coroner_model::Suspect) -> SuspectKey {
    (!s.flagged, paging::descending(s.score), s.host.clone(), s.gpu.clone())
}

fn timeline_response(t: Timeline) -> v1::TimelineResponse {
    v1::TimelineResponse {
        job_id: t.job_id,
        grouped_by_host: t.grouped_by_host,
        start_ns: t.start_ns,
        end_ns: t.end_ns,
        culprit_rank: t.culprit_rank,
        failure_ns: t.failure_ns,
        verdict: t.verdict,
        lanes: t
            .lanes
            .into_iter()
            .map(|l| v1::TimelineLane {
                label: l.label,
                ranks: l.ranks,
                host: l.host,
                role: l.role,
                start_ns: l.start_ns,
                end_ns: l.end_ns,
                events_total: l.events_total,
                ended: l.ended,
                events: l
                    .events
                    .into_iter()
                    .map(|e| v1::TimelineEvent { time_ns: e.time_ns, rank: e.rank, kind: e.kind, role: e.role, text: e.text, stream: e.stream, seq: e.seq })
                    .collect(),
            })
            .collect(),
    }
}

pub fn snapshot_info(s: &coroner_store::SnapshotRecord) -> v1::SnapshotInfo {
    v1::SnapshotInfo {
        rank: s.rank.map(|r| r.0),
        kind: s.kind.clone(),
        name: s.name.clone(),
        size: s.size,
        sha256: s.sha256.clone(),
        captured_ns: s.captured_ns,
        stored_bytes: s.stored_bytes,
    }
}

type ReportStream = Pin<Box<dyn Stream<Item = Result<v1::ReportResponse, Status>> + Send>>;
type SnapshotStream = Pin<Box<dyn Stream<Item = Result<v1::SnapshotData, Status>> + Send>>;

#[tonic::async_trait]
impl Query for QueryService {
    async fn list_jobs(&self, req: Request<v1::ListJobsRequest>) -> Result<Response<v1::ListJobsResponse>, Status> {
        let r = req.into_inner();
        let filters = JobFilters { verdict: r.verdict, fault_class: r.fault_class, since_ns: r.since_ns, until_ns: r.until_ns };
        let after: Option<(i64, String)> = paging::decode(&r.page_token, "jobs", &filters)?;
        let after = match after {
            Some((last_seen_ns, id)) => Some(coroner_store::JobPosition { last_seen_ns, job_id: job_id(&id)? }),
            None => None,
        };
        let size = paging::page_size(r.page_size);
        let filter = coroner_store::JobFilter {
            verdict: (!filters.verdict.is_empty()).then(|| filters.verdict.clone()),
            fault_class: (!filters.fault_class.is_empty()).then(|| filters.fault_class.clone()),
            since_ns: (filters.since_ns != 0).then_some(filters.since_ns),
            until_ns: (filters.until_ns != 0).then_some(filters.until_ns),
            host: None,
            after,
            // One more than a page: whether another page follows.
            limit: Some(size + 1),
        };
        let mut rows = self.jobs.list(&filter).await?;
        let more = rows.len() > size as usize;
        rows.truncate(size as usize);
        let next_page_token = match rows.last().filter(|_| more) {
            Some(last) => paging::encode("jobs", &filters, &(last.last_seen_ns, last.job_id.to_string()))?,
            None => String::new(),
        };
        let mut jobs = Vec::with_capacity(rows.len());
        for row in rows {
            let ranks = self.jobs.ranked_sessions(&row.job_id).await?;
            jobs.push(job_summary(row, ranks));
        }
        Ok(Response::new(v1::ListJobsResponse { jobs, next_page_token }))
    }

    async fn get_report(&self, req: Request<v1::GetReportRequest>) -> Result<Response<v1::ReportResponse>, Status> {
        let id = job_id(&req.into_inner().job_id)?;
        let job = self.jobs.get(&id, false).await?;
        let report = job.current_report().await?;
        let report = self.jobs.with_history(report).await;
        Ok(Response::new(report_response(&report)))
    }

    async fn search(&self, req: Request<v1::SearchRequest>) -> Result<Response<v1::SearchResponse>, Status> {
        let r = req.into_inner();
        // Before anything else: a query over the parse budget costs nothing more.
        self.searches.check(&r.query)?;
        let id = job_id(&r.job_id)?;
        let job = self.jobs.get(&id, false).await?;
        let params = SearchParams {
            query: r.query,
            rank: r.rank,
            host: Some(r.host),
            stream: Some(r.stream),
            severity: Some(r.severity),
            kind: Some(r.kind),
            since_ns: r.since_ns,
            until_ns: r.until_ns,

            limit: (if r.page_size != 0 { r.page_size } else { r.limit }) as usize,
            cursor: Some(search_token(r.page_token, r.cursor)?),
            descending: r.newest_first,
            context: r.context as usize,
        };
        let result = search::search(&self.searches, &job, params).await?;
        let hits = result
            .hits
            .into_iter()
            .map(|h| v1::SearchHit {
                rank: h.rank,
                time_ns: h.time_ns,
                stream: h.stream,
                line: h.line,
                capture_ns: h.capture_ns,
                host: h.host,
                seq: h.seq,
                context: h.context,
            })
            .collect();
        let next = result.next_cursor.unwrap_or_default();
        Ok(Response::new(v1::SearchResponse { hits, total: result.total, next_cursor: next.clone(), next_page_token: next }))
    }

    async fn count_by_rank(&self, req: Request<v1::CountByRankRequest>) -> Result<Response<v1::CountByRankResponse>, Status> {
        let r = req.into_inner();
        self.searches.check(&r.query)?;
        let job = self.jobs.get(&job_id(&r.job_id)?, false).await?;
        let counts = search::count_by_rank(&self.searches, &job, r.query).await?;
        let total = counts.values().sum();
        let counts = counts.into_iter().map(|(rank, count)| v1::RankCount { rank, count }).collect();
        Ok(Response::new(v1::CountByRankResponse { counts, total }))
    }

    async fn timeline(&self, req: Request<v1::TimelineRequest>) -> Result<Response<v1::TimelineResponse>, Status> {
        let r = req.into_inner();
        let job = self.jobs.get(&job_id(&r.job_id)?, false).await?;
        let defaults = TimelineOptions::default();
        let opts = TimelineOptions {
            group_by_host: r.group_by_host,
            max_lanes: if r.max_lanes == 0 { defaults.max_lanes } else { r.max_lanes.min(10_000) as usize },
            max_events_per_lane: if r.max_events_per_lane == 0 { defaults.max_events_per_lane } else { r.max_events_per_lane.min(10_000) as usize },
        };
        let t = search::timeline(&self.jobs, &job, opts).await?;
        Ok(Response::new(timeline_response(t)))
    }

    async fn list_snapshots(&self, req: Request<v1::ListSnapshotsRequest>) -> Result<Response<v1::ListSnapshotsResponse>, Status> {
        let r = req.into_inner();
        let after: Option<SnapshotKey> = paging::decode(&r.page_token, "snapshots", &r.job_id)?;
        let job = self.jobs.get(&job_id(&r.job_id)?, false).await?;
        let snapshots = job.snapshots().await?;
        let (page, next) = paging::page_of(snapshots, snapshot_key, after.as_ref(), paging::page_size(r.page_size));
        let next_page_token = next.map(|k| paging::encode("snapshots", &r.job_id, &k)).transpose()?.unwrap_or_default();
        Ok(Response::new(v1::ListSnapshotsResponse { snapshots: page.iter().map(snapshot_info).collect(), next_page_token }))
    }

    type GetSnapshotStream = SnapshotStream;

    async fn get_snapshot(&self, req: Request<v1::GetSnapshotRequest>) -> Result<Response<Self::GetSnapshotStream>, Status> {
        let r = req.into_inner();
        let (record, path) = snapshot_file(&self.jobs, &self.snapshots, &r.job_id, &r.sha256).await?;
        let mut file = tokio::fs::File::open(&path).await.map_err(|e| ServiceError::Internal(format!("open snapshot {}: {e}", path.display())))?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut info = Some(snapshot_info(&record));
            let mut offset = 0u64;
            loop {
                let mut buf = vec![0u8; SNAPSHOT_CHUNK];
                let n = match file.read(&mut buf).await {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = tx.send(Err(Status::unavailable(format!("read snapshot: {e}")))).await;
                        return;
                    }
                };
                if n == 0 && info.is_none() {
                    return;
                }
                buf.truncate(n);
                if tx.send(Ok(v1::SnapshotData { info: info.take(), offset, data: buf })).await.is_err() || n == 0 {
                    return;
                }
                offset += n as u64;
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    type WatchJobStream = ReportStream;

    async fn watch_job(&self, req: Request<v1::GetReportRequest>) -> Result<Response<Self::WatchJobStream>, Status> {
        let id = job_id(&req.into_inner().job_id)?;
        // A job may be watched before its agents start (`Jobs::watched`).
        let job = self.jobs.watched(&id).await?;
        let mut rx = job.watch();
        rx.borrow_and_update();
        let first = job.current_report().await?;
        Ok(Response::new(Box::pin(watch_stream(first, rx, self.jobs.stopping()))))
    }

    async fn list_suspects(&self, req: Request<v1::ListSuspectsRequest>) -> Result<Response<v1::ListSuspectsResponse>, Status> {
        let r = req.into_inner();
        let filters = (r.since_ns, r.all);
        let after: Option<SuspectKey> = paging::decode(&r.page_token, "suspects", &filters)?;
        let since = (r.since_ns != 0).then_some(r.since_ns);
        let list = self.jobs.suspects(since, r.all).await?;
        let (page, next) = paging::page_of(list, suspect_key, after.as_ref(), paging::page_size(r.page_size));
        let next_page_token = next.map(|k| paging::encode("suspects", &filters, &k)).transpose()?.unwrap_or_default();
        Ok(Response::new(v1::ListSuspectsResponse { suspects: page.into_iter().map(coroner_proto::convert::suspect_to_wire).collect(), next_page_token }))
    }
}

/// Search pages with the index's keyset cursor: `page_token`, or the older `cursor` field (the
/// same value). Sent both, they must agree.
fn search_token(page_token: String, cursor: String) -> Result<String, ServiceError> {
    match (page_token.is_empty(), cursor.is_empty()) {
        (false, false) if page_token != cursor => {
            Err(ServiceError::InvalidArgument("page_token and cursor differ: send one of them (cursor is the older name)".into()))
        }
        (true, _) => Ok(cursor),
        _ => Ok(page_token),
    }
}

/// What a watcher cares about: the verdict, the culprit and class, how far the cascade reached,
/// and which ranks are suspected of hanging while the job runs.
fn headline(r: &Report) -> impl PartialEq {
    let suspects: Vec<_> = r.live_findings.iter().map(|f| f.rank).collect();
    (r.verdict, r.first_failure.as_ref().map(|f| (f.rank, f.class)), r.cascade.len(), suspects)
}

/// Yields the first report, then every report whose headline differs from the last one sent.
fn watch_stream(
    first: Arc<Report>,
    rx: tokio::sync::watch::Receiver<Option<Arc<Report>>>,
    shutdown: tokio_util::sync::CancellationToken,
) -> impl Stream<Item = Result<v1::ReportResponse, Status>> + Send {
    futures::stream::unfold((Some(first.clone()), first, rx, shutdown), |(pending, last, mut rx, shutdown)| async move {
        if let Some(r) = pending {
            return Some((Ok(report_response(&r)), (None, last, rx, shutdown)));
        }
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                changed = rx.changed() => if changed.is_err() { return None },
            }
            let next = rx.borrow_and_update().clone();
            if let Some(r) = next {
                if headline(&r) != headline(&last) {
                    return Some((Ok(report_response(&r)), (None, r, rx, shutdown)));
                }
            }
        }
    })
}
