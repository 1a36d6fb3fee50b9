//! A folder of flight recorder dumps alone (what `torchfrtrace DIR` reads; `coroner fr`): every
//! regular file in it, three levels deep at most, that parses as a dump, pickle or JSON, under the
//! rank its name ends with (any prefix: `nccl_trace_rank_3`, `fr_3`, `trace_3.json`). Other files
//! are skipped with a warning; so are links out of the folder and special files (`walk.rs`).

use crate::snapshots::{fr_rank_of, loose_dump};
use crate::walk::{Entry, Scope};
use crate::BundleError;
use coroner_model::{FrDump, Rank};
use std::collections::BTreeMap;
use std::path::Path;

/// The dumps found, by rank, with the file each came from.
#[derive(Debug, Default)]
pub struct DumpFolder {
    pub dumps: BTreeMap<Rank, FrDump>,
    pub files: BTreeMap<Rank, String>,
    pub warnings: Vec<String>,
}

pub fn read_dumps(dir: &Path) -> Result<DumpFolder, BundleError> {
    if !dir.exists() {
        return Err(BundleError::Missing { path: dir.to_path_buf() });
    }
    let mut out = DumpFolder::default();
    let scope = Scope::inside(dir);
    walk(dir, &scope, 0, &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, scope: &Scope, depth: u32, out: &mut DumpFolder) -> Result<(), BundleError> {
    let entries = std::fs::read_dir(dir).map_err(|e| BundleError::Io { path: dir.to_path_buf(), source: e })?;
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let name = scope.relative(&path);
        match scope.classify(&path) {
            Entry::Dir if depth < 3 => walk(&path, scope, depth + 1, out)?,
            Entry::Dir => {}
            Entry::Skip(why) => out.warnings.push(format!("skipped {name}: {why}")),
            Entry::File => {
                let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let bytes = match std::fs::read(&path) {
                    Ok(b) => b,
                    Err(e) => {
                        out.warnings.push(format!("skipped {name}: {e}"));
                        continue;
                    }
                };
                match (loose_dump(&file, &bytes, true), fr_rank_of(&file)) {
                    (Some(s), Some(rank)) => {
                        if let Some(dump) = s.facts.fr_dump {
                            if let Some(earlier) = out.files.insert(rank, name.clone()) {
                                out.warnings.push(format!("{name} and {earlier} are both rank {rank}'s: the newer dump is kept"));
                            }
                            let newer = out.dumps.get(&rank).is_none_or(|d| dump.newest_record() >= d.newest_record());
                            if newer {
                                out.dumps.insert(rank, dump);
                            }
                        }
                    }
                    (Some(_), None) => out.warnings.push(format!("skipped {name}: a flight recorder dump, but its name ends in no rank")),
                    // Logs and notes beside the dumps are expected; a file named like a dump is not.
                    (None, _) if crate::snapshots::kind_of("", &file) == "flight_recorder" || file.contains("trace_rank") || bytes.first() == Some(&0x80) => {
                        out.warnings.push(format!("skipped {name}: not a flight recorder dump"));
                    }
                    (None, _) => {}
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_prefix_json_or_pickle_and_the_rest_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fr");
        std::fs::copy(fx.join("gloo4_size_r1/nccl_trace_rank_0"), dir.path().join("fr_0")).unwrap();
        std::fs::copy(fx.join("gloo4_size_r1_json/nccl_trace_rank_1.json"), dir.path().join("trace_1.json")).unwrap();
        std::fs::copy(fx.join("gloo4_size_r1/rank0.log"), dir.path().join("rank0.log")).unwrap();
        std::fs::write(dir.path().join("fr_2"), b"\x80\x02}q\x00(X").unwrap();
        let f = read_dumps(dir.path()).unwrap();
        assert_eq!(f.dumps.keys().copied().collect::<Vec<_>>(), vec![Rank(0), Rank(1)]);
        assert_eq!((f.dumps[&Rank(0)].encoding.as_str(), f.dumps[&Rank(1)].encoding.as_str()), ("pickle", "json"));
        assert_eq!(f.warnings, vec!["skipped fr_2: not a flight recorder dump".to_string()], "the log beside them is no warning");
        assert!(read_dumps(&dir.path().join("nope")).is_err());
    }
}
