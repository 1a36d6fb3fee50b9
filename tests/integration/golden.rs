//! Every corpus bundle through `coroner analyze --json`: the verdict, culprit and class of its
//! answer key. Only these tests read the answer keys.

use coroner_tests::{binary, corpus_bundles, truth};
use std::process::Command;

#[test]
fn coroner_analyze_names_the_culprit_of_every_corpus_bundle() {
    let bundles = corpus_bundles();
    assert!(bundles.len() >= 13, "the corpus fixtures are missing");
    let mut wrong = Vec::new();
    for bundle in &bundles {
        let out = Command::new(binary("coroner"))
            .args(["analyze", "--json"])
            .arg(bundle)
            .output()
            .expect("run coroner analyze");
        assert!(out.status.success(), "{}: {}", bundle.display(), String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the report is JSON");
        let first = &report["first_failure"];
        let got = (
            report["verdict"].as_str().unwrap_or("").to_string(),
            first["rank"].as_u64().map(|r| r as u32),
            first["class"].as_str().unwrap_or("none").to_string(),
        );
        let want = truth(bundle);
        if got != want {
            wrong.push(format!("{}: got {got:?}, want {want:?}", bundle.display()));
        }
        // The foundation's JSON contract.
        if want.0 == "failed" {
            for field in ["rank", "class", "time", "host", "summary", "evidence"] {
                assert!(first.get(field).is_some(), "{}: first_failure has no {field}", bundle.display());
            }
            let evidence = first["evidence"].as_array().expect("evidence is a list");
            assert!(!evidence.is_empty(), "{}: no evidence", bundle.display());
            for e in evidence {
                for field in ["rank", "time", "stream", "line"] {
                    assert!(e.get(field).is_some(), "{}: evidence line without {field}", bundle.display());
                }
            }
        } else {
            assert!(first.is_null(), "{}: a succeeded job has no first failure", bundle.display());
        }
    }
    assert!(wrong.is_empty(), "wrong diagnoses:\n{}", wrong.join("\n"));
}

#[test]
fn the_text_report_starts_with_the_verdict_and_the_culprit() {
    let bundle = coroner_tests::data_dir().join("corpus/nccl2_oom_r1");
    let out = Command::new(binary("coroner")).arg("analyze").arg(&bundle).output().expect("run coroner analyze");
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("");
    assert!(first.starts_with("FAILED"), "{first}");
    assert!(first.contains("rank 1") && first.contains("cuda_oom"), "{first}");
}

#[test]
fn reports_are_deterministic() {
    for bundle in corpus_bundles() {
        let a = coroner_tests::Collected::load(&bundle).report("j");
        let b = coroner_tests::Collected::load(&bundle).report("j");
        assert_eq!(
            serde_json::to_string(&a).expect("json"),
            serde_json::to_string(&b).expect("json"),
            "{}",
            bundle.display()
        );
    }
}
