//! The decision: the verdict, and which rank failed first and how.

use crate::classified::ClassifiedJob;
use crate::clock::ClockModel;
use crate::diagnosis::{Diagnosis, FirstFinding};
use crate::evidence::JobEvidence;
use crate::findings::{root_findings, Finding};
use crate::progress::Progress;
use crate::rules::RuleSet;
use crate::{cancel, hang, hardware, launcher_stop, majority, mismatch, partial, stall};
use coroner_model::{FaultClass, Nanos, Rank, Verdict};

/// Among ends nothing dates, the order their launcher reported them in: a row it marks as the
/// first observed failure (torchrun's root cause, Open MPI's `The first process to do so was`)
/// first, then by the report's line (srun lists its tasks' ends as it sees them).
fn report_order(f: &Finding<'_>) -> (bool, u64) {
    match f.events.first().map(|e| (&e.kind, e.line.seq)) {
        Some((coroner_model::EventKind::LauncherWorkerFailed(l), seq)) if f.undated => (!l.root_cause_row, seq),
        _ => (true, u64::MAX),
    }
}

/// Roots below this confidence count only when no stronger root exists anywhere in the job.
const STRONG: f64 = 0.5;

pub fn diagnose<'a>(
    evidence: &'a JobEvidence,
    job: &ClassifiedJob<'a>,
    rules: &'a RuleSet,
    clock: &ClockModel,
    progress: &Progress,
    flight: Option<&coroner_model::FlightRecorderReport>,
) -> Diagnosis<'a> {
    let mut findings = root_findings(evidence, job, rules, clock);
    hardware::merge(evidence, rules, clock, &mut findings);
    findings.sort_by_key(|f| (f.undated, f.aligned_ns, report_order(f), f.rank));

    let stop = cancel::find(evidence, job, clock);
    if let Some(c) = stop.as_ref().filter(|c| !cancel::failed_before(evidence, rules, job, clock, c)) {
        let advice = rules.get(c.rule).and_then(|r| r.advice.clone());
        let line = c.events.first().map(|e| format!(": {}", first_line(&e.kind.message()).unwrap_or_else(|| e.text.clone()))).unwrap_or_default();
        return Diagnosis {
            verdict: Verdict::Failed,
            first: Some(FirstFinding {
                rank: None,
                candidates: Vec::new(),
                class: FaultClass::Killed,
                confidence: if c.events.is_empty() { 0.6 } else { 0.85 },
                aligned_ns: c.at,
                summary: format!("no rank failed: the job was stopped from outside by {}{line}", c.who),
                rule_id: Some(cancel::STOPPED_FROM_OUTSIDE.to_string()),
                advice,
                events: c.events.clone(),
                ordering_note: None,
            }),
            other_roots: Vec::new(),
        };
    }

    if let Some(m) = mismatch::find(job) {
        let advice = rules.get("collective-mismatch").and_then(|r| r.advice.clone());
        let summary = match m.rank {
            Some(r) => format!("rank {r} issued a collective the other ranks did not: {}", m.reason),
            None => format!("ranks {} issued mismatched collectives; {}", hang::join(&m.candidates), m.reason),
        };
        let aligned = m.events.first().map(|e| clock.aligned(e.rank, e.capture_ns));
        let others = findings.into_iter().filter(|f| f.class != FaultClass::CollectiveMismatch).collect();
        return Diagnosis {
            verdict: Verdict::Failed,
            first: Some(FirstFinding {
                rank: m.rank,
                candidates: m.candidates,
                class: FaultClass::CollectiveMismatch,
                confidence: m.confidence,
                aligned_ns: aligned,
                summary,
                rule_id: Some("collective-mismatch".to_string()),
                advice,
                events: m.events,
                ordering_note: None,
            }),
            other_roots: others,
        };
    }

    let strong: Vec<&Finding<'_>> = findings.iter().filter(|f| f.confidence >= STRONG).collect();
    // Every rank timed out and one issued another collective: that outweighs a weak root (an
    // error line, a traceback cut before its exception), which the timeouts themselves explain.
    if strong.is_empty() {
        // The dumps name who diverged: that beats the odd one out among timeouts and the rank
        // with the lowest enqueued collective.
        if let Some(d) = crate::flight::diagnosis(flight, evidence, job, rules, clock) {
            return d;
        }
        // A stall report that names who held the others up (a desync report, a monitored
        // barrier) says more than an error line the timeouts themselves explain.
        if let Some(s) = stall::find(job, evidence.world_size).filter(|s| !s.candidates.is_empty()) {
            return from_stall(s, rules, clock);
        }
        if let Some(m) = majority::find(job) {
            return from_majority(m, rules, clock);
        }
    }
    let pool: Vec<&Finding<'_>> = if strong.is_empty() { findings.iter().collect() } else { strong };
    if let Some(first) = pool.first() {
        let mut confidence = first.confidence;
        let mut note = None;
        let mut chosen = *first;
        // A kill that a log of no rank reports (Slurm's `Detected 1 oom-kill event(s) in StepId=...`,
        // the step's cgroup speaking) is the kill the launcher pins on one rank (`srun: error: node:
        // task 0: Out Of Memory`), which has no time of its own: that rank, at the log's time.
        let named_kill = if first.rank.is_unknown() && first.class == FaultClass::Killed { the_one_undated_kill(&pool) } else { None };
        let merged;
        if let Some(victim) = named_kill {
            merged = Finding { rank: victim.rank, rule: victim.rule.or(first.rule), ..(*first).clone() };
            chosen = &merged;
        }
        if let Some(second) = pool.get(1).filter(|s| !s.undated || first.undated) {
            if !clock.surely_before(Some(first.rank), first.aligned_ns, Some(second.rank), second.aligned_ns) {
                // Too close to order by time: prefer the one that is not itself downstream of a
                // symptom, then the more specific rule.
                let first_had_symptom = symptom_before(job, first.rank, first.aligned_ns);
                let second_had_symptom = symptom_before(job, second.rank, second.aligned_ns);
                if first_had_symptom && !second_had_symptom {
                    chosen = *second;
                }
                confidence *= 0.7;
                note = Some(format!("ranks {} and {} failed within the clocks' uncertainty; the order is not known from time alone", first.rank, second.rank));
            }
        }
        let merged_from = named_kill.map(|_| first.rank);
        let others = findings.iter().filter(|f| f.rank != chosen.rank && Some(f.rank) != merged_from).cloned().collect();
        return Diagnosis { verdict: Verdict::Failed, first: Some(first_from(chosen, confidence, note)), other_roots: others };
    }

    if let Some(s) = stall::find(job, evidence.world_size) {
        return from_stall(s, rules, clock);
    }

    if let Some(h) = hang::find(evidence, job, progress) {
        let advice = rules.get("hang").and_then(|r| r.advice.clone()).or_else(|| Some(HANG_ADVICE.to_string()));
        // A hang has no moment of failure; the best is when the rank last made progress.
        let aligned = h.rank.and_then(|r| {
            let ev = evidence.ranks.get(&r)?;
            ev.last_step.as_ref().map(|e| e.capture_ns).or(ev.last_capture_ns).map(|t| clock.aligned(Some(r), t))
        });
        return Diagnosis {
            verdict: Verdict::Failed,
            first: Some(FirstFinding {
                rank: h.rank,
                candidates: h.candidates,
                class: FaultClass::Hang,
                confidence: h.confidence,
                aligned_ns: aligned,
                summary: h.summary,
                rule_id: Some("hang".to_string()),
                advice,
                events: h.events,
                ordering_note: None,
            }),
            other_roots: Vec::new(),
        };
    }

    if let Some((e, v)) = hardware::unattributed(evidence, rules).into_iter().next() {
        let what = v.rule.and_then(|r| r.summary.clone()).unwrap_or_else(|| v.class().map(|c| c.to_string()).unwrap_or_default());
        let detail = first_line(&e.kind.message()).unwrap_or_else(|| e.text.clone());
        return Diagnosis {
            verdict: Verdict::Failed,
            first: Some(FirstFinding {
                rank: None,
                candidates: Vec::new(),
                class: v.class().unwrap_or(FaultClass::GpuHardware),
                confidence: v.confidence() * 0.8,
                aligned_ns: e.printed_ns,
                summary: format!("{what} - {detail} (no line of the job's own logs names the process or GPU, so its rank is unknown)"),
                rule_id: v.rule.map(|r| r.id.clone()),
                advice: v.rule.and_then(|r| r.advice.clone()),
                events: vec![e],
                ordering_note: None,
            }),
            other_roots: Vec::new(),
        };
    }

    if let Some(p) = partial::find(evidence, job, progress) {
        let rule = match p.class {
            FaultClass::Hang => "hang",
            _ => "nccl-error",
        };
        let advice = rules.get(rule).and_then(|r| r.advice.clone()).or_else(|| Some(HANG_ADVICE.to_string()));
        let aligned = p.events.first().map(|e| clock.aligned(e.rank, e.capture_ns));
        return Diagnosis {
            verdict: Verdict::Failed,
            first: Some(FirstFinding {
                rank: p.named,
                candidates: p.candidates,
                class: p.class,
                confidence: p.confidence,
                aligned_ns: aligned,
                summary: p.summary,
                rule_id: Some(rule.to_string()),
                advice,
                events: p.events,
                ordering_note: None,
            }),
            other_roots: Vec::new(),
        };
    }

    if let Some(s) = launcher_stop::find(evidence, rules) {
        let aligned = s.events.first().map(|e| clock.aligned(e.rank, e.capture_ns));
        return Diagnosis {
            verdict: Verdict::Failed,
            first: Some(FirstFinding {
                rank: None,
                candidates: s.candidates,
                class: s.class,
                confidence: 0.3,
                aligned_ns: aligned,
                summary: s.summary,
                rule_id: None,
                advice: Some(LAUNCHER_STOP_ADVICE.to_string()),
                events: s.events,
                ordering_note: None,
            }),
            other_roots: Vec::new(),
        };
    }

    Diagnosis { verdict: verdict_without_failure(evidence), first: None, other_roots: Vec::new() }
}

const LAUNCHER_STOP_ADVICE: &str = "The failed worker's own lines are not in these logs: collect every rank's output (torchrun --tee 3 or --log-dir, mpirun --tag-output, one file per rank) and analyze them together; the first error there is the cause.";

/// The ranks a stall report says held the others up (`stall.rs`).
fn from_stall<'a>(s: stall::StallFinding<'a>, rules: &'a RuleSet, clock: &ClockModel) -> Diagnosis<'a> {
    let rule = if s.class == FaultClass::Hang { "hang" } else { "collective-mismatch" };
    let advice = rules.get(rule).and_then(|r| r.advice.clone()).or_else(|| Some(HANG_ADVICE.to_string()));
    let aligned = s.events.first().map(|e| clock.aligned(e.rank, e.capture_ns));
    Diagnosis {
        verdict: Verdict::Failed,
        first: Some(FirstFinding {
            rank: s.rank,
            candidates: s.candidates,
            class: s.class,
            confidence: s.confidence,
            aligned_ns: aligned,
            summary: s.summary,
            rule_id: Some(rule.to_string()),
            advice,
            events: s.events,
            ordering_note: None,
        }),
        other_roots: Vec::new(),
    }
}

/// The ranks whose collective differs from the majority at the same point (`majority.rs`).
fn from_majority<'a>(m: majority::MajorityFinding<'a>, rules: &'a RuleSet, clock: &ClockModel) -> Diagnosis<'a> {
    let advice = rules.get("collective-mismatch").and_then(|r| r.advice.clone());
    let aligned = m.events.first().map(|e| clock.aligned(e.rank, e.capture_ns));
    Diagnosis {
        verdict: Verdict::Failed,
        first: Some(FirstFinding {
            rank: m.rank,
            candidates: m.candidates,
            class: FaultClass::CollectiveMismatch,
            confidence: m.confidence,
            aligned_ns: aligned,
            summary: m.summary,
            rule_id: Some("collective-mismatch".to_string()),
            advice,
            events: m.events,
            ordering_note: None,
        }),
        other_roots: Vec::new(),
    }
}

const HANG_ADVICE: &str = "Look at the stuck rank's stack dump (snapshots, or py-spy dump --pid) to see where it waits: data loading, a rank-dependent branch that skips a collective, a deadlock, or a GPU that stopped. Drain its node if its GPU or NIC shows errors.";

fn symptom_before(job: &ClassifiedJob<'_>, rank: Rank, at: Nanos) -> bool {
    job.first_symptom(rank).is_some_and(|s| s.aligned_ns < at)
}

fn first_from<'a>(f: &Finding<'a>, confidence: f64, ordering_note: Option<String>) -> FirstFinding<'a> {
    let what = f.rule.and_then(|r| r.summary.clone()).unwrap_or_else(|| f.class.to_string());
    let detail = match (f.events.first(), &f.from_end) {
        (Some(e), _) => first_line(&e.kind.message()).unwrap_or_else(|| e.text.clone()),
        (None, Some(end)) => format!("the process {end}"),
        (None, None) => String::new(),
    };
    FirstFinding {
        rank: Some(f.rank),
        candidates: vec![f.rank],
        class: f.class,
        confidence,
        aligned_ns: (!f.undated).then_some(f.aligned_ns),
        summary: if detail.is_empty() { format!("rank {} {what}", f.rank) } else { format!("rank {}: {what} - {detail}", f.rank) },
        rule_id: f.rule.map(|r| r.id.clone()),
        advice: f.rule.and_then(|r| r.advice.clone()),
        events: f.events.clone(),
        ordering_note,
    }
}

/// The one rank whose end alone says it was killed (no lines of its own, no time), if exactly one.
fn the_one_undated_kill<'b, 'a>(pool: &[&'b Finding<'a>]) -> Option<&'b Finding<'a>> {
    let mut kills = pool.iter().filter(|f| !f.rank.is_unknown() && f.class == FaultClass::Killed && f.undated && f.from_end.is_some());
    let one = kills.next()?;
    kills.next().is_none().then_some(*one)
}

fn first_line(s: &str) -> Option<String> {
    let line = s.lines().next()?.trim();
    if line.is_empty() {
        return None;
    }
    const MAX: usize = 240;
    Some(if line.len() > MAX {
        let cut = (0..=MAX).rev().find(|i| line.is_char_boundary(*i)).unwrap_or(0);
        format!("{}...", &line[..cut])
    } else {
        line.to_string()
    })
}

/// No failure found: success if every rank is known to have exited 0.
fn verdict_without_failure(evidence: &JobEvidence) -> Verdict {
    let ranks = evidence.all_ranks();
    let all_ok = !ranks.is_empty() && ranks.iter().all(|r| evidence.end_of(*r).is_some_and(|e| e.succeeded()));
    if all_ok {
        Verdict::Succeeded
    } else if evidence.ends.iter().any(|e| !e.succeeded()) {
        Verdict::Failed
    } else if evidence.finished && evidence.plain_logs && evidence.ends.is_empty() {
        // Plain logs never record how their processes ended: lines that report no failure are
        // the whole evidence, and they say the job ran (the report notes what is not known).
        Verdict::Succeeded
    } else if evidence.finished {
        Verdict::Unknown
    } else {
        Verdict::Running
    }
}
