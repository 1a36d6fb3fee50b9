//! Content-addressed snapshot storage: `<data>/snapshots/<sha[0..2]>/<sha256>`. An upload is
//! written to `<data>/snapshots/partial/<sha256>`, its sha256 checked against the header, and
//! renamed into place; a file already stored is not written twice. Bytes beyond the cap are not
//! kept (the metadata is).
//!
//! **Resumable:** a partial upload outlives a broken stream (an agent that lost its connection or
//! restarted); [`SnapshotStore::status`] tells an agent the content is already stored (then no
//! bytes travel) or from which offset to resume, and [`SnapshotStore::begin`] accepts a first
//! chunk at that offset, hashing the partial bytes again from the file (on a blocking thread,
//! never read whole into memory) after checking the offset against its length. One upload per
//! content at a time: a second one for the same sha256 is told to retry, and a new upload at
//! offset 0 does not wipe another's partial bytes (it is told where to resume).
//!
//! **Bounded** (`snapshots/disk.rs`): partial uploads against `--max-partial-mb` and expired
//! after `--partial-ttl`; stored contents against `--max-snapshot-gb` (and a job's against
//! `--max-job-snapshot-gb`); contents no job names any more are deleted by reference
//! (`snapshots/gc.rs`: reference rows in the store, a protocol safe against a concurrent upload).
//!
//! **Claim by hash:** a content already stored is filed under a job without its bytes only for
//! the agent that uploaded it or a job that already holds it ([`SnapshotStore::uploaded_by`]);
//! anyone else sends the bytes (which are not stored twice).

pub mod disk;
pub mod gc;

use crate::error::ServiceError;
use crate::limits::Limit;
use crate::metrics::Metrics;
use coroner_proto::v1::SnapshotHeader;
use disk::Disk;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Uploaders remembered per content (for filing by hash); past this the memory starts over and
/// agents send bytes again, which costs bandwidth, never correctness.
const MAX_UPLOADERS: usize = 65_536;
/// Bytes a snapshot kind may have: the readers' names are short (`flight_recorder`).
const MAX_KIND: usize = 64;
/// Bytes read at a time when a resumed upload's partial bytes are hashed again.
const REHASH_CHUNK: usize = 1 << 20;

pub struct SnapshotStore {
    root: PathBuf,
    cap: u64,
    /// Contents being uploaded now: their partial files are in use.
    in_flight: Arc<Mutex<HashSet<String>>>,
    disk: Arc<Disk>,
    /// Who uploaded each content this process stored (`<host>/<agent instance>`).
    uploaders: Mutex<HashMap<String, String>>,
    metrics: Arc<Metrics>,
}

/// What the store holds of one content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    Stored,
    /// Nothing, or the first `n` bytes of an interrupted upload: resume at `n`.
    ResumeAt(u64),
}

pub struct Upload {
    header: SnapshotHeader,
    /// Released (the partial file kept for a resume) when the upload ends, done or not.
    _claim: Claim,
    partial: PathBuf,
    file: std::fs::File,
    hasher: Sha256,
    received: u64,
    kept: u64,
    final_path: PathBuf,
    cap: u64,
    disk: Arc<Disk>,
    metrics: Arc<Metrics>,
}

pub struct Stored {
    pub header: SnapshotHeader,
    pub stored_bytes: u64,
    pub deduplicated: bool,
}

/// The right to write one content's partial file.
struct Claim {
    sha256: String,
    in_flight: Arc<Mutex<HashSet<String>>>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Ok(mut set) = self.in_flight.lock() {
            set.remove(&self.sha256);
        }
    }
}

/// A snapshot's name is shown, stored and picks a reader: it must be a relative path of plain
/// components (`snapshots/rank0.stack.txt`), nothing that climbs out of a folder (`..`, an
/// absolute path) should a tool write it to disk, and no NUL or other control characters.
pub fn check_name(name: &str) -> Result<(), ServiceError> {
    let unsafe_name = name.is_empty()
        || name.len() > 1024
        || name.starts_with('/')
        || name.chars().any(|c| c.is_control() || c == '\\')
        || name.split('/').any(|part| part.is_empty() || part == "." || part == "..");
    if unsafe_name {
        return Err(ServiceError::InvalidArgument(format!(
            "snapshot name {name:?} is not a safe relative name (plain path components, no `..`, no leading `/`, no control characters)"
        )));
    }
    Ok(())
}

/// A snapshot's kind picks a reader and is shown: a short lowercase word (`flight_recorder`).
pub fn check_kind(kind: &str) -> Result<(), ServiceError> {
    if kind.len() > MAX_KIND || !kind.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.')) {
        return Err(ServiceError::InvalidArgument(format!(
            "snapshot kind {:?} is not a kind: at most {MAX_KIND} lowercase letters, digits, `_`, `-` or `.`",
            kind.chars().take(80).collect::<String>()
        )));
    }
    Ok(())
}

fn valid_sha(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Where content `sha256` lies under the store's `root` (`<root>/<sha[0..2]>/<sha>`); none for a
/// name that is not a sha256.
pub fn content_path(root: &Path, sha256: &str) -> Option<PathBuf> {
    valid_sha(sha256).then(|| root.join(&sha256[..2]).join(sha256))
}

/// What the snapshot readers find in stored content at `path` (blocking: reads the file), for
/// an upload and for a job opened again alike: nothing when its bytes were not kept, a highlight
/// saying so when they cannot be read.
pub fn stored_facts(path: Option<&Path>, kind: &str, name: &str, size: u64) -> coroner_snapshot::Facts {
    match path.map(std::fs::read) {
        Some(Ok(bytes)) => coroner_snapshot::facts(kind, name, &bytes, size),
        Some(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => {
            coroner_snapshot::Facts { highlights: vec![format!("unreadable: {e}")], ..Default::default() }
        }
        _ => coroner_snapshot::Facts::default(),
    }
}

impl SnapshotStore {
    pub fn new(root: PathBuf, cap: u64, quotas: disk::Quotas, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        std::fs::create_dir_all(root.join("partial"))?;
        let disk = Arc::new(Disk::scan(&root, quotas));
        Ok(SnapshotStore { root, cap, in_flight: Default::default(), disk, uploaders: Mutex::default(), metrics })
    }

    pub fn path_of(&self, sha256: &str) -> Option<PathBuf> {
        content_path(&self.root, sha256)
    }

    /// Bytes of one content kept at most.
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// The per-job quota on stored snapshot bytes, if any.
    pub fn per_job_quota(&self) -> Option<u64> {
        self.disk.max_per_job
    }

    fn partial_of(&self, sha256: &str) -> PathBuf {
        self.root.join("partial").join(sha256)
    }

    /// Whether the content is stored, else where an upload of it may start.
    pub fn status(&self, sha256: &str) -> Result<Holding, ServiceError> {
        let path = self.path_of(sha256).ok_or_else(|| ServiceError::InvalidArgument(format!("{sha256:?} is not a sha256 (64 lowercase hex digits)")))?;
        if path.exists() {
            return Ok(Holding::Stored);
        }
        let partial = std::fs::metadata(self.partial_of(sha256)).map(|m| m.len()).unwrap_or(0);
        // Past the cap the partial file no longer holds every byte received: start over.
        Ok(Holding::ResumeAt(if partial < self.cap { partial } else { 0 }))
    }

    /// The bytes of a stored content kept on disk.
    pub fn stored_len(&self, sha256: &str) -> Option<u64> {
        self.path_of(sha256).and_then(|p| std::fs::metadata(p).ok()).map(|m| m.len())
    }

    /// Remembers who uploaded a content (`<host>/<agent instance>`).
    pub fn remember_uploader(&self, sha256: &str, who: &str) {
        if who.is_empty() {
            return;
        }
        let mut map = self.uploaders.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_UPLOADERS {
            map.clear();
        }
        map.insert(sha256.to_string(), who.to_string());
    }

    /// Whether `who` uploaded this content (as far as this process remembers).
    pub fn uploaded_by(&self, sha256: &str, who: &str) -> bool {
        !who.is_empty() && self.uploaders.lock().unwrap_or_else(|p| p.into_inner()).get(sha256).is_some_and(|w| w == who)
    }

    /// Starts (offset 0) or resumes (offset = what [`SnapshotStore::status`] said) an upload.
    /// Blocking (file IO, and a resume hashes the partial bytes again): call from a blocking thread.
    pub fn begin(&self, header: SnapshotHeader, offset: u64) -> Result<Upload, ServiceError> {
        if !valid_sha(&header.sha256) {
            return Err(ServiceError::InvalidArgument(format!("snapshot {:?}: sha256 must be 64 lowercase hex digits", header.name)));
        }
        check_name(&header.name)?;
        check_kind(&header.kind)?;
        if !self.disk.stored_fits(header.size.min(self.cap)) {
            return Err(Limit::SnapshotQuota.refuse(
                &self.metrics,
                format!("snapshot storage is full (--max-snapshot-gb); {:?} was not stored (retention or a larger quota makes room)", header.name),
            ));
        }
        let claim = {
            let mut set = self.in_flight.lock().map_err(|_| ServiceError::Internal("snapshot registry poisoned".into()))?;
            if !set.insert(header.sha256.clone()) {
                return Err(ServiceError::Unavailable(format!("snapshot {:?} is being uploaded by another agent; retry", header.name)));
            }
            Claim { sha256: header.sha256.clone(), in_flight: self.in_flight.clone() }
        };
        let final_path = self.root.join(&header.sha256[..2]).join(&header.sha256);
        let partial = self.partial_of(&header.sha256);
        let io = |what: &str, e: std::io::Error| ServiceError::Unavailable(format!("{what} {}: {e}", partial.display()));
        // What the server holds already, from the file's length (nothing is read for this).
        let have = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        let mut hasher = Sha256::new();
        let file = if offset == 0 {
            if have > 0 && have < self.cap {
                return Err(ServiceError::FailedPrecondition(format!(
                    "snapshot {:?}: the server holds {have} bytes of it from an earlier upload; ask SnapshotStatus and resume there",
                    header.name
                )));
            }
            self.disk.free_partial(have);
            std::fs::File::create(&partial).map_err(|e| io("create", e))?
        } else {
            if have != offset || offset >= self.cap {
                return Err(ServiceError::FailedPrecondition(format!(
                    "snapshot {:?}: cannot resume at {offset}, the server holds {have} bytes of it; ask SnapshotStatus again",
                    header.name
                )));
            }
            let mut f = std::fs::File::open(&partial).map_err(|e| io("open", e))?;
            let mut buf = vec![0u8; REHASH_CHUNK];
            loop {
                let n = f.read(&mut buf).map_err(|e| io("read", e))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
            std::fs::OpenOptions::new().append(true).open(&partial).map_err(|e| io("open", e))?
        };
        Ok(Upload {
            header,
            _claim: claim,
            partial,
            file,
            hasher,
            received: offset,
            kept: offset,
            final_path,
            cap: self.cap,
            disk: self.disk.clone(),
            metrics: self.metrics.clone(),
        })
    }

    /// Bytes of unfinished uploads as counted against `--max-partial-mb`.
    pub fn partial_bytes(&self) -> u64 {
        self.disk.partial_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Deletes expired partial uploads (blocking); returns how many.
    pub fn sweep_partials(&self) -> usize {
        let busy = self.in_flight.lock().map(|s| s.clone()).unwrap_or_default();
        disk::sweep_partials(&self.root, &self.disk, &busy)
    }

    /// Removes a stored content's file (blocking); its bytes on disk, `None` when it was not there.
    /// Only the collector (`gc.rs`) calls this, after the store marked the content as being deleted.
    pub fn remove_content(&self, sha256: &str) -> Result<Option<u64>, ServiceError> {
        let Some(path) = self.path_of(sha256) else { return Ok(None) };
        let len = match std::fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ServiceError::Internal(format!("read {}: {e}", path.display()))),
        };
        match std::fs::remove_file(&path) {
            Ok(()) => {
                self.disk.free_stored(len);
                Ok(Some(len))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ServiceError::Internal(format!("delete snapshot content {}: {e}", path.display()))),
        }
    }

    /// Stored contents older than `grace` that `listed` lacks (blocking: lists the folders).
    pub fn unlisted_contents(&self, listed: &HashSet<String>, grace: std::time::Duration) -> Vec<String> {
        disk::unlisted_files(&self.root, listed, grace).into_iter().filter(|s| valid_sha(s)).collect()
    }

    /// How often the partial sweep runs: a quarter of the TTL, between a second and ten minutes.
    pub fn sweep_every(&self) -> std::time::Duration {
        (self.disk.partial_ttl / 4).clamp(std::time::Duration::from_secs(1), std::time::Duration::from_secs(600))
    }
}

impl Upload {
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), ServiceError> {
        if offset != self.received {
            return Err(ServiceError::InvalidArgument(format!("snapshot {:?}: chunk at offset {offset}, expected {}", self.header.name, self.received)));
        }
        let room = self.cap.saturating_sub(self.kept) as usize;
        let keep = &data[..data.len().min(room)];
        if !keep.is_empty() {
            if !self.disk.take_partial(keep.len() as u64) {
                return Err(Limit::PartialQuota.refuse(
                    &self.metrics,
                    format!(
                        "unfinished snapshot uploads fill their quota (--max-partial-mb); {:?} stopped at {} bytes: retry later, it resumes there",
                        self.header.name, self.received
                    ),
                ));
            }
            if let Err(e) = self.file.write_all(keep) {
                self.disk.free_partial(keep.len() as u64);
                return Err(ServiceError::Unavailable(format!("cannot store snapshot (disk full?): {e}")));
            }
            self.kept += keep.len() as u64;
        }
        self.hasher.update(data);
        self.received += data.len() as u64;
        Ok(())
    }

    pub fn finish(mut self) -> Result<Stored, ServiceError> {
        let actual = hex::encode(self.hasher.clone().finalize());
        if actual != self.header.sha256 {
            if std::fs::remove_file(&self.partial).is_ok() {
                self.disk.free_partial(self.kept);
            }
            return Err(ServiceError::InvalidArgument(format!(
                "snapshot {:?}: sha256 mismatch (header {}, content {actual}); upload it again",
                self.header.name, self.header.sha256
            )));
        }
        if self.header.size != 0 && self.header.size != self.received {
            return Err(ServiceError::InvalidArgument(format!(
                "snapshot {:?}: header says {} bytes, received {}",
                self.header.name, self.header.size, self.received
            )));
        }
        self.header.size = self.received;
        if self.final_path.exists() {
            if std::fs::remove_file(&self.partial).is_ok() {
                self.disk.free_partial(self.kept);
            }
            return Ok(Stored { header: self.header, stored_bytes: self.kept, deduplicated: true });
        }
        self.file.sync_all().map_err(|e| ServiceError::Unavailable(format!("sync snapshot: {e}")))?;
        if let Some(parent) = self.final_path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| ServiceError::Internal(format!("create {}: {e}", parent.display())))?;
        }
        std::fs::rename(&self.partial, &self.final_path).map_err(|e| ServiceError::Internal(format!("store snapshot: {e}")))?;
        self.disk.free_partial(self.kept);
        self.disk.stored_bytes.fetch_add(self.kept, std::sync::atomic::Ordering::Relaxed);
        Ok(Stored { header: self.header, stored_bytes: self.kept, deduplicated: false })
    }
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn snapshot_names_that_could_leave_a_folder_are_refused() {
        for bad in ["../../etc/passwd", "/etc/passwd", "snapshots/../../x", "a\0b", "", "a\nb", "..\\x", "./x", "a//b", "x/"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["snapshots/rank0.stack.txt", "flight_recorder/nccl_trace_rank_1", "core/core.123", "a..b.txt"] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
    }
}
