//! Bad input gets a clear one-line error or a warning, and the rest is still analyzed.
//!
//! - `agent.rs`: the agent with a full spool and no server (routine lines dropped first, the job
//!   never blocked, the count in the report), two agents claiming one rank at once, long lines,
//!   invalid UTF-8 and NULs through a real agent;
//! - `wire.rs`: garbage bytes on gRPC, ranks beyond the world size, 10 MB lines over the wire and
//!   OTLP, snapshot names that climb out of a folder;
//! - `bundle.rs`: junk in bundle folders (unknown and empty files, binary garbage, folders named
//!   like files, links out of the folder, FIFOs, an absurd world size).

mod agent;
mod bundle;
mod wire;

use coroner_tests::binary;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` to its end, failing the test when it takes longer than `limit` (a hang).
pub fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the command");
    let (mut out, mut err) = (child.stdout.take().expect("stdout"), child.stderr.take().expect("stderr"));
    let read_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        v
    });
    let read_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut v);
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the command") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: read_out.join().expect("stdout reader"), stderr: read_err.join().expect("stderr reader") }
}

fn analyze(args: &[&std::path::Path]) -> std::process::Output {
    Command::new(binary("coroner")).arg("analyze").args(args).output().expect("run coroner")
}

#[test]
fn a_missing_path_is_a_one_line_error() {
    let out = analyze(&[std::path::Path::new("/nonexistent/coroner-test")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/coroner-test") && err.contains("does not exist"), "{err}");
}

#[test]
fn an_empty_folder_says_what_was_expected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = analyze(&[dir.path()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no log lines"), "{err}");
}

#[test]
fn binary_junk_huge_lines_and_invalid_utf8_are_survived() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("core.bin"), vec![0u8; 10_000]).expect("write");
    let mut rank0 = b"2026-11-30 08:58:51,398 INFO [rank0] train: step 1 loss 1.0\n".to_vec();
    rank0.extend(vec![b'x'; 5 << 20]);
    rank0.extend(b"\n\xff\xfe not utf-8 \xc3\x28\n");
    std::fs::write(dir.path().join("rank0.log"), rank0).expect("write");
    std::fs::write(
        dir.path().join("rank1.log"),
        "2026-11-30 08:58:51,398 INFO [rank1] train: step 1 loss 1.0\nTraceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n    f()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
    )
    .expect("write");
    let out = Command::new(binary("coroner")).args(["analyze", "--json"]).arg(dir.path()).output().expect("run coroner");
    coroner_tests::assert_answered(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("core.bin") && err.contains("not a text log"), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["first_failure"]["rank"], 1);
    assert_eq!(report["first_failure"]["class"], "cuda_oom");
}

#[test]
fn a_combined_log_is_split_by_rank_prefixes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("job.log");
    std::fs::write(
        &log,
        "[default0]:2026-11-30 09:03:40,553 INFO [rank0] train: step 0 loss 1.3\n\
         [default1]:2026-11-30 09:03:40,536 INFO [rank1] train: step 0 loss 1.3\n\
         [default1]:[rank1]: Traceback (most recent call last):\n\
         [default0]:2026-11-30 09:03:40,557 INFO [rank0] train: step 1 loss 1.1\n\
         [default1]:[rank1]:   File \"/opt/job/worker.py\", line 90, in main\n\
         [default1]:[rank1]: RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x20 and 16x64)\n",
    )
    .expect("write");
    let out = Command::new(binary("coroner")).args(["analyze", "--json"]).arg(&log).output().expect("run");
    coroner_tests::assert_answered(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["first_failure"]["rank"], 1);
    assert_eq!(report["first_failure"]["class"], "shape_mismatch");
}
