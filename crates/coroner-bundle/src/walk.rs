//! What inside a folder may be read. A folder given to `coroner analyze` or `coroner import` may
//! hold anything (a bundle copied from someone else, a scratch directory): only regular files
//! and folders are read, and a symbolic link only when it points inside the folder. Everything
//! else (a link to `/etc/passwd` or `~/.ssh`, which an import would upload to a server; a FIFO
//! or a device, which would block or never end) is skipped with a warning.

use std::path::{Path, PathBuf};

/// What an entry is, for reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    File,
    Dir,
    /// Not to be read, and why.
    Skip(String),
}

/// The folder a load stays inside (canonical), when one was given.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    root: Option<PathBuf>,
}

impl Scope {
    /// Reads stay inside `dir`.
    pub fn inside(dir: &Path) -> Scope {
        Scope { root: Some(dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())) }
    }

    /// A path the user named: read whatever it is.
    pub fn anything() -> Scope {
        Scope { root: None }
    }

    /// How the report names a file: its path inside the folder being read, else its file name.
    pub fn relative(&self, path: &Path) -> String {
        let inside = self.root.as_ref().and_then(|root| path.canonicalize().ok()?.strip_prefix(root).ok().map(Path::to_path_buf));
        match inside {
            Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
            _ => path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string()),
        }
    }

    pub fn classify(&self, path: &Path) -> Entry {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) => return Entry::Skip(e.to_string()),
        };
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = match path.canonicalize() {
                Ok(t) => t,
                Err(e) => return Entry::Skip(format!("a symbolic link that leads nowhere ({e})")),
            };
            if let Some(root) = &self.root {
                if !target.starts_with(root) {
                    return Entry::Skip(format!("a symbolic link to {}, outside {}", target.display(), root.display()));
                }
            }
            return match std::fs::metadata(&target) {
                Ok(m) if m.is_file() => Entry::File,
                Ok(m) if m.is_dir() => Entry::Dir,
                Ok(_) => Entry::Skip("a link to something that is not a regular file".into()),
                Err(e) => Entry::Skip(e.to_string()),
            };
        }
        if ft.is_file() {
            Entry::File
        } else if ft.is_dir() {
            Entry::Dir
        } else if self.root.is_none() {
            // Named by the user (a FIFO, `/dev/stdin`): read it.
            Entry::File
        } else {
            Entry::Skip("not a regular file (a FIFO, socket or device)".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_outside_the_folder_and_special_files_are_skipped() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"x").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.log"), b"x").unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::os::unix::fs::symlink(d.join("a.log"), d.join("inside.log")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), d.join("out.log")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/x", d.join("dangling.log")).unwrap();
        let fifo = d.join("pipe.log");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let s = Scope::inside(d);
        assert_eq!(s.classify(&d.join("a.log")), Entry::File);
        assert_eq!(s.classify(&d.join("sub")), Entry::Dir);
        assert_eq!(s.classify(&d.join("inside.log")), Entry::File);
        assert!(matches!(s.classify(&d.join("out.log")), Entry::Skip(w) if w.contains("outside")));
        assert!(matches!(s.classify(&d.join("dangling.log")), Entry::Skip(w) if w.contains("leads nowhere")));
        assert!(matches!(s.classify(&fifo), Entry::Skip(w) if w.contains("FIFO")));
        assert_eq!(Scope::anything().classify(&d.join("out.log")), Entry::File);
    }
}
