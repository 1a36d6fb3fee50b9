//! Hardware lines in a bundle's `host/` folder are evidence: an Xid naming a rank's process
//! turns that rank's hang into a GPU fault, and one naming no rank of the job changes nothing.

use coroner_tests::{binary, data_dir};
use std::path::Path;
use std::process::Command;

/// A copy of `bundle` with a kernel log in its `host/` folder.
fn with_kernel_log(bundle: &str, dmesg: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_dir(&data_dir().join("corpus").join(bundle), dir.path());
    std::fs::create_dir_all(dir.path().join("host")).expect("host folder");
    std::fs::write(dir.path().join("host/dmesg-tail.txt"), dmesg).expect("write the kernel log");
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read the bundle") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

fn headline(bundle: &Path) -> (Option<u64>, String, serde_json::Value) {
    let out = Command::new(binary("coroner")).args(["analyze", "--json"]).arg(bundle).output().expect("run coroner analyze");
    coroner_tests::assert_answered(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let first = report["first_failure"].clone();
    (first["rank"].as_u64(), first["class"].as_str().unwrap_or("").to_string(), first)
}

/// The pid rank 1 printed in its NCCL init line.
fn pid_of_rank(bundle: &str, rank: u32) -> u32 {
    let log = std::fs::read_to_string(data_dir().join("corpus").join(bundle).join(format!("rank{rank}.stdout.log"))).expect("rank log");
    let line = log.lines().find(|l| l.contains("NCCL INFO") && l.contains("Init COMPLETE")).expect("an NCCL init line");
    line.split(':').nth(1).and_then(|p| p.parse().ok()).expect("host:pid:tid prefix")
}

#[test]
fn an_xid_naming_the_stuck_ranks_process_makes_the_hang_a_gpu_fault() {
    let pid = pid_of_rank("nccl2_hang_r1", 1);
    let dir = with_kernel_log(
        "nccl2_hang_r1",
        &format!("[ 8120.000001] eth0: link up\n[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, name=python, GPU has fallen off the bus.\n"),
    );
    let (rank, class, first) = headline(dir.path());
    assert_eq!((rank, class.as_str()), (Some(1), "gpu_hardware"));
    let evidence = first["evidence"].as_array().expect("evidence");
    assert!(evidence.iter().any(|e| e["line"].as_str().is_some_and(|l| l.contains("Xid")) && e["rank"] == 1), "{evidence:#?}");
}

#[test]
fn an_xid_for_a_process_outside_the_job_changes_nothing() {
    let dir = with_kernel_log("nccl2_hang_r1", "[ 8123.456789] NVRM: Xid (PCI:0000:99:00): 79, pid=999999, name=other, GPU has fallen off the bus.\n");
    let (rank, class, _) = headline(dir.path());
    assert_eq!((rank, class.as_str()), (Some(1), "hang"));
}
