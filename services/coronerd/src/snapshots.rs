//! Content-addressed snapshot storage: `<data>/snapshots/<sha[0..2]>/<sha256>`. An upload is
//! written to a temporary file, its sha256 checked against the header, and renamed into place;
//! a file already stored is not written twice. Bytes beyond the cap are not kept (the metadata is).

use crate::error::ServiceError;
use coroner_proto::v1::SnapshotHeader;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::PathBuf;

pub struct SnapshotStore {
    root: PathBuf,
    cap: u64,
}

pub struct Upload {
    header: SnapshotHeader,
    tmp: tempfile_path::TempPath,
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

mod tempfile_path {
    /// A temporary file removed when dropped unless kept.
    pub struct TempPath(pub Option<std::path::PathBuf>);
    impl Drop for TempPath {
        fn drop(&mut self) {
            if let Some(p) = self.0.take() {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

fn valid_sha(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl SnapshotStore {
    pub fn new(root: PathBuf, cap: u64) -> anyhow::Result<Self> {
        std::fs::create_dir_all(root.join("tmp"))?;
        Ok(SnapshotStore { root, cap })
    }

    pub fn path_of(&self, sha256: &str) -> Option<PathBuf> {
        valid_sha(sha256).then(|| self.root.join(&sha256[..2]).join(sha256))
    }

    pub fn begin(&self, header: SnapshotHeader) -> Result<Upload, ServiceError> {
        if !valid_sha(&header.sha256) {
            return Err(ServiceError::InvalidArgument(format!("snapshot {:?}: sha256 must be 64 lowercase hex digits", header.name)));
        }
        if header.name.is_empty() || header.name.contains("..") || header.name.starts_with('/') || header.name.contains('\0') {
            return Err(ServiceError::InvalidArgument(format!("snapshot name {:?} is not a safe relative name", header.name)));
        }
        let final_path = self.root.join(&header.sha256[..2]).join(&header.sha256);
        let tmp = self.root.join("tmp").join(uuid::Uuid::new_v4().to_string());
        let file = std::fs::File::create(&tmp).map_err(|e| ServiceError::Internal(format!("create {}: {e}", tmp.display())))?;
        Ok(Upload {
            header,
            tmp: tempfile_path::TempPath(Some(tmp)),
            file,
            hasher: Sha256::new(),
            received: 0,
            kept: 0,
            final_path,
            cap: self.cap,
        })
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
            return Ok(Stored { header: self.header, stored_bytes: self.kept, deduplicated: true });
        }
        self.file.sync_all().map_err(|e| ServiceError::Unavailable(format!("sync snapshot: {e}")))?;
        if let Some(parent) = self.final_path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| ServiceError::Internal(format!("create {}: {e}", parent.display())))?;
        }
        let tmp = self.tmp.0.take().ok_or_else(|| ServiceError::Internal("snapshot temp file vanished".into()))?;
        std::fs::rename(&tmp, &self.final_path).map_err(|e| ServiceError::Internal(format!("store snapshot: {e}")))?;
        Ok(Stored { header: self.header, stored_bytes: self.kept, deduplicated: false })
    }
}
