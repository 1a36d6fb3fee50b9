//! A 2-node torchrun job on one machine, as a cluster runs it: one launcher per node, each under
//! its own per-node coroner-agent, the rendezvous assigning the node ranks in arrival order (no
//! `--node-rank`), 2 workers per node (examples/ring_job.py), one worker failing. CI has no
//! PyTorch, so the launcher is tests/launchers/torchrun_standin.py, which reproduces torchrun's
//! output, environment and rendezvous (its header cites the sources). The real torchrun run on a
//! GPU host is recorded in docs/LAUNCHERS.md.

use crate::served::TestServer;
use coroner_tests::{binary, data_dir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn repo() -> PathBuf {
    data_dir().join("../..")
}

/// One node: `coroner-agent run --host <host> -- torchrun-stand-in ... ring_job.py`, with the
/// test's own launcher identity removed from the environment.
fn node(server: &str, job: &str, host: &str, dir: &Path, max_restarts: u32, fault: &[(&str, &str)]) -> Child {
    let mut c = Command::new(binary("coroner-agent"));
    c.args(["run", "--job", job, "--server", server, "--host", host, "--launcher", "torchrun", "--flush-timeout", "10"])
        .arg("--spool-dir")
        .arg(dir.join(format!("spool-{host}")))
        .args(["--", "python3"])
        .arg(repo().join("tests/launchers/torchrun_standin.py"))
        .args(["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-id", job, "--tee", "3"])
        .arg("--max-restarts")
        .arg(max_restarts.to_string())
        .arg("--rdzv-endpoint")
        .arg(dir.join("rdzv"))
        .arg(repo().join("examples/ring_job.py"));
    for (name, _) in std::env::vars() {
        if ["SLURM", "CORONER_", "TORCHELASTIC_", "OMPI_", "PMI", "PET_"].iter().any(|p| name.starts_with(p))
            || ["RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK"].contains(&name.as_str())
        {
            c.env_remove(name);
        }
    }
    // torchrun shows its rendezvous result at INFO (its default level is WARNING).
    c.env("LOGLEVEL", "INFO").env("RING_DIR", dir.join("ring")).env("STEPS", "6").env("STEP_SECONDS", "0.05").env("COLLECTIVE_TIMEOUT", "3");
    for (k, v) in fault {
        c.env(k, v);
    }
    c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start coroner-agent around the torchrun stand-in")
}

/// Every worker line of the ring job names its own rank (`[rankN] train: ...`): each must be
/// filed under that rank. Answers the ranks the lines were filed under.
fn lines_sit_under_their_global_ranks(server: &TestServer, job: &str) -> std::collections::BTreeSet<u64> {
    let out = server.coroner(&["search", job, "train", "--limit", "1000", "--json"]);
    let found: serde_json::Value = serde_json::from_slice(&out.stdout).expect("search JSON");
    let hits = found["hits"].as_array().expect("a list of hits");
    assert!(hits.len() >= 4 * 3, "every rank's progress lines: {hits:#?}");
    for h in hits {
        let line = h["line"].as_str().unwrap_or_default();
        let rank = h["rank"].as_u64().unwrap_or(u64::MAX);
        assert!(line.contains(&format!("[rank{rank}] train")), "a line filed under rank {rank}: {line}");
    }
    hits.iter().filter_map(|h| h["rank"].as_u64()).collect()
}

fn world_in_jobs_list(server: &TestServer, job: &str) -> Option<u64> {
    let out = server.coroner(&["jobs", "--json"]);
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("jobs JSON");
    jobs.as_array()?.iter().find(|j| j["job_id"] == job).and_then(|j| j["ranks"].as_u64())
}

#[test]
fn two_torchrun_nodes_without_node_ranks_file_every_line_under_its_global_rank() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let job = "twonode-1";
    let fault = [("FAULT", "exception"), ("FAULT_RANK", "3"), ("FAULT_STEP", "2")];
    let nodes: Vec<Child> = ["node-a", "node-b"].iter().map(|host| node(&server.grpc_url, job, host, dir.path(), 0, &fault)).collect();
    for mut n in nodes {
        let status = n.wait().expect("agent exit");
        assert_eq!(status.code(), Some(1), "each launcher fails (its own worker, or its peer's)");
    }
    let r = server.report_until(job, "both nodes' lines and ends", |r| r["verdict"] == "failed" && r["first_failure"]["rank"].is_u64());
    assert_eq!(r["first_failure"]["rank"], 3, "global rank 3 raised (local rank 1 of the node the rendezvous made node 1): {r:#}");
    assert_eq!(lines_sit_under_their_global_ranks(&server, job), (0..4).collect(), "lines of all four global ranks");
    assert_eq!(world_in_jobs_list(&server, job), Some(4), "coroner jobs shows the world size torchrun stated");
}

#[test]
fn a_restart_that_recovers_shows_both_attempts_in_the_report() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let job = "twonode-restart-1";
    // Global rank 3 raises in attempt 0 only; torchrun (--max-restarts 1) restarts every worker.
    let fault = [("FAULT", "exception"), ("FAULT_RANK", "3"), ("FAULT_STEP", "2"), ("FAULT_ATTEMPT", "0")];
    let nodes: Vec<Child> = ["node-a", "node-b"].iter().map(|host| node(&server.grpc_url, job, host, dir.path(), 1, &fault)).collect();
    for mut n in nodes {
        let status = n.wait().expect("agent exit");
        assert_eq!(status.code(), Some(0), "the restarted workers ran to the end");
    }
    let r = server.report_until(job, "both attempts", |r| r["attempts"].as_array().is_some_and(|a| a.len() == 2) && r["verdict"] != "running");
    assert_eq!(r["verdict"], "succeeded", "the last attempt's verdict: {r:#}");
    let attempts = r["attempts"].as_array().expect("attempts");
    assert_eq!((attempts[0]["attempt"].as_u64(), attempts[0]["outcome"].as_str()), (Some(0), Some("failed_first")), "{r:#}");
    assert_eq!(attempts[0]["failed_rank"], 3, "{r:#}");
    assert_eq!((attempts[1]["attempt"].as_u64(), attempts[1]["outcome"].as_str()), (Some(1), Some("recovered")), "{r:#}");
    assert_eq!(r["first_failure"]["rank"], 3, "the job's first failure is attempt 0's: {r:#}");
    let text = server.coroner(&["report", job]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with(&format!("SUCCEEDED: job {job} - recovered in attempt 1; attempt 0 failed first: rank 3")), "{text}");
    assert_eq!(lines_sit_under_their_global_ranks(&server, job), (0..4).collect(), "both attempts' lines under their global ranks");
}
