//! The sessions this process opened: what each `ShipLogs` stream looks its batches' sessions up
//! in, per batch. One table, never pruned (a stream once copied the whole table when it opened:
//! 1,000 agents made half a million copies, ~70 MB at the ingest's peak, growing with the square
//! of the agents).

use crate::job::Job;
use crate::ownership::Fence;
use coroner_model::Rank;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

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

#[derive(Default)]
pub struct Sessions(Mutex<HashMap<String, Session>>);

impl Sessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Session>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, id: &str) -> Option<Session> {
        self.lock().get(id).cloned()
    }

    pub fn insert(&self, id: String, session: Session) {
        self.lock().insert(id, session);
    }
}
