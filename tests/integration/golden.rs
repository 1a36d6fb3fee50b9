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
        let out = Command::new(binary("coroner")).args(["analyze", "--json"]).arg(bundle).output().expect("run coroner analyze");
        coroner_tests::assert_answered(&out);
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
        assert_eq!(serde_json::to_string(&a).expect("json"), serde_json::to_string(&b).expect("json"), "{}", bundle.display());
    }
}

/// The whole text report of every corpus bundle, against `tests/data/golden/<bundle>.txt`: any
/// change to what a person reads shows up in review. `CORONER_UPDATE_GOLDEN=1` rewrites the files.
#[test]
fn text_reports_match_the_golden_files() {
    let golden_dir = coroner_tests::data_dir().join("golden");
    let update = std::env::var_os("CORONER_UPDATE_GOLDEN").is_some();
    let mut differ = Vec::new();
    for bundle in corpus_bundles() {
        let name = bundle.file_name().expect("bundle name").to_string_lossy().into_owned();
        let out = Command::new(binary("coroner")).arg("analyze").arg(&bundle).output().expect("run coroner analyze");
        coroner_tests::assert_answered(&out);
        let got = String::from_utf8(out.stdout).expect("the text report is UTF-8");
        let path = golden_dir.join(format!("{name}.txt"));
        if update {
            std::fs::create_dir_all(&golden_dir).expect("create the golden folder");
            std::fs::write(&path, &got).expect("write a golden report");
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run with CORONER_UPDATE_GOLDEN=1)", path.display()));
        if got != want {
            let line = got.lines().zip(want.lines()).position(|(a, b)| a != b).unwrap_or(got.lines().count().min(want.lines().count()));
            differ.push(format!(
                "{name}: first difference at line {}:\n  got:  {}\n  want: {}",
                line + 1,
                got.lines().nth(line).unwrap_or("<end>"),
                want.lines().nth(line).unwrap_or("<end>")
            ));
        }
    }
    assert!(differ.is_empty(), "text reports differ from tests/data/golden (CORONER_UPDATE_GOLDEN=1 rewrites them after review):\n{}", differ.join("\n"));
}
