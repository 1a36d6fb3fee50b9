//! The load and fault generator, run small: simulated agents ship to a real coronerd process
//! that is killed with SIGKILL twice and restarted in place, while two agents' network is cut
//! (silent, then reset). Every line must come back from the server exactly once.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// This package's test makes cargo build `coroner-bench` (a test in another package would not);
/// `coronerd` is built by the workspace's own tests and lies beside it.
fn coronerd() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_coroner-bench"));
    let path = bench.with_file_name("coronerd");
    assert!(path.exists(), "{} is not built; run `cargo build --bins` (or `cargo test --workspace`) first", path.display());
    path
}

#[test]
fn killed_server_and_cut_agents_lose_and_duplicate_nothing() {
    let out = Command::new(env!("CARGO_BIN_EXE_coroner-bench"))
        .args(["load", "--agents", "6", "--lines", "3000", "--rate", "1000", "--batch-lines", "200"])
        .args(["--kill-at", "0.25,0.6", "--down", "0.3", "--cut", "2", "--cut-at", "0.4", "--cut-for", "1.5"])
        .args(["--timeout", "240", "--json"])
        .env("CORONERD", coronerd())
        .output()
        .expect("run coroner-bench load");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let f: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("no JSON ({e}):\n{stdout}\n{stderr}"));
    assert!(out.status.success(), "the load run failed:\n{stdout}\n{stderr}");
    assert_eq!(f["lines_sent"], 18_000);
    assert_eq!(f["lost"], 0, "{f:#}");
    assert_eq!(f["duplicates"], 0, "{f:#}");
    assert_eq!(f["never_sent_but_held"], 0, "{f:#}");
    assert_eq!(f["lines_indexed"], 18_000, "{f:#}");
    assert_eq!(f["sql_lines"], 18_000, "the metastore's line count disagrees with the index: {f:#}");
    assert_eq!(f["lines_acknowledged"], 18_000, "{f:#}");
    assert_eq!(f["server_kills"], 2, "{f:#}");
    assert_eq!(f["agents_cut"], 2, "{f:#}");
    assert_eq!(f["exits_reported"], 6, "{f:#}");
    // The faults happened mid-stream: agents had to open new sessions and resend.
    assert!(f["sessions"].as_u64().unwrap() > 6, "no agent reconnected: {f:#}");
    assert!(f["lines_resent"].as_u64().unwrap() + f["lines_skipped_on_resume"].as_u64().unwrap() > 0, "{f:#}");
}

/// Runs `coroner-bench load --json` with `args`; the figures, after checking it exited cleanly.
fn load(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_coroner-bench"))
        .arg("load")
        .args(args)
        .args(["--timeout", "240", "--json"])
        .env("CORONERD", coronerd())
        .output()
        .expect("run coroner-bench load");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let f: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("no JSON ({e}):\n{stdout}\n{stderr}"));
    assert!(out.status.success(), "the load run {args:?} failed:\n{stdout}\n{stderr}");
    f
}

#[test]
fn burst_steady_and_failure_profiles_lose_and_duplicate_nothing() {
    // (profile, agents, lines each): the start-up burst at its real 200 lines, the steady
    // profile's 1 line/s for 3 s, the failure's 40-line traceback within 2 s.
    for (profile, agents, lines) in [("burst", 24, 200), ("steady", 24, 3), ("failure", 24, 40)] {
        let f = load(&["--profile", profile, "--agents", &agents.to_string(), "--lines", &lines.to_string()]);
        let sent = agents * lines;
        assert_eq!(f["profile"], profile);
        assert_eq!(f["lines_sent"], sent, "{f:#}");
        assert_eq!((f["lost"].as_u64(), f["duplicates"].as_u64()), (Some(0), Some(0)), "{profile}: {f:#}");
        assert_eq!(f["lines_indexed"], sent, "{profile}: {f:#}");
        assert_eq!(f["exits_reported"], agents, "{profile}: {f:#}");
        // The run measured what issue 22 asks for.
        assert!(f["fresh_samples"].as_u64().unwrap() > 0, "{profile}: no line was looked for after its ack: {f:#}");
        assert_eq!(f["fresh_not_found"], 0, "{profile}: an acknowledged line was not found by search: {f:#}");
        assert!(f["idle_kb_per_agent"].is_number() && f["absorbed_s"].as_f64().unwrap() > 0.0, "{f:#}");
    }
}

#[test]
fn coroner_ingest_streams_counts_every_open_log_stream_and_falls_to_zero() {
    let f = load(&["--profile", "steady", "--agents", "12", "--lines", "2"]);
    assert_eq!(f["server_streams_connected"], 12, "coroner_ingest_streams with 12 agents connected: {f:#}");
    assert_eq!(f["server_streams_after"], 0, "coroner_ingest_streams after every agent left: {f:#}");
}
