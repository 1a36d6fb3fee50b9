//! The real coronerd on free ports, real coroner-agents around a real multi-rank CPU job
//! (examples/ring_job.py) in which one rank fails, and the report read back over gRPC.

use crate::served::{free_port, Served as Server};
use coroner_tests::{binary, data_dir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn report(server: &Server, job: &str) -> serde_json::Value {
    let out = server.coroner(&["report", job, "--json"]);
    coroner_tests::assert_answered(&out);
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// Waits until the report's verdict is no longer `running`.
fn settled_report(server: &Server, job: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = report(server, job);
        if r["verdict"] != "running" || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ring_job() -> PathBuf {
    data_dir().join("../../examples/ring_job.py")
}

/// Runs `world` agents, one per rank, around the ring job; returns each agent's exit code.
fn run_job(server: &Server, job: &str, world: u32, fault: &str, fault_rank: u32, spool: &Path) -> Vec<Option<i32>> {
    start_job(server, job, world, fault, fault_rank, spool).into_iter().map(|mut c| c.wait().expect("agent exit").code()).collect()
}

/// Starts `world` agents, one per rank, around the ring job.
fn start_job(server: &Server, job: &str, world: u32, fault: &str, fault_rank: u32, spool: &Path) -> Vec<Child> {
    let port = u32::from(free_port()) + 100;
    let children = (0..world)
        .map(|rank| {
            Command::new(binary("coroner-agent"))
                .args(["run", "--job", job, "--server", &server.grpc_url, "--flush-timeout", "10"])
                .arg("--spool-dir")
                .arg(spool)
                .args(["--", "python3"])
                .arg(ring_job())
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("MASTER_PORT", port.to_string())
                .env("STEPS", "6")
                .env("STEP_SECONDS", "0.05")
                .env("COLLECTIVE_TIMEOUT", "3")
                .env("FAULT", fault)
                .env("FAULT_RANK", fault_rank.to_string())
                .env("FAULT_STEP", "2")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start coroner-agent")
        })
        .collect();
    children
}

#[test]
fn agents_around_a_failing_cpu_job_name_the_rank_that_died() {
    let server = Server::start();
    let spool = tempfile::tempdir().expect("tempdir");
    // A scheduler's script waits on the job before it starts, and branches on the exit status.
    let watcher = Command::new(binary("coroner"))
        .args(["--server", &server.grpc_url, "watch", "e2e-kill", "--until-done"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start watch");
    let codes = run_job(&server, "e2e-kill", 3, "kill", 1, spool.path());
    assert_eq!(codes[1], Some(137), "the agent exits as the shell would for SIGKILL: {codes:?}");
    assert!(codes.iter().all(|c| *c != Some(0)), "every rank fails after rank 1 dies: {codes:?}");
    let report = settled_report(&server, "e2e-kill");
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
    let server = Server::start();
    let spool = tempfile::tempdir().expect("tempdir");
    let mut agents = start_job(&server, "e2e-hang", 3, "hang", 2, spool.path());
    let mut hung = agents.remove(2);
    for mut a in agents {
        a.wait().expect("agent exit");
    }
    // The healthy ranks timed out and exited; the scheduler now cancels the job: SIGTERM to the
    // hung rank's agent, which forwards it to the child.
    let _ = Command::new("kill").args(["-TERM", &hung.id().to_string()]).status();
    assert_eq!(hung.wait().expect("agent exit").code(), Some(128 + 15));
    let report = settled_report(&server, "e2e-hang");
    assert_eq!(report["first_failure"]["rank"], 2, "{report:#}");
    assert_eq!(report["first_failure"]["class"], "hang", "{report:#}");
}

#[test]
fn an_imported_bundle_gets_the_same_diagnosis_as_offline_analysis() {
    let server = Server::start();
    for name in ["nccl2_oom_r1", "torchrun_oom_r1", "gloo8_hang_r5"] {
        let bundle = data_dir().join("corpus").join(name);
        let out = server.coroner(&["import", bundle.to_str().expect("utf-8 path"), "--job", name]);
        assert!(out.status.success(), "import {name}: {}", String::from_utf8_lossy(&out.stderr));
        let online = settled_report(&server, name);
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
        let after = settled_report(&server, name);
        let lines_after = after["ranks"].as_array().map(|r| r.iter().map(|x| x["lines"].as_u64().unwrap_or(0)).sum::<u64>());
        assert_eq!(lines_before, lines_after, "{name}: a second import added lines");
    }
    let search = server.coroner(&["search", "nccl2_oom_r1", "OutOfMemoryError", "--json"]);
    let hits: serde_json::Value = serde_json::from_slice(&search.stdout).expect("search JSON");
    assert!(hits.as_array().is_some_and(|h| !h.is_empty() && h.iter().all(|x| x["rank"] == 1)), "{hits:#}");
}
