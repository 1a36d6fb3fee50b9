//! The Query service: jobs, reports, search, and a live watch of a job's report.

use crate::error::ServiceError;
use crate::jobs::Jobs;
use coroner_index::SearchRequest;
use coroner_model::{JobId, Report};
use coroner_proto::v1::{self, query_server::Query};
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

pub struct QueryService {
    jobs: Arc<Jobs>,
}

impl QueryService {
    pub fn new(jobs: Arc<Jobs>) -> Self {
        QueryService { jobs }
    }
}

fn job_id(s: &str) -> Result<JobId, ServiceError> {
    JobId::parse(s).map_err(|e| ServiceError::InvalidArgument(format!("job id: {e}")))
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

type ReportStream = Pin<Box<dyn Stream<Item = Result<v1::ReportResponse, Status>> + Send>>;

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
        for row in rows {
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
        let report = job.current_report(&self.jobs.rules).await?;
        Ok(Response::new(report_response(&report)))
    }

    async fn search(&self, req: Request<v1::SearchRequest>) -> Result<Response<v1::SearchResponse>, Status> {
        let r = req.into_inner();
        let id = job_id(&r.job_id)?;
        let job = self.jobs.get(&id, false).await?;
        let request = SearchRequest {
            query: r.query,
            rank: r.rank,
            stream: None,
            severity: None,
            kind: None,
            capture_windows: None,
            limit: if r.limit == 0 { 100 } else { r.limit.min(10_000) as usize },
            cursor: (!r.cursor.is_empty()).then_some(r.cursor),
        };
        let index = job.index.clone();
        let page = tokio::task::spawn_blocking(move || index.search(&request)).await.map_err(ServiceError::from)?.map_err(ServiceError::from)?;
        let hits = page
            .hits
            .into_iter()
            .map(|h| v1::SearchHit {
                rank: h.rank,
                time_ns: h.capture_ns,
                stream: h.stream.as_str().to_string(),
                line: String::from_utf8_lossy(&h.bytes).into_owned(),
            })
            .collect();
        Ok(Response::new(v1::SearchResponse { hits, total: page.total, next_cursor: page.next_cursor.unwrap_or_default() }))
    }

    type WatchJobStream = ReportStream;

    async fn watch_job(&self, req: Request<v1::GetReportRequest>) -> Result<Response<Self::WatchJobStream>, Status> {
        let id = job_id(&req.into_inner().job_id)?;
        let job = self.jobs.get(&id, true).await?;
        let mut rx = job.watch();
        rx.borrow_and_update();
        let first = job.current_report(&self.jobs.rules).await?;
        Ok(Response::new(Box::pin(watch_stream(first, rx, self.jobs.shutdown.clone()))))
    }
}

/// What a watcher cares about: the verdict, the culprit and class, and how far the cascade reached.
fn headline(r: &Report) -> impl PartialEq {
    (r.verdict, r.first_failure.as_ref().map(|f| (f.rank, f.class)), r.cascade.len())
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
