//! The Python client (`python/client`, docs/CLIENT.md) against a real coronerd: its stubs are
//! generated from `proto/` by the package's own build step (`build_stubs.py`), then its pytest
//! suite lists jobs a page at a time, reads a failed job's report as dataclasses, watches a job
//! from before its first line until it fails, lists the suspect host, sees typed errors, and runs
//! the drain hook's dry run.
//!
//! The server holds two failed jobs whose culprit (rank 0, a segfault) ran on one host, so that
//! host is flagged. Without python3 and its packages (grpcio, grpcio-tools, protobuf, pytest) the
//! test says SKIPPED on stderr and passes; with `CI=true` (`.ci/run` installs them) it fails.

use crate::served::TestServer;
use coroner_tests::{binary, data_dir};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const SUSPECT_HOST: &str = "node-bad";
const BUNDLE: &str = "nccl2_segv_r0";
const HOST_MAP: &str = "0=node-bad,1=node-ok";

/// Whether python3 can build and test the client; `false` (said loudly) when not and not on CI.
fn python_ready() -> bool {
    let probe = Command::new("python3").args(["-c", "import grpc, grpc_tools, google.protobuf, pytest"]).output();
    let missing = match probe {
        Ok(out) if out.status.success() => return true,
        Ok(out) => String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or_default().to_string(),
        Err(e) => format!("no python3: {e}"),
    };
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let install = "python3 -m pip install grpcio==1.85.1 grpcio-tools==1.85.1 protobuf==7.36.2 pytest==9.2.0 (.ci/run does it)";
    assert!(!ci, "the Python client's test must run in CI but {missing}; {install}");
    // Straight to stderr, past the harness's capture: a passing test's output is not shown.
    let _ = writeln!(std::io::stderr(), "SKIPPED the Python client test: {missing}; {install}");
    false
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_python_client_lists_reports_watches_and_drains_against_coronerd() {
    if !python_ready() {
        return;
    }
    let served = TestServer::start();
    let bundle = data_dir().join("corpus").join(BUNDLE);
    let bundle = bundle.to_str().expect("utf-8 path");
    for job in ["py-segv-1", "py-segv-2"] {
        let out = served.coroner(&["import", bundle, "--job", job, "--host-map", HOST_MAP]);
        assert!(out.status.success(), "import {job}: {}", String::from_utf8_lossy(&out.stderr));
        let report = served.settled_report(job, Duration::from_secs(20));
        assert_eq!((report["verdict"].as_str(), report["first_failure"]["rank"].as_u64()), (Some("failed"), Some(0)), "{report}");
    }
    // The history is written with the failed report; wait until the host is flagged.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = served.coroner(&["suspects", "--json"]);
        let flagged: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if flagged.as_array().is_some_and(|a| a.iter().any(|s| s["host"] == SUSPECT_HOST && s["flagged"] == true)) {
            break;
        }
        assert!(Instant::now() < deadline, "{SUSPECT_HOST} was never flagged: {flagged}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // The package as pip would build it: the sources and stubs generated from proto/.
    let build = tempfile::tempdir().expect("tempdir");
    let client_dir = repo().join("python").join("client");
    let out = Command::new("python3").arg(client_dir.join("build_stubs.py")).arg(build.path()).output().expect("run build_stubs.py");
    assert!(out.status.success(), "build_stubs.py: {}", String::from_utf8_lossy(&out.stderr));

    let out = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(client_dir.join("tests"))
        .env("PYTHONPATH", build.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("CORONER_TEST_ADDRESS", &served.grpc_url)
        .env("CORONER_TEST_FAILED_JOB", "py-segv-1")
        .env("CORONER_TEST_SUSPECT_HOST", SUSPECT_HOST)
        .env("CORONER_TEST_JOBS", "2")
        .env("CORONER_TEST_BUNDLE", bundle)
        .env("CORONER_TEST_HOST_MAP", HOST_MAP)
        .env("CORONER_BIN", binary("coroner"))
        .env_remove("CORONER_TOKEN")
        .env_remove("CORONER_SERVER")
        .env_remove("CORONER_TLS_CA")
        .output()
        .expect("run pytest");
    let report = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the Python client's tests failed:\n{report}");
    // Every test ran against the server: none skipped for want of it.
    assert!(!report.contains("skipped"), "{report}");
}
