//! Junk in bundle folders: the analysis (and an import) runs on what is valid and says what it
//! skipped.

use super::output_within;
use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
use coroner_tests::{binary, data_dir};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().expect("mkfifo").success());
}

/// A copy of a corpus bundle with junk of every kind beside its real files.
fn junk_bundle(root: &Path, outside: &Path) -> std::path::PathBuf {
    let b = root.join("bundle");
    copy_dir(&data_dir().join("corpus/nccl2_oom_r1"), &b);
    std::fs::write(b.join("notes.txt"), "what the operator thought\n").expect("write");
    std::fs::write(b.join("junk.bin"), (0..4096u32).map(|i| (i * 7 % 256) as u8).collect::<Vec<u8>>()).expect("write");
    std::fs::create_dir(b.join("rank2.stdout.log")).expect("a folder named like a log");
    mkfifo(&b.join("rank3.stderr.log"));
    std::fs::write(outside.join("secret.log"), "2026-11-30 08:58:51,398 ERROR OUTSIDE SECRET LINE\n").expect("write");
    std::os::unix::fs::symlink(outside.join("secret.log"), b.join("rank4.stdout.log")).expect("symlink");
    std::fs::write(b.join("rank5.stderr.log"), b"").expect("empty");
    std::os::unix::fs::symlink("/etc/passwd", b.join("snapshots/evil.txt")).expect("symlink");
    std::fs::create_dir(b.join("snapshots/rank0.folder.txt")).expect("folder");
    std::fs::write(b.join("snapshots/rank0.garbage.txt"), [0xffu8, 0, 0x80, 0x13, 0x37].repeat(100)).expect("write");
    std::fs::write(b.join("snapshots/rank1.empty.txt"), b"").expect("write");
    mkfifo(&b.join("flight_recorder/nccl_trace_rank_1"));
    b
}

/// Unknown files, binary garbage, empty files, folders named like files, links out of the folder
/// and FIFOs in a bundle: each is skipped with a warning (none blocks the reader), and the
/// diagnosis is the one the clean bundle gets.
#[test]
fn junk_in_a_bundle_folder_is_skipped_with_warnings_and_the_rest_analyzed() {
    let (root, outside) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let bundle = junk_bundle(root.path(), outside.path());
    let mut cmd = Command::new(binary("coroner"));
    cmd.args(["analyze", "--json"]).arg(&bundle);
    let out = output_within(cmd, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    coroner_tests::assert_answered(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!((report["first_failure"]["rank"].as_u64(), report["first_failure"]["class"].as_str()), (Some(1), Some("cuda_oom")), "{err}");
    for warned in [
        "ignored 2 entries a capture bundle does not hold: junk.bin, notes.txt",
        "rank2.stdout.log: a folder where a file was expected",
        "rank3.stderr.log: not a regular file",
        "rank4.stdout.log: a symbolic link to",
        "rank5.stderr.log is empty",
        "snapshots/evil.txt: a symbolic link to /etc/passwd, outside",
        "snapshots/rank0.folder.txt: a folder, not a file",
        "flight_recorder/nccl_trace_rank_1: not a regular file",
    ] {
        assert!(err.contains(warned), "no warning {warned:?} in:\n{err}");
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains("OUTSIDE SECRET"), "a linked file outside the bundle was read");
    let names: Vec<&str> = report["snapshots"].as_array().expect("snapshots").iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(names.contains(&"snapshots/rank1.stack.txt") && names.contains(&"snapshots/rank0.garbage.txt"), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("evil") || n.contains("folder")), "{names:?}");
}

/// `coroner import` of the same junk bundle: the valid lines and snapshots reach the server, a
/// snapshot the server refuses (its name) is a warning, and nothing outside the folder is sent.
#[test]
fn importing_a_junk_bundle_sends_only_what_is_inside_and_valid() {
    let (root, outside) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let bundle = junk_bundle(root.path(), outside.path());
    std::fs::write(bundle.join("snapshots/rank1.bad\nname.txt"), b"a name with a newline\n").expect("write");
    let server = TestServer::start();
    let mut cmd = Command::new(binary("coroner"));
    cmd.args(["--server", &server.grpc_url, "import"]).arg(&bundle).args(["--job", "junk-import"]);
    let out = output_within(cmd, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("not imported") && err.contains("not a safe relative name"), "{err}");
    runtime().block_on(async {
        let mut q = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        let listed =
            q.list_snapshots(v1::ListSnapshotsRequest { job_id: "junk-import".into(), ..Default::default() }).await.expect("list").into_inner().snapshots;
        let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"snapshots/rank1.stack.txt"), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("evil") || n.contains("bad")), "{names:?}");
        let secret = q.search(v1::SearchRequest { job_id: "junk-import".into(), query: "SECRET".into(), ..Default::default() }).await.expect("search");
        assert_eq!(secret.into_inner().total, 0, "a linked file outside the bundle was imported");
        let oom = q.search(v1::SearchRequest { job_id: "junk-import".into(), query: "OutOfMemoryError".into(), ..Default::default() }).await.expect("search");
        assert!(oom.into_inner().total > 0);
    });
}

/// A bundle stating four billion ranks is not believed (the analysis goes over every rank below
/// the world size): a note, and the report of the ranks that are there, at once.
#[test]
fn an_absurd_world_size_is_a_note_not_a_hang() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("meta.json"), r#"{"world_size": 4000000000}"#).expect("write");
    std::fs::write(
        dir.path().join("rank0.lines.jsonl"),
        "{\"ts_ns\": 1, \"stream\": \"stderr\", \"line\": \"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\"}\n",
    )
    .expect("write");
    let mut cmd = Command::new(binary("coroner"));
    cmd.args(["analyze", "--json"]).arg(dir.path());
    let out = output_within(cmd, Duration::from_secs(30));
    coroner_tests::assert_answered(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let notes = report["notes"].to_string();
    assert!(notes.contains("world size of 4000000000 was ignored"), "{notes}");
    assert_eq!(report["ranks"].as_array().map(Vec::len), Some(1), "{report:#}");
}
