//! Every real flight recorder fixture (tests/data/fr) through `coroner fr` (dumps alone) and
//! `coroner analyze` (dumps and logs): the divergent rank and the rule that named it; then every
//! subset of each fixture's dumps: the answer is the right rank or nobody, never another rank.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fr")
}

fn coroner(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_coroner")).args(args).output().expect("run coroner");
    // `analyze` exits with its verdict's code (1 for a failed job); 2 means it could not answer.
    assert!(matches!(out.status.code(), Some(0 | 1 | 3 | 4)), "coroner {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("coroner {args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    if args.first() == Some(&"analyze") {
        let owed = match v["verdict"].as_str() {
            Some("succeeded") => 0,
            Some("failed") => 1,
            Some("unknown") => 3,
            _ => 4,
        };
        assert_eq!(out.status.code(), Some(owed), "coroner {args:?}: exit status for verdict {}", v["verdict"]);
    } else {
        assert!(out.status.success(), "coroner {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    v
}

/// (fixture, the rank that diverged, the rule on dumps alone, the rule with logs when it differs,
/// whether the folder holds logs).
type Case = (&'static str, Option<u32>, &'static str, Option<&'static str>, bool);
const CASES: &[Case] = &[
    ("gloo4_extra_r1", Some(1), "call_site", None, true),
    ("gloo4_size_r1", Some(1), "majority_at_seq", None, true),
    ("gloo4_op_r1", Some(1), "majority_at_seq", None, true),
    ("gloo4_skip_r1", Some(1), "never_issued", None, true),
    ("gloo4_hang_r1", Some(1), "never_issued", None, true),
    ("gloo4_killed_r1", Some(1), "only_rank_without_a_dump", None, true),
    ("gloo4_ok_r1", None, "", None, true),
    ("gloo4_size_r1_json", Some(1), "never_issued", None, true),
    ("gloo4_coalesced_r1", Some(1), "majority_at_seq", None, true),
    ("gloo4_pg2_r1", Some(1), "own_history", None, true),
    ("gloo2_extra_r1", Some(1), "own_history", None, true),
    ("gloo2_size_r1", Some(1), "never_issued", None, true),
    ("gloo2_hang_r1", Some(1), "entered_last", None, true),
    ("nccl2_hang_r1", Some(1), "never_issued", None, false),
    ("nccl2_hang_r1_no_dump_r1", None, "", None, false),
    ("nccl2_size_r1", Some(1), "own_history", None, false),
    ("nccl4_size_r0", Some(0), "majority_at_seq", None, false),
    ("nccl4_size_r0_no_dump_r3", Some(0), "own_history", None, false),
    ("nccl2_p2p_size_r1", Some(1), "own_history", None, true),
    ("nccl2_p2p_skip_r1", Some(1), "own_history", None, true),
    ("nccl2_p2p_ok", None, "", None, true),
    ("nccl2_batch_size_r1", Some(1), "own_history", None, true),
    ("nccl2_batch_ok", None, "", None, true),
    ("nccl2_extra_r1", Some(1), "own_history", None, true),
];

fn culprits(fr: &Value) -> Vec<u64> {
    fr["verdict"]["culprits"].as_array().expect("culprits").iter().filter_map(Value::as_u64).collect()
}

#[test]
fn every_fixture_names_its_divergent_rank_and_the_rule() {
    for (name, rank, rule, with_logs, logs) in CASES {
        let dir = fixtures().join(name);
        let fr = coroner(&["fr", "--json", dir.to_str().unwrap()]);
        assert_eq!(culprits(&fr), rank.map(u64::from).into_iter().collect::<Vec<_>>(), "{name}: {:#}", fr["verdict"]);
        if rank.is_some() {
            assert_eq!(fr["verdict"]["rule"], *rule, "{name}");
        }
        if !logs {
            continue;
        }
        let report = coroner(&["analyze", "--json", dir.to_str().unwrap()]);
        let fr = &report["flight_recorder"];
        assert_eq!(culprits(fr), rank.map(u64::from).into_iter().collect::<Vec<_>>(), "{name} with logs: {:#}", fr["verdict"]);
        match rank {
            Some(r) => {
                assert_eq!(fr["verdict"]["rule"], with_logs.unwrap_or(rule), "{name} with logs");
                assert_eq!(report["first_failure"]["rank"], *r, "{name}: the report's culprit is the flight recorder's: {:#}", report["first_failure"]);
                assert!(report["first_failure"]["summary"].as_str().unwrap().starts_with("flight recorder, "), "{name}");
            }
            None => assert_eq!(report["verdict"], "succeeded", "{name}"),
        }
    }
}

/// Each subset of a fixture's dumps, copied with the fixture's logs (when it has them): the rank
/// named is the one that diverged, or nobody.
#[test]
fn missing_dumps_never_name_another_rank() {
    let mut runs = 0;
    for (name, rank, ..) in CASES.iter().filter(|c| c.1.is_some()) {
        let dir = fixtures().join(name);
        let mut dumps: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("nccl_trace_rank_"))
            .collect();
        dumps.sort();
        let logs: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "log")).collect();
        for mask in 1u32..(1 << dumps.len()) - 1 {
            let tmp = tempfile::tempdir().unwrap();
            for (i, d) in dumps.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0) {
                let _ = i;
                std::fs::copy(d, tmp.path().join(d.file_name().unwrap())).unwrap();
            }
            let fr = coroner(&["fr", "--json", tmp.path().to_str().unwrap()]);
            let named = culprits(&fr);
            assert!(named.is_empty() || named == vec![u64::from(rank.unwrap())], "{name}, dumps {mask:b}: {:#}", fr["verdict"]);
            runs += 1;
            if logs.is_empty() {
                continue;
            }
            for l in &logs {
                std::fs::copy(l, tmp.path().join(l.file_name().unwrap())).unwrap();
            }
            let report = coroner(&["analyze", "--json", tmp.path().to_str().unwrap()]);
            let named = culprits(&report["flight_recorder"]);
            assert!(
                named.is_empty() || named == vec![u64::from(rank.unwrap())],
                "{name} with logs, dumps {mask:b}: {:#}",
                report["flight_recorder"]["verdict"]
            );
            runs += 1;
        }
    }
    assert!(runs > 200, "{runs}");
}

#[test]
fn fr_text_shows_the_first_mismatch_side_by_side() {
    let out = Command::new(env!("CARGO_BIN_EXE_coroner")).args(["fr", fixtures().join("gloo4_size_r1").to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("verdict: rank 1 diverged first by rule `majority at seq`"), "{text}");
    assert!(text.contains("first mismatch at seq 6 (sizes)"), "{text}");
    let row = text.lines().find(|l| l.trim_start().starts_with("rank 1 ")).expect("rank 1's entry");
    assert!(row.contains("[[512]]") && row.contains("make_dumps.py:34"), "{row}");
    let none = Command::new(env!("CARGO_BIN_EXE_coroner")).args(["fr", "/nonexistent"]).output().unwrap();
    assert!(!none.status.success());
}

/// The real NCCL dumps with point-to-point operations: the pair's first disagreement, each side's
/// unit (a batch whole), and the rule.
#[test]
fn fr_pairs_sends_with_recvs() {
    let fr = coroner(&["fr", "--json", fixtures().join("nccl2_batch_size_r1").to_str().unwrap()]);
    let p2p = fr["groups"].as_array().unwrap().iter().find(|g| g["desc"] == "default_pg, point-to-point").expect("the point-to-point report");
    let d = &p2p["divergence"];
    assert_eq!((d["seq"].as_str(), d["differs"].as_str(), p2p["matched"].as_u64()), (Some("p2p seq 6"), Some("p2p sizes"), Some(11)), "{p2p:#}");
    let ops: Vec<(&str, &str)> = d["entries"].as_array().unwrap().iter().map(|e| (e["op"].as_str().unwrap(), e["output_sizes"].as_str().unwrap())).collect();
    assert_eq!(ops, vec![("batch(send 0->1, recv 0<-1)", "[[1024]] + [[1024]]"), ("batch(send 1->0, recv 1<-0)", "[[1024]] + [[512]]")]);
    let fr = coroner(&["fr", "--json", fixtures().join("nccl2_p2p_skip_r1").to_str().unwrap()]);
    let summary = fr["verdict"]["summary"].as_str().unwrap();
    assert!(summary.contains("rank 0 sent 10 and rank 1 posted 9 recvs"), "{summary}");
}

/// The corpus hang (rank 1 stuck in its data loader, rank 0 waiting in seq 11) without rank 1's
/// dump: the flight recorder cannot tell whether rank 1 held rank 0 up, and says why, whether rank
/// 1 ended by the watchdog's abort (as it did) or was killed from outside; without rank 0's dump
/// it names nobody either. Never rank 0.
#[test]
fn a_killed_rank_without_a_dump_is_unknown() {
    let bundle = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/corpus/nccl2_hang_r1");
    for (gone, signal, reason) in [(1, 6, "ended with a failure status"), (1, 9, "was killed from outside"), (0, 6, "")] {
        let tmp = tempfile::tempdir().unwrap();
        copy_dir(&bundle, tmp.path());
        std::fs::remove_file(tmp.path().join(format!("flight_recorder/nccl_trace_rank_{gone}"))).unwrap();
        let exits = std::fs::read_to_string(tmp.path().join("exits.json")).unwrap();
        let mut exits: Value = serde_json::from_str(&exits).unwrap();
        exits["ranks"][gone.to_string()]["signal"] = signal.into();
        std::fs::write(tmp.path().join("exits.json"), exits.to_string()).unwrap();
        let report = coroner(&["analyze", "--json", tmp.path().to_str().unwrap()]);
        let v = &report["flight_recorder"]["verdict"];
        assert!(culprits(&report["flight_recorder"]).is_empty(), "without rank {gone}'s dump (signal {signal}): {v:#}");
        let summary = v["summary"].as_str().unwrap();
        if gone == 1 {
            assert_eq!(v["candidates"], serde_json::json!([1]), "{v:#}");
            assert!(summary.contains("rank 1 left no dump") && summary.contains(reason), "{summary}");
        }
        assert_ne!(report["first_failure"]["rank"], 0, "the waiting rank is never the culprit: {:#}", report["first_failure"]);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}
