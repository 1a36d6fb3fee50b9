//! The notifier task: one per server. It takes the job tasks' signals in order, claims each event
//! in the store (an event claimed before, by this process, an earlier one or another instance,
//! is not sent again), and delivers each claimed event to every sink that wants it, each
//! delivery in a task of its own with bounded retries; every attempt goes to the delivery log.
//! It also keeps `coroner_suspect_hosts` and turns a host newly flagged into an event.
//!
//! Deliveries a stopped server left pending are resumed when the next one starts (a receiver may
//! then get an event twice: when the process died between its answer and the log's update).

use super::backoff;
use super::config::{Settings, Sink};
use super::event::{self, Event, Kind};
use super::format;
use super::http::{Answer, Poster};
use super::{Notifier, Signal, QUEUE};
use crate::alert_metrics::Outcome;
use crate::metrics::Metrics;
use coroner_model::now_ns;
use coroner_store::{DeliveryFilter, DeliveryState, DeliveryUpdate, Metastore, NotificationEvent};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

/// Deliveries in flight at once; more wait for a slot (in their own tasks, not the notifier's).
const DELIVERIES_IN_FLIGHT: usize = 32;
/// Pending deliveries resumed at start-up.
const RESUMED_AT_START: u32 = 10_000;

struct Context {
    store: Arc<dyn Metastore>,
    metrics: Arc<Metrics>,
    settings: Settings,
    poster: Poster,
    /// This server's advertised HTTP address: events link to `<it>/jobs/<id>`.
    http_base: String,
    slots: Semaphore,
}

/// Starts the notifier; it runs until `stop` fires, then claims what is queued and returns.
pub fn start(
    settings: Settings,
    store: Arc<dyn Metastore>,
    metrics: Arc<Metrics>,
    http_base: String,
    stop: CancellationToken,
) -> (Notifier, tokio::task::JoinHandle<()>) {
    let (queue, mut signals) = mpsc::channel(QUEUE);
    let notifier = Notifier { queue: Some(queue), metrics: metrics.clone() };
    let ctx = Arc::new(Context { store, metrics, settings, poster: Poster::new(), http_base, slots: Semaphore::new(DELIVERIES_IN_FLIGHT) });
    let task = tokio::spawn(async move {
        let mut suspects = flagged_hosts(&ctx).await.unwrap_or_default();
        ctx.metrics.alerting.suspect_hosts.store(i64::try_from(suspects.len()).unwrap_or(i64::MAX), Relaxed);
        resume_pending(&ctx).await;
        loop {
            let signal = tokio::select! {
                s = signals.recv() => s,
                _ = stop.cancelled() => None,
            };
            let Some(signal) = signal else { break };
            handle(&ctx, signal, &mut suspects).await;
        }
        // Claim what was queued before the stop; deliveries still pending resume at the next start.
        signals.close();
        while let Some(signal) = signals.recv().await {
            handle(&ctx, signal, &mut suspects).await;
        }
    });
    (notifier, task)
}

async fn handle(ctx: &Arc<Context>, signal: Signal, suspects: &mut BTreeSet<(String, String)>) {
    match signal {
        Signal::Events(events) => {
            for e in events {
                raise(ctx, e).await;
            }
        }
        Signal::HistoryChanged(job) => {
            let Some(now) = flagged_hosts(ctx).await else { return };
            ctx.metrics.alerting.suspect_hosts.store(i64::try_from(now.len()).unwrap_or(i64::MAX), Relaxed);
            let known: BTreeSet<&String> = suspects.iter().map(|(h, _)| h).collect();
            let new: Vec<Event> = now.iter().filter(|(h, _)| !known.contains(h)).map(|(h, why)| event::suspect_host(job.as_str(), h, why, now_ns())).collect();
            *suspects = now;
            for e in new {
                raise(ctx, e).await;
            }
        }
    }
}

/// The hosts the history flags now, with why; `None` when the store cannot be read (logged).
async fn flagged_hosts(ctx: &Context) -> Option<BTreeSet<(String, String)>> {
    match crate::incidents::suspects(&ctx.store, None, false).await {
        Ok(list) => Some(list.into_iter().filter(|s| s.flagged && s.gpu.is_none()).map(|s| (s.host, s.reason)).collect()),
        Err(e) => {
            tracing::warn!(error = %e, "notifier: cannot read the suspect hosts");
            None
        }
    }
}

/// Claims an event and delivers it to the sinks that want it; a verdict also ends the job's
/// suspicions of hanging that are still open (a server restarted while the job ended).
async fn raise(ctx: &Arc<Context>, e: Event) {
    if ctx.settings.sinks.is_empty() {
        return;
    }
    let verdict = (e.kind == Kind::Verdict).then(|| e.clone());
    claim_and_deliver(ctx, e).await;
    if let Some(v) = verdict {
        for over in open_hangs_ended_by(ctx, &v).await {
            claim_and_deliver(ctx, over).await;
        }
    }
}

async fn claim_and_deliver(ctx: &Arc<Context>, mut e: Event) {
    e.report_url = Some(format!("{}/jobs/{}", ctx.http_base.trim_end_matches('/'), e.job_id));
    let sinks: Vec<&Sink> = ctx.settings.sinks.iter().filter(|s| s.topics.contains(e.topic())).collect();
    let record = NotificationEvent {
        job_id: e.job_id.clone(),
        kind: e.kind.as_str().to_string(),
        key: e.key.clone(),
        created_ns: e.at_ns,
        payload_json: serde_json::to_string(&e).unwrap_or_default(),
    };
    let names: Vec<&str> = sinks.iter().map(|s| s.name.as_str()).collect();
    match ctx.store.claim_notification(&record, &names).await {
        Ok(true) => {
            tracing::info!(job = %e.job_id, event = %e.id, sinks = ?names, "notify: {}", e.summary);
            for sink in sinks {
                spawn_delivery(ctx, sink.clone(), e.clone(), 0);
            }
        }
        Ok(false) => tracing::debug!(event = %e.id, "notify: sent before"),
        Err(err) => tracing::warn!(event = %e.id, error = %err, "notify: cannot claim the event; it is not sent"),
    }
}

/// The ends of the job's hang events that have none yet, as of its verdict.
async fn open_hangs_ended_by(ctx: &Context, verdict: &Event) -> Vec<Event> {
    let (hangs, overs) = match (
        ctx.store.notification_events(&verdict.job_id, Kind::Hang.as_str()).await,
        ctx.store.notification_events(&verdict.job_id, Kind::HangOver.as_str()).await,
    ) {
        (Ok(h), Ok(o)) => (h, o),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(job = %verdict.job_id, error = %e, "notify: cannot read the job's hang events");
            return Vec::new();
        }
    };
    let ended: BTreeSet<&str> = overs.iter().map(|o| o.key.as_str()).collect();
    let why = format!("the job's verdict is {}", verdict.verdict);
    hangs
        .iter()
        .filter(|h| !ended.contains(h.key.as_str()))
        .filter_map(|h| serde_json::from_str::<Event>(&h.payload_json).ok())
        .map(|hang| event::over(hang, verdict.at_ns, &why))
        .collect()
}

/// Deliveries a previous process left pending.
async fn resume_pending(ctx: &Arc<Context>) {
    if ctx.settings.sinks.is_empty() {
        return;
    }
    let pending = match ctx.store.deliveries(&DeliveryFilter { state: Some(DeliveryState::Pending), limit: RESUMED_AT_START, ..Default::default() }).await {
        Ok(p) => p,
        Err(e) => return tracing::warn!(error = %e, "notify: cannot read the pending deliveries"),
    };
    for d in pending {
        let sink = ctx.settings.sinks.iter().find(|s| s.name == d.sink);
        let event = serde_json::from_str::<Event>(&d.event.payload_json).map(|e| Event { at_ns: d.event.created_ns, ..e });
        match (sink, event) {
            (Some(sink), Ok(event)) => spawn_delivery(ctx, sink.clone(), event, d.attempts),
            _ => {
                let why = if sink.is_none() { "its sink is no longer configured" } else { "its stored event cannot be read" };
                let update = DeliveryUpdate {
                    job_id: &d.event.job_id,
                    kind: &d.event.kind,
                    key: &d.event.key,
                    sink: &d.sink,
                    state: DeliveryState::Failed,
                    attempts: d.attempts,
                    last_status: d.last_status,
                    last_error: Some(why),
                    updated_ns: now_ns(),
                };
                let _ = ctx.store.update_delivery(&update).await;
            }
        }
    }
}

fn spawn_delivery(ctx: &Arc<Context>, sink: Sink, event: Event, attempts_before: u32) {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let Ok(_slot) = ctx.slots.acquire().await else { return };
        deliver(&ctx, &sink, &event, attempts_before).await;
    });
}

/// Posts the event until the sink takes it, refuses it for good, or the attempts run out.
async fn deliver(ctx: &Context, sink: &Sink, event: &Event, attempts_before: u32) {
    let retry = ctx.settings.retry;
    let mut attempt = attempts_before;
    loop {
        attempt += 1;
        let now = now_ns();
        let request = format::request(sink.format, event, sink.secret.as_ref(), now.div_euclid(1_000_000_000));
        let answer = ctx.poster.post(&sink.url, &request, retry.timeout).await;
        let (status, error, retryable) = match &answer {
            Answer::Status(s, _) if (200..300).contains(s) => (Some(*s), None, false),
            Answer::Status(s, body) => (Some(*s), Some(format!("HTTP {s}: {body}")), backoff::retryable(*s)),
            Answer::NoAnswer(e) => (None, Some(e.clone()), true),
        };
        let state = match (&error, retryable && attempt < retry.attempts) {
            (None, _) => DeliveryState::Delivered,
            (Some(_), true) => DeliveryState::Pending,
            (Some(_), false) => DeliveryState::Failed,
        };
        let update = DeliveryUpdate {
            job_id: &event.job_id,
            kind: event.kind.as_str(),
            key: &event.key,
            sink: &sink.name,
            state,
            attempts: attempt,
            last_status: status,
            last_error: error.as_deref(),
            updated_ns: now_ns(),
        };
        if let Err(e) = ctx.store.update_delivery(&update).await {
            tracing::warn!(event = %event.id, sink = %sink.name, error = %e, "notify: cannot log the delivery attempt");
        }
        match state {
            DeliveryState::Delivered => return ctx.metrics.alerting.notified(&sink.name, Outcome::Delivered),
            DeliveryState::Failed => {
                tracing::warn!(event = %event.id, sink = %sink.name, attempts = attempt, error = error.as_deref().unwrap_or_default(), "notify: delivery failed; giving up");
                return ctx.metrics.alerting.notified(&sink.name, Outcome::Failed);
            }
            DeliveryState::Pending => ctx.metrics.alerting.notified(&sink.name, Outcome::Retried),
        }
        tokio::time::sleep(backoff::delay(&retry, attempt, fastrand::f64())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::config::Retry;
    use crate::notify::format::Format;
    use crate::notify::Standing;
    use coroner_model::JobId;

    /// A notifier context on a fresh SQLite store, its one sink refusing connections (port 9, the
    /// discard port, is closed on loopback), one attempt per delivery.
    async fn context(dir: &std::path::Path) -> Arc<Context> {
        let store = coroner_store::connect(&format!("sqlite://{}?mode=rwc", dir.join("coroner.db").display())).await.expect("a store");
        let sink = Sink {
            name: "oncall".into(),
            format: Format::Slack,
            url: "http://127.0.0.1:9/hook".parse().expect("url"),
            secret: None,
            topics: ["failed", "hang", "hang_over"].into_iter().map(String::from).collect(),
        };
        let settings = Settings { sinks: vec![sink], retry: Retry { attempts: 1, ..Retry::default() } };
        Arc::new(Context { store, metrics: Arc::default(), settings, poster: Poster::new(), http_base: "http://coroner:7071".into(), slots: Semaphore::new(4) })
    }

    fn failed(job: &JobId, at: i64) -> Event {
        let standing = Standing { verdict: coroner_model::Verdict::Failed, rank: Some(1), host: None, class: Some("cuda_oom".into()), summary: String::new() };
        event::on_report(job, None, &standing, at).remove(0)
    }

    #[tokio::test]
    async fn an_event_raised_again_is_not_sent_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = context(dir.path()).await;
        let job = JobId::parse("j").expect("id");
        raise(&ctx, failed(&job, 1)).await;
        // The report computed again (a restart, another instance): the same identity.
        raise(&ctx, failed(&job, 2)).await;
        let log = ctx.store.deliveries(&DeliveryFilter::default()).await.expect("log");
        assert_eq!(log.len(), 1, "{log:?}");
        assert!(log[0].event.payload_json.contains("http://coroner:7071/jobs/j"), "{}", log[0].event.payload_json);
    }

    #[tokio::test]
    async fn a_verdict_ends_the_hangs_still_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = context(dir.path()).await;
        let job = JobId::parse("j").expect("id");
        let (three, five) = (event::finding(3, Some("n3"), "s", Some("t3"), "r"), event::finding(5, Some("n5"), "s", Some("t5"), "r"));
        for f in [&three, &five] {
            raise(&ctx, event::hang(&job, f, 1)).await;
        }
        raise(&ctx, event::hang_over(&job, &five, 2, "it printed again")).await;
        raise(&ctx, failed(&job, 3)).await;
        let overs = ctx.store.notification_events("j", "hang_over").await.expect("events");
        let keys: Vec<&str> = overs.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["rank=5;since=t5", "rank=3;since=t3"]);
        assert!(overs[1].payload_json.contains("the job's verdict is failed"), "{}", overs[1].payload_json);
    }

    #[tokio::test]
    async fn a_host_the_history_newly_flags_is_one_event_and_the_gauge_follows() {
        use coroner_model::{FailureSignature, FaultClass, HostCount};
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ctx = context(dir.path()).await;
        Arc::get_mut(&mut ctx).expect("one owner").settings.sinks[0].topics.insert("suspect_host".into());
        let store = ctx.store.clone();
        let both = [HostCount { host: "node-bad".into(), count: 1 }, HostCount { host: "node-ok".into(), count: 1 }];
        for j in ["ok-1", "ok-2", "ok-3", "xid"] {
            store.record_job_hosts(&JobId::parse(j).expect("id"), "succeeded", &both, 1).await.expect("hosts");
        }
        let mut suspects = flagged_hosts(&ctx).await.expect("history");
        assert!(suspects.is_empty());
        // A GPU fault on node-bad weighs 4: twice its share of the work, a suspect.
        let sig = FailureSignature {
            id: "00000000000000aa".into(),
            class: FaultClass::GpuHardware,
            template: "Xid <num>".into(),
            frames: Vec::new(),
            rank: None,
            host: Some("node-bad".into()),
            gpu: None,
            collective: None,
        };
        let xid = JobId::parse("xid").expect("id");
        store.save_signature(&xid, &sig, 2).await.expect("signature");
        handle(&ctx, Signal::HistoryChanged(xid.clone()), &mut suspects).await;
        assert_eq!(ctx.metrics.alerting.suspect_hosts.load(Relaxed), 1);
        handle(&ctx, Signal::HistoryChanged(xid), &mut suspects).await;
        let events = store.notification_events("xid", "suspect_host").await.expect("events");
        assert_eq!(events.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), ["node-bad"], "raised once, when it became a suspect");
    }
}
