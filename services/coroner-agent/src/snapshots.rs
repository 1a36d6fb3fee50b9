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
use coroner_proto::v1;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;
use tokio::time::Instant;

const POLL: Duration = Duration::from_millis(500);
const CHUNK: usize = 1 << 20;

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

/// The rank a file name states: `rank3.stack.txt`, `nccl_trace_rank_3`.
pub fn rank_in_name(name: &str) -> Option<u32> {
    if let Some(at) = name.find("nccl_trace_rank_") {
        let d: String = name[at + 16..].chars().take_while(char::is_ascii_digit).collect();
        return d.parse().ok();
    }
    let d: String = name.strip_prefix("rank")?.chars().take_while(char::is_ascii_digit).collect();
    d.parse().ok()
}

/// Runs until `Finish` and everything seen is shipped, or the deadline.
pub async fn run(settings: Settings, mut conn: ConnWatch, mut rx: mpsc::Receiver<Msg>) -> Summary {
    let mut summary = Summary::default();
    let mut last: BTreeMap<PathBuf, (u64, SystemTime)> = BTreeMap::new();
    let mut done: HashSet<Key> = HashSet::new();
    let mut refused: HashSet<Key> = HashSet::new();
    let mut extra: Vec<(PathBuf, String)> = Vec::new();
    let mut deadline: Option<Instant> = None;
    let mut tick = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            m = rx.recv(), if deadline.is_none() => match m {
                Some(Msg::File { path, folder }) => extra.push((path, folder)),
                Some(Msg::Finish { deadline: d }) => deadline = Some(d),
                None => deadline = Some(Instant::now()),
            },
            _ = tick.tick() => {}
        }
        let finishing = deadline.is_some();
        // Ready: stable since the last poll, or anything once finishing.
        let mut ready: Vec<(PathBuf, String, u64, SystemTime)> = Vec::new();
        for w in &settings.watched {
            let Ok(entries) = std::fs::read_dir(&w.dir) else { continue };
            for e in entries.flatten() {
                let path = e.path();
                let Some((size, mtime)) = stat(&path) else { continue };
                let stable = last.insert(path.clone(), (size, mtime)) == Some((size, mtime));
                let key = (path.clone(), size, mtime);
                if (stable || finishing) && size > 0 && !done.contains(&key) && !refused.contains(&key) {
                    ready.push((path, w.folder.clone(), size, mtime));
                }
            }
        }
        for (path, folder) in &extra {
            if let Some((size, mtime)) = stat(path) {
                if !done.contains(&(path.clone(), size, mtime)) && !refused.contains(&(path.clone(), size, mtime)) {
                    ready.push((path.clone(), folder.clone(), size, mtime));
                }
            }
        }
        let current = conn.borrow_and_update().clone();
        if let Some((client, session)) = current {
            for (path, folder, size, mtime) in ready.drain(..) {
                let key = (path.clone(), size, mtime);
                match upload(client.clone(), &session, &settings, &path, &folder, mtime).await {
                    Ok(name) => {
                        tracing::debug!("shipped snapshot {name}");
                        summary.shipped.push(name);
                        done.insert(key);
                    }
                    Err(Failure::Refused(e)) => {
                        tracing::warn!("the server refused snapshot {}: {e}", path.display());
                        summary.failed.push(format!("{}: {e}", path.display()));
                        refused.insert(key);
                    }
                    Err(Failure::Retry(e)) => {
                        tracing::debug!("snapshot {} not shipped yet: {e}", path.display());
                    }
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
            }
        }
        if let Some(d) = deadline {
            if ready.is_empty() || Instant::now() >= d {
                for (path, ..) in ready {
                    summary.failed.push(format!("{}: not shipped before the deadline (kept on disk)", path.display()));
                }
                return summary;
            }
        }
    }
}

enum Failure {
    Refused(String),
    Retry(String),
}

/// Reads up to `cap` bytes of `path` and uploads them.
async fn upload(
    mut client: coroner_proto::v1::ingest_client::IngestClient<coroner_proto::auth::Channel>,
    session: &str,
    s: &Settings,
    path: &Path,
    folder: &str,
    mtime: SystemTime,
) -> Result<String, Failure> {
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let safe: String = file_name.chars().map(|c| if c == '/' || c == '\\' || c.is_control() { '_' } else { c }).collect();
    let safe = if safe.is_empty() || safe.starts_with('.') { format!("_{safe}") } else { safe }.replace("..", "__");
    let rank = s.rank.or_else(|| rank_in_name(&safe));
    let kind = coroner_snapshot::kind_of(folder, &safe).to_string();
    let name = format!("{folder}/{safe}");
    let (p, cap) = (path.to_path_buf(), s.cap);
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<(Vec<u8>, u64)> {
        use std::io::Read;
        let f = std::fs::File::open(&p)?;
        let full = f.metadata()?.len();
        let mut bytes = Vec::new();
        f.take(cap).read_to_end(&mut bytes)?;
        Ok((bytes, full))
    })
    .await
    .map_err(|e| Failure::Retry(e.to_string()))?;
    let (bytes, full) = read.map_err(|e| Failure::Refused(format!("read: {e}")))?;
    let sha = hex::encode(Sha256::digest(&bytes));
    let header = v1::SnapshotHeader {
        rank,
        kind,
        name: name.clone(),
        size: bytes.len() as u64,
        sha256: sha,
        captured_ns: mtime.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0),
        original_size: (full > bytes.len() as u64).then_some(full),
    };
    // Bytes the server has need not travel again: all of them (the content is stored, perhaps
    // from another job), or the start of an upload a broken connection or a restart cut short.
    let status = client.snapshot_status(v1::SnapshotStatusRequest { session_id: session.to_string(), header: Some(header.clone()) });
    let mut offset: usize = match tokio::time::timeout(Duration::from_secs(30), status).await {
        Ok(Ok(r)) if r.get_ref().stored => return Ok(name),
        Ok(Ok(r)) => (r.get_ref().resume_offset as usize).min(bytes.len()),
        // A server from before SnapshotStatus: send everything.
        Ok(Err(st)) if st.code() == tonic::Code::Unimplemented => 0,
        Ok(Err(st)) if st.code() == tonic::Code::InvalidArgument => return Err(Failure::Refused(st.message().to_string())),
        Ok(Err(st)) => return Err(Failure::Retry(st.to_string())),
        Err(_) => return Err(Failure::Retry("SnapshotStatus timed out".into())),
    };
    // At the end already (the stream broke before the server could finish): one empty last chunk.
    let first = offset;
    let mut chunks = Vec::new();
    loop {
        let end = (offset + CHUNK).min(bytes.len());
        chunks.push(v1::SnapshotChunk {
            session_id: session.to_string(),
            header: (offset == first).then(|| header.clone()),
            offset: offset as u64,
            data: bytes[offset..end].to_vec(),
            last: end == bytes.len(),
        });
        if end == bytes.len() {
            break;
        }
        offset = end;
    }
    let call = client.upload_snapshot(tokio_stream::iter(chunks));
    match tokio::time::timeout(Duration::from_secs(30), call).await {
        Ok(Ok(_)) => Ok(name),
        Ok(Err(st)) if matches!(st.code(), tonic::Code::InvalidArgument | tonic::Code::Unimplemented | tonic::Code::PermissionDenied) => {
            Err(Failure::Refused(st.message().to_string()))
        }
        Ok(Err(st)) => Err(Failure::Retry(st.to_string())),
        Err(_) => Err(Failure::Retry("timed out".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_from_names() {
        assert_eq!(rank_in_name("nccl_trace_rank_12"), Some(12));
        assert_eq!(rank_in_name("rank3.stack.txt"), Some(3));
        assert_eq!(rank_in_name("core.1234"), None);
    }
}
