//! The CLI's own smoke test. (Its presence also makes `cargo test` build the `coroner` binary that
//! the workspace integration tests run.)

#[test]
fn help_lists_the_commands() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_coroner")).arg("--help").output().expect("run coroner");
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["analyze", "import", "report", "jobs", "search"] {
        assert!(text.contains(cmd), "{cmd} missing from --help:\n{text}");
    }
}

/// `coroner analyze -` reads one log from standard input (issue 19): a pasted traceback.
#[test]
fn analyze_reads_a_log_from_standard_input() {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_coroner"))
        .args(["analyze", "--json", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run coroner");
    let traceback = "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    loss.backward()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
    child.stdin.take().expect("stdin").write_all(traceback.as_bytes()).expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1), "a failed job exits 1");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["job_id"], "stdin");
    assert_eq!(report["verdict"], "failed");
    assert_eq!(report["first_failure"]["class"], "cuda_oom");
    assert!(report["first_failure"]["rank"].is_null(), "no line says whose it is");
}

fn analyze_stdin(log: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_coroner"))
        .args(["analyze", "--json", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run coroner");
    child.stdin.take().expect("stdin").write_all(log.as_bytes()).expect("write");
    child.wait_with_output().expect("wait")
}

/// Issue 23: a script branches on the exit status, one code per verdict, 2 when coroner could
/// not answer; `--help` says which is which.
#[test]
fn analyze_exits_with_its_verdicts_code() {
    let verdict = |out: &std::process::Output| serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")["verdict"].clone();

    let clean = analyze_stdin("2026-11-30 08:58:51,398 INFO train: step 1 loss 1.0\n2026-11-30 08:58:52,398 INFO train: step 2 loss 0.9\n");
    assert_eq!((verdict(&clean), clean.status.code()), (serde_json::json!("succeeded"), Some(0)));

    let failed = analyze_stdin(
        "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nRuntimeError: CUDA error: an illegal memory access was encountered\n",
    );
    assert_eq!((verdict(&failed), failed.status.code()), (serde_json::json!("failed"), Some(1)));

    // A capture bundle records how processes ended; one with lines but no ends and no failure
    // supports no verdict.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("rank0.lines.jsonl"), "{\"ts_ns\": 1, \"stream\": \"stdout\", \"line\": \"step 1 loss 1.0\"}\n").expect("write");
    let partial = std::process::Command::new(env!("CARGO_BIN_EXE_coroner")).args(["analyze", "--json"]).arg(dir.path()).output().expect("run");
    assert_eq!((verdict(&partial), partial.status.code()), (serde_json::json!("unknown"), Some(3)), "{}", String::from_utf8_lossy(&partial.stderr));

    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_coroner")).args(["analyze", "/no/such/log"]).output().expect("run");
    assert_eq!(missing.status.code(), Some(2));

    let help = std::process::Command::new(env!("CARGO_BIN_EXE_coroner")).args(["analyze", "--help"]).output().expect("run");
    let help = String::from_utf8_lossy(&help.stdout);
    for line in ["0  the job succeeded", "1  the job failed", "2  coroner could not answer", "3  unknown", "4  the job is still running"] {
        assert!(help.contains(line), "{line} missing from analyze --help:\n{help}");
    }
}
