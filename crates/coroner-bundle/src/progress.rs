//! How far a load has come, for a progress bar (`coroner analyze` and `coroner import` draw one on
//! a terminal): bytes read of the input's total, and files. The total is every regular file under
//! the paths given, measured before reading; what the load skips or reads only in part (answer
//! keys, snapshots) is never read, so the count may end short of the total.

use std::path::{Path, PathBuf};

/// How often a log being read reports its bytes.
pub const STEP_BYTES: u64 = 1 << 20;

/// How deep [`measure`] looks: one level below the deepest the load reads (torchrun's log folders).
const MAX_DEPTH: u32 = 5;

/// A load's progress, as [`crate::Sink::progress`] receives it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of input read so far.
    pub bytes: u64,
    /// Bytes of every regular file under the paths given (0 when unknown: standard input).
    pub total_bytes: u64,
    /// Files read so far.
    pub files: usize,
    /// Regular files under the paths given.
    pub total_files: usize,
}

/// The regular files under `paths` and their bytes; links and special files are not followed.
pub(crate) fn measure(paths: &[PathBuf]) -> Progress {
    let mut p = Progress::default();
    for path in paths {
        add(path, 0, &mut p);
    }
    p
}

fn add(path: &Path, depth: u32, p: &mut Progress) {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return };
    if meta.is_file() {
        p.total_bytes += meta.len();
        p.total_files += 1;
    } else if meta.is_dir() && depth < MAX_DEPTH {
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            add(&entry.path(), depth + 1, p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_regular_files_in_folders() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.log"), b"12345").expect("write");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/b.log"), b"123").expect("write");
        std::os::unix::fs::symlink(dir.path().join("a.log"), dir.path().join("link.log")).expect("link");
        let p = measure(&[dir.path().to_path_buf()]);
        assert_eq!((p.total_bytes, p.total_files), (8, 2));
    }
}
