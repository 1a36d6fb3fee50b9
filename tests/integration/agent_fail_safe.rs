//! The agent against a real coronerd when things go wrong on its side: with no identity at all
//! the job still runs and is shipped under a made-up job id that the report explains; with its
//! supervisor SIGKILLed mid-job every line still arrives (the shipper took over the
//! pass-through) and the report says how the process ended is not known.

use crate::served::Served as Server;
use coroner_tests::binary;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn notes(report: &serde_json::Value) -> Vec<String> {
    report["notes"].as_array().map(|a| a.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// N in the agent's note "... (N lines in flight to the shipper at that moment were printed but not shipped)".
fn lines_in_flight(note: &str) -> Option<u64> {
    let (before, _) = note.split_once(" lines in flight to the shipper")?;
    before.rsplit('(').next()?.parse().ok()
}

#[test]
fn a_job_with_no_identity_runs_and_is_shipped_under_a_job_the_report_explains() {
    let server = Server::start();
    let spool = tempfile::tempdir().expect("tempdir");
    let out = Command::new(binary("coroner-agent"))
        .args(["run", "--server", &server.grpc_url, "--linger", "10"])
        .arg("--spool-dir")
        .arg(spool.path())
        .args(["--", "sh", "-c", "echo first line; echo Traceback-free failure >&2; exit 2"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").expect("PATH"))
        .output()
        .expect("run coroner-agent");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let job = err
        .lines()
        .find_map(|l| l.split("shipping as job ").nth(1))
        .map(str::trim)
        .unwrap_or_else(|| panic!("the agent says which job it made up: {err}"))
        .to_string();
    let r = server.report_until(&job, "the made-up job's report", |r| r["ranks"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(notes(&r).iter().any(|n| n.contains("no job id")), "the report says why the job has this id: {:?}", notes(&r));
    let jobs = server.coroner(&["jobs"]);
    assert!(String::from_utf8_lossy(&jobs.stdout).contains(&job), "coroner jobs lists {job}");
}

#[test]
fn with_its_supervisor_killed_mid_job_every_line_still_arrives() {
    let server = Server::start();
    let spool = tempfile::tempdir().expect("tempdir");
    let script = "i=0; while [ $i -lt 50 ]; do echo \"step $i\"; i=$((i+1)); sleep 0.03; done; echo finished";
    let mut agent = Command::new(binary("coroner-agent"))
        .args(["run", "--job", "fail-safe-kill", "--rank", "0", "--world-size", "1", "--server", &server.grpc_url])
        .arg("--spool-dir")
        .arg(spool.path())
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start coroner-agent");
    let mut stdout = agent.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    std::thread::sleep(Duration::from_millis(400));
    agent.kill().expect("SIGKILL the agent");
    let _ = agent.wait();
    let printed = reader.join().expect("reader");
    assert!(printed.ends_with("finished\n"), "the job ran to its end: {printed}");
    let r = server
        .report_until("fail-safe-kill", "all 51 lines indexed and the note", |r| notes(r).iter().any(|n| n.contains("how the process ended is not known")));
    // Lines the supervisor had read but not handed on when it was killed (a starved machine
    // widens that instant) were printed, not shipped: the agent counts them and says so.
    let in_flight = notes(&r).iter().find_map(|n| lines_in_flight(n)).unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = server.coroner(&["count", "fail-safe-kill", "step OR finished", "--json"]);
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let total: u64 = rows.as_array().map(|a| a.iter().filter_map(|r| r["count"].as_u64()).sum()).unwrap_or(0);
        if total + in_flight == 51 {
            break;
        }
        assert!(Instant::now() < deadline, "every line reaches the server or is counted in flight: {total} + {in_flight} of 51\n{r:#}");
        std::thread::sleep(Duration::from_millis(150));
    }
}
