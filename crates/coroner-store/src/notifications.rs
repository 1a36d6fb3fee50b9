//! Notifications coronerd sent (migration 0006): each event once per (job, kind, key), whatever
//! recomputes it, and a delivery log per event and sink. Same SQL for both backends, like
//! `sql.rs`.
//!
//! Claiming is the deduplication: [`NotificationStore::claim_notification`] inserts the event and
//! one pending delivery per sink in one transaction, and answers `false` (changing nothing) when
//! the event was claimed before, by this process, an earlier one or another instance.

use crate::rows::Get;
use crate::StoreError;
use async_trait::async_trait;

/// An event as recorded: what it is about and its payload (the webhook body's event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationEvent {
    pub job_id: String,
    /// `verdict`, `culprit`, `hang`, `hang_over`, `suspect_host`.
    pub kind: String,
    /// What makes it this event among the job's events of its kind (a verdict, a culprit, ...).
    pub key: String,
    pub created_ns: i64,
    pub payload_json: String,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Not delivered yet; resumed when coronerd starts again.
    Pending,
    Delivered,
    /// Given up: out of attempts, or refused in a way a retry cannot change.
    Failed,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryState> {
        [DeliveryState::Pending, DeliveryState::Delivered, DeliveryState::Failed].into_iter().find(|d| d.as_str() == s)
    }
}

/// One row of the delivery log, with its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub event: NotificationEvent,
    pub sink: String,
    pub state: DeliveryState,
    pub attempts: u32,
    /// The HTTP status of the last answer, if one came.
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub updated_ns: i64,
}

/// What an attempt changed in a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryUpdate<'a> {
    pub job_id: &'a str,
    pub kind: &'a str,
    pub key: &'a str,
    pub sink: &'a str,
    pub state: DeliveryState,
    pub attempts: u32,
    pub last_status: Option<u16>,
    pub last_error: Option<&'a str>,
    pub updated_ns: i64,
}

/// Which deliveries [`NotificationStore::deliveries`] returns, most recently updated first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryFilter {
    pub job_id: Option<String>,
    pub state: Option<DeliveryState>,
    /// The most rows; 0 means 100.
    pub limit: u32,
}

/// The notification log. Part of every [`crate::Metastore`].
#[async_trait]
pub trait NotificationStore: Send + Sync {
    /// Records the event with a pending delivery for each of `sinks`, atomically; `false` when the
    /// event (job, kind, key) was recorded before, and then nothing changes.
    async fn claim_notification(&self, event: &NotificationEvent, sinks: &[&str]) -> Result<bool, StoreError>;
    /// The job's events of `kind`, oldest first.
    async fn notification_events(&self, job_id: &str, kind: &str) -> Result<Vec<NotificationEvent>, StoreError>;
    /// Records an attempt's outcome on a delivery.
    async fn update_delivery(&self, u: &DeliveryUpdate<'_>) -> Result<(), StoreError>;
    async fn deliveries(&self, f: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError>;
}

pub(crate) const CLAIM_EVENT: &str = "
INSERT INTO notification_events (job_id, kind, event_key, created_ns, payload_json) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (job_id, kind, event_key) DO NOTHING";

pub(crate) const ADD_DELIVERY: &str = "
INSERT INTO notification_deliveries (job_id, kind, event_key, sink, state, attempts, updated_ns)
VALUES ($1, $2, $3, $4, 'pending', 0, $5)";

pub(crate) const EVENTS: &str = "
SELECT job_id, kind, event_key, created_ns, payload_json FROM notification_events
WHERE job_id = $1 AND kind = $2 ORDER BY created_ns, event_key";

pub(crate) const UPDATE_DELIVERY: &str = "
UPDATE notification_deliveries SET state = $5, attempts = $6, last_status = $7, last_error = $8, updated_ns = $9
WHERE job_id = $1 AND kind = $2 AND event_key = $3 AND sink = $4";

pub(crate) const DELIVERIES: &str = "
SELECT e.job_id, e.kind, e.event_key, e.created_ns, e.payload_json,
       d.sink, d.state, d.attempts, d.last_status, d.last_error, d.updated_ns
FROM notification_deliveries d
JOIN notification_events e ON e.job_id = d.job_id AND e.kind = d.kind AND e.event_key = d.event_key
WHERE ($1 IS NULL OR d.job_id = $1) AND ($2 IS NULL OR d.state = $2)
ORDER BY d.updated_ns DESC, d.job_id, d.kind, d.event_key, d.sink LIMIT $3";

pub(crate) fn event_row(row: &impl Get) -> Result<NotificationEvent, StoreError> {
    Ok(NotificationEvent {
        job_id: row.get_string("job_id")?,
        kind: row.get_string("kind")?,
        key: row.get_string("event_key")?,
        created_ns: row.get_i64("created_ns")?,
        payload_json: row.get_string("payload_json")?,
    })
}

pub(crate) fn delivery_row(row: &impl Get) -> Result<Delivery, StoreError> {
    let state = row.get_string("state")?;
    let attempts = row.get_i64("attempts")?;
    let last_status = row.get_opt_i64("last_status")?;
    Ok(Delivery {
        event: event_row(row)?,
        sink: row.get_string("sink")?,
        state: DeliveryState::parse(&state).ok_or_else(|| StoreError::Corrupt(format!("column state holds {state:?}, not a delivery state")))?,
        attempts: u32::try_from(attempts).map_err(|_| StoreError::Corrupt(format!("column attempts holds {attempts}")))?,
        last_status: last_status.map(|s| u16::try_from(s).map_err(|_| StoreError::Corrupt(format!("column last_status holds {s}")))).transpose()?,
        last_error: row.get_opt_string("last_error")?,
        updated_ns: row.get_i64("updated_ns")?,
    })
}

/// The row limit a filter asks for.
pub(crate) fn limit(f: &DeliveryFilter) -> i64 {
    if f.limit == 0 {
        100
    } else {
        i64::from(f.limit)
    }
}

/// Implements [`NotificationStore`] for a store type with a `pool: sqlx::Pool<_>` field.
macro_rules! impl_notification_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::notifications::NotificationStore for $store {
            async fn claim_notification(&self, e: &$crate::notifications::NotificationEvent, sinks: &[&str]) -> Result<bool, $crate::StoreError> {
                let err = |source| $crate::StoreError::Query { action: "claim a notification", source };
                let mut tx = self.pool.begin().await.map_err(err)?;
                let claimed = sqlx::query($crate::notifications::CLAIM_EVENT)
                    .bind(&e.job_id)
                    .bind(&e.kind)
                    .bind(&e.key)
                    .bind(e.created_ns)
                    .bind(&e.payload_json)
                    .execute(&mut *tx)
                    .await
                    .map_err(err)?
                    .rows_affected()
                    > 0;
                if claimed {
                    for sink in sinks {
                        sqlx::query($crate::notifications::ADD_DELIVERY)
                            .bind(&e.job_id)
                            .bind(&e.kind)
                            .bind(&e.key)
                            .bind(*sink)
                            .bind(e.created_ns)
                            .execute(&mut *tx)
                            .await
                            .map_err(err)?;
                    }
                }
                tx.commit().await.map_err(err)?;
                Ok(claimed)
            }

            async fn notification_events(&self, job_id: &str, kind: &str) -> Result<Vec<$crate::notifications::NotificationEvent>, $crate::StoreError> {
                let rows = sqlx::query($crate::notifications::EVENTS)
                    .bind(job_id)
                    .bind(kind)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|source| $crate::StoreError::Query { action: "read the job's notifications", source })?;
                rows.iter().map($crate::notifications::event_row).collect()
            }

            async fn update_delivery(&self, u: &$crate::notifications::DeliveryUpdate<'_>) -> Result<(), $crate::StoreError> {
                sqlx::query($crate::notifications::UPDATE_DELIVERY)
                    .bind(u.job_id)
                    .bind(u.kind)
                    .bind(u.key)
                    .bind(u.sink)
                    .bind(u.state.as_str())
                    .bind(i64::from(u.attempts))
                    .bind(u.last_status.map(i64::from))
                    .bind(u.last_error)
                    .bind(u.updated_ns)
                    .execute(&self.pool)
                    .await
                    .map_err(|source| $crate::StoreError::Query { action: "record a delivery attempt", source })?;
                Ok(())
            }

            async fn deliveries(&self, f: &$crate::notifications::DeliveryFilter) -> Result<Vec<$crate::notifications::Delivery>, $crate::StoreError> {
                let rows = sqlx::query($crate::notifications::DELIVERIES)
                    .bind(f.job_id.as_deref())
                    .bind(f.state.map(|s| s.as_str()))
                    .bind($crate::notifications::limit(f))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|source| $crate::StoreError::Query { action: "read the delivery log", source })?;
                rows.iter().map($crate::notifications::delivery_row).collect()
            }
        }
    };
}

pub(crate) use impl_notification_store;
