//! Runs the built agent around real commands with an unreachable server: the child's output
//! passes through byte for byte, its exit status comes back, and the agent does not wait long.

use std::process::Command;
use std::time::{Duration, Instant};

fn agent(spool: &std::path::Path, script: &str) -> (std::process::Output, Duration) {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_coroner-agent"))
        .args(["run", "--job", "itest", "--rank", "0", "--server", "http://127.0.0.1:1", "--flush-timeout", "1"])
        .arg("--spool-dir")
        .arg(spool)
        .args(["--", "sh", "-c", script])
        .env_remove("CORONER_SERVER")
        .output()
        .expect("run the agent");
    (out, start.elapsed())
}

#[test]
fn passes_output_through_and_returns_the_exit_code_despite_a_dead_server() {
    let dir = tempfile::tempdir().unwrap();
    let (out, took) = agent(dir.path(), "echo out; printf 'no newline \\377'; echo err >&2; exit 3");
    assert_eq!(out.status.code(), Some(3), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"out\nno newline \xff");
    // The agent's own warnings may come before or after the child's line (they race).
    assert!(String::from_utf8_lossy(&out.stderr).lines().any(|l| l == "err"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // The undelivered lines stay in the spool for a later agent.
    let rank_dir = dir.path().join("itest").join("rank-0");
    let spools: Vec<_> = std::fs::read_dir(&rank_dir).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "spool")).collect();
    assert_eq!(spools.len(), 1);
    assert!(std::fs::metadata(spools[0].path()).unwrap().len() > 16);
}

#[test]
fn a_signal_death_exits_128_plus_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let (out, took) = agent(dir.path(), "echo before; kill -9 $$");
    assert_eq!(out.status.code(), Some(137));
    assert_eq!(out.stdout, b"before\n");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn the_child_sees_its_identity_in_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = agent(dir.path(), "echo $CORONER_JOB $CORONER_RANK $PYTHONUNBUFFERED; test -d \"$CORONER_SNAPSHOT_DIR\"");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"itest 0 1\n");
}
