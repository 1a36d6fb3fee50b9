//! Notifications: coronerd tells webhooks, Slack and Alertmanager when a job fails, its culprit
//! changes, a rank seems to hang or a host becomes a suspect (docs/NOTIFY.md).
//!
//! - `event.rs` (pure): the events, when a report or a live finding raises one, and their identity;
//! - `format.rs`, `sign.rs`, `backoff.rs` (pure): each sink's request, the HMAC signature, the retry delays;
//! - `config.rs`: the flags and the TOML file, checked at start-up;
//! - `http.rs`: the HTTP client (IO);
//! - `notifier.rs`: the one task that claims each event in the store (sent once, whatever
//!   recomputes it), delivers it to each sink that wants it with bounded retries, logs every
//!   attempt and keeps the suspect-host gauge.
//!
//! Contract: emitting never waits. The reporter and the live ticker hand events to a bounded
//! queue ([`Notifier::emit`]); a full queue drops the event with a warning and a count
//! (`coroner_notifications_dropped_total`), so ingest and reports never wait on a receiver.

mod backoff;
mod config;
mod event;
mod format;
mod http;
mod notifier;
mod sign;

pub use config::{NotifyFlags, Settings, Sources, System};
#[cfg(test)]
pub(crate) use event::finding;
pub use event::{hang, hang_over, on_report, Event, Kind, Standing};
pub use notifier::start;

use crate::metrics::Metrics;
use coroner_model::JobId;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::mpsc;

/// How many signals wait for the notifier before new ones are dropped.
const QUEUE: usize = 4096;

/// What the job tasks tell the notifier.
#[derive(Debug)]
pub enum Signal {
    Events(Vec<Event>),
    /// A job's failure history was recorded anew: the suspect hosts may have changed.
    HistoryChanged(JobId),
}

/// The handle the job tasks emit through; cheap to clone. A notifier that is not running
/// (notifications off, tests of one job) takes the signals and drops them.
#[derive(Clone)]
pub struct Notifier {
    queue: Option<mpsc::Sender<Signal>>,
    metrics: Arc<Metrics>,
}

impl Notifier {
    /// A notifier that sends nothing.
    pub fn off(metrics: Arc<Metrics>) -> Notifier {
        Notifier { queue: None, metrics }
    }

    pub fn emit(&self, events: Vec<Event>) {
        if !events.is_empty() {
            self.signal(Signal::Events(events));
        }
    }

    pub fn history_changed(&self, job: &JobId) {
        self.signal(Signal::HistoryChanged(job.clone()));
    }

    fn signal(&self, s: Signal) {
        let Some(queue) = &self.queue else { return };
        // A closed queue is a server that stopped: events raised after its notifier drained are
        // not sent (a job reopened with the same standing raises nothing).
        if let Err(mpsc::error::TrySendError::Full(_)) = queue.try_send(s) {
            self.metrics.alerting.notifications_dropped.fetch_add(1, Relaxed);
            tracing::warn!("the notifier's queue is full: an event was dropped (is a receiver slow? see the delivery log at /api/notifications)");
        }
    }
}
