//! The Query service: jobs, reports, search, counts per rank, the timeline, snapshots, and a live
//! watch of a job's report. Search and the timeline are computed in [`crate::views`], shared with
//! the web page; jobs are reached through the registry ([`Jobs`]) and their methods only.

use crate::error::ServiceError;
use crate::jobs::Jobs;
use crate::searches::Searches;
use crate::snapshots::SnapshotStore;
use crate::views::search::{self, SearchParams};
use crate::views::timeline::{Timeline, TimelineOptions};
use crate::views::{job_id, snapshot_file};
use coroner_model::Report;
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
        culprit_rank: first.and_then(|f| f.rank.map(|r| r.0)),
        fault_class: first.map(|f| f.class.as_str().to_string()).unwrap_or_default(),
        report_json: serde_json::to_string_pretty(report).unwrap_or_default(),
        report_text: coroner_analysis::text::render(report),
    }
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
        let filter = coroner_store::JobFilter {
            verdict: (!r.verdict.is_empty()).then_some(r.verdict),
            fault_class: (!r.fault_class.is_empty()).then_some(r.fault_class),
            since_ns: (r.since_ns != 0).then_some(r.since_ns),
        };
        let rows = self.jobs.store.list_jobs(&filter).await.map_err(ServiceError::from)?;
        let mut jobs = Vec::with_capacity(rows.len());
        for row in rows.into_iter().filter(|row| r.until_ns == 0 || row.first_seen_ns <= r.until_ns) {
            let ranks = self.jobs.store.sessions(&row.job_id).await.map_err(ServiceError::from)?.iter().filter(|s| s.rank.is_some()).count() as u32;
            jobs.push(v1::JobSummary {
                job_id: row.job_id.to_string(),
                verdict: row.verdict,
                culprit_rank: row.culprit_rank.map(|r| r.0),
                fault_class: row.fault_class.unwrap_or_default(),
                ranks: row.world_size.unwrap_or(ranks).max(ranks),
                lines: row.lines,
                first_seen_ns: row.first_seen_ns,
                last_seen_ns: row.last_seen_ns,
            });
        }
        Ok(Response::new(v1::ListJobsResponse { jobs }))
    }

    async fn get_report(&self, req: Request<v1::GetReportRequest>) -> Result<Response<v1::ReportResponse>, Status> {
        let id = job_id(&req.into_inner().job_id)?;
        let job = self.jobs.get(&id, false).await?;
        let report = job.current_report().await?;
        let report = crate::incidents::with_history(&self.jobs.store, report).await;
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
            limit: r.limit as usize,
            cursor: Some(r.cursor),
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
        Ok(Response::new(v1::SearchResponse { hits, total: result.total, next_cursor: result.next_cursor.unwrap_or_default() }))
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

    async fn list_snapshots(&self, req: Request<v1::GetReportRequest>) -> Result<Response<v1::ListSnapshotsResponse>, Status> {
        let job = self.jobs.get(&job_id(&req.into_inner().job_id)?, false).await?;
        let snapshots = self.jobs.store.snapshots(job.id()).await.map_err(ServiceError::from)?;
        Ok(Response::new(v1::ListSnapshotsResponse { snapshots: snapshots.iter().map(snapshot_info).collect() }))
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
        // A job may be watched before its agents start: it is created empty, counted against
        // --max-jobs like any other (a read token cannot open unbounded jobs).
        if self.jobs.store.get_job(&id).await.map_err(ServiceError::from)?.is_none() {
            self.jobs.admit_new(&id).await?;
            let now = coroner_model::now_ns();
            self.jobs.store.touch_job(&id, None, now).await.map_err(ServiceError::from)?;
        }
        let job = self.jobs.get(&id, true).await?;
        let mut rx = job.watch();
        rx.borrow_and_update();
        let first = job.current_report().await?;
        Ok(Response::new(Box::pin(watch_stream(first, rx, self.jobs.shutdown.clone()))))
    }

    async fn list_suspects(&self, req: Request<v1::ListSuspectsRequest>) -> Result<Response<v1::ListSuspectsResponse>, Status> {
        let r = req.into_inner();
        let since = (r.since_ns != 0).then_some(r.since_ns);
        let list = crate::incidents::suspects(&self.jobs.store, since, r.all).await.map_err(ServiceError::from)?;
        Ok(Response::new(v1::ListSuspectsResponse { suspects: list.into_iter().map(coroner_proto::convert::suspect_to_wire).collect() }))
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
