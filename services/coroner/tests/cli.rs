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
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["job_id"], "stdin");
    assert_eq!(report["verdict"], "failed");
    assert_eq!(report["first_failure"]["class"], "cuda_oom");
    assert!(report["first_failure"]["rank"].is_null(), "no line says whose it is");
}
