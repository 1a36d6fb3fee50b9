//! The real coronerd binary, real coroner-agents around a real multi-rank CPU job
//! (examples/ring_job.py) in which one rank fails, and the report read back over gRPC; and a
//! bundle imported into an in-process server diagnosed as offline analysis does.

use crate::ring::Ring;
use crate::served::{Served, TestServer};
use coroner_tests::{binary, data_dir};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a report may stay `running` once every agent has exited.
const SETTLE: Duration = Duration::from_secs(10);

#[test]
fn agents_around_a_failing_cpu_job_name_the_rank_that_died() {
    let server = Served::start();
    let dir = tempfile::tempdir().expect("tempdir");
    // A scheduler's script waits on the job before it starts, and branches on the exit status.
    let watcher = Command::new(binary("coroner"))
        .args(["--server", &server.grpc_url, "watch", "e2e-kill", "--until-done"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start watch");
    let ring = Ring { server: &server.grpc_url, job: "e2e-kill", world: 3, fault: "kill", fault_rank: 1 };
    let codes: Vec<Option<i32>> = ring.start(dir.path()).into_iter().map(|mut c| c.wait().expect("agent exit").code()).collect();
    assert_eq!(codes[1], Some(137), "the agent exits as the shell would for SIGKILL: {codes:?}");
    assert!(codes.iter().all(|c| *c != Some(0)), "every rank fails after rank 1 dies: {codes:?}");
    let report = server.settled_report("e2e-kill", SETTLE);
    assert_eq!(report["verdict"], "failed", "{report:#}");
    assert_eq!(report["first_failure"]["rank"], 1, "{report:#}");
    assert_eq!(report["first_failure"]["class"], "killed", "{report:#}");
    let watched = watcher.wait_with_output().expect("watch exit");
    assert_eq!(watched.status.code(), Some(1), "watch --until-done exits 1 for a failed job: {}", String::from_utf8_lossy(&watched.stderr));
    let cascade = report["cascade"].as_array().expect("cascade");
    assert_eq!(cascade.len(), 2, "both other ranks are in the cascade: {report:#}");
    // Clock samples reached the server: offsets come from NTP-style exchanges.
    assert!(report["ranks"].as_array().expect("ranks").iter().all(|r| r["clock"]["source"] == "ntp" || r["clock"]["source"] == "steps"));
}

#[test]
fn agents_around_a_hung_rank_name_the_silent_one() {
    let server = Served::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = Ring { server: &server.grpc_url, job: "e2e-hang", world: 3, fault: "hang", fault_rank: 2 };
    let mut agents = ring.start(dir.path());
    let mut hung = agents.remove(2);
    for mut a in agents {
        a.wait().expect("agent exit");
    }
    // The healthy ranks timed out and exited; the scheduler now cancels the job: SIGTERM to the
    // hung rank's agent, which forwards it to the child.
    let _ = Command::new("kill").args(["-TERM", &hung.id().to_string()]).status();
    assert_eq!(hung.wait().expect("agent exit").code(), Some(128 + 15));
    let report = server.settled_report("e2e-hang", SETTLE);
    assert_eq!(report["first_failure"]["rank"], 2, "{report:#}");
    assert_eq!(report["first_failure"]["class"], "hang", "{report:#}");
}

#[test]
fn an_imported_bundle_gets_the_same_diagnosis_as_offline_analysis() {
    let server = TestServer::start();
    for name in ["nccl2_oom_r1", "torchrun_oom_r1", "gloo8_hang_r5"] {
        let bundle = data_dir().join("corpus").join(name);
        let out = server.coroner(&["import", bundle.to_str().expect("utf-8 path"), "--job", name]);
        assert!(out.status.success(), "import {name}: {}", String::from_utf8_lossy(&out.stderr));
        let online = server.settled_report(name, SETTLE);
        let offline_out = Command::new(binary("coroner")).args(["analyze", "--json"]).arg(&bundle).output().expect("analyze");
        let offline: serde_json::Value = serde_json::from_slice(&offline_out.stdout).expect("json");
        for field in ["rank", "class", "time"] {
            assert_eq!(online["first_failure"][field], offline["first_failure"][field], "{name}: {field}");
        }
        assert_eq!(online["verdict"], offline["verdict"], "{name}");
        // Importing again is idempotent: the server deduplicates by (rank, stream, sequence).
        let again = server.coroner(&["import", bundle.to_str().expect("utf-8 path"), "--job", name]);
        assert!(again.status.success());
        let lines_before = online["ranks"].as_array().map(|r| r.iter().map(|x| x["lines"].as_u64().unwrap_or(0)).sum::<u64>());
        let after = server.settled_report(name, SETTLE);
        let lines_after = after["ranks"].as_array().map(|r| r.iter().map(|x| x["lines"].as_u64().unwrap_or(0)).sum::<u64>());
        assert_eq!(lines_before, lines_after, "{name}: a second import added lines");
    }
    let search = server.coroner(&["search", "nccl2_oom_r1", "OutOfMemoryError", "--json"]);
    let hits: serde_json::Value = serde_json::from_slice(&search.stdout).expect("search JSON");
    assert!(hits["hits"].as_array().is_some_and(|h| !h.is_empty() && h.iter().all(|x| x["rank"] == 1)), "{hits:#}");
    assert_eq!(hits["total"].as_u64(), hits["hits"].as_array().map(|h| h.len() as u64), "{hits:#}");
}
