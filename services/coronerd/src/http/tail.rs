//! `GET /api/jobs/<id>/tail`: the job as it runs, as server-sent events.
//!
//! - `report`: the verdict banner (`banner()`), first at once, then whenever it changes: fed from
//!   the same watch channel as gRPC `WatchJob`;
//! - `lines`: committed lines passing the filters (`rank`, `host`, `stream`, `q`: see
//!   `views/tail_filter.rs`), one event per commit group, with the id a reconnect sends back as
//!   `Last-Event-ID` to get only what it missed (`job/tail.rs`);
//! - `dropped`: this watcher fell behind (or reconnected after the kept lines) and lost lines;
//!   a search finds them.
//!
//! Bounded: at most `MAX_TAIL_WATCHERS` per job (then 429); the stream ends when the server stops.

use super::{error_json, AppState};
use crate::error::ServiceError;
use crate::job::{Job, TailBatch, Watcher};
use crate::views::job_id;
use crate::views::tail_filter::TailFilter;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use coroner_model::Report;
use serde::Deserialize;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Default, Deserialize)]
pub struct TailQuery {
    rank: Option<String>,
    host: Option<String>,
    stream: Option<String>,
    q: Option<String>,
}

/// What the banner shows: changes to it are sent, nothing else of the report.
pub fn banner(r: &Report) -> serde_json::Value {
    let f = r.first_failure.as_ref();
    serde_json::json!({
        "verdict": r.verdict.as_str(),
        "culprit_rank": f.and_then(|f| f.rank).map(|r| r.0),
        "class": f.map(|f| f.class.to_string()),
        "confidence": f.map(|f| f.confidence),
        "host": f.and_then(|f| f.host.clone()),
        "summary": f.map(|f| f.summary.clone()),
        "suspects": r.live_findings.iter().map(|x| x.rank.0).collect::<Vec<_>>(),
    })
}

pub async fn tail(State(s): State<AppState>, Path(id): Path<String>, Query(q): Query<TailQuery>, headers: HeaderMap) -> Response {
    let opened = async {
        let filter = TailFilter::parse(q.rank.as_deref(), q.host.as_deref(), q.stream.as_deref(), q.q.as_deref())?;
        let job = s.jobs.get(&job_id(&id)?, false).await?;
        let last_id = headers.get("last-event-id").and_then(|v| v.to_str().ok());
        let (watcher, replay, lost) = job.tail().watch(last_id).ok_or_else(|| {
            ServiceError::ResourceExhausted(format!("{} pages already follow job {id}: close one, or search instead", crate::job::MAX_TAIL_WATCHERS))
        })?;
        let mut reports = job.watch();
        reports.borrow_and_update();
        let first = job.current_report().await?;
        Ok::<_, ServiceError>((job, filter, watcher, replay, lost, reports, first))
    }
    .await;
    let (job, filter, watcher, replay, lost, reports, first) = match opened {
        Ok(x) => x,
        Err(e) => return error_json(e),
    };
    let mut st = Following {
        job,
        filter,
        watcher,
        reports,
        clocks: clocks(&first),
        banner: banner(&first),
        pending: VecDeque::new(),
        after: 0,
        stop: s.jobs.stopping(),
    };
    st.pending.push_back(Event::default().event("report").data(st.banner.to_string()));
    if lost {
        st.pending.push_back(dropped("lines committed while this page was away are no longer kept"));
    }
    for b in replay {
        st.after = st.after.max(b.n);
        if let Some(e) = st.lines_event(&b) {
            st.pending.push_back(e);
        }
    }
    let events = futures::stream::unfold(st, |mut st| async move { st.next().await.map(|e| (Ok::<_, Infallible>(e), st)) });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

struct Following {
    job: Arc<Job>,
    filter: TailFilter,
    watcher: Watcher,
    reports: watch::Receiver<Option<Arc<Report>>>,
    /// Each rank's clock offset, from the latest report: lines are shown on the aligned clock.
    clocks: HashMap<Option<u32>, i64>,
    banner: serde_json::Value,
    pending: VecDeque<Event>,
    /// The last batch sent (or replayed): a batch is sent once.
    after: u64,
    stop: CancellationToken,
}

fn clocks(r: &Report) -> HashMap<Option<u32>, i64> {
    r.ranks.iter().map(|x| (Some(x.rank.0), x.clock.offset_ns)).collect()
}

fn dropped(why: &str) -> Event {
    Event::default().event("dropped").data(serde_json::json!({ "reason": why }).to_string())
}

impl Following {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            tokio::select! {
                _ = self.stop.cancelled() => return None,
                got = self.watcher.rx.recv() => match got {
                    Ok(b) if b.n > self.after => {
                        self.after = b.n;
                        if let Some(e) = self.lines_event(&b) {
                            return Some(e);
                        }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(n)) => return Some(dropped(&format!("this page fell {n} commits behind the job; their lines were skipped"))),
                    Err(RecvError::Closed) => return None,
                },
                changed = self.reports.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    let Some(r) = self.reports.borrow_and_update().clone() else { continue };
                    self.clocks = clocks(&r);
                    let b = banner(&r);
                    if b != self.banner {
                        self.banner = b;
                        return Some(Event::default().event("report").data(self.banner.to_string()));
                    }
                }
            }
        }
    }

    /// The batch's lines that pass the filter, as one event with the batch's id; `None` when
    /// none pass.
    fn lines_event(&self, b: &TailBatch) -> Option<Event> {
        let lines: Vec<serde_json::Value> = b
            .lines
            .iter()
            .filter(|l| self.filter.passes(l.rank, &l.host, l.stream, &l.bytes))
            .map(|l| {
                let t = l.capture_ns.saturating_add(self.clocks.get(&l.rank).copied().unwrap_or(0));
                serde_json::json!({
                    "rank": l.rank, "host": &*l.host, "stream": l.stream.as_str(), "seq": l.seq,
                    "capture_ns": l.capture_ns, "time_ns": t, "time": coroner_model::format_rfc3339_ns(t),
                    "line": String::from_utf8_lossy(&l.bytes),
                })
            })
            .collect();
        if lines.is_empty() && b.skipped == 0 {
            return None;
        }
        let data = serde_json::json!({ "lines": lines, "skipped": b.skipped });
        Some(Event::default().event("lines").id(self.job.tail().id_of(b)).data(data.to_string()))
    }
}
