//! Content-addressed snapshot storage: `<data>/snapshots/<sha[0..2]>/<sha256>`. An upload is
//! written to `<data>/snapshots/partial/<sha256>`, its sha256 checked against the header, and
//! renamed into place; a file already stored is not written twice. Bytes beyond the cap are not
//! kept (the metadata is).
//!
//! **Resumable:** a partial upload outlives a broken stream (an agent that lost its connection or
//! restarted); [`SnapshotStore::status`] tells an agent the content is already stored (then no
//! bytes travel) or from which offset to resume, and [`SnapshotStore::begin`] accepts a first
//! chunk at that offset, re-reading the partial bytes into the hash. One upload per content at a
//! time: a second one for the same sha256 is told to retry.

use crate::error::ServiceError;
use coroner_proto::v1::SnapshotHeader;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::PathBuf;

pub struct SnapshotStore {
    root: PathBuf,
    cap: u64,
    /// Contents being uploaded now: their partial files are in use.
    in_flight: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
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
}

pub struct Stored {
    pub header: SnapshotHeader,
    pub stored_bytes: u64,
    pub deduplicated: bool,
}

/// The right to write one content's partial file.
struct Claim {
    sha256: String,
    in_flight: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
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

fn valid_sha(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl SnapshotStore {
    pub fn new(root: PathBuf, cap: u64) -> anyhow::Result<Self> {
        std::fs::create_dir_all(root.join("partial"))?;
        Ok(SnapshotStore { root, cap, in_flight: Default::default() })
    }

    pub fn path_of(&self, sha256: &str) -> Option<PathBuf> {
        valid_sha(sha256).then(|| self.root.join(&sha256[..2]).join(sha256))
    }

    /// Bytes of one content kept at most.
    pub fn cap(&self) -> u64 {
        self.cap
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

    /// Starts (offset 0) or resumes (offset = what [`SnapshotStore::status`] said) an upload.
    pub fn begin(&self, header: SnapshotHeader, offset: u64) -> Result<Upload, ServiceError> {
        if !valid_sha(&header.sha256) {
            return Err(ServiceError::InvalidArgument(format!("snapshot {:?}: sha256 must be 64 lowercase hex digits", header.name)));
        }
        check_name(&header.name)?;
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
        let mut hasher = Sha256::new();
        let file = if offset == 0 {
            std::fs::File::create(&partial).map_err(|e| io("create", e))?
        } else {
            let have = std::fs::read(&partial).map_err(|e| io("read", e))?;
            if have.len() as u64 != offset || offset >= self.cap {
                return Err(ServiceError::FailedPrecondition(format!(
                    "snapshot {:?}: cannot resume at {offset}, the server holds {} bytes of it; ask SnapshotStatus again",
                    header.name,
                    have.len()
                )));
            }
            hasher.update(&have);
            std::fs::OpenOptions::new().append(true).open(&partial).map_err(|e| io("open", e))?
        };
        Ok(Upload { header, _claim: claim, partial, file, hasher, received: offset, kept: offset, final_path, cap: self.cap })
    }
}

impl Upload {
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), ServiceError> {
        if offset != self.received {
            return Err(ServiceError::InvalidArgument(format!(
                "snapshot {:?}: chunk at offset {offset}, expected {}",
                self.header.name, self.received
            )));
        }
        self.hasher.update(data);
        self.received += data.len() as u64;
        let room = self.cap.saturating_sub(self.kept) as usize;
        let keep = &data[..data.len().min(room)];
        if !keep.is_empty() {
            self.file.write_all(keep).map_err(|e| ServiceError::Unavailable(format!("cannot store snapshot (disk full?): {e}")))?;
            self.kept += keep.len() as u64;
        }
        Ok(())
    }

    pub fn finish(mut self) -> Result<Stored, ServiceError> {
        let actual = hex::encode(self.hasher.clone().finalize());
        if actual != self.header.sha256 {
            let _ = std::fs::remove_file(&self.partial);
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
            let _ = std::fs::remove_file(&self.partial);
            return Ok(Stored { header: self.header, stored_bytes: self.kept, deduplicated: true });
        }
        self.file.sync_all().map_err(|e| ServiceError::Unavailable(format!("sync snapshot: {e}")))?;
        if let Some(parent) = self.final_path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| ServiceError::Internal(format!("create {}: {e}", parent.display())))?;
        }
        std::fs::rename(&self.partial, &self.final_path).map_err(|e| ServiceError::Internal(format!("store snapshot: {e}")))?;
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
