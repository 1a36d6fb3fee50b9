//! Every snapshot file of the shared failure corpus (`../shared/corpus` beside the repository,
//! when present) reads without error, and the flight recorder dumps give the progress PyTorch's
//! own analyzer reports.

use coroner_snapshot::{flight_recorder, highlights, kind_of};
use std::path::PathBuf;

fn corpus() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    p.is_dir().then_some(p)
}

#[test]
fn every_corpus_snapshot_reads() {
    let Some(root) = corpus() else {
        eprintln!("no corpus beside the repository; skipped");
        return;
    };
    let mut read = 0;
    for bundle in std::fs::read_dir(&root).unwrap().flatten() {
        for folder in ["snapshots", "flight_recorder", "host"] {
            let Ok(files) = std::fs::read_dir(bundle.path().join(folder)) else { continue };
            for f in files.flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                let kind = kind_of(folder, &name);
                let bytes = std::fs::read(f.path()).unwrap();
                let h = highlights(kind, &name, &bytes).unwrap_or_else(|e| panic!("{}: {e}", f.path().display()));
                if kind != "other" {
                    assert!(!h.is_empty(), "{}: no highlights", f.path().display());
                    read += 1;
                }
            }
        }
    }
    assert!(read >= 45, "read only {read} snapshots");
}

#[test]
fn hang_dumps_show_the_laggard() {
    let Some(root) = corpus() else { return };
    // nccl2_hang_r1: rank 0 waits in collective 11, rank 1 never issued it.
    let dir = root.join("nccl2_hang_r1/flight_recorder");
    let p0 = flight_recorder::parse(&std::fs::read(dir.join("nccl_trace_rank_0")).unwrap()).unwrap().progress();
    let p1 = flight_recorder::parse(&std::fs::read(dir.join("nccl_trace_rank_1")).unwrap()).unwrap().progress();
    assert!(p0[0].last_enqueued > p1[0].last_enqueued);
}
