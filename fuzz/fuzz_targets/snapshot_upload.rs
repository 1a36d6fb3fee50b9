//! The snapshot upload framing of coronerd's `SnapshotStore`: `SnapshotStatus`, then chunks
//! (a header on the first, offsets, a last flag) through `begin`, `write` and `finish`, as the
//! `UploadSnapshot` handler drives them, with streams that break and resume.
//!
//! Input: frames of `tag, u16 length, message bytes` (`coroner_fuzz::frames`): each body is a
//! `SnapshotChunk`; the tag `OpenSession` asks `status` about its header, `LogBatch` breaks the
//! stream (an agent that died), the others are chunks.
//! Checked: no panic; an upload finished with at most the cap received is stored with exactly its
//! bytes and its sha256; the partial bytes counted against the quota never pass it and always
//! equal the bytes in the partial folder once no upload is open; nothing is written outside the
//! store's folder.

#![no_main]

use coroner_fuzz::{frames, Tag};
use coronerd::snapshots::{disk::Quotas, SnapshotStore, Upload};
use libfuzzer_sys::fuzz_target;
use prost::Message;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// Small limits, so a fuzz input reaches them.
const CAP: u64 = 64 << 10;
const MAX_PARTIAL: u64 = 128 << 10;

fn partial_on_disk(root: &std::path::Path) -> u64 {
    std::fs::read_dir(root.join("partial")).into_iter().flatten().flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum()
}

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("snapshots");
    let quotas = Quotas { max_partial: MAX_PARTIAL, max_stored: Some(1 << 20), max_per_job: None, partial_ttl: Duration::from_secs(3600) };
    let store = SnapshotStore::new(root.clone(), CAP, quotas, Arc::default()).expect("a store");
    // The open upload, whether it began at offset 0 (all its bytes came in this stream), its header.
    let mut open: Option<(Upload, bool, coroner_proto::v1::SnapshotHeader)> = None;
    for (tag, body) in frames(data) {
        let Ok(chunk) = coroner_proto::v1::SnapshotChunk::decode(body) else { continue };
        match tag {
            Tag::OpenSession => {
                if let Some(h) = &chunk.header {
                    let _ = store.status(&h.sha256);
                }
            }
            Tag::LogBatch => open = None,
            _ => {
                if let Some(h) = chunk.header.clone() {
                    open = None;
                    match store.begin(h.clone(), chunk.offset) {
                        Ok(u) => open = Some((u, chunk.offset == 0, h)),
                        Err(_) => continue,
                    }
                }
                let Some((upload, _, _)) = open.as_mut() else { continue };
                if upload.write(chunk.offset, &chunk.data).is_err() {
                    open = None;
                    continue;
                }
                if chunk.last {
                    let (upload, whole, header) = open.take().expect("open");
                    if let Ok(stored) = upload.finish() {
                        let path = store.path_of(&header.sha256).expect("a valid sha256 was stored");
                        let kept = std::fs::read(&path).expect("the stored file");
                        if !stored.deduplicated {
                            assert_eq!(kept.len() as u64, stored.stored_bytes);
                        }
                        // Whole, under the cap and new: the file is exactly the bytes whose sha256 was checked.
                        if whole && stored.header.size <= CAP && !stored.deduplicated {
                            assert_eq!(hex::encode(Sha256::digest(&kept)), header.sha256, "stored bytes differ from their sha256");
                        }
                    }
                }
            }
        }
        assert!(store.partial_bytes() <= MAX_PARTIAL, "partial bytes {} past the quota", store.partial_bytes());
        if open.is_none() {
            assert_eq!(store.partial_bytes(), partial_on_disk(&root), "the partial count drifted from the disk");
        }
    }
    drop(open);
    for entry in std::fs::read_dir(dir.path()).expect("read").flatten() {
        assert_eq!(entry.file_name(), "snapshots", "wrote outside the store");
    }
});
