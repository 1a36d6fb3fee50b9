//! The report as a message (`v1::Report`) and the typed enums for verdicts and fault classes:
//! the structured part a scheduler acts on. The JSON report stays the complete document; this is
//! a projection of it, made in one place.

use crate::v1;
use coroner_model::{FaultClass, Rank, Report, Verdict};

pub fn verdict_to_wire(v: Verdict) -> v1::Verdict {
    match v {
        Verdict::Succeeded => v1::Verdict::Succeeded,
        Verdict::Failed => v1::Verdict::Failed,
        Verdict::Running => v1::Verdict::Running,
        Verdict::Unknown => v1::Verdict::Unknown,
    }
}

/// The verdict a peer sent: the typed field when it is set, else the older string field (a
/// server from before the enum). `None` when neither names a verdict this build knows.
pub fn verdict_from_wire(code: i32, text: &str) -> Option<Verdict> {
    match v1::Verdict::try_from(code) {
        Ok(v1::Verdict::Succeeded) => Some(Verdict::Succeeded),
        Ok(v1::Verdict::Failed) => Some(Verdict::Failed),
        Ok(v1::Verdict::Running) => Some(Verdict::Running),
        Ok(v1::Verdict::Unknown) => Some(Verdict::Unknown),
        Ok(v1::Verdict::Unspecified) | Err(_) => Verdict::parse(text),
    }
}

pub fn fault_class_to_wire(c: FaultClass) -> v1::FaultClass {
    match c {
        FaultClass::Hang => v1::FaultClass::Hang,
        FaultClass::CudaOom => v1::FaultClass::CudaOom,
        FaultClass::Segfault => v1::FaultClass::Segfault,
        FaultClass::Killed => v1::FaultClass::Killed,
        FaultClass::CollectiveMismatch => v1::FaultClass::CollectiveMismatch,
        FaultClass::NanInf => v1::FaultClass::NanInf,
        FaultClass::ShapeMismatch => v1::FaultClass::ShapeMismatch,
        FaultClass::CheckpointMismatch => v1::FaultClass::CheckpointMismatch,
        FaultClass::TokenizerMismatch => v1::FaultClass::TokenizerMismatch,
        FaultClass::Dataloader => v1::FaultClass::Dataloader,
        FaultClass::PythonException => v1::FaultClass::PythonException,
        FaultClass::NcclError => v1::FaultClass::NcclError,
        FaultClass::GpuHardware => v1::FaultClass::GpuHardware,
        FaultClass::BusError => v1::FaultClass::BusError,
        FaultClass::None => v1::FaultClass::None,
    }
}

/// A class stored or sent as text (`cuda_oom`); unspecified when empty or unknown.
pub fn fault_class_name_to_wire(name: &str) -> v1::FaultClass {
    FaultClass::parse(name).map_or(v1::FaultClass::Unspecified, fault_class_to_wire)
}

/// The report's structured part.
pub fn report_to_wire(r: &Report) -> v1::Report {
    v1::Report {
        job_id: r.job_id.clone(),
        verdict: verdict_to_wire(r.verdict) as i32,
        culprit: r.first_failure.as_ref().map(|f| v1::Culprit {
            rank: f.rank.and_then(Rank::known).map(|r| r.0),
            host: f.host.clone().unwrap_or_default(),
            fault_class: fault_class_to_wire(f.class) as i32,
            reason: f.summary.clone(),
            confidence: f.confidence,
            rule: f.rule.clone().unwrap_or_default(),
            time: f.time.clone().unwrap_or_default(),
            evidence: f
                .evidence
                .iter()
                .map(|e| v1::EvidenceLine {
                    rank: e.rank.and_then(Rank::known).map(|r| r.0),
                    time: e.time.clone(),
                    stream: e.stream.clone(),
                    line: e.line.clone(),
                })
                .collect(),
            candidates: f.candidates.iter().filter_map(|r| r.known()).map(|r| r.0).collect(),
        }),
        ranks: r
            .ranks
            .iter()
            .map(|s| v1::RankStatus {
                rank: s.rank.known().map(|r| r.0),
                host: s.host.clone().unwrap_or_default(),
                ended: s.ended.clone().unwrap_or_default(),
                last_step: s.last_step,
                lines: s.lines,
                role: s.role.clone(),
                label: format!("rank {}", s.rank),
            })
            .collect(),
        suspects: r
            .live_findings
            .iter()
            .map(|h| v1::HangSuspect {
                rank: h.rank.0,
                host: h.host.clone().unwrap_or_default(),
                why: h.why.clone(),
                summary: h.summary.clone(),
                last_step: h.last_step,
                peers_step: h.peers_step,
                silent_ms: h.silent_ms,
                last_lines: h.last_lines.clone(),
            })
            .collect(),
        advice: r.advice.clone(),
        notes: r.notes.clone(),
        format_version: r.format_version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_its_own_wire_value_and_its_name_maps_to_it() {
        let values: std::collections::BTreeSet<i32> = FaultClass::ALL.iter().map(|c| fault_class_to_wire(*c) as i32).collect();
        assert_eq!(values.len(), FaultClass::ALL.len());
        assert!(!values.contains(&(v1::FaultClass::Unspecified as i32)));
        for c in FaultClass::ALL {
            assert_eq!(fault_class_name_to_wire(c.as_str()), fault_class_to_wire(c));
            // The enum's wire name is the class's name, upper-cased behind the prefix.
            assert_eq!(fault_class_to_wire(c).as_str_name(), format!("FAULT_CLASS_{}", c.as_str().to_uppercase()));
        }
        assert_eq!(fault_class_name_to_wire(""), v1::FaultClass::Unspecified);
        assert_eq!(fault_class_name_to_wire("exploded"), v1::FaultClass::Unspecified);
    }

    #[test]
    fn a_verdict_survives_the_wire_and_an_old_servers_string_still_reads() {
        for v in [Verdict::Succeeded, Verdict::Failed, Verdict::Running, Verdict::Unknown] {
            assert_eq!(verdict_from_wire(verdict_to_wire(v) as i32, ""), Some(v));
            assert_eq!(verdict_from_wire(0, v.as_str()), Some(v), "a server before the enum sends only the string");
        }
        assert_eq!(verdict_from_wire(0, "exploded"), None);
        assert_eq!(verdict_from_wire(99, "failed"), Some(Verdict::Failed), "a value from a newer server falls back to the string");
    }

    #[test]
    fn a_process_of_unknown_rank_is_never_sent_as_a_number() {
        let json = r#"{"format_version":1,"job_id":"j","verdict":"failed",
            "first_failure":{"rank":4294963200,"class":"segfault","time":null,"host":"h1","confidence":0.9,"summary":"segfault",
                "rule":null,"evidence":[{"rank":4294963200,"time":"t","stream":"stderr","line":"Segmentation fault"}],"candidates":[]},
            "cascade":[],"collectives":[],"advice":["look"],"snapshots":[],"notes":[],
            "ranks":[{"rank":4294963200,"host":"h1","ended":"exited 139","last_step":null,"lines":3,"role":"culprit",
                "clock":{"offset_ns":0,"uncertainty_ns":0,"source":"none"}}]}"#;
        let report: Report = serde_json::from_str(json).expect("a report");
        let wire = report_to_wire(&report);
        let culprit = wire.culprit.expect("a culprit");
        assert_eq!((culprit.rank, culprit.evidence[0].rank), (None, None));
        assert_eq!((culprit.fault_class, culprit.host.as_str()), (v1::FaultClass::Segfault as i32, "h1"));
        assert_eq!((wire.ranks[0].rank, wire.ranks[0].label.as_str()), (None, "rank unknown"));
        assert_eq!(wire.verdict, v1::Verdict::Failed as i32);
    }
}
