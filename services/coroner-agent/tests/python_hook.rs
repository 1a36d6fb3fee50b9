//! The Python crash hook's own tests (`python/tests`, no torch needed) run under `cargo test`,
//! and the files the hook writes (stack, SIGTERM stack, the model's JSON description) get the
//! snapshot kind and read with the reader the report uses.

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
    let out = Command::new(py).args(["-m", "unittest", "discover", "-s"]).arg(python_dir().join("tests")).output().expect("run python -m unittest");
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

fn run_hook(py: &str, script: &str, dir: &Path) -> std::process::Output {
    let path = std::env::join_paths([python_dir(), python_dir().join("tests")]).unwrap();
    Command::new(py)
        .args(["-c", script])
        .env("PYTHONPATH", path)
        .env("CORONER_SNAPSHOT_DIR", dir)
        .env("CORONER_RANK", "2")
        .env_remove("CORONER_HOOK_FULL_STATE_DICT")
        .output()
        .unwrap()
}

fn read_as_agent_would(dir: &Path, name: &str) -> (&'static str, Vec<String>) {
    let bytes = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let kind = coroner_snapshot::kind_of("snapshots", name);
    (kind, coroner_snapshot::highlights(kind, name, &bytes).unwrap_or_else(|e| panic!("{name}: {e}")))
}

#[test]
fn the_json_the_hook_writes_reads_as_a_state_dict_summary() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
from helpers import FAKE_TORCH
exec(FAKE_TORCH)
import coroner_hook
model = Module([("embed.weight", DTensor((128256, 4096), 8, torch.bfloat16)), ("head.weight", Tensor((10, 4096)))],
               [("inv_freq", Tensor((64,)))])
coroner_hook.install(model=model, optimizer=Optimizer())
raise RuntimeError("CUDA error: an illegal memory access was encountered")
"#;
    let out = run_hook(py, script, dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let (kind, h) = read_as_agent_would(dir.path(), "rank2.state_dict.json");
    assert_eq!(kind, "state_dict_summary");
    assert_eq!(h[0], "3 tensors (2 parameters, 1 buffers): 525.4 M parameters, bfloat16 100%, float32 <1%; on cuda:0");
    assert_eq!(h[1], "sharded: 1 tensors over 8 ranks (DTensor Shard(dim=0)); this rank holds 65.7 M elements (125.4 MiB)");
    assert_eq!(h[3], "optimizer Optimizer: lr=0.0003 betas=[0.9, 0.95] eps=1e-8 weight_decay=0.1");
    assert_eq!(read_as_agent_would(dir.path(), "rank2.stack.txt").0, "stack");
    assert_eq!(coroner_snapshot::kind_of("snapshots", "rank2.memory_summary.txt"), "memory_summary");
    assert!(dir.path().join("rank2.memory_summary.txt").is_file());
}

#[test]
fn a_sigterm_stack_the_hook_writes_reads_with_its_reason() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = "import os, signal, time, coroner_hook\ncoroner_hook.install()\ndef wait_for_peers():\n    os.kill(os.getpid(), signal.SIGTERM)\n    time.sleep(5)\nwait_for_peers()\n";
    let out = run_hook(py, script, dir.path());
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(15), "died by SIGTERM: {:?}", out.status);
    let (kind, h) = read_as_agent_would(dir.path(), "rank2.sigterm.stack.txt");
    assert_eq!(kind, "stack");
    assert_eq!(h[0], "reason: received SIGTERM");
    // The signal arrives inside os.kill, on line 4.
    assert!(h[1].ends_with("current thread in wait_for_peers (<string>:4)"), "{h:?}");
}
