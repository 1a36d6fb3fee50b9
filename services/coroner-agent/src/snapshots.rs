//! Snapshot shipping: watches folders for files a dying process leaves (flight recorder dumps,
//! the crash hook's stacks, memory summaries and state_dicts, core files) and uploads each once
//! over `UploadSnapshot`, in 1 MiB chunks with the sha256 of what is sent.
//!
//! - **Polling:** every 500 ms; a file is shipped once its size and modification time held still
//!   for one poll (a dump being written is not shipped half-way). At the end every file is taken
//!   as it is.
//! - **Resumable, deduplicated:** before sending, `SnapshotStatus` says whether the server already
//!   holds the content (then nothing is sent) or how much of an interrupted upload it kept (then
//!   the upload resumes there). The files themselves are the spool: they stay in the agent's
//!   spool folder, and an agent restarted for the same job and rank finds and ships them.
//! - **Size cap:** only the first `cap` bytes are sent (a core can be gigabytes); the header's
//!   `size` and `sha256` describe the bytes sent and `original_size` the whole file, so the
//!   server's end-to-end hash check holds.
//! - **Connection:** the shipper's (see [`crate::shipper::ConnWatch`]); a failed upload is retried
//!   on the next poll until the deadline, except when the server refuses it outright.
//! - **Names:** `<folder>/<file>` with the rank in `header.rank` (from the agent's rank, or from a
//!   `rank<R>.` / `nccl_trace_rank_<R>` file name under a launcher agent).

use crate::shipper::ConnWatch;
use crate::snapshot_upload::{upload, Client, Failure};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;
use tokio::time::Instant;

const POLL: Duration = Duration::from_millis(500);

/// A watched folder and the name its files go under (`snapshots`, `flight_recorder`).
#[derive(Debug, Clone)]
pub struct Watched {
    pub dir: PathBuf,
    pub folder: String,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub watched: Vec<Watched>,
    pub cap: u64,
    pub rank: Option<u32>,
}

/// Messages from `main`: a file to ship as it is (a core found by the core pattern), or the end.
pub enum Msg {
    File { path: PathBuf, folder: String },
    Finish { deadline: Instant },
}

#[derive(Debug, Default)]
pub struct Summary {
    pub shipped: Vec<String>,
    pub failed: Vec<String>,
}

type Key = (PathBuf, u64, SystemTime);

fn stat(p: &Path) -> Option<(u64, SystemTime)> {
    let m = std::fs::metadata(p).ok().filter(|m| m.is_file())?;
    Some((m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
}

/// Runs until `Finish` and everything seen is shipped, or the deadline.
pub async fn run(settings: Settings, mut conn: ConnWatch, mut rx: mpsc::Receiver<Msg>) -> Summary {
    let mut watcher =
        Watcher { settings, last: BTreeMap::new(), done: HashSet::new(), refused: HashSet::new(), extra: Vec::new(), summary: Summary::default() };
    let mut deadline: Option<Instant> = None;
    let mut tick = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            m = rx.recv(), if deadline.is_none() => match m {
                Some(Msg::File { path, folder }) => watcher.extra.push((path, folder)),
                Some(Msg::Finish { deadline: d }) => deadline = Some(d),
                None => deadline = Some(Instant::now()),
            },
            _ = tick.tick() => {}
        }
        let mut ready = watcher.ready(deadline.is_some());
        let current = conn.borrow_and_update().clone();
        if let Some((client, session)) = current {
            watcher.ship(&mut ready, client, &session, deadline).await;
        }
        if let Some(d) = deadline {
            if ready.is_empty() || Instant::now() >= d {
                for (path, ..) in ready {
                    watcher.summary.failed.push(format!("{}: not shipped before the deadline (kept on disk)", path.display()));
                }
                return watcher.summary;
            }
        }
    }
}

/// A file to ship now: its path, the folder it goes under, its size and modification time.
type Ready = (PathBuf, String, u64, SystemTime);

/// What the watcher knows between polls.
struct Watcher {
    settings: Settings,
    /// Each file's size and modification time at the last poll.
    last: BTreeMap<PathBuf, (u64, SystemTime)>,
    /// Shipped, and refused by the server: not tried again until the file changes.
    done: HashSet<Key>,
    refused: HashSet<Key>,
    /// Files named by `Msg::File`, outside the watched folders.
    extra: Vec<(PathBuf, String)>,
    summary: Summary,
}

impl Watcher {
    /// The files to ship: those stable since the last poll, or any once `finishing`, that are
    /// neither shipped nor refused as they are.
    fn ready(&mut self, finishing: bool) -> Vec<Ready> {
        let mut ready = Vec::new();
        for w in &self.settings.watched {
            let Ok(entries) = std::fs::read_dir(&w.dir) else { continue };
            for e in entries.flatten() {
                let path = e.path();
                let Some((size, mtime)) = stat(&path) else { continue };
                let stable = self.last.insert(path.clone(), (size, mtime)) == Some((size, mtime));
                let key = (path.clone(), size, mtime);
                if (stable || finishing) && size > 0 && !self.done.contains(&key) && !self.refused.contains(&key) {
                    ready.push((path, w.folder.clone(), size, mtime));
                }
            }
        }
        for (path, folder) in &self.extra {
            if let Some((size, mtime)) = stat(path) {
                if !self.done.contains(&(path.clone(), size, mtime)) && !self.refused.contains(&(path.clone(), size, mtime)) {
                    ready.push((path.clone(), folder.clone(), size, mtime));
                }
            }
        }
        ready
    }

    /// Uploads the ready files one after another, until the deadline: what was not tried by
    /// then stays in `ready`.
    async fn ship(&mut self, ready: &mut Vec<Ready>, client: Client, session: &str, deadline: Option<Instant>) {
        let mut pending = std::mem::take(ready).into_iter();
        for (path, folder, size, mtime) in pending.by_ref() {
            let key = (path.clone(), size, mtime);
            match upload(client.clone(), session, self.settings.cap, self.settings.rank, &path, &folder, mtime).await {
                Ok(name) => {
                    tracing::debug!("shipped snapshot {name}");
                    self.summary.shipped.push(name);
                    self.done.insert(key);
                }
                Err(Failure::Refused(e)) => {
                    tracing::warn!("the server refused snapshot {}: {e}", path.display());
                    self.summary.failed.push(format!("{}: {e}", path.display()));
                    self.refused.insert(key);
                }
                Err(Failure::Retry(e)) => {
                    tracing::debug!("snapshot {} not shipped yet: {e}", path.display());
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        ready.extend(pending);
    }
}
