//! Writes the [`Report`]: the diagnosis, the cascade, the collective table and the per-rank facts.

use crate::cascade;
use crate::classified::ClassifiedJob;
use crate::clock::{ClockModel, UNKNOWN_UNCERTAINTY_NS};
use crate::diagnosis::{Diagnosis, FirstFinding};
use crate::evidence::JobEvidence;
use crate::gpu_memory;
use crate::pace;
use crate::progress::Progress;
use crate::rules::RuleSet;
use coroner_model::{
    format_rfc3339_ns, ClockEstimate, Event, EventKind, EvidenceLine, FaultClass, FirstFailure, Rank, RankSummary, Report, Role, Stream, Verdict,
    REPORT_FORMAT_VERSION,
};

/// At most this many cascade links are spelled out; the rest are counted.
const MAX_CASCADE: usize = 64;

pub fn build(evidence: &JobEvidence, rules: &RuleSet, job: &ClassifiedJob<'_>, clock: &ClockModel, progress: &Progress, diagnosis: &Diagnosis<'_>) -> Report {
    let mut notes = evidence.notes.clone();
    let first_failure = match (&diagnosis.first, diagnosis.verdict) {
        (Some(f), _) => Some(first_failure(evidence, job, clock, f)),
        (None, Verdict::Failed) => Some(unexplained_failure(evidence)),
        _ => None,
    };
    if let Some(note) = diagnosis.first.as_ref().and_then(|f| f.ordering_note.clone()) {
        notes.push(note);
    }
    for other in &diagnosis.other_roots {
        let when = if other.undated { "at a time no line gives".to_string() } else { format!("at {}", format_rfc3339_ns(other.aligned_ns)) };
        notes.push(format!("rank {} also failed on its own ({}) {when}", other.rank, other.class));
    }
    notes.extend(pace::slowdown_note(evidence));
    if let Some(m) = diagnosis.first.as_ref().and_then(|f| f.rank).and_then(|r| gpu_memory::summary(evidence, clock, r)) {
        notes.push(format!("the culprit's {}", gpu_memory::describe(&m)));
    }
    let culprit = diagnosis.first.as_ref().and_then(|f| f.rank);
    let culprit_ns = diagnosis.first.as_ref().and_then(|f| f.aligned_ns);
    let mut cascade = cascade::build(evidence, job, rules, clock, progress, culprit, culprit_ns);
    // A process of unknown rank is named in words, never as a number.
    cascade.retain(|c| !c.rank.is_unknown());
    for c in &mut cascade {
        c.caused_by = c.caused_by.and_then(Rank::known);
    }
    notes.extend(unknown_processes(evidence, job, culprit));
    // Hardware lines no rank could be joined to, when they did not become the answer themselves.
    let shown: Vec<&Event> = diagnosis.first.as_ref().map(|f| f.events.clone()).unwrap_or_default();
    for (e, v) in crate::hardware::unattributed(evidence, rules).into_iter().filter(|(e, _)| !shown.iter().any(|s| std::ptr::eq(*s, *e))).take(3) {
        notes.push(format!(
            "a kernel or driver line names a process or GPU no line of the job does ({}): {}; if that process ran this job, it may explain the failure",
            v.class().map(|c| c.to_string()).unwrap_or_default(),
            e.text.chars().take(200).collect::<String>()
        ));
    }
    let missing = crate::partial::missing(evidence);
    if !missing.is_empty() {
        notes.push(format!(
            "no log of rank{} {} (world size {}): a failure that started there is not seen, so the first failure named is the first among the ranks whose logs are here",
            if missing.len() == 1 { "" } else { "s" },
            crate::hang::join(&missing),
            evidence.world_size.unwrap_or(0)
        ));
    }
    if cascade.len() > MAX_CASCADE {
        notes.push(format!("{} more ranks in the cascade are not listed", cascade.len() - MAX_CASCADE));
        cascade.truncate(MAX_CASCADE);
    }
    let mut advice = Vec::new();
    if let Some(a) = diagnosis.first.as_ref().and_then(|f| f.advice.clone()) {
        advice.push(a);
    }
    if let (Some(rank), Some(host)) = (culprit, culprit.and_then(|r| host_of(evidence, r))) {
        if diagnosis.first.as_ref().is_some_and(|f| f.class.is_hardware() || f.class == FaultClass::NcclError) {
            advice.push(format!("Drain host {host} (rank {rank}) before restarting the job."));
        }
    }
    Report {
        format_version: REPORT_FORMAT_VERSION,
        job_id: evidence.job_id.clone(),
        verdict: diagnosis.verdict,
        first_failure,
        cascade,
        collectives: progress.rows().into_iter().filter(|r| !r.rank.is_unknown()).collect(),
        ranks: rank_summaries(evidence, job, rules, clock, culprit),
        advice,
        snapshots: evidence.snapshots.clone(),
        notes,
        live_findings: Vec::new(),
        similar_incidents: None,
        flight_recorder: None,
        attempts: Vec::new(),
    }
}

fn first_failure(evidence: &JobEvidence, job: &ClassifiedJob<'_>, clock: &ClockModel, f: &FirstFinding<'_>) -> FirstFailure {
    let mut lines: Vec<EvidenceLine> = f
        .events
        .iter()
        .map(|e| {
            let mut line = evidence_line(clock, e);
            // A hardware line joined to the culprit by its pid or GPU is the culprit's.
            if line.rank.is_none() && e.line.stream == Stream::File {
                line.rank = f.rank;
            }
            line
        })
        .collect();
    // Then how the others learned of it: each other rank's first symptom, a few of them.
    for (rank, _) in job.ranks.iter().filter(|(r, _)| Some(**r) != f.rank).take(4) {
        if let Some(s) = job.first_symptom(*rank) {
            if !f.events.iter().any(|e| std::ptr::eq(*e, s.event)) {
                lines.push(evidence_line(clock, s.event));
            }
        }
    }
    for l in &mut lines {
        l.rank = l.rank.and_then(Rank::known);
    }
    FirstFailure {
        rank: f.rank.and_then(Rank::known),
        class: f.class,
        time: f.aligned_ns.map(format_rfc3339_ns),
        host: f.rank.and_then(|r| host_of(evidence, r)),
        confidence: (f.confidence * 100.0).round() / 100.0,
        summary: f.summary.clone(),
        rule: f.rule_id.clone(),
        evidence: lines,
        candidates: if f.rank.is_some() { Vec::new() } else { f.candidates.iter().copied().filter_map(Rank::known).collect() },
    }
}

fn unexplained_failure(evidence: &JobEvidence) -> FirstFailure {
    let failed: Vec<Rank> = evidence.ends.iter().filter(|e| !e.succeeded()).map(|e| e.rank).collect();
    // One process failed and none other did: it is the first, whatever it died of.
    let only = match failed.as_slice() {
        [r] => r.known(),
        _ => None,
    };
    // Reported dead with neither an exit code nor a signal (`Worker proc VllmWorker-1 died
    // unexpectedly`) and no line of its own: it vanished, as a process killed with SIGKILL does.
    let vanished = evidence.ends.iter().filter(|e| !e.succeeded()).all(|e| e.cause() == coroner_model::ProcessEndCause::Unknown);
    let who = match failed.as_slice() {
        [one] => format!("rank {one}"),
        many => format!("ranks {}", crate::hang::join(many)),
    };
    let (class, summary) = if vanished {
        (
            FaultClass::Killed,
            format!("{who} died without a word: no line says why, and how it ended is not reported (a process killed with SIGKILL leaves no trace)"),
        )
    } else {
        (FaultClass::PythonException, format!("{who} failed, but no line says why and the order is unknown"))
    };
    FirstFailure {
        rank: only,
        class,
        time: None,
        host: None,
        confidence: 0.1,
        summary,
        rule: None,
        evidence: Vec::new(),
        candidates: if only.is_some() { Vec::new() } else { failed },
    }
}

/// One note per process of unknown rank: where its lines came from and what it did.
fn unknown_processes(evidence: &JobEvidence, job: &ClassifiedJob<'_>, culprit: Option<Rank>) -> Vec<String> {
    evidence
        .ranks
        .iter()
        .filter(|(r, _)| r.is_unknown())
        .map(|(rank, ev)| {
            let source = evidence.unknown_sources.get(rank).map(String::as_str).unwrap_or("a log");
            let role = if Some(*rank) == culprit {
                "failed first"
            } else if job.with_role(*rank, Role::Root).next().is_some() {
                "failed"
            } else if job.with_role(*rank, Role::Symptom).next().is_some() {
                "a victim"
            } else {
                "no failure of its own"
            };
            format!("a process of unknown rank ({source}, {} lines): {role}", ev.lines)
        })
        .collect()
}

fn evidence_line(clock: &ClockModel, e: &Event) -> EvidenceLine {
    // A hardware line from a snapshot may carry no time at all (a dmesg line stamped with uptime).
    let undated = e.line.stream == Stream::File && e.printed_ns.is_none() && e.capture_ns == 0;
    EvidenceLine {
        rank: e.rank,
        time: if undated { "undated".to_string() } else { format_rfc3339_ns(clock.aligned(e.rank, e.capture_ns)) },
        stream: e.line.stream.as_str().to_string(),
        line: e.text.clone(),
    }
}

fn host_of(evidence: &JobEvidence, rank: Rank) -> Option<String> {
    let ev = evidence.ranks.get(&rank)?;
    ev.host.clone().or_else(|| {
        ev.events.iter().find_map(|e| match &e.kind {
            EventKind::NcclInit { host, .. } => Some(host.clone()),
            _ => None,
        })
    })
}

fn rank_summaries(evidence: &JobEvidence, job: &ClassifiedJob<'_>, rules: &RuleSet, clock: &ClockModel, culprit: Option<Rank>) -> Vec<RankSummary> {
    evidence
        .all_ranks()
        .into_iter()
        .filter(|r| !r.is_unknown())
        .map(|rank| {
            let ev = evidence.ranks.get(&rank);
            let last_step = ev.and_then(|ev| ev.max_step());
            let role = if Some(rank) == culprit {
                "culprit"
            } else if job.with_role(rank, Role::Root).next().is_some() {
                "failed"
            } else if job.with_role(rank, Role::Symptom).next().is_some() || evidence.end_of(rank).is_some_and(|e| rules.classify_end(e).role == Role::Symptom)
            {
                "victim"
            } else if evidence.end_of(rank).is_some_and(|e| e.succeeded()) {
                "ok"
            } else {
                "unknown"
            };
            let est = clock.estimate(rank);
            RankSummary {
                rank,
                host: host_of(evidence, rank),
                ended: evidence.end_of(rank).map(|e| e.cause().describe()),
                last_step,
                lines: ev.map(|e| e.lines).unwrap_or(0),
                role: role.to_string(),
                gpu_memory: gpu_memory::summary(evidence, clock, rank),
                clock: ClockEstimate { uncertainty_ns: if est.uncertainty_ns >= UNKNOWN_UNCERTAINTY_NS { -1 } else { est.uncertainty_ns }, ..est },
            }
        })
        .collect()
}
