//! The sessions this process opened: what each `ShipLogs` stream looks its batches' sessions up
//! in, per batch. One table (a stream once copied the whole table when it opened: 1,000 agents
//! made half a million copies, ~70 MB at the ingest's peak, growing with the square of the
//! agents).
//!
//! A session is forgotten [`FORGET_AFTER`] after its own process ended (`ReportExit` for its
//! rank, or a launcher agent's own end) while no log stream uses it. The real agent reports the
//! end as soon as it knows it and then still ships its last lines and uploads the crash's
//! snapshots on that session, within its linger; the grace covers that. Each entry holds its job
//! alive (`Arc<Job>`): the table was never pruned, so every job any agent ever spoke to stayed
//! in memory. A session used after it was forgotten gets "unknown session" and the agent opens
//! a new one, as after a restart.

use crate::job::Job;
use crate::metrics::Metrics;
use crate::ownership::Fence;
use coroner_model::Rank;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long an ended session with no log stream is kept: longer than an agent lingers after its
/// process ended to deliver lines and snapshots (`coroner-agent --linger`, 2 s by default).
pub const FORGET_AFTER: Duration = Duration::from_secs(600);
/// The table is swept for ended sessions at most this often (a sweep reads every entry).
const SWEEP_EVERY: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Session {
    pub job: Arc<Job>,
    /// This instance's lease on the job: no commit once it lapsed.
    pub fence: Arc<Fence>,
    pub rank: Option<Rank>,
    pub host: String,
    pub world_size: Option<u32>,
    /// `<host>/<agent instance>`: who may file a content it uploaded under another job by hash.
    pub uploader: String,
}

pub struct Sessions {
    table: Mutex<Table<Session>>,
    /// `coroner_ingest_sessions`: the table's size.
    metrics: Arc<Metrics>,
}

impl Sessions {
    pub fn new(metrics: Arc<Metrics>) -> Sessions {
        Sessions { table: Mutex::new(Table::new(Instant::now())), metrics }
    }

    /// The table, swept first when a sweep is due.
    fn lock(&self) -> MutexGuard<'_, Table<Session>> {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        t.sweep(Instant::now(), FORGET_AFTER);
        self.metrics.ingest_sessions.store(t.map.len() as i64, Relaxed);
        t
    }

    pub fn get(&self, id: &str) -> Option<Session> {
        self.lock().map.get(id).map(|e| e.session.clone())
    }

    pub fn insert(&self, id: String, session: Session) {
        self.lock().map.insert(id, Entry { session, streams: 0, ended: None });
        self.metrics.ingest_sessions.fetch_add(1, Relaxed);
    }

    /// A log stream ships for session `id` (until [`Sessions::stream_left`]).
    pub fn stream_uses(&self, id: &str) {
        self.lock().stream_uses(id);
    }

    /// A log stream no longer ships for session `id`.
    pub fn stream_left(&self, id: &str) {
        self.lock().stream_left(id, Instant::now());
    }

    /// Session `id`'s process ended.
    pub fn ended(&self, id: &str) {
        self.lock().ended(id, Instant::now());
    }
}

struct Entry<S> {
    session: S,
    /// Log streams whose batches name this session now.
    streams: u32,
    /// When its process ended, or its last stream left after that.
    ended: Option<Instant>,
}

/// The table's rules, apart from what a session holds.
struct Table<S> {
    map: HashMap<String, Entry<S>>,
    swept: Instant,
}

impl<S> Table<S> {
    fn new(now: Instant) -> Self {
        Table { map: HashMap::new(), swept: now }
    }

    fn stream_uses(&mut self, id: &str) {
        if let Some(e) = self.map.get_mut(id) {
            e.streams += 1;
        }
    }

    fn stream_left(&mut self, id: &str, now: Instant) {
        if let Some(e) = self.map.get_mut(id) {
            e.streams = e.streams.saturating_sub(1);
            // The grace runs from the last use.
            if e.ended.is_some() {
                e.ended = Some(now);
            }
        }
    }

    fn ended(&mut self, id: &str, now: Instant) {
        if let Some(e) = self.map.get_mut(id) {
            e.ended = Some(now);
        }
    }

    /// Forgets the sessions that ended `grace` ago and have no stream, when a sweep is due.
    fn sweep(&mut self, now: Instant, grace: Duration) {
        if now.saturating_duration_since(self.swept) < SWEEP_EVERY {
            return;
        }
        self.swept = now;
        self.map.retain(|_, e| e.streams > 0 || e.ended.is_none_or(|at| now.saturating_duration_since(at) < grace));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(now: Instant) -> Table<()> {
        let mut t = Table::new(now);
        for id in ["a", "b", "c"] {
            t.map.insert(id.into(), Entry { session: (), streams: 0, ended: None });
        }
        t
    }

    #[test]
    fn a_session_is_forgotten_only_after_its_end_and_the_grace_with_no_stream() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(600);
        let mut t = table(t0);
        t.ended("a", t0); // ended, no stream
        t.stream_uses("b");
        t.ended("b", t0); // ended, but still shipping its last lines
                          // "c" runs on.
        t.sweep(t0 + grace - Duration::from_secs(1), grace);
        assert_eq!(t.map.len(), 3, "nothing is forgotten within the grace");
        t.sweep(t0 + grace + SWEEP_EVERY, grace);
        assert!(!t.map.contains_key("a"), "an ended session without streams is forgotten");
        assert!(t.map.contains_key("b") && t.map.contains_key("c"));
        // b's stream leaves: its grace starts again from there.
        let left = t0 + grace + SWEEP_EVERY;
        t.stream_left("b", left);
        t.sweep(left + SWEEP_EVERY, grace);
        assert!(t.map.contains_key("b"));
        t.sweep(left + grace, grace);
        assert!(!t.map.contains_key("b"));
        assert!(t.map.contains_key("c"), "a session whose process runs is never forgotten");
    }

    #[test]
    fn sweeps_are_spaced() {
        let t0 = Instant::now();
        let mut t = table(t0);
        t.ended("a", t0);
        // Due by the grace, but the last sweep was just now.
        t.sweep(t0 + Duration::from_secs(1), Duration::ZERO);
        assert!(t.map.contains_key("a"));
        t.sweep(t0 + SWEEP_EVERY, Duration::ZERO);
        assert!(!t.map.contains_key("a"));
    }
}
