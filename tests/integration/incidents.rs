//! Incident memory across jobs on a real coronerd: corpus bundles imported as many jobs on fake
//! hosts, one host planted bad (the culprit ranks of several failures and a GPU Xid run there),
//! one host that only ever runs the ranks that gave up. Checks the similar-incident links in
//! reports (JSON, text and web page), `coroner suspects`, and that retention keeps signatures.

use crate::served::{Endpoints, TestServer};
use coroner_tests::{data_dir, truth};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BAD: &str = "node-bad";
const VICTIM: &str = "node-victim";
const XID_PCI: &str = "0000:3b:00";

/// A copy of a corpus bundle whose culprit rank's output holds a kernel Xid 79 line just before
/// its failure (as a node-level log capture that includes kernel messages would).
fn with_xid(bundle: &str, dest: &Path) -> PathBuf {
    let src = data_dir().join("corpus").join(bundle);
    let out = dest.join(format!("{bundle}_xid"));
    copy_dir(&src, &out);
    let (_, culprit, _) = truth(&src);
    let file = out.join(format!("rank{}.lines.jsonl", culprit.expect("a culprit")));
    let text = std::fs::read_to_string(&file).expect("read lines");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines.iter().position(|l| l.contains("Fatal Python error")).expect("the failure line");
    let ts = serde_json::from_str::<Value>(&lines[at]).expect("jsonl")["ts_ns"].as_i64().expect("ts_ns");
    let xid = format!("[ 8123.456789] NVRM: Xid (PCI:{XID_PCI}): 79, pid=4242, name=python3, GPU has fallen off the bus.");
    lines.insert(at, serde_json::json!({"ts_ns": ts - 1_000_000, "stream": "stderr", "line": xid}).to_string());
    std::fs::write(&file, lines.join("\n") + "\n").expect("write lines");
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).expect("copy");
        }
    }
}

/// `--host-map`: the culprit on `culprit_host`, every other rank on the `others` in turn.
fn host_map(world: u32, culprit: Option<u32>, culprit_host: &str, others: &[&str]) -> String {
    let mut i = 0;
    (0..world)
        .map(|r| {
            let h = if Some(r) == culprit {
                culprit_host
            } else {
                i += 1;
                others[(i - 1) % others.len()]
            };
            format!("{r}={h}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn report_json(s: &Endpoints, job: &str) -> Value {
    let out = s.coroner(&["report", job, "--json"]);
    coroner_tests::assert_answered(&out);
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// Imports `path` as `job` with its ranks on the given hosts and waits until the failure history
/// has it: a failed job's report carries similar incidents, a succeeded one is final, and the
/// report no longer changes (early reports, before every rank's lines arrived, can differ).
fn import(s: &Endpoints, path: &Path, job: &str, map: &str) -> Value {
    let out = s.coroner(&["import", path.to_str().expect("utf-8"), "--job", job, "--host-map", map]);
    assert!(out.status.success(), "import {job}: {}", String::from_utf8_lossy(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = Value::Null;
    loop {
        let r = report_json(s, job);
        let done = match r["verdict"].as_str() {
            Some("failed") => r.get("similar_incidents").is_some(),
            Some("succeeded") => true,
            _ => false,
        };
        if done && r == last {
            return r;
        }
        last = r.clone();
        assert!(Instant::now() < deadline, "job {job} never reached the history: {r}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn suspects(s: &Endpoints, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["suspects", "--json"];
    all.extend_from_slice(args);
    let out = s.coroner(&all);
    assert!(out.status.success(), "suspects: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).expect("suspects JSON").as_array().cloned().unwrap_or_default()
}

#[test]
fn similar_incidents_and_suspect_hosts_across_imported_jobs() {
    let s = TestServer::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let corpus = |b: &str| data_dir().join("corpus").join(b);
    let xid = with_xid("nccl2_segv_r0", tmp.path());
    // (job, bundle, culprit's host, the other ranks' hosts)
    let plan: Vec<(&str, PathBuf, &str, Vec<&str>)> = vec![
        ("segv-1", corpus("nccl2_segv_r0"), BAD, vec![VICTIM]),
        ("nan-1", corpus("nccl2_nan_r0"), BAD, vec![VICTIM]),
        ("xid-1", xid.clone(), BAD, vec!["node-a"]),
        ("oom-1", corpus("nccl2_oom_r1"), "node-a", vec![VICTIM]),
        ("oom-2", corpus("nccl2_oom_r1"), "node-b", vec!["node-c"]),
        ("shape-1", corpus("nccl2_shape_r0"), "node-c", vec![VICTIM]),
        ("statedict-1", corpus("nccl2_statedict_r1"), "node-a", vec!["node-b"]),
        ("hang-1", corpus("nccl2_hang_r1"), "node-b", vec![VICTIM]),
        ("mismatch-1", corpus("nccl2_mismatch_detail"), "node-c", vec!["node-a"]),
        ("gloo-hang-1", corpus("gloo8_hang_r5"), "node-a", vec!["node-b", "node-c", VICTIM]),
        ("ok-1", corpus("nccl2_ok"), BAD, vec!["node-a"]),
        ("segv-2", corpus("nccl2_segv_r0"), BAD, vec!["node-c"]),
    ];
    let mut reports = std::collections::BTreeMap::new();
    for (job, path, culprit_host, others) in &plan {
        let truth_of = if path == &xid { corpus("nccl2_segv_r0") } else { path.clone() };
        let (_, culprit, _) = truth(&truth_of);
        let world = if job.starts_with("gloo") { 8 } else { 2 };
        let map = match culprit {
            Some(_) => host_map(world, culprit, culprit_host, others),
            // A clean job: its ranks on the named hosts in turn.
            None => host_map(world, None, culprit_host, &[&[*culprit_host][..], &others[..]].concat()),
        };
        reports.insert(*job, import(&s, path, job, &map));
    }

    // The planted Xid is the root of its job, on the bad host's GPU.
    let x = &reports["xid-1"]["first_failure"];
    assert_eq!((x["class"].as_str(), x["host"].as_str()), (Some("gpu_hardware"), Some(BAD)), "{x}");

    // The second OOM links the first: same signature, when and where.
    let sim = &reports["oom-2"]["similar_incidents"];
    assert_eq!(sim["same"], 1, "{sim}");
    assert_eq!(sim["jobs"][0]["job_id"], "oom-1");
    assert_eq!(sim["jobs"][0]["host"], "node-a");
    assert!(sim["jobs"][0]["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(sim["hosts"][0]["host"], "node-a");
    assert!(sim["template"].as_str().is_some_and(|t| t.contains("<num>") && !t.chars().any(|c| c.is_ascii_digit())), "{sim}");
    let segv = &reports["segv-2"]["similar_incidents"];
    assert_eq!((segv["same"].as_u64(), segv["jobs"][0]["job_id"].as_str()), (Some(1), Some("segv-1")), "{segv}");
    // A failure seen for the first time says so; the first job of a kind links nothing earlier.
    let shape = &reports["shape-1"]["similar_incidents"];
    assert_eq!((shape["same"].as_u64(), shape["close"].as_u64()), (Some(0), Some(0)), "{shape}");
    // Links go both ways once both exist: the first OOM now sees the second.
    assert_eq!(report_json(&s, "oom-1")["similar_incidents"]["jobs"][0]["job_id"], "oom-2");

    // The text report and the web page show them.
    let text = String::from_utf8_lossy(&s.coroner(&["report", "oom-2"]).stdout).into_owned();
    assert!(text.contains("Similar past incidents: 1 with the same signature"), "{text}");
    assert!(text.contains("job oom-1 ["), "{text}");
    let shape_text = String::from_utf8_lossy(&s.coroner(&["report", "shape-1"]).stdout).into_owned();
    assert!(shape_text.contains("this failure is new"), "{shape_text}");
    let (status, page) = s.get("/jobs/oom-2");
    assert_eq!(status, 200);
    assert!(page.contains("Similar past incidents") && page.contains("href=\"/jobs/oom-1\""), "{page}");

    // Offline analysis compares with the same history when given the server's metastore.
    let db = format!("sqlite:{}", s.data_path().join("coroner.db").display());
    let out = s.coroner(&["analyze", corpus("nccl2_oom_r1").to_str().expect("utf-8"), "--json", "--history", &db]);
    coroner_tests::assert_answered(&out);
    let offline: Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    assert_eq!(offline["similar_incidents"]["signature"], sim["signature"], "the server and the CLI compute one signature");
    assert_eq!(offline["similar_incidents"]["same"], 2, "{}", offline["similar_incidents"]);

    // `coroner suspects` names the bad host (and its GPU that threw the Xid), no healthy host.
    let out = s.coroner(&["suspects"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success() && text.contains(&format!("SUSPECT host {BAD}:")), "{text}");
    assert!(text.contains(&format!("SUSPECT gpu {XID_PCI} on {BAD}")), "{text}");
    for healthy in ["node-a", "node-b", "node-c", VICTIM] {
        let named = text.contains(&format!("host {healthy}:")) || text.contains(&format!(" on {healthy}:"));
        assert!(!named, "{healthy} is not a suspect:\n{text}");
    }
    let flagged = suspects(&s, &[]);
    assert!(flagged.iter().all(|x| x["host"] == BAD && x["flagged"] == true), "{flagged:?}");
    let host = flagged.iter().find(|x| x["gpu"].is_null()).expect("the host itself");
    assert!(host["hardware_failures"].as_u64() >= Some(1) && host["failures"].as_u64() >= Some(4), "{host}");
    assert!(host["score"].as_f64() > Some(2.0 * host["expected"].as_f64().unwrap_or(f64::MAX)), "{host}");
    let jobs: Vec<&str> = host["incidents"].as_array().expect("incidents").iter().filter_map(|i| i["job_id"].as_str()).collect();
    for j in ["segv-1", "nan-1", "xid-1", "segv-2"] {
        assert!(jobs.contains(&j), "{j} in {jobs:?}");
    }

    // With --all the healthy hosts that had a root cause are listed unflagged; the host that only
    // ran victims is not listed at all.
    let all = suspects(&s, &["--all"]);
    assert!(all.iter().any(|x| x["host"] == "node-a" && x["flagged"] == false), "{all:?}");
    assert!(all.iter().all(|x| x["host"] != VICTIM), "a victim's host never counts: {all:?}");
    assert!(all.iter().filter(|x| x["flagged"] == true).all(|x| x["host"] == BAD));

    // --since bounds the history.
    let later = s.coroner(&["suspects", "--since", "2200-01-01T00:00:00Z"]);
    assert!(String::from_utf8_lossy(&later.stdout).contains("no host or GPU stands out"));
    assert!(!suspects(&s, &["--since", "1d"]).is_empty());
    let bad_since = s.coroner(&["suspects", "--since", "soon"]);
    assert_eq!(bad_since.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_since.stderr).contains("neither a time ago"));
}

#[test]
fn retention_deletes_jobs_but_their_signatures_stay() {
    let s = TestServer::start_with(|c| c.retention = Duration::from_secs(3));
    let r = import(&s, &data_dir().join("corpus").join("nccl2_segv_r0"), "expiring-1", &format!("0={BAD},1={VICTIM}"));
    assert_eq!(r["first_failure"]["host"], BAD);
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.coroner(&["report", "expiring-1"]).status.code() != Some(2) {
        assert!(Instant::now() < deadline, "the job was never deleted by retention");
        std::thread::sleep(Duration::from_millis(250));
    }
    let gone = s.coroner(&["report", "expiring-1"]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no job"), "{}", String::from_utf8_lossy(&gone.stderr));
    let all = suspects(&s, &["--all"]);
    let host = all.iter().find(|x| x["host"] == BAD && x["gpu"].is_null()).expect("the expired job's failure is still counted");
    assert_eq!(host["incidents"][0]["job_id"], "expiring-1");
}
