use super::*;
use crate::signature::signature_id;
use coroner_model::Rank;

fn failure(job: &str, at: i64, class: FaultClass, template: &str, host: &str, gpu: Option<&str>) -> RecordedFailure {
    RecordedFailure {
        job_id: job.into(),
        recorded_ns: at,
        signature: FailureSignature {
            id: signature_id(class.as_str(), template, &[]),
            class,
            template: template.into(),
            frames: vec![],
            rank: Some(Rank(1)),
            host: Some(host.into()),
            gpu: gpu.map(str::to_string),
            collective: None,
        },
    }
}

fn ran(job: &str, hosts: &[&str]) -> JobHosts {
    JobHosts {
        job_id: job.into(),
        recorded_ns: 0,
        verdict: "failed".into(),
        hosts: hosts.iter().map(|h| HostCount { host: h.to_string(), count: 1 }).collect(),
    }
}

#[test]
fn similar_incidents_count_same_and_close_newest_first() {
    let oom = "CUDA out of memory. Tried to allocate <num> GiB";
    let history = vec![
        failure("a", 10, FaultClass::CudaOom, oom, "n1", None),
        failure("b", 30, FaultClass::CudaOom, oom, "n2", None),
        failure("c", 20, FaultClass::CudaOom, "CUDA out of memory. Tried to allocate <num> MiB", "n1", None),
        failure("d", 40, FaultClass::Segfault, oom, "n1", None),
        failure("e", 50, FaultClass::CudaOom, "unrelated words only", "n3", None),
        failure("me", 60, FaultClass::CudaOom, oom, "n1", None),
    ];
    let this = history[5].signature.clone();
    let s = similar_incidents("me", &this, &history);
    assert_eq!((s.same, s.close), (2, 1));
    let jobs: Vec<&str> = s.jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(jobs, ["b", "c", "a"], "newest first, this job and other classes left out");
    assert_eq!(s.hosts, vec![HostCount { host: "n1".into(), count: 2 }, HostCount { host: "n2".into(), count: 1 }]);
    assert_eq!(s.first_seen.as_deref(), Some(format_rfc3339_ns(10).as_str()));
    assert!(s.jobs[1].similarity < 1.0 && !s.jobs[1].same);
    let alone = similar_incidents("me", &this, &history[5..]);
    assert_eq!((alone.same, alone.close, alone.jobs.len()), (0, 0, 0));
}

#[test]
fn a_host_with_far_more_than_its_share_is_flagged_and_victims_count_for_nothing() {
    // Two-host jobs; "bad" is the root of every failure it takes part in, "victim" only ever
    // hosts the ranks that gave up, "ok" shares some failures fairly.
    let mut failures = Vec::new();
    let mut jobs = Vec::new();
    for i in 0..3 {
        let j = format!("bad{i}");
        failures.push(failure(&j, i, FaultClass::Segfault, &format!("segfault {i}"), "bad", Some("0000:18:00")));
        jobs.push(ran(&j, &["bad", "victim"]));
    }
    for i in 0..2 {
        let j = format!("ok{i}");
        failures.push(failure(&j, 10 + i, FaultClass::Segfault, &format!("other {i}"), if i == 0 { "ok" } else { "ok2" }, None));
        jobs.push(ran(&j, &["ok", "ok2"]));
    }
    jobs.push(ran("clean", &["victim", "ok"]));
    let all = suspects(&failures, &jobs, true);
    let flagged: Vec<(&str, Option<&str>)> = all.iter().filter(|s| s.flagged).map(|s| (s.host.as_str(), s.gpu.as_deref())).collect();
    assert_eq!(flagged, [("bad", None), ("bad", Some("0000:18:00"))]);
    let bad = all.iter().find(|s| s.host == "bad" && s.gpu.is_none()).expect("bad listed");
    assert_eq!((bad.score, bad.expected, bad.failures, bad.jobs_seen), (3.0, 1.25, 3, 3), "5 weighted failures, 3 of 12 rank slots");
    assert_eq!(bad.incidents[0].job_id, "bad2", "newest first");
    assert!(all.iter().all(|s| s.host != "victim"), "a victim's host is never listed: {all:?}");
    let ok = all.iter().find(|s| s.host == "ok").expect("ok listed");
    assert!(!ok.flagged, "one failure in its share: {ok:?}");
    assert_eq!(suspects(&failures, &jobs, false).len(), 2, "only flagged ones without `all`");
}

#[test]
fn one_hardware_fault_flags_while_spread_software_bugs_do_not() {
    let xid = vec![failure("x", 1, FaultClass::GpuHardware, "Xid <num>", "h1", Some("0000:3b:00"))];
    let jobs = vec![ran("x", &["h1", "h2"])];
    let s = suspects(&xid, &jobs, false);
    assert_eq!(s.len(), 2, "{s:?}");
    assert!(s.iter().all(|s| s.host == "h1" && s.hardware_failures == 1));

    // The same OOM (one signature) rooted on four hosts: it follows the code.
    let oom: Vec<RecordedFailure> =
        (0..8).map(|i| failure(&format!("o{i}"), i, FaultClass::CudaOom, "oom", ["a", "b", "c", "d"][i as usize % 4], None)).collect();
    let jobs: Vec<JobHosts> = (0..8).map(|i| ran(&format!("o{i}"), &["a", "b", "c", "d"])).collect();
    assert!(suspects(&oom, &jobs, false).is_empty());
    // A host that ran every job (a single-host fleet) is never above its share.
    let solo: Vec<RecordedFailure> = (0..5).map(|i| failure(&format!("s{i}"), i, FaultClass::Segfault, &format!("s{i}"), "only", None)).collect();
    let jobs: Vec<JobHosts> = (0..5).map(|i| ran(&format!("s{i}"), &["only"])).collect();
    assert!(suspects(&solo, &jobs, false).is_empty());
    assert_eq!(class_weight(FaultClass::None), 0.0);
    assert!(class_weight(FaultClass::GpuHardware) > class_weight(FaultClass::NcclError));
    assert!(class_weight(FaultClass::NcclError) > class_weight(FaultClass::CudaOom));
}
