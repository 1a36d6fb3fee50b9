//! What snapshot storage holds on disk, against its quotas, and the sweeps that give space back.
//!
//! - **Partial uploads** (`partial/<sha256>`): counted in all against `--max-partial-mb`; a chunk
//!   that would pass it is refused (`RESOURCE_EXHAUSTED`), and a partial untouched for
//!   `--partial-ttl` is deleted by [`sweep_partials`] (its agent had that long to resume).
//! - **Stored contents** (`<sha[0..2]>/<sha256>`): counted in all against `--max-snapshot-gb`;
//!   a job's own against `--max-job-snapshot-gb` (from its rows, in `grpc/ingest/snapshot_upload.rs`).
//!   Contents no job names any more are deleted by reference (`snapshots/gc.rs`);
//!   [`unlisted_files`] finds the files no row stands for, sparing recent ones (an upload
//!   stores its file before it files it).
//!
//! The counters start from a scan of the folders when the server starts and move with every
//! write, rename and delete made here.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

/// A file younger than this without a row is never taken for an orphan: its upload may be
/// filing it right now.
pub const GRACE: Duration = Duration::from_secs(3600);

/// The quotas and what counts against them.
#[derive(Debug)]
pub struct Disk {
    pub max_partial: u64,
    pub max_stored: Option<u64>,
    pub max_per_job: Option<u64>,
    pub partial_ttl: Duration,
    pub partial_bytes: AtomicU64,
    pub stored_bytes: AtomicU64,
}

/// The quotas, from the flags.
#[derive(Debug, Clone, Copy)]
pub struct Quotas {
    pub max_partial: u64,
    pub max_stored: Option<u64>,
    pub max_per_job: Option<u64>,
    pub partial_ttl: Duration,
}

impl Default for Quotas {
    fn default() -> Self {
        let d = crate::limits::LimitsConfig::default();
        Quotas::from(&d)
    }
}

impl From<&crate::limits::LimitsConfig> for Quotas {
    fn from(l: &crate::limits::LimitsConfig) -> Self {
        use crate::limits::LimitsConfig;
        Quotas {
            max_partial: l.partial_bytes(),
            max_stored: LimitsConfig::gib(l.max_snapshot_gb),
            max_per_job: LimitsConfig::gib(l.max_job_snapshot_gb),
            partial_ttl: l.partial_ttl,
        }
    }
}

fn sizes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

/// The stored contents' folders: `<root>/<two hex digits>`.
fn content_dirs(root: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit())))
}

impl Disk {
    /// Counts what `root` holds now (blocking: a scan of the folders).
    pub fn scan(root: &Path, q: Quotas) -> Disk {
        let stored = content_dirs(root).map(|d| sizes(&d)).sum();
        Disk {
            max_partial: q.max_partial,
            max_stored: q.max_stored,
            max_per_job: q.max_per_job,
            partial_ttl: q.partial_ttl,
            partial_bytes: AtomicU64::new(sizes(&root.join("partial"))),
            stored_bytes: AtomicU64::new(stored),
        }
    }

    /// Takes `n` more partial bytes if they fit the quota.
    pub fn take_partial(&self, n: u64) -> bool {
        let mut now = self.partial_bytes.load(Relaxed);
        loop {
            if now.saturating_add(n) > self.max_partial {
                return false;
            }
            match self.partial_bytes.compare_exchange_weak(now, now + n, Relaxed, Relaxed) {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    pub fn free_partial(&self, n: u64) {
        let _ = self.partial_bytes.fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_sub(n)));
    }

    /// Whether `n` more stored bytes fit the total quota.
    pub fn stored_fits(&self, n: u64) -> bool {
        self.max_stored.is_none_or(|max| self.stored_bytes.load(Relaxed).saturating_add(n) <= max)
    }

    pub fn free_stored(&self, n: u64) {
        let _ = self.stored_bytes.fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_sub(n)));
    }
}

fn older_than(meta: &std::fs::Metadata, age: Duration) -> bool {
    meta.modified().ok().and_then(|m| SystemTime::now().duration_since(m).ok()).is_some_and(|a| a >= age)
}

/// Deletes partial uploads untouched for the TTL, except those in `busy`; returns how many.
pub fn sweep_partials(root: &Path, disk: &Disk, busy: &HashSet<String>) -> usize {
    let mut gone = 0;
    for entry in std::fs::read_dir(root.join("partial")).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(meta) = entry.metadata() else { continue };
        if busy.contains(&name) || !meta.is_file() || !older_than(&meta, disk.partial_ttl) {
            continue;
        }
        if std::fs::remove_file(entry.path()).is_ok() {
            disk.free_partial(meta.len());
            gone += 1;
        }
    }
    gone
}

/// The stored contents older than `grace` that `listed` (every content the store has a row for)
/// lacks: files an upload stored and never filed (it died in between). Blocking: a listing of
/// the content folders, which only the orphan sweep (`gc.rs`) makes, at most once an hour.
pub fn unlisted_files(root: &Path, listed: &HashSet<String>, grace: Duration) -> Vec<String> {
    let mut found = Vec::new();
    for dir in content_dirs(root) {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_file() && !listed.contains(&name) && older_than(&meta, grace) {
                found.push(name);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas(max_partial: u64, ttl: Duration) -> Quotas {
        Quotas { max_partial, max_stored: Some(100), max_per_job: None, partial_ttl: ttl }
    }

    #[test]
    fn rule_partial_bytes_stop_at_the_quota() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("partial")).expect("mkdir");
        std::fs::write(dir.path().join("partial").join("a"), [0u8; 40]).expect("write");
        let disk = Disk::scan(dir.path(), quotas(100, Duration::from_secs(60)));
        assert_eq!(disk.partial_bytes.load(Relaxed), 40, "the scan counts what is there");
        assert!(disk.take_partial(60));
        assert!(!disk.take_partial(1), "past the quota");
        disk.free_partial(10);
        assert!(disk.take_partial(10));
        assert!(disk.stored_fits(100) && !disk.stored_fits(101));
    }

    #[test]
    fn rule_partials_expire_unless_in_flight() {
        let dir = tempfile::tempdir().expect("tempdir");
        let partial = dir.path().join("partial");
        std::fs::create_dir_all(&partial).expect("mkdir");
        for name in ["old", "busy"] {
            std::fs::write(partial.join(name), [0u8; 10]).expect("write");
        }
        let disk = Disk::scan(dir.path(), quotas(100, Duration::ZERO));
        let busy: HashSet<String> = ["busy".to_string()].into();
        assert_eq!(sweep_partials(dir.path(), &disk, &busy), 1);
        assert!(!partial.join("old").exists() && partial.join("busy").exists());
        assert_eq!(disk.partial_bytes.load(Relaxed), 10);
        // A fresh partial is kept while its TTL runs.
        let disk = Disk::scan(dir.path(), quotas(100, Duration::from_secs(3600)));
        assert_eq!(sweep_partials(dir.path(), &disk, &HashSet::new()), 0);
    }

    #[test]
    fn rule_unlisted_files_are_those_no_row_stands_for_and_not_recent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sub = dir.path().join("ab");
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::write(sub.join("abnamed"), [0u8; 5]).expect("write");
        std::fs::write(sub.join("abfresh"), [0u8; 5]).expect("write");
        let listed: HashSet<String> = ["abnamed".to_string()].into();
        assert!(unlisted_files(dir.path(), &listed, GRACE).is_empty(), "both are younger than the grace period");
        let past = SystemTime::now() - Duration::from_secs(7200);
        for name in ["abnamed", "abfresh"] {
            std::fs::File::options().write(true).open(sub.join(name)).and_then(|f| f.set_modified(past)).expect("age the file");
        }
        assert_eq!(unlisted_files(dir.path(), &listed, GRACE), ["abfresh"]);
    }
}
