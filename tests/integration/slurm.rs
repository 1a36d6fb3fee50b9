//! The Slurm recipe of docs/SLURM.md under a fake Slurm: each task gets the variables srun gives
//! it (SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID,
//! SLURMD_NODENAME, and SLURM_RESTART_COUNT after a requeue) and runs `coroner-agent run --
//! python3 examples/ring_job.py` with the real agent binary against a real coronerd; one task
//! fails. The report names the job `<job id>_<step>`, the failing task's rank and its node, and
//! notes the restart. Then deploy/slurm/epilog.sh ships what an agent left in its spool while
//! coronerd was away, and keeps it (exiting 0, so Slurm drains nothing) while coronerd still is.

use crate::served::Served as Server;
use coroner_tests::{binary, data_dir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    data_dir().join("../..")
}

/// The agent as srun starts it for one task: the test's own launcher identity removed, the
/// task's SLURM_* variables set.
fn srun_task(server: &str, spool: &Path, slurm: &[(&str, String)], command: &[&str]) -> Command {
    let mut c = Command::new(binary("coroner-agent"));
    c.args(["run", "--"]).args(command);
    for (name, _) in std::env::vars() {
        if ["SLURM", "CORONER_", "TORCHELASTIC_", "OMPI_", "PMI", "PET_"].iter().any(|p| name.starts_with(p))
            || ["RANK", "LOCAL_RANK", "WORLD_SIZE"].contains(&name.as_str())
        {
            c.env_remove(name);
        }
    }
    c.env("CORONER_SERVER", server).env("CORONER_SPOOL_DIR", spool).env("CORONER_LINGER", "10s");
    for (k, v) in slurm {
        c.env(k, v);
    }
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

fn slurm_env(job: &str, procid: u32, ntasks: u32, node: &str, restart: u32) -> Vec<(&'static str, String)> {
    vec![
        ("SLURM_JOB_ID", job.to_string()),
        ("SLURM_STEP_ID", "0".to_string()),
        ("SLURM_PROCID", procid.to_string()),
        ("SLURM_LOCALID", "0".to_string()),
        ("SLURM_NTASKS", ntasks.to_string()),
        ("SLURM_NODEID", procid.to_string()),
        ("SLURMD_NODENAME", node.to_string()),
        ("SLURM_RESTART_COUNT", restart.to_string()),
    ]
}

fn notes(report: &serde_json::Value) -> Vec<String> {
    report["notes"].as_array().map(|a| a.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

#[test]
fn srun_tasks_under_the_agent_report_the_slurm_job_the_failing_rank_and_its_node() {
    let server = Server::start();
    let spool = tempfile::tempdir().expect("tempdir");
    let ring = repo().join("examples/ring_job.py");
    let ring = ring.to_str().expect("utf-8 path");
    // The ranks meet through files in RING_DIR (ports the kernel picks), not a guessed port.
    let ring_dir = tempfile::tempdir().expect("tempdir");
    // A requeued job (SLURM_RESTART_COUNT=1) of two tasks on two nodes; task 1 raises at step 2.
    let tasks: Vec<_> = [(0, "node-a"), (1, "node-b")]
        .into_iter()
        .map(|(procid, node)| {
            srun_task(&server.grpc_url, spool.path(), &slurm_env("4242", procid, 2, node, 1), &["python3", ring])
                .env("RING_DIR", ring_dir.path())
                .env("STEPS", "6")
                .env("STEP_SECONDS", "0.05")
                .env("COLLECTIVE_TIMEOUT", "3")
                .env("FAULT", "exception")
                .env("FAULT_RANK", "1")
                .env("FAULT_STEP", "2")
                .spawn()
                .expect("start coroner-agent")
        })
        .collect();
    let outs: Vec<Output> = tasks.into_iter().map(|t| t.wait_with_output().expect("agent exit")).collect();
    let codes: Vec<_> = outs.iter().map(|o| o.status.code()).collect();
    assert_eq!(codes[1], Some(1), "the task's own status (Python's 1 for an exception): {codes:?}");
    assert!(codes[0].is_some_and(|c| c != 0), "task 0 fails when its peer is gone: {codes:?}");
    for o in &outs {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("no job id"), "the agent found the job in SLURM_*: {err}");
    }

    let r = server.report_until("4242_0", "the job's report settles", |r| r["verdict"] != "running" && r["ranks"].as_array().is_some_and(|a| a.len() == 2));
    assert_eq!(r["verdict"], "failed", "{r:#}");
    assert_eq!(r["first_failure"]["rank"], 1, "the task that raised (SLURM_PROCID 1): {r:#}");
    assert_eq!(r["first_failure"]["host"], "node-b", "the node is SLURMD_NODENAME: {r:#}");
    let notes = notes(&r);
    for rank in [0, 1] {
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with(&format!("rank {rank}'s agent")) && n.contains("restart 1 of job 4242_0") && n.contains("SLURM_RESTART_COUNT=1")),
            "each task's agent notes the requeue: {notes:?}"
        );
    }
    let jobs = server.coroner(&["jobs"]);
    assert!(String::from_utf8_lossy(&jobs.stdout).contains("4242_0"), "coroner jobs lists the step as a job");
}

#[test]
fn the_epilog_ships_what_a_task_left_in_its_spool_and_never_fails_the_node() {
    let server = Server::start();
    let spool = tempfile::tempdir().expect("tempdir");
    // coronerd is away for the whole task: the agent leaves its lines and the end in the spool.
    // Port 1 (tcpmux): reserved, and nothing listens there on a test machine.
    let away = "http://127.0.0.1:1".to_string();
    let out =
        srun_task(&away, spool.path(), &slurm_env("4343", 0, 1, "node-c", 0), &["sh", "-c", "echo epilog-marker one; echo epilog-marker two >&2; exit 3"])
            .output()
            .expect("run coroner-agent");
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let spools = |dir: &Path| -> usize {
        let key = dir.join("4343_0").join("rank-0");
        std::fs::read_dir(&key).map(|d| d.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "spool")).count()).unwrap_or(0)
    };
    assert_eq!(spools(spool.path()), 1, "the agent left its spool");

    let epilog = |server_url: &str| {
        Command::new("bash")
            .arg(repo().join("deploy/slurm/epilog.sh"))
            .env("CORONER_SLURM_CONF", "/nonexistent/slurm.env")
            .env("CORONER_SERVER", server_url)
            .env("CORONER_SPOOL_DIR", spool.path())
            .env("CORONER_AGENT", binary("coroner-agent"))
            .env("CORONER_SHIP_TIMEOUT", "30")
            .env("SLURM_JOB_ID", "4343")
            .output()
            .expect("run epilog.sh")
    };
    // Still away: the epilog says so, keeps the spool, and exits 0 (a failing epilog drains the node).
    let kept = epilog(&away);
    assert_eq!(kept.status.code(), Some(0), "{}", String::from_utf8_lossy(&kept.stderr));
    assert!(String::from_utf8_lossy(&kept.stderr).contains("were not sent"), "{}", String::from_utf8_lossy(&kept.stderr));
    assert_eq!(spools(spool.path()), 1, "an undelivered spool stays for the next epilog");

    let shipped = epilog(&server.grpc_url);
    assert_eq!(shipped.status.code(), Some(0), "{}", String::from_utf8_lossy(&shipped.stderr));
    assert_eq!(spools(spool.path()), 0, "a delivered spool is removed");
    let r = server.report_until("4343_0", "the spooled task reaches coronerd", |r| {
        r["ranks"].as_array().is_some_and(|a| a.iter().any(|x| x["rank"] == 0 && x["lines"].as_u64() == Some(2) && x["ended"] == "exited 3"))
    });
    assert_eq!(r["ranks"][0]["host"], "node-c", "{r:#}");
    let hits = server.coroner(&["search", "4343_0", "epilog-marker", "--json"]);
    let hits: serde_json::Value = serde_json::from_slice(&hits.stdout).expect("search JSON");
    assert_eq!(hits["hits"].as_array().map(Vec::len), Some(2), "both lines, once each: {hits:#}");
}
