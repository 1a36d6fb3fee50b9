//! Conformance cases for the notification log (migration 0006), run against every backend
//! through `suite.rs`: an event is claimed once whoever claims it again, its deliveries are
//! recorded per sink, and the log reads back newest first.

use anyhow::Result;
use coroner_store::{DeliveryFilter, DeliveryState, DeliveryUpdate, Metastore, NotificationEvent};
use std::sync::Arc;

type Store = Arc<dyn Metastore>;

fn event(job: &str, kind: &str, key: &str, at: i64) -> NotificationEvent {
    NotificationEvent { job_id: job.into(), kind: kind.into(), key: key.into(), created_ns: at, payload_json: format!("{{\"key\":\"{key}\"}}") }
}

fn attempt<'a>(e: &'a NotificationEvent, sink: &'a str, state: DeliveryState, attempts: u32, at: i64) -> DeliveryUpdate<'a> {
    DeliveryUpdate {
        job_id: &e.job_id,
        kind: &e.kind,
        key: &e.key,
        sink,
        state,
        attempts,
        last_status: Some(503),
        last_error: Some("HTTP 503 from the receiver"),
        updated_ns: at,
    }
}

pub async fn a_notification_is_claimed_once_with_a_delivery_per_sink(store: Store) -> Result<()> {
    let failed = event("notify-a", "verdict", "failed", 10);
    assert!(store.claim_notification(&failed, &["oncall", "slack"]).await?);
    // A restart, a recomputed report or another instance claiming it again changes nothing.
    let again = NotificationEvent { created_ns: 20, payload_json: "{}".into(), ..failed.clone() };
    assert!(!store.claim_notification(&again, &["oncall", "slack", "new-sink"]).await?);
    let log = store.deliveries(&DeliveryFilter { job_id: Some("notify-a".into()), ..Default::default() }).await?;
    let mut sinks: Vec<&str> = log.iter().map(|d| d.sink.as_str()).collect();
    sinks.sort_unstable();
    assert_eq!(sinks, ["oncall", "slack"]);
    assert!(log.iter().all(|d| d.state == DeliveryState::Pending && d.attempts == 0 && d.event == failed), "{log:?}");
    // Another key, kind or job is another event.
    assert!(store.claim_notification(&event("notify-a", "verdict", "succeeded", 30), &["oncall"]).await?);
    assert!(store.claim_notification(&event("notify-a", "culprit", "failed", 30), &[]).await?);
    assert!(store.claim_notification(&event("notify-b", "verdict", "failed", 30), &["oncall"]).await?);
    let verdicts = store.notification_events("notify-a", "verdict").await?;
    assert_eq!(verdicts.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), ["failed", "succeeded"]);
    assert_eq!(store.notification_events("notify-a", "culprit").await?.len(), 1, "an event no sink wants is still recorded");
    assert!(store.notification_events("notify-c", "verdict").await?.is_empty());
    Ok(())
}

pub async fn delivery_attempts_are_logged_and_filtered(store: Store) -> Result<()> {
    let e = event("notify-log", "hang", "rank=3", 100);
    store.claim_notification(&e, &["oncall", "am"]).await?;
    store.update_delivery(&attempt(&e, "oncall", DeliveryState::Pending, 1, 110)).await?;
    store.update_delivery(&DeliveryUpdate { last_status: Some(200), last_error: None, ..attempt(&e, "oncall", DeliveryState::Delivered, 2, 120) }).await?;
    store
        .update_delivery(&DeliveryUpdate { last_status: None, last_error: Some("connection refused"), ..attempt(&e, "am", DeliveryState::Failed, 5, 130) })
        .await?;
    let log = store.deliveries(&DeliveryFilter::default()).await?;
    assert_eq!(
        log.iter().map(|d| (d.sink.as_str(), d.state, d.attempts)).collect::<Vec<_>>(),
        [("am", DeliveryState::Failed, 5), ("oncall", DeliveryState::Delivered, 2)]
    );
    assert_eq!((log[0].last_status, log[0].last_error.as_deref(), log[0].updated_ns), (None, Some("connection refused"), 130));
    assert_eq!((log[1].last_status, log[1].last_error.as_deref()), (Some(200), None));
    let failed = store.deliveries(&DeliveryFilter { state: Some(DeliveryState::Failed), ..Default::default() }).await?;
    assert_eq!(failed.len(), 1);
    assert!(store.deliveries(&DeliveryFilter { state: Some(DeliveryState::Pending), ..Default::default() }).await?.is_empty());
    assert_eq!(store.deliveries(&DeliveryFilter { limit: 1, ..Default::default() }).await?.len(), 1);
    Ok(())
}

pub async fn concurrent_claims_of_one_event_grant_one(store: Store) -> Result<()> {
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move { store.claim_notification(&event("notify-race", "verdict", "failed", i), &["oncall"]).await }));
    }
    let mut granted = 0;
    for t in tasks {
        granted += usize::from(t.await??);
    }
    assert_eq!(granted, 1);
    assert_eq!(store.deliveries(&DeliveryFilter::default()).await?.len(), 1);
    Ok(())
}
