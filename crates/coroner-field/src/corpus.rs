//! The corpus on disk: one folder per case, `label.toml` beside `input/`.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// What a person established about a case from its thread (never read by the product).
#[derive(Debug, Clone, Deserialize)]
pub struct Label {
    pub source: String,
    pub framework: String,
    pub launcher: String,
    pub shape: String,
    pub verdict: String,
    pub classes: Vec<String>,
    #[serde(default)]
    pub culprit: Option<u32>,
    #[serde(default)]
    pub why: String,
}

/// Which half of the corpus a case is in: `Dev` (developed against) or `Held` (checked only now
/// and then). Decided by FNV-1a 64 of the id, so it never changes and needs no list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Half {
    Dev,
    Held,
}

impl Half {
    pub fn of(id: &str) -> Half {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in id.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        if h % 2 == 0 {
            Half::Dev
        } else {
            Half::Held
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Half::Dev => "dev",
            Half::Held => "held",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Case {
    pub id: String,
    pub dir: PathBuf,
    pub label: Label,
}

impl Case {
    /// What the owner of the logs would hand to `coroner analyze`: one file as that file,
    /// several as their folder.
    pub fn input_paths(&self) -> Vec<PathBuf> {
        let input = self.dir.join("input");
        let files: Vec<PathBuf> = std::fs::read_dir(&input).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
        match files.as_slice() {
            [one] if one.is_file() => vec![one.clone()],
            _ => vec![input],
        }
    }

    pub fn half(&self) -> Half {
        Half::of(&self.id)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("cannot read the field corpus at {path}: {source} (pass --dir tests/data/field)")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a valid label ({source}); every case needs source, framework, launcher, shape, verdict and classes")]
    Label { path: PathBuf, source: toml::de::Error },
}

/// Every case under `dir`, by id.
pub fn load(dir: &Path) -> Result<Vec<Case>, CorpusError> {
    let rd = std::fs::read_dir(dir).map_err(|source| CorpusError::Io { path: dir.to_path_buf(), source })?;
    let mut cases = Vec::new();
    for entry in rd.filter_map(Result::ok) {
        let case_dir = entry.path();
        let label_path = case_dir.join("label.toml");
        if !label_path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&label_path).map_err(|source| CorpusError::Io { path: label_path.clone(), source })?;
        let label: Label = toml::from_str(&text).map_err(|source| CorpusError::Label { path: label_path.clone(), source })?;
        let id = entry.file_name().to_string_lossy().into_owned();
        cases.push(Case { id, dir: case_dir, label });
    }
    cases.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_are_stable_and_both_used() {
        assert_eq!(Half::of("a"), Half::of("a"));
        let ids = ["a", "b", "c", "d", "e", "f", "g", "h"];
        assert!(ids.iter().any(|i| Half::of(i) == Half::Dev));
        assert!(ids.iter().any(|i| Half::of(i) == Half::Held));
    }
}
