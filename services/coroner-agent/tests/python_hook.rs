//! The Python crash hook's own tests (`python/tests`, no torch needed) run under `cargo test`,
//! and a stack file the hook writes reads with the snapshot reader the report uses.

use std::path::{Path, PathBuf};
use std::process::Command;

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python")
}

fn python() -> Option<&'static str> {
    ["python3", "python"].into_iter().find(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
}

#[test]
fn the_hooks_python_tests_pass() {
    let Some(py) = python() else {
        eprintln!("no python3 on PATH; the crash hook's tests were not run");
        return;
    };
    let out = Command::new(py)
        .args(["-m", "unittest", "discover", "-s"])
        .arg(python_dir().join("tests"))
        .output()
        .expect("run python -m unittest");
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_stack_the_hook_writes_reads_as_a_stack_snapshot() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = "import coroner_hook\ncoroner_hook.install()\ndef step():\n    raise ValueError('loss is nan')\nstep()\n";
    let out = Command::new(py)
        .args(["-c", script])
        .env("PYTHONPATH", python_dir())
        .env("CORONER_SNAPSHOT_DIR", dir.path())
        .env("CORONER_RANK", "2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let bytes = std::fs::read(dir.path().join("rank2.stack.txt")).unwrap();
    let h = coroner_snapshot::highlights("stack", "rank2.stack.txt", &bytes).unwrap();
    assert_eq!(h[0], "reason: ValueError: loss is nan");
    assert_eq!(h[1], "raised in step (<string>:4)");
}
